"""Where a batch may start: the cheap header checks that resynchronisation runs on every byte.

After unreadable bytes the reader looks for the next position where a batch Kafka could
have written starts, and only there pays for a CRC. `next_candidate` finds the first
position passing every check below, looking only at the first bytes of the entry (each a
property of every batch Kafka writes; most are not covered by the CRC, so they are what
keeps the CRC from being computed at every byte of real-looking record data):

- all magics: magic byte 0, 1 or 2; the length at least the smallest entry of that magic
  and at most the batch size limit (and, at the end of the stream, within it);
- magic 2: attribute bits 7-15 clear and a codec id up to 4 (zstd); lastOffsetDelta >= 0;
  0 <= record count <= lastOffsetDelta + 1 (offset deltas are distinct); partition
  leader epoch, producer id, producer epoch, base sequence and both timestamps >= -1;
  without records, nothing after the header (length 49); with records: uncompressed, at
  least 7 bytes per record and a first record whose length (at least 6) fits the batch
  and whose attributes byte is 0; gzip, lz4 and zstd, the payload starting with the
  codec's magic bytes; snappy, with xerial's, or a raw block whose length varint holds at
  least 7 bytes a record;
- magic 0/1: attribute bits above the codec (magic 0) or the timestamp type (magic 1)
  clear, a codec id up to 3 (lz4); key length >= -1, the value length field inside the
  message and, where its bytes are at hand, a value length >= -1 that ends exactly where
  the message does.

Zeros, a repeated byte and random bytes fail these within the first few bytes looked at,
so a scan costs a few nanoseconds per byte in C (`sharestate._native.next_candidate`) and
runs vectorised in the pure-Python twin; both return the same positions.
"""

from __future__ import annotations

import numpy as np

from sharestate import native

LOG_OVERHEAD = 12
MIN_LENGTH = (14, 22, 49)
"""Smallest `length` field of an entry of magic 0, 1 and 2."""
V2_HEADER = 61
V2_WINDOW = 67
"""Bytes of a v2 entry the checks may look at (the header and a first record's length and
attributes, or a payload's magic)."""
LEGACY_KEY_AT = (18, 26)
"""Where the key length of a magic 0 / magic 1 message is, from the entry's start."""
MIN_RECORD_BYTES = 7
_BLOCK = 1 << 16  # positions checked per vectorised step
_ONE_BY_ONE = 64  # positions checked one by one before the vectorised steps
_FIRST_BLOCK = 1 << 10  # positions checked in the first vectorised step
_MIN_BY_MAGIC = np.array([*MIN_LENGTH, 1 << 40])  # magic 3 and above: no length will do
PAYLOAD_MAGIC = {1: b"\x1f\x8b", 3: b"\x04\x22\x4d\x18", 4: b"\x28\xb5\x2f\xfd"}
"""How a gzip, lz4 (frame) and zstd payload begins."""
XERIAL = b"\x82SNAPPY\x00"
"""How a xerial-framed snappy payload begins (else it is one raw block)."""
_SIGNED_AT_LEAST_MINUS_ONE = ((12, 4), (27, 8), (35, 8), (43, 8), (51, 2), (53, 4))
"""(offset, width) of the v2 fields Kafka writes as -1 or more: partition leader epoch,
base and max timestamp, producer id, producer epoch, base sequence."""


def next_candidate(buf: bytes, off: int, stop: int, eof: bool, max_batch: int
                   ) -> tuple[bool, int]:
    """The first position in `buf[off:stop]` whose header passes the checks: (True, it).

    (False, p): no position before `p` passes, and `p` is `stop` or a position whose
    checks need bytes past the end of `buf` (more must be read; with `eof` the end of
    `buf` is the end of the stream and such positions simply fail).
    """
    if native.enabled():
        found = native.module.next_candidate(buf, off, stop, eof, max_batch)
        return (True, found) if found >= 0 else (False, -1 - found)
    return next_candidate_py(buf, off, stop, eof, max_batch)


def check_at(buf: bytes, i: int, eof: bool, max_batch: int) -> int:
    """1 when the header at `buf[i]` passes the checks, 0 when it fails, -1 when the
    checks need bytes past the end of `buf` and the stream goes on."""
    n = len(buf)
    more = 0 if eof else -1
    if i + 17 > n:
        return more
    magic = buf[i + 16]
    if magic > 2:
        return 0
    length = int.from_bytes(buf[i + 8:i + 12], "big", signed=True)
    if length < MIN_LENGTH[magic] or length > max_batch - LOG_OVERHEAD \
            or (eof and i + LOG_OVERHEAD + length > n):
        return 0
    if magic == 2:
        return _check_v2(buf, i, n, more, length)
    key_at = i + LEGACY_KEY_AT[magic]
    if key_at + 4 > n:
        return more
    attributes = buf[i + 17]
    if attributes & (0xF8 if magic == 0 else 0xF0) or attributes & 7 > 3:
        return 0
    key_length = int.from_bytes(buf[key_at:key_at + 4], "big", signed=True)
    value_at = key_at + 4 + max(key_length, 0)
    end = i + LOG_OVERHEAD + length
    if key_length < -1 or value_at + 4 > end:
        return 0
    if value_at + 4 > n:
        return 1  # the value length is checked once the message is read
    value_length = int.from_bytes(buf[value_at:value_at + 4], "big", signed=True)
    return int(value_length >= -1 and value_at + 4 + max(value_length, 0) == end)


