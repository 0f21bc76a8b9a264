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
from typing import Final, NamedTuple

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
    FROM {source} WHERE timestamp IS NOT NULL"""
"""The history rows the lag needs (`{source}`: a view of `share_partition_state_history`'s
rows), with the state's part of Kafka's formula computed where
the batches are (the SQL twin of `share_lag`'s counting; a test holds them equal):
`complete` is Kafka's deliveryCompleteCount, or the acknowledged and archived records at or
above the SPSO when it is unknown; `state_end` the state's own lower bound of the end
offset. Ordered per group by time (`INPUT_ORDER`)."""
INPUT_ORDER: Final = ("group_id", "time", "state_partition", "record_offset")


class HistoryRow(NamedTuple):
    """One row of `HISTORY_INPUT`, in its column order."""

    group_id: str
    topic_id: str
    partition: int
    state_partition: int
    record_offset: int
    time: int
    deleted: bool
    start_offset: int | None
    complete: int | None
    state_end: int | None


class LagRow(NamedTuple):
    """One `share_group_lag_history` row, in the table's column order."""

    scope: str
    group_id: str
    time: int
    topic_id: str | None
    topic: str | None
    partition: int | None
    state_partition: int | None
    record_offset: int | None
    start_offset: int | None
    delivery_complete_count: int | None
    end_offset: int | None
    end_offset_time: int | None
    end_offset_source: str | None
    exact: bool
    lag_is_lower_bound: bool
    lag: int | None
    partitions: int


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

    timeline: Timeline | None
    state: tuple[int | None, int | None, int | None] | None = None
    """(SPSO, complete, state end) of its latest state; None: no state (yet, or deleted)."""
    last_offset: tuple[int, int] = (-1, -1)
    lag: StateLag | None = None
    """Its lag at the time last evaluated; None when it has none (no state, SPSO -1)."""

    def evaluate(self, t: int) -> StateLag | None:
        if self.state is None:
            return None
        estimate = self.timeline.at(t) if self.timeline is not None else UNKNOWN
        lag = state_lag(*self.state, estimate)
        return lag if lag.lag is not None else None


@dataclass
class _Totals:
    """The sums over a group's members with a lag, kept as members change."""

    lag: int = 0
    members: int = 0
    inexact: int = 0
    lower: int = 0

    def add(self, lag: StateLag | None, sign: int) -> None:
        if lag is not None and lag.lag is not None:
            self.lag += sign * lag.lag
            self.members += sign
            self.inexact += sign * (not lag.exact)
            self.lower += sign * lag.lower_bound

    def row(self, group: str, t: int) -> LagRow:
        some = self.members > 0
        return LagRow(GROUP, group, t, None, None, None, None, None, None, None, None, None,
                      None, some and not self.inexact, not some or self.lower > 0,
                      self.lag if some else None, self.members)


def _share_partition_row(row: HistoryRow, topic: str | None, lag: StateLag | None) -> LagRow:
    if lag is None:
        return LagRow(SHARE_PARTITION, row.group_id, row.time, row.topic_id, topic,
                      row.partition, row.state_partition, row.record_offset, None, None, None,
                      None, None, False, True, None, 1)
    return LagRow(SHARE_PARTITION, row.group_id, row.time, row.topic_id, topic, row.partition,
                  row.state_partition, row.record_offset, row.start_offset, row.complete,
                  lag.end_offset, lag.estimate.time if lag.source != STATE else None,
                  lag.source, lag.lag is not None and lag.exact, lag.lower_bound, lag.lag, 1)


class MemberState(NamedTuple):
    """One share-partition of a group as a walk left it (`GroupState`)."""

    topic_id: str
    partition: int
    state: tuple[int | None, int | None, int | None] | None
    """(SPSO, complete, state end) of its latest state; None: no state (yet, or deleted)."""
    last_offset: tuple[int, int]
    """(state partition, record offset) of the state record it is at."""
    lag: StateLag | None
    at_sample: bool
    """Evaluated at a sampled end offset's own time: evaluated again at the next moment."""


class GroupState(NamedTuple):
    """A group's walk after the last moment it reached (`time`): what a later walk over the
    group's rows after that moment goes on from, giving the rows a walk over all of them
    gives after it."""

    group_id: str
    time: int
    members: tuple[MemberState, ...]


def _group_rows(group: str, rows: Iterator[HistoryRow | GroupState],
                timelines: Mapping[Where, Timeline], names: Mapping[str, str],
                horizon: int | None) -> Iterator[LagRow | GroupState]:
    """One group's rows (its history rows in `INPUT_ORDER`, after the `GroupState` it goes
    on from, if any), read as they come; last, its `GroupState` before the first moment at
    or after `horizon` (None: after its last moment), if it reached one before."""
    members: dict[Where, _Member] = {}
    totals = _Totals()
    samples: list[tuple[int, Where]] = []  # (time, partition): sampled end offsets to come
    at_sample: set[Where] = set()  # evaluated at a sampled time: look again later
    row = next(rows, None)
    t: int | None = None

    def state() -> GroupState | None:
        return None if t is None else GroupState(group, t, tuple(
            MemberState(where[0], where[1], m.state, m.last_offset, m.lag, where in at_sample)
            for where, m in sorted(members.items())))

    snapshot: list[GroupState | None] = []  # taken at the horizon
    if isinstance(row, GroupState):
        t = row.time
        for saved in row.members:
            where = (saved.topic_id, saved.partition)
            restored = members[where] = _Member(timelines.get(where), saved.state,
                                                saved.last_offset, saved.lag)
            totals.add(restored.lag, 1)
            if saved.at_sample:
                at_sample.add(where)
            if restored.timeline is not None:
                for time in restored.timeline.sample_times:
                    if time > t:
                        heapq.heappush(samples, (time, where))
        row = next(rows, None)
    while row is not None or samples:
        assert not isinstance(row, GroupState), "a group's state comes before its rows"
        now = row.time if row is not None else samples[0][0]
        if samples and samples[0][0] < now:
            now = samples[0][0]
        if horizon is not None and now >= horizon and not snapshot:
            snapshot.append(state())
        t = now
        dirty = set(at_sample)
        at_sample.clear()
        while samples and samples[0][0] == t:
            dirty.add(heapq.heappop(samples)[1])
        while row is not None and row.time == t:
            assert not isinstance(row, GroupState)
            where = (row.topic_id, row.partition)
            member = members.get(where)
            if member is None:
                member = members[where] = _Member(timelines.get(where))
                if member.timeline is not None:
                    for time in member.timeline.sample_times:
                        if time > t:
                            heapq.heappush(samples, (time, where))
            order = (row.state_partition, row.record_offset)
            if order >= member.last_offset:  # a clock stepping back never undoes a state
                member.last_offset = order
                member.state = None if row.deleted else (
                    row.start_offset, row.complete, row.state_end)
            dirty.add(where)
            own = member.timeline.at(t) if member.timeline is not None else UNKNOWN
            lag = None if row.deleted else state_lag(
                row.start_offset, row.complete, row.state_end, own)
            yield _share_partition_row(row, names.get(row.topic_id), lag)
            row = next(rows, None)
        for where in dirty:
            member = members[where]
            totals.add(member.lag, -1)
            member.lag = member.evaluate(t)
            totals.add(member.lag, 1)
            if member.lag is not None and member.lag.estimate.time == t:
                at_sample.add(where)
        yield totals.row(group, t)
    last = snapshot[0] if snapshot else state()
    if last is not None:
        yield last


def walk_groups(rows: Iterable[HistoryRow | GroupState], timelines: Mapping[Where, Timeline],
                names: Mapping[str, str] | None = None, horizon: int | None = None
                ) -> Iterator[LagRow | GroupState]:
    """`share_group_lag_history` rows from history rows, each group's rows together and in
    `INPUT_ORDER`, a group going on from its `GroupState` where one comes first; after its
    rows, each group's state before `horizon` (None: at its last moment). `names` maps
    topic ids to names."""
    for group, group_rows in itertools.groupby(rows, key=lambda r: r.group_id):
        yield from _group_rows(group, group_rows, timelines, names or {}, horizon)


def lag_history_rows(rows: Iterable[HistoryRow], timelines: Mapping[Where, Timeline],
                     names: Mapping[str, str] | None = None) -> Iterator[LagRow]:
    """The `share_group_lag_history` rows of `walk_groups` over every row from the start."""
    return (row for row in walk_groups(rows, timelines, names) if isinstance(row, LagRow))
