"""The `rs` backend: Spark executors write Parquet, the driver commits with delta-rs.

The executors write the data files (`sharestate.lake.direct`); the driver commits one Delta
transaction (`DeltaTable.create_write_transaction`) holding an add action per file and, for
an overwrite, a remove action per replaced file. Reads list the table's active files with
delta-rs and hand them to Spark's Parquet reader with `basePath`, so partition columns come
back from the folder names and removed files are never read.

The commit's `commitInfo` carries `userMetadata` (the writer's `metadata=` as JSON) and, for
an overwrite, `operationParameters.predicate`: the replaced partitions as the SQL predicate
the `jvm` backend would pass as `replaceWhere` (delta-rs itself records `mode: Append`, the
mode its add+remove transaction is committed with).
Local file systems only: executors write with plain file I/O.
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from sharestate.lake.base import (
    ActiveFile,
    Commit,
    TablePath,
    check_partition_columns,
    check_same_table,
    metadata_json,
    parse_metadata,
    parse_schema,
)
from sharestate.lake.data_files import DataFile
from sharestate.lake.direct import DirectLake, Replaced
from sharestate.lake.partitions import file_matches, matches, partition_string, replace_where

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping"})
"""Table features a plain list of Parquet files cannot honour: use the `jvm` backend."""


def _root(path: TablePath) -> str:
    """The table's folder, links resolved as delta-rs resolves them in the file URIs it
    lists (Spark's `basePath` must be their prefix)."""
    return os.path.realpath(os.fspath(path))


def commit_times(root: str, versions: Sequence[int]) -> dict[int, int]:
    """Each commit's time as Delta's TIMESTAMP AS OF and DESCRIBE HISTORY take it (a table
    without in-commit timestamps): its commit file's modification time in ms, made strictly
    increasing over the versions, as Delta does. `commitInfo.timestamp`, which delta-rs
    reports, is taken at another moment (up to a few ms after the file was written), so a
    time read from Delta's history named a version not yet made. Versions whose commit file
    is gone (cleaned up after a checkpoint) are left out."""
    times: dict[int, int] = {}
    last = -1
    for version in sorted(versions):
        try:
            mtime = os.stat(os.path.join(root, "_delta_log", f"{version:020d}.json")).st_mtime_ns
        except OSError:
            continue
        last = max(mtime // 1_000_000, last + 1)
        times[version] = last
    return times


def read_table(path: TablePath, columns: Sequence[str] | None = None) -> pa.Table:
    """The table's active files (the columns asked for) as one Arrow table, read here.

    The files are read through Arrow's own local file system, never delta-rs's default (a
    file system implemented in Python): with that one Arrow's I/O threads call into Python,
    and one still releasing a Python-owned buffer as the interpreter exits takes the GIL
    after finalisation began, which kills the thread inside a C++ destructor and aborts the
    process (`terminate called without an active exception`, exit 134) after its work.
    """
    root = _root(path)
    local = pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())
    return _readable(root, None).to_pyarrow_table(columns=list(columns) if columns else None,
                                                  filesystem=local)


class FilesGone(ValueError):
    """An older version whose data files a vacuum deleted (one line)."""


def read_frame(spark: SparkSession, path: TablePath, version: int | None = None) -> DataFrame:
    """The table (at `version`) as a Spark DataFrame over its active Parquet files, listed
    from its log by delta-rs: no Spark job rebuilds the table's state first (ValueError: a
    table delta-rs cannot read; FilesGone: `version`'s files were vacuumed)."""
    table = _readable(path, version)
    schema = _spark_schema(table)
    uris = table.file_uris()
    if version is not None and (gone := [u for u in uris if not os.path.exists(u)]):
        raise FilesGone(f"{path} at version {version}: {len(gone)} of its {len(uris)} data "
                        f"files are gone (a vacuum deletes what no version within the "
                        f"retention reads); ask for a later time")
    if not uris:
        return spark.createDataFrame([], schema)
    return (spark.read.schema(schema).option("basePath", _root(path))
            .parquet(*uris).select(*schema.names))


def list_files(path: TablePath, version: int | None = None) -> list[ActiveFile]:
    """The table's data files (at `version`, default the current one), with their partition
    values and statistics, from its log as delta-rs reads it (ValueError: a table delta-rs
    cannot read, or a version its log no longer holds)."""
    if version is None:
        table = _readable(path, None)
    else:
        try:
            table = _readable(path, version)
        except DeltaError as e:
            raise ValueError(f"version {version} of {path} cannot be read: {e}") from None
    actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    root = _root(path)
    return [ActiveFile(os.path.join(root, urllib.parse.unquote(a["path"])),
                       dict(a.get("partition") or {}), int(a["num_records"] or 0),
                       dict(a.get("min") or {}), dict(a.get("max") or {}))
            for a in actions]


def table_layout(path: TablePath) -> tuple[StructType, list[str]]:
    """The table's schema (as Spark's) and partition columns, from its log."""
    table = DeltaTable(_root(path))
    return _spark_schema(table), list(table.metadata().partition_columns)


@dataclass(frozen=True)
class ReplacedFile:
    """An active data file an overwrite removes: its path relative to the table (unescaped),
    partition values (as partition strings) and size."""

    path: str
    partition_values: Mapping[str, str | None]
    size: int


def replaced_files(table: DeltaTable, replaced: Replaced) -> list[ReplacedFile]:
    """The active files of `table` (at the version it was opened at) in the partitions
    `replaced.specs` match, and those whose rows all match a spec of `replaced.drop` (by
    their statistics)."""
    partition_by = table.metadata().partition_columns
    found = []
    for entry in pa.table(table.get_add_actions(flatten=True)).to_pylist():
        values = {c: partition_string(entry[f"partition.{c}"]) for c in partition_by}
        if matches(replaced.specs, values) or (replaced.drop and any(
                file_matches(spec, values, _stats(entry, "min."), _stats(entry, "max."))
                for spec in replaced.drop)):
            found.append(ReplacedFile(urllib.parse.unquote(entry["path"]), values,
                                      int(entry["size_bytes"])))
    return found


def _stats(entry: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """One kind of column statistic (`min.`, `max.`) of a flattened add action."""
    return {key[len(prefix):]: value for key, value in entry.items()
            if key.startswith(prefix)}


class RsLake(DirectLake):
    """Delta tables through delta-rs, with the data files written by Spark executors."""

    backend = "rs"

    def exists(self, path: TablePath) -> bool:
        return bool(DeltaTable.is_deltatable(_root(path)))

    def create(self, path: TablePath, schema: StructType | str, *,
               partition_by: Sequence[str] = (),
               properties: Mapping[str, str] | None = None) -> int:
        struct = parse_schema(self.spark, schema)
        check_partition_columns(struct, partition_by)
        if self.exists(path):
            table = DeltaTable(_root(path))
            check_same_table(path, _spark_schema(table), table.metadata().partition_columns,
                             struct, partition_by)
            return int(table.version())
        table = DeltaTable.create(_root(path), DeltaSchema.from_json(struct.json()),
                                  partition_by=list(partition_by),
                                  configuration=dict(properties or {}),
                                  raise_if_key_not_exists=False)
        return int(table.version())

    def read(self, path: TablePath, *, version: int | None = None) -> DataFrame:
        return read_frame(self.spark, path, version)

    def read_arrow(self, path: TablePath, columns: Sequence[str] | None = None) -> pa.Table:
        """Read on the driver by delta-rs, no Spark job."""
        return read_table(path, columns)

    def version(self, path: TablePath) -> int:
        return int(DeltaTable(_root(path)).version())

    def history(self, path: TablePath, limit: int | None = None) -> list[Commit]:
        root = _root(path)
        entries = DeltaTable(root).history(limit)
        times = commit_times(root, [int(entry["version"]) for entry in entries])
        return [Commit(int(entry["version"]),
                       times.get(int(entry["version"]), int(entry.get("timestamp", 0))),
                       str(entry.get("operation", "")),
                       dict(entry.get("operationParameters") or {}),
                       parse_metadata(entry.get("userMetadata")))
                for entry in entries]

    def schema(self, path: TablePath) -> StructType:
        return _spark_schema(DeltaTable(_root(path)))

    def partition_columns(self, path: TablePath) -> list[str]:
        return list(DeltaTable(_root(path)).metadata().partition_columns)

    def properties(self, path: TablePath) -> dict[str, str]:
        return dict(DeltaTable(_root(path)).metadata().configuration)

    def active_files(self, path: TablePath, version: int | None = None
                     ) -> list[ActiveFile] | None:
        self._table(path)
        return list_files(path, version)

    def _table(self, path: TablePath) -> DeltaTable:
        if not self.exists(path):
            raise FileNotFoundError(f"no Delta table at {path}; create it first")
        return DeltaTable(_root(path))

    def _layout(self, path: TablePath) -> tuple[StructType, list[str]]:
        self._table(path)
        return table_layout(path)

    def _commit(self, path: TablePath, files: Sequence[DataFile], replaced: Replaced | None,
                metadata: Any) -> int:
        """Commit the files (and the removal of the replaced ones) as one transaction."""
        table = self._table(path)
        removes: list[RemoveAction] = []
        parameters = {}
        if replaced is not None:
            types = {f.name: f.dataType.typeName() for f in _spark_schema(table).fields}
            now = int(time.time() * 1000)
            removes = [RemoveAction(f.path, True, now, f.size, dict(f.partition_values))
                       for f in replaced_files(table, replaced)]
            parameters["predicate"] = replace_where(replaced.specs, types)
        adds = [AddAction(f.path, f.size, dict(f.partition_values), f.modification_time, True,
                          f.stats) for f in files]
        custom: dict[str, Any] = {"operationParameters": parameters}
        if (user_metadata := metadata_json(metadata)) is not None:
            custom["userMetadata"] = user_metadata
        table.create_write_transaction(
            [*adds, *removes], mode="append", schema=table.schema(),
            partition_by=table.metadata().partition_columns,
            commit_properties=CommitProperties(custom_metadata=custom))
        table.update_incremental()
        return int(table.version())


def _spark_schema(table: DeltaTable) -> StructType:
    """The table's schema as Spark's: Delta's schema JSON is Spark's StructType JSON."""
    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(table.schema().to_json()))


def _readable(path: TablePath, version: int | None) -> DeltaTable:
    """The table at `path` (at `version`), when delta-rs can read it."""
    table = DeltaTable(_root(path), version=version)
    features = set(table.protocol().reader_features or ())
    if features & UNSUPPORTED_READER_FEATURES:
        raise ValueError(f"table at {path} uses {sorted(features)}, which the rs backend "
                         f"cannot read; use the jvm backend")
    return table
