"""The record-parsing hot loop for RecordBatch v2 (magic 2).

`parse_records` is deliberately one self-contained function over (bytes, positions,
ints) returning plain tuples, so that a native twin can replace it with identical results.
It follows Kafka's `DefaultRecord.readFrom`: zig-zag varints (at most 5 bytes, 32-bit
wrap) and varlongs (at most 10 bytes, 64-bit wrap), negative key/value lengths mean null,
a negative header count or header key length is an error, each record must use exactly
the bytes its length declares, and no bytes may remain after the last record. Offsets
must follow the batch's: each record's offset delta lies after the one before it (the
first at 0 or later) and at most at the batch's lastOffsetDelta, as every batch Kafka
writes has them (compaction leaves gaps, never disorder); a record that does not is bad,
which Kafka's reader does not check.
"""

from __future__ import annotations

from sharestate import native
from sharestate.log.batch import RawRecord

RecordError = tuple[str, int]
"""(message, position in the buffer of the record that failed)."""

_I32_MAX = 0x7FFFFFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_MIN_HEADER_BYTES = 2  # a header is at least a key length and a value length


class _Malformed(Exception):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag int32 at `pos` -> (value, next position)."""
    value = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            value &= 0xFFFFFFFF
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 28:
            raise _Malformed("varint longer than 5 bytes")


def _varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag int64 at `pos` -> (value, next position)."""
    value = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            value &= 0xFFFFFFFFFFFFFFFF
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise _Malformed("varlong longer than 10 bytes")


def wrap64(value: int) -> int:
    """`value` as Java long arithmetic would leave it (two's complement, 64 bits)."""
    return ((value - _I64_MIN) & 0xFFFFFFFFFFFFFFFF) + _I64_MIN


