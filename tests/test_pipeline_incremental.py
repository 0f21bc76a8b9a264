"""Daily pipeline runs into one warehouse, each going on from the `replay_state` the previous
one committed: the same records arrive every day as Kafka-named segments, and from day 3 on
the oldest day's segments leave the source, as Kafka deletes what it pruned. After the last
day the warehouse equals, table by table and row by row, one run over every day's segments
(what `bench/pipeline.py --days` times at size). Real local Spark, real Delta tables.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.run import main as run_all
from sharestate.tables.spec import table_names

pytestmark = pytest.mark.slow

DAYS = 5
RUN_COLUMNS = {"ingest_run", "run_id", "committed_at", "source"}
"""Columns naming the run that wrote a row or the file it read (the days read a folder of
their own)."""
RUN_TABLES = {"ingest_runs", "quality_results", "replay_state"}


def _rows(warehouse: Path, name: str) -> list[str]:
    data = DeltaTable(str(warehouse / name)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
    return sorted(map(repr, data.to_pylist()))


def _run(source: Path, warehouse: Path) -> None:
    assert run_all(["--source", str(source), "--warehouse", str(warehouse)]) in (0, 1)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list[Path]]]:
    """A simulated log and each day's segments (every partition's, in base-offset order)."""
    root = tmp_path_factory.mktemp("simulated")
    simulate(SimulationConfig(records=12_000, seed=4, state_partitions=2,
                              offsets_partitions=1, segment_bytes=16 << 10,
                              snapshot_limit=20, poison_rate=0.02), root)
    days: list[list[Path]] = [[] for _ in range(DAYS)]
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        segments = sorted(folder.glob("*.log"))
        for index, segment in enumerate(segments):
            days[index * DAYS // len(segments)].append(segment)
    return root, days


def test_daily_runs_equal_one_run_over_every_day(spark: Any, tmp_path: Path,
                                                 log: tuple[Path, list[list[Path]]]) -> None:
    root, days = log
    source, daily, once = tmp_path / "source", tmp_path / "daily", tmp_path / "once"
    applied = []
    for day, added in enumerate(days, start=1):
        for segment in added:
            target = source / segment.parent.name / segment.name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(segment, target)
        if day >= 3:
            for segment in days[day - 3]:
                (source / segment.parent.name / segment.name).unlink()
        _run(source, daily)
        state = DeltaTable(str(daily / "replay_state")).to_pyarrow_table()
        share = state.filter(pc.equal(state["topic"], SHARE_STATE_TOPIC))
        applied.append(share["records"].to_pylist())
    _run(root, once)
    assert {name: _rows(daily, name) for name in table_names() if name not in RUN_TABLES} \
        == {name: _rows(once, name) for name in table_names() if name not in RUN_TABLES}
    # each day went on from the day before: the records applied only grew
    assert all(0 < a < b for a, b in zip(applied[0], applied[-1], strict=True))
