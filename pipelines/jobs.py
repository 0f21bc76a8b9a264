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

import json
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from sharestate.analytics.audit import cross_topic_rows
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.share_state import ShareKey
from sharestate.lake import ActiveFile, Lake, Produce, Target, open_lake
from sharestate.log import DEFAULT_LIMITS, ReadLimits, discover, segment_of
from sharestate.log.index import split_points
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.tables import bronze as bronze_rows
from sharestate.tables import gold_replay, tasks
from sharestate.tables.gold import states_from_rows
from sharestate.tables.metadata import metadata_from_rows
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

    def create(self, lake: Lake, name: str) -> None:
        """Create the documented table `name` unless it exists (then check its schema)."""
        spec = table(name)
        lake.create(self.path(name), spec.spark_schema(), partition_by=list(spec.partition_by),
                    properties={"sharestate.layer": spec.layer,
                                "sharestate.grain": spec.grain,
                                "sharestate.cluster_by": ",".join(spec.cluster_by)})

    def create_all(self, lake: Lake) -> None:
        """Create every documented table that does not exist yet."""
        for name in table_names():
            self.create(lake, name)


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
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


# -- ingest ------------------------------------------------------------------------------


def ingest(spark: SparkSession, warehouse: Warehouse, sources: Sequence[str], *,
           run_id: str, full: bool = False, kafka_options: dict[str, str] | None = None,
           silver: bool = False, limits: ReadLimits = DEFAULT_LIMITS) -> RunReport:
    """Segment files or a live cluster (`kafka://host:port`) -> `log_records`,
    `decode_errors`, `ingest_runs`; with `silver`, also the decode job's tables for the
    same segments (`run_all` does this: bronze is then not read back to decode it).

    One pass over the input: each task reads its split and writes every table; what the
    run covered comes from the statistics of the files it wrote (or, on a backend that cannot
    list them, is read back from its rows).
    """
    started = time.monotonic()
    lake = open_lake(spark)
    warehouse.create_all(lake)
    report = RunReport("ingest", run_id)
    live = [s for s in sources if s.startswith(KAFKA_SCHEME)]
    files = [s for s in sources if not s.startswith(KAFKA_SCHEME)]
    if files:
        splits, sizes = _segment_splits(spark, lake, warehouse, files, full)
        if splits is not None:
            _write_bronze(spark, lake, warehouse, splits,
                          partial(tasks.ingest_splits, run_id=run_id, silver=silver,
                                  limits=limits), sizes,
                          None, run_id, report, silver, _segment_sources(sizes))
    for uri in live:
        raw, visibility = _kafka_raw(spark, lake, warehouse, uri, full, kafka_options or {})
        _write_bronze(spark, lake, warehouse, raw,
                      partial(tasks.ingest_consumed, run_id=run_id, source=uri, silver=silver),
                      {}, visibility, run_id, report, silver, uri)
    if silver:
        report.rows.update({name: table_rows(warehouse.path(name)) for name in SILVER})
    report.seconds = time.monotonic() - started
    return report


KAFKA_SCHEME = "kafka://"
SPLIT_BYTES = 64 << 20
"""Segments larger than this are read in several tasks where an offset index allows."""


def _segment_splits(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                    sources: Sequence[str], full: bool, split_bytes: int = SPLIT_BYTES
                    ) -> tuple[DataFrame | None, dict[str, tuple[int, int]]]:
    """The splits of the new or changed segments (one per file, or per byte range between
    offset-index positions for large segments), one task each."""
    seen = _ingested(lake, warehouse) if not full else {}
    todo: dict[str, tuple[int, int]] = {}
    for segment in discover(sources):
        try:
            stat = segment.path.stat()
            size_and_time = (stat.st_size, int(stat.st_mtime * 1000))
        except OSError:  # read anyway: its task reports why it cannot be read
            size_and_time = (-1, -1)
        if seen.get(str(segment.path)) != size_and_time:
            todo[str(segment.path)] = size_and_time
    if not todo:
        return None, {}
    ranges = [(path, start, end) for path, (size, _) in todo.items()
              for start, end in _ranges(split_points(Path(path), size, split_bytes))]
    ranges.sort(key=lambda r: (r[2] if r[2] is not None else todo[r[0]][0]) - r[1],
                reverse=True)
    return one_task_each(spark, ranges, SPLITS), todo


