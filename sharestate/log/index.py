"""Kafka's offset index (`<base>.index`): batch start positions, for splitting a segment.

The broker appends an entry (int32 offset relative to the segment's base offset, int32
byte position of a batch) about every `index.interval.bytes` of log; files are
preallocated, so trailing entries may be zeros. Every position in it is where a batch
starts, which makes the entries safe split points for reading one segment in parallel.
"""

from __future__ import annotations

import struct
from pathlib import Path

from sharestate.log.files import read_regular

_ENTRY = struct.Struct(">ii")


def index_positions(index: bytes) -> list[int]:
    """Batch start positions listed in an offset index, ascending (zero padding ignored)."""
    positions: list[int] = []
    for i in range(0, len(index) - len(index) % _ENTRY.size, _ENTRY.size):
        relative, position = _ENTRY.unpack_from(index, i)
        if i and relative == 0 and position == 0:
            break
        if position > (positions[-1] if positions else -1):
            positions.append(position)
    return positions


def split_points(segment: Path, size: int, split_bytes: int) -> list[int]:
    """Start positions of splits of about `split_bytes` each (just [0] without an index)."""
    if size <= split_bytes:
        return [0]
    try:
        index = read_regular(segment.with_suffix(".index"))
    except OSError:  # none, or not a regular file
        return [0]
    starts = [0]
    for position in index_positions(index):
        if position - starts[-1] >= split_bytes and position < size:
            starts.append(position)
    return starts