def _check_v2(buf: bytes, i: int, n: int, more: int, length: int) -> int:
    if i + V2_HEADER > n:
        return more
    attributes = int.from_bytes(buf[i + 21:i + 23], "big")
    codec = attributes & 7
    last_delta = int.from_bytes(buf[i + 23:i + 27], "big", signed=True)
    count = int.from_bytes(buf[i + 57:i + 61], "big", signed=True)
    if attributes & 0xFF80 or codec > 4 or last_delta < 0 or count < 0 \
            or count > last_delta + 1:
        return 0
    for at, width in _SIGNED_AT_LEAST_MINUS_ONE:
        if int.from_bytes(buf[i + at:i + at + width], "big", signed=True) < -1:
            return 0
    if count == 0:
        return int(length == V2_HEADER - LOG_OVERHEAD)
    if codec in PAYLOAD_MAGIC:
        magic = PAYLOAD_MAGIC[codec]
        if i + V2_HEADER + len(magic) > n:
            return more
        return int(buf[i + V2_HEADER:i + V2_HEADER + len(magic)] == magic)
    if codec == 0 and count * MIN_RECORD_BYTES > length - (V2_HEADER - LOG_OVERHEAD):
        return 0
    if i + V2_WINDOW > n:
        return more
    if codec == 2 and buf[i + V2_HEADER:i + V2_HEADER + 6] == XERIAL[:6]:
        return 1
    raw = 0  # the first record's length (uncompressed) or the raw snappy block's: a varint
    for size in range(1, 6):
        byte = buf[i + V2_HEADER + size - 1]
        raw |= (byte & 0x7F) << (7 * (size - 1))
        if byte < 0x80:
            break
    else:
        return 0
    if codec == 2:  # unsigned: the uncompressed size
        return int(raw >= count * MIN_RECORD_BYTES)
    record_length = (raw >> 1) ^ -(raw & 1)
    return int(record_length >= MIN_RECORD_BYTES - 1
               and size + record_length <= length - (V2_HEADER - LOG_OVERHEAD)
               and buf[i + V2_HEADER + size] == 0)


def next_candidate_py(buf: bytes, off: int, stop: int, eof: bool, max_batch: int
                      ) -> tuple[bool, int]:
    """`next_candidate` without the C extension: positions with a whole `V2_WINDOW` in
    `buf` are checked with numpy, block by block, except the first few and the last few,
    checked one by one (so that a candidate close by costs little)."""
    stop = min(stop, len(buf))
    whole = min(stop, len(buf) - V2_WINDOW + 1)
    for i in range(off, min(whole, off + _ONE_BY_ONE)):
        verdict = check_at(buf, i, eof, max_batch)
        if verdict:
            return verdict == 1, i
    data = np.frombuffer(buf, dtype=np.uint8)
    start = max(off, min(whole, off + _ONE_BY_ONE))
    block = _FIRST_BLOCK
    while start < whole:
        end = min(whole, start + block)
        hits = _candidates(data, start, end, max_batch, eof)
        if hits.size:
            return True, int(hits[0])
        start = end
        block = min(2 * block, _BLOCK)
    for i in range(max(start, off), stop):
        verdict = check_at(buf, i, eof, max_batch)
        if verdict:
            return verdict == 1, i
    return False, max(stop, off)


def _candidates(data: np.ndarray, start: int, end: int, max_batch: int, eof: bool
                ) -> np.ndarray:
    """Positions in [start, end) passing the checks (each has a whole `V2_WINDOW` in
    `data`), ascending. Each check narrows the positions the next one looks at."""
    magic = data[start + 16:end + 16]
    length = ((data[start + 8:end + 8].astype(np.int64) << 24)
              | (data[start + 9:end + 9].astype(np.int64) << 16)
              | (data[start + 10:end + 10].astype(np.int64) << 8) | data[start + 11:end + 11])
    length = np.where(length >= 1 << 31, length - (1 << 32), length)
    keep = (length >= _MIN_BY_MAGIC[np.minimum(magic, 3)]) & (length <= max_batch - LOG_OVERHEAD)
    if eof:
        keep &= np.arange(start + LOG_OVERHEAD, end + LOG_OVERHEAD) + length <= len(data)
    at: np.ndarray = np.flatnonzero(keep)
    if not at.size:
        return at
    magic, length = magic[at], length[at]
    at += start
    v2 = magic == 2
    found = np.concatenate([_v2_passing(data, at[v2], length[v2]),
                            _legacy_passing(data, at[~v2], magic[~v2], length[~v2])])
    found.sort()
    return found


