"""The ingest job: segment files (split by file, on executors) or a live cluster -> bronze
`log_records` + `decode_errors` (and with the decode job in the same run, the silver tables
too); what each run read is recorded in `ingest_runs`. A re-run replaces the (topic,
partition, segment) partitions it reads and skips segments unchanged since the last run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharestate.cluster.kafka_options import KAFKA_SCHEME, source_options
from sharestate.lake import ActiveFile, Inputs, Lake, Produce, Target, open_lake
from sharestate.log import (
    DEFAULT_LIMITS,
    ReadLimits,
    Segment,
    SourceError,
    SourceUnavailable,
    discover,
    segment_of,
)
from sharestate.log.index import split_points
from sharestate.replay.logs import checkpointed_starts, loose_logs
from sharestate.replay.loose_partitions import loose_partitions
from sharestate.spark.jobs.warehouse import (
    SILVER,
    RunReport,
    TaskRows,
    Warehouse,
    rows_table,
    table_rows,
)
from sharestate.tables import bronze as bronze_rows
from sharestate.tables import log_changes, tasks
from sharestate.tables.runs import ingest_run_row, log_start_row

if TYPE_CHECKING:
    from sharestate.cluster.kafka_plan import KafkaPlan


def ingest(spark: SparkSession, warehouse: Warehouse, sources: Sequence[str], *,
           segments: Sequence[Segment] | None = None,
           run_id: str, full: bool = False, kafka_options: dict[str, str] | None = None,
           connect_timeout: float | None = None,
           silver: bool = False, limits: ReadLimits = DEFAULT_LIMITS,
           executors: str | None = None) -> RunReport:
    """Segment files or a live cluster (`kafka://host:port`) -> `log_records`,
    `decode_errors`, `ingest_runs`; with `silver`, also the decode job's tables for the
    same segments (`run_all` does this: bronze is then not read back to decode it).
    `executors` (native, pure, mixed: their kernels) goes into each commit's metadata.
    `segments` are the file sources' segments as `discover` found them (None: found here).
    A live cluster that does not answer its read's planning within `connect_timeout`
    seconds (None: the reader's `timeoutMs`) is a `SourceError`.

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
    starts: list[dict[str, Any]] = []
    if files:
        if segments is None:
            segments = discover(files)
        splits, sizes, numbers = _segment_splits(spark, lake, warehouse, segments, full,
                                                 report)
        if splits is not None:
            _write_bronze(spark, lake, warehouse, splits,
                          partial(tasks.ingest_splits, run_id=run_id, silver=silver,
                                  limits=limits), sizes,
                          {"run": run_id, "note": None, "executors": executors}, report,
                          silver, _segment_sources(sizes, numbers))
        read_at = int(time.time() * 1000)
        starts.extend(log_start_row(run_id, str(root), where, offset, read_at)
                      for where, (root, offset) in sorted(checkpointed_starts(segments).items()))
    for uri in live:
        raw, plan = _kafka_raw(spark, lake, warehouse, uri, full, kafka_options or {},
                               connect_timeout)
        report.notes.extend(f"{uri}: topic {topic} is not in the cluster (Kafka creates it "
                            f"when first used), or the client may not see it (a principal "
                            f"needs Describe on it): nothing to read"
                            for topic in plan.absent_topics)
        _write_bronze(spark, lake, warehouse, raw,
                      partial(tasks.ingest_consumed, run_id=run_id, source=uri, silver=silver,
                              limits=limits),
                      {}, {"run": run_id, "note": str(plan.metadata()["visibility"]),
                           "executors": executors}, report, silver, uri)
        read_at = int(time.time() * 1000)
        starts.extend(log_start_row(run_id, uri, where, offset, read_at)
                      for where, offset in sorted(plan.log_starts.items()))
    if starts:  # Kafka's log starts as read: the replay reads each partition from its start
        lake.append(rows_table(starts, "log_start_offsets"), warehouse.path("log_start_offsets"),
                    metadata={"run": run_id, "executors": executors})
    if silver:
        report.rows.update({name: table_rows(warehouse.path(name)) for name in SILVER})
    report.seconds = time.monotonic() - started
    return report


SPLIT_BYTES = 64 << 20
"""Segments larger than this are read in several tasks where an offset index allows."""


def _segment_splits(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                    segments: Sequence[Segment], full: bool, report: RunReport,
                    split_bytes: int = SPLIT_BYTES
                    ) -> tuple[TaskRows | None, dict[str, tuple[int, int]], Numbers]:
    """The splits of the new or changed segments (one per file, or per byte range between
    offset-index positions for large segments), one task each; what they read; and the
    topic and partition of each loose segment (`loose_partitions`)."""
    ingested = _ingested(lake, warehouse)
    seen = {} if full else {path: size for path, (size, _) in ingested.items()}
    numbers = loose_partitions(loose_logs(segments), {
        path: place for path, (_, place) in ingested.items() if place[1] < 0})
    moved = {numbers[path][0] for path, (_, place) in ingested.items()
             if path in numbers and numbers[path] != place}
    todo: dict[str, tuple[int, int]] = {}
    for segment in segments:
        path = str(segment.path)
        try:
            stat = segment.path.stat()
            size_and_time = (stat.st_size, int(stat.st_mtime * 1000))
        except OSError:  # read anyway: its task reports why it cannot be read
            size_and_time = (-1, -1)
        if seen.get(path) != size_and_time or (path in numbers and numbers[path][0] in moved):
            todo[path] = size_and_time
    for topic, logs in _numbered(numbers).items():
        if len(logs) > 1:
            report.notes.append(f"{topic}: {len(logs)} logs name no partition; the tables "
                                "know them as " + ", ".join(
                                    f"partition {p} ({path})" for p, path in sorted(
                                        logs.items(), reverse=True)))
    if not todo:
        return None, {}, numbers
    ranges = [(path, start, end, numbers.get(path, (None, None))[1])
              for path, (size, _) in todo.items()
              for start, end in _ranges(split_points(Path(path), size, split_bytes))]
    ranges.sort(key=lambda r: (r[2] if r[2] is not None else todo[r[0]][0]) - r[1],
                reverse=True)
    return TaskRows.of(spark, ranges, tasks.SPLITS), todo, numbers


Numbers = dict[str, tuple[str, int]]
"""The (topic, partition) of each loose segment file (`loose_partitions`)."""


def _numbered(numbers: Numbers) -> dict[str, dict[int, str]]:
    """Each topic's loose logs: partition -> the first path of the log."""
    logs: dict[str, dict[int, str]] = {}
    for path, (topic, partition) in sorted(numbers.items()):
        logs.setdefault(topic, {}).setdefault(partition, path)
    return logs


def _segment_sources(paths: Iterable[str], numbers: Numbers) -> dict[PartitionKey, str]:
    """The bronze partition each segment file writes, where its path names it or it is
    loose (`numbers`); two files naming the same partition are left out."""
    named: dict[PartitionKey, list[str]] = {}
    for path in paths:
        segment = segment_of(Path(path))
        topic, partition = numbers.get(path, (segment.topic, segment.partition))
        if topic is not None and partition is not None:
            named.setdefault((topic, partition, segment.base_offset or 0), []).append(path)
    return {key: found[0] for key, found in named.items() if len(found) == 1}


def _ranges(starts: list[int]) -> list[tuple[int, int | None]]:
    return [(start, end) for start, end in zip(starts, [*starts[1:], None], strict=True)]


def _kafka_raw(spark: SparkSession, lake: Lake, warehouse: Warehouse, uri: str, full: bool,
               extra: dict[str, str], timeout: float | None) -> tuple[DataFrame, KafkaPlan]:
    """The live cluster's records from where the last run's chunks began (with bronze's rows
    of them below a log start that moved into them: `_below_log_start`), and the plan read
    (what a consumer cannot see, each partition's log start)."""
    from dataclasses import replace

    from sharestate.cluster import KafkaSourceError, parse_options, plan_read
    from sharestate.cluster.kafka_plan import ClusterNotReady
    from sharestate.spark.kafka_source import NAME, register

    options = source_options(uri, extra)
    asked = options if timeout is None else {
        **options, "timeoutMs": str(max(1, round(timeout * 1000)))}
    try:
        plan = plan_read(parse_options(asked))
    except KafkaSourceError as exc:  # it answered before the session started, not now
        kind = SourceUnavailable if isinstance(exc, ClusterNotReady) else SourceError
        raise kind(str(exc)) from None
    covered = {} if full else _covered_offsets(lake, warehouse, uri)
    plan = replace(plan, ranges=tuple(
        replace(r, start=min(r.end, max(r.start, bronze_rows.chunk_of(covered[key] + 1))))
        if (key := (r.topic, r.partition)) in covered else r for r in plan.ranges))
    register(spark)
    raw = spark.read.format(NAME).options(**options).options(**plan.offsets_options()).load()
    kept = _below_log_start(lake, warehouse, uri, plan)
    return (raw if kept is None else raw.unionByName(kept)), plan


def _below_log_start(lake: Lake, warehouse: Warehouse, source: str, plan: KafkaPlan
                     ) -> DataFrame | None:
    """Bronze's rows of the chunks the plan reads again from past their first offset (Kafka's
    log start moved into them: deleteRecords), below where it reads, in the raw schema:
    written again with the chunk, they stay in bronze as a segment Kafka deleted does, and
    a replay going on from its state still finds what the moved start forgot (None: none)."""
    from sharestate.spark.kafka_source import RAW_STRUCT

    below = [(r.topic, r.partition, first, r.start) for r in plan.ranges
             if r.start < r.end and (first := bronze_rows.chunk_of(r.start)) < r.start]
    if not below or _empty(lake, warehouse.path("log_records")):
        return None
    rows = lake.read(warehouse.path("log_records")).where(
        (F.col("source") == source) & F.col("offset").isNotNull())
    wanted = F.lit(False)
    for topic, partition, first, start in below:
        wanted = wanted | ((F.col("topic") == topic) & (F.col("partition") == partition)
                           & (F.col("segment") == first) & (F.col("offset") < start))
    return rows.where(wanted).select(*(
        F.lit(None).cast(f.dataType).alias(f.name) if f.name == "headers"
        else F.col(f.name).cast(f.dataType) for f in RAW_STRUCT.fields)).sortWithinPartitions(
        "topic", "partition", "offset")



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


def _write_bronze(spark: SparkSession, lake: Lake, warehouse: Warehouse, inputs: Inputs,
                  produce: Produce, sizes: dict[str, tuple[int, int]],
                  meta: dict[str, str | None], report: RunReport, silver: bool,
                  sources: dict[PartitionKey, str] | str) -> None:
    """Write one input to the bronze (and with `silver` the silver) tables in one pass;
    record what the run covered. `meta`: the commits' metadata (the run id, what a live
    source cannot see as `note`); `sources`: the source of each bronze partition the input
    can write (or the one source of them all)."""
    run_id, note = str(meta["run"]), meta["note"]
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
    runs = [ingest_run_row(run_id, c, findings=counts.get(key, 0), note=note,
                           size_and_time=sizes.get(c["source"], (None, None)),
                           finished_at=finished) for key, c in covered.items()]
    if before is not None and after is not None:
        runs.extend(_went_back(before["log_records"], after["log_records"], covered, sizes,
                               run_id, finished, report))
    if runs:
        lake.append(rows_table(runs, "ingest_runs"), warehouse.path("ingest_runs"),
                    metadata={**meta, "inputs": len(runs)})
    report.rows["log_records"] = report.rows.get("log_records", 0) + sum(
        c["records"] for c in covered.values())
    found = sum(counts.values())
    report.rows["decode_errors"] = report.rows.get("decode_errors", 0) + found
    report.findings += found


def _went_back(before: list[ActiveFile], after: list[ActiveFile], covered: Coverage,
               sizes: dict[str, tuple[int, int]], run_id: str, finished: int,
               report: RunReport) -> list[dict[str, Any]]:
    """The `ingest_runs` rows of the partitions whose log went back (`log_changes`): what
    the run read contradicts what bronze held. Each is said on stderr too."""
    old = {f.uri for f in before}
    new = {f.uri for f in after}
    data = {f.uri: d for f in [*before, *after] if (d := _bronze_data(f)) is not None}
    found = log_changes.changes([d for uri, d in data.items() if uri not in old],
                                [d for uri, d in data.items() if uri in old],
                                [d for uri, d in data.items() if uri in old and uri not in new])
    by_segment = {(c["topic"], c["partition"], c["segment"]): c for c in covered.values()}
    rows = []
    for change in found:
        read = by_segment.get((change.topic, change.partition, change.segment))
        source = read["source"] if read else ""
        rows.append(ingest_run_row(
            run_id, {"source": source, "topic": change.topic, "partition": change.partition,
                     "segment": change.segment, "first_offset": change.offset,
                     "last_offset": None, "records": 0}, findings=0,
            size_and_time=sizes.get(source, (None, None)),
            note=log_changes.went_back_note(change), finished_at=finished))
        report.notes.append(f"{change.topic}-{change.partition}: "
                            f"{log_changes.went_back_note(change)}; the partition is replayed "
                            f"from its log start, without what was read of the log before")
    return rows


def _bronze_data(f: ActiveFile) -> log_changes.BronzeData | None:
    low, high = f.min_values.get("offset"), f.max_values.get("offset")
    if not f.records or low is None or high is None:
        return None
    values = f.partition_values
    return log_changes.BronzeData(f.uri, str(values["topic"]), int(values["partition"]),
                                  int(values["segment"]), int(low), int(high))


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


def _ingested(lake: Lake, warehouse: Warehouse
              ) -> dict[str, tuple[tuple[int, int], tuple[str, int]]]:
    """((size, modified), (topic, partition)) of each segment as the latest ingest run that
    read it saw it."""
    if _empty(lake, warehouse.path("ingest_runs")):
        return {}
    runs = lake.read(warehouse.path("ingest_runs")).where(F.col("job") == "ingest")
    latest = runs.groupBy("source").agg(F.max(F.struct(
        "finished_at", "bytes", "modified_ms", "topic", "partition")).alias("last"))
    return {row["source"]: ((row["last"]["bytes"], row["last"]["modified_ms"]),
                            (row["last"]["topic"], row["last"]["partition"]))
            for row in latest.collect()}
