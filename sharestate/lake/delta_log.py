"""What a Delta table's commits changed since a version, read from its `_delta_log` files.

A compaction (sharestate's `maintain`, Delta's OPTIMIZE) replaces data files with others
holding the same rows, its add and remove actions marked `dataChange: false`; an
incremental reader that compares the file lists of two versions would take that for new
and removed rows. `data_changes` follows the commits one by one and reports only the files
whose rows came or went.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from deltalake import DeltaTable

from sharestate.lake.base import ActiveFile, TablePath


def _actions(root: str, version: int) -> Iterator[dict[str, Any]] | None:
    try:
        with open(os.path.join(root, "_delta_log", f"{version:020d}.json"),
                  encoding="utf-8") as commit:
            lines = commit.read().splitlines()
    except FileNotFoundError:
        return None
    return (json.loads(line) for line in lines if line.strip())


def data_changes(path: TablePath, after: int, then: Sequence[ActiveFile]
                 ) -> list[Mapping[str, Any]] | None:
    """The column minimums (statistics) of each data file whose rows the commits after
    version `after` added or removed, `then` being the table's files at `after`: a file
    removed by a data change, a file added by one and still there, and a file a
    compaction made of any such. None when a commit file is gone (cleaned up after a
    checkpoint) or a removed file is unknown."""
    root = os.path.realpath(os.fspath(path))
    known: dict[str, Mapping[str, Any]] = {f.uri: f.min_values for f in then if f.records}
    empty = {f.uri for f in then if not f.records}
    fresh: set[str] = set()
    changed: list[Mapping[str, Any]] = []
    for version in range(after + 1, int(DeltaTable(root).version()) + 1):
        actions = _actions(root, version)
        if actions is None:
            return None
        adds, inherited = [], False
        for action in actions:
            if "remove" in action:
                removed = action["remove"]
                uri = os.path.join(root, urllib.parse.unquote(removed["path"]))
                if uri in fresh:
                    fresh.discard(uri)
                    inherited = inherited or not removed.get("dataChange", True)
                elif removed.get("dataChange", True) and uri not in empty:
                    if uri not in known:
                        return None
                    changed.append(known[uri])
            elif "add" in action:
                adds.append(action["add"])
        for added in adds:
            uri = os.path.join(root, urllib.parse.unquote(added["path"]))
            stats = json.loads(added.get("stats") or "{}")
            known[uri] = stats.get("minValues") or {}
            if added.get("dataChange", True) or inherited:
                fresh.add(uri)
    changed.extend(known[uri] for uri in sorted(fresh))
    return changed
