"""The gold pass: replay bronze rows of each internal-topic partition into every gold table.

What a replay task runs on an executor. Its input is the bronze `log_records` rows of one
topic, ordered by (partition, offset); it replays each partition with the shared core and
yields (table name, record batch) pairs, each batch in that table's columns, so one pass
over the log feeds every table (the lake's `overwrite_many` writes them).

- `__share_group_state` partitions give `share_partition_state_history` (streamed while the
  replay runs), `share_partition_state`, `prune_recommendations` and the per-record
  `audit_findings` (lag and redelivery follow from the state: the analytics job).
- `__consumer_offsets` partitions give `consumer_group_offsets`, `share_group_partitions`
  (the share groups' state-partition metadata the cross-topic audits and topic names need)
  and their `audit_findings` (aborted transactions). Records that did not decode are in
  `decode_errors` already; the analytics job turns those into `decode_error` findings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from typing import Any, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharestate.analytics.audit import (
    ShareAuditor,
    TransactionAuditor,
    before_log_rows,
    finding_row,
    omitted_finding_rows,
    shard_finding_rows,
)
from sharestate.analytics.audit_state import (
    cap_table,
    restore_cap,
    restore_share_audit,
    share_audit_tables,
)
from sharestate.analytics.offsets import OffsetHistory
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import DEFAULT_MAX_FINDINGS
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.segment import FindingCap
from sharestate.replay.group_log import GroupReplay
from sharestate.replay.logs import END, AsOf
from sharestate.replay.prune import prune_recommendation
from sharestate.replay.share_log import ShareReplay, share_state
from sharestate.replay.snapshot import Snapshot, decode
from sharestate.tables.arrow_log import COLUMNS, ArrowLog
from sharestate.tables.gold import history_batch, history_columns, state_batch
from sharestate.tables.metadata import metadata_rows
from sharestate.tables.replay_state import restored_dialect, state_row
from sharestate.tables.spec import table

SHARE_GOLD = ("share_partition_state_history", "share_partition_state",
              "prune_recommendations", "audit_findings", "replay_state")
GROUP_GOLD = ("consumer_group_offsets", "share_group_partitions", "audit_findings")
HISTORY_ROWS = 65_536
REPLAY_COLUMNS = (*COLUMNS, "segment", "dialect")
"""The `log_records` columns a replay reads."""
DICTIONARY_COLUMNS = ("timestamp_type", "compression", "dialect")
"""Columns of a few distinct strings, read as Arrow dictionaries (each row's string is
needed at most once a batch, and the Parquet files hold them as dictionaries)."""
READ_ROWS = 8_192
"""Bronze rows handed to the replay at a time (records decoded ahead of their apply stay in
cache)."""


_Rows = TypeVar("_Rows", pa.Table, pa.RecordBatch)
Rows = tuple[str, pa.RecordBatch]
"""A gold table's name and rows of it."""


def rows_of(name: str, rows: pa.RecordBatch | list[dict[str, Any]]) -> Rows:
    """(name, rows) with dict rows turned into a record batch of the table's schema."""
    if isinstance(rows, list):
        rows = pa.RecordBatch.from_pylist(rows, schema=table(name).arrow_schema())
    return name, rows


@dataclass(frozen=True)
class GoldOptions:
    """How the gold pass replays: stop point, semantics, Kafka's config; and the run whose
    `replay_state` rows it makes (when `as_of` is unbounded)."""

    as_of: AsOf = END
    semantics: str = KAFKA
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
    retention_minutes: int = 10080
    max_findings: int = DEFAULT_MAX_FINDINGS
    """A partition's replay findings listed one by one, the rest counted per kind (as
    `state --max-findings` lists them)."""
    run_id: str = ""
    started_at: int = 0
    """When the run's replay began, epoch ms (`replay_state.committed_at`)."""


