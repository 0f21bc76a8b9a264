"""Legacy message sets (magic 0 and 1) mapped onto `Batch`.

An entry is `offset int64, size int32` then a message: `crc uint32` (CRC-32 over magic to
the end), `magic int8`, `attributes int8` (bits 0-2 codec; magic 1: bit 3 LogAppendTime),
`timestamp int64` (magic 1 only), `key` and `value` with int32 lengths (-1 = null).
Each entry becomes one batch: a plain message is a batch of one record; a compressed
"wrapper" holds its inner entries compressed in its value. Inner offsets are absolute for
magic 0; for magic 1 they are relative and the wrapper carries the offset of the last inner
message, as in Kafka's `AbstractLegacyRecordBatch`. There are no producer ids, sequences,
leader epochs or headers in these formats (-1 / empty); magic 0 has no timestamps (-1).
As for v2 batches, a message whose CRC-32 does not match is refused (no records), and so
is a wrapper holding more inner messages than the record limit.
"""

from __future__ import annotations

import struct
import zlib

from sharestate.log.batch import (
    COMPRESSION_NAMES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_TIMESTAMP_TYPE,
    Batch,
    BatchHeader,
    LogFinding,
    RawRecord,
)
from sharestate.log.compression import DecompressionError, decompress

MIN_MESSAGE_SIZE = (14, 22)
"""Smallest message (the part after offset and size) for magic 0 and magic 1."""

_ENTRY = struct.Struct(">qiIbB")  # offset, size, crc, magic, attributes
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_LEGACY_CODECS = 4  # none, gzip, snappy, lz4


class _Malformed(Exception):
    pass


class _Message:
    __slots__ = ("attributes", "crc", "crc_valid", "key", "magic", "offset", "timestamp",
                 "value")

    def __init__(self, buf: bytes, off: int, end: int) -> None:
        """Read the entry at `buf[off:end]` (its size field already checked against `end`)."""
        self.offset, _size, self.crc, self.magic, self.attributes = _ENTRY.unpack_from(buf, off)
        self.crc_valid = zlib.crc32(memoryview(buf)[off + 16:end]) == self.crc
        pos = off + 18
        self.timestamp = -1
        if self.magic == 1:
            self.timestamp = _INT64.unpack_from(buf, pos)[0]
            pos += 8
        self.key, pos = _sized(buf, pos, end, "key")
        self.value, pos = _sized(buf, pos, end, "value")
        if pos != end:
            raise _Malformed(f"{end - pos} bytes left after the value")


