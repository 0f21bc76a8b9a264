"""The analytics job: the replayed state -> `share_group_lag`, `redelivery` and the
cross-topic `audit_findings` (orphaned, uninitialised, stuck-deleting share-partitions), plus
one `decode_error` finding per `decode_errors` row; recomputed and replaced on every run.

Lag through time: the data topics' end offsets at the sampled state-change times
(`sharestate.analytics.end_offsets`) from the run's sources are merged into
`topic_end_offsets` (earlier runs' rows kept), and `share_group_lag_history` walks the
history and that table, each group's rows in time order in one task, going on from the
walks the last run saved in `lag_state` (`sharestate.analytics.lag_state`)."""

from __future__ import annotations

import heapq
import json
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.util import inheritable_thread_target

from sharestate.analytics.audit import (
    DECODE_ERROR_DETAIL,
    cross_topic_rows,
    decode_error_row,
    rules_of,
)
from sharestate.analytics.end_offset_sources import file_rows, observe, unanswered
from sharestate.analytics.end_offsets import Timeline, Where, merge_rows, sample_times, timelines
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.lag_bins import (
    BIN_ROWS,
    WALK_BINS,
    bin_inputs,
    bins_for,
    group_rows,
)
from sharestate.analytics.lag_history import (
    HISTORY_COLUMNS,
    HISTORY_FILES,
    INPUT_ORDER,
    INPUT_SCHEMA,
    GroupState,
    lag_input_batches,
    read_history_files,
)
from sharestate.analytics.lag_state import (
    Resume,
    ends_allow,
    history_allows,
    resume_point,
    state_row,
)
from sharestate.analytics.lag_walk import walk_batches
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.share_state import ShareKey
from sharestate.lake import ActiveFile, Lake, TablePath, Target, open_lake
from sharestate.lake.delta_log import data_changes
from sharestate.spark.jobs.warehouse import (
    RunReport,
    TaskRows,
    Warehouse,
    rows_table,
    table_rows,
)
from sharestate.spark.session import LAG_BIN_SETTING
from sharestate.tables.gold import states_from_rows
from sharestate.tables.gold_pass import rows_of
from sharestate.tables.metadata import metadata_from_rows
from sharestate.tables.spec import table

RULES = rules_of("analytics")
"""The `audit_findings` rules this job owns (it replaces their partitions)."""
HISTORY_VIEW = "share_partition_state_history"
CONSUMERS = f"SELECT DISTINCT group_id, topic_id, partition FROM {HISTORY_VIEW}"
GROUP_TIMES = f"""SELECT DISTINCT group_id, timestamp FROM {HISTORY_VIEW}
                  WHERE timestamp IS NOT NULL"""
BATCH_ROWS = 10_000
Read = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
"""How a task makes its history rows of its input batches."""


def _decode_error_findings(lake: Lake, warehouse: Warehouse) -> list[dict[str, Any]]:
    """One `decode_error` audit finding per `decode_errors` row (the raw bytes not read)."""
    errors = lake.read_arrow(warehouse.path("decode_errors"),
                             ["topic", "partition", "offset", "message", *DECODE_ERROR_DETAIL])
    return [decode_error_row(e) for e in errors.to_pylist()]


@dataclass(frozen=True)
class AnalyticsInputs:
    """What the analytics job adds to the replayed state: end offsets for the lag."""

    end_offsets: dict[tuple[str, int], int] | None = None
    end_offset_source: str = FILE
    delivery_limit: int | None = None
    end_offsets_file: str | None = None
    """The file `end_offsets` came from: its rows go into `topic_end_offsets`."""
    end_offsets_from: tuple[str, ...] = ()
    """Sources of end offsets through time (`end_offset_sources.observe`)."""
    kafka_options: Mapping[str, str] = field(default_factory=dict)


def _analytics_task(batches: Iterator[pa.RecordBatch], names: dict[str, str],
                    inputs: AnalyticsInputs) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in batches:
        for context, states in states_from_rows(batch):
            yield rows_of("share_group_lag", list(lag_rows(
                states, context, end_offsets=inputs.end_offsets,
                end_offset_source=inputs.end_offset_source, names=names)))
            yield rows_of("redelivery", list(redelivery_rows(
                states, context, delivery_limit=inputs.delivery_limit)))


