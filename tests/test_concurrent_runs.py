"""Concurrent writers on one warehouse, as real processes: the warehouse lease lets one write
at a time. Two runs started together leave the tables equal to one run's (the second waits,
then finds nothing new), or the second fails at once with one line and writes nothing; a
holder killed with -9 leaves no stale lease. Runs started together on either Delta backend
where it runs: an `rs` run with another `rs` run, and with a `jvm` run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sharestate.jars import delta_jars
from sharestate.lake import open_lake
from sharestate.lake.lease import LEASE_FILE, holder
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.slow
TABLES = ("log_records", "decode_errors", "share_state_records", "group_records",
          "share_partition_state_history", "share_partition_state", "share_group_lag",
          "redelivery", "audit_findings", "prune_recommendations", "consumer_group_offsets",
          "share_group_partitions")
VOLATILE = {"ingest_run", "finished_at"}


def _delta_jars() -> list[str]:
    """Delta's jars for the jvm backend (`make jars` fetches them; none: the jvm cases skip)."""
    delta = delta_jars()
    return [str(path) for path in delta.paths
            if path.name.startswith(("delta-spark_", "delta-storage-"))] if delta.present else []


PAIRS = [pytest.param(("rs", "rs"), id="rs"),
         pytest.param(("rs", "jvm"), id="rs+jvm", marks=pytest.mark.skipif(
             not _delta_jars(), reason="Delta's jars are not in the jar cache (make jars)"))]
"""The two runs' backends: the lease is taken alike on either (a writer on one backend
excludes one on the other); whichever waits then continues the warehouse on its own."""


def _backend_args(backend: str) -> list[str]:
    extra = ["--backend", backend, "--conf", "spark.ui.enabled=false",
             "--conf", "spark.ui.showConsoleProgress=false"]
    if backend == "jvm":
        extra += ["--conf", "spark.jars=" + ",".join(_delta_jars())]
    return extra


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    simulate(SimulationConfig(records=3000, seed=5, groups=2, topics=2, partitions=2,
                              state_partitions=2, offsets_partitions=1), root)
    return root


def _start(logs: Path, warehouse: Path, backend: str, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "sharestate.spark.run", "--source", str(logs),
               "--warehouse", str(warehouse), *_backend_args(backend), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


def _snapshot(spark: Any, warehouse: Path) -> dict[str, list[str]]:
    lake = open_lake(spark, "rs")
    return {name: sorted(json.dumps({k: v for k, v in r.asDict(recursive=True).items()
                                     if k not in VOLATILE}, sort_keys=True, default=str)
                         for r in lake.read(str(warehouse / name)).collect())
            for name in (*TABLES, "ingest_runs")}


def _runs_that_committed(spark: Any, warehouse: Path) -> set[str]:
    lake = open_lake(spark, "rs")
    return {commit.metadata["run"] for name in TABLES
            for commit in lake.history(str(warehouse / name))
            if isinstance(commit.metadata, dict) and "run" in commit.metadata}


@pytest.fixture(scope="module")
def reference(spark: Any, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run alone, on the session's Spark (rs backend)."""
    assert open_lake(spark).backend == "rs"
    warehouse = tmp_path_factory.mktemp("reference")
    assert run_all(["--source", str(logs), "--warehouse", str(warehouse)]) in (0, 1)
    return warehouse


@pytest.mark.parametrize("backends", PAIRS)
def test_two_runs_started_together_equal_one_run(spark: Any, logs: Path, reference: Path,
                                                 tmp_path: Path,
                                                 backends: tuple[str, str]) -> None:
    """The second waits for the lease, then ingests nothing new and recomputes the same gold
    tables."""
    warehouse = tmp_path / "wh"
    runs = [_start(logs, warehouse, backend, "--lease-wait", "600") for backend in backends]
    results = [_finish(p) for p in runs]
    assert all(status in (0, 1) for status, _, _ in results), results
    waited = [err for _, _, err in results if "waiting up to 600 s" in err]
    assert len(waited) == 1 and "is in use by jobs ingest, decode, replay, analytics" in waited[0]
    assert _snapshot(spark, warehouse) == _snapshot(spark, reference)


def test_a_second_run_fails_at_once_and_writes_nothing(spark: Any, logs: Path,
                                                       reference: Path, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    backend = "rs"
    first = _start(logs, warehouse, backend, "--run-id", "first")
    deadline = time.monotonic() + 300
    while holder(warehouse) is None:  # the first holds the lease
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    second = _finish(_start(logs, warehouse, backend, "--run-id", "second"))
    assert _finish(first)[0] in (0, 1)
    status, out, err = second
    assert status == 2 and out == ""
    errors = [line for line in err.splitlines() if line.startswith("sharestate")]
    assert len(errors) == 1 and "is in use by" in errors[0] and "run first" in errors[0], err
    assert "Traceback" not in err
    assert _runs_that_committed(spark, warehouse) == {"first"}
    assert _snapshot(spark, warehouse) == _snapshot(spark, reference)


def test_a_killed_holder_leaves_no_stale_lease(spark: Any, logs: Path, reference: Path,
                                              tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    victim = _start(logs, warehouse, "rs")
    deadline = time.monotonic() + 300
    while not (warehouse / "log_records" / "_delta_log" / "00000000000000000001.json").exists():
        assert time.monotonic() < deadline and victim.poll() is None
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate()
    assert holder(warehouse) is not None  # its record is left behind ...
    assert (warehouse / LEASE_FILE).exists()
    started = time.monotonic()
    status, _out, err = _finish(_start(logs, warehouse, "rs"))  # ... but no lock: no wait
    assert status in (0, 1) and "in use" not in err, err
    assert time.monotonic() - started < 300
    assert _snapshot(spark, warehouse) == _snapshot(spark, reference)


def test_a_waiting_writer_names_a_holder_that_has_locked_but_not_yet_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The holder locks `_lease`, then writes who it is: a writer that finds the lock taken
    in between waits for the record (up to NAMED_WITHIN) and names the holder, rather than
    saying `another writer` (CI saw that when two runs started together on a loaded
    machine)."""
    import fcntl
    import threading

    from sharestate.lake.lease import warehouse_lease

    warehouse = tmp_path / "wh"
    warehouse.mkdir()
    fd = os.open(warehouse / LEASE_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    record = {"run": "first", "what": "jobs ingest", "host": "h", "pid": 1, "since": 0}

    def name_then_release() -> None:
        time.sleep(0.3)
        os.pwrite(fd, json.dumps(record).encode(), 0)
        time.sleep(0.5)
        os.close(fd)

    threading.Thread(target=name_then_release).start()
    with warehouse_lease(warehouse, run="second", what="jobs replay", wait=30):
        assert holder(warehouse) is not None and holder(warehouse)["run"] == "second"
    err = capsys.readouterr().err
    assert "in use by jobs ingest (run first, pid 1 on h" in err, err
