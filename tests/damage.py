"""Damaged segments for the hostile-input tests, built from Kafka's fixture segments.

Each helper takes a segment's bytes and returns damaged bytes; `layout` gives the batches
of an intact segment. Every damage is deterministic.
"""

from __future__ import annotations

import io
import struct
from typing import NamedTuple

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


def null_record_batch(offset: int, count: int) -> bytes:
    """One zstd batch of `count` records with null key and value (7 bytes each)."""
    payload = zstandard.ZstdCompressor(level=3).compress(b"\x0c\x00\x00\x00\x01\x01\x00" * count)
    header = struct.pack(">qiibIhiqqqhii", offset, 61 - 12 + len(payload), 0, 2, 0, 4,
                         count - 1, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, count)
    out = bytearray(header + payload)
    fix_crc(out, 0)
    return bytes(out)


def fake_header(length: int) -> bytes:
    """A v2 batch header (and the first bytes of a gzip payload) passing every cheap check
    of resynchronisation, declaring `length` and a CRC that matches nothing."""
    return struct.pack(">qiibIhiqqqhii", 0, length, 0, 2, 0x12345678, 1, 0, 1_700_000_000_000,
                       1_700_000_000_000, -1, -1, -1, 1) + b"\x1f\x8b"
