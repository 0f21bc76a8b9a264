"""Whether a Delta table's log and data files are whole, checked before a command reads it.

A damaged table made the engines fail deep inside a read (a traceback, exit 70) or, worse,
answer from an older version without a word: Spark and delta-rs read an empty commit file
as a commit that changes nothing, so a table whose only write was lost read as empty.
`check_table` reads the log the way a Delta reader replays it, before either backend does,
and raises `DamagedTable` with one line naming the table, the file and the damage:

- `_delta_log/_last_checkpoint` that is not a JSON object with a version, or names a
  checkpoint that is not there;
- a checkpoint that cannot be read as Parquet;
- a commit version missing after the checkpoint (or from 0 without one);
- a commit file that is not newline-delimited JSON objects, one action each (cut short,
  overwritten), or that holds no action at all. The Delta protocol defines a commit as
  "an atomic set of actions" applied to the version before it and does not spell out a
  minimum, but no Delta writer commits nothing (delta-spark and delta-rs write at least
  `commitInfo`): an empty file is a write that was lost. A commit of only removes, or of
  only `commitInfo`, is valid and passes;
- a data file of the table's current version (an `add` not removed since) that is not on
  disk.

Tables whose checkpoint is a V2 (UUID-named) one are checked up to the data files: their
file list may live in sidecars this check does not read.
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

LOG = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
_COMMIT = re.compile(r"(\d{20})\.json")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet")
_V2_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)")
_MAX_HINT_BYTES = 1 << 20

Damaged = Callable[[str, str], "DamagedTable"]
"""(file, damage) -> the error naming them."""


class DamagedTable(ValueError):
    """A table whose Delta log or data files are damaged (one line: table, file, damage)."""


def check_warehouse(warehouse: str | Path) -> None:
    """Check every Delta table under `warehouse` (`find_tables`); DamagedTable names the first
    damaged one."""
    from sharestate.lake.sql_views import find_tables

    for name, path in find_tables(warehouse).items():
        check_table(path, name)


def check_table(path: str | Path, name: str | None = None) -> None:
    """Raise DamagedTable if the table at `path` (called `name`) cannot be read whole."""
    root = Path(path)
    table = name or root.name

    def damaged(file: str, damage: str) -> DamagedTable:
        return DamagedTable(f"table {table} is damaged: {file}: {damage}")

    log = root / LOG
    try:
        names = os.listdir(log)
    except OSError as exc:
        raise damaged(LOG, f"cannot be listed: {exc.strerror}") from None
    commits = {int(m.group(1)): n for n in names if (m := _COMMIT.fullmatch(n))}
    checkpoint, parts = _checkpoint(log, names, damaged)
    first = 0 if checkpoint is None else checkpoint + 1
    last = max(commits, default=-1)
    if checkpoint is None and not commits:
        raise damaged(LOG, "holds no commit")
    for version in range(first, last + 1):
        if version not in commits:
            raise damaged(f"{LOG}/{version:020d}.json", "is missing (the log has later "
                                                         f"versions, up to {last})")
    active: dict[tuple[str, str | None], str] = {}
    if parts is not None:
        for part in parts:
            for action in _checkpoint_actions(log / part, damaged):
                _apply(active, action, f"{LOG}/{part}")
    for version in range(first, last + 1):
        file = f"{LOG}/{commits[version]}"
        hint = f" (the table's last commit: without it the table reads as version " \
               f"{version - 1})" if version == last and version > 0 else ""
        for action in _commit_actions(root / file, functools.partial(_in, damaged, file, hint)):
            _apply(active, action, file)
    if parts is None and checkpoint is not None:
        return  # a V2 checkpoint: its file list may be in sidecars
    for (data, _dv), added_by in sorted(active.items()):
        local = _local(root, data)
        if local is not None and not local.is_file():
            raise damaged(data, f"is missing (a data file of the table's current version, "
                                f"added by {added_by})")


def _checkpoint(log: Path, names: list[str], damaged: Damaged
                ) -> tuple[int | None, list[str] | None]:
    """The checkpoint to replay from: its version and Parquet parts (None: a V2 checkpoint),
    or (None, None) without one. `_last_checkpoint` names it when present."""
    complete: dict[int, list[str]] = {}
    multi: dict[tuple[int, int], list[str]] = {}
    v2: set[int] = set()
    for name in names:
        if (m := _CHECKPOINT.fullmatch(name)) is not None:
            if m.group(2) is None:
                complete[int(m.group(1))] = [name]
            else:
                multi.setdefault((int(m.group(1)), int(m.group(3))), []).append(name)
        elif (m := _V2_CHECKPOINT.fullmatch(name)) is not None:
            v2.add(int(m.group(1)))
    for (version, count), found in multi.items():
        if len(found) == count:  # readers ignore a multi-part checkpoint with parts missing
            complete.setdefault(version, sorted(found))
    hint_file = f"{LOG}/{LAST_CHECKPOINT}"
    if LAST_CHECKPOINT in names:
        try:
            with open(log / LAST_CHECKPOINT, "rb") as handle:
                text = handle.read(_MAX_HINT_BYTES + 1)
            hint = json.loads(text) if len(text) <= _MAX_HINT_BYTES else None
        except OSError as exc:
            raise damaged(hint_file, f"cannot be read: {exc.strerror}") from None
        except (ValueError, RecursionError):
            hint = None
        named = hint.get("version") if isinstance(hint, dict) else None
        if isinstance(named, bool) or not isinstance(named, int) or named < 0:
            raise damaged(hint_file, "is not a JSON object naming a checkpoint version")
        if named in complete:
            return named, complete[named]
        if named in v2:
            return named, None
        raise damaged(hint_file, f"names checkpoint version {named}, which is not in {LOG}")
    newest = max([*complete, *v2], default=None)
    if newest is None:
        return None, None
    return newest, complete.get(newest)


def _in(damaged: Damaged, file: str, hint: str, damage: str) -> DamagedTable:
    return damaged(file, damage + hint)


def _commit_actions(path: Path, damaged: Callable[[str], DamagedTable]
                    ) -> Iterator[dict[str, Any]]:
    """A commit's actions, in order; DamagedTable where it is not a valid commit."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise damaged(f"cannot be read: {exc.strerror}") from None
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise damaged(f"is not UTF-8 text at byte {exc.start}") from None
    actions = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except (ValueError, RecursionError) as exc:
            cut = " (cut short?)" if number == len(lines) else ""
            raise damaged(f"line {number} is not JSON{cut}: {str(exc)[:80]}") from None
        if not isinstance(action, dict) or len(action) != 1:
            raise damaged(f"line {number} is not one action (a JSON object with one key)")
        actions += 1
        yield action
    if not actions:
        raise damaged(f"holds no action ({len(data)} bytes): a commit that was never written "
                      "whole")


