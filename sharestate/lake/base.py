"""The interface every Delta backend implements, and what it hands back."""

from __future__ import annotations

import functools
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

import pyarrow as pa

from sharestate.lake.partitions import PARTITION_TYPES, FileSpec, PartitionSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.pandas._typing import ArrowMapIterFunction
    from pyspark.sql.types import StructType

TablePath = str | Path
Rows: TypeAlias = "DataFrame | pa.Table"
"""What a write takes: a DataFrame, or a small Arrow table held on the driver (bookkeeping
rows: no Spark job where the backend can write it directly)."""


class Inputs(Protocol):
    """What `overwrite_many` runs its tasks over: a DataFrame, or anything else that maps
    an Arrow function over its rows into one (`sharestate.spark.jobs.warehouse.TaskRows`)."""

    def mapInArrow(self, func: ArrowMapIterFunction,
                   schema: StructType | str) -> DataFrame: ...


@dataclass(frozen=True)
class Commit:
    """One entry of a table's history.

    `metadata` is what the writer passed as `metadata=` (decoded from the commit's
    `userMetadata`), None when it passed nothing.
    """

    version: int
    timestamp_ms: int
    operation: str
    parameters: Mapping[str, Any]
    metadata: Any


class Lake(ABC):
    """Delta tables by path: create, append, overwrite partitions, read, history.

    Writes return the table version they committed. `metadata` (any JSON value, e.g. the
    input offsets a run covered) is stored with the commit as `commitInfo.userMetadata`
    and comes back in `history()`.
    """

    backend: ClassVar[str]

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark

    def __repr__(self) -> str:
        return f"{type(self).__name__}(backend={self.backend!r})"

    @abstractmethod
    def exists(self, path: TablePath) -> bool:
        """Whether a Delta table is at `path`."""

    @abstractmethod
    def create(self, path: TablePath, schema: StructType | str, *,
               partition_by: Sequence[str] = (),
               properties: Mapping[str, str] | None = None) -> int:
        """Create the table unless it exists; return its version.

        An existing table must have the same columns (name and type, in order) and
        partition columns, else ValueError. `schema` may be a DDL string.
        """

    @abstractmethod
    def append(self, df: Rows, path: TablePath, *, metadata: Any = None) -> int:
        """Append the rows of `df` (columns matched by name) in one commit."""

    @abstractmethod
    def overwrite(self, df: Rows, path: TablePath, *,
                  partitions: Sequence[PartitionSpec] | None = None,
                  metadata: Any = None) -> int:
        """Replace partitions with the rows of `df` in one commit (idempotent).

        `partitions` lists specs such as `{"topic": "t", "partition": 3}`; each names some
        partition columns and matches every partition with those values, `{}` matches all.
        Every row of `df` must fall in one of them, else ValueError. None replaces the
        partitions `df` has rows in. An unpartitioned table is replaced whole.
        """

    @abstractmethod
    def read(self, path: TablePath, *, version: int | None = None) -> DataFrame:
        """The table (at `version`, default latest) as a DataFrame, columns in table order."""

    def read_arrow(self, path: TablePath, columns: Sequence[str] | None = None) -> pa.Table:
        """A small table (or some of its columns) on the driver as Arrow, for the jobs'
        bookkeeping: metadata, findings to count. This default reads through Spark."""
        df = self.read(path)
        return df.select(*columns).toArrow() if columns else df.toArrow()

    @abstractmethod
    def version(self, path: TablePath) -> int:
        """The latest version."""

    @abstractmethod
    def history(self, path: TablePath, limit: int | None = None) -> list[Commit]:
        """Commits, newest first."""

    @abstractmethod
    def schema(self, path: TablePath) -> StructType:
        """The table's Spark schema."""

    @abstractmethod
    def partition_columns(self, path: TablePath) -> list[str]:
        """The partition columns, in order."""

    @abstractmethod
    def properties(self, path: TablePath) -> dict[str, str]:
        """The table properties (`delta.*` ones and custom ones)."""

    def overwrite_many(self, df: Inputs, produce: Produce, targets: Mapping[str, Target], *,
                       metadata: Any = None) -> dict[str, int]:
        """Run `produce` on the executors over `df`'s Arrow batches and overwrite each target
        table with the rows it yields for it, in one pass over `df`; one commit per table.

        `produce(batches)` yields (target name, record batch in the table's columns). Each
        target is replaced as `overwrite` would (`partitions` None: the partitions written).
        This implementation runs `produce` once, caches what it yields as compressed Arrow
        streams (`sharestate.lake.staged`) and then writes the tables from them, side by side
        (each table's write is one Spark job and one commit of its own); a backend may
        write the tables' files straight from the tasks instead.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
        from pyspark.util import inheritable_thread_target

        from sharestate.lake.staged import STAGED, stage, unstage

        if any(t.drop or t.appends for t in targets.values()):
            raise ValueError(f"the {self.backend} backend replaces whole partitions only")
        schemas = {name: self.schema(t.path) for name, t in targets.items()}
        staged = df.mapInArrow(functools.partial(
            stage, produce=produce, columns={name: s.names for name, s in schemas.items()}),
            from_arrow_schema(STAGED)).persist()

        @inheritable_thread_target(self.spark)
        def write(name: str) -> int:
            rows = staged.where(F.col("table") == name).select("rows").mapInArrow(
                functools.partial(unstage, schema=to_arrow_schema(schemas[name])),
                schemas[name])
            return self.overwrite(rows, targets[name].path,
                                  partitions=targets[name].partitions, metadata=metadata)

        try:
            staged.count()  # produce runs once, here; the writes read the cache
            return write_in_order(targets, write)
        finally:
            staged.unpersist()

    def read_files(self, path: TablePath, uris: Sequence[str]) -> DataFrame:
        """Some of the table's data files (`active_files`' URIs) as a DataFrame of the
        table's columns (partition columns from the files' folder names)."""
        schema = self.schema(path)
        return (self.spark.read.schema(schema)
                .option("basePath", os.path.realpath(os.fspath(path)))
                .parquet(*uris).select(*schema.names))

    def active_files(self, path: TablePath, version: int | None = None
                     ) -> list[ActiveFile] | None:
        """The table's data files (at `version`, default the current one), when the backend
        can list them for direct reads (None: read through `read()`; ValueError: a version
        the table's log no longer holds)."""
        return None


Produce = Callable[[Iterator[pa.RecordBatch]], Iterator[tuple[str, pa.RecordBatch]]]
"""An executor-side function: input Arrow batches -> (target table name, rows) pairs."""


@dataclass(frozen=True)
class Target:
    """A table `overwrite_many` replaces: its path and the partitions (None: those written).

    `drop` and `appends` make the write part append (writes whose executors write the data
    files, `DirectLake`; the staged write refuses them): `drop` names more data files to
    remove in the same commit, those whose rows all match one of its `FileSpec`s, and with
    `appends` the rows outside `partitions` are added to the table rather than refused."""

    path: TablePath
    partitions: Sequence[PartitionSpec] | None = None
    drop: Sequence[FileSpec] = ()
    appends: bool = False
    last: bool = False
    """Committed after every other target of the write (a state that says they are done)."""


def write_in_order(targets: Mapping[str, Target], write: Callable[[str], int]
                   ) -> dict[str, int]:
    """`write(name)` for each target, side by side, those marked `last` after all the others;
    each one's new version."""
    first = [name for name, t in targets.items() if not t.last]
    with ThreadPoolExecutor(max(1, len(first))) as pool:
        done = dict(zip(first, pool.map(write, first), strict=True))
    done.update((name, write(name)) for name, t in targets.items() if t.last)
    return {name: done[name] for name in targets}


@dataclass(frozen=True)
class ActiveFile:
    """One data file of a table's current version: where, its partition values (typed), its
    row count and the column minimums and maximums its statistics hold."""

    uri: str
    partition_values: Mapping[str, Any]
    records: int
    min_values: Mapping[str, Any]
    max_values: Mapping[str, Any]


def parse_schema(spark: SparkSession, schema: StructType | str) -> StructType:
    """`schema`, parsing a DDL string with Spark."""
    if isinstance(schema, str):
        parsed: StructType = spark.createDataFrame([], schema).schema
        return parsed
    return schema


def check_partition_columns(schema: StructType, partition_by: Sequence[str]) -> None:
    """Partition columns must exist and have a type listed in `PARTITION_TYPES`."""
    types = {field.name: field.dataType.typeName() for field in schema.fields}
    for column in partition_by:
        if column not in types:
            raise ValueError(f"partition column {column!r} is not a column of the schema")
        if types[column] not in PARTITION_TYPES:
            raise ValueError(f"partition column {column!r} has type {types[column]}; "
                             f"allowed: {', '.join(sorted(PARTITION_TYPES))}")


def check_same_table(path: TablePath, existing: StructType, existing_partitions: Sequence[str],
                     schema: StructType, partition_by: Sequence[str]) -> None:
    """An existing table must match what `create` was asked for."""
    def columns(struct: StructType) -> list[tuple[str, str]]:
        return [(field.name, field.dataType.simpleString()) for field in struct.fields]

    if columns(existing) != columns(schema) or list(existing_partitions) != list(partition_by):
        raise ValueError(f"a different table already exists at {path}: columns "
                         f"{columns(existing)} partitioned by {list(existing_partitions)}")


def as_frame(spark: SparkSession, df: Rows, schema: StructType) -> DataFrame:
    """`df` as a DataFrame of `schema` (an Arrow table is converted, columns by name)."""
    if isinstance(df, pa.Table):
        return spark.createDataFrame(conform_arrow(df, schema), schema)
    return df


def conform_arrow(rows: pa.Table, schema: StructType) -> pa.Table:
    """`rows` with the table's columns in order and Spark's Arrow types for them."""
    from pyspark.sql.pandas.types import to_arrow_schema

    missing = sorted(set(schema.names) - set(rows.column_names))
    extra = sorted(set(rows.column_names) - set(schema.names))
    if missing or extra:
        raise ValueError("data does not match the table: "
                         + "; ".join(([f"missing columns {missing}"] if missing else [])
                                     + ([f"unknown columns {extra}"] if extra else [])))
    try:
        return rows.select(schema.names).cast(to_arrow_schema(schema))
    except (ValueError, pa.ArrowNotImplementedError) as exc:  # ArrowInvalid is a ValueError
        raise ValueError(f"data does not match the table: {exc}") from None


def conform(df: DataFrame, schema: StructType) -> DataFrame:
    """`df`'s columns in table order; names and types must match the table's."""
    wanted = {field.name: field.dataType for field in schema.fields}
    given = {field.name: field.dataType for field in df.schema.fields}
    missing = sorted(set(wanted) - set(given))
    extra = sorted(set(given) - set(wanted))
    wrong = sorted(f"{name} is {given[name].simpleString()}, table has "
                   f"{wanted[name].simpleString()}"
                   for name in set(wanted) & set(given)
                   if given[name].simpleString() != wanted[name].simpleString())
    if missing or extra or wrong:
        problems = ([f"missing columns {missing}"] if missing else []) \
            + ([f"unknown columns {extra}"] if extra else []) + wrong
        raise ValueError("data does not match the table: " + "; ".join(problems))
    return df.select(*schema.names)


def metadata_json(metadata: Any) -> str | None:
    """`metadata` as the commit's `userMetadata` string (None when there is none)."""
    return None if metadata is None else json.dumps(metadata, sort_keys=True)


def parse_metadata(user_metadata: str | None) -> Any:
    """The value `metadata_json` stored; a string that is not JSON comes back as is."""
    if user_metadata is None:
        return None
    try:
        return json.loads(user_metadata)
    except ValueError:
        return user_metadata