def column_runs(rows: Iterable[pa.RecordBatch], column: str
                ) -> Iterator[tuple[Any, Iterator[pa.RecordBatch]]]:
    """(value, its row slices) for each run of equal `column` values, lazily."""
    def pieces() -> Iterator[tuple[Any, pa.RecordBatch]]:
        for batch in rows:
            values = batch.column(column)
            n = len(values)
            if not n:
                continue
            change = pc.not_equal(values.slice(1), values.slice(0, n - 1)).fill_null(True)
            starts = [0, *(np.flatnonzero(change.to_numpy(zero_copy_only=False)) + 1).tolist()]
            for start, end in zip(starts, [*starts[1:], n], strict=True):
                yield values[start].as_py(), batch.slice(start, end - start)

    for value, group in groupby(pieces(), key=lambda piece: piece[0]):
        yield value, (piece for _, piece in group)


def _first_dialect(slices: Iterator[pa.RecordBatch]) -> tuple[str, Iterator[pa.RecordBatch]]:
    first = next(slices)
    dialect = first.column("dialect")[0].as_py()

    def chained() -> Iterator[pa.RecordBatch]:
        yield first
        yield from slices

    return dialect, chained()


LogStarts = Mapping[int, int]
"""Kafka's log start offset of each partition of a topic, as ingest last learnt it (a
partition not named: none known)."""
Earlier = Callable[[int], Iterable[pa.RecordBatch]]
"""The bronze rows, in offset order, of a partition's files that reach from an offset to
below its log start (`read_partition_files` of them)."""


Reached = Callable[[int | None], list[dict[str, Any]]]
"""The `offset_order` findings of a partition's overlapping segments that a replay reading
every record up to an offset (None: all of them) reaches (`overlap_finding_rows`)."""
Overlaps = Mapping[int, Reached]
"""`Reached` of each partition of a topic with overlapping segments."""


def share_gold(rows: Iterable[pa.RecordBatch], options: GoldOptions,
               log_starts: LogStarts | None = None,
               overlaps: Overlaps | None = None) -> Iterator[Rows]:
    """Gold rows for bronze rows of `__share_group_state` (see the module), every partition
    replayed from its log start (with its `overlaps` findings)."""
    for partition, slices in column_runs(rows, "partition"):
        yield from share_partition_gold(partition, slices, options,
                                        log_start=(log_starts or {}).get(partition, 0),
                                        overlaps=(overlaps or {}).get(partition))


