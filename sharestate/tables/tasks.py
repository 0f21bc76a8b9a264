"""What the pipeline's Spark tasks run: input Arrow batches in, (table, rows) pairs out.

Each function is a `Produce` for the lake's `overwrite_many`: Spark hands it the Arrow
batches of one task's input and it yields rows for the tables the job writes, so a job reads
its input once whatever the number of tables. Pure pyarrow and the core; no Spark.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sharestate.log import DEFAULT_LIMITS, ReadLimits, segment_of
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.keyvalue import KeyValue
from sharestate.runtime import collector_paused
from sharestate.tables import bronze, gold_pass
from sharestate.tables.gold_pass import BronzeFile, GoldOptions, Rows, read_partition_files
from sharestate.tables.silver import group_rows, share_state_rows
from sharestate.tables.spec import table

_LOG_RECORDS = table("log_records").names
_ERROR_COLUMNS = {"kind": "finding_kind", "message": "finding_message"}
_DECODE_ERRORS = table("decode_errors").names
REPLAY_TASKS = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                          ("files", pa.list_(pa.struct([
                              ("uri", pa.string()), ("segment", pa.int64()),
                              ("first_offset", pa.int64()), ("last_offset", pa.int64()),
                              ("read_at", pa.int64()), ("below", pa.int64()),
                              ("together", pa.int64())]))),
                          ("state", pa.binary()), ("above", pa.int64()),
                          ("log_start", pa.int64())])
"""`replay_partitions`' input, a task a row: an internal-topic partition's bronze files
(`gold_pass.BronzeFile`) and the `replay_state` it goes on from (null: from the log start),
with its last applied offset (`above`: the files and rows at or below it are not read), and
Kafka's log start offset of the partition (null: none known; with a state, the files below
`above` that reach below it are listed too: `gold_pass.share_partition_gold`)."""


def bronze_tables(staging: Iterable[bronze.Staged], silver: bool = False) -> Iterator[Rows]:
    """Staging rows (see `bronze`) as `log_records` and `decode_errors` rows, and with
    `silver` the silver rows of the same records (the decode job fused into ingest)."""
    for batch, decoded in staging:
        log_records = batch.slice(0, len(decoded)).select(_LOG_RECORDS)  # records come first
        yield "log_records", log_records
        if silver:
            yield from _silver(log_records, decoded)
        findings = batch.filter(pc.fill_null(batch.column("listed"), False))
        if findings.num_rows:
            yield "decode_errors", pa.RecordBatch.from_arrays(
                [findings.column(_ERROR_COLUMNS.get(name, name)) for name in _DECODE_ERRORS],
                names=_DECODE_ERRORS)


SPLITS = pa.schema([("path", pa.string()), ("start", pa.int64()), ("end", pa.int64()),
                    ("partition", pa.int32())])
"""An ingest task: a byte range of a segment file (`end` None: to its end), and the
partition of a loose one (`loose_partitions`; else null: its path names it)."""


def ingest_splits(splits: Iterator[pa.RecordBatch], run_id: str, silver: bool = False,
                  limits: ReadLimits = DEFAULT_LIMITS) -> Iterator[Rows]:
    """Read each split (rows: path, start, end, partition) of a segment into the bronze
    tables (and with `silver` the silver tables)."""
    with collector_paused():
        for batch in splits:
            for row in batch.to_pylist():
                segment = segment_of(Path(row["path"]))
                if row["partition"] is not None:  # a loose segment's number
                    segment = replace(segment, partition=row["partition"])
                split = bronze.Split(segment, row["start"], row["end"])
                yield from bronze_tables(bronze.read_split(split, run_id, limits=limits),
                                         silver)


def ingest_consumed(raw: Iterator[pa.RecordBatch], run_id: str, source: str,
                    silver: bool = False, limits: ReadLimits = DEFAULT_LIMITS) -> Iterator[Rows]:
    """Rows read from a live cluster into the bronze tables (and with `silver` the silver
    tables)."""
    with collector_paused():
        yield from bronze_tables(bronze.consumer_rows(raw, run_id, source,
                                                      max_findings=limits.max_findings),
                                 silver)


def silver_tables(rows: Iterator[pa.RecordBatch]) -> Iterator[Rows]:
    """Bronze `log_records` rows (any topic) as `share_state_records` / `group_records`."""
    with collector_paused():
        for batch in rows:
            yield from _silver(batch)


def _silver(batch: pa.RecordBatch, decoded: list[KeyValue | None] | None = None
            ) -> Iterator[Rows]:
    """The silver rows of bronze rows (`decoded`: their decodings, when at hand)."""
    topics = batch.column("topic")
    bounds = pc.min_max(topics)
    for topic, name, convert in (
            (SHARE_STATE_TOPIC, "share_state_records", share_state_rows),
            (CONSUMER_OFFSETS_TOPIC, "group_records", group_rows)):
        if bounds["min"].as_py() == bounds["max"].as_py() and not topics.null_count:
            if bounds["min"].as_py() == topic:  # the usual case: rows of one topic
                yield name, convert(batch, decoded)
            continue
        mask = pc.equal(topics, topic)
        part = batch.filter(mask)
        if part.num_rows:
            mine = decoded if decoded is None or part.num_rows == batch.num_rows else [
                kv for kv, keep in zip(decoded, mask.to_pylist(), strict=True) if keep]
            yield name, convert(part, mine)


def replay_partitions(tasks: Iterator[pa.RecordBatch], options: GoldOptions) -> Iterator[Rows]:
    """Replay tasks (rows: topic, partition, files, state) into the gold tables; each task
    reads its partition's bronze files itself, in offset order: all of them, or with a
    `state` (a `replay_state` row's) only the rows above its last applied offset."""
    with collector_paused():
        for batch in tasks:
            for task in batch.to_pylist():
                partition, start = task["partition"], task.get("log_start") or 0
                files = [BronzeFile(**f) for f in task["files"]]
                rows = read_partition_files(partition, files, above=task.get("above"))
                overlaps = partial(gold_pass.overlap_finding_rows, task["topic"], partition,
                                   files, above=task.get("above"))
                if task["topic"] == SHARE_STATE_TOPIC:
                    yield from gold_pass.share_partition_gold(
                        partition, rows, options, task.get("state"), log_start=start,
                        earlier=partial(_earlier, partition, files, start), overlaps=overlaps)
                else:
                    yield from gold_pass.group_gold(rows, options, {partition: start},
                                                    {partition: overlaps})


def _earlier(partition: int, files: list[BronzeFile], log_start: int, since: int
             ) -> Iterator[pa.RecordBatch]:
    """The rows of the files that reach from `since` to below `log_start`, in offset order."""
    return read_partition_files(partition, [f for f in files if f.last_offset >= since
                                            and f.first_offset < log_start])


def replay_rows(rows: Iterator[pa.RecordBatch], options: GoldOptions,
                log_starts: Mapping[str, gold_pass.LogStarts] | None = None,
                overlaps: Mapping[str, gold_pass.Overlaps] | None = None
                ) -> Iterator[Rows]:
    """Replay bronze rows ordered by (topic, partition, offset) into the gold tables, each
    partition from the batch holding its log start (`log_starts`, by topic), with the
    `offset_order` findings of its overlapping segments (`overlaps`, by topic: the driver
    found them in `ingest_runs`)."""
    with collector_paused():
        for topic, slices in gold_pass.column_runs(rows, "topic"):
            starts = (log_starts or {}).get(topic)
            found = (overlaps or {}).get(topic)
            if topic == SHARE_STATE_TOPIC:
                yield from gold_pass.share_gold(slices, options, starts, found)
            else:
                yield from gold_pass.group_gold(slices, options, starts, found)
