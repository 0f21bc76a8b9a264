"""Write RecordBatch v2 batches and segment files.

`build_batch` lays a batch out as Kafka's `MemoryRecordsBuilder` does: offset deltas from
the base offset, timestamp deltas from the base timestamp (the first record's timestamp, or
the delete horizon when one is given), maxTimestamp the largest record timestamp, CRC-32C
over attributes..end. Uncompressed batches come out byte-identical to Kafka's; compressed
payloads decode to the same records but the compressed bytes may differ from Java's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from crc32c import crc32c

from sharestate.log.batch import COMPRESSION_NAMES, CREATE_TIME, LOG_APPEND_TIME, RawRecord
from sharestate.log.compression import compress
from sharestate.log.control import ABORT, COMMIT, control_key, end_txn_marker_value
from sharestate.log.framing import LOG_OVERHEAD, V2_HEADER_SIZE

DEFAULT_SEGMENT_BYTES = 100 << 20  # Kafka's segment size for both internal topics

_V2 = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_MARKERS = {"ABORT": ABORT, "COMMIT": COMMIT}


def _uvarint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _varint(value: int, out: bytearray) -> None:
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"{value} does not fit a varint (int32)")
    _uvarint(((value << 1) ^ (value >> 31)) & 0xFFFFFFFF, out)


def _varlong(value: int, out: bytearray) -> None:
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    _uvarint(((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, out)


def _sized(data: bytes | None, out: bytearray) -> None:
    if data is None:
        _varint(-1, out)
    else:
        _varint(len(data), out)
        out += data


def encode_record(record: RawRecord, base_offset: int, base_timestamp: int) -> bytes:
    """One v2 record (length prefix included); `record.sequence` is not stored."""
    body = bytearray(b"\x00")
    _varlong(record.timestamp - base_timestamp, body)
    _varint(record.offset - base_offset, body)
    _sized(record.key, body)
    _sized(record.value, body)
    _varint(len(record.headers), body)
    for header_key, header_value in record.headers:
        _sized(header_key.encode("utf-8"), body)
        _sized(header_value, body)
    out = bytearray()
    _varint(len(body), out)
    return bytes(out + body)


def build_batch(records: Sequence[RawRecord], *, base_offset: int | None = None,
                partition_leader_epoch: int = 0, compression: str = "none",
                timestamp_type: str = CREATE_TIME, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                is_transactional: bool = False, is_control: bool = False,
                base_timestamp: int | None = None, max_timestamp: int | None = None,
                delete_horizon_ms: int | None = None,
                last_offset_delta: int | None = None) -> bytes:
    """A complete v2 batch holding `records` (their offsets and timestamps are absolute).

    Defaults follow Kafka: base offset = first record's offset, last offset delta = last
    record's, base timestamp = first record's (or `delete_horizon_ms`), max timestamp =
    largest record timestamp (pass the append time for LogAppendTime). An empty batch needs
    `base_offset`; its timestamps default to -1.
    """
    if compression not in COMPRESSION_NAMES:
        raise ValueError(f"unknown compression {compression!r}")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"a v2 batch cannot have timestamp type {timestamp_type!r}")
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs a base_offset")
        base_offset = records[0].offset
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif base_timestamp is None:
        base_timestamp = records[0].timestamp if records else -1
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in records), default=-1)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    payload = b"".join(encode_record(r, base_offset, base_timestamp) for r in records)
    attributes = COMPRESSION_NAMES.index(compression)
    if compression != "none":
        payload = compress(compression, payload)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= 8
    if is_transactional:
        attributes |= 16
    if is_control:
        attributes |= 32
    if delete_horizon_ms is not None:
        attributes |= 64
    header = _V2.pack(base_offset, V2_HEADER_SIZE - LOG_OVERHEAD + len(payload),
                      partition_leader_epoch, 2, 0, attributes, last_offset_delta,
                      base_timestamp, max_timestamp, producer_id, producer_epoch,
                      base_sequence, len(records))
    crc = crc32c(payload, crc32c(header[21:]))
    return header[:17] + crc.to_bytes(4, "big") + header[21:] + payload


def build_control_batch(marker: str, *, offset: int, timestamp: int, coordinator_epoch: int,
                        producer_id: int, producer_epoch: int,
                        partition_leader_epoch: int = 0) -> bytes:
    """A transaction marker batch (`marker` "COMMIT" or "ABORT") as Kafka writes it."""
    type_id = _MARKERS.get(marker)
    if type_id is None:
        raise ValueError(f"marker must be COMMIT or ABORT, not {marker!r}")
    record = RawRecord(offset, timestamp, -1, control_key(type_id),
                       end_txn_marker_value(coordinator_epoch), ())
    return build_batch([record], partition_leader_epoch=partition_leader_epoch,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       is_transactional=True, is_control=True)


class SegmentWriter:
    """Append batches to `<directory>/<topic>-<partition>/<20-digit base offset>.log`.

    A new segment starts when the next batch would take the current one past
    `segment_bytes` (a batch larger than that gets a segment of its own). Offsets must
    increase; existing segment files are never overwritten.
    """

    def __init__(self, directory: str | Path, topic: str, partition: int, *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if segment_bytes < 1:
            raise ValueError("segment_bytes must be positive")
        self.directory = Path(directory) / f"{topic}-{partition}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.paths: list[Path] = []
        self._file: BinaryIO | None = None
        self._size = 0
        self._next_offset: int | None = None

    def append(self, batch: bytes) -> None:
        """Write one complete batch (v2, or a legacy entry) at the end of the log."""
        if len(batch) < LOG_OVERHEAD + 5:
            raise ValueError("not a batch: too short")
        base_offset, length = _PREFIX.unpack_from(batch)
        if length + LOG_OVERHEAD != len(batch):
            raise ValueError(f"batch length field {length} does not match {len(batch)} bytes")
        last_offset = base_offset
        if batch[16] == 2:
            last_offset += _LAST_OFFSET_DELTA.unpack_from(batch, 23)[0]
        if self._next_offset is not None and base_offset < self._next_offset:
            raise ValueError(f"batch at offset {base_offset} is below the log end offset "
                             f"{self._next_offset}")
        if self._file is None or (self._size and self._size + len(batch) > self.segment_bytes):
            self._roll(base_offset)
        assert self._file is not None
        self._file.write(batch)
        self._size += len(batch)
        self._next_offset = last_offset + 1

    def _roll(self, base_offset: int) -> None:
        self.close()
        path = self.directory / f"{base_offset:020d}.log"
        self._file = path.open("xb")
        self._size = 0
        self.paths.append(path)

    def close(self) -> None:
        """Flush and close the current segment."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