def _segment_sources(paths: Iterable[str]) -> dict[PartitionKey, str]:
    """The bronze partition each segment file writes, where its path names it (a loose file,
    or two files naming the same partition, are left out)."""
    named: dict[PartitionKey, list[str]] = {}
    for path in paths:
        segment = segment_of(Path(path))
        if segment.topic is not None and segment.partition is not None:
            named.setdefault((segment.topic, segment.partition, segment.base_offset or 0),
                             []).append(path)
    return {key: found[0] for key, found in named.items() if len(found) == 1}


SPLITS = pa.schema([("path", pa.string()), ("start", pa.int64()), ("end", pa.int64())])
"""An ingest task: a byte range of a segment file (`end` None: to its end)."""
PARTITION_FILES = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                             ("files", pa.list_(pa.string()))])
"""A replay task: an internal-topic partition's bronze files, in offset order."""


def one_task_each(spark: SparkSession, rows: list[tuple[Any, ...]],
                  schema: pa.Schema) -> DataFrame:
    """`rows` as a DataFrame of one partition per row, scheduled in list order (give the
    largest work first: the last tasks to start are then the short ones)."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, max(1, len(rows))),
                                 from_arrow_schema(schema))


def _ranges(starts: list[int]) -> list[tuple[int, int | None]]:
    return [(start, end) for start, end in zip(starts, [*starts[1:], None], strict=True)]


def _kafka_raw(spark: SparkSession, lake: Lake, warehouse: Warehouse, uri: str, full: bool,
               extra: dict[str, str]) -> tuple[DataFrame, str]:
    """The live cluster's records from where the last run's chunks began, and what a
    consumer cannot see."""
    from dataclasses import replace

    from pipelines.kafka_source import NAME, register
    from sharestate.sources import parse_options, plan_read
    from sharestate.sources.kafka_plan import KafkaPlan

    options = kafka_source_options(uri, extra)
    plan = plan_read(parse_options(options))
    covered = {} if full else _covered_offsets(lake, warehouse, uri)
    plan = KafkaPlan(plan.options, tuple(
        replace(r, start=min(r.end, max(r.start, bronze_rows.chunk_of(covered[key] + 1))))
        if (key := (r.topic, r.partition)) in covered else r for r in plan.ranges))
    register(spark)
    raw = spark.read.format(NAME).options(**options).options(**plan.offsets_options()).load()
    return raw, str(plan.metadata()["visibility"])


def kafka_source_options(uri: str, extra: dict[str, str]) -> dict[str, str]:
    """The live source's reader options for `kafka://host:port` and client settings."""
    return {"bootstrap.servers": uri[len(KAFKA_SCHEME):],
            "topics": f"{SHARE_STATE_TOPIC},{CONSUMER_OFFSETS_TOPIC}",
            **{f"kafka.{k}": v for k, v in extra.items()}}


def _covered_offsets(lake: Lake, warehouse: Warehouse, source: str
                     ) -> dict[tuple[str, int], int]:
    if _empty(lake, warehouse.path("ingest_runs")):
        return {}
    runs = lake.read(warehouse.path("ingest_runs")).where(
        (F.col("source") == source) & F.col("last_offset").isNotNull())
    return {(r["topic"], r["partition"]): r["last"] for r in
            runs.groupBy("topic", "partition").agg(F.max("last_offset").alias("last")).collect()}


Coverage = dict[tuple[str, int], dict[str, Any]]
"""What a run read, by (source, segment): topic, partition, first/last offset, records."""
PartitionKey = tuple[str, int, int]
"""A bronze partition: (topic, partition, segment)."""
Covered = tuple[Coverage, dict[tuple[str, int], int], list[dict[str, Any]]]
"""A run's coverage, its decode errors by (source, segment), and the decode_errors
partitions of earlier runs of the segments it read again (stale: their findings are gone)."""


