"""Many statements in one `sharestate sql` session: a prompt on a terminal, or the
statements of a file (`--file`) or of a pipe.

Statements end with `;` (outside quotes, backquotes and comments) and may span lines; text
after the last `;` of a file runs as one more statement. A line that starts with `\\` while
no statement is pending is a command: `\\d` lists the tables with their columns, `\\d TABLE`
one table's columns and types, `\\q` ends the session (as does the end of the input). Every
statement goes through the caller's `execute`, the one-shot `sql`'s door.

At a prompt a failed or refused statement prints its one line and the prompt goes on; the
session ends with status 0. From a file or a pipe the first failure ends the session with
its status. The prompt keeps a readline history in `sql_history` under
`$XDG_STATE_HOME/sharestate` (`~/.local/state/sharestate`), its last `HISTORY_LINES` lines,
a statement of several lines as one.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

PROMPT = "sharestate> "
MORE = "       ...> "
HISTORY_LINES = 1000
HELP = "\\d lists the tables, \\d TABLE its columns, \\q quits; statements end with ;"

Rows = tuple[list[str], list[dict[str, Any]], str | None]
"""A statement's columns, its rows and the time zone of their times (None: no times)."""


@dataclass(frozen=True)
class Command:
    """A backslash command: its name (`d`, `q`) and its argument, if any."""

    name: str
    argument: str


class SessionEnd(Exception):
    """`\\q`: the session ends."""


class BadCommand(Exception):
    """A backslash command the session does not know, or a table `\\d` does not know."""


def split_statements(text: str) -> tuple[list[str], str]:
    """The statements `text` completes (each ended by a `;` outside quotes, backquotes and
    comments; without it, stripped; those holding nothing but comments left out) and the
    text after the last of them."""
    statements: list[str] = []
    start, i, depth, quote, words = 0, 0, 0, "", False
    while i < len(text):
        char, pair = text[i], text[i:i + 2]
        if quote:
            if char == "\\" and quote != "`":
                i += 1
            elif char == quote:
                quote = ""
        elif depth:
            if pair == "*/":
                depth, i = depth - 1, i + 1
            elif pair == "/*":
                depth, i = depth + 1, i + 1
        elif pair == "/*":
            depth, i = 1, i + 1
        elif pair == "--":
            end = text.find("\n", i)
            if end < 0:
                break
            i = end
        elif char in "'\"`":
            quote, words = char, True
        elif char == ";":
            if words:
                statements.append(text[start:i].strip())
            start, words = i + 1, False
        elif not char.isspace():
            words = True
        i += 1
    return statements, text[start:]


class Reader:
    """Lines in, statements and commands out."""

    def __init__(self) -> None:
        self.pending = ""

    @property
    def started(self) -> bool:
        """Whether a statement is being read (more than blanks and comments so far)."""
        statements, rest = split_statements(f"{self.pending}\n;")
        return bool(statements or rest.strip())

    def feed(self, line: str) -> list[str | Command]:
        """What `line` (without its end of line) completes."""
        if not self.started and line.lstrip().startswith("\\"):
            name, _, argument = line.strip()[1:].partition(" ")
            self.pending = ""  # blanks and comments
            return [Command(name, argument.strip())]
        statements, self.pending = split_statements(f"{self.pending}{line}\n")
        return list(statements)

    def end(self) -> list[str]:
        """The statement the input ended in, if any."""
        last = split_statements(f"{self.pending};")[0]
        self.pending = ""
        return last