def _sampled_times(spark: SparkSession) -> dict[Where, list[int]]:
    """The times each data partition is asked for (the history registered as a view)."""
    consumers: dict[Where, set[str]] = {}
    for r in spark.sql(CONSUMERS).collect():
        consumers.setdefault((r["topic_id"], r["partition"]), set()).add(r["group_id"])
    times = spark.sql(GROUP_TIMES).toArrow()
    group_times: dict[str, list[int]] = {}
    for group, stamp in zip(times.column("group_id").to_pylist(),
                           times.column("timestamp").to_pylist(), strict=True):
        group_times.setdefault(group, []).append(stamp)
    return sample_times(consumers, group_times)


def _end_offsets(spark: SparkSession, lake: Lake, warehouse: Warehouse, inputs: AnalyticsInputs,
                 names: dict[str, str], metadata: dict[str, str], notes: list[str]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Observe the sources at the sampled times (`notes` gets what a source left
    unanswered); merge into `topic_end_offsets`. The table's rows before and after."""
    wanted = _sampled_times(spark) if inputs.end_offsets_from else {}
    new: list[dict[str, Any]] = []
    for source in inputs.end_offsets_from:
        found = observe(source, wanted, names=names, kafka_options=inputs.kafka_options)
        notes.extend(unanswered(source, wanted, found, names))
        new += found
    if inputs.end_offsets_file is not None and inputs.end_offsets:
        new += file_rows(inputs.end_offsets_file, inputs.end_offsets, names)
    path = warehouse.path("topic_end_offsets")
    old = lake.read_arrow(path).to_pylist()
    rows = merge_rows(old, new)
    if rows != old:
        lake.overwrite(rows_table(rows, "topic_end_offsets"), path, metadata=metadata)
    return old, rows


PROVISIONAL = "share_group_lag_history (provisional)"
"""The write target of the lag rows from the horizon on: the same table, files of their own
(the next run drops them by their statistics and writes them again)."""


@dataclass(frozen=True)
class _Walk:
    """What the lag-history tasks need besides their rows."""

    lines: dict[Where, Timeline]
    names: dict[str, str]
    run_id: str
    history_version: int
    horizon: int | None
    read: Read | None = None
    """What makes the task's history rows of its input (None: the input is the rows)."""


def _lag_history_task(batches: Iterator[pa.RecordBatch], walk: _Walk
                      ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """History rows of whole groups in `INPUT_ORDER` (a group's `lag_state` row, as JSON in
    `resume`, first) -> `share_group_lag_history` rows (those from the horizon on apart) and
    each group's `lag_state` row."""
    states: list[dict[str, Any]] = []
    schema = table("share_group_lag_history").arrow_schema()
    rows = batches if walk.read is None else walk.read(batches)
    for item in walk_batches(rows, walk.lines, walk.names, walk.horizon, schema):
        if isinstance(item, GroupState):
            states.append(state_row(item, walk.names, walk.run_id, walk.history_version,
                                    walk.horizon))
            if len(states) >= BATCH_ROWS:
                yield rows_of("lag_state", states)
                states = []
        elif walk.horizon is None:
            yield "share_group_lag_history", item
        else:
            late = pc.greater_equal(item.column("time"), walk.horizon)
            for name, rows in ((PROVISIONAL, item.filter(late)),
                               ("share_group_lag_history", item.filter(pc.invert(late)))):
                if rows.num_rows:
                    yield name, rows
    if states:
        yield rows_of("lag_state", states)


def _horizon(files: list[ActiveFile] | None) -> int | None:
    """The earliest of the state partitions' latest record times (None: the files are not
    listed, or hold no time)."""
    latest: dict[Any, int] = {}
    for f in files or ():
        stamp = f.max_values.get("timestamp")
        if f.records and stamp is not None:
            key = f.partition_values.get("state_partition")
            latest[key] = max(latest.get(key, stamp), stamp)
    return min(latest.values()) if latest else None


def _resume(lake: Lake, warehouse: Warehouse, ends: tuple[list[dict[str, Any]],
                                                          list[dict[str, Any]]],
            names: dict[str, str], now: list[ActiveFile] | None
            ) -> tuple[Resume, list[ActiveFile]] | None:
    """The walks this run goes on from (`lag_state`) and the history files holding rows
    after the last moment they kept, or None: every group is walked from the start."""
    resume = resume_point(lake.read_arrow(warehouse.path("lag_state")).to_pylist(), names)
    ids = {name: topic_id for topic_id, name in names.items()}
    if resume is None or now is None or not ends_allow(*ends, resume.since, ids):
        return None
    try:
        then = lake.active_files(warehouse.path(HISTORY_VIEW), resume.history_version)
    except ValueError:  # a version the log no longer holds
        return None
    if then is None:
        return None
    changed = data_changes(warehouse.path(HISTORY_VIEW), resume.history_version, then)
    if changed is None or not history_allows([m.get("timestamp") for m in changed],
                                             resume.since):
        return None
    lag = lake.active_files(warehouse.path("share_group_lag_history")) or []
    if any(f.records and f.min_values.get("time", resume.since) <= resume.since
           < f.max_values.get("time", resume.since) for f in lag):
        return None  # a file holds rows on both sides: not one a walk wrote
    recent = [f for f in now
              if f.records and (f.max_values.get("timestamp") or resume.since) > resume.since]
    return (resume, recent) if recent else None


def _walk_input(spark: SparkSession, lake: Lake, history: TablePath,
                files: list[ActiveFile] | None, since: int | None) -> DataFrame:
    """The walk's input (`lag_history.INPUT_SCHEMA`) from the history rows stamped after
    `since` (None: every row): tasks read the data files `files` themselves, their rows
    spread over the cores by count, where the backend lists them; else Spark reads the
    table (every file)."""
    schema = from_arrow_schema(INPUT_SCHEMA)
    if files is None:
        rows = lake.read(history).select(*HISTORY_COLUMNS)
        if since is not None:
            rows = rows.where(rows["timestamp"] > since)
        return rows.mapInArrow(lag_input_batches, schema)
    bins: list[tuple[int, int, list[str], list[int]]] = [  # records, index, files
        (0, i, [], []) for i in range(max(1, spark.sparkContext.defaultParallelism * 2))]
    for f in sorted(files, key=lambda f: -f.records):
        records, i, uris, partitions = heapq.heappop(bins)
        uris.append(f.uri)
        partitions.append(int(f.partition_values["state_partition"]))
        heapq.heappush(bins, (records + f.records, i, uris, partitions))
    tasks = [(uris, partitions) for _, _, uris, partitions in sorted(bins, reverse=True)
             if uris] or [([], [])]
    return TaskRows.of(spark, tasks, HISTORY_FILES).mapInArrow(
        partial(read_history_files, wanted=table(HISTORY_VIEW).arrow_schema(), since=since),
        schema)


def _walk_bins(spark: SparkSession, files: list[ActiveFile], since: int | None,
               saved: Mapping[str, str]) -> tuple[TaskRows, Read] | None:
    """The walk's tasks with no shuffle (`sharestate.analytics.lag_bins`): one a bin of
    groups, which reads the data files `files` (rows stamped after `since`), and what makes
    its input of a task (its groups' rows, each group's saved walk in `saved` first); None
    when the bins `bins_for` allows cannot hold them (`spark.sharestate.lagBinRows` rows
    each, what a task sorts in memory)."""
    read = [f for f in files if f.records]
    counts = group_rows(f.uri for f in read)
    counts.update(dict.fromkeys(saved, 0))
    limit = int((spark.conf.get(LAG_BIN_SETTING, None) or str(BIN_ROWS)).strip())
    bins = bins_for(counts, spark.sparkContext.defaultParallelism, limit)
    if bins is None:
        return None
    uris = [f.uri for f in read]
    partitions = [int(f.partition_values["state_partition"]) for f in read]
    tasks = [(groups, [saved.get(g) for g in groups], uris, partitions) for groups in bins]
    wanted = table(HISTORY_VIEW).arrow_schema()
    return (TaskRows.of(spark, tasks or [([], [], [], [])], WALK_BINS),
            partial(bin_inputs, wanted=wanted, since=since))


def _shuffled(spark: SparkSession, lake: Lake, history: TablePath,
              files: list[ActiveFile] | None, since: int | None, saved: Mapping[str, str]
              ) -> DataFrame:
    """The walk's input by Spark: the history rows stamped after `since` (`_walk_input`)
    and the saved walks `saved`, each group's in one task and in `INPUT_ORDER`."""
    from pyspark.sql import functions as F

    rows = _walk_input(spark, lake, history, files, since).withColumn(
        "resume", F.lit(None).cast("string"))
    if saved:
        rows = rows.unionByName(spark.createDataFrame(
            list(saved.items()), "group_id string, resume string"), allowMissingColumns=True)
    return rows.repartition("group_id").sortWithinPartitions(*INPUT_ORDER)


def _lag_history(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                 ends: tuple[list[dict[str, Any]], list[dict[str, Any]]],
                 names: dict[str, str], run_id: str, metadata: dict[str, str]) -> None:
    """`share_group_lag_history` and `lag_state` (`sharestate.analytics.lag_state`): each
    group's walk goes on from its `lag_state` row over the history rows after the last
    moment it kept, rewriting the provisional rows, when nothing before has changed; else
    every group is walked from the start and both tables replaced."""
    history = warehouse.path(HISTORY_VIEW)
    version = lake.version(history)
    files = lake.active_files(history)
    found = _resume(lake, warehouse, ends, names, files)
    lag_path = warehouse.path("share_group_lag_history")
    since, read, saved = None, files, {}
    kept = Target(lag_path, [{}])
    if found is not None:
        resume, read = found
        since, saved = resume.since, {row["group_id"]: json.dumps(row) for row in resume.states}
        kept = Target(lag_path, [], drop=[{"time": (">", since)}], appends=True)
    binned = None if read is None else _walk_bins(spark, read, since, saved)
    rows, reader = binned or (_shuffled(spark, lake, history, read, since, saved), None)
    horizon = _horizon(files)
    ids = {name: topic_id for topic_id, name in names.items()}
    walk = _Walk(timelines(ends[1], ids), names, run_id, version, horizon, reader)
    targets = {"share_group_lag_history": kept,
               **({} if horizon is None else {PROVISIONAL: Target(lag_path, [], appends=True,
                                                                  last=True)}),
               "lag_state": Target(warehouse.path("lag_state"), [{}], last=True)}
    lake.overwrite_many(rows, partial(_lag_history_task, walk=walk), targets,
                        metadata=metadata)


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
    # the lag now and the redeliveries, a small job, beside the lag history's planning
    with ThreadPoolExecutor(1) as beside:
        now = beside.submit(inheritable_thread_target(spark)(lake.overwrite_many), states,
                            partial(_analytics_task, names=names, inputs=inputs),
                            {name: Target(warehouse.path(name), [{}]) for name in derived},
                            metadata=metadata)
        for name in ("topic_end_offsets", "share_group_lag_history", "lag_state"):  # older
            warehouse.create(lake, name)                                          # warehouses
        lake.read(warehouse.path(HISTORY_VIEW)).createOrReplaceTempView(HISTORY_VIEW)
        ends = _end_offsets(spark, lake, warehouse, inputs, names, metadata, report.notes)
        _lag_history(spark, lake, warehouse, ends, names, run_id, metadata)
        now.result()
    report.rows.update({name: table_rows(warehouse.path(name)) for name in (
        *derived, "topic_end_offsets", "share_group_lag_history")})
    keys = {ShareKey(r["group_id"], r["topic_id"], r["partition"]): r["state_partition"]
            for r in lake.read_arrow(warehouse.path("share_partition_state"), [
                "group_id", "topic_id", "partition", "state_partition"]).to_pylist()}
    rows = list(cross_topic_rows(share_metadata, keys))
    decode_findings = _decode_error_findings(lake, warehouse)
    audit = rows_table([*rows, *decode_findings], "audit_findings")
    lake.overwrite(audit, warehouse.path("audit_findings"),
                   partitions=[{"rule": rule} for rule in RULES], metadata=metadata)
    errors = len(decode_findings)
    report.rows["audit_findings"] = len(rows) + errors
    report.findings = errors + sum(r["severity"] in ("warning", "error") for r in rows)
    report.seconds = time.monotonic() - started
    return report

