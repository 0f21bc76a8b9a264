"""A log that went back under a warehouse: a run read it, then the partition's log changed in
a way Kafka never appends — the topic deleted and created again, the log truncated (an
unclean leader election) and written anew, or truncated alone. The next run says so (stderr
and `ingest_runs`) and replays the partition from its log start without what it read of
the old log: its tables are those of a clean run over the log as it is now, never the new
records applied on top of the old state.
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sharestate.log import Batch, RawRecord, build_batch, read_batches
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.run import main as run_all
from sharestate.tables.log_changes import WENT_BACK
from sharestate.tables.spec import table_names

pytestmark = pytest.mark.slow

PARTITION = f"{SHARE_STATE_TOPIC}-0"
KEPT = {"log_records", "decode_errors", "share_state_records", "group_records", "ingest_runs",
        "quality_results", "replay_state", "lag_state"}
"""Bronze and silver keep what was read of the old log, the runs' states name the versions
they were made at; the rest is what the log says now."""


def _simulated(root: Path, seed: int) -> Path:
    simulate(SimulationConfig(records=4000, seed=seed, state_partitions=1,
                              offsets_partitions=1, segment_bytes=16 << 10,
                              snapshot_limit=20), root)
    return root


def _rows(warehouse: Path, name: str) -> list[str]:
    data = DeltaTable(str(warehouse / name)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names
                              if c in ("ingest_run", "run_id", "committed_at")])
    return sorted(map(repr, data.to_pylist()))


def _batches(path: Path) -> list[Batch]:
    found = [item for item in read_batches(io.BytesIO(path.read_bytes()))
             if isinstance(item, Batch)]
    assert len(found) >= 4
    return found


def recreated(log: Path, other: Path) -> None:
    """The topic deleted and created again: its partition holds another log from 0."""
    shutil.rmtree(log / PARTITION)
    shutil.copytree(other / PARTITION, log / PARTITION)


def rewritten(log: Path, other: Path) -> None:
    """Truncated in its last segment and written anew: the same offsets, other records."""
    last = sorted((log / PARTITION).glob("*.log"))[-1]
    batches = _batches(last)
    kept = batches[:len(batches) // 2]
    data = last.read_bytes()[:sum(b.header.size_in_bytes for b in kept)]
    for batch in batches[len(batches) // 2:]:
        data += build_batch([RawRecord(r.offset, r.timestamp + 1, r.sequence, r.key,
                                       r.value, r.headers) for r in batch.records])
    last.write_bytes(data)


def truncated(log: Path, other: Path) -> None:
    """Truncated in its last segment, nothing written since."""
    last = sorted((log / PARTITION).glob("*.log"))[-1]
    batches = _batches(last)
    last.write_bytes(last.read_bytes()[:sum(b.header.size_in_bytes
                                            for b in batches[:len(batches) // 2])])


@pytest.mark.parametrize("change", [recreated, rewritten, truncated],
                         ids=lambda change: change.__name__)
def test_a_log_that_went_back_is_replayed_as_it_is_now(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        change: Callable[[Path, Path], None]) -> None:
    log, other = _simulated(tmp_path / "log", 6), _simulated(tmp_path / "other", 7)
    warehouse, clean = tmp_path / "warehouse", tmp_path / "clean"
    assert run_all(["--source", str(log), "--warehouse", str(warehouse)]) in (0, 1)
    change(log, other)
    capsys.readouterr()
    assert run_all(["--source", str(log), "--warehouse", str(warehouse)]) in (0, 1)
    said = [line for line in capsys.readouterr().err.splitlines() if WENT_BACK in line]
    assert len(said) == 1 and said[0].startswith(f"{PARTITION}: {WENT_BACK}"), said
    notes = [n for n in DeltaTable(str(warehouse / "ingest_runs")).to_pyarrow_table()
             ["note"].to_pylist() if n and n.startswith(WENT_BACK)]
    assert len(notes) == 1
    assert run_all(["--source", str(log), "--warehouse", str(clean)]) in (0, 1)
    compared = [name for name in table_names() if name not in KEPT]
    assert {name: _rows(warehouse, name) for name in compared} == {
        name: _rows(clean, name) for name in compared}
    # and the run after goes on from there as a clean warehouse's does
    assert run_all(["--source", str(log), "--warehouse", str(warehouse)]) in (0, 1)
    assert {name: _rows(warehouse, name) for name in compared} == {
        name: _rows(clean, name) for name in compared}
