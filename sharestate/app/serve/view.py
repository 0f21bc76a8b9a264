"""What the service answers: an immutable view of every partition's replay, published whole
by the writer, and the functions every answer is computed with.

The tailer (the service's one writer) applies records and, after a chunk or at a bounded
rate, makes a `View` and swaps it in with one reference assignment. A reader takes the
current view once and computes its whole answer from it: `/v1/*` in the shapes of the
offline commands (`sharestate state`, `offsets`) and of the Delta tables (lag, redelivery,
prune recommendations), `/metrics` (`sharestate.app.serve.metrics`) and the probes all go
through the functions below, so no two of them can disagree about one view, and no reader
ever touches what the writer changes. A partition's view is made again only when its
partition changed: a share partition's is a copy of its shard (the states are immutable
tuples: copying the maps suffices) with the prune recommendation worked out at the time, a
group partition's its offset rows and topic names by group, made again for the groups its
new records touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from sharestate.analytics.context import StateContext, live_states
from sharestate.analytics.lag import LIVE, EndOffsets, lag_rows, topic_names
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.app.serve.partition import PartitionReplay, Progress
from sharestate.coordinator.share_state import ShareKey, SharePartitionState
from sharestate.log import LogFinding
from sharestate.records.segment import finding_json
from sharestate.replay.prune import PruneLedger, prune_recommendation
from sharestate.replay.rows import group_offset_rows, state_rows
from sharestate.replay.share_log import ShareLogResult

Where = tuple[str, int]
Row = Mapping[str, Any]


class Fetched(NamedTuple):
    """What the consumer last heard of a partition: when its leader last answered it
    (epoch seconds: a fetch returns at least every `fetch.wait.max.ms`, 0.5 s, on a quiet
    log) and the partition's end then (the offset a read can reach: the high watermark, or
    the last stable offset with read_committed)."""

    at: float
    end: int


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as the writer last published it."""

    topic: str
    partition: int
    progress: Progress
    start_end: int | None
    """The partition's end when the service started (None: it appeared later)."""
    failure: str | None
    findings: tuple[LogFinding, ...] = ()
    """The findings the partition lists (up to `--max-findings`): the same tuple from view
    to view while they stay the same, never copied into a view again."""
    omitted: tuple[LogFinding, ...] = ()
    """One `omitted_findings` finding per kind counted past those listed."""
    omitted_count: int = 0
    """How many findings were counted, not listed."""
    share: ShareLogResult | None = None
    """A copy of the replay's state (its prune ledger and the log's findings left out: see
    `prune` and `findings`; its shard's findings, up to `--max-findings` with the log's,
    kept)."""
    prune: Row | None = None
    offsets: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)
    """`__consumer_offsets`: each group's committed offsets as `sharestate offsets` rows."""
    names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """`__consumer_offsets`: each share group's topic ids -> names."""

    def listed(self) -> list[LogFinding]:
        """The findings listed one by one: the log's, then the share shard's replay's
        (under their code, at no position and with no bytes)."""
        name = f"{self.topic}-{self.partition}"
        return [*self.findings, *(f.listed(name)
                                  for f in (self.share.shard.findings if self.share else ()))]

    @property
    def behind(self) -> int:
        """Offsets between what was applied and the end seen at start (0 for a partition
        that appeared later, or that reached an end since: a log that went back counts once
        it reached the new log's end)."""
        if self.start_end is None or self.progress.at_end:
            return 0
        return max(self.start_end - self.progress.position, 0)


class Readiness(NamedTuple):
    """Applied every record up to the end offsets seen at start?"""

    ready: bool
    behind: int
    partitions: int

    def json(self) -> dict[str, Any]:
        return {"ready": self.ready, "records_behind_start_end": self.behind,
                "partitions": self.partitions}


@dataclass(frozen=True)
class View:
    """Every partition as the writer last published it, with what its consumer last heard
    and why the reader failed, if it did."""

    partitions: Mapping[Where, PartitionView] = field(default_factory=dict)
    fetched: Mapping[Where, Fetched] = field(default_factory=dict)
    reader_failure: str | None = None

    def readiness(self) -> Readiness:
        behind = sum(view.behind for view in self.partitions.values())
        # a failed replay is never ready: it may have reached an end before the record it
        # failed on arrived
        return Readiness(behind == 0 and self.failure() is None, behind, len(self.partitions))

    def failure(self) -> str | None:
        """Why the service cannot go on, if it cannot: a partition's replay failed, or the
        cluster reader did."""
        for view in self.partitions.values():
            if view.failure is not None:
                return view.failure
        if self.reader_failure is not None:
            return f"the cluster reader failed ({self.reader_failure})"
        return None

    def shares(self) -> Iterator[ShareLogResult]:
        for view in self.partitions.values():
            if view.share is not None:
                yield view.share

    def names(self) -> dict[str, str]:
        """Topic id -> name from the share groups' metadata."""
        return {topic_id: name for view in self.partitions.values()
                for names in view.names.values() for topic_id, name in names.items()}


