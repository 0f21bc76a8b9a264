"""`make demo`: simulate a realistic log, run the whole pipeline and the quality gate on it,
summarise the tables and write the HTML report.

The simulated cluster has several share groups, topics and partitions, with redeliveries,
lock timeouts, poison records (no consumer can process them: archived at the delivery limit),
offset resets, deleted share-partitions, cold
snapshots, transactional offset commits, an orphaned share-partition and a topic stuck in
deletion, so every table has something to show.

The closing lines say what was found in the report's own words (its header's verdicts) and
whether the simulated world planted it: the pipeline exits 1 for the planted findings, the
demo 0; anything else found is named, and the demo exits with the pipeline's status.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sharestate.app.report.data import COUNTS, POISON_IN_FLIGHT
from sharestate.simulate import demo_config, simulate
from sharestate.simulate.simulator import END_OFFSETS_FILE

DELIVERY_LIMIT = 5
"""The demo's `--delivery-limit` (Kafka's default `group.share.delivery.count.limit`)."""

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
    f"poison records: archived at the delivery limit ({DELIVERY_LIMIT}) anywhere in the "
    f"log's history": f"""
        SELECT group_id, count(DISTINCT topic_id, partition, offset) AS records
        FROM (SELECT group_id, topic_id, partition,
                     explode(sequence(b.first_offset, b.last_offset)) AS offset
              FROM share_partition_state_history LATERAL VIEW explode(state_batches) t AS b
              WHERE NOT deleted AND b.delivery_state = 4
                AND b.delivery_count >= {DELIVERY_LIMIT})
        GROUP BY group_id ORDER BY group_id""",
    f"{POISON_IN_FLIGHT} now: at or above the SPSO (the report's count)":
        f"SELECT ({COUNTS[POISON_IN_FLIGHT]}) AS ranges",
    "prune plan": """
        SELECT state_partition, prune_offset, reclaimable_records, reclaimable_bytes,
               cold_snapshot_prune_offset, size(holding) AS holding_keys
        FROM prune_recommendations ORDER BY state_partition""",
    "audit findings": """
        SELECT rule, severity, count(*) AS findings FROM audit_findings
        GROUP BY rule, severity ORDER BY findings DESC""",
}

PLANTED: dict[str, tuple[str, str | None]] = {
    "orphaned_state": ("orphaned share-partitions", "no_orphaned_state"),
    "stuck_deleting": ("a topic stuck in deletion", None),
}
"""The audit rules the simulated world sets off on purpose (`demo_config`): what they find,
and the quality check (audit_findings' own suite) that warns of the same."""
PLANTED_CHECKS = {check for _, check in PLANTED.values() if check is not None}
UNPLANNED = """
    SELECT 'audit rule ' || rule AS what, count(*) AS n FROM audit_findings
    WHERE severity IN ('error', 'warning') AND rule <> 'quality_gate'
      AND rule NOT IN ({rules})
    GROUP BY rule
    UNION ALL
    SELECT 'quality check ' || suite || ':' || check AS what, 1 AS n FROM quality_results
    WHERE NOT success AND check NOT IN ({checks})
    UNION ALL
    SELECT 'decode errors' AS what, count(*) AS n FROM decode_errors HAVING count(*) > 0"""


def run_demo(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    """Simulate into `args.logs`, run every job and the quality gate into `args.warehouse`,
    write the HTML report beside the tables; `say` the summary, then the closing lines: what
    was found (the report's verdicts) and whether the simulated world planted it. The exit
    status: 0 when every finding was planted, else the pipeline's."""
    from sharestate.app.report import write_report
    from sharestate.lake import register_views
    from sharestate.spark.console import phase
    from sharestate.spark.run import JOBS, QUALITY, parser, run
    from sharestate.spark.session import build_session

    logs, warehouse = Path(args.logs), Path(args.warehouse)
    for folder in (logs, warehouse):
        if folder.exists():
            shutil.rmtree(folder)
    with phase("simulate"):
        result = simulate(demo_config(args.records, args.seed), logs)
    ends = logs / END_OFFSETS_FILE
    say(f"simulated: {result.summary_line()}")
    status = run(parser().parse_args(["--source", str(logs), "--warehouse", str(warehouse),
                                      "--delivery-limit", str(DELIVERY_LIMIT),
                                      "--end-offsets", str(ends), "--end-offsets-from",
                                      str(logs),
                                      *(["--verbose"] if args.verbose else [])]),
                 (*JOBS, QUALITY))
    with phase("summary"):
        spark = build_session("sharestate")
        register_views(spark, warehouse)
        for title, query in SUMMARY_QUERIES.items():
            rows = [r.asDict() for r in spark.sql(query).collect()]
            say(f"\n{title}:")
            for row in rows:
                say(_line(row))
        unplanned = [f"{r['what']} ({r['n']})" for r in spark.sql(UNPLANNED.format(
            rules=_quoted(PLANTED), checks=_quoted(PLANTED_CHECKS))).collect()]
        planted = {r["rule"]: r["n"] for r in spark.sql(
            f"SELECT rule, count(*) AS n FROM audit_findings WHERE rule IN ({_quoted(PLANTED)}) "
            f"GROUP BY rule").collect()}
    with phase("report"):
        report = write_report(warehouse, warehouse / "report.html", spark=spark)
    say(f"\nfound (the report's verdicts): {' · '.join(report.verdicts)}")
    if unplanned:
        say(f"not planted by the simulated log: {', '.join(unplanned)}: the pipeline's exit "
            f"status {status} stands")
    else:
        held = [f"{what} ({rule}: {planted[rule]}"
                + (f", and the quality gate's {check} warning)" if check else ")")
                for rule, (what, check) in PLANTED.items() if rule in planted]
        say(f"as planted: the simulated log holds {', '.join(held)} and poison records; the "
            f"pipeline's exit status {status} says it recorded findings, and the demo exits "
            f"0: they are what it was made to find")
    say(f"report: {report.path.resolve()}")
    say(f"Delta tables: {warehouse.resolve()}  (try: {invocation()} sql --warehouse "
        f"{shlex.quote(str(warehouse))} \"SELECT * FROM share_group_lag\")")
    return status if unplanned else 0


def invocation() -> str:
    """How to run sharestate again from here: `sharestate` where that is on PATH and this
    very program, else the path it was started by (`.venv/bin/sharestate` after `make
    demo`: the virtualenv is not on PATH unless activated)."""
    started = Path(sys.argv[0])
    if started.name != "sharestate":  # python -m sharestate
        return f"{_shown(Path(sys.executable))} -m sharestate"
    on_path = shutil.which("sharestate")
    if on_path is not None and Path(on_path).resolve() == started.resolve():
        return "sharestate"
    return _shown(started)


def _shown(path: Path) -> str:
    """`path` relative to the working directory when under it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _line(row: dict[str, Any]) -> str:
    return "  " + "  ".join(f"{k}={v}" for k, v in row.items())
