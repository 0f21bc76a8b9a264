"""`make demo`: simulate a realistic log, run the whole pipeline and the quality gate on it,
summarise the tables and write the HTML report.

The simulated cluster has several share groups, topics and partitions, with redeliveries,
lock timeouts, poison records (no consumer can process them: archived at the delivery limit),
offset resets, deleted share-partitions, cold
snapshots, transactional offset commits, an orphaned share-partition and a topic stuck in
deletion, so every table has something to show.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sharestate.simulate import demo_config, simulate
from sharestate.simulate.simulator import END_OFFSETS_FILE

SUMMARY_QUERIES = {
    "share-partitions": """
        SELECT count(*) AS share_partitions, count(DISTINCT group_id) AS groups,
               sum(size(state_batches)) AS in_flight_batches
        FROM share_partition_state""",
    "lag by group": """
        SELECT group_id, count(*) AS partitions, sum(lag) AS lag,
               max(lag_is_lower_bound) AS lower_bound
        FROM share_group_lag GROUP BY group_id ORDER BY lag DESC""",
    "worst redelivery": """
        SELECT group_id, topic_id, partition, first_offset, last_offset, delivery_count, poison
        FROM redelivery ORDER BY delivery_count DESC, records DESC LIMIT 3""",
    "poison records": """
        SELECT group_id, count(DISTINCT topic_id, partition, offset) AS records
        FROM (SELECT group_id, topic_id, partition,
                     explode(sequence(b.first_offset, b.last_offset)) AS offset
              FROM share_partition_state_history LATERAL VIEW explode(state_batches) t AS b
              WHERE NOT deleted AND b.delivery_state = 4 AND b.delivery_count >= 5)
        GROUP BY group_id ORDER BY group_id""",
    "prune plan": """
        SELECT state_partition, prune_offset, reclaimable_records, reclaimable_bytes,
               cold_snapshot_prune_offset, size(holding) AS holding_keys
        FROM prune_recommendations ORDER BY state_partition""",
    "audit findings": """
        SELECT rule, severity, count(*) AS findings FROM audit_findings
        GROUP BY rule, severity ORDER BY findings DESC""",
}


def run_demo(args: argparse.Namespace) -> Iterator[str]:
    """Simulate into `args.logs`, run every job and the quality gate into `args.warehouse`,
    write the HTML report beside the tables; yield summary lines."""
    from sharestate.app.report import write_report
    from sharestate.lake import register_views
    from sharestate.spark.run import JOBS, QUALITY, parser, run
    from sharestate.spark.session import build_session

    logs, warehouse = Path(args.logs), Path(args.warehouse)
    for folder in (logs, warehouse):
        if folder.exists():
            shutil.rmtree(folder)
    result = simulate(demo_config(args.records, args.seed), logs)
    ends = logs / END_OFFSETS_FILE
    yield f"simulated: {result.summary_line()}"
    status = run(parser().parse_args(["--source", str(logs), "--warehouse", str(warehouse),
                                      "--delivery-limit", "5", "--end-offsets", str(ends),
                                      *(["--verbose"] if args.verbose else [])]),
                 (*JOBS, QUALITY))
    spark = build_session("sharestate")
    register_views(spark, warehouse)
    for title, query in SUMMARY_QUERIES.items():
        rows = [r.asDict() for r in spark.sql(query).collect()]
        yield f"\n{title}:"
        yield from (_line(row) for row in rows)
    report = write_report(warehouse, warehouse / "report.html", spark=spark)
    yield (f"\nDelta tables: {warehouse.resolve()}  (try: sharestate sql --warehouse "
           f"{warehouse} \"SELECT * FROM share_group_lag\")")
    yield f"report: {report.resolve()}"
    yield f"pipeline exit status {status} ({'findings recorded' if status else 'clean'})"


def _line(row: dict[str, Any]) -> str:
    return "  " + "  ".join(f"{k}={v}" for k, v in row.items())
