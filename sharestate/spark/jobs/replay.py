"""The replay job: bronze, per internal-topic partition in offset order -> the replayed gold
tables and the log-derived `audit_findings`.

A `__share_group_state` partition goes on from its `replay_state` row (its state at the last
offset the previous run applied) when that row was made by the same code with the same
settings: only the bronze rows above it are read and applied, its history and findings are
appended, its state tables (and its counts of findings past those listed) replaced, and its
new state committed last (a run that dies before is healed by the next, which drops what it
appended above the state). Any other partition, every partition of a run with `--full` or
a stop point, and every partition of a warehouse whose files the lake cannot list (jvm, off
the local file system) are replayed from the log start (as Kafka's coordinator loads them)
and their rows replaced."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from sharestate.analytics.audit import rules_of
from sharestate.lake import ActiveFile, Inputs, Lake, Produce, Target, open_lake
from sharestate.lake.partitions import FileSpec, PartitionSpec
from sharestate.log import INTERNAL_TOPICS
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.replay.logs import AsOf, past_end_line
from sharestate.spark.jobs.warehouse import RunReport, TaskRows, Warehouse, table_rows
from sharestate.tables import gold_pass, tasks
from sharestate.tables.log_changes import went_back_offset
from sharestate.tables.replay_state import resumable, state_log_start
from sharestate.tables.runs import latest_log_starts, usable_log_starts

RULES = rules_of("replay")
"""The `audit_findings` rules this job owns (it replaces their partitions)."""
OMITTED = "omitted_findings"
"""The rule of the rows counting a partition's findings past those listed: a partition that
goes on from its state replaces them."""


@dataclass
class Plan:
    """What the replay reads and how it writes: its input, its task and its targets."""

    inputs: Inputs
    produce: Produce
    targets: dict[str, Target]
    notes: list[str]
    """The log starts refused (`usable_log_starts`), a line each."""


def _plan(spark: SparkSession, lake: Lake, warehouse: Warehouse,
          options: gold_pass.GoldOptions, full: bool) -> Plan:
    """One task per internal-topic partition reading its bronze files itself (no shuffle)
    where the backend lists them; else Spark reads, shuffles by (topic, partition) and sorts
    by offset, every partition from its log start. Either way an offset in several segments
    (a segment the log cleaner rewrote, and the ones it merged) is one record, the copy of
    the segment read last (`gold_pass.read_partition_files`)."""
    from sharestate.tables.gold_pass import REPLAY_COLUMNS

    reads = _reads(lake, warehouse)
    read_at = reads.read_at
    starts = latest_log_starts(
        lake.read_arrow(warehouse.path("log_start_offsets"),
                        ["topic", "partition", "log_start_offset", "finished_at"]).to_pylist())
    notes: list[str] = []
    if starts:
        starts, notes = usable_log_starts(starts, {
            key: offset + 1 for key, (offset, _) in _bronze_ends(lake, warehouse).items()})
    files = lake.active_files(warehouse.path("log_records"))
    whole = {name: Target(warehouse.path(name), [{}], last=name == "replay_state")
             for name in REPLAY_TABLES}
    if files is None:
        rows = lake.read(warehouse.path("log_records")).where(F.col("offset").isNotNull())
        when = spark.createDataFrame(
            [(t, p, s, at) for (t, p, s), at in read_at.items()],
            "topic string, partition int, segment bigint, read_at bigint")
        latest = Window.partitionBy("topic", "partition", "offset").orderBy(
            F.col("read_at").desc_nulls_last(), F.col("segment"))
        ordered = rows.join(when, ["topic", "partition", "segment"], "left").withColumn(
            "copy", F.row_number().over(latest)).where(F.col("copy") == 1).select(
            "topic", "partition", *REPLAY_COLUMNS).repartition(
            spark.sparkContext.defaultParallelism * 2, "topic", "partition"
        ).sortWithinPartitions("topic", "partition", "offset")
        whole["audit_findings"] = Target(warehouse.path("audit_findings"),
                                         [{"rule": rule} for rule in RULES])
        return Plan(ordered, partial(tasks.replay_rows, options=options, log_starts=starts,
                                     overlaps=_overlaps(reads)), whole, notes)
    by_partition: dict[tuple[str, int], list[ActiveFile]] = {}
    for f in files:
        if f.records:
            key = (str(f.partition_values["topic"]), int(f.partition_values["partition"]))
            by_partition.setdefault(key, []).append(f)
    # findings written by another backend may mix partitions in one file: then they are all
    # replaced, and every partition replayed from its log start
    mixed = _mixed(lake.active_files(warehouse.path("audit_findings")) or [])
    states = {} if full or mixed else {
        key: row for key, row in _states(lake, warehouse, options).items()
        if reads.below(*key, row["committed_at"]) is None
        and _continues(row, starts.get(key[0], {}).get(key[1]))}
    for key in states:
        by_partition.setdefault(key, [])
    work = []
    replaced: list[PartitionSpec] = []
    dropped: list[FileSpec] = []
    audit: list[FileSpec] = []
    for (topic, partition), group in sorted(by_partition.items(), key=lambda item: (
            -sum(f.records for f in item[1]), item[0])):
        state = states.get((topic, partition))
        above = None if state is None else state["last_applied_offset"]
        here = {"topic": ("=", topic), "partition": ("=", partition), "rule": ("in", RULES)}
        if state is None:
            audit.append(here)
            if topic == SHARE_STATE_TOPIC:
                replaced.append({"state_partition": partition})
        else:  # the findings counted past those listed are counted again, whole
            audit.append({**here, "rule": ("=", OMITTED)})
            if above is not None:  # what a run that died before its state appended is dropped
                audit.append({**here, "offset": (">", above)})
                dropped.append({"state_partition": ("=", partition),
                                "record_offset": (">", above)})
        start = starts.get(topic, {}).get(partition)
        since = None if state is None else state_log_start(state["state"])
        moved = start is not None and since is not None and start > since
        files_read = []
        for f in group:
            segment = int(f.partition_values["segment"])
            at = read_at.get((topic, partition, segment), 0)
            first, last = f.min_values.get("offset", -1), f.max_values.get("offset", 1 << 62)
            # the state's log start moved: the files from it to the new one say what went
            if above is None or last > above or (moved and last >= since and first < start):
                files_read.append({"uri": f.uri, "segment": segment, "first_offset": first,
                                   "last_offset": last, "read_at": at,
                                   "below": reads.below(topic, partition, at),
                                   "together": reads.together.get((topic, partition, segment))})
        work.append((topic, partition, files_read, None if state is None else state["state"],
                     above, start))
    targets = {**whole, REPLAY_TABLES[0]: Target(warehouse.path(REPLAY_TABLES[0]), replaced,
                                                 drop=dropped, appends=True),
               "audit_findings": Target(warehouse.path("audit_findings"),
                                        [{"rule": rule} for rule in RULES]) if mixed
               else Target(warehouse.path("audit_findings"), [], drop=audit, appends=True)}
    return Plan(TaskRows.of(spark, work, tasks.REPLAY_TASKS),
                partial(tasks.replay_partitions, options=options), targets, notes)


def _continues(state: dict[str, Any], start: int | None) -> bool:
    """Whether a partition can go on from its `replay_state` row with Kafka's log start now
    at `start`: not when the start lies past the offset after the state's last applied one
    (the coordinator pruned records no run read, such as a deleted group's tombstones): it
    is replayed from the log start, as the coordinator loads it."""
    above = state["last_applied_offset"]
    return start is None or above is None or start <= above + 1


def _mixed(files: list[ActiveFile]) -> bool:
    """Whether a data file of this job's findings holds rows of several partitions."""
    return any(f.partition_values.get("rule") in RULES and f.records and any(
        f.min_values.get(column) is None or f.min_values.get(column) != f.max_values.get(column)
        for column in ("topic", "partition")) for f in files)


def _states(lake: Lake, warehouse: Warehouse, options: gold_pass.GoldOptions
            ) -> dict[tuple[str, int], dict[str, Any]]:
    """The `replay_state` rows a run with `options` goes on from, by partition."""
    rows = lake.read_arrow(warehouse.path("replay_state")).to_pylist()
    return {(row["topic"], row["partition"]): row for row in rows if resumable(row, options)}


def _overlaps(reads: Reads) -> dict[str, dict[int, gold_pass.Reached]]:
    """The `offset_order` findings of segments read together that overlap, by topic and
    partition, from `ingest_runs` (each segment's offsets as last read): what the replay
    tasks find from the bronze files' statistics where the lake lists them
    (`gold_pass.overlap_finding_rows`)."""
    files: dict[tuple[str, int], list[gold_pass.BronzeFile]] = {}
    for (topic, partition, segment), (first, last) in reads.spans.items():
        at = reads.read_at[(topic, partition, segment)]
        files.setdefault((topic, partition), []).append(gold_pass.BronzeFile(
            "", segment, first, last, at, reads.below(topic, partition, at),
            reads.together.get((topic, partition, segment))))
    found: dict[str, dict[int, gold_pass.Reached]] = {}
    for (topic, partition), group in files.items():
        if gold_pass.overlap_finding_rows(topic, partition, group):
            found.setdefault(topic, {})[partition] = partial(
                gold_pass.overlap_finding_rows, topic, partition, group)
    return found


@dataclass
class Reads:
    """What `ingest_runs` says of bronze: when each segment was last read, and where each
    partition's log went back (offset, when it was found); `spans`: each segment's first
    and last offset as last read (one that held records)."""

    read_at: dict[tuple[str, int, int], int]
    went_back: dict[tuple[str, int], list[tuple[int, int]]]
    spans: dict[tuple[str, int, int], tuple[int, int]] = field(default_factory=dict)
    together: dict[tuple[str, int, int], int] = field(default_factory=dict)
    """When each segment was first read with the offsets of its latest read, through
    the reads since (`gold_pass.BronzeFile.together`)."""

    def below(self, topic: str, partition: int, read_at: int) -> int | None:
        """The offset from which rows read at `read_at` are of a log that is gone."""
        return min((offset for offset, found in self.went_back.get((topic, partition), ())
                    if found > read_at), default=None)


def _reads(lake: Lake, warehouse: Warehouse) -> Reads:
    runs = lake.read_arrow(warehouse.path("ingest_runs"),
                           ["job", "topic", "partition", "segment", "first_offset",
                            "last_offset", "note", "finished_at"])
    reads = Reads({}, {})
    read: dict[tuple[str, int, int], tuple[int, int]] = {}  # the offsets of the latest read
    for row in sorted(runs.to_pylist(), key=lambda row: row["finished_at"] or 0):
        if row["job"] != "ingest" or row["segment"] is None:
            continue
        key = (row["topic"], row["partition"], row["segment"])
        at = row["finished_at"] or 0
        span = (row["first_offset"], row["last_offset"])
        reads.read_at[key] = at
        if None in span:
            reads.spans.pop(key, None)
        else:
            if read.get(key) != span:
                reads.together[key] = at
            read[key] = reads.spans[key] = span
        offset = went_back_offset(row["note"])
        if offset is not None:
            reads.went_back.setdefault(key[:2], []).append((offset, at))
    return reads


REPLAY_TABLES = ("share_partition_state_history", "share_partition_state",
                 "prune_recommendations", "consumer_group_offsets", "share_group_partitions",
                 "audit_findings", "replay_state")
"""The tables the job writes, `replay_state` last: a partition's state is committed after
the rows it was made with."""


def _drop_tables(produce: Produce, keep: Sequence[str]) -> Produce:
    """`produce`, yielding only the rows of the tables in `keep`."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
        return ((name, rows) for name, rows in produce(batches) if name in keep)

    return run


def replay(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           options: gold_pass.GoldOptions, executors: str | None = None,
           full: bool = False) -> RunReport:
    """Bronze -> the replayed gold tables and the log-derived audit findings, in one pass
    over what is new (see the module; `full`: every partition from its log start).
    `executors` (their kernels) goes into the commit's metadata."""
    started = time.monotonic()
    options = replace(options, run_id=run_id, started_at=int(time.time() * 1000))
    lake = open_lake(spark)
    warehouse.create_all(lake)
    plan = _plan(spark, lake, warehouse, options, full)
    metadata = {"run": run_id, "job": "replay", "as_of": {"offset": options.as_of.offset,
                                                          "time": options.as_of.time},
                "semantics": options.semantics, "executors": executors}
    lake.overwrite_many(plan.inputs, _drop_tables(plan.produce, REPLAY_TABLES), plan.targets,
                        metadata=metadata)
    report = RunReport("replay", run_id, rows={name: table_rows(warehouse.path(name))
                                               for name in REPLAY_TABLES})
    audit = lake.read_arrow(warehouse.path("audit_findings"), ["rule", "severity"])
    report.findings = pc.sum(pc.and_(
        pc.is_in(audit["rule"], pa.array(RULES, pa.string())),
        pc.is_in(audit["severity"], pa.array(["warning", "error"])))).as_py() or 0
    report.notes.extend(plan.notes)
    report.findings += len(plan.notes)
    line = None if options.as_of.unbounded else _past_end(_bronze_ends(lake, warehouse),
                                                          options.as_of)
    if line is not None:
        report.notes.append(line)
    report.seconds = time.monotonic() - started
    return report


def _past_end(ends: dict[tuple[str, int], tuple[int, int | None]], as_of: AsOf) -> str | None:
    """The line on the internal-topic partitions whose log ends before the stop point."""
    return past_end_line(as_of, [
        (f"{topic}-{partition}" if partition >= 0 else f"{topic} (loose log {partition})",
         offset, at) for (topic, partition), (offset, at) in sorted(ends.items())
        if topic in INTERNAL_TOPICS and as_of.beyond(offset, at)])


def _bronze_ends(lake: Lake, warehouse: Warehouse) -> dict[tuple[str, int], tuple[int, int | None]]:
    """Bronze's largest offset and time per partition (its files' statistics, else a
    query)."""
    path = warehouse.path("log_records")
    files = lake.active_files(path)
    ends: dict[tuple[str, int], tuple[int, int | None]] = {}
    if files is not None and all(f.max_values.get("offset") is not None
                                 for f in files if f.records):
        for f in files:
            if f.records:
                key = (str(f.partition_values["topic"]), int(f.partition_values["partition"]))
                offset, at = f.max_values["offset"], f.max_values.get("timestamp")
                known = ends.get(key, (offset, at))
                ends[key] = (max(offset, known[0]),
                             max((t for t in (at, known[1]) if t is not None), default=None))
    else:
        for row in lake.read(path).groupBy("topic", "partition").agg(
                F.max("offset").alias("offset"), F.max("timestamp").alias("at")).collect():
            if row["offset"] is not None:
                ends[(row["topic"], row["partition"])] = (row["offset"], row["at"])
    return ends
