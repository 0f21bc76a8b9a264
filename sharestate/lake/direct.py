"""What the backends whose executors write a table's Parquet files themselves share.

A write runs one Spark job (`mapInArrow` over `sharestate.lake.data_files`): each task
writes its rows as Parquet files into the table's folder and returns their paths, sizes,
partition values and statistics; an Arrow table held on the driver is written there, with
no job. The driver then commits the files as one transaction (`_commit`, the backend's
own: delta-rs for `rs`, delta-spark's for `jvm`), replacing the partitions an overwrite
names (or, named none, those it wrote). Nothing but file descriptions reaches the driver.
Executors write with plain file I/O: the table must be on a file system they all see.
"""

from __future__ import annotations

import functools
import json
import os
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sharestate.lake.base import (
    Inputs,
    Lake,
    Produce,
    Rows,
    TablePath,
    Target,
    conform,
    conform_arrow,
    write_in_order,
)
from sharestate.lake.data_files import (
    FILE_ROWS,
    MANY_FILE_ROWS,
    DataFile,
    TableTarget,
    write_data_files,
    write_many_data_files,
)
from sharestate.lake.partitions import FileSpec, PartitionSpec, matches, normalize_specs

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

Specs = list[dict[str, str | None]]
"""Normalized partition specs (values as partition strings)."""


@dataclass(frozen=True)
class Replaced:
    """The active files a commit removes: those in the partitions `specs` match, and those
    whose rows all match one of the `drop` conditions (by their column statistics)."""

    specs: Specs
    drop: Sequence[FileSpec] = ()


def root_of(path: TablePath) -> str:
    """A table's folder as an absolute path."""
    return os.path.abspath(os.fspath(path))


class DirectLake(Lake):
    """A lake whose executors write the data files and whose driver commits them."""

    @abstractmethod
    def _layout(self, path: TablePath) -> tuple[StructType, list[str]]:
        """The table's schema and partition columns."""

    @abstractmethod
    def _commit(self, path: TablePath, files: Sequence[DataFile], replaced: Replaced | None,
                metadata: Any) -> int:
        """Commit `files` as one transaction, removing the active files `replaced` names
        (None: an append); the new version."""

    def append(self, df: Rows, path: TablePath, *, metadata: Any = None) -> int:
        return self._commit(path, self._write(df, path), None, metadata)

    def overwrite(self, df: Rows, path: TablePath, *,
                  partitions: Sequence[PartitionSpec] | None = None,
                  metadata: Any = None) -> int:
        return self._replace(path, self._write(df, path), partitions, metadata)

    def overwrite_many(self, df: Inputs, produce: Produce, targets: Mapping[str, Target], *,
                       metadata: Any = None) -> dict[str, int]:
        """Each task runs `produce` and writes every table's files itself: one pass, no
        cache; then one commit per table, the tables side by side (`Target.last` ones
        after the others)."""
        from pyspark.util import inheritable_thread_target

        plans = {name: self._target(t.path) for name, t in targets.items()}
        task = functools.partial(write_many_data_files, produce=produce, targets=plans)
        rows = df.mapInArrow(task, _struct(MANY_FILE_ROWS)).collect()
        written: dict[str, list[DataFile]] = {name: [] for name in targets}
        for row in rows:
            values = row.asDict()
            written[str(values.pop("table"))].append(DataFile.from_row(values))

        @inheritable_thread_target(self.spark)
        def commit(name: str) -> int:
            target = targets[name]
            return self._replace(target.path, written[name], target.partitions, metadata,
                                 target.drop, target.appends)

        return write_in_order(targets, commit)

    def _target(self, path: TablePath) -> TableTarget:
        schema, partition_by = self._layout(path)
        return TableTarget(root_of(path), tuple(partition_by),
                           tuple(f.name for f in schema.fields if not f.nullable),
                           tuple(schema.names))

    def _write(self, df: Rows, path: TablePath) -> list[DataFile]:
        """Write `df` as data files of the table at `path`: a DataFrame by a Spark job, an
        Arrow table here on the driver."""
        schema, _ = self._layout(path)
        target = self._target(path)
        task = functools.partial(write_data_files, root=target.root,
                                 partition_by=list(target.partition_by),
                                 not_null=list(target.not_null))
        if isinstance(df, pa.Table):
            written = task(iter(conform_arrow(df, schema).to_batches()))
            return [DataFile.from_row(row) for batch in written for row in batch.to_pylist()]
        rows = conform(df, schema).mapInArrow(task, _struct(FILE_ROWS)).collect()
        return [DataFile.from_row(row.asDict()) for row in rows]

    def _replace(self, path: TablePath, files: list[DataFile],
                 partitions: Sequence[PartitionSpec] | None, metadata: Any,
                 drop: Sequence[FileSpec] = (), appends: bool = False) -> int:
        """Commit `files` replacing `partitions` (None: the partitions the files are in) and
        the files `drop` matches; rows outside `partitions` are an error unless `appends`."""
        _, partition_by = self._layout(path)
        if partitions is None and partition_by:
            unique = {json.dumps(f.partition_values, sort_keys=True): f for f in files}
            specs: Specs = [dict(f.partition_values) for f in unique.values()]
        else:
            specs = normalize_specs([{}] if partitions is None else partitions, partition_by)
            if not appends and (stray := [f for f in files
                                          if not matches(specs, f.partition_values)]):
                for file in files:
                    os.remove(os.path.join(root_of(path), file.path))
                raise ValueError(f"rows outside the partitions being replaced, e.g. "
                                 f"{dict(stray[0].partition_values)}; replacing {specs}")
        return self._commit(path, files, Replaced(specs, tuple(drop)), metadata)


def _struct(schema: pa.Schema) -> StructType:
    """An Arrow schema as Spark's (a job's output schema without a JVM DDL parse)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
