"""Share-group lag through time: the `share_group_lag_history` rows.

Kafka's formula (KIP-1226, as `sharestate.analytics.lag` applies it now) at every moment
of the state history: `lag = end - SPSO - deliveryCompleteCount`, the state being the one
after the state record and the end offset the data partition's at the record's timestamp
(`Timeline.at`, from `topic_end_offsets`), or what the state itself implies (the offset
after its last in-flight record, or the SPSO) when that is higher: records appended in the
state record's own millisecond, which the end offset at that time leaves out. Where no row
of that table gives the end offset at that time, the end offset is a lower bound: the
highest of the end offset last known before it and the state's, and so is the lag
(`lag_is_lower_bound`).

Two scopes of rows, per share group in time order:
- `share_partition`: one per state record of the history (the state after it), with the
  share-partition's lag then; a tombstone's row, or one with SPSO -1, has no lag.
- `group`: the group's lag at each moment one of its inputs changed: a state record of the
  group, or a sampled end offset of a partition the group consumes (so a group that makes
  no progress is seen falling behind). It sums the lag of the group's share-partitions that
  have state then (SPSO at least 0), each at its latest state; it is exact when each of them
  is, a lower bound when any is.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sharestate.analytics.end_offsets import STATE, UNKNOWN, Estimate, Timeline, Where

SHARE_PARTITION: Final = "share_partition"
GROUP: Final = "group"

HISTORY_INPUT: Final = """
    SELECT group_id, topic_id, partition, state_partition, record_offset, timestamp AS time,
           deleted, start_offset,
           CASE WHEN delivery_complete_count >= 0 THEN delivery_complete_count ELSE
             aggregate(filter(state_batches, b -> b.last_offset >= start_offset
                                                  AND b.last_offset >= b.first_offset
                                                  AND b.delivery_state IN (2, 4)),
                       0L, (acc, b) -> acc + b.last_offset
                                       - greatest(b.first_offset, start_offset) + 1)
           END AS complete,
           greatest(coalesce(array_max(transform(
                      filter(state_batches, b -> b.last_offset >= start_offset
                                                 AND b.last_offset >= b.first_offset),
                      b -> b.last_offset)) + 1, start_offset), start_offset) AS state_end
    FROM share_partition_state_history WHERE timestamp IS NOT NULL"""
"""The history rows the lag needs, with the state's part of Kafka's formula computed where
the batches are (the SQL twin of `share_lag`'s counting; a test holds them equal):
`complete` is Kafka's deliveryCompleteCount, or the acknowledged and archived records at or
above the SPSO when it is unknown; `state_end` the state's own lower bound of the end
offset. Ordered per group by time (`INPUT_ORDER`)."""
INPUT_ORDER: Final = ("group_id", "time", "state_partition", "record_offset")


@dataclass(frozen=True, slots=True)
class StateLag:
    """A share-partition's lag at a time: its state's figures and the end offset taken."""

    end_offset: int | None
    estimate: Estimate
    source: str
    lag: int | None

    @property
    def exact(self) -> bool:
        return self.estimate.exact

    @property
    def lower_bound(self) -> bool:
        return self.estimate.lower_bound


def state_lag(start_offset: int | None, complete: int | None, state_end: int | None,
              estimate: Estimate) -> StateLag:
    """The lag of a state (SPSO, the count subtracted, the state's own end bound) against
    an end offset estimate; no lag without a state or with SPSO -1. The end offset is never
    below the state's own bound: records the state holds were appended before it, also
    those stamped in the state record's own millisecond, which the end offset at that time
    (the first offset stamped at or after it) leaves out."""
    end, source = estimate.end_offset, estimate.source
    if state_end is not None and (end is None or state_end > end):
        end = state_end
        if estimate.lower_bound:
            source = STATE
    lag = None
    if start_offset is not None and start_offset >= 0 and end is not None:
        lag = end - start_offset - (complete or 0)
    return StateLag(end, estimate, source, lag)


@dataclass
class _Member:
    """One share-partition of a group while its rows are walked."""

    where: Where
    timeline: Timeline | None
    state: tuple[int | None, int | None, int | None] | None = None
    """(SPSO, complete, state end) of its latest state; None: no state (yet, or deleted)."""
    last_offset: tuple[int, int] = (-1, -1)
    lag: StateLag | None = None

    def evaluate(self, t: int) -> StateLag | None:
        if self.state is None:
            return None
        estimate = self.timeline.at(t) if self.timeline is not None else UNKNOWN
        return state_lag(*self.state, estimate)


def _share_partition_row(row: Mapping[str, Any], topic: str | None,
                         lag: StateLag | None) -> dict[str, Any]:
    return {"scope": SHARE_PARTITION, "group_id": row["group_id"], "time": row["time"],
            "topic_id": row["topic_id"], "topic": topic, "partition": row["partition"],
            "state_partition": row["state_partition"], "record_offset": row["record_offset"],
            "start_offset": None if row["deleted"] else row["start_offset"],
            "delivery_complete_count": None if row["deleted"] else row["complete"],
            "end_offset": lag.end_offset if lag else None,
            "end_offset_time": lag.estimate.time if lag and lag.source != STATE else None,
            "end_offset_source": lag.source if lag else None,
            "exact": bool(lag and lag.lag is not None and lag.exact),
            "lag_is_lower_bound": bool(lag is None or lag.lower_bound),
            "lag": lag.lag if lag else None, "partitions": 1}


def _group_row(group: str, t: int, members: Iterable[_Member]) -> dict[str, Any]:
    lags = [m.lag for m in members if m.lag is not None and m.lag.lag is not None]
    return {"scope": GROUP, "group_id": group, "time": t, "topic_id": None, "topic": None,
            "partition": None, "state_partition": None, "record_offset": None,
            "start_offset": None, "delivery_complete_count": None, "end_offset": None,
            "end_offset_time": None, "end_offset_source": None,
            "exact": bool(lags) and all(lag.exact for lag in lags),
            "lag_is_lower_bound": not lags or any(lag.lower_bound for lag in lags),
            "lag": sum(lag.lag for lag in lags if lag.lag is not None) if lags else None,
            "partitions": len(lags)}


def _group_rows(group: str, rows: Iterator[Mapping[str, Any]],
                timelines: Mapping[Where, Timeline], names: Mapping[str, str]
                ) -> Iterator[dict[str, Any]]:
    """One group's rows (its history rows in `INPUT_ORDER`), read as they come."""
    members: dict[Where, _Member] = {}
    samples: list[tuple[int, Where]] = []  # (time, partition): sampled end offsets to come
    at_sample: set[Where] = set()  # evaluated at a row's own time: look again later
    row = next(rows, None)
    while row is not None or samples:
        t = min([*([row["time"]] if row is not None else []),
                 *([samples[0][0]] if samples else [])])
        dirty = set(at_sample)
        at_sample.clear()
        while samples and samples[0][0] == t:
            dirty.add(heapq.heappop(samples)[1])
        while row is not None and row["time"] == t:
            where = (row["topic_id"], row["partition"])
            member = members.get(where)
            if member is None:
                member = members[where] = _Member(where, timelines.get(where))
                if member.timeline is not None:
                    for time in member.timeline.sample_times:
                        if time > t:
                            heapq.heappush(samples, (time, where))
            order = (row["state_partition"], row["record_offset"])
            if order >= member.last_offset:  # a clock stepping back never undoes a state
                member.last_offset = order
                member.state = None if row["deleted"] else (
                    row["start_offset"], row["complete"], row["state_end"])
            dirty.add(where)
            own = member.timeline.at(t) if member.timeline is not None else UNKNOWN
            lag = None if row["deleted"] else state_lag(
                row["start_offset"], row["complete"], row["state_end"], own)
            yield _share_partition_row(row, names.get(row["topic_id"]), lag)
            row = next(rows, None)
        for where in dirty:
            member = members[where]
            member.lag = member.evaluate(t)
            if member.lag is not None and member.lag.estimate.time == t:
                at_sample.add(where)
        yield _group_row(group, t, members.values())


def lag_history_rows(rows: Iterable[Mapping[str, Any]], timelines: Mapping[Where, Timeline],
                     names: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """`share_group_lag_history` rows from history rows shaped as `HISTORY_INPUT` yields,
    each group's rows together and in `INPUT_ORDER`; `names` maps topic ids to names."""
    for group, group_rows in itertools.groupby(rows, key=lambda r: r["group_id"]):
        yield from _group_rows(group, group_rows, timelines, names or {})