class Session:
    """Runs statements (`execute`) and commands (`\\d`: `describe`), each result written to
    `out` by `write`; `failures` maps the exceptions they raise for bad input to exit
    statuses."""

    def __init__(self, execute: Callable[[str], Rows], describe: Callable[[str], Rows],
                 write: Callable[[SupportsWrite[str], Rows], None], out: Any,
                 failures: Mapping[type[Exception], int]) -> None:
        self._execute = execute
        self._describe = describe
        self._write = write
        self._out = out
        self._failures = failures

    def run(self, item: str | Command) -> int:
        """Run one statement or command: 0, or the failure's status (its line printed)."""
        try:
            rows = self._command(item) if isinstance(item, Command) else self._execute(item)
        except tuple(self._failures) as exc:
            print(f"sharestate: error: {exc}", file=sys.stderr, flush=True)
            return next(status for kind, status in self._failures.items()
                        if isinstance(exc, kind))
        self._write(self._out, rows)
        self._out.flush()
        return 0

    def _command(self, command: Command) -> Rows:
        if command.name == "q" and not command.argument:
            raise SessionEnd
        if command.name == "d":
            return self._describe(command.argument)
        raise BadCommand(f"unknown command \\{command.name}: {HELP}")

    def run_lines(self, lines: Iterable[str]) -> int:
        """The statements and commands of `lines`, up to the first failure: its status, or
        0."""
        reader = Reader()
        try:
            for line in lines:
                for item in reader.feed(line.rstrip("\r\n")):
                    if status := self.run(item):
                        return status
            for item in reader.end():
                if status := self.run(item):
                    return status
        except SessionEnd:
            pass
        return 0

    def prompt(self, history: Path) -> int:
        """Read statements at a prompt until `\\q` or the end of input: 0."""
        import readline

        reader = Reader()
        with _history(readline, history):
            first = readline.get_current_history_length()
            while True:
                if not reader.started:  # a statement starts: its first history entry
                    first = readline.get_current_history_length()
                try:
                    line = input(MORE if reader.started else PROMPT)
                except KeyboardInterrupt:  # ^C drops the statement being typed
                    print(file=sys.stderr)
                    reader.pending = ""
                    continue
                except EOFError:
                    print(file=sys.stderr)
                    items: list[str | Command] = [*reader.end(), Command("q", "")]
                else:
                    started = reader.started
                    items = reader.feed(line)
                    if items and started:
                        _join_history(readline, first)
                try:
                    for item in items:
                        self.run(item)
                except SessionEnd:
                    return 0
                except KeyboardInterrupt:  # Spark has cancelled the statement's jobs
                    print("sharestate: error: cancelled", file=sys.stderr, flush=True)


class Tables:
    """The warehouse's tables by name, as the session registered them (`register_views`).

    An rs view reads the files of the version it was made from, so before each statement
    the views are made again when a table's Delta log has a newer commit (or a table
    appeared) since: a session open while a run commits answers from what the run wrote.
    Catalog tables (jvm) read their latest version by themselves, and --as-of-time views stay
    at their time.
    """

    def __init__(self, spark: Any, warehouse: str, *, as_of_time: int | None) -> None:
        from sharestate.lake import open_lake, register_views

        self._spark = spark
        self._warehouse = warehouse
        self.names = register_views(spark, warehouse, catalog=True, as_of_time=as_of_time)
        follow = as_of_time is None and open_lake(spark).backend != "jvm"
        self._commits = _last_commits(warehouse) if follow else None

    def refresh(self) -> None:
        """The views made again if a table has a newer commit than they read."""
        from sharestate.lake import register_views

        if self._commits is None:
            return
        commits = _last_commits(self._warehouse)
        if commits != self._commits:
            self.names = register_views(self._spark, self._warehouse, catalog=True)
            self._commits = commits


def _last_commits(warehouse: str) -> dict[str, str]:
    """Each table's newest commit file name (its version)."""
    from sharestate.lake import find_tables

    last = {}
    for name, path in find_tables(warehouse).items():
        with suppress(OSError):  # check_warehouse said what it could not read
            last[name] = max((entry for entry in os.listdir(path / "_delta_log")
                              if entry.endswith(".json") and entry[:20].isdigit()), default="")
    return last


def describe(spark: Any, tables: list[str], name: str) -> Rows:
    """`\\d`: each table with its columns; `\\d NAME`: that table's columns and types."""
    if not name:
        return ["table", "columns"], [{"table": table, "columns": ", ".join(
            spark.table(table).columns)} for table in tables], None
    table = next((t for t in tables if t.lower() == name.lower()), None)
    if table is None:
        raise BadCommand(f"no table {name}: \\d lists them")
    return ["column", "type"], [{"column": field.name, "type": field.dataType.simpleString()}
                                for field in spark.table(table).schema.fields], None


def history_file() -> Path:
    """Where the prompt keeps its history."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                              ".local", "state")
    return Path(state, "sharestate", "sql_history")


@contextmanager
def _history(readline: Any, path: Path) -> Iterator[None]:
    """The history read from `path` (a regular file, else none) and written back."""
    readline.set_history_length(HISTORY_LINES)
    with suppress(OSError):
        if stat.S_ISREG(os.stat(path).st_mode):
            readline.read_history_file(path)
    try:
        yield
    finally:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError as exc:
            print(f"sharestate: history not kept in {path}: {exc.strerror}", file=sys.stderr)


def _join_history(readline: Any, first: int) -> None:
    """The history entries after the first `first`, one statement typed over several lines,
    as one entry."""
    last = readline.get_current_history_length()
    parts = [readline.get_history_item(n) or "" for n in range(first + 1, last + 1)]
    for index in range(last - 1, first - 1, -1):
        readline.remove_history_item(index)
    readline.add_history(" ".join(part.strip() for part in parts))
