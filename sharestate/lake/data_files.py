"""Executor side of the `rs` backend: write a task's rows as Parquet data files.

`write_data_files` is the body of a `mapInArrow` call (or runs on the driver for rows held
there). It writes each partition value's rows of the task to one file under
`<table>/<column>=<value>/...` (partition columns are left out of the files, as Delta
wants), and yields one row per file (`FILE_ROWS`) from which the driver builds the add
actions of a single commit. A failed task removes what it wrote; a file no commit names is
never read, so retries and speculative copies leave no trace in the table.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharestate.lake.partitions import partition_folder, partition_string
from sharestate.lake.stats import FileStats

FILE_ROWS = pa.schema([("path", pa.string()), ("size", pa.int64()),
                       ("modification_time", pa.int64()),
                       ("partition_values", pa.string()), ("stats", pa.string())])
"""What `write_data_files` yields per file: path relative to the table, unescaped."""


@dataclass(frozen=True)
class DataFile:
    """A written data file, as the driver's commit needs it."""

    path: str
    size: int
    modification_time: int
    partition_values: Mapping[str, str | None]
    stats: str

    @classmethod
    def from_row(cls, row: Mapping[str, object]) -> DataFile:
        """Rebuild from a row that `write_data_files` yielded."""
        return cls(str(row["path"]), int(str(row["size"])), int(str(row["modification_time"])),
                   json.loads(str(row["partition_values"])), str(row["stats"]))


ROW_GROUP_ROWS = 65_536
"""Rows per Parquet row group: producers may hand over smaller batches."""


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary-encoding: the strings (ids, names, kinds repeat). Offsets,
    timestamps and record bytes hardly repeat; encoding them plainly writes a third faster
    and the files come out smaller."""
    return [field.name for field in schema if pa.types.is_string(field.type)]


def _statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose Parquet statistics are written: all but bytes (keys, values, raw
    records) and nested ones (state batches), which no reader filters on and whose bounds
    cost a comparison per value. The others' feed the file's Delta statistics too."""
    return [field.name for field in schema
            if not (pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type)
                    or pa.types.is_nested(field.type))]


class _OpenFile:
    def __init__(self, root: str, values: dict[str, str | None], schema: pa.Schema) -> None:
        folder = partition_folder(values)
        name = f"part-{uuid.uuid4()}.snappy.parquet"
        self.path = f"{folder}/{name}" if folder else name
        self.values = values
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        self.location = os.path.join(root, self.path)
        self.writer = pq.ParquetWriter(self.location, schema,
                                       compression="snappy", coerce_timestamps="us",
                                       use_dictionary=_dictionary_columns(schema),
                                       write_statistics=_statistics_columns(schema))
        self.stats = FileStats(schema, written=True)
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0

    def write(self, rows: pa.RecordBatch) -> None:
        """Add `rows`; they are written a row group (`ROW_GROUP_ROWS`) at a time."""
        self.stats.add(rows)
        self.pending.append(rows)
        self.pending_rows += rows.num_rows
        if self.pending_rows >= ROW_GROUP_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_batches(self.pending),
                                    row_group_size=max(self.pending_rows, 1))
            self.pending = []
            self.pending_rows = 0

    def close(self) -> None:
        self.flush()
        self.writer.close()
        self.stats.add_file(self.location, self.writer.writer.metadata)

def _groups(batch: pa.RecordBatch, partition_by: Sequence[str]
            ) -> Iterator[tuple[dict[str, str | None], pa.RecordBatch]]:
    """The rows of `batch` per partition value, without the partition columns."""
    data = batch.select([n for n in batch.schema.names if n not in partition_by])
    if not partition_by:
        yield {}, data
        return
    if (only := _constant(batch, partition_by)) is not None:  # the usual case: one value
        yield only, data
        return
    keys = pa.Table.from_batches([batch.select(list(partition_by))])
    for key in keys.group_by(list(partition_by), use_threads=False).aggregate([]).to_pylist():
        mask = None
        for column, value in key.items():
            test = pc.is_null(batch.column(column)) if value is None \
                else pc.equal(batch.column(column), value)
            mask = test if mask is None else pc.and_(mask, test)
        yield {c: partition_string(key[c]) for c in partition_by}, data.filter(mask)


