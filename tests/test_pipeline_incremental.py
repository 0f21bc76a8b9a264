"""Daily pipeline runs into one warehouse, each going on from the `replay_state` and
`lag_state` the previous one committed: each day the source holds the log as it stood at the
day's end (about the same records a day: closed segments, the active one up to then), and
from day 3 on the segments wholly before the day before yesterday leave it, as Kafka deletes
what it pruned. After the last day the warehouse equals, table by table and row by row, one
run over the whole log (what `bench/pipeline.py --days` times at size). Real local Spark,
real Delta tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.simulate import SimulationConfig, simulate
from sharestate.simulate.days import Segment, day_ends, segments, write_day
from sharestate.spark.run import main as run_all
from sharestate.tables.spec import table_names

pytestmark = pytest.mark.slow

DAYS = 5
RUN_COLUMNS = {"ingest_run", "run_id", "committed_at", "source"}
"""Columns naming the run that wrote a row or the file it read (the days read a folder of
their own)."""
RUN_TABLES = {"ingest_runs", "log_start_offsets", "quality_results", "replay_state",
              "lag_state"}


def _rows(warehouse: Path, name: str) -> list[str]:
    data = DeltaTable(str(warehouse / name)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
    return sorted(map(repr, data.to_pylist()))


def _run(source: Path, warehouse: Path) -> None:
    assert run_all(["--source", str(source), "--warehouse", str(warehouse)]) in (0, 1)


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Segment], list[int]]:
    """A simulated log, its segments and the days' ends."""
    root = tmp_path_factory.mktemp("simulated")
    simulate(SimulationConfig(records=12_000, seed=4, state_partitions=2,
                              offsets_partitions=1, segment_bytes=16 << 10,
                              snapshot_limit=20, poison_rate=0.02), root)
    found = segments(root)
    return root, found, day_ends(found, DAYS)


def _files(table: Path) -> set[str]:
    return set(DeltaTable(str(table)).file_uris())


def test_daily_runs_equal_one_run_over_every_day(
        spark: Any, tmp_path: Path, log: tuple[Path, list[Segment], list[int]]) -> None:
    root, found, ends = log
    source, daily, once = tmp_path / "source", tmp_path / "daily", tmp_path / "once"
    applied, lag_files = [], []
    for day, end in enumerate(ends, start=1):
        write_day(found, root, source, end, ends[day - 3] if day >= 3 else None)
        _run(source, daily)
        state = DeltaTable(str(daily / "replay_state")).to_pyarrow_table()
        share = state.filter(pc.equal(state["topic"], SHARE_STATE_TOPIC))
        applied.append(share["records"].to_pylist())
        lag_files.append(_files(daily / "share_group_lag_history"))
    _run(root, once)
    assert {name: _rows(daily, name) for name in table_names() if name not in RUN_TABLES} \
        == {name: _rows(once, name) for name in table_names() if name not in RUN_TABLES}
    # each day went on from the day before: the records applied only grew, and the lag
    # history's rows before the horizon stayed in the files that first held them
    assert all(0 < a < b for a, b in zip(applied[0], applied[-1], strict=True))
    assert lag_files[2] & lag_files[-1]
