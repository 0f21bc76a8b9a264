"""Executor side of the `rs` backend: write a task's rows as Parquet data files.

`write_data_files` is the body of a `mapInArrow` call. It writes each partition value's rows
of the task to one file under `<table>/<column>=<value>/...` (partition columns are left out
of the files, as Delta wants), and yields one row per file (`FILE_ROW_DDL`) from which the
driver builds the add actions of a single commit. A failed task removes what it wrote; a
file no commit names is never read, so retries and speculative copies leave no trace in the
table.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharestate.lake.partitions import partition_folder, partition_string
from sharestate.lake.stats import FileStats

FILE_ROW_DDL = ("path string, size bigint, modification_time bigint, "
                "partition_values string, stats string")
"""What `write_data_files` yields per file: path relative to the table, unescaped."""

_FILE_ROW_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()),
                              ("modification_time", pa.int64()),
                              ("partition_values", pa.string()), ("stats", pa.string())])


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


class _OpenFile:
    def __init__(self, root: str, values: dict[str, str | None], schema: pa.Schema) -> None:
        folder = partition_folder(values)
        name = f"part-{uuid.uuid4()}.snappy.parquet"
        self.path = f"{folder}/{name}" if folder else name
        self.values = values
        os.makedirs(os.path.join(root, folder), exist_ok=True)
        self.writer = pq.ParquetWriter(os.path.join(root, self.path), schema,
                                       compression="snappy", coerce_timestamps="us")
        self.stats = FileStats(schema)


def _groups(batch: pa.RecordBatch, partition_by: Sequence[str]
            ) -> Iterator[tuple[dict[str, str | None], pa.RecordBatch]]:
    """The rows of `batch` per partition value, without the partition columns."""
    data = batch.select([n for n in batch.schema.names if n not in partition_by])
    if not partition_by:
        yield {}, data
        return
    keys = pa.Table.from_batches([batch.select(list(partition_by))])
    for key in keys.group_by(list(partition_by), use_threads=False).aggregate([]).to_pylist():
        mask = None
        for column, value in key.items():
            test = pc.is_null(batch.column(column)) if value is None \
                else pc.equal(batch.column(column), value)
            mask = test if mask is None else pc.and_(mask, test)
        yield {c: partition_string(key[c]) for c in partition_by}, data.filter(mask)


def write_data_files(batches: Iterator[pa.RecordBatch], *, root: str,
                     partition_by: Sequence[str], not_null: Sequence[str]
                     ) -> Iterator[pa.RecordBatch]:
    """Write `batches` under the table folder `root`; yield the files' rows.

    Columns in `not_null` must hold no nulls (Delta's NOT NULL), else the task fails.
    """
    files: dict[tuple[str | None, ...], _OpenFile] = {}
    try:
        for batch in batches:
            for column in not_null:
                if column in partition_by and batch.column(column).null_count:
                    raise ValueError(f"column {column!r} is NOT NULL but the data holds nulls")
            for values, rows in _groups(batch, partition_by):
                if rows.num_rows == 0:
                    continue
                key = tuple(values.values())
                if key not in files:
                    files[key] = _OpenFile(root, values, rows.schema)
                files[key].writer.write_batch(rows)
                files[key].stats.add(rows)
                for column in not_null:
                    if column not in partition_by and files[key].stats.null_count(column):
                        raise ValueError(
                            f"column {column!r} is NOT NULL but the data holds nulls")
        for file in files.values():
            file.writer.close()
    except BaseException:
        for file in files.values():
            file.writer.close()
            os.remove(os.path.join(root, file.path))
        raise
    rows_out = []
    for file in files.values():
        status = os.stat(os.path.join(root, file.path))
        rows_out.append({"path": file.path, "size": status.st_size,
                         "modification_time": int(status.st_mtime * 1000),
                         "partition_values": json.dumps(file.values),
                         "stats": file.stats.to_json()})
    yield pa.RecordBatch.from_pylist(rows_out, schema=_FILE_ROW_SCHEMA)