def share_partition_gold(partition: int, rows: Iterable[pa.RecordBatch],
                         options: GoldOptions, state: bytes | None = None, *,
                         log_start: int = 0, earlier: Earlier | None = None,
                         overlaps: Reached | None = None) -> Iterator[Rows]:
    """Gold rows of one `__share_group_state` partition: its bronze rows replayed from its
    log start, or with `state` (its `replay_state` row's) from that state, `rows` being the
    ones above it. Either way the history, audit findings and shard findings of the records
    it applies (the shard's first `max_findings` of the partition's log listed, the rest
    counted: its `omitted_findings` rows, whole), the partition's state tables whole, and
    (with no stop point) its new `replay_state` row.

    `log_start`: Kafka's log start offset (0: none known). A replay from the log start reads
    from the batch holding it, as the coordinator loads the log; one that goes on from a
    state made when the log started earlier keeps its state, as a coordinator that kept
    running while it pruned does, and forgets the batches below it (`earlier` gives the rows
    it read from the state's log start on: `ShareReplay.move_log_start`). `overlaps`: the
    findings of its overlapping segments, those the replay reached listed with its own."""
    slices = iter(rows)
    first = next(slices, None)
    taken = decode(state)[0] if state is not None else None
    dialect = (restored_dialect(taken) if taken is not None
               else None if first is None else first.column("dialect")[0].as_py())
    if dialect is None:
        return
    auditor = ShareAuditor(partition, dialects=(dialect,))
    history = history_columns(dialect)
    name = f"{SHARE_STATE_TOPIC}-{partition}"
    if taken is not None:
        replay = ShareReplay.restore(taken, as_of=options.as_of, history=history.rows,
                                     observe=auditor.batch)
        restore_share_audit(auditor, taken.tables)
        cap = restore_cap(taken.tables, name, len(replay.result.shard.findings))
    else:
        cap = FindingCap(options.max_findings, name, "partition")
        replay = ShareReplay(share_state(SHARE_STATE_TOPIC, partition, (dialect,),
                                         semantics=options.semantics,
                                         snapshot_update_records_per_snapshot=(
                                             options.snapshot_update_records_per_snapshot)),
                             as_of=options.as_of, history=history.rows, observe=auditor.batch)
    replay.log_start = log_start
    replay.result.shard.cap = cap
    known = len(replay.result.shard.findings)
    log = ArrowLog(SHARE_STATE_TOPIC, partition,
                   [] if first is None else chain([first], slices), dialect,
                   log_start if taken is None or replay.result.log_start_offset is None else 0)
    for item in log.items():
        replay.apply(item)
        if len(history) >= HISTORY_ROWS:
            yield SHARE_GOLD[0], history_batch(history, SHARE_STATE_TOPIC, partition, dialect)
        if replay.stopped:
            break
    if len(history):
        yield SHARE_GOLD[0], history_batch(history, SHARE_STATE_TOPIC, partition, dialect)
    result = replay.result
    since = result.log_start_offset
    if taken is not None and since is not None and log_start > since and earlier is not None:
        replay.move_log_start(log_start, ArrowLog(SHARE_STATE_TOPIC, partition,
                                                  earlier(since), dialect, since).batches())
    yield "share_partition_state", state_batch(result)
    yield rows_of("prune_recommendations", [prune_recommendation(result)])
    yield rows_of("audit_findings", [
        *(overlaps(reached(replay.stopped, result.last_applied_offset)) if overlaps else ()),
        *auditor.drain(), *shard_finding_rows(result.shard.findings[known:], partition),
        *omitted_finding_rows(cap, partition),
        *before_log_rows(result.findings, SHARE_STATE_TOPIC, partition)])
    if options.as_of.unbounded:
        snapshot = replay.snapshot()
        tables = {**snapshot.tables, **share_audit_tables(auditor), **cap_table(cap)}
        yield rows_of("replay_state", [state_row(
            Snapshot(snapshot.topic, snapshot.partition, tables), result.last_applied_offset,
            result.last_applied_timestamp, result.records, options)])


def group_gold(rows: Iterable[pa.RecordBatch], options: GoldOptions,
               log_starts: LogStarts | None = None,
               overlaps: Overlaps | None = None) -> Iterator[Rows]:
    """Gold rows for bronze rows of `__consumer_offsets` (see the module), each partition
    read from the batch holding its log start (`log_starts`), as the coordinator loads it
    (with its `overlaps` findings)."""
    for partition, slices in column_runs(rows, "partition"):
        dialect, slices = _first_dialect(slices)
        history = OffsetHistory(partition)
        auditor = TransactionAuditor(CONSUMER_OFFSETS_TOPIC, partition)
        log = ArrowLog(CONSUMER_OFFSETS_TOPIC, partition, slices, dialect,
                       (log_starts or {}).get(partition, 0))
        replay = GroupReplay.of_log(log, as_of=options.as_of, listener=history,
                                    observe=auditor.batch)
        replay.run(log.batches())
        result = replay.result
        coordinator = result.coordinator
        offsets_rows = history.drain() + history.finish(
            coordinator.offsets, coordinator.groups.groups, options.retention_minutes)
        yield rows_of("consumer_group_offsets", offsets_rows)
        found = (overlaps or {}).get(partition)
        yield rows_of("audit_findings", [
            *(found(reached(replay.stopped, result.last_applied_offset)) if found else ()),
            *auditor.drain(), *before_log_rows(result.findings, CONSUMER_OFFSETS_TOPIC,
                                               partition)])
        yield rows_of("share_group_partitions",
                      metadata_rows(coordinator.groups.share_partitions, partition))


