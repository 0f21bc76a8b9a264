"""What the report shows, read from a warehouse with Spark SQL and reduced to small frames.

Every query aggregates in Spark; only the results (a few hundred rows at most) come back
as pandas frames. A table the warehouse lacks yields an empty frame, and the page says so.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TIME_BUCKETS = 90
TOP_HOT_SPOTS = 15
TOP_GROUPS = 12
"""Consumer groups with a panel of their own in the offset history (the busiest)."""
TOP_SERIES_PER_GROUP = 6

QUERIES: dict[str, str] = {
    # Per group and time bucket one point of its lag: the bucket's last exact row if it has
    # one (exact rows are at the sampled times), else its last row (a lower bound).
    "lag_over_time": f"""
        WITH rows AS (
          SELECT group_id, time, lag, exact, lag_is_lower_bound AS lower_bound, partitions
          FROM share_group_lag_history WHERE scope = 'group' AND lag IS NOT NULL),
        span AS (SELECT min(time) AS t0, greatest(try_subtract(max(time), min(time)), 1) AS width
                 FROM rows),
        picked AS (
          SELECT group_id,
                 max_by(struct(time, lag, exact, lower_bound, partitions),
                        struct(exact, time)) AS p
          FROM rows CROSS JOIN span
          GROUP BY group_id, least(CAST(floor(try_multiply(try_subtract(time, t0),
                                                         {TIME_BUCKETS}) / width) AS INT),
                                   {TIME_BUCKETS} - 1))
        SELECT group_id, p.time AS time_ms, p.lag, p.exact, p.lower_bound, p.partitions
        FROM picked ORDER BY group_id, time_ms""",
    "current_lag": """
        SELECT group_id, try_sum(lag) AS lag, max(as_of_timestamp) AS time_ms,
               bool_or(lag_is_lower_bound) AS lower_bound, count(*) AS partitions
        FROM share_group_lag GROUP BY group_id ORDER BY group_id""",
    "delivery_counts": """
        SELECT b.delivery_count, b.delivery_state,
               try_sum(try_add(try_subtract(b.last_offset,
                                            greatest(b.first_offset, s.start_offset)), 1))
                 AS records
        FROM share_partition_state s LATERAL VIEW explode(s.state_batches) t AS b
        WHERE b.last_offset >= s.start_offset
        GROUP BY b.delivery_count, b.delivery_state ORDER BY 1, 2""",
    "hot_spots": f"""
        SELECT r.group_id, coalesce(l.topic, r.topic_id) AS topic, r.partition,
               try_sum(CASE WHEN r.delivery_count >= 2 THEN r.records ELSE 0 END)
                 AS redelivered,
               try_sum(CASE WHEN r.delivery_state = 4 AND NOT r.poison THEN r.records ELSE 0
                       END) AS archived,
               try_sum(CASE WHEN r.poison THEN r.records ELSE 0 END) AS poison,
               max(r.delivery_count) AS max_delivery_count, count(*) AS ranges
        FROM redelivery r LEFT JOIN share_group_lag l
          ON r.group_id = l.group_id AND r.topic_id = l.topic_id AND r.partition = l.partition
        GROUP BY r.group_id, coalesce(l.topic, r.topic_id), r.partition
        ORDER BY try_add(redelivered, poison) DESC, archived DESC, max_delivery_count DESC
        LIMIT {TOP_HOT_SPOTS}""",
    "prune": """
        SELECT state_partition, prune_offset, log_start_offset, log_end_offset,
               reclaimable_records, reclaimable_bytes, cold_snapshot_prune_offset,
               cold_snapshot_reclaimable_records, cold_snapshot_reclaimable_bytes, live_keys,
               size(holding) AS holding_keys
        FROM prune_recommendations ORDER BY state_partition""",
    "holding": """
        SELECT state_partition, h.group_id, h.topic_id, h.partition, h.last_snapshot_offset,
               h.write_timestamp
        FROM prune_recommendations LATERAL VIEW explode(holding) t AS h
        ORDER BY state_partition, h.last_snapshot_offset LIMIT 50""",
    "findings": """
        SELECT rule, severity, count(*) AS findings, min(offset) AS first_offset,
               max(offset) AS last_offset,
               min_by(message, coalesce(offset, 9223372036854775807)) AS example,
               count(DISTINCT group_id) AS groups
        FROM audit_findings GROUP BY rule, severity
        ORDER BY CASE severity WHEN 'error' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END,
                 findings DESC""",
    "serious_findings": """
        SELECT rule, severity, topic, partition, offset, group_id, share_partition, message
        FROM audit_findings WHERE severity IN ('error', 'warning') AND rule <> 'quality_gate'
        ORDER BY CASE severity WHEN 'error' THEN 0 ELSE 1 END, rule, topic, partition, offset
        LIMIT 40""",
    "offsets": f"""
        WITH busiest AS (
          SELECT group_id, count(*) AS commits FROM consumer_group_offsets GROUP BY group_id
          ORDER BY commits DESC, group_id LIMIT {TOP_GROUPS}),
        series AS (
          SELECT group_id, topic, partition,
                 row_number() OVER (PARTITION BY group_id
                                    ORDER BY count(*) DESC, topic, partition) AS series
          FROM consumer_group_offsets GROUP BY group_id, topic, partition)
        SELECT o.group_id, o.topic, o.partition, o.record_offset, o.event,
               o.committed_offset, o.commit_timestamp AS time_ms, o.txn_outcome, b.commits
        FROM consumer_group_offsets o JOIN busiest b ON o.group_id = b.group_id
        JOIN series s ON o.group_id = s.group_id AND o.topic = s.topic
                     AND o.partition = s.partition
        WHERE s.series <= {TOP_SERIES_PER_GROUP}
          AND o.commit_timestamp IS NOT NULL AND o.committed_offset IS NOT NULL
        ORDER BY b.commits DESC, o.group_id, o.topic, o.partition, o.record_offset""",
    "inputs": """
        SELECT topic, count(DISTINCT partition) AS partitions,
               count(DISTINCT concat(partition, '/', segment)) AS segments,
               min(first_offset) AS first_offset, max(last_offset) AS last_offset,
               sum(records) AS records, sum(bytes) AS bytes, sum(findings) AS findings,
               max(finished_at) AS finished_at, count(DISTINCT ingest_run) AS runs
        FROM ingest_runs GROUP BY topic ORDER BY topic""",
    "last_run": """
        SELECT ingest_run, finished_at FROM ingest_runs ORDER BY finished_at DESC LIMIT 1""",
    "quality": """
        SELECT run_id, run_at, suite, check, severity, success, blocking, unexpected, rows,
               description, docs_index, sample_json,
               CASE WHEN success THEN 'passed' WHEN blocking THEN 'failed' ELSE 'failed (not '
                    || 'blocking)' END AS outcome
        FROM quality_results WHERE run_id = (SELECT max_by(run_id, run_at) FROM quality_results)
        ORDER BY success, suite, check""",
}

POISON_IN_FLIGHT = "poison ranges in flight"
"""Archived at the delivery limit and still at or above the SPSO now (`redelivery.poison`);
the history's poison records are the SQL cookbook's "Poison records"."""
COUNTS: dict[str, str] = {
    "share-partitions": "SELECT count(*) FROM share_partition_state",
    "share groups": "SELECT count(DISTINCT group_id) FROM share_partition_state",
    "state records": "SELECT count(*) FROM share_partition_state_history",
    "offset commits": "SELECT count(*) FROM consumer_group_offsets",
    "consumer groups": "SELECT count(DISTINCT group_id) FROM consumer_group_offsets",
    "redelivered ranges": "SELECT count(*) FROM redelivery WHERE delivery_count >= 2",
    POISON_IN_FLIGHT: "SELECT count(*) FROM redelivery WHERE poison",
    "decode errors": "SELECT count(*) FROM decode_errors",
}


@dataclass
class ReportData:
    """The frames and figures the page is made of (frames are pandas DataFrames)."""

    warehouse: str
    generated_ms: int
    frames: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int | None] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    """Tables the warehouse does not have."""


def load(spark: SparkSession, warehouse: str) -> ReportData:
    """Run every query over the warehouse's tables (registered as views)."""
    import pandas as pd

    from sharestate.lake import register_views
    from sharestate.tables.spec import table_names

    views = set(register_views(spark, warehouse))
    data = ReportData(warehouse, int(time.time() * 1000),
                      missing={name for name in table_names() if name not in views})
    for name, query in QUERIES.items():
        data.frames[name] = (spark.sql(query).toPandas() if _tables_of(query) <= views
                             else pd.DataFrame())
    for name, query in COUNTS.items():
        data.counts[name] = (int(spark.sql(query).collect()[0][0])
                             if _tables_of(query) <= views else None)
    return data


def _tables_of(query: str) -> set[str]:
    """The warehouse tables a query reads (words after FROM / JOIN that name tables)."""
    from sharestate.tables.spec import table_names

    words = query.replace("(", " ").replace(")", " ").split()
    return {w for before, w in itertools.pairwise(words)
            if before.upper() in ("FROM", "JOIN") and w in table_names()}