def _write_bronze(spark: SparkSession, lake: Lake, warehouse: Warehouse, inputs: DataFrame,
                  produce: Produce, sizes: dict[str, tuple[int, int]], note: str | None,
                  run_id: str, report: RunReport, silver: bool,
                  sources: dict[PartitionKey, str] | str) -> None:
    """Write one input to the bronze (and with `silver` the silver) tables in one pass;
    record what the run covered. `sources`: the source of each bronze partition the input
    can write (or the one source of them all)."""
    meta = {"run": run_id, "note": note}
    names = ("log_records", "decode_errors", *(SILVER if silver else ()))
    before = _bronze_files(lake, warehouse)
    lake.overwrite_many(inputs, produce, {name: Target(warehouse.path(name)) for name in names},
                        metadata=meta)
    after = _bronze_files(lake, warehouse) if before is not None else None
    of_files = _coverage_of_files(before, after, sources) if before and after else None
    covered, counts, stale = of_files or _coverage_of_rows(lake, warehouse, run_id)
    if stale:  # a segment read again whose findings are gone loses the old ones
        lake.overwrite(lake.read(warehouse.path("decode_errors")).limit(0),
                       warehouse.path("decode_errors"), partitions=stale, metadata=meta)
    finished = int(time.time() * 1000)
    runs = [{"ingest_run": run_id, "job": "ingest", "source": c["source"],
             "source_kind": "kafka" if note else "segments", "topic": c["topic"],
             "partition": c["partition"], "segment": c["segment"],
             "first_offset": c["first_offset"], "last_offset": c["last_offset"],
             "bytes": sizes.get(c["source"], (None, None))[0], "records": c["records"],
             "findings": counts.get(key, 0),
             "modified_ms": sizes.get(c["source"], (None, None))[1], "note": note,
             "finished_at": finished} for key, c in covered.items()]
    if runs:
        lake.append(rows_table(runs, "ingest_runs"), warehouse.path("ingest_runs"),
                    metadata={**meta, "inputs": len(runs)})
    report.rows["log_records"] = report.rows.get("log_records", 0) + sum(
        c["records"] for c in covered.values())
    found = sum(counts.values())
    report.rows["decode_errors"] = report.rows.get("decode_errors", 0) + found
    report.findings += found


def _bronze_files(lake: Lake, warehouse: Warehouse) -> dict[str, list[ActiveFile]] | None:
    """The data files of `log_records` and `decode_errors` (None: the backend cannot list)."""
    listed = {}
    for name in ("log_records", "decode_errors"):
        files = lake.active_files(warehouse.path(name))
        if files is None:
            return None
        listed[name] = files
    return listed


def _coverage_of_files(before: dict[str, list[ActiveFile]], after: dict[str, list[ActiveFile]],
                       sources: dict[PartitionKey, str] | str) -> Covered | None:
    """What the run covered, from the statistics of the files it added (the files of a
    partition it wrote are all new: the run replaced them); None when a file's partition
    has no known source."""
    old = {f.uri for files in before.values() for f in files}

    def source(f: ActiveFile) -> tuple[str, int] | None:
        values = f.partition_values
        key = (str(values["topic"]), int(values["partition"]), int(values["segment"]))
        found = sources if isinstance(sources, str) else sources.get(key)
        return None if found is None else (found, key[2])

    covered: Coverage = {}
    counts: dict[tuple[str, int], int] = {}
    for name in ("log_records", "decode_errors"):
        for f in after[name]:
            if f.uri in old:
                continue
            where = source(f)
            if where is None:
                return None
            entry = covered.setdefault(where, {
                "source": where[0], "topic": f.partition_values["topic"],
                "partition": f.partition_values["partition"], "segment": where[1],
                "first_offset": None, "last_offset": None, "records": 0})
            if name == "decode_errors":
                counts[where] = counts.get(where, 0) + f.records
                continue
            entry["records"] += f.records
            low, high = f.min_values.get("offset"), f.max_values.get("offset")
            if low is not None:
                first = entry["first_offset"]
                entry["first_offset"] = low if first is None else min(first, low)
            if high is not None:
                last = entry["last_offset"]
                entry["last_offset"] = high if last is None else max(last, high)
    stale = []
    for f in after["decode_errors"]:
        if f.uri in old and (where := source(f)) is not None and where in covered:
            stale.append({c: f.partition_values[c] for c in ("topic", "partition", "segment")})
    return covered, counts, stale


def _coverage_of_rows(lake: Lake, warehouse: Warehouse, run_id: str) -> Covered:
    """What the run covered, read back from its rows (backends that cannot list files)."""
    written = lake.read(warehouse.path("log_records")).where(F.col("ingest_run") == run_id)
    covered = {(r["source"], r["segment"]): r.asDict() for r in written.groupBy(
        "source", "topic", "partition", "segment").agg(
        F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
        F.count(F.lit(1)).alias("records")).collect()}
    errors = lake.read(warehouse.path("decode_errors"))
    counts: dict[tuple[str, int], int] = {}
    for r in errors.groupBy("source", "topic", "partition", "segment", "ingest_run").count() \
            .collect():
        key = (r["source"], r["segment"])
        if r["ingest_run"] == run_id:
            counts[key] = r["count"]
            covered.setdefault(key, {"source": r["source"], "topic": r["topic"],
                                     "partition": r["partition"], "segment": r["segment"],
                                     "first_offset": None, "last_offset": None,
                                     "records": 0})
    # A segment read again whose findings are gone must lose the old ones.
    stale = [{"topic": r["topic"], "partition": r["partition"], "segment": r["segment"]}
             for r in errors.select("source", "topic", "partition", "segment", "ingest_run")
             .distinct().collect()
             if r["ingest_run"] != run_id and (r["source"], r["segment"]) in covered]
    return covered, counts, stale


