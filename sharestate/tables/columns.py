"""Arrow columns built in bulk from rows of Python objects (the hot part of writing rows).

`RowColumns` takes rows (tuples, records, the replay's history entries) one at a time or many
at once and turns each into the values of every column it was given, found by a path of
item indexes into the row; `take()` hands back Arrow arrays. In C
(`sharestate._native.Columns`) each row is walked once and every column written straight
into Arrow buffers, with no Python object per value; `ColumnsPy` is its pure-Python twin.
`transpose` gives plain Python lists of values (for the columns that are objects), and
`tuples_of` turns Arrow columns back into rows (NamedTuples).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa

from sharestate import native

if TYPE_CHECKING:
    from sharestate import _native

BATCH_STRUCT = pa.struct([pa.field("first_offset", pa.int64()),
                          pa.field("last_offset", pa.int64()),
                          pa.field("delivery_state", pa.int32()),
                          pa.field("delivery_count", pa.int32())])
BATCHES = pa.list_(BATCH_STRUCT)
"""A list of state batches (a state's, or a decoded value's)."""

Path = tuple[int, ...]
INT32, INT64, BOOL, STRING, BINARY, STATE_BATCHES = range(6)
"""Column kinds, as `sharestate._native.Columns` numbers them (COL_* in csrc/columns.c)."""
_BITS = {INT32: 32, INT64: 64}


def _kind(data_type: pa.DataType) -> int:
    for kind, test in ((INT32, pa.types.is_int32), (INT64, pa.types.is_int64),
                       (BOOL, pa.types.is_boolean), (STRING, pa.types.is_string),
                       (BINARY, pa.types.is_binary)):
        if test(data_type):
            return kind
    if data_type == BATCHES:
        return STATE_BATCHES
    raise ValueError(f"no column of type {data_type} is built from rows")


class RowSink(Protocol):
    """What takes rows: `sharestate._native.Columns` and `ColumnsPy`."""

    def append(self, row: Any, /) -> None: ...


class ColumnsPy:
    """The pure-Python `sharestate._native.Columns` (same checks, same errors): each column's
    values in a list, checked as they are added."""

    def __init__(self, specs: tuple[tuple[Path, int], ...]) -> None:
        self.specs = specs
        self.values: list[list[Any]] = [[] for _ in specs]
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def append(self, row: Any, /) -> None:
        """Add one row (all its columns, or on an error none)."""
        found = [_checked(kind, _follow(row, path)) for path, kind in self.specs]
        for column, value in zip(self.values, found, strict=True):
            column.append(value)
        self.rows += 1

    def extend(self, rows: list[Any], /) -> None:
        for row in rows:
            self.append(row)

    def take(self) -> list[list[Any]]:
        """Every column's values, emptied."""
        taken, self.values, self.rows = self.values, [[] for _ in self.specs], 0
        return taken


def _follow(row: Any, path: Path) -> Any:
    for index in path:
        if row is None:
            return None
        if not isinstance(row, tuple) or not 0 <= index < len(row):
            raise IndexError("path does not fit a row")
        row = row[index]
    return row


def _int(value: Any, bits: int, what: str) -> int:
    number = operator.index(value)
    if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
        raise OverflowError(f"{what} out of int{bits} range")
    return number


def _checked(kind: int, value: Any) -> Any:
    """`value` as column `kind` holds it (None: null), or the error C raises for it."""
    if value is None:
        return None
    if kind in _BITS:
        return _int(value, _BITS[kind], "value")
    if kind == BOOL:
        if not isinstance(value, bool):
            raise TypeError("a bool column holds bools")
        return value
    if kind == STRING:
        if not isinstance(value, str):
            raise TypeError("a string column holds str")
        value.encode()  # what cannot be UTF-8 fails as in C
        return value
    if kind == BINARY:
        if not isinstance(value, bytes):
            raise TypeError("a binary column holds bytes")
        return value
    if not isinstance(value, tuple):
        raise TypeError("a batches column holds tuples of batches")
    batches = []
    for batch in value:
        if not isinstance(batch, tuple) or len(batch) < 4:
            raise TypeError("a state batch is a 4-tuple")
        batches.append(tuple(_int(v, bits, "a state batch value")
                             for v, bits in zip(batch[:4], (64, 64, 32, 32), strict=True)))
    return batches


