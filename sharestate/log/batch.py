"""What the log layer hands out: batch headers, raw records, findings and batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from typing import NamedTuple

COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
"""Codec names by the id held in attribute bits 0-2."""

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
NO_TIMESTAMP_TYPE = "NoTimestampType"

DEFAULT_RAW_CAP = 4096
"""How many offending bytes a `LogFinding` keeps by default."""


class BatchHeader(NamedTuple):
    """A batch header as Kafka sees it; legacy (magic 0/1) entries are mapped onto it.

    `position` is the byte position of the batch in the stream and `size_in_bytes` its
    whole size including the 12-byte offset+length prefix. `crc` is the stored checksum
    (unsigned) and `crc_valid` whether it matches the bytes.
    """

    position: int
    base_offset: int
    last_offset: int
    size_in_bytes: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_valid: bool
    compression: str
    timestamp_type: str
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    record_count: int
    has_delete_horizon: bool


class RawRecord(NamedTuple):
    """One record: absolute offset and timestamp, sequence (-1 without one), raw bytes.

    `value` None is a tombstone; `headers` are (key, value-or-None) pairs.
    """

    offset: int
    timestamp: int
    sequence: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class LogFinding:
    """A problem found in the input, with where it is and the bytes concerned.

    `position` is a byte position in the stream, `offset` the log offset concerned when it
    is known. `raw` holds at most the configured number of offending bytes and
    `raw_length` the full length of the offending range. `source` names the segment file
    (set by `read_segment`; None for a bare stream).
    """

    kind: str
    message: str
    position: int
    offset: int | None
    raw: bytes
    raw_length: int
    source: str | None = None

    @classmethod
    def of(cls, kind: str, message: str, position: int, offset: int | None,
           raw: bytes | memoryview, cap: int = DEFAULT_RAW_CAP,
           source: str | None = None) -> LogFinding:
        """Build a finding, keeping at most `cap` bytes of `raw`."""
        return cls(kind, message, position, offset, bytes(raw[:cap]), len(raw), source)


class Batch(NamedTuple):
    """A batch header, its records (in log order) and the problems found inside it."""

    header: BatchHeader
    records: list[RawRecord]
    findings: list[LogFinding]


class BatchRun(NamedTuple):
    """Data batches without findings, in offset order (each right after the one before:
    `sharestate.log.order.in_order`'s usual path, checked by the native scanner as it reads
    them), and their records end to end. Readers that ask for runs get these in place of
    the batches one by one: a log of small batches then costs a Python step per run."""

    batches: list[Batch]
    records: list[RawRecord]


_HEADER, _RECORDS = itemgetter(0), itemgetter(1)  # a Batch's fields, by position


def headers_of(batches: Iterable[Batch]) -> Iterator[BatchHeader]:
    """The header of each of `batches` (a step in C per batch)."""
    return map(_HEADER, batches)


def record_counts(batches: Iterable[Batch]) -> Iterator[int]:
    """How many records each of `batches` holds (a step in C per batch)."""
    return map(len, map(_RECORDS, batches))
