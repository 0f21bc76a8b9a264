"""The `rs` backend: Spark executors write Parquet, the driver commits with delta-rs.

A write runs one Spark job (`mapInArrow` over `write_data_files`): each task writes its rows
as Parquet files into the table folder and returns their paths, sizes, partition values and
stats. The driver then commits one Delta transaction (`DeltaTable.create_write_transaction`)
holding an add action per file and, for an overwrite, a remove action per replaced file.
Nothing but file descriptions reaches the driver. Reads list the table's active files with
delta-rs and hand them to Spark's Parquet reader with `basePath`, so partition columns come
back from the folder names and removed files are never read.

The commit's `commitInfo` carries `userMetadata` (the writer's `metadata=` as JSON) and, for
an overwrite, `operationParameters.predicate`: the replaced partitions as the SQL predicate
the `jvm` backend would pass as `replaceWhere` (delta-rs itself records `mode: Append`, the
mode its add+remove transaction is committed with).
Local file systems only: executors write with plain file I/O.
"""

from __future__ import annotations

import functools
import json
import os
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import CommitProperties, DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from sharestate.lake.base import (
    ActiveFile,
    Commit,
    Lake,
    Produce,
    Rows,
    TablePath,
    Target,
    check_partition_columns,
    check_same_table,
    conform,
    conform_arrow,
    metadata_json,
    parse_metadata,
    parse_schema,
)
from sharestate.lake.data_files import (
    FILE_ROWS,
    MANY_FILE_ROWS,
    DataFile,
    TableTarget,
    write_data_files,
    write_many_data_files,
)
from sharestate.lake.partitions import (
    PartitionSpec,
    matches,
    normalize_specs,
    partition_string,
    replace_where,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

UNSUPPORTED_READER_FEATURES = frozenset({"deletionVectors", "columnMapping"})
"""Table features a plain list of Parquet files cannot honour: use the `jvm` backend."""


def _root(path: TablePath) -> str:
    """The table's folder, links resolved as delta-rs resolves them in the file URIs it
    lists (Spark's `basePath` must be their prefix)."""
    return os.path.realpath(os.fspath(path))


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


class RsLake(Lake):
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

    def append(self, df: Rows, path: TablePath, *, metadata: Any = None) -> int:
        table = self._table(path)
        files = self._write(df, table, _root(path))
        return self._commit(table, files, [], metadata, {})

    def overwrite(self, df: Rows, path: TablePath, *,
                  partitions: Sequence[PartitionSpec] | None = None,
                  metadata: Any = None) -> int:
        table = self._table(path)
        return self._replace(table, path, self._write(df, table, _root(path)), partitions,
                             metadata)

    def overwrite_many(self, df: DataFrame, produce: Produce, targets: Mapping[str, Target], *,
                       metadata: Any = None) -> dict[str, int]:
        """Each task runs `produce` and writes every table's files itself: one pass, no cache."""
        tables = {name: self._table(t.path) for name, t in targets.items()}
        plans = {}
        for name, table in tables.items():
            schema = _spark_schema(table)
            plans[name] = TableTarget(
                _root(targets[name].path), tuple(table.metadata().partition_columns),
                tuple(f.name for f in schema.fields if not f.nullable),
                tuple(schema.names))
        task = functools.partial(write_many_data_files, produce=produce, targets=plans)
        rows = df.mapInArrow(task, _struct(MANY_FILE_ROWS)).collect()
        written: dict[str, list[DataFile]] = {name: [] for name in targets}
        for row in rows:
            values = row.asDict()
            written[str(values.pop("table"))].append(DataFile.from_row(values))
        return {name: self._replace(tables[name], t.path, written[name], t.partitions, metadata)
                for name, t in targets.items()}

    def _replace(self, table: DeltaTable, path: TablePath, files: list[DataFile],
                 partitions: Sequence[PartitionSpec] | None, metadata: Any) -> int:
        """Commit `files` replacing `partitions` (None: the partitions the files are in)."""
        partition_by = table.metadata().partition_columns
        dynamic = partitions is None and bool(partition_by)
        specs = [] if dynamic else normalize_specs(
            [{}] if partitions is None else partitions, partition_by)
        if dynamic:
            unique = {json.dumps(f.partition_values, sort_keys=True): f for f in files}
            specs = [dict(f.partition_values) for f in unique.values()]
        elif stray := [f for f in files if not matches(specs, f.partition_values)]:
            for file in files:
                os.remove(os.path.join(_root(path), file.path))
            raise ValueError(f"rows outside the partitions being replaced, e.g. "
                             f"{dict(stray[0].partition_values)}; replacing {specs}")
        types = {f.name: f.dataType.typeName() for f in _spark_schema(table).fields}
        return self._commit(table, files, self._removals(table, specs), metadata,
                            {"predicate": replace_where(specs, types)})

    def read(self, path: TablePath, *, version: int | None = None) -> DataFrame:
        table = _readable(path, version)
        schema = _spark_schema(table)
        uris = table.file_uris()
        if not uris:
            return self.spark.createDataFrame([], schema)
        return (self.spark.read.schema(schema).option("basePath", _root(path))
                .parquet(*uris).select(*schema.names))

    def read_arrow(self, path: TablePath, columns: Sequence[str] | None = None) -> pa.Table:
        """Read on the driver by delta-rs, no Spark job."""
        return read_table(path, columns)

    def version(self, path: TablePath) -> int:
        return int(DeltaTable(_root(path)).version())

    def history(self, path: TablePath, limit: int | None = None) -> list[Commit]:
        return [Commit(int(entry["version"]), int(entry.get("timestamp", 0)),
                       str(entry.get("operation", "")),
                       dict(entry.get("operationParameters") or {}),
                       parse_metadata(entry.get("userMetadata")))
                for entry in DeltaTable(_root(path)).history(limit)]

    def schema(self, path: TablePath) -> StructType:
        return _spark_schema(DeltaTable(_root(path)))

    def partition_columns(self, path: TablePath) -> list[str]:
        return list(DeltaTable(_root(path)).metadata().partition_columns)

    def properties(self, path: TablePath) -> dict[str, str]:
        return dict(DeltaTable(_root(path)).metadata().configuration)

    def active_files(self, path: TablePath) -> list[ActiveFile] | None:
        table = self._table(path)
        actions = pa.table(table.get_add_actions(flatten=False)).to_pylist()
        root = _root(path)
        return [ActiveFile(os.path.join(root, urllib.parse.unquote(a["path"])),
                           dict(a.get("partition") or {}), int(a["num_records"] or 0),
                           dict(a.get("min") or {}), dict(a.get("max") or {}))
                for a in actions]

    def _table(self, path: TablePath) -> DeltaTable:
        if not self.exists(path):
            raise FileNotFoundError(f"no Delta table at {path}; create it first")
        return DeltaTable(_root(path))

    def _write(self, df: Rows, table: DeltaTable, root: str) -> list[DataFile]:
        """Write `df` as data files of `table` (folder `root`): a DataFrame by a Spark job,
        an Arrow table here on the driver."""
        schema = _spark_schema(table)
        task = functools.partial(
            write_data_files, root=root,
            partition_by=list(table.metadata().partition_columns),
            not_null=[field.name for field in schema.fields if not field.nullable])
        if isinstance(df, pa.Table):
            written = task(iter(conform_arrow(df, schema).to_batches()))
            return [DataFile.from_row(row) for batch in written for row in batch.to_pylist()]
        rows = conform(df, schema).mapInArrow(task, _struct(FILE_ROWS)).collect()
        return [DataFile.from_row(row.asDict()) for row in rows]

    def _removals(self, table: DeltaTable, specs: Sequence[Mapping[str, str | None]]
                      ) -> list[RemoveAction]:
        """Remove actions for the active files in the partitions `specs` match."""
        partition_by = table.metadata().partition_columns
        now = int(time.time() * 1000)
        removes = []
        for entry in pa.table(table.get_add_actions(flatten=True)).to_pylist():
            values = {c: partition_string(entry[f"partition.{c}"]) for c in partition_by}
            if matches(specs, values):
                removes.append(RemoveAction(urllib.parse.unquote(entry["path"]), True, now,
                                            entry["size_bytes"], values))
        return removes

    def _commit(self, table: DeltaTable, files: Sequence[DataFile],
                removes: Sequence[RemoveAction], metadata: Any,
                parameters: Mapping[str, str]) -> int:
        """Commit the files (and removes) as one transaction; return the new version."""
        adds = [AddAction(f.path, f.size, dict(f.partition_values), f.modification_time, True,
                          f.stats) for f in files]
        custom: dict[str, Any] = {"operationParameters": dict(parameters)}
        if (user_metadata := metadata_json(metadata)) is not None:
            custom["userMetadata"] = user_metadata
        table.create_write_transaction(
            [*adds, *removes], mode="append", schema=table.schema(),
            partition_by=table.metadata().partition_columns,
            commit_properties=CommitProperties(custom_metadata=custom))
        table.update_incremental()
        return int(table.version())


def _struct(schema: pa.Schema) -> StructType:
    """An Arrow schema as Spark's (a job's output schema without a JVM DDL parse)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


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
