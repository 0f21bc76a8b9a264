"""`sharestate sql` in one session: the prompt driven through a pseudo-terminal (every
cookbook query, `\\d`, the read-only door, a commit made meanwhile, the history), `--file`
and a pipe (stopping at the first failure with its status), and the statement splitter."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_ROOT, SimulatedWarehouse
from deltalake import DeltaTable, write_deltalake
from terminal import Terminal

from sharestate.app.cli import main
from sharestate.app.sql_session import MORE, PROMPT, Command, Reader, split_statements
from sharestate.lake import open_lake
from sharestate.spark.session import QUICK_JIT

COOKBOOK = PROJECT_ROOT / "docs" / "sql-cookbook.md"
ROWS = re.compile(r"^\((\d+) rows?(, times in .+)?\)$", re.M)


def statement(terminal: Terminal, text: str) -> tuple[str, float]:
    """Type `text` at the prompt: what it printed, and the seconds it took to answer."""
    return terminal.statement(text, PROMPT, MORE.strip())


def cookbook_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", COOKBOOK.read_text("utf-8"), re.S)


@pytest.mark.slow
def test_prompt_runs_the_cookbook_in_one_session(
        spark: Any, simulated_warehouse: SimulatedWarehouse, tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"  # a copy: a commit is made to it below
    shutil.copytree(simulated_warehouse.warehouse, warehouse)
    env = {**os.environ, "TERM": "dumb", "HOME": str(tmp_path),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    started = time.monotonic()
    terminal = Terminal([sys.executable, "-m", "sharestate", "sql", "--warehouse",
                         str(warehouse)], env)
    try:
        greeting = terminal.expect(PROMPT)
        opened = time.monotonic() - started
        assert "\\d lists them, \\q quits" in greeting, greeting
        # short queries: the optimising JIT's compilations would cost more than they save
        assert QUICK_JIT in _jvm_options(terminal.process.pid)

        listing, _ = statement(terminal, "\\d")
        tables = dict(re.findall(r"^(\w+)\s+(\w.*)$", listing, re.M)[1:])
        assert "redelivery" in tables and "share_partition_state_history" in tables, listing
        columns = open_lake(spark).read(str(warehouse / "redelivery")).columns
        assert tables["redelivery"] == ", ".join(columns)
        one, _ = statement(terminal, "\\d redelivery")
        lines = one.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("column"))
        assert [line.split()[0] for line in lines[header + 1:-1]] == columns, one
        assert lines[-1] == f"({len(columns)} rows)", one

        times = []
        for query in cookbook_queries():
            printed, seconds = statement(terminal, query.strip() + ";")
            assert "sharestate: error" not in printed and ROWS.search(printed), printed
            times.append(seconds)
        print(f"\nprompt after {opened:.1f} s; cookbook queries: "
              + ", ".join(f"{t:.1f}" for t in times) + " s")

        # the door as in one-shot sql: one line, and the session goes on, unchanged
        count = "SELECT count(*) AS n FROM redelivery;"
        before, _ = statement(terminal, count)
        refused, _ = statement(terminal, "INSERT INTO redelivery SELECT * FROM redelivery;")
        errors = [line for line in refused.splitlines() if line.startswith("sharestate")]
        assert len(errors) == 1 and "[SHARESTATE_READ_ONLY] refused" in errors[0], refused
        assert "INSERT" in errors[0] and not ROWS.search(refused)
        failed, _ = statement(terminal, "SELECT no_such_column FROM redelivery;")
        assert "sharestate: error: query failed: [UNRESOLVED_COLUMN" in failed, failed
        unknown, _ = statement(terminal, "\\x")
        assert "sharestate: error: unknown command \\x" in unknown, unknown
        after, _ = statement(terminal, count)
        assert ROWS.search(after) and _rows(after) == _rows(before)

        # a commit made meanwhile (a run's, say) is read by the next statement
        findings = "SELECT count(*) AS n FROM audit_findings;"
        counted, _ = statement(terminal, findings)
        table = warehouse / "audit_findings"
        write_deltalake(str(table), DeltaTable(str(table)).to_pyarrow_table().slice(0, 1),
                        mode="append")
        recounted, _ = statement(terminal, findings)
        assert [int(n) + 1 for n in _rows(counted)] == [int(n) for n in _rows(recounted)], \
            recounted
        terminal.type("\\q")
    finally:
        status = terminal.close()
    assert status == 0
    history = (tmp_path / "state" / "sharestate" / "sql_history").read_text("utf-8")
    redelivered = " ".join(line.strip() for line in next(
        q for q in cookbook_queries() if "FROM redelivery" in q).strip().splitlines())
    assert f"{redelivered};" in history.splitlines(), history  # one entry, not four


def _jvm_options(pid: int) -> list[str]:
    """The command line of the JVM a process started (its child, or a child's child)."""
    parents, commands = {}, {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            commands[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    jvms = [commands[child] for child, parent in parents.items()
            if pid in (parent, parents.get(parent)) and commands[child][0].endswith(b"java")]
    assert jvms, f"no JVM under process {pid}"
    return [part.decode() for part in jvms[0]]


def _rows(printed: str) -> list[str]:
    return [line.split()[-1] for line in printed.splitlines() if line.strip().isdigit()]


@pytest.mark.slow
def test_file_and_pipe_stop_at_the_first_failure(
        simulated_warehouse: SimulatedWarehouse, tmp_path: Path,
        capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = str(simulated_warehouse.warehouse)
    script = ("SELECT count(*) AS n\n  FROM redelivery;  -- the first\n\\d redelivery\n"
              "INSERT INTO redelivery SELECT * FROM redelivery;\nSELECT 'never' AS x;\n")
    statements = tmp_path / "statements.sql"
    statements.write_text(script, "utf-8")
    assert main(["sql", "--warehouse", warehouse, "--format", "csv",
                 "--file", str(statements)]) == 4
    out, err = capfd.readouterr()
    assert out.splitlines()[0] == "n" and out.splitlines()[2] == "column,type", out
    assert "never" not in out
    errors = [line for line in err.splitlines() if line.startswith("sharestate")]
    assert len(errors) == 1 and "[SHARESTATE_READ_ONLY] refused" in errors[0], err

    monkeypatch.setattr(sys, "stdin", io.StringIO(script.replace("INSERT", "SELEC")))
    assert main(["sql", "--warehouse", warehouse, "--format", "csv"]) == 4
    out, err = capfd.readouterr()
    assert out.splitlines()[0] == "n" and "never" not in out
    assert "query failed: [PARSE_SYNTAX_ERROR]" in err, err

    statements.write_text("SELECT 1 AS a; SELECT 2 AS b;\nSELECT 3 AS c", "utf-8")
    assert main(["sql", "--warehouse", warehouse, "--format", "csv",
                 "--file", str(statements)]) == 0
    assert capfd.readouterr().out.split() == ["a", "1", "b", "2", "c", "3"]


def test_file_is_read_as_the_users_files_are(tmp_path: Path,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    """A FIFO as --file is refused at once, before any Spark starts; so is a query with it."""
    fifo = tmp_path / "statements.sql"
    os.mkfifo(fifo)
    assert main(["sql", "--warehouse", str(tmp_path), "--file", str(fifo)]) == 2
    assert capfd.readouterr().err == (f"sharestate: error: cannot read {fifo}: not a regular "
                                      "file (a FIFO)\n")
    assert main(["sql", "--warehouse", str(tmp_path), "--file", str(fifo), "SELECT 1"]) == 2
    assert capfd.readouterr().err == "sharestate: error: a query or --file, not both\n"


def test_statements_end_at_semicolons_outside_quotes_and_comments() -> None:
    text = ("SELECT ';' AS a; -- a comment; still one\nSELECT 2 /* ; /* nested ; */ ; */;;"
            "\n-- only a comment\n;SELECT 'it''s', \"a\\\";b\", `c;d` FROM t; SELECT 3")
    assert split_statements(text) == (
        ["SELECT ';' AS a", "-- a comment; still one\nSELECT 2 /* ; /* nested ; */ ; */",
         "SELECT 'it''s', \"a\\\";b\", `c;d` FROM t"], " SELECT 3")


def test_a_backslash_line_is_a_command_between_statements_only() -> None:
    reader = Reader()
    assert reader.feed("SELECT 1 AS a;  -- done") == ["SELECT 1 AS a"] and not reader.started
    assert reader.feed("\\d  redelivery ") == [Command("d", "redelivery")]
    assert reader.feed("SELECT '") == [] and reader.started
    assert reader.feed("\\d';") == ["SELECT '\n\\d'"]
    assert reader.feed("/* a comment") == [] and reader.started  # ends on a later line
    assert reader.feed("*/ \\q") == [] and reader.end() == ["/* a comment\n*/ \\q"]
