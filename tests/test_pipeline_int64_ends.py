"""A share-state log whose states hold offsets at int64's ends (CRC-valid values a damaged
writer could leave): a batch ending at 2^63 - 1, start offsets of -2^63 and 2^63 - 1.

`sharestate run` computed the lag history's inputs in numpy, where the offset after such a
batch (last + 1) and the count of its records wrap: the history said lag 0 where
`share_group_lag` says 2^63 - 1, and in pure-Python mode the walk's lag of a wrapped count
(2^63) failed the run (exit 70). `state`, `prune` and `run` now give the same answers with and
without the C extension, the history's latest lag of each share-partition is the one
`share_group_lag` gives, and a group's lag that no int64 holds is unknown.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareValue,
    StateBatch,
)
from sharestate.log import RawRecord, SegmentWriter, build_batch
from sharestate.native import PURE_PYTHON_ENV
from sharestate.persister.record_codec import EmittedRecord, ShareRecordCodec
from sharestate.records.catalog import SHARE_STATE_TOPIC

pytestmark = pytest.mark.slow

TOP, LOW = (1 << 63) - 1, -(1 << 63)
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
ACKED, ARCHIVED = 2, 4


def _snapshot(start: int, *batches: tuple[int, int, int, int]) -> ShareValue:
    return ShareValue(True, 0, 1, 1, start, -1, 1000, 1000, tuple(StateBatch(*b) for b in batches))


def _update(start: int, *batches: tuple[int, int, int, int]) -> ShareValue:
    return ShareValue(False, 0, None, 1, start, -1, None, None,
                      tuple(StateBatch(*b) for b in batches))


RECORDS = [  # (group, partition, value)
    ("g", 0, _snapshot(0, (5, TOP, 0, 1))),  # the offset after it is past int64
    ("g", 0, _update(0, (10, 20, ACKED, 2))),  # split around by the combiner
    ("g", 1, _snapshot(LOW, (0, TOP, ACKED, 1))),
    ("g", 2, _snapshot(TOP, (LOW, TOP, ARCHIVED, 1))),
    ("h", 0, _snapshot(0, (0, TOP, ACKED, 1), (0, TOP, ARCHIVED, 3))),  # counts past int64
    ("h", 1, _snapshot(TOP - 1, (TOP - 1, TOP, 0, 1))),
    ("h", 1, _update(TOP, (TOP, TOP, ACKED, 1))),
    ("k", 0, _snapshot(0, (0, TOP, ACKED, 1))),  # its count wrapped to -2^63: exit 70
    ("m", 0, _snapshot(0, (0, TOP - 1, 0, 1))),  # lagging 2^63 - 1 each: their group's
    ("m", 1, _snapshot(0, (0, TOP - 1, 0, 1))),  # sum is no int64
]
VOLATILE = {"ingest_run", "run_id", "finished_at", "started_at", "seconds", "committed_at",
            "code", "state"}
"""Columns naming a run, or the build that made a row (replay_state's and lag_state's
fingerprints of the C sources, or none)."""


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("int64-ends")
    codec = ShareRecordCodec("4.1")
    records = []
    for offset, (group, partition, value) in enumerate(RECORDS):
        type_id = SNAPSHOT_TYPE if value.is_snapshot else UPDATE_TYPE
        key, data = codec.encode(EmittedRecord(offset, 1000 + offset, type_id,
                                               ShareKey(group, TOPIC_ID, partition), None, value))
        records.append(RawRecord(offset, 1000 + offset, -1, key, data, ()))
    with SegmentWriter(out / "logs", SHARE_STATE_TOPIC, 0) as writer:
        writer.append(build_batch(records))
    return out / "logs"


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    return {**env, PURE_PYTHON_ENV: "1"} if pure else env


def _cli(pure: bool, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sharestate.app.cli", *args],
                          capture_output=True, text=True, env=_env(pure), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _tables(warehouse: Path) -> dict[str, list[str]]:
    tables = {}
    for path in sorted(p for p in warehouse.iterdir() if (p / "_delta_log").is_dir()):
        rows = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
        tables[path.name] = sorted(json.dumps({k: v for k, v in row.items()
                                               if k not in VOLATILE}, default=str)
                                   for row in rows)
    return tables


@pytest.fixture(scope="module")
def runs(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """`sharestate run` over the log with the C extension (False) and without (True)."""
    warehouses = {}
    for pure in (False, True):
        warehouse = tmp_path_factory.mktemp("wh") / "wh"
        done = subprocess.run([sys.executable, "-m", "sharestate.spark.run", "--source",
                               str(logs), "--warehouse", str(warehouse)],
                              capture_output=True, text=True, env=_env(pure), timeout=600)
        assert done.returncode == 0, (pure, done.stderr[-4000:])
        warehouses[pure] = warehouse
    return warehouses


def test_state_and_prune_are_the_same_in_pure_python(logs: Path) -> None:
    for command in ("state", "prune"):
        native = _cli(False, command, str(logs))
        assert native and _cli(True, command, str(logs)) == native, command


def test_run_writes_the_same_tables_in_pure_python(runs: dict[bool, Path]) -> None:
    native, pure = _tables(runs[False]), _tables(runs[True])
    assert native["share_group_lag_history"] and native["share_partition_state"]
    assert pure == native


def test_the_latest_lag_of_the_history_is_share_group_lags(runs: dict[bool, Path]) -> None:
    for warehouse in runs.values():
        now = {(r["group_id"], r["partition"]): (r["end_offset"], r["lag"])
               for r in DeltaTable(str(warehouse / "share_group_lag")).to_pyarrow_table()
               .to_pylist()}
        latest: dict[tuple[str, int], Any] = {}
        for row in sorted(DeltaTable(str(warehouse / "share_group_lag_history"))
                          .to_pyarrow_table().to_pylist(), key=lambda r: r["record_offset"] or 0):
            if row["scope"] == "share_partition":
                latest[(row["group_id"], row["partition"])] = (row["end_offset"], row["lag"])
        assert len(now) == 8 and latest == now
        assert now[("g", 0)] == (TOP, TOP - 11)
        groups = sorted((row["time"], row["lag"]) for row in DeltaTable(
            str(warehouse / "share_group_lag_history")).to_pyarrow_table().to_pylist()
            if row["scope"] == "group" and row["group_id"] == "m")
        assert [lag for _, lag in groups] == [TOP, None], groups