def _checkpoint_actions(path: Path, damaged: Damaged) -> Iterator[dict[str, Any]]:
    """The add and remove actions of a checkpoint part."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = f"{LOG}/{path.name}"
    try:
        schema = pq.read_schema(path)
        kinds = [kind for kind in ("add", "remove") if kind in schema.names]
        rows = pq.read_table(path, columns=kinds).to_pylist()
    except (OSError, pa.ArrowException) as exc:
        raise damaged(file, f"cannot be read as a Parquet checkpoint: {str(exc)[:80]}") \
            from None
    for row in rows:
        for kind in kinds:
            if row.get(kind) is not None:
                yield {kind: row[kind]}


def _apply(active: dict[tuple[str, str | None], str], action: dict[str, Any],
           file: str) -> None:
    """Action reconciliation of file actions: (path, deletion vector) -> where it was added."""
    for kind in ("add", "remove"):
        body = action.get(kind)
        if not isinstance(body, dict) or not isinstance(body.get("path"), str):
            continue
        key = (urllib.parse.unquote(body["path"]), _dv_id(body.get("deletionVector")))
        if kind == "add":
            active[key] = file
        else:
            active.pop(key, None)


def _dv_id(vector: Any) -> str | None:
    if not isinstance(vector, dict):
        return None
    return f"{vector.get('storageType')}{vector.get('pathOrInlineDv')}@{vector.get('offset')}"


def _local(root: Path, path: str) -> Path | None:
    """A data file's path on this machine: relative to the table, or an absolute file URI
    (None: elsewhere, not checked)."""
    parsed = urllib.parse.urlparse(path)
    if parsed.scheme == "file":
        return Path(parsed.path)
    return root / path if not parsed.scheme else None