def _constant(batch: pa.RecordBatch, columns: Sequence[str]) -> dict[str, str | None] | None:
    """The partition strings of `columns` when every row of `batch` has the same values."""
    values: dict[str, str | None] = {}
    for column in columns:
        array = batch.column(column)
        if array.null_count:
            if array.null_count < len(array):
                return None
            values[column] = partition_string(None)
            continue
        bounds = pc.min_max(array)
        if bounds["min"] != bounds["max"]:
            return None
        values[column] = partition_string(bounds["min"].as_py())
    return values


class TableFiles:
    """The data files one task writes into one table: one open file per partition value."""

    def __init__(self, root: str, partition_by: Sequence[str], not_null: Sequence[str]) -> None:
        self.root = root
        self.partition_by = list(partition_by)
        self.not_null = list(not_null)
        self.files: dict[tuple[str | None, ...], _OpenFile] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        """Write `batch`'s rows (columns in table order, partition columns included)."""
        for column in self.not_null:
            if column in self.partition_by and batch.column(column).null_count:
                raise ValueError(f"column {column!r} is NOT NULL but the data holds nulls")
        for values, rows in _groups(batch, self.partition_by):
            if rows.num_rows == 0:
                continue
            key = tuple(values.values())
            if key not in self.files:
                self.files[key] = _OpenFile(self.root, values, rows.schema)
            self.files[key].write(rows)
            for column in self.not_null:
                if column not in self.partition_by and self.files[key].stats.null_count(column):
                    raise ValueError(f"column {column!r} is NOT NULL but the data holds nulls")

    def close(self) -> list[dict[str, object]]:
        """Close every file; their rows (`FILE_ROWS`)."""
        for file in self.files.values():
            file.close()
        rows_out: list[dict[str, object]] = []
        for file in self.files.values():
            status = os.stat(os.path.join(self.root, file.path))
            rows_out.append({"path": file.path, "size": status.st_size,
                             "modification_time": int(status.st_mtime * 1000),
                             "partition_values": json.dumps(file.values),
                             "stats": file.stats.to_json()})
        return rows_out

    def abort(self) -> None:
        """Close and delete every file written (the task failed)."""
        for file in self.files.values():
            file.writer.close()
            os.remove(os.path.join(self.root, file.path))


def write_data_files(batches: Iterator[pa.RecordBatch], *, root: str,
                     partition_by: Sequence[str], not_null: Sequence[str]
                     ) -> Iterator[pa.RecordBatch]:
    """Write `batches` under the table folder `root`; yield the files' rows.

    Columns in `not_null` must hold no nulls (Delta's NOT NULL), else the task fails.
    """
    files = TableFiles(root, partition_by, not_null)
    try:
        for batch in batches:
            files.add(batch)
    except BaseException:
        files.abort()
        raise
    yield pa.RecordBatch.from_pylist(files.close(), schema=FILE_ROWS)


MANY_FILE_ROWS = pa.schema([("table", pa.string()), *FILE_ROWS])
"""What `write_many_data_files` yields per file: `FILE_ROWS` plus the table's name."""


@dataclass(frozen=True)
class TableTarget:
    """Where `write_many_data_files` writes one table's rows, and how it checks them."""

    root: str
    partition_by: tuple[str, ...]
    not_null: tuple[str, ...]
    columns: tuple[str, ...]


def write_many_data_files(batches: Iterator[pa.RecordBatch], *,
                          produce: Callable[[Iterator[pa.RecordBatch]],
                                            Iterator[tuple[str, pa.RecordBatch]]],
                          targets: Mapping[str, TableTarget]) -> Iterator[pa.RecordBatch]:
    """Run `produce` over a task's input and write each (table, rows) it yields into that
    table's folder; yield one row per file (`MANY_FILE_ROWS`). All or nothing per task."""
    files = {name: TableFiles(t.root, t.partition_by, t.not_null) for name, t in targets.items()}
    try:
        for name, rows in produce(batches):
            if rows.num_rows:
                files[name].add(rows.select(list(targets[name].columns)))
    except BaseException:
        for table_files in files.values():
            table_files.abort()
        raise
    out = [{"table": name, **row} for name, table_files in files.items()
           for row in table_files.close()]
    yield pa.RecordBatch.from_pylist(out, schema=MANY_FILE_ROWS)
