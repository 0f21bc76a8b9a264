"""The four jobs of the main pipeline, each a thin Spark wrapper around the core.

- `ingest`: segment files (split by file, on executors) or a live cluster -> bronze
  `log_records` + `decode_errors`; the run is recorded in `ingest_runs`.
- `decode`: bronze -> silver `share_state_records` + `group_records`.
- `replay`: bronze, per internal-topic partition in offset order -> the replayed gold
  tables (`share_partition_state_history`, `share_partition_state`,
  `prune_recommendations`, `consumer_group_offsets`, `share_group_partitions`) and the
  log-derived `audit_findings`.
- `analytics`: gold state -> `share_group_lag`, `redelivery` and the cross-topic
  `audit_findings` (orphaned, uninitialised, stuck-deleting share-partitions), plus one
  `decode_error` finding per `decode_errors` row.

Idempotence: ingest and decode replace the (topic, partition, segment) partitions they
read; replay and analytics recompute their tables (replay from the log start, as Kafka's
loader does) and replace them, and `audit_findings` partitions of the rules each job owns.
Executor functions live in `sharestate.tables`; these functions only plan and write.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharestate.analytics.audit import cross_topic_rows
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.share_state import ShareKey
from sharestate.lake import Lake, open_lake
from sharestate.log import discover
from sharestate.log.index import split_points
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.tables import bronze as bronze_rows
from sharestate.tables import gold_replay
from sharestate.tables.gold import states_from_rows
from sharestate.tables.metadata import metadata_from_rows
from sharestate.tables.silver import group_rows, share_state_rows
from sharestate.tables.spec import table, table_names

REPLAY_RULES = ("epoch_regression", "spso_regression", "state_epoch_bump",
                "deletion", "snapshot_epoch_gap", "update_tombstone", "aborted_transaction",
                "invalid_state_batch", "unknown_record_type", "snapshot_tombstone_replay_failed",
                "pending_discarded")
"""The `audit_findings` rules the replay job owns (it replaces their partitions)."""
ANALYTICS_RULES = ("orphaned_state", "initialized_without_state", "stuck_deleting",
                   "decode_error")
"""The `audit_findings` rules the analytics job owns."""


@dataclass
class Warehouse:
    """Where the tables live: one Delta table per folder under `root`."""

    root: Path

    def path(self, name: str) -> str:
        return str(self.root / name)

    def create_all(self, lake: Lake) -> None:
        """Create every documented table that does not exist yet."""
        for name in table_names():
            spec = table(name)
            lake.create(self.path(name), spec.ddl(), partition_by=list(spec.partition_by),
                        properties={"sharestate.layer": spec.layer,
                                    "sharestate.grain": spec.grain,
                                    "sharestate.cluster_by": ",".join(spec.cluster_by)})


@dataclass
class RunReport:
    """What a job did, for the run summary and the exit status."""

    job: str
    run_id: str
    rows: dict[str, int] = field(default_factory=dict)
    findings: int = 0
    seconds: float = 0.0


def table_rows(path: str) -> int:
    """Rows of a Delta table from its log's file statistics (no data read)."""
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return int(pa.compute.sum(actions.column("num_records")).as_py() or 0)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _spark_schema(spark: SparkSession, schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


# -- ingest ------------------------------------------------------------------------------


def _ingest_task(batches: Iterator[pa.RecordBatch], run_id: str,
                 findings_only: bool) -> Iterator[pa.RecordBatch]:
    """Executor side of `ingest`: read each assigned split (all rows, or the findings)."""
    import gc

    from sharestate.log import segment_of

    gc.set_threshold(100_000, 50, 100)
    for batch in batches:
        for row in batch.to_pylist():
            segment = segment_of(Path(row["path"]))
            split = bronze_rows.Split(segment, row["start"], row["end"])
            yield from bronze_rows.read_split(split, run_id, findings_only=findings_only)


def ingest(spark: SparkSession, warehouse: Warehouse, sources: Sequence[str], *,
           run_id: str, full: bool = False,
           kafka_options: dict[str, str] | None = None) -> RunReport:
    """Segment files or a live cluster (`kafka://host:port`) -> `log_records`,
    `decode_errors`, `ingest_runs`.

    Two passes over the input, neither cached: one writes every record, a lighter one (no
    rows built for good records) writes the findings; what they covered is then read back
    from the run's own rows (a few small columns).
    """
    started = time.monotonic()
    lake = open_lake(spark)
    warehouse.create_all(lake)
    report = RunReport("ingest", run_id)
    live = [s for s in sources if s.startswith(KAFKA_SCHEME)]
    files = [s for s in sources if not s.startswith(KAFKA_SCHEME)]
    if files:
        passes, sizes = _segment_staging(spark, lake, warehouse, files, run_id, full)
        if passes is not None:
            _write_bronze(spark, lake, warehouse, passes, sizes, None, run_id, report)
    for uri in live:
        live_passes, visibility = _kafka_staging(spark, lake, warehouse, uri, run_id, full,
                                                 kafka_options or {})
        _write_bronze(spark, lake, warehouse, live_passes, {}, visibility, run_id, report)
    report.seconds = time.monotonic() - started
    return report


KAFKA_SCHEME = "kafka://"
Passes = tuple[DataFrame, DataFrame]
"""Staging rows of an input: every row, and only the rows carrying a finding."""


SPLIT_BYTES = 64 << 20
"""Segments larger than this are read in several tasks where an offset index allows."""


def _segment_staging(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                     sources: Sequence[str], run_id: str, full: bool,
                     split_bytes: int = SPLIT_BYTES
                     ) -> tuple[Passes | None, dict[str, tuple[int, int]]]:
    """Staging rows of the new or changed segments, read on executors: one task per file,
    or per byte range between offset-index positions for large segments."""
    seen = _ingested(lake, warehouse) if not full else {}
    todo: dict[str, tuple[int, int]] = {}
    for segment in discover(sources):
        stat = segment.path.stat()
        size_and_time = (stat.st_size, int(stat.st_mtime * 1000))
        if seen.get(str(segment.path)) != size_and_time:
            todo[str(segment.path)] = size_and_time
    if not todo:
        return None, {}
    ranges = [(path, start, end) for path, (size, _) in todo.items()
              for start, end in _ranges(split_points(Path(path), size, split_bytes))]
    splits = spark.createDataFrame(ranges, "path string, start bigint, end bigint")
    splits = splits.repartition(min(len(ranges), spark.sparkContext.defaultParallelism * 4))
    schema = _spark_schema(spark, bronze_rows.STAGING)
    return (splits.mapInArrow(partial(_ingest_task, run_id=run_id, findings_only=False),
                              schema),
            splits.mapInArrow(partial(_ingest_task, run_id=run_id, findings_only=True),
                              schema)), todo


def _ranges(starts: list[int]) -> list[tuple[int, int | None]]:
    return [(start, end) for start, end in zip(starts, [*starts[1:], None], strict=True)]


def _kafka_task(batches: Iterator[pa.RecordBatch], run_id: str,
                source: str) -> Iterator[pa.RecordBatch]:
    yield from bronze_rows.consumer_rows(batches, run_id, source)


def _findings(rows: DataFrame) -> DataFrame:
    return rows.where(F.col("finding_kind").isNotNull())


def _kafka_staging(spark: SparkSession, lake: Lake, warehouse: Warehouse, uri: str,
                   run_id: str, full: bool, extra: dict[str, str]) -> tuple[Passes, str]:
    """Staging rows read from a live cluster, from where the last run's chunks began."""
    from dataclasses import replace

    from pipelines.kafka_source import NAME, register
    from sharestate.sources import parse_options, plan_read
    from sharestate.sources.kafka_plan import KafkaPlan, OffsetRange

    options = {"bootstrap.servers": uri[len(KAFKA_SCHEME):],
               "topics": f"{SHARE_STATE_TOPIC},{CONSUMER_OFFSETS_TOPIC}",
               **{f"kafka.{k}": v for k, v in extra.items()}}
    plan = plan_read(parse_options(options))
    covered = {} if full else _covered_offsets(lake, warehouse, uri)
    ranges = tuple(
        replace(r, start=min(r.end, max(r.start, bronze_rows.chunk_of(covered[key] + 1))))
        if (key := (r.topic, r.partition)) in covered else r for r in plan.ranges)
    plan = KafkaPlan(plan.options, tuple(OffsetRange(r.topic, r.partition, r.start, r.end)
                                         for r in ranges))
    register(spark)
    raw = spark.read.format(NAME).options(**options).options(**plan.offsets_options()).load()
    staging = raw.mapInArrow(partial(_kafka_task, run_id=run_id, source=uri),
                             _spark_schema(spark, bronze_rows.STAGING))
    return (staging, _findings(staging)), str(plan.metadata()["visibility"])


def _covered_offsets(lake: Lake, warehouse: Warehouse, source: str
                     ) -> dict[tuple[str, int], int]:
    runs = lake.read(warehouse.path("ingest_runs")).where(
        (F.col("source") == source) & F.col("last_offset").isNotNull())
    return {(r["topic"], r["partition"]): r["last"] for r in
            runs.groupBy("topic", "partition").agg(F.max("last_offset").alias("last")).collect()}


def _write_bronze(spark: SparkSession, lake: Lake, warehouse: Warehouse, passes: Passes,
                  sizes: dict[str, tuple[int, int]], note: str | None, run_id: str,
                  report: RunReport) -> None:
    """Write one input's two passes to the bronze tables and record what the run covered."""
    everything, findings = passes
    records = everything.where(F.col("row_kind") == "record").select(
        *table("log_records").names)
    meta = {"run": run_id, "note": note}
    lake.overwrite(_conform(records, "log_records"), warehouse.path("log_records"),
                   metadata=meta)
    errors = _findings(findings).select(
        "source", "topic", "partition", "segment", "offset", "position",
        F.col("finding_kind").alias("kind"), F.col("finding_message").alias("message"),
        "raw", "raw_length", "ingest_run").persist()  # findings are few: cache them
    written = lake.read(warehouse.path("log_records")).where(F.col("ingest_run") == run_id)
    covered = [r.asDict() for r in written.groupBy("source", "topic", "partition", "segment")
               .agg(F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
                    F.count(F.lit(1)).alias("records")).collect()]
    for row in errors.select("source", "topic", "partition", "segment").distinct().collect():
        if not any((c["source"], c["segment"]) == (row["source"], row["segment"])
                   for c in covered):  # a segment with findings but no readable record
            covered.append({**row.asDict(), "first_offset": None, "last_offset": None,
                            "records": 0})
    # Every segment read is replaced, so one whose findings are gone loses the old ones.
    specs = [{"topic": c["topic"], "partition": c["partition"], "segment": c["segment"]}
             for c in covered]
    lake.overwrite(_conform(errors, "decode_errors"), warehouse.path("decode_errors"),
                   partitions=specs, metadata=meta)
    errors.unpersist()
    counts = {(r["source"], r["segment"]): r["count"] for r in
              lake.read(warehouse.path("decode_errors")).where(F.col("ingest_run") == run_id)
              .groupBy("source", "segment").count().collect()}
    finished = int(time.time() * 1000)
    runs = [{"ingest_run": run_id, "job": "ingest", "source": c["source"],
             "source_kind": "kafka" if note else "segments", "topic": c["topic"],
             "partition": c["partition"], "segment": c["segment"],
             "first_offset": c["first_offset"], "last_offset": c["last_offset"],
             "bytes": sizes.get(c["source"], (None, None))[0], "records": c["records"],
             "findings": counts.get((c["source"], c["segment"]), 0),
             "modified_ms": sizes.get(c["source"], (None, None))[1], "note": note,
             "finished_at": finished} for c in covered]
    if runs:
        lake.append(_rows(spark, runs, "ingest_runs"), warehouse.path("ingest_runs"),
                    metadata={**meta, "inputs": len(runs)})
    report.rows["log_records"] = report.rows.get("log_records", 0) + sum(
        c["records"] for c in covered)
    found = sum(counts.values())
    report.rows["decode_errors"] = report.rows.get("decode_errors", 0) + found
    report.findings += found


def _ingested(lake: Lake, warehouse: Warehouse) -> dict[str, tuple[int, int]]:
    """(size, modified) of each segment as the latest ingest run that read it saw it."""
    runs = lake.read(warehouse.path("ingest_runs")).where(F.col("job") == "ingest")
    latest = runs.groupBy("source").agg(F.max(F.struct("finished_at", "bytes",
                                                         "modified_ms")).alias("last"))
    return {row["source"]: (row["last"]["bytes"], row["last"]["modified_ms"])
            for row in latest.collect()}


def _conform(df: DataFrame, name: str) -> DataFrame:
    """`df` with the table's column order and types (nullability checked by the lake)."""
    schema = _spark_schema(df.sparkSession, table(name).arrow_schema())
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def _rows(spark: SparkSession, rows: list[dict[str, Any]], name: str) -> DataFrame:
    arrow = pa.Table.from_pylist(rows, schema=table(name).arrow_schema())
    return spark.createDataFrame(arrow.to_pandas(), _spark_schema(spark, arrow.schema))


# -- decode ------------------------------------------------------------------------------


def _silver_task(batches: Iterator[pa.RecordBatch], topic: str) -> Iterator[pa.RecordBatch]:
    convert = share_state_rows if topic == SHARE_STATE_TOPIC else group_rows
    for batch in batches:
        if batch.num_rows:
            yield convert(batch)


def decode(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           only_run: str | None = None) -> RunReport:
    """Bronze -> `share_state_records`, `group_records` (segments of `only_run`, or all)."""
    started = time.monotonic()
    lake = open_lake(spark)
    bronze = lake.read(warehouse.path("log_records"))
    if only_run is not None:
        bronze = bronze.where(F.col("ingest_run") == only_run)
    report = RunReport("decode", run_id)
    for topic, name in ((SHARE_STATE_TOPIC, "share_state_records"),
                        (CONSUMER_OFFSETS_TOPIC, "group_records")):
        rows = bronze.where(F.col("topic") == topic)
        silver = rows.mapInArrow(partial(_silver_task, topic=topic),
                                 _spark_schema(spark, table(name).arrow_schema()))
        # Dynamic partitions: every bronze segment decodes into the same silver segment.
        lake.overwrite(silver, warehouse.path(name), metadata={"run": run_id, "job": "decode"})
        report.rows[name] = table_rows(warehouse.path(name))
    report.seconds = time.monotonic() - started
    return report


# -- replay ------------------------------------------------------------------------------


def _gold_task(batches: Iterator[pa.RecordBatch], topic: str, options: gold_replay.GoldOptions,
               history: bool, summary: bool) -> Iterator[pa.RecordBatch]:
    """Executor side of `replay`: rows are bronze rows ordered by (partition, offset), or
    (with `files`) one row per partition naming its bronze data files."""
    import gc

    gc.set_threshold(100_000, 50, 100)
    first = next(batches, None)
    if first is None:
        return
    rows: Iterable[pa.RecordBatch] = itertools.chain([first], batches)
    if "files" in first.schema.names:
        rows = _file_rows(rows)
    if topic == SHARE_STATE_TOPIC:
        yield from gold_replay.share_gold(rows, options, history=history, summary=summary)
    else:
        yield from gold_replay.group_gold(rows, options)


def _file_rows(tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for task in tasks:
        for row in task.to_pylist():
            yield from gold_replay.read_partition_files(row["partition"], row["files"])


def _bronze_by_partition(spark: SparkSession, lake: Lake, warehouse: Warehouse, topic: str
                         ) -> DataFrame:
    """Bronze rows of `topic` for the replay tasks, grouped by partition in offset order.

    Where the backend lists the data files, each task reads its partition's files itself (no
    shuffle); otherwise Spark reads, repartitions by partition and sorts by offset.
    """
    from sharestate.tables.arrow_log import COLUMNS

    files = lake.active_files(warehouse.path("log_records"))
    if files is None:
        rows = lake.read(warehouse.path("log_records")).where(
            (F.col("topic") == topic) & F.col("offset").isNotNull())
        return rows.select("partition", "dialect", *COLUMNS).repartition(
            spark.sparkContext.defaultParallelism * 2, "partition").sortWithinPartitions(
            "partition", "offset")
    by_partition: dict[int, list[Any]] = {}
    for f in files:
        if f.partition_values.get("topic") == topic and f.records:
            by_partition.setdefault(int(f.partition_values["partition"]), []).append(f)
    tasks = [(partition, [f.uri for f in sorted(group, key=lambda f: (
        f.partition_values["segment"], f.min_values.get("offset") or 0))])
        for partition, group in sorted(by_partition.items())]
    frame = spark.createDataFrame(tasks, "partition int, files array<string>")
    return frame.repartition(max(1, len(tasks)))


def replay(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           options: gold_replay.GoldOptions) -> RunReport:
    """Bronze -> the replayed gold tables and the log-derived audit findings."""
    started = time.monotonic()
    lake = open_lake(spark)
    warehouse.create_all(lake)
    report = RunReport("replay", run_id)
    staging_schema = _spark_schema(spark, gold_replay.STAGING)
    audits: list[DataFrame] = []
    metadata = {"run": run_id, "job": "replay", "as_of": {"offset": options.as_of.offset,
                                                          "time": options.as_of.time},
                "semantics": options.semantics}

    def gold(topic: str, history: bool, summary: bool) -> DataFrame:
        return _bronze_by_partition(spark, lake, warehouse, topic).mapInArrow(
            partial(_gold_task, topic=topic, options=options, history=history,
                    summary=summary), staging_schema)

    # The history table is by far the largest: it is written straight from a replay pass of
    # its own, and a second, cheap pass (no history) gives the small tables.
    history_table = gold_replay.SHARE_GOLD[0]
    lake.overwrite(_gold(gold(SHARE_STATE_TOPIC, True, False), history_table),
                   warehouse.path(history_table), partitions=[{}], metadata=metadata)
    report.rows[history_table] = table_rows(warehouse.path(history_table))
    for topic, tables in ((CONSUMER_OFFSETS_TOPIC, gold_replay.GROUP_GOLD),
                          (SHARE_STATE_TOPIC, gold_replay.SHARE_GOLD[1:])):
        staged = gold(topic, False, True).persist()
        for name in tables:
            if name in ("share_group_lag", "redelivery"):
                continue  # the analytics job writes these
            if name == "audit_findings":
                audits.append(_gold(staged, name))
                continue
            lake.overwrite(_gold(staged, name), warehouse.path(name), partitions=[{}],
                           metadata=metadata)
            report.rows[name] = table_rows(warehouse.path(name))
        audit = audits[-1]
        if topic == SHARE_STATE_TOPIC:
            lake.overwrite(audits[0].unionByName(audit), warehouse.path("audit_findings"),
                           partitions=[{"rule": rule} for rule in REPLAY_RULES],
                           metadata=metadata)
        staged.unpersist()
    findings = lake.read(warehouse.path("audit_findings")).where(
        F.col("rule").isin(*REPLAY_RULES) & F.col("severity").isin("warning", "error"))
    report.findings = findings.count()
    report.seconds = time.monotonic() - started
    return report


def _decode_error_findings(errors: DataFrame) -> DataFrame:
    """One `decode_error` audit finding (severity error) per `decode_errors` row."""
    null = F.lit(None)
    return _conform(errors.select(
        F.lit("decode_error").alias("rule"), F.lit("error").alias("severity"), "topic",
        "partition", "offset", null.alias("timestamp"), null.alias("group_id"),
        null.alias("topic_id"), null.alias("share_partition"),
        F.concat_ws(": ", "kind", "message").alias("message"),
        F.to_json(F.struct("kind", "source", "segment", "position",
                           "raw_length")).alias("detail_json")), "audit_findings")


def _gold(staged: DataFrame, name: str) -> DataFrame:
    return _conform(staged.where(F.col("gold_table") == name).select(*table(name).names), name)


# -- analytics ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalyticsInputs:
    """What the analytics job adds to the replayed state: end offsets for the lag."""

    end_offsets: dict[tuple[str, int], int] | None = None
    end_offset_source: str = FILE
    delivery_limit: int | None = None


def _analytics_task(batches: Iterator[pa.RecordBatch], names: dict[str, str],
                    inputs: AnalyticsInputs) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        for context, states in states_from_rows(batch):
            yield gold_replay.staged("share_group_lag", list(lag_rows(
                states, context, end_offsets=inputs.end_offsets,
                end_offset_source=inputs.end_offset_source, names=names)))
            yield gold_replay.staged("redelivery", list(redelivery_rows(
                states, context, delivery_limit=inputs.delivery_limit)))


def analytics(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
              inputs: AnalyticsInputs) -> RunReport:
    """Gold state -> `share_group_lag`, `redelivery`, cross-topic `audit_findings`."""
    started = time.monotonic()
    lake = open_lake(spark)
    report = RunReport("analytics", run_id)
    metadata_table = lake.read(warehouse.path("share_group_partitions")).collect()
    share_metadata = metadata_from_rows(row.asDict() for row in metadata_table)
    names = {row["topic_id"]: row["topic_name"] for row in metadata_table}
    states = lake.read(warehouse.path("share_partition_state"))
    staged = states.mapInArrow(partial(_analytics_task, names=names, inputs=inputs),
                               _spark_schema(spark, gold_replay.STAGING)).persist()
    metadata = {"run": run_id, "job": "analytics"}
    for name in ("share_group_lag", "redelivery"):
        lake.overwrite(_gold(staged, name), warehouse.path(name), partitions=[{}],
                       metadata=metadata)
        report.rows[name] = table_rows(warehouse.path(name))
    staged.unpersist()
    keys = {ShareKey(r["group_id"], r["topic_id"], r["partition"]): r["state_partition"]
            for r in states.select("group_id", "topic_id", "partition", "state_partition")
            .collect()}
    rows = list(cross_topic_rows(share_metadata, keys))
    decode_errors = _decode_error_findings(lake.read(warehouse.path("decode_errors")))
    audit = _rows(spark, rows, "audit_findings").unionByName(decode_errors)
    lake.overwrite(audit, warehouse.path("audit_findings"),
                   partitions=[{"rule": rule} for rule in ANALYTICS_RULES], metadata=metadata)
    errors = decode_errors.count()
    report.rows["audit_findings"] = len(rows) + errors
    report.findings = errors + sum(r["severity"] in ("warning", "error") for r in rows)
    report.seconds = time.monotonic() - started
    return report

