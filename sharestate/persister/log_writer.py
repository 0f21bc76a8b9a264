"""Records to segment files under a `log.dirs`-style root, batched as a coordinator does.

A `PartitionLog` collects records into RecordBatch v2 batches the way Kafka's coordinator
runtime does: the records of one operation always share a batch; a batch is closed when the
next operation would take it past `records_per_batch` records or arrives `linger_ms` or more
after the batch's first record. Coordinator batches carry producer id -1, epoch -1 and base
sequence 0, CreateTime timestamps and the configured codec and partition leader epoch.
Transactional batches and COMMIT/ABORT markers are written at once, after what is pending.
Segment files are created on the first batch: `<root>/<topic>-<partition>/<base>.log`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sharestate.log import (
    COMPRESSION_NAMES,
    DEFAULT_SEGMENT_BYTES,
    RawRecord,
    SegmentWriter,
    build_batch,
    build_control_batch,
)

DEFAULT_RECORDS_PER_BATCH = 10
DEFAULT_LINGER_MS = 5
"""Kafka's `share.coordinator.append.linger.ms` default (4.2)."""


class PartitionLog:
    """One topic partition's log, written batch by batch."""

    __slots__ = ("_pending", "_pending_since", "_writer", "batches", "bytes", "compression",
                 "linger_ms", "next_offset", "partition", "partition_leader_epoch", "records",
                 "records_per_batch", "root", "segment_bytes", "topic")

    def __init__(self, root: str | Path, topic: str, partition: int, *,
                 compression: str = "none",
                 records_per_batch: int = DEFAULT_RECORDS_PER_BATCH,
                 linger_ms: int = DEFAULT_LINGER_MS, partition_leader_epoch: int = 0,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, next_offset: int = 0) -> None:
        if compression not in COMPRESSION_NAMES:
            raise ValueError(f"unknown compression {compression!r}; "
                             f"known: {', '.join(COMPRESSION_NAMES)}")
        if records_per_batch < 1:
            raise ValueError("records_per_batch must be at least 1")
        self.root = Path(root)
        self.topic = topic
        self.partition = partition
        self.compression = compression
        self.records_per_batch = records_per_batch
        self.linger_ms = linger_ms
        self.partition_leader_epoch = partition_leader_epoch
        self.segment_bytes = segment_bytes
        self.next_offset = next_offset
        """The offset the next record must have (pending records included)."""
        self.records = self.batches = self.bytes = 0
        self._pending: list[RawRecord] = []
        self._pending_since = 0
        self._writer: SegmentWriter | None = None

    def append(self, records: Sequence[RawRecord]) -> None:
        """Add one operation's records (offsets from `next_offset` on) to the open batch."""
        if not records:
            return
        if records[0].offset != self.next_offset:
            raise ValueError(f"{self.topic}-{self.partition}: record offset "
                             f"{records[0].offset} is not the log end offset {self.next_offset}")
        pending = self._pending
        if pending and (len(pending) + len(records) > self.records_per_batch
                        or records[0].timestamp - self._pending_since >= self.linger_ms):
            self.flush()
        if not pending:
            self._pending_since = records[0].timestamp
        pending.extend(records)
        self.next_offset = records[-1].offset + 1
        if len(pending) >= self.records_per_batch:
            self.flush()

    def append_transactional(self, records: Sequence[RawRecord], *, producer_id: int,
                             producer_epoch: int) -> None:
        """Write one transactional batch of `records` now (pending records go first)."""
        self.flush()
        if records[0].offset != self.next_offset:
            raise ValueError(f"{self.topic}-{self.partition}: record offset "
                             f"{records[0].offset} is not the log end offset {self.next_offset}")
        self._write(build_batch(records, partition_leader_epoch=self.partition_leader_epoch,
                                compression=self.compression, producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=0,
                                is_transactional=True), len(records))
        self.next_offset = records[-1].offset + 1

    def append_marker(self, marker: str, *, timestamp: int, producer_id: int,
                      producer_epoch: int, coordinator_epoch: int) -> int:
        """Write a COMMIT or ABORT marker now; returns its offset."""
        self.flush()
        offset = self.next_offset
        self._write(build_control_batch(marker, offset=offset, timestamp=timestamp,
                                        coordinator_epoch=coordinator_epoch,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        partition_leader_epoch=self.partition_leader_epoch), 1)
        self.next_offset = offset + 1
        return offset

    def flush(self) -> None:
        """Close the open batch and write it."""
        pending = self._pending
        if not pending:
            return
        self._write(build_batch(pending, partition_leader_epoch=self.partition_leader_epoch,
                                compression=self.compression, base_sequence=0), len(pending))
        pending.clear()

    def _write(self, batch: bytes, records: int) -> None:
        if self._writer is None:
            self._writer = SegmentWriter(self.root, self.topic, self.partition,
                                         segment_bytes=self.segment_bytes)
        self._writer.append(batch)
        self.records += records
        self.batches += 1
        self.bytes += len(batch)

    @property
    def segments(self) -> list[Path]:
        """The segment files written so far."""
        return list(self._writer.paths) if self._writer is not None else []

    def close(self) -> None:
        """Flush and close the current segment."""
        self.flush()
        if self._writer is not None:
            self._writer.close()


class LogDirs:
    """The partition logs of a `log.dirs` root, created on first use with shared settings."""

    def __init__(self, root: str | Path, *, compression: str = "none",
                 records_per_batch: int = DEFAULT_RECORDS_PER_BATCH,
                 linger_ms: int = DEFAULT_LINGER_MS,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> None:
        if compression not in COMPRESSION_NAMES:
            raise ValueError(f"unknown compression {compression!r}; "
                             f"known: {', '.join(COMPRESSION_NAMES)}")
        self.root = Path(root)
        self.compression = compression
        self.records_per_batch = records_per_batch
        self.linger_ms = linger_ms
        self.segment_bytes = segment_bytes
        self.logs: dict[tuple[str, int], PartitionLog] = {}

    def log(self, topic: str, partition: int) -> PartitionLog:
        """The log of one topic partition."""
        log = self.logs.get((topic, partition))
        if log is None:
            log = self.logs[(topic, partition)] = PartitionLog(
                self.root, topic, partition, compression=self.compression,
                records_per_batch=self.records_per_batch, linger_ms=self.linger_ms,
                segment_bytes=self.segment_bytes)
        return log

    def close(self) -> None:
        """Flush and close every log."""
        for log in self.logs.values():
            log.close()
