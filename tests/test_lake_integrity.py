"""A damaged Delta table (its log or its data files) is named in one line by `sql` (exit 4),
`report`, `quality` and `run` (exit 2), before any Spark starts, on either backend: never a
traceback, never an answer from an older version. Real Delta tables written by delta-rs,
damaged on disk."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import own_lines
from deltalake import DeltaTable, write_deltalake

from sharestate.app.cli import main
from sharestate.lake import find_tables
from sharestate.lake.integrity import DamagedTable, check_table, check_warehouse

ROWS = pa.table({"group_id": [f"g{i % 3}" for i in range(27)], "records": list(range(27))})


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse of two tables: `redelivery` created empty, then its 27 rows in a second
    commit (the last one); `audit_findings` with two writes and a checkpoint at the first."""
    root = tmp_path_factory.mktemp("intact")
    write_deltalake(root / "redelivery", ROWS.slice(0, 0))
    write_deltalake(root / "redelivery", ROWS, mode="append")
    write_deltalake(root / "audit_findings", ROWS.slice(0, 5))
    DeltaTable(root / "audit_findings").create_checkpoint()
    write_deltalake(root / "audit_findings", ROWS.slice(5, 5), mode="append")
    check_warehouse(root)
    return root


def _last_commit(table: Path) -> Path:
    return sorted((table / "_delta_log").glob("*.json"))[-1]


