"""The replay job: bronze, per internal-topic partition in offset order from the log start
(as Kafka's coordinator loads it) -> the replayed gold tables and the log-derived
`audit_findings`, recomputed and replaced on every run."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sharestate.analytics.audit import rules_of
from sharestate.lake import ActiveFile, Lake, Produce, Target, open_lake
from sharestate.log import INTERNAL_TOPICS
from sharestate.replay.logs import AsOf, past_end_line
from sharestate.spark.jobs.warehouse import RunReport, Warehouse, one_task_each, table_rows
from sharestate.tables import gold_pass, tasks

PARTITION_FILES = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                             ("files", pa.list_(pa.struct([
                                 ("uri", pa.string()), ("first_offset", pa.int64()),
                                 ("last_offset", pa.int64()), ("read_at", pa.int64())])))])
"""A replay task: an internal-topic partition's bronze files (`gold_pass.BronzeFile`)."""
RULES = rules_of("replay")
"""The `audit_findings` rules this job owns (it replaces their partitions)."""


def _replay_inputs(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                   options: gold_pass.GoldOptions) -> tuple[DataFrame, Produce]:
    """The replay's input and task: one task per internal-topic partition reading its bronze
    files itself (no shuffle) where the backend lists them; else Spark reads, shuffles by
    (topic, partition) and sorts by offset. Either way an offset in several segments (a
    segment the log cleaner rewrote, and the ones it merged) is one record, the copy of the
    segment read last (`gold_pass.read_partition_files`)."""
    from sharestate.tables.gold_pass import REPLAY_COLUMNS

    read_at = _read_at(lake, warehouse)
    files = lake.active_files(warehouse.path("log_records"))
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
        return ordered, partial(tasks.replay_rows, options=options)
    by_partition: dict[tuple[str, int], list[ActiveFile]] = {}
    for f in files:
        if f.records:
            key = (str(f.partition_values["topic"]), int(f.partition_values["partition"]))
            by_partition.setdefault(key, []).append(f)
    largest_first = sorted(by_partition.items(),
                           key=lambda item: (-sum(f.records for f in item[1]), item[0]))
    work = [(topic, partition, [
        {"uri": f.uri, "first_offset": f.min_values.get("offset", -1),
         "last_offset": f.max_values.get("offset", 1 << 62),
         "read_at": read_at.get((topic, partition, int(f.partition_values["segment"])), 0)}
        for f in group]) for (topic, partition), group in largest_first]
    return (one_task_each(spark, work, PARTITION_FILES),
            partial(tasks.replay_partitions, options=options))


def _read_at(lake: Lake, warehouse: Warehouse) -> dict[tuple[str, int, int], int]:
    """When each bronze segment was last read (`ingest_runs`: the run that wrote its rows)."""
    runs = lake.read_arrow(warehouse.path("ingest_runs"),
                           ["job", "topic", "partition", "segment", "finished_at"])
    found: dict[tuple[str, int, int], int] = {}
    for row in runs.to_pylist():
        if row["job"] == "ingest" and row["segment"] is not None:
            key = (row["topic"], row["partition"], row["segment"])
            found[key] = max(found.get(key, 0), row["finished_at"] or 0)
    return found


REPLAY_TABLES = ("share_partition_state_history", "share_partition_state",
                 "prune_recommendations", "consumer_group_offsets", "share_group_partitions",
                 "audit_findings")


def _drop_tables(produce: Produce, keep: Sequence[str]) -> Produce:
    """`produce`, yielding only the rows of the tables in `keep`."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
        return ((name, rows) for name, rows in produce(batches) if name in keep)

    return run


def replay(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           options: gold_pass.GoldOptions, executors: str | None = None) -> RunReport:
    """Bronze -> the replayed gold tables and the log-derived audit findings, in one pass:
    every internal-topic partition replayed once, from the log start. `executors` (their
    kernels) goes into the commit's metadata."""
    started = time.monotonic()
    lake = open_lake(spark)
    warehouse.create_all(lake)
    inputs, produce = _replay_inputs(spark, lake, warehouse, options)
    targets = {name: Target(warehouse.path(name), [{}]) for name in REPLAY_TABLES}
    targets["audit_findings"] = Target(warehouse.path("audit_findings"),
                                       [{"rule": rule} for rule in RULES])
    metadata = {"run": run_id, "job": "replay", "as_of": {"offset": options.as_of.offset,
                                                          "time": options.as_of.time},
                "semantics": options.semantics, "executors": executors}
    lake.overwrite_many(inputs, _drop_tables(produce, REPLAY_TABLES), targets,
                        metadata=metadata)
    report = RunReport("replay", run_id, rows={name: table_rows(warehouse.path(name))
                                               for name in REPLAY_TABLES})
    audit = lake.read_arrow(warehouse.path("audit_findings"), ["rule", "severity"])
    report.findings = pc.sum(pc.and_(
        pc.is_in(audit["rule"], pa.array(RULES, pa.string())),
        pc.is_in(audit["severity"], pa.array(["warning", "error"])))).as_py() or 0
    line = _past_end(lake, warehouse, options.as_of)
    if line is not None:
        report.notes.append(line)
    report.seconds = time.monotonic() - started
    return report


def _past_end(lake: Lake, warehouse: Warehouse, as_of: AsOf) -> str | None:
    """The line on the internal-topic partitions whose log ends before the stop point, from
    bronze's largest offset and time per partition (its files' statistics, else a query)."""
    if as_of.unbounded:
        return None
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
    return past_end_line(as_of, [
        (f"{topic}-{partition}" if partition >= 0 else f"{topic} (partition unknown)",
         offset, at) for (topic, partition), (offset, at) in sorted(ends.items())
        if topic in INTERNAL_TOPICS and as_of.beyond(offset, at)])