def partition_view(replay: PartitionReplay, before: PartitionView | None,
                   retention_minutes: int) -> PartitionView:
    """The view of `replay` now (`before`: its last view, whose unchanged parts are kept)."""
    touched = replay.take_touched()
    share = group = None
    findings: tuple[LogFinding, ...] = ()
    if replay.share is not None:
        result = replay.share.result
        findings = _findings(result.findings, before)
        share = replace(result, shard=result.shard.copy(), findings=[], ledger=PruneLedger())
        prune = prune_recommendation(result)
    elif replay.group is not None:
        group = replay.group.result
        findings = _findings(group.findings, before)
    offsets: dict[str, tuple[Row, ...]] = {}
    names: dict[str, Mapping[str, str]] = {}
    if group is not None:
        coordinator = group.coordinator
        if touched is None or before is None:
            changed = {key[0] for key, _ in coordinator.offsets.committed()}
            changed.update(coordinator.groups.share_partitions)
        else:
            offsets, names, changed = dict(before.offsets), dict(before.names), touched
        for name in changed:
            rows = tuple(group_offset_rows(coordinator, name, retention_minutes))
            metadata = coordinator.groups.share_partitions.get(name)
            _put(offsets, name, rows)
            _put(names, name, topic_names({name: metadata}) if metadata else {})
    cap = replay.cap
    return PartitionView(replay.topic, replay.partition, replay.progress, replay.start_end,
                         replay.failure, findings, tuple(cap.summary()), cap.omitted_count(),
                         share,
                         prune if share is not None else None,
                         dict(sorted(offsets.items())), names)


def _put(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value:
        mapping[key] = value
    else:
        mapping.pop(key, None)


def _findings(found: list[LogFinding], before: PartitionView | None
              ) -> tuple[LogFinding, ...]:
    """`found` as a tuple, the last view's reused while it holds the same findings (the
    replay only adds findings, and a new replay's are other objects)."""
    if before is not None and len(before.findings) == len(found) and (
            not found or before.findings[-1] is found[-1]):
        return before.findings
    return tuple(found)


def _states(result: ShareLogResult, group: str | None
            ) -> list[tuple[ShareKey, SharePartitionState]]:
    return [(key, state) for key, state in sorted(live_states(result.shard))
            if group is None or key.group_id == group]


def share_partitions(view: View, group: str | None = None) -> list[Row]:
    """`/v1/share-partitions`: `share_partition_state` rows, as `sharestate state` prints
    them."""
    return [row for result in view.shares() for row in state_rows(result, group)]


def lag(view: View, ends: EndOffsets, group: str | None = None) -> list[Row]:
    """`/v1/lag`: `share_group_lag` rows against the data topics' end offsets `ends`."""
    names = view.names()
    return [row for result in view.shares() for row in lag_rows(
        _states(result, group), StateContext.of(result), end_offsets=ends,
        end_offset_source=LIVE, names=names)]


def redelivery(view: View, group: str | None = None) -> list[Row]:
    """`/v1/redelivery`: `redelivery` rows."""
    return [row for result in view.shares() for row in redelivery_rows(
        _states(result, group), StateContext.of(result))]


def prune(view: View) -> list[Row]:
    """`/v1/prune`: a `prune_recommendations` row per state-topic partition."""
    return [p.prune for p in view.partitions.values() if p.prune is not None]


def consumer_group_offsets(view: View, group: str | None = None) -> list[Row]:
    """`/v1/consumer-group-offsets`: committed offsets with their expiry forecast, as
    `sharestate offsets` rows."""
    return [row for p in view.partitions.values()
            for name, rows in p.offsets.items() if group is None or name == group
            for row in rows]


def findings(view: View) -> list[Row]:
    """`/v1/findings`: records that did not decode or apply, as `--findings` lines: each
    partition's listed ones, then one `omitted_findings` line per kind counted past them
    (how many, from where)."""
    return [finding_json(f, p.topic, p.partition) for p in view.partitions.values()
            for part in (p.listed(), p.omitted) for f in part]
