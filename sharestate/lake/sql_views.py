"""Every Delta table under a warehouse folder by name, for SQL: temp views, or (Delta SQL on
the `jvm` backend) catalog tables."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sharestate.lake.base import Lake
from sharestate.lake.select import open_lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def find_tables(warehouse: str | Path) -> dict[str, Path]:
    """Delta tables under `warehouse` by view name: their relative path joined with '_'.

    `warehouse/log_records` is `log_records`, `warehouse/gold/redelivery` is
    `gold_redelivery`; characters other than letters, digits and '_' become '_'. Folders
    inside a table are not searched. A folder whose `_delta_log` holds no commit and no
    checkpoint is no table yet (a Delta table exists from its version 0: a writer stopped
    before its first commit, by a full disk say, leaves such a folder) and is left out.
    """
    root = Path(warehouse)
    tables: dict[str, Path] = {}
    for folder, children, _files in os.walk(root):
        here = Path(folder)
        if (here / "_delta_log").is_dir():
            children.clear()
            if not _made(here / "_delta_log"):
                continue
            name = re.sub(r"\W", "_", "_".join(here.relative_to(root).parts) or here.name)
            tables[name] = here
        else:
            children[:] = sorted(c for c in children if not c.startswith((".", "_")))
    return dict(sorted(tables.items()))


def _made(log: Path) -> bool:
    """Whether a `_delta_log` holds a commit or a checkpoint."""
    try:
        return any((name.endswith(".json") and name[:20].isdigit()) or ".checkpoint." in name
                   for name in os.listdir(log))
    except OSError:
        return True  # check_table names what is wrong with it


def version_at(lake: Lake, path: str | Path, time_ms: int) -> int | None:
    """The table's version at `time_ms` (epoch ms): its last commit made then or before;
    None when the table did not exist yet."""
    made = [c.version for c in lake.history(str(path)) if c.timestamp_ms <= time_ms]
    return max(made) if made else None


def register_views(spark: SparkSession, warehouse: str | Path,
                   backend: str | None = None, *, catalog: bool = False,
                   as_of_time: int | None = None) -> list[str]:
    """Register each table of `warehouse` by name; return the names, sorted.

    Temp views, except with `catalog` on the `jvm` backend: external Delta tables of the
    session catalog, so that Delta's SQL works on them (`VERSION AS OF`, `TIMESTAMP AS OF`,
    `DESCRIBE HISTORY`). With `as_of_time` (epoch ms), on either backend, each table as it
    was then (its last commit at or before it), as temp views; a table that did not exist
    yet is left out. Registering writes nothing into the tables.
    """
    lake = open_lake(spark, backend)
    registered = []
    for name, path in find_tables(warehouse).items():
        if as_of_time is not None:
            version = version_at(lake, path, as_of_time)
            if version is None:
                continue
            lake.read(str(path), version=version).createOrReplaceTempView(name)
        elif catalog and lake.backend == "jvm":
            spark.catalog.createTable(name, path=str(path), source="delta")
        else:
            lake.read(path).createOrReplaceTempView(name)
        registered.append(name)
    return registered
