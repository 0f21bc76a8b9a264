"""Kafka's offset index (`<base>.index`): batch start positions, for splitting a segment.

The broker appends an entry (int32 offset relative to the segment's base offset, int32
byte position of a batch) about every `index.interval.bytes` of log; files are
preallocated, so trailing entries may be zeros. Every position in it is where a batch
starts, which makes the entries safe split points for reading one segment in parallel.
A damaged index can point anywhere: a split point is kept only where a magic 2 batch with
a matching checksum starts (a split begun inside a batch reported its bytes as findings;
a legacy log is read whole).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from crc32c import crc32c

from sharestate.log.files import read_regular
from sharestate.log.framing import DEFAULT_MAX_BATCH_BYTES
from sharestate.log.resync import LOG_OVERHEAD, V2_HEADER, V2_WINDOW, check_at

_ENTRY = struct.Struct(">ii")
_CHECKED_FROM = 21
"""Where a magic 2 batch's CRC-32C starts (its attributes); it runs to the batch's end."""


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
    with segment.open("rb") as stream:
        for position in index_positions(index):
            if position - starts[-1] >= split_bytes and position < size \
                    and _batch_at(stream, position, size):
                starts.append(position)
    return starts


def _batch_at(stream: BinaryIO, position: int, size: int) -> bool:
    """Whether a magic 2 batch starts at `position` of a log of `size` bytes: its header
    passes resynchronisation's checks (`check_at`) and its CRC-32C matches. A header's
    bytes and one batch are read, however wrong the index is."""
    stream.seek(position)
    head = stream.read(V2_WINDOW)
    if len(head) < V2_HEADER or head[16] != 2 \
            or check_at(head, 0, len(head) < V2_WINDOW, DEFAULT_MAX_BATCH_BYTES) != 1:
        return False
    end = LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
    if position + end > size:
        return False
    batch = (head + stream.read(max(0, end - len(head))))[:end]
    return crc32c(batch[_CHECKED_FROM:]) == int.from_bytes(head[17:_CHECKED_FROM], "big")
