"""Partition values as Delta stores them, and the Hive-style folders that hold their files.

Delta keeps a file's partition values as strings in its add action (`null` for a null or
empty value); Spark finds them again from `column=value` folder names. Only column types
whose string form is unambiguous can partition a table: strings, integers, booleans, dates.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any

PARTITION_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})
"""Delta type names a partition column may have."""

NULL_FOLDER = "__HIVE_DEFAULT_PARTITION__"
"""The folder-name stand-in for a null partition value (Spark's and Hive's)."""

PartitionSpec = Mapping[str, object]
"""Some partition columns and their values (None for null): the partitions it matches."""

FileSpec = Mapping[str, tuple[str, object]]
"""Conditions on columns (partition columns or not), each `("=", value)`, `("in", values)` or
`(">", value)`: the data files whose rows all meet every one (`file_matches`)."""

# Characters Spark's ExternalCatalogUtils.escapePathName escapes in a folder name.
_ESCAPED = frozenset('"#%\'*/:=?\\\x7f{[]^') | frozenset(chr(c) for c in range(1, 32))


def partition_string(value: object) -> str | None:
    """A partition value as Delta writes it in `partitionValues`; None for null or ''."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"unsupported partition value {value!r} ({type(value).__name__}); "
                    f"partition columns hold strings, integers, booleans or dates")


def escape_path_name(text: str) -> str:
    """`text` with the characters Spark escapes in partition folder names as %XX."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def partition_folder(values: Mapping[str, str | None]) -> str:
    """The relative folder for partition values, e.g. `topic=a/partition=3`; '' for none."""
    return "/".join(f"{escape_path_name(column)}="
                    f"{NULL_FOLDER if value is None else escape_path_name(value)}"
                    for column, value in values.items())


def normalize_specs(specs: Sequence[PartitionSpec], partition_by: Sequence[str]
                    ) -> list[dict[str, str | None]]:
    """Specs with values as partition strings; rejects columns that do not partition."""
    normalized = []
    for spec in specs:
        unknown = sorted(set(spec) - set(partition_by))
        if unknown:
            raise ValueError(f"not partition columns: {', '.join(unknown)} "
                             f"(the table is partitioned by {list(partition_by) or 'nothing'})")
        normalized.append({column: partition_string(value) for column, value in spec.items()})
    return normalized


def matches(specs: Sequence[Mapping[str, str | None]], values: Mapping[str, str | None]) -> bool:
    """Whether partition values fall in any of the (normalized) specs."""
    return any(all(values.get(column) == value for column, value in spec.items())
               for spec in specs)


def _quoted(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"


def _literal(value: str, type_name: str) -> str:
    """A Spark SQL literal for the partition string of a column of Delta type `type_name`."""
    if type_name == "string":
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if type_name == "date":
        return f"DATE'{value}'"
    if type_name == "boolean":
        return value
    return str(int(value))


def replace_where(specs: Sequence[Mapping[str, str | None]], types: Mapping[str, str]) -> str:
    """A Spark SQL predicate matching the (normalized) specs; `types`: column -> Delta type."""
    terms = []
    for spec in specs:
        parts = [f"{_quoted(column)} IS NULL" if value is None
                 else f"{_quoted(column)} = {_literal(value, types[column])}"
                 for column, value in spec.items()]
        terms.append("(" + " AND ".join(parts) + ")" if parts else "true")
    return " OR ".join(terms) if terms else "false"


def file_matches(spec: FileSpec, partition_values: Mapping[str, str | None],
                 low: Mapping[str, Any], high: Mapping[str, Any]) -> bool:
    """Whether every row of a data file meets `spec`, from its partition values and its
    columns' minimums and maximums (`low`, `high`). ValueError when the statistics cannot
    tell none or all of its rows do (a file is removed whole or not at all)."""
    stats = []
    for column, (op, value) in spec.items():
        wanted = list(value) if op == "in" else [value]  # type: ignore[call-overload]
        if column in partition_values:
            if op == ">":
                raise ValueError(f"no order on partition column {column}")
            if partition_values[column] not in {partition_string(v) for v in wanted}:
                return False
        else:
            stats.append((column, op, value, wanted))
    every = True
    for column, op, value, wanted in stats:
        least, most = low.get(column), high.get(column)
        if least is None or most is None:
            raise ValueError(f"a data file without statistics of {column}")
        if op == ">":
            all_rows, some_rows = least > value, most > value
        else:
            all_rows = least == most and least in wanted
            some_rows = any(least <= w <= most for w in wanted)
        if not some_rows:
            return False
        every = every and all_rows
    if not every:
        raise ValueError(f"a data file holds rows on both sides of {dict(spec)!r}")
    return True
