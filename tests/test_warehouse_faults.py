"""A warehouse the writers cannot write to: its file system mounted read-only. Real mounts,
in a mount namespace of the test's own (`unshare -m`; where mounts cannot be made, the
tests skip saying why)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from sharestate.jars import delta_jars
from sharestate.simulate import SimulationConfig, simulate

pytestmark = pytest.mark.slow
USAGE = 2


def _why_no_mounts(scratch: Path) -> str | None:
    """Why mounts cannot be made in a namespace of our own here (None: they can)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "unshare or mount is not installed"
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                            str(scratch)], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"cannot mount in a namespace of our own: {probe.stderr.strip()[:120]}"
    return None


@pytest.fixture(scope="module")
def mounts(tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = _why_no_mounts(tmp_path_factory.mktemp("probe"))
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    simulate(SimulationConfig(records=600, seed=3, groups=2, topics=1, partitions=2,
                              state_partitions=1, offsets_partitions=1), root)
    return root


def test_a_read_only_warehouse_is_one_line_for_every_writer(
        mounts: None, logs: Path, tmp_path: Path) -> None:
    """run, quality and sql --write on a warehouse whose file system is read-only: exit 2,
    one line naming the lease file and the cause, not exit 70 on `_lease`. One process (a
    JVM with Delta's jars, for sql --write) in a mount namespace of its own."""
    from one_process import call_in_one_process

    if not delta_jars().present:
        pytest.skip("Delta's jars are not in the jar cache (make jars)")
    warehouse = tmp_path / "wh"
    write_deltalake(warehouse / "redelivery", pa.table({"records": [1, 2, 3]}))
    read_only = {"command": ["mount", "--bind", "-o", "ro", str(warehouse), str(warehouse)]}
    calls = call_in_one_process("sharestate.app.cli", [
        read_only,
        ["sql", "--warehouse", str(warehouse), "--backend", "jvm", "--write",
         "DELETE FROM redelivery"],
        ["quality", "--warehouse", str(warehouse), "--backend", "rs"],
        ["run", "--source", str(logs), "--warehouse", str(warehouse), "--backend", "rs"]],
        launcher=["unshare", "-m"])
    errors = [line for line in calls.stderr.splitlines() if line.startswith("sharestate:")]
    assert calls.statuses == [USAGE] * 3 and len(errors) == 3, calls.stderr[-3000:]
    assert "Traceback" not in calls.stderr, calls.stderr[-3000:]
    for line in errors:
        assert line == (f"sharestate: error: cannot take the warehouse lease {warehouse}/_lease:"
                        " Read-only file system (a writer needs the warehouse writable)"), line
    assert sorted(os.listdir(warehouse)) == ["redelivery"]
