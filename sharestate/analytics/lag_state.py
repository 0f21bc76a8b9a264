"""The `lag_state` table: each share group's lag-history walk where a run left it, so the
next run walks on over the history rows added since and appends what it finds.

A run saves the walks before its horizon: the earliest of the state partitions' latest
record times, as a record any of them gets later comes at or after it (a partition's clock
goes forward). Its rows from the horizon on are provisional: the next run rewrites them.
That run goes on from the saved walks only when nothing before the horizon has changed:
the rows were made by this code in this format, the files added to or removed from the
history since hold no row before it (`history_allows`), no end offset a kept row looked at
changed (`ends_allow`), and every topic the groups walked has the name it had
(`names_allow`). Otherwise it walks every group from the history's start and replaces the
table.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sharestate import native
from sharestate.analytics.end_offsets import Estimate
from sharestate.analytics.lag_history import GroupState, MemberState, StateLag

FORMAT = 1
"""The format of a `lag_state` row."""
CODE = ("end_offsets.py", "lag_history.py", "lag_state.py", "lag_walk.py")
"""The modules (of `sharestate.analytics`) whose code makes the lag history's rows."""


@cache
def code_fingerprint() -> str:
    """SHA-256 over the modules of `CODE`, the two tables' schemas and the C sources the
    walk runs (`sharestate.native.sources`)."""
    digest = hashlib.sha256(native.sources().encode())
    for name in CODE:
        digest.update(name.encode() + b"\0" + (Path(__file__).parent / name).read_bytes())
    tables = resources.files("sharestate.schemas").joinpath("tables")
    for name in ("lag_state", "share_group_lag_history"):
        digest.update(tables.joinpath(f"{name}.json").read_bytes())
    return digest.hexdigest()


def state_row(state: GroupState, names: Mapping[str, str], run_id: str,
              history_version: int, horizon: int | None = None) -> dict[str, Any]:
    """The `lag_state` row of a group's walk (saved before `horizon`)."""
    return {"group_id": state.group_id, "time": state.time, "horizon": horizon,
            "members": [_member_row(m, names.get(m.topic_id)) for m in state.members],
            "run_id": run_id, "format": FORMAT, "code": code_fingerprint(),
            "history_version": history_version}


def _member_row(member: MemberState, topic: str | None) -> dict[str, Any]:
    spso, complete, end = member.state or (None, None, None)
    lag = member.lag
    estimate = lag.estimate if lag is not None else Estimate(None, None, "", False, False)
    return {"topic_id": member.topic_id, "partition": member.partition, "topic": topic,
            "has_state": member.state is not None, "start_offset": spso,
            "complete": complete, "state_end": end,
            "last_state_partition": member.last_offset[0],
            "last_record_offset": member.last_offset[1], "has_lag": lag is not None,
            "lag": None if lag is None else lag.lag,
            "lag_end_offset": None if lag is None else lag.end_offset,
            "lag_source": None if lag is None else lag.source,
            "estimate_end_offset": estimate.end_offset, "estimate_time": estimate.time,
            "estimate_source": estimate.source, "estimate_exact": estimate.exact,
            "estimate_lower_bound": estimate.lower_bound, "at_sample": member.at_sample}


def group_state(row: Mapping[str, Any]) -> GroupState:
    """The walk a `lag_state` row holds."""
    return GroupState(row["group_id"], row["time"], tuple(
        MemberState(m["topic_id"], m["partition"],
                    (m["start_offset"], m["complete"], m["state_end"]) if m["has_state"]
                    else None,
                    (m["last_state_partition"], m["last_record_offset"]),
                    StateLag(m["lag_end_offset"], Estimate(
                        m["estimate_end_offset"], m["estimate_time"], m["estimate_source"],
                        m["estimate_exact"], m["estimate_lower_bound"]),
                        m["lag_source"], m["lag"]) if m["has_lag"] else None,
                    m["at_sample"])
        for m in row["members"]))


@dataclass(frozen=True)
class Resume:
    """Where a run goes on from: the groups' walks, the last moment their kept rows cover
    (before the horizon they were saved at), the history version they walked."""

    states: tuple[Mapping[str, Any], ...]
    since: int
    history_version: int


def resume_point(rows: Sequence[Mapping[str, Any]], names: Mapping[str, str]
                 ) -> Resume | None:
    """The walks a run may go on from (None: walk from the start): rows of this code and
    format, saved before one horizon of one history version, with the topic names they were
    written with."""
    if not rows:
        return None
    versions = {row["history_version"] for row in rows}
    horizons = {row["horizon"] for row in rows}
    if (len(versions) != 1 or len(horizons) != 1 or None in horizons
            or any(row["format"] != FORMAT or row["code"] != code_fingerprint()
                   for row in rows)
            or not names_allow(rows, names)):
        return None
    return Resume(tuple(rows), horizons.pop() - 1, versions.pop())


def names_allow(rows: Iterable[Mapping[str, Any]], names: Mapping[str, str]) -> bool:
    """Whether every topic the walks met still has the name its rows were written with."""
    return all(names.get(m["topic_id"]) == m["topic"] for row in rows for m in row["members"])


def history_allows(changed_min_times: Iterable[int | None], since: int) -> bool:
    """Whether the history changed only after `since`: every row of the files added or
    removed (their `timestamp` minimums; None: no row with a time) after it."""
    return all(t is None or t > since for t in changed_min_times)


def ends_allow(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]],
               since: int, ids: Mapping[str, str]) -> bool:
    """Whether `topic_end_offsets` changed (`old` -> `new`) only where no lag at or before
    `since` looked: each row added or removed is after it, and so is the row before it of
    its partition (an end offset equal to the next one's holds up to it: a row changes what
    the times since the row before it see). `ids` maps names to topic ids."""
    def key(row: Mapping[str, Any]) -> tuple[str | None, int]:
        return (row["topic_id"] or ids.get(row["topic"] or ""), int(row["partition"]))

    def point(row: Mapping[str, Any]) -> tuple[Any, ...]:
        return (*key(row), row["time"], row["end_offset"], row["source"], row["exact"])

    before = {point(r): r for r in old}
    after = {point(r): r for r in new}
    changed = [r for p, r in {**before, **after}.items() if (p in before) != (p in after)]
    if not changed:
        return True
    times: dict[tuple[str | None, int], list[int]] = {}
    for row in [*before.values(), *after.values()]:
        times.setdefault(key(row), []).append(int(row["time"]))
    for listed in times.values():
        listed.sort()
    for row in changed:
        t = int(row["time"])
        listed = times[key(row)]
        below = bisect_left(listed, t)  # the rows of its partition before it
        if t <= since or (below and listed[below - 1] < since):
            return False
    return True