def _signed(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The big-endian signed int of `width` (2 or 4) bytes at each of `at`."""
    value = data[at].astype(np.int64)
    for k in range(1, width):
        value = (value << 8) | data[at + k]
    signed: np.ndarray = np.where(value >= 1 << (8 * width - 1), value - (1 << (8 * width)),
                                  value)
    return signed


def _signed64(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Only whether an int64 is >= -1 matters: the sign byte, and all ones for -1."""
    high = data[at]
    minus_one = np.all(np.stack([data[at + k] == 0xFF for k in range(8)]), axis=0)
    out: np.ndarray = np.where(high < 0x80, 0, np.where(minus_one, -1, -2))
    return out


def _v2_passing(data: np.ndarray, at: np.ndarray, length: np.ndarray) -> np.ndarray:
    attributes = (data[at + 21].astype(np.int64) << 8) | data[at + 22]
    codec = attributes & 7
    keep = ((attributes & 0xFF80) == 0) & (codec <= 4)
    at, length, codec = at[keep], length[keep], codec[keep]
    last_delta = _signed(data, at + 23, 4)
    count = _signed(data, at + 57, 4)
    keep = (last_delta >= 0) & (count >= 0) & (count <= last_delta + 1)
    for offset, width in _SIGNED_AT_LEAST_MINUS_ONE:
        keep &= (_signed64(data, at + offset) if width == 8
                 else _signed(data, at + offset, width)) >= -1
    at, length, codec, count = at[keep], length[keep], codec[keep], count[keep]
    passing = (count == 0) & (length == V2_HEADER - LOG_OVERHEAD)
    for id_, magic in PAYLOAD_MAGIC.items():
        mine = (codec == id_) & (count > 0)
        for k, byte in enumerate(magic):
            mine &= data[at + V2_HEADER + k] == byte
        passing |= mine
    xerial = (codec == 2) & (count > 0)
    for k, byte in enumerate(XERIAL[:6]):
        xerial &= data[at + V2_HEADER + k] == byte
    raw = np.zeros(at.size, dtype=np.int64)
    size = np.zeros(at.size, dtype=np.int64)
    going = np.ones(at.size, dtype=bool)
    for k in range(5):
        byte = data[at + V2_HEADER + k].astype(np.int64)
        raw |= np.where(going, (byte & 0x7F) << (7 * k), 0)
        size += going
        going &= byte >= 0x80
    snappy = (codec == 2) & (count > 0) & ~xerial & ~going & (raw >= count * MIN_RECORD_BYTES)
    record_length = (raw >> 1) ^ -(raw & 1)
    plain = ((codec == 0) & (count > 0) & ~going
             & (count * MIN_RECORD_BYTES <= length - (V2_HEADER - LOG_OVERHEAD))
             & (record_length >= MIN_RECORD_BYTES - 1)
             & (size + record_length <= length - (V2_HEADER - LOG_OVERHEAD))
             & (data[at + V2_HEADER + np.minimum(size, 5)] == 0))
    found: np.ndarray = at[passing | xerial | snappy | plain]
    return found


def _legacy_passing(data: np.ndarray, at: np.ndarray, magic: np.ndarray, length: np.ndarray
                    ) -> np.ndarray:
    attributes = data[at + 17].astype(np.int64)
    keep = ((attributes & np.where(magic == 0, 0xF8, 0xF0)) == 0) & ((attributes & 7) <= 3)
    at, magic, length = at[keep], magic[keep], length[keep]
    key_at = at + np.where(magic == 0, LEGACY_KEY_AT[0], LEGACY_KEY_AT[1])
    key_length = _signed(data, key_at, 4)
    value_at = key_at + 4 + np.maximum(key_length, 0)
    end = at + LOG_OVERHEAD + length
    keep = (key_length >= -1) & (value_at + 4 <= end)
    at, value_at, end = at[keep], value_at[keep], end[keep]
    at_hand = value_at + 4 <= len(data)
    value_length = _signed(data, np.where(at_hand, value_at, 0), 4)
    keep = ~at_hand | ((value_length >= -1) & (value_at + 4 + np.maximum(value_length, 0) == end))
    passing: np.ndarray = at[keep]
    return passing
