"""Per-file column statistics in Delta's `stats` JSON: numRecords, nullCount, min/maxValues.

Collected for top-level columns only. min/max are kept for integers, dates, timestamps
(microseconds, UTC) and strings — a string minimum is cut to 32 characters (still a lower
bound), a string maximum longer than that is left out, as an upper bound cannot be cut.
Floats, decimals, booleans, binary and nested columns get null counts only. For a file
`data_files` writes, the bounds of its 32- and 64-bit integer and string columns are those
of the Parquet statistics the writer computes anyway (`add_file`), not a second pass.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

STRING_PREFIX = 32


def _bounded(field_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(field_type) or pa.types.is_date(field_type)
                or pa.types.is_timestamp(field_type) or pa.types.is_string(field_type)
                or pa.types.is_large_string(field_type))


def _from_file(field_type: pa.DataType) -> bool:
    """Whether Parquet's column statistics give the bounds as Delta's: values of a signed
    integer's order, strings in UTF-8 byte order (that of their code points)."""
    return bool(pa.types.is_int32(field_type) or pa.types.is_int64(field_type)
                or pa.types.is_string(field_type))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


class FileStats:
    """Statistics of one data file, fed batch by batch (`written`: and by the Parquet file
    they were written to, `add_file`, for the integer and string bounds)."""

    def __init__(self, schema: pa.Schema, *, written: bool = False) -> None:
        self.num_records = 0
        self._nulls = {name: 0 for name in schema.names}
        self._from_file = [field.name for field in schema
                           if written and _from_file(field.type)]
        self._bounded = [field.name for field in schema
                         if _bounded(field.type) and field.name not in self._from_file]
        self._min: dict[str, Any] = {}
        self._max: dict[str, Any] = {}

    def null_count(self, column: str) -> int:
        """Nulls seen so far in `column`."""
        return self._nulls[column]

    def add(self, batch: pa.RecordBatch) -> None:
        """Account for the rows of `batch` (same schema as the file)."""
        self.num_records += batch.num_rows
        for name in self._nulls:
            self._nulls[name] += batch.column(name).null_count
        for name in self._bounded:
            self._widen(name, pc.min_max(batch.column(name)))

    def add_file(self, path: str, metadata: pq.FileMetaData) -> None:
        """The integer and string bounds of the file at `path` (every batch `add`ed, then
        written there), from its row groups' statistics. A row group whose statistics hold
        no bounds for values it has (Parquet leaves out a string longer than its limit,
        4 KiB) has that column read back."""
        if not self._from_file or not metadata.num_row_groups:
            return
        first = metadata.row_group(0)
        index = {first.column(j).path_in_schema: j for j in range(first.num_columns)}
        for i in range(metadata.num_row_groups):
            group = metadata.row_group(i)
            for name in self._from_file:
                stats = group.column(index[name]).statistics
                if stats is not None and stats.has_min_max:
                    self._widen(name, {"min": stats.min, "max": stats.max})
                elif stats is None or stats.num_values:
                    values = pq.ParquetFile(path).read_row_group(i, columns=[name])
                    self._widen(name, pc.min_max(values.column(name)))

    def _widen(self, name: str, bounds: Any) -> None:
        """Take in the bounds (`min`, `max`: Arrow scalars or values) of more rows."""
        low, high = (value.as_py() if isinstance(value, pa.Scalar) else value
                     for value in (bounds["min"], bounds["max"]))
        if low is None:
            return
        if name not in self._min or low < self._min[name]:
            self._min[name] = low
        if name not in self._max or high > self._max[name]:
            self._max[name] = high

    def to_json(self) -> str:
        """The `stats` string of the file's add action."""
        minimum = {name: (value[:STRING_PREFIX] if isinstance(value, str) else value)
                   for name, value in self._min.items()}
        maximum = {name: value for name, value in self._max.items()
                   if not (isinstance(value, str) and len(value) > STRING_PREFIX)}
        return json.dumps({
            "numRecords": self.num_records,
            "minValues": {name: _json_value(value) for name, value in minimum.items()},
            "maxValues": {name: _json_value(value) for name, value in maximum.items()},
            "nullCount": self._nulls,
        }, separators=(",", ":"))
