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
from typing import Any, Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharestate.analytics.context import LAST_RECORD_OFFSET
from sharestate.analytics.end_offsets import STATE, UNKNOWN, Estimate, Timeline, Where
from sharestate.analytics.lag import ACKNOWLEDGED, ARCHIVED
from sharestate.coordinator.offsets_manager import LONG_MAX

SHARE_PARTITION: Final = "share_partition"
GROUP: Final = "group"

HISTORY_COLUMNS: Final = ("group_id", "topic_id", "partition", "state_partition",
                          "record_offset", "timestamp", "deleted", "start_offset",
                          "delivery_complete_count", "state_batches")
"""The `share_partition_state_history` columns `lag_inputs` reads."""
INPUT_SCHEMA: Final = pa.schema([
    ("group_id", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
    ("state_partition", pa.int32()), ("record_offset", pa.int64()), ("time", pa.int64()),
    ("deleted", pa.bool_()), ("start_offset", pa.int64()), ("complete", pa.int64()),
    ("state_end", pa.int64())])
"""`lag_inputs`' rows: `HistoryRow`'s columns."""


def lag_inputs(batch: pa.RecordBatch) -> pa.RecordBatch:
    """History rows (`HISTORY_COLUMNS`) with a time -> the walk's input (`INPUT_SCHEMA`),
    the state's part of Kafka's formula computed over the batches, column-wise, as
    `sharestate.analytics.lag.share_lag` computes it over `in_flight`: `complete` is Kafka's
    deliveryCompleteCount, or the acknowledged and archived records at or above the SPSO
    when it is unknown (null without batches; at most int64's largest value); `state_end`
    the state's own lower bound of the end offset: the offset after its last batch at or
    above the SPSO, at least the SPSO (null without an SPSO). A batch counts as far as it
    lies at or above the SPSO (and 0) and at or below `LAST_RECORD_OFFSET`; one with
    last < first, or a null field, is left out."""
    batch = batch.filter(pc.is_valid(batch.column("timestamp")))
    n = batch.num_rows
    lists = batch.column("state_batches")
    spso, spso_ok = _int64(batch.column("start_offset"))
    flat = pc.list_flatten(lists)
    rows = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    (first, first_ok), (last, last_ok), (state, state_ok) = (
        _int64(pc.struct_field(flat, name))
        for name in ("first_offset", "last_offset", "delivery_state"))
    low = np.maximum(spso[rows], 0)
    held = (first_ok & last_ok & spso_ok[rows] & (last >= low) & (last >= first)
            & (first <= LAST_RECORD_OFFSET))
    first = np.maximum(first, low)
    last = np.minimum(last, LAST_RECORD_OFFSET)
    top = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(top, rows[held], last[held] + 1)
    state_end = np.maximum(top, spso)
    done = held & state_ok & ((state == ACKNOWLEDGED) | (state == ARCHIVED))
    dcc, dcc_ok = _int64(batch.column("delivery_complete_count"))
    known = dcc_ok & (dcc >= 0)
    complete = np.where(known, dcc, _record_counts(n, rows[done], first[done], last[done]))
    lists_ok = lists.is_valid().to_numpy(zero_copy_only=False)
    return pa.RecordBatch.from_arrays([
        *(batch.column(name) for name in ("group_id", "topic_id", "partition",
                                          "state_partition", "record_offset", "timestamp",
                                          "deleted", "start_offset")),
        pa.array(complete, mask=~(known | lists_ok)), pa.array(state_end, mask=~spso_ok),
    ], schema=INPUT_SCHEMA)


def _record_counts(n: int, rows: np.ndarray[Any, Any], first: np.ndarray[Any, Any],
                   last: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The records of the batches [first, last] (each of at most int64's largest value
    records) of each of `n` rows, `rows` saying whose each batch is; a sum past int64's
    largest value is that value. The sums are exact in int64 below 2^62 (their float sums
    say which are), the others are summed in Python."""
    sizes = last - first + 1
    counted = np.zeros(n, np.int64)
    np.add.at(counted, rows, sizes)
    rough = np.zeros(n, np.float64)
    np.add.at(rough, rows, sizes.astype(np.float64))
    for row in np.flatnonzero(rough >= 2.0 ** 62):
        counted[row] = min(int(sizes[rows == row].astype(object).sum()), LONG_MAX)
    return counted


def lag_input_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`lag_inputs` of each batch (a task over history rows)."""
    return (lag_inputs(batch) for batch in batches)


HISTORY_FILES: Final = pa.schema([("uris", pa.list_(pa.string())),
                                  ("state_partitions", pa.list_(pa.int32()))])
"""A `read_history_files` task: history data files and the state partition of each (a
partition column: its value is in the file's folder, not in the file)."""
READ_ROWS: Final = 65_536


def read_history_files(tasks: Iterator[pa.RecordBatch], wanted: pa.Schema,
                       since: int | None = None) -> Iterator[pa.RecordBatch]:
    """`lag_inputs` of the rows stamped after `since` (None: every row) of the history data
    files each row of `tasks` names (`HISTORY_FILES`), read here, a batch at a time."""
    for task in tasks:
        for uris, partitions in zip(task.column("uris").to_pylist(),
                                    task.column("state_partitions").to_pylist(), strict=True):
            for uri, partition in zip(uris, partitions, strict=True):
                yield from map(lag_inputs, history_batches(uri, partition, wanted, since))


def history_batches(uri: str, partition: int, wanted: pa.Schema,
                    since: int | None = None) -> Iterator[pa.RecordBatch]:
    """The `HISTORY_COLUMNS` of the rows stamped after `since` (None: every row) of the
    history data file `uri` of state partition `partition`, a batch at a time; a column the
    file lacks (written before the column was) is null, of its type in the table's schema
    `wanted`."""
    source = pq.ParquetFile(uri)
    present = [c for c in HISTORY_COLUMNS if c in source.schema_arrow.names]
    for rows in source.iter_batches(batch_size=READ_ROWS, columns=present):
        n = rows.num_rows
        columns = {name: rows.column(name) for name in present}
        columns["state_partition"] = pa.repeat(pa.scalar(partition, pa.int32()), n)
        batch = pa.RecordBatch.from_arrays(
            [columns.get(name, pa.nulls(n, wanted.field(name).type))
             for name in HISTORY_COLUMNS], names=list(HISTORY_COLUMNS))
        if since is not None:
            batch = batch.filter(pc.greater(batch.column("timestamp"), since))
        yield batch


def _int64(column: pa.Array) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(values as int64, 0 where null; validity)."""
    values = pc.fill_null(column, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    return values, column.is_valid().to_numpy(zero_copy_only=False)


INPUT_ORDER: Final = ("group_id", "time", "state_partition", "record_offset")
"""The walk's order of a group's rows."""


class HistoryRow(NamedTuple):
    """One row of `INPUT_SCHEMA` (`lag_inputs`), in its column order."""

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
        """The group's row at `t`; a sum outside int64 (damaged states' lags) is unknown."""
        some = self.members > 0
        return LagRow(GROUP, group, t, None, None, None, None, None, None, None, None, None,
                      None, some and not self.inexact, not some or self.lower > 0,
                      self.lag if some and -LONG_MAX - 1 <= self.lag <= LONG_MAX else None,
                      self.members)


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