def _wrap32(value: int) -> int:
    return ((value + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def sequence_of(base_sequence: int, offset_delta: int) -> int:
    """Kafka's `DefaultRecordBatch.incrementSequence` in Java int arithmetic; -1 without one."""
    if base_sequence < 0:
        return -1
    if base_sequence > _wrap32(_I32_MAX - offset_delta):
        return _wrap32(offset_delta - (_I32_MAX - base_sequence) - 1)
    return _wrap32(base_sequence + offset_delta)


def parse_records(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                  base_timestamp: int, base_sequence: int, last_delta: int,
                  ) -> tuple[list[RawRecord], RecordError | None]:
    """Parse `count` v2 records from `buf[pos:end]` (in C when `sharestate._native` is built)."""
    if not native.enabled():
        return parse_records_py(buf, pos, end, count, base_offset, base_timestamp,
                                base_sequence, last_delta)
    return native.module.parse_records(buf, pos, end, count, base_offset, base_timestamp,
                                       base_sequence, last_delta)


def parse_batch_records(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                        base_timestamp: int, base_sequence: int, last_delta: int,
                        ) -> tuple[list[RawRecord], RecordError | None]:
    """`parse_records`, reading on past one bad record in a batch whose CRC holds (a key
    length, header count, offset delta or record length damaged): the records after it are
    kept when, from where its length or else its fields end (its length read as 1 to 5
    bytes), they all parse, follow the ones before it in offset order and end exactly at
    the batch's end, `count` records in all. Otherwise the records before it are all that
    is read. The error names the bad record either way."""
    records, error = parse_records(buf, pos, end, count, base_offset, base_timestamp,
                                   base_sequence, last_delta)
    if error is None or len(records) >= count - 1:
        return records, error
    message, at = error
    ends = {_declared_end(buf, at), *(_fields_end(buf, at + width, end)  # the length's
                                      for width in range(1, 6))}  # bytes, whatever they say
    for resume in sorted(e for e in ends if e is not None and at < e < end):
        rest, failed = parse_records(buf, resume, end, count - len(records) - 1, base_offset,
                                     base_timestamp, base_sequence, last_delta)
        if failed is None and (not records or wrap64(rest[0].offset - base_offset)
                               > wrap64(records[-1].offset - base_offset)):
            return records + rest, (f"{message}; the {len(rest)} records after it are read",
                                    at)
    return records, error


def _declared_end(buf: bytes, at: int) -> int | None:
    """Where the record at `at` ends by its length (None: no length can be read)."""
    try:
        size, pos = _varint(buf, at)
    except (_Malformed, IndexError):
        return None
    return pos + size


def _fields_end(buf: bytes, fields: int, end: int) -> int | None:
    """Where a record whose fields start at `fields` (its attributes) ends by them, whatever
    its length says (None: they cannot be read before `end`)."""
    try:
        _, pos = _varlong(buf, fields + 1)  # after the attributes: the timestamp delta
        _, pos = _varint(buf, pos)  # the offset delta
        for _ in range(2):  # the key, the value
            length, pos = _varint(buf, pos)
            pos += max(length, 0)
        headers, pos = _varint(buf, pos)
        if headers < 0 or headers * _MIN_HEADER_BYTES > end - pos:
            return None
        for _ in range(2 * headers):  # each header's key and value
            length, pos = _varint(buf, pos)
            pos += max(length, 0)
    except (_Malformed, IndexError):
        return None
    return pos if pos <= end else None


def parse_records_py(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                     base_timestamp: int, base_sequence: int, last_delta: int,
                     ) -> tuple[list[RawRecord], RecordError | None]:
    """The pure-Python parser: `count` v2 records from `buf[pos:end]` of a batch whose
    lastOffsetDelta is `last_delta`.

    Returns the records parsed (offset = base_offset + offsetDelta, timestamp =
    base_timestamp + timestampDelta, both wrapped to int64) and None, or the records
    parsed before the first bad one plus (message, position of the bad record).
    """
    records: list[RawRecord] = []
    if count < 0:
        return records, (f"negative record count {count}", pos)
    append = records.append
    new = tuple.__new__
    index = 0
    start = pos
    low = 0  # the smallest offset delta the next record may have
    try:
        while index < count:
            start = pos
            if pos >= end:
                raise _Malformed(f"batch ends after {index} of {count} records")
            byte = buf[pos]
            if byte < 0x80:
                size = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (buf[pos + 1] << 7)
                size = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                size, pos = _varint(buf, pos)
            body_end = pos + size
            if size < 1 or body_end > end:
                raise _Malformed(f"record length {size} with {end - pos} bytes left")
            pos += 1  # attributes: unused
            byte = buf[pos]
            if byte < 0x80:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (buf[pos + 1] << 7)
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                timestamp_delta, pos = _varlong(buf, pos)
            byte = buf[pos]
            if byte < 0x80:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                pos += 1
            else:
                offset_delta, pos = _varint(buf, pos)
            byte = buf[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (buf[pos + 1] << 7)
                length = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                length, pos = _varint(buf, pos)
            if length < 0:
                key = None
            else:
                if pos + length > body_end:
                    raise _Malformed(f"key of {length} bytes overruns the record")
                key = buf[pos:pos + length]
                pos += length
            byte = buf[pos]
            if byte < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                byte = (byte & 0x7F) | (buf[pos + 1] << 7)
                length = (byte >> 1) ^ -(byte & 1)
                pos += 2
            else:
                length, pos = _varint(buf, pos)
            if length < 0:
                value = None
            else:
                if pos + length > body_end:
                    raise _Malformed(f"value of {length} bytes overruns the record")
                value = buf[pos:pos + length]
                pos += length
            byte = buf[pos]
            if byte == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                header_count, pos = _varint(buf, pos)
                if header_count < 0 or header_count * _MIN_HEADER_BYTES > body_end - pos:
                    raise _Malformed(f"header count {header_count} does not fit the record")
                pairs: list[tuple[str, bytes | None]] = []
                for _ in range(header_count):
                    length, pos = _varint(buf, pos)
                    if length < 0 or pos + length > body_end:
                        raise _Malformed(f"header key length {length} is invalid")
                    header_key = buf[pos:pos + length].decode("utf-8", "replace")
                    pos += length
                    length, pos = _varint(buf, pos)
                    header_value = None
                    if length >= 0:
                        if pos + length > body_end:
                            raise _Malformed(f"header value of {length} bytes overruns "
                                             "the record")
                        header_value = buf[pos:pos + length]
                        pos += length
                    pairs.append((header_key, header_value))
                headers = tuple(pairs)
            if pos != body_end:
                raise _Malformed(f"record declares {size} bytes but its fields use "
                                 f"{pos - body_end + size}")
            if not low <= offset_delta <= last_delta:
                raise _Malformed(f"offset delta {offset_delta} is outside {low} to "
                                 f"{last_delta} (after the record before it, within the "
                                 f"batch's last offset delta)")
            low = offset_delta + 1
            offset = base_offset + offset_delta
            if not _I64_MIN <= offset <= _I64_MAX:
                offset = wrap64(offset)
            timestamp = base_timestamp + timestamp_delta
            if not _I64_MIN <= timestamp <= _I64_MAX:
                timestamp = wrap64(timestamp)
            if base_sequence < 0:
                sequence = -1
            elif 0 <= offset_delta <= _I32_MAX - base_sequence:
                sequence = base_sequence + offset_delta
            else:
                sequence = sequence_of(base_sequence, offset_delta)
            append(new(RawRecord, (offset, timestamp, sequence, key, value, headers)))
            index += 1
    except _Malformed as exc:
        return records, (f"record {index}: {exc}", start)
    except IndexError:
        return records, (f"record {index}: truncated", start)
    if pos != end:
        return records, (f"{end - pos} bytes left after the last of {count} records", pos)
    return records, None