def _cut(table: Path) -> None:
    commit = _last_commit(table)
    data = commit.read_bytes()
    commit.write_bytes(data[: len(data) * 2 // 3])


def _add_missing(table: Path) -> None:
    commit = _last_commit(table)
    add = {"add": {"path": "part-00000-nowhere.parquet", "partitionValues": {}, "size": 10,
                   "modificationTime": 0, "dataChange": True}}
    text = commit.read_text("utf-8").rstrip("\n")  # delta-rs ends its last line without one
    commit.write_text(f"{text}\n{json.dumps(add)}\n", "utf-8")


def _delete_data_file(table: Path) -> None:
    next(table.glob("*.parquet")).unlink()


def _checkpointed_data_file(table: Path) -> None:
    first = json.loads(next(line for line in (table / "_delta_log" / f"{0:020d}.json")
                            .read_text("utf-8").splitlines() if '"add"' in line))
    (table / first["add"]["path"]).unlink()


DAMAGE: dict[str, tuple[str, Callable[[Path], None], str]] = {
    "cut short": ("redelivery", _cut, "00000000000000000001.json: line 2 is not JSON "
                                      "(cut short?)"),
    "garbage": ("redelivery",
                lambda t: _last_commit(t).write_bytes(b"\x00\xff not a commit\n" * 3),
                "00000000000000000001.json: is not UTF-8 text at byte 1"),
    "not actions": ("redelivery", lambda t: _last_commit(t).write_text("[1, 2]\n{}\n"),
                    "00000000000000000001.json: line 1 is not one action"),
    "empty": ("redelivery", lambda t: _last_commit(t).write_bytes(b""),
              "00000000000000000001.json: holds no action (0 bytes)"),
    "blank": ("redelivery", lambda t: _last_commit(t).write_text("\n\n"),
              "00000000000000000001.json: holds no action (2 bytes)"),
    "bad _last_checkpoint": (
        "audit_findings",
        lambda t: (t / "_delta_log" / "_last_checkpoint").write_text("{garbage"),
        "_delta_log/_last_checkpoint: is not a JSON object naming a checkpoint version"),
    "missing checkpoint": (
        "audit_findings",
        lambda t: next((t / "_delta_log").glob("*.checkpoint.parquet")).unlink(),
        "_delta_log/_last_checkpoint: names checkpoint version 0, which is not in"),
    "garbage checkpoint": (
        "audit_findings",
        lambda t: next((t / "_delta_log").glob("*.checkpoint.parquet")).write_bytes(b"PAR1"),
        "00000000000000000000.checkpoint.parquet: cannot be read as a Parquet checkpoint"),
    "missing commit": (
        "redelivery", lambda t: (t / "_delta_log" / f"{0:020d}.json").rename(
            t / "_delta_log" / f"{5:020d}.json"),
        "00000000000000000000.json: is missing (the log has later versions, up to 5)"),
    "commit adding a missing file": (
        "redelivery", _add_missing,
        "part-00000-nowhere.parquet: is missing (a data file of the table's current version, "
        "added by _delta_log/00000000000000000001.json)"),
    "deleted data file": ("redelivery", _delete_data_file, "is missing (a data file"),
    "deleted data file of the checkpoint": (
        "audit_findings", _checkpointed_data_file,
        "is missing (a data file of the table's current version, added by "
        "_delta_log/00000000000000000000.checkpoint.parquet)"),
}


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request: pytest.FixtureRequest, intact: Path,
            tmp_path: Path) -> tuple[Path, str, str]:
    """A copy of the warehouse with one table damaged: (warehouse, table, what names it)."""
    table, damage, named = DAMAGE[request.param]
    copy = tmp_path / "wh"
    shutil.copytree(intact, copy)
    damage(copy / table)
    return copy, table, named


def test_damage_is_named(damaged: tuple[Path, str, str]) -> None:
    warehouse, table, named = damaged
    with pytest.raises(DamagedTable) as caught:
        check_warehouse(warehouse)
    message = str(caught.value)
    assert message.startswith(f"table {table} is damaged: ") and named in message, message
    assert "\n" not in message


@pytest.mark.parametrize("argv", [
    ["sql", "--backend", "rs", "SELECT count(*) FROM redelivery"],
    ["sql", "--backend", "jvm", "SELECT count(*) FROM redelivery"],
    ["report", "--out", "{tmp}/report.html"],
    ["quality"],
    ["run", "--source", "{tmp}/nothing.log"]])
def test_commands_name_the_damage_in_one_line(damaged: tuple[Path, str, str], argv: list[str],
                                              capfd: pytest.CaptureFixture[str]) -> None:
    """Before any session starts: exit 4 for sql, 2 for the others; nothing written."""
    warehouse, table, named = damaged
    tmp = warehouse.parent
    (tmp / "nothing.log").write_bytes(b"")
    command, *rest = argv
    status = main([command, "--warehouse", str(warehouse),
                   *(arg.format(tmp=tmp) for arg in rest)])
    out, err = capfd.readouterr()
    lines = own_lines(err)
    assert status == (4 if command == "sql" else 2), err
    assert len(lines) == 1 and lines[0].startswith(f"sharestate: error: table {table} is "
                                                   "damaged: ") and named in lines[0], err
    assert not out and not (tmp / "report.html").exists()
    assert not (warehouse / "_lease").exists()


def test_valid_commits_pass(tmp_path: Path) -> None:
    """A commit of only removes, and one of only commitInfo, are valid Delta commits."""
    table = tmp_path / "t"
    write_deltalake(table, ROWS)
    DeltaTable(table).delete()  # removes only (and commitInfo)
    last = _last_commit(table)
    kinds = {next(iter(json.loads(line))) for line in last.read_text("utf-8").splitlines()}
    assert "remove" in kinds and "add" not in kinds, kinds
    (table / "_delta_log" / f"{int(last.stem) + 1:020d}.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 0, "operation": "WRITE"}}) + "\n")
    check_table(table)
    assert DeltaTable(table).to_pyarrow_table().num_rows == 0


def test_a_table_before_its_first_commit_is_no_table(tmp_path: Path) -> None:
    """A writer stopped before its first commit (a full disk) leaves a `_delta_log` holding
    nothing: no table yet, for the commands as for Delta, so a re-run makes it and readers
    list the tables that exist; it was called damaged and every later run exited 2."""
    warehouse = tmp_path / "wh"
    write_deltalake(warehouse / "made", ROWS)
    (warehouse / "unmade" / "_delta_log").mkdir(parents=True)
    (warehouse / "unmade" / "part-0.parquet").write_bytes(b"PAR1")
    assert list(find_tables(warehouse)) == ["made"]
    check_warehouse(warehouse)
    write_deltalake(warehouse / "unmade", ROWS)
    assert list(find_tables(warehouse)) == ["made", "unmade"]
    check_warehouse(warehouse)
