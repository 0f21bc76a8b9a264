"""The `jvm` backend: Spark's own Delta (delta-spark), where Delta's jars are on the cluster.

Writes are `format("delta")` saves: append; overwrite of named partitions with `replaceWhere`
(Delta checks every row falls inside it), of the partitions present in the data with
`partitionOverwriteMode=dynamic`, of an unpartitioned table whole. `metadata=` goes into
`commitInfo.userMetadata`, as with the `rs` backend. MERGE, time travel and Delta SQL are
available on the same tables through `delta.tables.DeltaTable` and `spark.sql`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sharestate.lake.base import (
    Commit,
    Lake,
    Rows,
    TablePath,
    as_frame,
    check_partition_columns,
    check_same_table,
    conform,
    metadata_json,
    parse_metadata,
    parse_schema,
)
from sharestate.lake.partitions import PartitionSpec, normalize_specs, replace_where

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import DataFrame, DataFrameWriter
    from pyspark.sql.types import StructType


def _root(path: TablePath) -> str:
    return os.path.abspath(os.fspath(path))


class JvmLake(Lake):
    """Delta tables through delta-spark."""

    backend = "jvm"

    def exists(self, path: TablePath) -> bool:
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self.spark, _root(path)))

    def create(self, path: TablePath, schema: StructType | str, *,
               partition_by: Sequence[str] = (),
               properties: Mapping[str, str] | None = None) -> int:
        from delta.tables import DeltaTable

        struct = parse_schema(self.spark, schema)
        check_partition_columns(struct, partition_by)
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
        self._writer(df, path, "append", metadata).save(_root(path))
        return self.version(path)

    def overwrite(self, df: Rows, path: TablePath, *,
                  partitions: Sequence[PartitionSpec] | None = None,
                  metadata: Any = None) -> int:
        partition_by = self.partition_columns(path)
        writer = self._writer(df, path, "overwrite", metadata)
        if partition_by and partitions is None:
            writer = writer.option("partitionOverwriteMode", "dynamic")
        elif partitions is not None:
            specs = normalize_specs(partitions, partition_by)
            types = {f.name: f.dataType.typeName() for f in self.schema(path).fields}
            writer = writer.option("replaceWhere", replace_where(specs, types))
        writer.save(_root(path))
        return self.version(path)

    def read(self, path: TablePath, *, version: int | None = None) -> DataFrame:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(_root(path))

    def version(self, path: TablePath) -> int:
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
        struct: StructType = self.spark.read.format("delta").load(_root(path)).schema
        return struct

    def partition_columns(self, path: TablePath) -> list[str]:
        return list(self._table(path).detail().collect()[0]["partitionColumns"])

    def properties(self, path: TablePath) -> dict[str, str]:
        return dict(self._table(path).detail().collect()[0]["properties"] or {})

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
