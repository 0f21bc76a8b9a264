"""`make demo` (`sharestate demo`): simulate, run every job and the quality gate, report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sharestate.lake import find_tables

pytestmark = pytest.mark.slow


def test_demo_runs_every_job_and_writes_the_report(tmp_path: Path) -> None:
    logs, warehouse = tmp_path / "logs", tmp_path / "warehouse"
    done = subprocess.run(
        [sys.executable, "-m", "sharestate", "demo", "--records", "20000", "--logs", str(logs),
         "--warehouse", str(warehouse)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    for title in ("share-partitions:", "lag by group:", "worst redelivery:", "prune plan:",
                  "audit findings:"):
        assert title in out
    summary = out[out.index("share-partitions:"):].splitlines()[1]
    assert "share_partitions=" in summary and "share_partitions=0 " not in summary
    report = Path(out.split("report: ", 1)[1].splitlines()[0])
    assert report == (warehouse / "report.html").resolve()
    page = report.read_text("utf-8")
    assert "<html" in page.lower() and "plotly" in page.lower()
    tables = set(find_tables(warehouse))
    assert {"share_partition_state", "share_group_lag", "redelivery", "audit_findings",
            "prune_recommendations", "quality_results"} <= tables
    for line in ("ingest", "replay", "analytics", "quality"):
        assert any(row.startswith(line) for row in out.splitlines()), line