def _empty(lake: Lake, path: str) -> bool:
    """Whether the table has no data files, known without a Spark query (else False)."""
    return lake.active_files(path) == []


def _ingested(lake: Lake, warehouse: Warehouse) -> dict[str, tuple[int, int]]:
    """(size, modified) of each segment as the latest ingest run that read it saw it."""
    if _empty(lake, warehouse.path("ingest_runs")):
        return {}
    runs = lake.read(warehouse.path("ingest_runs")).where(F.col("job") == "ingest")
    latest = runs.groupBy("source").agg(F.max(F.struct("finished_at", "bytes",
                                                         "modified_ms")).alias("last"))
    return {row["source"]: (row["last"]["bytes"], row["last"]["modified_ms"])
            for row in latest.collect()}


def rows_table(rows: list[dict[str, Any]], name: str) -> pa.Table:
    """Driver-side rows as an Arrow table of table `name`'s schema."""
    return pa.Table.from_pylist(rows, schema=table(name).arrow_schema())


# -- decode ------------------------------------------------------------------------------

SILVER = ("share_state_records", "group_records")


def decode(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           only_run: str | None = None) -> RunReport:
    """Bronze -> `share_state_records`, `group_records` (segments of `only_run`, or all),
    in one pass over bronze."""
    started = time.monotonic()
    lake = open_lake(spark)
    bronze = lake.read(warehouse.path("log_records"))
    if only_run is not None:
        bronze = bronze.where(F.col("ingest_run") == only_run)
    lake.overwrite_many(bronze, tasks.silver_tables,
                        {name: Target(warehouse.path(name)) for name in SILVER},
                        metadata={"run": run_id, "job": "decode"})
    report = RunReport("decode", run_id,
                       rows={name: table_rows(warehouse.path(name)) for name in SILVER})
    report.seconds = time.monotonic() - started
    return report


# -- replay ------------------------------------------------------------------------------


