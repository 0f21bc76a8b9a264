"""`make demo`, the README's first command, exactly as written, from a fresh clone's root:
relative default paths (`demo-data`, `warehouse`), every job, the quality gate, the report."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

from sharestate.lake import find_tables

pytestmark = pytest.mark.slow

README = PROJECT_ROOT / "README.md"


def readme_demo_command() -> str:
    """The first command of the README's first console block."""
    block = re.search(r"```console\n(.*?)```", README.read_text("utf-8"), re.S)
    assert block is not None
    first = block.group(1).splitlines()[0]
    assert first.startswith("$ ")
    return first[2:].split("#")[0].strip()


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of this repository whose `.venv` is the one running the tests (a folder of
    links to it), marked installed with make's own stamps, so `make demo` goes straight to
    the demo instead of installing."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("needs make and git")
    if not (PROJECT_ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    target = tmp_path_factory.mktemp("fresh") / "sharestate"
    subprocess.run(["git", "clone", "--quiet", str(PROJECT_ROOT), str(target)], check=True,
                   timeout=300)
    venv = Path(sys.prefix)
    linked = target / ".venv"
    linked.mkdir()
    for entry in venv.iterdir():
        if not entry.name.startswith("."):
            (linked / entry.name).symlink_to(entry)
    # the stamps the Makefile looks for, named by checksums of the clone's files
    for stamp, files in ((".installed-", "pyproject.toml setup.py"),
                         (".native-", "setup.py csrc/*.c csrc/*.h")):
        checksum = subprocess.run(f"cat {files} | cksum", shell=True, cwd=target, check=True,
                                  capture_output=True, text=True).stdout.split()[0]
        (linked / f"{stamp}{checksum}").touch()
    return target


def test_readme_demo_from_a_fresh_clone(clone: Path) -> None:
    command = readme_demo_command()
    assert command == "make demo"
    assert not (clone / "warehouse").exists() and not (clone / "demo-data").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    done = subprocess.run(command.split(), cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "pip install" not in out  # the installed venv was used, not re-made
    warehouse = clone / "warehouse"
    for title in ("share-partitions:", "lag by group:", "worst redelivery:", "poison records:",
                  "prune plan:", "audit findings:"):
        assert title in out
    poison = out[out.index("poison records:"):out.index("prune plan:")].split()
    assert sum(int(word.split("=")[1]) for word in poison if word.startswith("records=")) > 0
    summary = out[out.index("share-partitions:"):].splitlines()[1]
    assert "share_partitions=" in summary and "share_partitions=0 " not in summary
    for line in ("ingest", "replay", "analytics", "quality"):
        assert any(row.startswith(line) for row in out.splitlines()), line
    report = Path(out.split("report: ", 1)[1].splitlines()[0])
    assert report == (warehouse / "report.html").resolve()
    page = report.read_text("utf-8")
    assert "<html" in page.lower() and "plotly" in page.lower()
    assert {"share_partition_state", "share_group_lag", "redelivery", "audit_findings",
            "prune_recommendations", "quality_results"} <= set(find_tables(warehouse))
    assert (warehouse / "_docs" / "quality" / "index.html").is_file()
    assert (clone / "demo-data").is_dir()
