"""Per-file column statistics in Delta's `stats` JSON: numRecords, nullCount, min/maxValues.

Collected for top-level columns only. min/max are kept for integers, dates, timestamps
(microseconds, UTC) and strings — a string minimum is cut to 32 characters (still a lower
bound), a string maximum longer than that is left out, as an upper bound cannot be cut.
Floats, decimals, booleans, binary and nested columns get null counts only.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STRING_PREFIX = 32


def _bounded(field_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(field_type) or pa.types.is_date(field_type)
                or pa.types.is_timestamp(field_type) or pa.types.is_string(field_type)
                or pa.types.is_large_string(field_type))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.isoformat(timespec="microseconds") + "Z"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


class FileStats:
    """Statistics of one data file, fed batch by batch."""

    def __init__(self, schema: pa.Schema) -> None:
        self.num_records = 0
        self._nulls = {name: 0 for name in schema.names}
        self._bounded = [field.name for field in schema if _bounded(field.type)]
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
            bounds = pc.min_max(batch.column(name))
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low is None:
                continue
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
