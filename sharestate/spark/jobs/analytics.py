"""The analytics job: the replayed state -> `share_group_lag`, `redelivery` and the
cross-topic `audit_findings` (orphaned, uninitialised, stuck-deleting share-partitions), plus
one `decode_error` finding per `decode_errors` row; recomputed and replaced on every run."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
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
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.share_state import ShareKey
from sharestate.lake import Lake, Target, open_lake
from sharestate.spark.jobs.warehouse import RunReport, Warehouse, rows_table, table_rows
from sharestate.tables.gold import states_from_rows
from sharestate.tables.gold_pass import rows_of
from sharestate.tables.metadata import metadata_from_rows

RULES = rules_of("analytics")
"""The `audit_findings` rules this job owns (it replaces their partitions)."""


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


def _analytics_task(batches: Iterator[pa.RecordBatch], names: dict[str, str],
                    inputs: AnalyticsInputs) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in batches:
        for context, states in states_from_rows(batch):
            yield rows_of("share_group_lag", list(lag_rows(
                states, context, end_offsets=inputs.end_offsets,
                end_offset_source=inputs.end_offset_source, names=names)))
            yield rows_of("redelivery", list(redelivery_rows(
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
                   partitions=[{"rule": rule} for rule in RULES], metadata=metadata)
    errors = len(decode_findings)
    report.rows["audit_findings"] = len(rows) + errors
    report.findings = errors + sum(r["severity"] in ("warning", "error") for r in rows)
    report.seconds = time.monotonic() - started
    return report

