"""Damaged segments for the hostile-input tests, built from Kafka's fixture segments.

Each helper takes a segment's bytes and returns damaged bytes; `layout` gives the batches
of an intact segment. Every damage is deterministic.
"""

from __future__ import annotations

import io
import struct
from typing import NamedTuple

import numpy as np
import zstandard
from crc32c import crc32c

from sharestate.log import Batch, build_batch, read_batches


class Span(NamedTuple):
    """An intact batch: where it is, its size, offsets and record count."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    records: int
    is_control: bool
    magic: int


def layout(data: bytes) -> list[Span]:
    """The batches of an intact segment."""
    spans: list[Span] = []
    for item in read_batches(io.BytesIO(data)):
        assert isinstance(item, Batch) and item.header.crc_valid and not item.findings, item
        h = item.header
        spans.append(Span(h.position, h.size_in_bytes, h.base_offset, h.last_offset,
                          len(item.records), h.is_control, h.magic))
    return spans


def fix_crc(data: bytearray, position: int) -> None:
    """Recompute the CRC-32C of the v2 batch at `position` (its length field as it is)."""
    length = struct.unpack_from(">i", data, position + 8)[0]
    struct.pack_into(">I", data, position + 17, crc32c(bytes(data[position + 21:
                                                                  position + 12 + length])))


def set_count(data: bytes, position: int, count: int, *, crc: bool) -> bytes:
    """The v2 batch at `position` with record count `count` (CRC fixed when `crc`)."""
    out = bytearray(data)
    struct.pack_into(">i", out, position + 57, count)
    if crc:
        fix_crc(out, position)
    return bytes(out)


def set_codec(data: bytes, position: int, codec: int) -> bytes:
    """The v2 batch at `position` claiming codec id `codec`, with a valid CRC."""
    out = bytearray(data)
    out[position + 22] = (out[position + 22] & ~7) | codec
    fix_crc(out, position)
    return bytes(out)


def flip(data: bytes, at: int, xor: int = 0x5A) -> bytes:
    out = bytearray(data)
    out[at] ^= xor
    return bytes(out)


def set_length(data: bytes, position: int, length: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(">i", out, position + 8, length)
    return bytes(out)


def corrupt_payload(data: bytes, span: Span) -> bytes:
    """The compressed batch `span` with its payload scrambled and a valid CRC."""
    out = bytearray(data)
    start = span.position + 61
    for i in range(start + 8, span.position + span.size, 3):
        out[i] ^= 0xA5
    fix_crc(out, span.position)
    return bytes(out)


def splice(data: bytes, span: Span, insert: bytes) -> bytes:
    """`insert` placed right after the batch `span`."""
    cut = span.position + span.size
    return data[:cut] + insert + data[cut:]


def without(data: bytes, span: Span) -> bytes:
    """The segment with the batch `span` removed."""
    return data[:span.position] + data[span.position + span.size:]


def bomb(offset: int, inflated: int = 80 << 20) -> bytes:
    """A zstd batch of one record whose value inflates to `inflated` zero bytes."""
    from sharestate.log import RawRecord

    return build_batch([RawRecord(offset, 1_700_000_000_000, -1, b"k", bytes(inflated), ())],
                       compression="zstd")


def null_records(count: int) -> bytes:
    """`count` v2 records with null key and value, offset deltas 0 to count - 1 (7 to 10
    bytes each), built column-wise: fast for millions of records."""
    parts = []
    start = 0
    for size in range(1, 6):  # varint bytes of the zig-zag offset delta 2 * i
        end = min(count, 1 << (7 * size - 1))
        if end <= start:
            continue
        zigzag = 2 * np.arange(start, end, dtype=np.int64)
        rows = np.zeros((end - start, 6 + size), dtype=np.uint8)
        rows[:, 0] = 2 * (5 + size)  # the record's length (zig-zag)
        for k in range(size):  # attributes and timestamp delta stay 0
            rows[:, 3 + k] = ((zigzag >> (7 * k)) & 0x7F) | (0x80 if k < size - 1 else 0)
        rows[:, 3 + size:] = (1, 1, 0)  # key -1, value -1, no headers
        parts.append(rows.tobytes())
        start = end
    return b"".join(parts)


def null_record_batch(offset: int, count: int) -> bytes:
    """One zstd batch of `count` records with null key and value."""
    payload = zstandard.ZstdCompressor(level=3).compress(null_records(count))
    header = struct.pack(">qiibIhiqqqhii", offset, 61 - 12 + len(payload), 0, 2, 0, 4,
                         count - 1, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, count)
    out = bytearray(header + payload)
    fix_crc(out, 0)
    return bytes(out)


def update_tombstone_batch(offset: int, count: int) -> bytes:
    """One batch of `count` ShareUpdate-key tombstones (a key, no value) of one
    share-partition: each a finding of the replay (Kafka's throws on it)."""
    from sharestate.coordinator.share_state import UPDATE_TYPE, ShareKey
    from sharestate.log import RawRecord
    from sharestate.persister.record_codec import ShareRecordCodec

    key = ShareRecordCodec("4.1").key_bytes(UPDATE_TYPE, ShareKey("g", "A" * 21 + "Q", 0))
    return build_batch([RawRecord(at, 1_700_000_000_000, -1, key, None, ())
                        for at in range(offset, offset + count)])


def fake_header(length: int) -> bytes:
    """A v2 batch header (and the first bytes of a gzip payload) passing every cheap check
    of resynchronisation, declaring `length` and a CRC that matches nothing."""
    return struct.pack(">qiibIhiqqqhii", 0, length, 0, 2, 0x12345678, 1, 0, 1_700_000_000_000,
                       1_700_000_000_000, -1, -1, -1, 1) + b"\x1f\x8b"


def set_base_offset(data: bytes, position: int, offset: int) -> bytes:
    """The batch at `position` with base offset `offset` (outside the CRC: it stays valid)."""
    out = bytearray(data)
    struct.pack_into(">Q", out, position, offset % (1 << 64))  # two's complement
    return bytes(out)


def swap(data: bytes, first: Span, second: Span) -> bytes:
    """The segment with the adjacent batches `first` and `second` in each other's place."""
    a, b = first.position, second.position
    end = b + second.size
    return data[:a] + data[b:end] + data[a:b] + data[end:]