class BronzeFile(NamedTuple):
    """A bronze data file of one topic-partition: where, its segment (a partition column,
    so not in the file), its offsets (from its statistics) and when its segment was read
    (epoch ms: the latest read wins where files overlap); `below`: its rows from that offset
    on are of a log that went back since (not read)."""

    uri: str
    segment: int
    first_offset: int
    last_offset: int
    read_at: int
    below: int | None = None
    together: int | None = None
    """When its segment was first read with these offsets, through the reads since (None:
    `read_at`): segments read again alone, their bytes as they were, are still read
    together with the others of that read."""


def read_partition_files(partition: int, files: Sequence[BronzeFile], *,
                         above: int | None = None) -> Iterator[pa.RecordBatch]:
    """Bronze rows of one topic-partition from its data files, in offset order and each
    offset once (only those above offset `above`, when given), with the `partition` column
    the gold passes group by.

    Files are taken in offset order, not segment order: a segment Kafka's log cleaner
    rewrote repeats offsets that other files (segments it merged, since deleted) hold too.
    Where files overlap, their rows are merged by offset; an offset in several files is one
    record, the copy in the file read last (a record the cleaner removed stays, from the
    older file: bronze keeps the fullest log, and applied in offset order it leaves Kafka's
    state). A file alone is streamed `READ_ROWS` at a time when its offsets ascend (what
    ingest writes), else read whole and sorted."""
    import pyarrow.parquet as pq

    columns = [c for c in REPLAY_COLUMNS if c != "segment"]
    files = [f for f in files if (above is None or f.last_offset > above)
             and (f.below is None or f.first_offset < f.below)]
    for group in _overlapping(files):
        if len(group) == 1:
            source = pq.ParquetFile(group[0].uri, read_dictionary=DICTIONARY_COLUMNS)
            offsets = source.read(columns=["offset"])["offset"].drop_null()
            if len(offsets) < 2 or pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py():
                batches: Iterator[pa.RecordBatch] = (
                    _with_segment(rows, group[0].segment)
                    for rows in source.iter_batches(batch_size=READ_ROWS, columns=columns))
            else:
                batches = iter(_with_segment(source.read(columns=columns), group[0].segment)
                               .sort_by("offset").to_batches(max_chunksize=READ_ROWS))
            below = group[0].below
        else:
            batches = iter(merge_by_offset(
                [_with_segment(_valid(pq.read_table(f.uri, columns=columns), f), f.segment)
                 for f in group], [f.read_at for f in group]).to_batches(
                     max_chunksize=READ_ROWS))
            below = None
        for rows in batches:
            offsets = rows.column("offset")
            keep = pc.is_valid(offsets) if above is None else pc.greater(offsets, above)
            if below is not None:
                keep = pc.and_(keep, pc.less(offsets, below))
            rows = rows.filter(keep)
            yield rows.append_column("partition", pa.repeat(pa.scalar(partition, pa.int32()),
                                                            rows.num_rows))


