"""Arrow columns built in bulk from replay objects (the hot part of writing gold rows)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sharestate import native

BATCH_STRUCT = pa.struct([pa.field("first_offset", pa.int64()),
                          pa.field("last_offset", pa.int64()),
                          pa.field("delivery_state", pa.int32()),
                          pa.field("delivery_count", pa.int32())])
BATCHES = pa.list_(BATCH_STRUCT)


def state_batches_array(states: Sequence[Any], item: int = 7) -> pa.ListArray:
    """A `state_batches` column from item `item` of each state (None: a null list); each
    batch is a tuple starting (first, last, delivery state, delivery count)."""
    if not native.enabled():
        return flatten_batches_py(states, item)
    offsets, first, last, state, count, valid = native.module.flatten_batches(states, item)
    n = len(states)
    m = len(first) // 8
    children = [pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(first)]),
                pa.Array.from_buffers(pa.int64(), m, [None, pa.py_buffer(last)]),
                pa.Array.from_buffers(pa.int32(), m, [None, pa.py_buffer(state)]),
                pa.Array.from_buffers(pa.int32(), m, [None, pa.py_buffer(count)])]
    values = pa.StructArray.from_arrays(children, fields=list(BATCH_STRUCT))
    offset_array = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(offsets)])
    mask = pa.array([b == 0 for b in valid], pa.bool_()) if 0 in valid else None
    return pa.ListArray.from_arrays(offset_array, values, type=BATCHES, mask=mask)


def flatten_batches_py(states: Sequence[Any], item: int = 7) -> pa.ListArray:
    """The pure-Python `state_batches_array` (same checks and errors as the C twin)."""
    return pa.array([None if s is None else [_batch_row(b) for b in _batches_of(s, item)]
                     for s in states], BATCHES)


def _batches_of(state: Any, item: int) -> tuple[Any, ...]:
    batches = state[item] if isinstance(state, tuple) and 0 <= item < len(state) else None
    if not isinstance(batches, tuple):
        raise TypeError("a state is a tuple whose item `item` holds its batches")
    return batches


_BATCH_BITS = tuple((field.name, field.type.bit_width) for field in BATCH_STRUCT)


def _batch_row(batch: Any) -> dict[str, int]:
    if not isinstance(batch, tuple) or len(batch) < len(_BATCH_BITS):
        raise TypeError("a state batch is a 4-tuple")
    row = {}
    for (name, bits), value in zip(_BATCH_BITS, batch, strict=False):
        number = operator.index(value)
        if not -(1 << (bits - 1)) <= number < 1 << (bits - 1):
            raise OverflowError("a state batch value is out of range")
        row[name] = number
    return row


Path = tuple[int, ...]


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


def int_columns(rows: list[Any], paths: tuple[Path, ...],
                types: tuple[pa.DataType, ...]) -> list[pa.Array]:
    """`transpose` for integer columns, as Arrow arrays of `types` (int32 / int64; a None
    met on the way is a null); in C without a Python object per value."""
    if not native.enabled():
        return int_columns_py(rows, paths, types)
    n = len(rows)
    buffers = native.module.int_columns(rows, paths, tuple(t.bit_width // 8 for t in types))
    return [pa.Array.from_buffers(t, n, [None if valid is None else pa.py_buffer(valid),
                                         pa.py_buffer(data)])
            for (data, valid), t in zip(buffers, types, strict=True)]


def int_columns_py(rows: list[Any], paths: tuple[Path, ...],
                   types: tuple[pa.DataType, ...]) -> list[pa.Array]:
    """The pure-Python `int_columns`."""
    return [pa.array(column, t) for column, t in zip(transpose_py(rows, paths), types,
                                                     strict=True)]
