"""What a Spark command prints (`sharestate.spark.console`): its phase lines on stderr and
its results on stdout, and nothing of Spark's (banner, log4j profile, the JDK's incubator
notice, Hadoop's native-library warning, progress bars) unless `--verbose` asks for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sharestate.simulate import SimulationConfig, simulate

pytestmark = pytest.mark.slow

SPARK_BANNER = ("Using Spark's default log4j profile", "WARNING: Using incubator modules",
                "To adjust logging level", "NativeCodeLoader", "[Stage ", "Picked up ")


def _sharestate(*argv: str, env: dict[str, str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sharestate", *argv], capture_output=True,
                          text=True, timeout=900, env=env)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`sharestate run` over a small simulated log, quietly: its phase lines are all of its
    stderr."""
    root = tmp_path_factory.mktemp("console")
    simulate(SimulationConfig(records=3000, seed=3, groups=2, topics=1, partitions=2,
                              state_partitions=1, offsets_partitions=1), root / "logs")
    done = _sharestate("run", "--source", str(root / "logs"), "--warehouse",
                       str(root / "warehouse"))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert done.stderr.splitlines() == ["[sharestate] ingest", "[sharestate] replay",
                                        "[sharestate] analytics"], done.stderr[-3000:]
    jobs = [line.split()[0] for line in done.stdout.splitlines()]
    assert jobs[-4:] == ["ingest", "replay", "analytics", "tables"], done.stdout
    return root / "warehouse"


def test_run_prints_its_phases_and_nothing_of_sparks(warehouse: Path) -> None:
    assert (warehouse / "share_partition_state" / "_delta_log").is_dir()


def test_verbose_keeps_sparks_own_output(warehouse: Path, tmp_path: Path) -> None:
    # options from the environment, which the JVMs echo (Picked up JAVA_TOOL_OPTIONS: ...)
    options = {**os.environ, "JAVA_TOOL_OPTIONS": "-Dsharestate.test=1",
               "_JAVA_OPTIONS": "-Dsharestate.test=2"}
    quiet = _sharestate("report", "--warehouse", str(warehouse), "--out",
                        str(tmp_path / "quiet.html"), env=options)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-3000:]
    loud = _sharestate("report", "--warehouse", str(warehouse), "--out",
                       str(tmp_path / "loud.html"), "--verbose")
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "Using Spark's default log4j profile" in loud.stderr
    assert "WARNING: Using incubator modules" in loud.stderr
    assert quiet.stdout.startswith("report: ") and loud.stdout.startswith("report: ")
    assert not any(noise in quiet.stderr for noise in SPARK_BANNER)
