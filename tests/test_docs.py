"""The README's tour commands and every query of the SQL cookbook run, and say something."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, conformance_root

README = PROJECT_ROOT / "README.md"
COOKBOOK = PROJECT_ROOT / "docs" / "sql-cookbook.md"
NOT_HERE = ("make ",)  # the two setup commands: what CI itself runs


def readme_commands() -> list[str]:
    commands = []
    for block in re.findall(r"```console\n(.*?)```", README.read_text("utf-8"), re.S):
        for line in block.splitlines():
            if line.startswith("$ ") and not line[2:].startswith(NOT_HERE):
                commands.append(line[2:].split("  #")[0].strip())
    return commands


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    if argv[0].startswith(".venv/bin/"):
        argv[0] = str(Path(sys.executable).parent / Path(argv[0]).name)
    env = {**os.environ, "SHARESTATE_CONFORMANCE_DIR": str(conformance_root())}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run every README tour command (paths under /tmp moved to a temp dir); the warehouse."""
    if not conformance_root().is_dir():
        pytest.skip(f"the tour reads the fixtures in {conformance_root()}")
    tmp_path = tmp_path_factory.mktemp("tour")
    commands = readme_commands()
    assert any(c.split()[1] == "decode" for c in commands)
    for command in commands:
        command = command.replace("/tmp/sharestate-", f"{tmp_path}/sharestate-")
        command = command.replace("-w dist", f"-w {tmp_path}/dist")
        result = _run(command, PROJECT_ROOT)
        assert result.returncode in (0, 1), f"{command}\n{result.stderr[-2000:]}"
        assert result.stdout.strip(), command
    return tmp_path / "sharestate-warehouse"


@pytest.mark.slow
def test_readme_tour_runs(tour: Path) -> None:
    assert (tour / "share_partition_state" / "_delta_log").is_dir()


def cookbook_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", COOKBOOK.read_text("utf-8"), re.S)


@pytest.mark.slow
def test_cookbook_queries_run(tour: Path) -> None:
    """Every cookbook query against the warehouse the README tour built (same group names
    as the demo's)."""
    from pipelines.session import build_session
    from sharestate.lake import register_views

    spark = build_session("test-cookbook", ui=False)
    register_views(spark, tour)
    queries = cookbook_queries()
    assert len(queries) >= 7
    for query in queries:
        rows = spark.sql(query).collect()
        if "WHERE poison" not in query:  # a short demo may archive nothing past the limit
            assert rows, query


def test_configuration_reference_is_rendered_from_the_code() -> None:
    """docs/configuration.md is what `python -m pipelines.reference` renders now, and it
    covers every command, job argument, Spark default and quality key."""
    from pipelines.reference import render
    from pipelines.session import DEFAULTS
    from sharestate.quality.config import QualityConfig

    page = render()
    committed = (PROJECT_ROOT / "docs" / "configuration.md").read_text("utf-8")
    assert committed == page, "regenerate: python -m pipelines.reference > docs/configuration.md"
    for needle in ("### `sharestate run`", "### `sharestate decode`", "--as-of-offset N",
                   "--run-id ID", "--kafka-option KEY=VALUE", *DEFAULTS,
                   *(f"`{name}`" for name in QualityConfig.__dataclass_fields__
                     if name != "source")):
        assert needle in page, needle