def _sized(buf: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise _Malformed(f"{what} length runs past the message")
    length = _INT32.unpack_from(buf, pos)[0]
    pos += 4
    if length < 0:
        return None, pos
    if pos + length > end:
        raise _Malformed(f"{what} of {length} bytes runs past the message")
    return buf[pos:pos + length], pos + length


def parse_legacy(buf: bytes, off: int, position: int, size: int, *, max_inflated_bytes: int,
                 max_records: int, raw_cap: int) -> Batch:
    """Parse the legacy entry of `size` bytes at `buf[off:]`, found at stream `position`."""
    end = off + size
    findings: list[LogFinding] = []
    try:
        wrapper = _Message(buf, off, end)
    except _Malformed as exc:
        header = _header(position, size, _ENTRY.unpack_from(buf, off), False)
        finding = LogFinding.of("bad_record", f"legacy message is malformed: {exc}", position,
                             header.base_offset, buf[off:end], raw_cap)
        return Batch(header, [], [finding])
    codec = wrapper.attributes & 7
    timestamp_type = _timestamp_type(wrapper.magic, wrapper.attributes)
    records: list[RawRecord] = []
    if not wrapper.crc_valid:
        findings.append(LogFinding.of(
            "crc_mismatch", f"legacy message CRC-32 does not match the stored {wrapper.crc}: "
            f"its records are not read (Kafka refuses a corrupt message)", position,
            wrapper.offset, buf[off:end], raw_cap))
    elif codec == 0:
        records.append(RawRecord(wrapper.offset, wrapper.timestamp, -1, wrapper.key,
                                 wrapper.value, ()))
    elif codec >= _LEGACY_CODECS:
        findings.append(LogFinding.of("unknown_compression",
                                   f"codec id {codec} is not valid for magic {wrapper.magic}",
                                   position, wrapper.offset, buf[off:end], raw_cap))
    elif wrapper.value is None:
        findings.append(LogFinding.of("bad_record", "compressed wrapper message has a null value",
                                   position, wrapper.offset, buf[off:end], raw_cap))
    else:
        try:
            inner = decompress(COMPRESSION_NAMES[codec], wrapper.value, max_inflated_bytes)
        except DecompressionError as exc:
            findings.append(LogFinding.of(exc.kind, str(exc), position, wrapper.offset,
                                       wrapper.value, raw_cap))
        else:
            records = _inner_records(inner, wrapper, timestamp_type, position, max_records,
                                     raw_cap, findings)
    base_offset = records[0].offset if records else wrapper.offset
    header = BatchHeader(
        position, base_offset, wrapper.offset, size, -1, wrapper.magic, wrapper.crc,
        wrapper.crc_valid, COMPRESSION_NAMES[codec] if codec < _LEGACY_CODECS else "unknown",
        timestamp_type, wrapper.timestamp, wrapper.timestamp, -1, -1, -1, False, False,
        len(records), False)
    return Batch(header, records, findings)


def _timestamp_type(magic: int, attributes: int) -> str:
    if magic == 0:
        return NO_TIMESTAMP_TYPE
    return LOG_APPEND_TIME if attributes & 8 else CREATE_TIME


def _header(position: int, size: int, entry: tuple[int, int, int, int, int],
            crc_valid: bool) -> BatchHeader:
    offset, _size, crc, magic, attributes = entry
    codec = attributes & 7
    return BatchHeader(position, offset, offset, size, -1, magic, crc, crc_valid,
                       COMPRESSION_NAMES[codec] if codec < _LEGACY_CODECS else "unknown",
                       _timestamp_type(magic, attributes), -1, -1, -1, -1, -1, False, False,
                       0, False)


def _inner_records(data: bytes, wrapper: _Message, timestamp_type: str, position: int,
                   max_records: int, raw_cap: int, findings: list[LogFinding]) -> list[RawRecord]:
    """The inner messages of a compressed wrapper, with absolute offsets (those whose CRC
    does not match are refused; more than `max_records` of them refuse the wrapper)."""
    minimum = MIN_MESSAGE_SIZE[wrapper.magic]
    messages: list[_Message] = []
    parsed = 0
    last_relative = 0  # the offset field of the last inner message, refused or not
    pos = 0
    end = len(data)
    while pos < end:
        if parsed == max_records:
            findings.append(LogFinding.of(
                "too_many_records", f"compressed wrapper at offset {wrapper.offset} holds "
                f"more than the limit of {max_records} messages: not read", position,
                wrapper.offset, data[:pos], raw_cap))
            return []
        try:
            if end - pos < 12:
                raise _Malformed(f"{end - pos} bytes cannot hold an entry")
            size = _INT32.unpack_from(data, pos + 8)[0]
            if size < minimum or size > end - pos - 12:
                raise _Malformed(f"message size {size} with {end - pos - 12} bytes left")
            if data[pos + 16] != wrapper.magic:
                raise _Malformed(f"magic {data[pos + 16]} differs from the wrapper's "
                                 f"{wrapper.magic}")
            message = _Message(data, pos, pos + 12 + size)
            if message.attributes & 7:
                raise _Malformed("inner messages must not be compressed")
        except _Malformed as exc:
            findings.append(LogFinding.of(
                "bad_record", f"inner message {parsed} of the compressed wrapper at "
                f"offset {wrapper.offset}: {exc}", position, wrapper.offset, data[pos:],
                raw_cap))
            break
        parsed += 1
        last_relative = message.offset
        if message.crc_valid:
            messages.append(message)
        else:
            findings.append(LogFinding.of(
                "crc_mismatch", f"inner message at byte {pos} (offset field "
                f"{message.offset}) of the compressed wrapper at offset {wrapper.offset} has "
                f"a bad CRC-32: not read", position, wrapper.offset,
                data[pos:pos + 12 + size], raw_cap))
        pos += 12 + size
    if not messages:
        if not findings:
            findings.append(LogFinding.of("bad_record", "compressed wrapper holds no messages",
                                       position, wrapper.offset, data, raw_cap))
        return []
    absolute_base = -1
    if wrapper.magic == 1:
        absolute_base = wrapper.offset - last_relative
    append_time = timestamp_type == LOG_APPEND_TIME
    return [RawRecord(m.offset + absolute_base if absolute_base >= 0 else m.offset,
                      wrapper.timestamp if append_time else m.timestamp, -1, m.key, m.value,
                      ()) for m in messages]