class RowColumns:
    """Arrow columns of rows: each spec is (path into a row, Arrow type: int32, int64,
    bool, string, binary or `BATCHES`); a None met on a path is a null."""

    def __init__(self, specs: Sequence[tuple[Path, pa.DataType]]) -> None:
        self.types = tuple(data_type for _, data_type in specs)
        kinds = tuple((path, _kind(data_type)) for path, data_type in specs)
        self.rows: _native.Columns | ColumnsPy = (
            native.module.Columns(kinds) if native.enabled() else ColumnsPy(kinds))
        """Where rows go (`append`, `extend`)."""

    def __len__(self) -> int:
        return len(self.rows)

    def extend(self, rows: list[Any]) -> None:
        self.rows.extend(rows)

    def take(self) -> list[pa.Array]:
        """The columns of every row added since the last `take`."""
        n = len(self.rows)
        if isinstance(self.rows, ColumnsPy):
            return [pa.array(values, data_type)
                    for values, data_type in zip(self.rows.take(), self.types, strict=True)]
        return [_array(data_type, n, buffers)
                for data_type, buffers in zip(self.types, self.rows.take(), strict=True)]


def _array(data_type: pa.DataType, n: int, buffers: tuple[bytes | None, ...]) -> pa.Array:
    """An Arrow array of `n` rows from `sharestate._native.Columns` buffers."""
    valid = None if buffers[-1] is None else pa.py_buffer(buffers[-1])
    data = [pa.py_buffer(b) for b in buffers[:-1] if b is not None]
    if data_type != BATCHES:
        return pa.Array.from_buffers(data_type, n, [valid, *data])
    offsets, first, last, state, count = data
    m = first.size // 8
    items = pa.StructArray.from_arrays(
        [pa.Array.from_buffers(t, m, [None, b]) for t, b in zip(
            (pa.int64(), pa.int64(), pa.int32(), pa.int32()), (first, last, state, count),
            strict=True)], fields=list(BATCH_STRUCT))
    return pa.Array.from_buffers(data_type, n, [valid, offsets], children=[items])


def columns_of(rows: list[Any], specs: Sequence[tuple[Path, pa.DataType]]) -> list[pa.Array]:
    """The columns `specs` names of `rows` (see `RowColumns`), in one pass over them."""
    built = RowColumns(specs)
    built.extend(rows)
    return built.take()


_Row = TypeVar("_Row", bound=tuple[Any, ...])


def tuples_of(row_type: type[_Row], n: int, columns: Sequence[Any]) -> list[_Row]:
    """`n` rows of `row_type` (a NamedTuple) whose items are, column by column, the values
    of Arrow arrays (int32, int64, bool or string, without nulls) or, for anything that is
    not an array, that value in every row: the inverse of `RowColumns`, in C with no Python
    object between the buffers and the rows."""
    if len(columns) != len(getattr(row_type, "_fields", columns)):
        raise ValueError(f"tuples_of: {len(columns)} columns for {row_type.__name__}")
    for column in columns:
        if isinstance(column, pa.Array) and (len(column) != n or column.null_count):
            raise ValueError("tuples_of: an array of other than `n` values, or with nulls")
    if not native.enabled():
        return tuples_of_py(row_type, n, columns)
    specs: list[tuple[Any, ...]] = []
    for column in columns:
        if not isinstance(column, pa.Array):
            specs.append((-1, column))
            continue
        if column.offset:
            column = pa.concat_arrays([column])
        kind = _kind(column.type)
        buffers = column.buffers()[1:] if kind == STRING else column.buffers()[1:2]
        specs.append((kind, *(b"" if b is None else b for b in buffers)))
    return native.module.tuples(row_type, n, tuple(specs))


def tuples_of_py(row_type: type[_Row], n: int, columns: Sequence[Any]) -> list[_Row]:
    """The pure-Python `tuples_of`."""
    lists = [column.to_pylist() if isinstance(column, pa.Array) else repeat(column, n)
             for column in columns]
    rows = zip(*lists, strict=True) if lists else repeat((), n)
    return [tuple.__new__(row_type, items) for items in rows]


def transpose(rows: list[Any], paths: tuple[Path, ...]) -> list[list[Any]]:
    """One list per path: `row[i][j]...` for each row, None where a None is met on the way."""
    if not native.enabled():
        return transpose_py(rows, paths)
    return native.module.transpose(rows, paths)


def transpose_py(rows: list[Any], paths: tuple[Path, ...]) -> list[list[Any]]:
    """The pure-Python `transpose`."""
    def follow(row: Any, path: Path) -> Any:
        for index in path:
            if row is None:
                return None
            row = row[index]
        return row

    return [[follow(row, path) for row in rows] for path in paths]
