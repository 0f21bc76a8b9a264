"""One exit-status scheme for every command and job (`sharestate.exit_codes`): an unhandled
error is not "findings" (1) but a bug (70, traceback then one line); a Delta backend that
cannot run is one line, exit 2, before any work starts; `--version`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sharestate import exit_codes
from sharestate.app import cli
from sharestate.spark import quality_job as quality
from sharestate.spark import run as run_all

BUG_LINE = "this is a bug in sharestate"


def _boom(*args: object, **kwargs: object) -> int:
    raise KeyError("no such thing")


def _assert_reported_as_bug(err: str) -> None:
    lines = err.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):", err
    assert "KeyError: 'no such thing'" in err
    assert lines[-1].startswith("sharestate: internal error (KeyError): ") and BUG_LINE in lines[-1]


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "sharestate", "--version"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("sharestate 0.1.0 (") and "Python 3.11" in done.stdout
    assert done.stderr == ""


def test_bare_sharestate_prints_the_usage_and_the_commands() -> None:
    """Without a command it printed one line ("the following arguments are required"): now
    the usage and every command with what it does, on stderr, exit 2 (a missing command is
    a bad invocation, as argparse and git have it; `--help` is the exit-0 way)."""
    done = subprocess.run([sys.executable, "-m", "sharestate"], capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (exit_codes.USAGE, "")
    assert done.stderr.startswith("usage: sharestate [-h] [--version] COMMAND ...\n")
    listed = [line.split()[0] for line in done.stderr.splitlines() if line.startswith("    ")]
    assert listed == ["decode", "state", "prune", "offsets", "simulate", "run", "sql", "demo",
                      "quality", "report", "serve", "maintain"]
    assert "sharestate COMMAND --help" in done.stderr


def test_cli_crash_exits_70_not_1(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "discover", _boom)
    assert cli.main(["decode", "any.log"]) == exit_codes.INTERNAL == 70
    _assert_reported_as_bug(capsys.readouterr().err)


def test_usage_errors_stay_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["decode", "/nonexistent/segment.log"]) == exit_codes.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sharestate: error: ")


def test_job_entry_script_crash_exits_70(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """`spark-submit pipelines/<job>.py`: a crash must not look like "completed with
    findings" to a scheduler."""
    monkeypatch.setattr(run_all, "run", _boom)
    assert run_all.main(["--warehouse", "/tmp/wh"], jobs=("decode",)) == 70
    captured = capsys.readouterr()
    _assert_reported_as_bug(captured.err)
    assert "tables in " not in captured.out


def test_quality_entry_script_statuses(monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert quality.main(["--fail-on", "never"]) == exit_codes.USAGE  # one line, no usage text
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sharestate: error: ")
    monkeypatch.setattr(quality, "run", _boom)
    assert quality.main(["--warehouse", "/tmp/wh"]) == exit_codes.INTERNAL
    _assert_reported_as_bug(capsys.readouterr().err)


def _delta_jars_present() -> bool:
    from sharestate.spark.session import delta_jars_present, resolve_conf

    return delta_jars_present(resolve_conf())


@pytest.fixture(scope="module")
def simulated(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated log (`logs/`) and the warehouse an rs run on the session's Spark wrote
    from it (`warehouse/`)."""
    root = tmp_path_factory.mktemp("simulated")
    assert cli.main(["simulate", "--out", str(root / "logs"), "--records", "200"]) == 0
    assert run_all.main(["--source", str(root / "logs"), "--warehouse",
                         str(root / "warehouse")]) in (0, 1)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "quality", "report"])
def test_jvm_backend_without_delta_is_one_line_exit_2(command: str, simulated: Path,
                                                      tmp_path: Path) -> None:
    """`--conf spark.sharestate.lake.backend=jvm` where Delta's jars are absent (none on the
    classpath, none in the jar cache): one line,
    exit 2, nothing written (was a traceback from delta's isDeltaTable and exit 1)."""
    if _delta_jars_present():
        pytest.skip("Delta's jars are on this Spark's classpath")
    warehouse = tmp_path / "warehouse"
    argv = {"run": ["run", "--source", str(tmp_path / "logs"), "--warehouse", str(warehouse),
                    "--conf", "spark.sharestate.lake.backend=jvm"],
            "quality": ["quality", "--warehouse", str(warehouse), "--backend", "jvm"],
            "report": ["report", "--warehouse", str(warehouse), "--out",
                       str(tmp_path / "r.html"), "--backend", "jvm"]}[command]
    shutil.copytree(simulated / "logs", tmp_path / "logs")
    if command != "run":  # a warehouse to point at, written by the rs backend
        shutil.copytree(simulated / "warehouse", warehouse)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    no_jars = {**os.environ, "SHARESTATE_CACHE_DIR": str(tmp_path / "empty-cache")}
    done = subprocess.run([sys.executable, "-m", "sharestate", *argv], capture_output=True,
                          text=True, timeout=600, env=no_jars)
    assert done.returncode == exit_codes.USAGE, done.stderr[-3000:]
    ours = [line for line in done.stderr.splitlines() if line.startswith("sharestate:")]
    assert len(ours) == 1, done.stderr[-3000:]
    assert ours[0].startswith("sharestate: error: the jvm lake backend needs Delta's jars")
    assert "Traceback" not in done.stderr and "JavaPackage" not in done.stderr
    assert done.stdout == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
