"""The README's tour commands and every query of the SQL cookbook run, and say something."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

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
def test_cookbook_queries_run(tour: Path, spark: Any) -> None:
    """Every cookbook query against the warehouse the README tour built (same group names
    as the demo's)."""
    from sharestate.lake import register_views

    register_views(spark, tour)
    queries = cookbook_queries()
    assert len(queries) >= 7
    for query in queries:
        assert spark.sql(query).collect(), query


def test_configuration_reference_is_rendered_from_the_code() -> None:
    """docs/configuration.md is what `python -m sharestate.app.reference` renders now, and it
    covers every command, job argument, Spark default and quality key."""
    from sharestate.app.reference import render
    from sharestate.quality.config import QualityConfig
    from sharestate.spark.session import DEFAULTS

    page = render()
    committed = (PROJECT_ROOT / "docs" / "configuration.md").read_text("utf-8")
    assert committed == page, \
        "regenerate: python -m sharestate.app.reference > docs/configuration.md"
    for needle in ("### `sharestate run`", "### `sharestate decode`", "--as-of-offset N",
                   "--run-id ID", "--kafka-option KEY=VALUE", *DEFAULTS,
                   *(f"`{name}`" for name in QualityConfig.__dataclass_fields__
                     if name != "source")):
        assert needle in page, needle


def cookbook_query(heading: str) -> str:
    """The SQL block under `## heading` in the cookbook."""
    text = COOKBOOK.read_text("utf-8")
    section = text[text.index(f"## {heading}\n"):]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block is not None, heading
    return block.group(1)


def _history(warehouse: Path) -> list[dict[str, Any]]:
    from sharestate.lake.rs import read_table

    return read_table(warehouse / "share_partition_state_history", [
        "group_id", "topic_id", "partition", "record_offset", "timestamp", "deleted",
        "start_offset", "state_batches"]).to_pylist()


@pytest.mark.slow
def test_cookbook_progress_carries_each_share_partition_forward(tour: Path, spark: Any) -> None:
    """"Progress and lag over time": per group and time bucket, the sum of every live
    share-partition's SPSO as of the end of that bucket (its last state carried forward),
    computed here from the history rows; summing only the share-partitions that wrote in a
    bucket made progress seem to go backwards."""
    from sharestate.lake import register_views

    width = 100  # the tour's log spans seconds: buckets where not every share-partition writes
    by_key: dict[tuple[str, str, int], list[tuple[int, int, bool, int]]] = {}
    for r in _history(tour):
        by_key.setdefault((r["group_id"], r["topic_id"], r["partition"]), []).append(
            (r["timestamp"] // width, r["record_offset"], r["deleted"], r["start_offset"]))
    buckets = sorted({row[0] for rows in by_key.values() for row in rows})
    totals: dict[tuple[str, int], list[int]] = {}
    for (group, _, _), rows in by_key.items():
        rows.sort()
        at = 0
        for bucket in buckets:
            while at < len(rows) and rows[at][0] <= bucket:
                at += 1
            total = totals.setdefault((group, bucket), [0, 0])
            if at and not rows[at - 1][2]:  # its last state by the end of the bucket is live
                total[0] += max(rows[at - 1][3], 0)
                total[1] += 1
    expected = {key: (spso if live else None, live) for key, (spso, live) in totals.items()}
    idle = sum(1 for rows in by_key.values() for b in buckets if b not in {r[0] for r in rows})
    assert idle > len(buckets)  # share-partitions that wrote nothing in some bucket: carried
    register_views(spark, tour)
    query = cookbook_query("Progress and lag over time")
    assert "SELECT 60000 AS bucket_ms" in query
    query = query.replace("SELECT 60000 AS bucket_ms", f"SELECT {width} AS bucket_ms")
    got = {(r["group_id"], r["m"] // width): (r["spso_sum"], r["share_partitions"])
           for r in spark.sql(f"SELECT group_id, unix_millis(bucket_start) AS m, spso_sum, "
                              f"share_partitions FROM ({query})").collect()}
    assert got == expected


@pytest.mark.slow
def test_cookbook_poison_records_are_found(tour: Path, spark: Any) -> None:
    """"Poison records": the tour's workload has records no consumer can process; each one
    archived at the delivery limit (5) anywhere in the history is one row."""
    from sharestate.lake import register_views

    expected = {(r["group_id"], r["topic_id"], r["partition"], offset)
                for r in _history(tour) if not r["deleted"]
                for b in r["state_batches"] or []
                if b["delivery_state"] == 4 and b["delivery_count"] >= 5
                for offset in range(b["first_offset"], b["last_offset"] + 1)}
    register_views(spark, tour)
    got = {(r["group_id"], r["topic_id"], r["partition"], r["offset"])
           for r in spark.sql(cookbook_query("Poison records")).collect()}
    assert expected and got == expected


def test_readme_pending_offsets_example_shows_pending_offsets() -> None:
    [command] = [c for c in readme_commands() if " offsets --pending" in c]
    result = _run(command, PROJECT_ROOT)
    assert result.returncode == 0, result.stderr
    states = [json.loads(line)["state"] for line in result.stdout.splitlines()]
    assert any(state.startswith("pending:") for state in states), states
    assert "committed" in states


def test_readme_state_as_of_time_matches_its_offset() -> None:
    """The README says its state example works with --as-of-time too: the time it names gives
    the same share-partitions; a time where nothing is live says so (it printed nothing)."""
    [command] = [c for c in readme_commands() if " state " in c]
    time = re.search(r"`--as-of-time (\S+)`", README.read_text("utf-8"))
    assert time is not None
    by_offset = _run(command, PROJECT_ROOT)
    by_time = _run(re.sub(r"--as-of-offset \d+", f"--as-of-time {time.group(1)}", command),
                   PROJECT_ROOT)
    assert by_offset.returncode == by_time.returncode == 0
    assert by_time.stdout == by_offset.stdout != ""
    early = _run(re.sub(r"--as-of-offset \d+", "--as-of-time 2025-10-09T08:53:20Z", command),
                 PROJECT_ROOT)
    assert early.returncode == 0 and early.stdout == ""
    assert early.stderr.splitlines()[-1] == (
        "no live share-partitions of group 'g1' as of time 2025-10-09T08:53:20Z; groups with "
        f"some: '{'share-group-long-name-' * 13}share-group-lo'")