def _replay_inputs(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                   options: gold_replay.GoldOptions) -> tuple[DataFrame, Produce]:
    """The replay's input and task: one task per internal-topic partition reading its bronze
    files itself (no shuffle) where the backend lists them; else Spark reads, shuffles by
    (topic, partition) and sorts by offset."""
    from sharestate.tables.arrow_log import COLUMNS

    files = lake.active_files(warehouse.path("log_records"))
    if files is None:
        rows = lake.read(warehouse.path("log_records")).where(F.col("offset").isNotNull())
        ordered = rows.select("topic", "partition", "dialect", *COLUMNS).repartition(
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
    work = [(topic, partition, [f.uri for f in sorted(group, key=lambda f: (
        f.partition_values["segment"], f.min_values.get("offset") or 0))])
        for (topic, partition), group in largest_first]
    return (one_task_each(spark, work, PARTITION_FILES),
            partial(tasks.replay_partitions, options=options))


REPLAY_TABLES = ("share_partition_state_history", "share_partition_state",
                 "prune_recommendations", "consumer_group_offsets", "share_group_partitions",
                 "audit_findings")


def _drop_tables(produce: Produce, keep: Sequence[str]) -> Produce:
    """`produce`, yielding only the rows of the tables in `keep`."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
        return ((name, rows) for name, rows in produce(batches) if name in keep)

    return run


def replay(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           options: gold_replay.GoldOptions) -> RunReport:
    """Bronze -> the replayed gold tables and the log-derived audit findings, in one pass:
    every internal-topic partition replayed once, from the log start."""
    started = time.monotonic()
    lake = open_lake(spark)
    warehouse.create_all(lake)
    inputs, produce = _replay_inputs(spark, lake, warehouse, options)
    targets = {name: Target(warehouse.path(name), [{}]) for name in REPLAY_TABLES}
    targets["audit_findings"] = Target(warehouse.path("audit_findings"),
                                       [{"rule": rule} for rule in REPLAY_RULES])
    metadata = {"run": run_id, "job": "replay", "as_of": {"offset": options.as_of.offset,
                                                          "time": options.as_of.time},
                "semantics": options.semantics}
    lake.overwrite_many(inputs, _drop_tables(produce, REPLAY_TABLES), targets,
                        metadata=metadata)
    report = RunReport("replay", run_id, rows={name: table_rows(warehouse.path(name))
                                               for name in REPLAY_TABLES})
    audit = lake.read_arrow(warehouse.path("audit_findings"), ["rule", "severity"])
    report.findings = pc.sum(pc.and_(
        pc.is_in(audit["rule"], pa.array(REPLAY_RULES, pa.string())),
        pc.is_in(audit["severity"], pa.array(["warning", "error"])))).as_py() or 0
    report.seconds = time.monotonic() - started
    return report


_DETAIL = ("kind", "source", "segment", "position", "raw_length")


def _decode_error_findings(lake: Lake, warehouse: Warehouse) -> list[dict[str, Any]]:
    """One `decode_error` audit finding (severity error) per `decode_errors` row; the detail
    is the row's kind, source, segment, position and raw length as compact JSON (nulls left
    out). The raw bytes are not read."""
    errors = lake.read_arrow(warehouse.path("decode_errors"),
                             ["topic", "partition", "offset", "message", *_DETAIL])
    return [{"rule": "decode_error", "severity": "error", "topic": e["topic"],
             "partition": e["partition"], "offset": e["offset"],
             "message": f"{e['kind']}: {e['message']}",
             "detail_json": json.dumps({k: e[k] for k in _DETAIL if e[k] is not None},
                                       separators=(",", ":"), ensure_ascii=False)}
            for e in errors.to_pylist()]


# -- analytics ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AnalyticsInputs:
    """What the analytics job adds to the replayed state: end offsets for the lag."""

    end_offsets: dict[tuple[str, int], int] | None = None
    end_offset_source: str = FILE
    delivery_limit: int | None = None


def _analytics_task(batches: Iterator[pa.RecordBatch], names: dict[str, str],
                    inputs: AnalyticsInputs) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in batches:
        for context, states in states_from_rows(batch):
            yield gold_replay.rows_of("share_group_lag", list(lag_rows(
                states, context, end_offsets=inputs.end_offsets,
                end_offset_source=inputs.end_offset_source, names=names)))
            yield gold_replay.rows_of("redelivery", list(redelivery_rows(
                states, context, delivery_limit=inputs.delivery_limit)))


def analytics(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
              inputs: AnalyticsInputs) -> RunReport:
    """Gold state -> `share_group_lag`, `redelivery`, cross-topic `audit_findings`."""
    started = time.monotonic()
    lake = open_lake(spark)
    report = RunReport("analytics", run_id)
    metadata_table = lake.read_arrow(warehouse.path("share_group_partitions")).to_pylist()
    share_metadata = metadata_from_rows(metadata_table)
    names = {row["topic_id"]: row["topic_name"] for row in metadata_table}
    states = lake.read(warehouse.path("share_partition_state"))
    metadata = {"run": run_id, "job": "analytics"}
    derived = ("share_group_lag", "redelivery")
    lake.overwrite_many(states, partial(_analytics_task, names=names, inputs=inputs),
                        {name: Target(warehouse.path(name), [{}]) for name in derived},
                        metadata=metadata)
    report.rows.update({name: table_rows(warehouse.path(name)) for name in derived})
    keys = {ShareKey(r["group_id"], r["topic_id"], r["partition"]): r["state_partition"]
            for r in lake.read_arrow(warehouse.path("share_partition_state"), [
                "group_id", "topic_id", "partition", "state_partition"]).to_pylist()}
    rows = list(cross_topic_rows(share_metadata, keys))
    decode_findings = _decode_error_findings(lake, warehouse)
    audit = rows_table([*rows, *decode_findings], "audit_findings")
    lake.overwrite(audit, warehouse.path("audit_findings"),
                   partitions=[{"rule": rule} for rule in ANALYTICS_RULES], metadata=metadata)
    errors = len(decode_findings)
    report.rows["audit_findings"] = len(rows) + errors
    report.findings = errors + sum(r["severity"] in ("warning", "error") for r in rows)
    report.seconds = time.monotonic() - started
    return report

