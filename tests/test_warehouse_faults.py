"""A warehouse the writers cannot write to: its file system mounted read-only, or full.
Real mounts, in a mount namespace of the test's own (`unshare -m`; where mounts cannot be
made, the tests skip saying why); every command in one process (one JVM)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sharestate.jars import delta_jars
from sharestate.lake import find_tables
from sharestate.lake.rs import read_table
from sharestate.simulate import SimulationConfig, simulate

pytestmark = pytest.mark.slow
USAGE = 2
FULL_AT = {"early": 20, "late": 45}
"""Warehouse file systems this small (percent of a whole run's warehouse): full at
different points of the run."""
VOLATILE = {"ingest_run", "finished_at", "run_id", "committed_at"}


def _why_no_mounts(scratch: Path) -> str | None:
    """Why mounts cannot be made in a namespace of our own here (None: they can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                            str(scratch)], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"cannot mount in a namespace of our own: {probe.stderr.strip()[:120]}"
    return None


@dataclass
class Faults:
    """What the calls did: statuses and `sharestate:` error lines, in order; the folders."""

    statuses: list[int]
    errors: list[str]
    stderr: str
    read_only: Path
    clean: Path
    full: dict[str, Path]
    """Each small file system's warehouse after the failed run and the re-run."""


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Faults:
    from one_process import Step, call_in_one_process

    reason = _why_no_mounts(tmp_path_factory.mktemp("probe"))
    if reason is not None:
        pytest.skip(reason)
    if not delta_jars().present:
        pytest.skip("Delta's jars are not in the jar cache (make jars), for sql --write")
    root = tmp_path_factory.mktemp("faults")
    logs = root / "logs"
    simulate(SimulationConfig(records=600, seed=3, groups=2, topics=1, partitions=2,
                              state_partitions=1, offsets_partitions=1), logs)
    read_only, clean = root / "read-only", root / "clean"
    write_deltalake(read_only / "redelivery", pa.table({"records": [1, 2, 3]}))

    def run(warehouse: Path) -> list[str]:
        return ["run", "--source", str(logs), "--warehouse", str(warehouse), "--backend", "rs"]

    steps: list[Step] = [
        {"command": ["mount", "--bind", "-o", "ro", str(read_only), str(read_only)]},
        ["sql", "--warehouse", str(read_only), "--backend", "jvm", "--write",
         "DELETE FROM redelivery"],
        ["quality", "--warehouse", str(read_only), "--backend", "rs"],
        run(read_only),
        run(clean)]
    full = {}
    for name, percent in FULL_AT.items():
        mounted, full[name] = root / f"mounted-{name}", root / name
        mounted.mkdir()
        steps += [
            {"command": ["sh", "-c", f"mount -t tmpfs -o size=$(( $(du -sk {clean} | cut -f1)"
                                     f" * {percent} / 100 ))k tmpfs {mounted}"]},
            run(mounted),
            {"command": ["mount", "-o", "remount,size=256m", str(mounted)]},  # space freed
            run(mounted),
            {"command": ["cp", "-a", str(mounted), str(full[name])]}]
    calls = call_in_one_process("sharestate.app.cli", steps, launcher=["unshare", "-m"])
    errors = [line for line in calls.stderr.splitlines() if line.startswith("sharestate:")]
    return Faults(calls.statuses, errors, calls.stderr, read_only, clean, full)


def test_a_read_only_warehouse_is_one_line_for_every_writer(faults: Faults) -> None:
    """run, quality and sql --write on a warehouse whose file system is read-only: exit 2,
    one line naming the lease file and the cause, not exit 70 on `_lease`."""
    assert faults.statuses[:3] == [USAGE] * 3, faults.stderr[-3000:]
    assert "Traceback" not in faults.stderr, faults.stderr[-3000:]
    for line in faults.errors[:3]:
        assert line == (f"sharestate: error: cannot take the warehouse lease "
                        f"{faults.read_only}/_lease: Read-only file system (a writer needs "
                        "the warehouse writable)"), line
    assert sorted(os.listdir(faults.read_only)) == ["redelivery"]


def _content(warehouse: Path) -> dict[str, list[str]]:
    return {name: sorted(json.dumps({k: v for k, v in row.items() if k not in VOLATILE},
                                    sort_keys=True, default=str)
                         for row in read_table(path).to_pylist())
            for name, path in find_tables(warehouse).items()}


def test_a_full_warehouse_is_one_line_and_a_rerun_completes_the_work(faults: Faults) -> None:
    """A run whose warehouse file system fills up (in ingest, or later) stops with one line
    saying which file system is full and that a re-run completes the work, exit 2, not 70
    with a traceback per task; after space is freed the re-run's tables equal a clean
    run's."""
    clean_status = faults.statuses[3]
    assert clean_status in (0, 1)
    assert faults.statuses[4:] == [USAGE, clean_status] * len(FULL_AT), faults.stderr[-3000:]
    assert "Traceback" not in faults.stderr, faults.stderr[-3000:]
    assert len(faults.errors) == 3 + len(FULL_AT), faults.stderr[-3000:]
    expected = _content(faults.clean)
    assert expected["log_records"] and expected["share_partition_state"]
    for line, (name, copy) in zip(faults.errors[3:], faults.full.items(), strict=True):
        assert line.startswith("sharestate: error: no space left on device: the warehouse's "
                               f"file system ({copy.parent / f'mounted-{name}'}) is full ("), line
        assert line.endswith("free space and run again, and the re-run completes the work")
        assert _content(copy) == expected, name
