"""Legacy message sets (magic 0 and 1), built here byte by byte from the format description."""

from __future__ import annotations

import gzip
import io
import struct
import zlib

import cramjam
import lz4.frame

from sharestate.log import Batch, LogFinding, RawRecord, build_batch, read_batches


def _sized(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(magic: int, attributes: int, key: bytes | None, value: bytes | None,
            timestamp: int = 0) -> bytes:
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _sized(key) + _sized(value)
    return struct.pack(">I", zlib.crc32(body)) + body


def entry(offset: int, msg: bytes) -> bytes:
    return struct.pack(">qi", offset, len(msg)) + msg


def xerial(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", len(block)) + block


def read(data: bytes) -> list[Batch | LogFinding]:
    return list(read_batches(io.BytesIO(data)))


def only_batches(data: bytes) -> list[Batch]:
    items = read(data)
    assert all(isinstance(i, Batch) for i in items), items
    return [i for i in items if isinstance(i, Batch)]


def test_magic0_plain_messages() -> None:
    data = (entry(0, message(0, 0, b"k0", b"v0")) + entry(1, message(0, 0, None, b"v1"))
            + entry(2, message(0, 0, b"k2", None)))
    batches = only_batches(data)
    assert [b.records for b in batches] == [
        [RawRecord(0, -1, -1, b"k0", b"v0", ())],
        [RawRecord(1, -1, -1, None, b"v1", ())],
        [RawRecord(2, -1, -1, b"k2", None, ())],
    ]
    header = batches[0].header
    assert (header.magic, header.timestamp_type, header.base_timestamp, header.max_timestamp,
            header.producer_id, header.producer_epoch, header.base_sequence,
            header.partition_leader_epoch, header.compression, header.record_count,
            header.crc_valid, header.size_in_bytes) == (
        0, "NoTimestampType", -1, -1, -1, -1, -1, -1, "none", 1, True, 30)
    assert [b.header.position for b in batches] == [0, 30, 58]


def test_magic1_plain_messages_with_timestamp_types() -> None:
    data = (entry(7, message(1, 0, b"a", b"1", timestamp=1000))
            + entry(8, message(1, 8, b"b", b"2", timestamp=2000)))
    first, second = only_batches(data)
    assert first.records == [RawRecord(7, 1000, -1, b"a", b"1", ())]
    assert first.header.timestamp_type == "CreateTime"
    assert second.records == [RawRecord(8, 2000, -1, b"b", b"2", ())]
    assert second.header.timestamp_type == "LogAppendTime"
    assert second.header.max_timestamp == 2000


def _inner(magic: int, offsets: list[int], timestamps: list[int]) -> bytes:
    return b"".join(entry(o, message(magic, 0, b"key%d" % i, b"value%d" % i, t))
                    for i, (o, t) in enumerate(zip(offsets, timestamps, strict=True)))


def test_magic1_gzip_wrapper_relative_offsets() -> None:
    inner = _inner(1, [0, 1, 2], [100, 101, 102])
    wrapper = entry(12, message(1, 1, None, gzip.compress(inner), timestamp=102))
    [batch] = only_batches(wrapper)
    assert batch.records == [RawRecord(10 + i, 100 + i, -1, b"key%d" % i, b"value%d" % i, ())
                             for i in range(3)]
    header = batch.header
    assert (header.base_offset, header.last_offset, header.record_count, header.compression,
            header.timestamp_type, header.max_timestamp) == (10, 12, 3, "gzip", "CreateTime",
                                                             102)
    assert batch.findings == []


def test_magic1_wrapper_with_log_append_time_stamps_inner_records() -> None:
    inner = _inner(1, [0, 1], [5, 6])
    wrapper = entry(41, message(1, 1 | 8, None, gzip.compress(inner), timestamp=999))
    [batch] = only_batches(wrapper)
    assert [(r.offset, r.timestamp) for r in batch.records] == [(40, 999), (41, 999)]


def test_magic0_gzip_wrapper_absolute_offsets() -> None:
    inner = _inner(0, [20, 21, 22], [0, 0, 0])
    wrapper = entry(22, message(0, 1, None, gzip.compress(inner)))
    [batch] = only_batches(wrapper)
    assert [(r.offset, r.timestamp, r.key) for r in batch.records] == [
        (20, -1, b"key0"), (21, -1, b"key1"), (22, -1, b"key2")]
    assert (batch.header.base_offset, batch.header.last_offset) == (20, 22)


def test_magic1_snappy_and_lz4_wrappers_then_a_v2_batch() -> None:
    inner = _inner(1, [0, 1], [1, 2])
    data = (entry(1, message(1, 2, None, xerial(inner), timestamp=2))
            + entry(3, message(1, 3, None, lz4.frame.compress(inner), timestamp=2))
            + build_batch([RawRecord(4, 3, -1, b"k", b"v", ())]))
    snappy, lz4_batch, v2 = only_batches(data)
    assert [r.offset for r in snappy.records] == [0, 1]
    assert [r.offset for r in lz4_batch.records] == [2, 3]
    assert snappy.header.compression == "snappy" and lz4_batch.header.compression == "lz4"
    assert v2.header.magic == 2 and v2.records[0].offset == 4


def test_bad_crcs_are_reported() -> None:
    good = message(1, 0, b"k", b"v", 1)
    tampered = good[:-1] + b"w"
    inner = (entry(0, message(1, 0, b"a", b"1", 1))
             + entry(1, message(1, 0, b"b", b"2", 1)[:-1] + b"3"))
    wrapper = entry(6, message(1, 1, None, gzip.compress(inner), 1))
    first, second = only_batches(entry(4, tampered) + wrapper)
    assert not first.header.crc_valid
    assert [f.kind for f in first.findings] == ["crc_mismatch"]
    assert first.records == []  # refused, as Kafka refuses a corrupt message
    assert second.header.crc_valid
    assert [f.kind for f in second.findings] == ["crc_mismatch"]
    assert [(r.offset, r.value) for r in second.records] == [(5, b"1")]


def test_invalid_legacy_wrappers() -> None:
    nested = entry(0, message(1, 1, None, b"x", 1))
    data = (entry(0, message(1, 4, None, b"zstd?", 1))
            + entry(1, message(1, 1, None, None, 1))
            + entry(2, message(1, 1, None, gzip.compress(nested), 1))
            + entry(3, message(1, 1, None, b"not gzip", 1)))
    kinds = [[f.kind for f in b.findings] for b in only_batches(data)]
    assert kinds == [["unknown_compression"], ["bad_record"], ["bad_record"],
                     ["decompression_failed"]]
