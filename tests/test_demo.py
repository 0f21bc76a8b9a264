"""`make demo`, the README's first command, exactly as written, from a fresh clone's root:
relative default paths (`demo-data`, `warehouse`), every job, the quality gate, the report."""

from __future__ import annotations

import html
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
    """One `make demo`: every job, the gate and the report; on stderr only sharestate's phase
    lines (no Java stack, no WARN line, no progress bar); closing lines that agree with the
    report; a hint that runs as printed, though the virtualenv is not on PATH."""
    command = readme_demo_command()
    assert command == "make demo"
    assert not (clone / "warehouse").exists() and not (clone / "demo-data").exists()
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and Path(d).resolve() != Path(bin_dir).resolve())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    env["PATH"] = path
    done = subprocess.run(command.split(), cwd=clone, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "pip install" not in out  # the installed venv was used, not re-made
    # stderr: the phase lines and nothing else (make echoes its command on stdout)
    assert done.stderr.splitlines() == [
        f"[sharestate] {phase}" for phase in ("simulate", "ingest", "replay", "analytics",
                                              "quality gate", "summary", "report")], \
        done.stderr[-3000:]
    assert "\r" not in out and "WARN" not in out and "\tat " not in out
    warehouse = clone / "warehouse"
    for title in ("share-partitions:", "lag by group:", "worst redelivery:", "prune plan:",
                  "audit findings:"):
        assert title in out.splitlines(), title
    history = section(out, "poison records: archived at the delivery limit (5) anywhere in "
                           "the log's history:")
    assert sum(int(word.split("=")[1]) for word in history.split()
               if word.startswith("records=")) > 0
    in_flight = section(out, "poison ranges in flight now: at or above the SPSO (the "
                             "report's count):")
    summary = out[out.index("share-partitions:"):].splitlines()[1]
    assert "share_partitions=" in summary and "share_partitions=0 " not in summary
    for line in ("ingest", "replay", "analytics", "quality"):
        assert any(row.startswith(line) for row in out.splitlines()), line
    closing = out.splitlines()[-4:]
    assert closing[0].startswith("found (the report's verdicts): "), closing
    assert closing[1].startswith("as planted: the simulated log holds orphaned share-partitions"
                                 " (orphaned_state: "), closing
    assert "the pipeline's exit status 1 says it recorded findings, and the demo exits 0" \
        in closing[1]
    report = Path(closing[2].removeprefix("report: "))
    assert report == (warehouse / "report.html").resolve()
    page = report.read_text("utf-8")
    assert "<html" in page.lower() and "plotly" in page.lower()
    # the closing verdicts are the report's badges, and its poison count the demo's
    badges = [html.unescape(b) for b in re.findall(r'<span class="badge \w+">(.*?)</span>',
                                                   page)]
    assert closing[0].removeprefix("found (the report's verdicts): ").split(" · ") == badges
    assert "quality gate passed (1 warning)" in badges and "no errors" in badges
    count = re.search(r'<div class="n">([0-9,]+)</div><div class="l">poison ranges in flight'
                      r'</div>', page)
    assert count is not None and in_flight.split() == [f"ranges={count.group(1)}"]
    assert {"share_partition_state", "share_group_lag", "redelivery", "audit_findings",
            "prune_recommendations", "quality_results"} <= set(find_tables(warehouse))
    assert (warehouse / "_docs" / "quality" / "index.html").is_file()
    assert (clone / "demo-data").is_dir()
    # the hint names the program by the path that runs it here, and runs as printed
    hint = closing[3].split("(try: ", 1)[1].removesuffix(")")
    assert hint.startswith(".venv/bin/sharestate sql --warehouse "), hint
    tried = subprocess.run(hint, shell=True, cwd=clone, env=env, capture_output=True,
                           text=True, timeout=600)
    assert tried.returncode == 0 and "group_id" in tried.stdout, tried.stderr[-3000:]
    assert tried.stderr == ""


def section(out: str, title: str) -> str:
    """The lines under `title` in the demo's summary, up to the next blank line."""
    assert title in out.splitlines(), title
    return out.split(title + "\n", 1)[1].split("\n\n", 1)[0]
