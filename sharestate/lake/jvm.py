"""The `jvm` backend: Spark's own Delta (delta-spark), where Delta's jars are on the cluster.

Every commit is delta-spark's. The data files are written by the executors and committed
with delta-spark's transaction (`sharestate.lake.delta_txn`, which says why) wherever that
is possible: the table on a file system the executors write with plain file I/O, a Delta
release whose transaction API that module knows, and a table whose protocol plain Parquet
files meet. Otherwise writes are Delta's own `format("delta")` saves: append; overwrite of
named partitions with `replaceWhere` (Delta checks every row falls inside it), of the
partitions present in the data with `partitionOverwriteMode=dynamic`, of an unpartitioned
table whole; a job's several tables (`overwrite_many`) then come from one pass of its tasks
(see `Lake.overwrite_many`). Either way `metadata=` goes into `commitInfo.userMetadata` and
the operation is recorded as Delta's `WRITE`, as with the `rs` backend. MERGE, time travel
and Delta SQL are available on the same tables through `delta.tables.DeltaTable` and
`spark.sql`.

What needs no Spark job is not asked of one: a table's columns and partitioning are read
once per lake (they do not change under it), its version is the newest commit file in its
log, and the data files of a table on a local file system are listed, small tables read and
the current version's files handed to Spark's Parquet reader, from its log by delta-rs (as
the `rs` backend does; a table with features delta-rs cannot read, or an older version,
goes through Delta's reader).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sharestate.lake.base import (
    ActiveFile,
    Commit,
    Inputs,
    Lake,
    Produce,
    Rows,
    TablePath,
    Target,
    as_frame,
    check_partition_columns,
    check_same_table,
    conform,
    metadata_json,
    parse_metadata,
    parse_schema,
)
from sharestate.lake.data_files import DataFile
from sharestate.lake.delta_txn import DeltaTransactions
from sharestate.lake.direct import DirectLake, Replaced
from sharestate.lake.partitions import PartitionSpec, normalize_specs, replace_where
from sharestate.locations import URI

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, DataFrameWriter, SparkSession
    from pyspark.sql.types import StructType

    from sharestate.lake.rs import ReplacedFile

_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def _root(path: TablePath) -> str:
    text = os.fspath(path)
    return text if URI.match(text) else os.path.abspath(text)


def _local(path: TablePath) -> bool:
    return not URI.match(os.fspath(path))


class JvmLake(DirectLake):
    """Delta tables through delta-spark."""

    backend = "jvm"

    def __init__(self, spark: SparkSession) -> None:
        super().__init__(spark)
        self._layouts: dict[str, tuple[StructType, list[str]]] = {}
        self._direct_tables: dict[str, bool] = {}

    def exists(self, path: TablePath) -> bool:
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self.spark, _root(path)))

    def create(self, path: TablePath, schema: StructType | str, *,
               partition_by: Sequence[str] = (),
               properties: Mapping[str, str] | None = None) -> int:
        from delta.tables import DeltaTable

        struct = parse_schema(self.spark, schema)
        check_partition_columns(struct, partition_by)
        self._layouts.pop(_root(path), None)
        self._direct_tables.pop(_root(path), None)
        if self.exists(path):
            check_same_table(path, self.schema(path), self.partition_columns(path), struct,
                             partition_by)
            return self.version(path)
        builder = DeltaTable.create(self.spark).location(_root(path)).addColumns(struct)
        if partition_by:
            builder = builder.partitionedBy(*partition_by)
        for key, value in (properties or {}).items():
            builder = builder.property(key, value)
        builder.execute()
        return self.version(path)

    def append(self, df: Rows, path: TablePath, *, metadata: Any = None) -> int:
        if self._direct(path):
            return super().append(df, path, metadata=metadata)
        self._writer(df, path, "append", metadata).save(_root(path))
        return self.version(path)

    def overwrite(self, df: Rows, path: TablePath, *,
                  partitions: Sequence[PartitionSpec] | None = None,
                  metadata: Any = None) -> int:
        if self._direct(path):
            return super().overwrite(df, path, partitions=partitions, metadata=metadata)
        partition_by = self.partition_columns(path)
        writer = self._writer(df, path, "overwrite", metadata)
        if partition_by and partitions is None:
            writer = writer.option("partitionOverwriteMode", "dynamic")
        elif partitions is not None:
            specs = normalize_specs(partitions, partition_by)
            writer = writer.option("replaceWhere", replace_where(specs, self._types(path)))
        writer.save(_root(path))
        return self.version(path)

    def overwrite_many(self, df: Inputs, produce: Produce, targets: Mapping[str, Target], *,
                       metadata: Any = None) -> dict[str, int]:
        if all(self._direct(t.path) for t in targets.values()):
            return super().overwrite_many(df, produce, targets, metadata=metadata)
        return Lake.overwrite_many(self, df, produce, targets, metadata=metadata)

    def read(self, path: TablePath, *, version: int | None = None) -> DataFrame:
        """The table's current files listed from its log by delta-rs where it can read the
        table on a local file system, read as Parquet; else (and at older versions) Delta's
        reader, which first rebuilds the table's state in a Spark job: 4-10 s a read on a
        standalone cluster of two 1-core workers, where the run was 2.2 times rs's."""
        if version is None and _local(path):
            from sharestate.lake.rs import read_frame

            try:
                return read_frame(self.spark, path)
            except ValueError:  # features delta-rs cannot read
                pass
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(_root(path))

    def read_arrow(self, path: TablePath, columns: Sequence[str] | None = None) -> pa.Table:
        """Read on the driver by delta-rs where it can read the table, else through Spark."""
        if _local(path):
            from sharestate.lake.rs import read_table

            try:
                return read_table(path, columns)
            except ValueError:  # features delta-rs cannot read
                pass
        return super().read_arrow(path, columns)

    def version(self, path: TablePath) -> int:
        if _local(path):
            log = os.path.join(_root(path), "_delta_log")
            versions = [int(m.group(1)) for name in os.listdir(log)
                        if (m := _COMMIT_FILE.match(name))]
            if versions:
                return max(versions)
        return int(self._table(path).history(1).select("version").collect()[0][0])

    def history(self, path: TablePath, limit: int | None = None) -> list[Commit]:
        table = self._table(path)
        rows = (table.history(limit) if limit is not None else table.history()).select(
            "version", "timestamp", "operation", "operationParameters", "userMetadata"
        ).collect()
        return [Commit(int(row["version"]), int(row["timestamp"].timestamp() * 1000),
                       str(row["operation"]), dict(row["operationParameters"] or {}),
                       parse_metadata(row["userMetadata"]))
                for row in rows]

    def schema(self, path: TablePath) -> StructType:
        return self._layout(path)[0]

    def partition_columns(self, path: TablePath) -> list[str]:
        return list(self._layout(path)[1])

    def properties(self, path: TablePath) -> dict[str, str]:
        rows = self.spark.sql(f"SHOW TBLPROPERTIES delta.`{_root(path)}`").collect()
        return {str(row["key"]): str(row["value"]) for row in rows}

    def active_files(self, path: TablePath, version: int | None = None
                     ) -> list[ActiveFile] | None:
        """The data files from the table's log as delta-rs reads it, for a table on a local
        file system that delta-rs can read (else None: Spark reads the table)."""
        if not _local(path):
            return None
        from sharestate.lake.rs import list_files

        try:
            return list_files(path, version)
        except ValueError:
            return None

    def _layout(self, path: TablePath) -> tuple[StructType, list[str]]:
        """The table's schema and partition columns: from its log as delta-rs reads it on a
        local file system (no Spark job), else from Spark's description of it."""
        root = _root(path)
        if root not in self._layouts and _local(path):
            from sharestate.lake.rs import table_layout

            self._layouts[root] = table_layout(root)
        if root not in self._layouts:
            schema = self.spark.read.format("delta").load(root).schema
            described = [(row[0], row[1]) for row in
                         self.spark.sql(f"DESCRIBE TABLE delta.`{root}`").collect()]
            self._layouts[root] = (schema, _partitioning(described))
        return self._layouts[root]

    def _types(self, path: TablePath) -> dict[str, str]:
        return {f.name: f.dataType.typeName() for f in self.schema(path).fields}

    def _direct(self, path: TablePath) -> bool:
        """Whether the executors write this table's files and delta-spark's transaction
        commits them (see the module docstring)."""
        root = _root(path)
        if root not in self._direct_tables:
            transactions = self._transactions
            self._direct_tables[root] = (_local(path) and transactions is not None
                                         and transactions.writable(root))
        return self._direct_tables[root]

    @functools.cached_property
    def _transactions(self) -> DeltaTransactions | None:
        return DeltaTransactions.open(self.spark)

    def _commit(self, path: TablePath, files: Sequence[DataFile], replaced: Replaced | None,
                metadata: Any) -> int:
        transactions = self._transactions
        assert transactions is not None, "only tables _direct() accepts are committed here"
        root = _root(path)

        def removed(version: int) -> list[ReplacedFile]:
            # the log as delta-rs reads it, at the version the transaction read: Delta's
            # own filterFiles() rebuilds the table's state in a Spark job for every commit
            from deltalake import DeltaTable as RsTable

            from sharestate.lake.rs import replaced_files

            assert replaced is not None
            return replaced_files(RsTable(root, version=version), replaced)

        return transactions.commit(
            root, files, None if replaced is None else removed,
            partition_by=self.partition_columns(path),
            predicate=None if replaced is None else replace_where(replaced.specs,
                                                                  self._types(path)),
            user_metadata=metadata_json(metadata))

    def _table(self, path: TablePath) -> DeltaTable:
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.spark, _root(path))

    def _writer(self, df: Rows, path: TablePath, mode: str, metadata: Any
                ) -> DataFrameWriter:
        schema = self.schema(path)
        writer = conform(as_frame(self.spark, df, schema), schema).write.format("delta") \
            .mode(mode)
        if (user_metadata := metadata_json(metadata)) is not None:
            writer = writer.option("userMetadata", user_metadata)
        return writer


_PARTITION_HEADER = "# Partition Information"


def _partitioning(described: Sequence[tuple[str, str]]) -> list[str]:
    """The partition columns in `DESCRIBE TABLE`'s rows (col_name, data_type): the names
    listed under its `# Partition Information` header, up to the next blank or header row."""
    names = [name for name, _ in described]
    if _PARTITION_HEADER not in names:
        return []
    listed = []
    for name in names[names.index(_PARTITION_HEADER) + 1:]:
        if name == "# col_name":
            continue
        if not name or name.startswith("#"):
            break
        listed.append(name)
    return listed