def overlap_finding_rows(topic: str, partition: int, files: Sequence[BronzeFile],
                         until: int | None = None, *,
                         above: int | None = None) -> list[dict[str, Any]]:
    """An `offset_order` audit finding per segment that overlaps the offsets of another
    segment of the partition read with it (the same `together`: one ingest run found both in
    the source, with these offsets), from the files' statistics alone
    (`read_partition_files` reads the same files; it merges such segments, each offset once,
    the copy of the lower segment).

    A sound log's segments never overlap: a segment Kafka's log cleaner rewrote replaces the
    segments it merged (a crash mid-clean leaves a `.cleaned` or `.swap` file, not a second
    `.log`), so only a segment read again after the cleaner ran (another `read_at`) repeats
    offsets bronze holds, and that is no finding. Segments read together that overlap are a
    damaged log dir (a segment copied in, say); `sharestate decode`/`state` refuse their
    batches that go back, with `offset_order` findings. Each finding names both segments
    and the offsets the later one repeats; `above`: only the files the replay reads.

    `until`: a replay that read every record up to that offset only (stopped at the next
    one: `--as-of-offset`, `--as-of-time`) reports the segments that `sharestate state`
    reads with that stop point, in order until the first record past it: those overlapping
    segments that reach no further than it."""
    spans: dict[tuple[int, int], list[int]] = {}  # (read_at, segment) -> [first, last]
    for f in files:
        last = f.last_offset if f.below is None else min(f.last_offset, f.below - 1)
        if (above is not None and last <= above) or last < f.first_offset:
            continue
        at = f.read_at if f.together is None else f.together
        span = spans.setdefault((at, f.segment), [f.first_offset, last])
        span[0], span[1] = min(span[0], f.first_offset), max(span[1], last)
    rows = []
    reach: dict[int, tuple[int, int, int]] = {}  # read_at -> the segment reaching furthest
    for (at, segment), (first, last) in sorted(spans.items(),
                                               key=lambda item: (item[1], item[0][1])):
        before = reach.get(at)
        if before is not None and first <= before[2] and (until is None or before[2] <= until):
            other, other_first, other_last = before
            end = min(last, other_last)
            rows.append(finding_row(
                "offset_order",
                f"segment {segment} (offsets {first} to {last}) overlaps segment {other} "
                f"(offsets {other_first} to {other_last}), read with it: offsets {first} "
                f"to {end} go back, which no sound log's segments do; each offset is "
                f"applied once, the copy of the lowest segment holding it",
                topic=topic, partition=partition, offset=first,
                detail={"segment": segment, "overlapped_segment": other,
                        "first_offset": first, "last_offset": end}))
        if before is None or last > before[2]:
            reach[at] = (segment, first, last)
    return rows


def reached(stopped: bool, last_applied: int | None) -> int | None:
    """The offset up to which a replay read every record (None: all of them), from whether
    it stopped (at the record after its last applied one)."""
    return None if not stopped else -1 if last_applied is None else last_applied


def _with_segment(rows: _Rows, segment: int) -> _Rows:
    """`rows` of a bronze file with its `segment` column (a partition column: its value is
    in the file's folder, not in the file)."""
    return rows.append_column("segment", pa.repeat(pa.scalar(segment, pa.int64()),
                                                   rows.num_rows))


def _valid(rows: pa.Table, f: BronzeFile) -> pa.Table:
    """The rows of `f` that are not of a log that went back."""
    return rows if f.below is None else rows.filter(pc.less(rows["offset"], f.below))


def _overlapping(files: Sequence[BronzeFile]) -> Iterator[list[BronzeFile]]:
    """The files in offset order, those whose offset ranges overlap in one group."""
    group: list[BronzeFile] = []
    end = -1
    for f in sorted(files, key=lambda f: (f.first_offset, f.last_offset)):
        if group and f.first_offset > end:
            yield group
            group = []
        group.append(f)
        end = max(end, f.last_offset)
    if group:
        yield group


def merge_by_offset(tables: Sequence[pa.Table], read_at: Sequence[int]) -> pa.Table:
    """The rows of `tables` (bronze rows of one topic-partition) in offset order, one per
    offset: of an offset in several, the row of the table read last (`read_at`; of two read
    together, the one of the lower segment: the one the cleaner's output holds)."""
    tagged = pa.concat_tables([
        table.append_column("read_at", pa.repeat(pa.scalar(at, pa.int64()), table.num_rows))
        for table, at in zip(tables, read_at, strict=True)])
    tagged = tagged.filter(pc.is_valid(tagged["offset"])).sort_by(
        [("offset", "ascending"), ("read_at", "descending"), ("segment", "ascending")])
    offsets = tagged["offset"].to_numpy()
    first = np.ones(len(offsets), dtype=bool)
    first[1:] = offsets[1:] != offsets[:-1]
    return tagged.filter(pa.array(first)).drop_columns(["read_at"])
