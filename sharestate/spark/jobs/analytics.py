"""The analytics job: the replayed state -> `share_group_lag`, `redelivery` and the
cross-topic `audit_findings` (orphaned, uninitialised, stuck-deleting share-partitions), plus
one `decode_error` finding per `decode_errors` row; recomputed and replaced on every run.

Lag through time: the data topics' end offsets at the sampled state-change times
(`sharestate.analytics.end_offsets`) from the run's sources are merged into
`topic_end_offsets` (earlier runs' rows kept), and `share_group_lag_history` is recomputed
from the history and that table, one task per group's rows in time order."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from sharestate.analytics.audit import (
    DECODE_ERROR_DETAIL,
    cross_topic_rows,
    decode_error_row,
    rules_of,
)
from sharestate.analytics.end_offset_sources import file_rows, observe
from sharestate.analytics.end_offsets import Timeline, Where, merge_rows, sample_times, timelines
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.lag_history import (
    HISTORY_INPUT,
    INPUT_ORDER,
    HistoryRow,
    LagRow,
    lag_history_rows,
)
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.share_state import ShareKey
from sharestate.lake import Lake, Target, open_lake
from sharestate.spark.jobs.warehouse import RunReport, Warehouse, rows_table, table_rows
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
                 names: dict[str, str], metadata: dict[str, str]) -> list[dict[str, Any]]:
    """Observe the sources at the sampled times; merge into `topic_end_offsets`."""
    wanted = _sampled_times(spark) if inputs.end_offsets_from else {}
    new = [row for source in inputs.end_offsets_from
           for row in observe(source, wanted, names=names, kafka_options=inputs.kafka_options)]
    if inputs.end_offsets_file is not None and inputs.end_offsets:
        new += file_rows(inputs.end_offsets_file, inputs.end_offsets, names)
    path = warehouse.path("topic_end_offsets")
    rows = merge_rows(lake.read_arrow(path).to_pylist(), new)
    lake.overwrite(rows_table(rows, "topic_end_offsets"), path, metadata=metadata)
    return rows


def _lag_history_task(batches: Iterator[pa.RecordBatch], lines: dict[Where, Timeline],
                      names: dict[str, str]) -> Iterator[tuple[str, pa.RecordBatch]]:
    schema = table("share_group_lag_history").arrow_schema()
    rows = (HistoryRow._make(row) for batch in batches for row in zip(
        *(batch.column(name).to_pylist() for name in HistoryRow._fields), strict=True))
    chunk: list[LagRow] = []
    for row in lag_history_rows(rows, lines, names):
        chunk.append(row)
        if len(chunk) >= BATCH_ROWS:
            yield "share_group_lag_history", _columns(chunk, schema)
            chunk = []
    if chunk:
        yield "share_group_lag_history", _columns(chunk, schema)


def _columns(rows: list[LagRow], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(column, field.type) for column, field in zip(
        zip(*rows, strict=True), schema, strict=True)], schema=schema)


def _lag_history(spark: SparkSession, lake: Lake, warehouse: Warehouse,
                 end_offsets: list[dict[str, Any]], names: dict[str, str],
                 metadata: dict[str, str]) -> None:
    """Recompute `share_group_lag_history` (the history registered as a view)."""
    lines = timelines(end_offsets, {name: topic_id for topic_id, name in names.items()})
    rows = spark.sql(HISTORY_INPUT)
    rows = rows.repartition(rows.rdd.getNumPartitions() or 1, "group_id") \
        .sortWithinPartitions(*INPUT_ORDER)
    path = warehouse.path("share_group_lag_history")
    lake.overwrite_many(rows, partial(_lag_history_task, lines=lines, names=names),
                        {"share_group_lag_history": Target(path, [{}])}, metadata=metadata)


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
    for name in ("topic_end_offsets", "share_group_lag_history"):  # older warehouses
        warehouse.create(lake, name)
    lake.read(warehouse.path(HISTORY_VIEW)).createOrReplaceTempView(HISTORY_VIEW)
    end_offsets = _end_offsets(spark, lake, warehouse, inputs, names, metadata)
    _lag_history(spark, lake, warehouse, end_offsets, names, metadata)
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

