"""A `log_records` stream (Arrow batches of one topic-partition, in offset order) as a log.

Replay runs over segment files (`PartitionLog`) or, inside the Spark jobs, over the bronze
rows of one partition; `ArrowLog` rebuilds the batches from the rows (records of one batch
share its position and base offset) and decodes them, so both go through the same
`replay_share_log` / `replay_group_log`. Fields bronze does not keep (the CRC value, the
base timestamp, sequences) are not used by replay and are left neutral.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharestate import native
from sharestate.log import BatchHeader, ControlRecord, LogFinding, RawRecord, parse_control
from sharestate.records import segment
from sharestate.records.catalog import Dialect, dialect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.segment import DecodedBatch, LogItem, QuietRun
from sharestate.replay.logs import from_log_start
from sharestate.tables.columns import tuples_of

COLUMNS = ("offset", "timestamp", "key", "value", "position", "batch_base_offset",
           "batch_last_offset", "batch_size", "partition_leader_epoch", "magic", "crc_valid",
           "compression", "timestamp_type", "producer_id", "producer_epoch",
           "is_transactional", "is_control")
"""The `log_records` columns replay reads."""


@dataclass
class ArrowLog:
    """One topic-partition's bronze rows, replayable (see the module docstring)."""

    topic: str
    partition: int | None
    rows: Iterable[pa.RecordBatch]
    dialect_name: str
    log_start_offset: int = 0
    """Kafka's log start offset of the partition as ingest last learnt it (0: none known):
    bronze keeps every row ingested, and the batches wholly below it are not read."""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dialects(self) -> tuple[str, ...]:
        return (self.dialect_name,)

    @property
    def empty_span(self) -> None:
        """Bronze has rows of a log that holds records only."""
        return None

    def batches(self) -> Iterator[DecodedBatch | LogFinding]:
        return from_log_start(self.log_start_offset, (
            batch for chunk in self._chunks() for batch in chunk.batches()))

    def items(self) -> Iterator[LogItem]:
        return from_log_start(self.log_start_offset, (
            item for chunk in self._chunks() for item in chunk.items()))

    def _chunks(self) -> Iterator[_Chunk]:
        """The rows as chunks of whole batches: the rows of a batch that the input splits
        across two chunks are held back and joined to the next chunk."""
        schemas = dialect(self.dialect_name)
        carry: pa.RecordBatch | None = None
        for data in self.rows:
            if not data.num_rows:
                continue
            if carry is not None:
                data = pa.concat_batches([carry, data])
            starts = _starts(data)
            carry = data.slice(int(starts[-1]))
            if len(starts) > 1:
                yield _chunk(data.slice(0, int(starts[-1])), starts[:-1], schemas, self.topic)
        if carry is not None:
            yield _chunk(carry, _starts(carry), schemas, self.topic)


HEADER_DEFAULTS: dict[str, Any] = {
    "position": -1, "batch_size": 0, "partition_leader_epoch": -1, "magic": 2,
    "crc_valid": True, "compression": "none", "timestamp_type": "CreateTime",
    "producer_id": -1, "producer_epoch": -1, "is_transactional": False, "is_control": False}


def _starts(data: pa.RecordBatch) -> np.ndarray:
    """Row indexes where a batch begins: the position, base offset or (rows of several
    segments merged by offset) the segment changes; a row without a position is a batch of
    its own."""
    positions = data.column("position")
    missing = positions.is_null().to_numpy(zero_copy_only=False)
    position = positions.fill_null(-1).to_numpy()
    base = data.column("batch_base_offset").fill_null(-1).to_numpy()
    change = np.ones(data.num_rows, dtype=bool)
    change[1:] = ((position[1:] != position[:-1]) | (base[1:] != base[:-1])
                  | missing[1:] | missing[:-1])
    if "segment" in data.schema.names:
        segment = data.column("segment").fill_null(-1).to_numpy()
        change[1:] |= segment[1:] != segment[:-1]
    return np.flatnonzero(change)


@dataclass
class _Chunk:
    """Consecutive whole batches: batch `i` is `headers[i]` with records (and their
    decodings) `starts[i]` to `ends[i]`; `quiet[i]`: outside transactions, data only."""

    headers: list[BatchHeader]
    records: list[RawRecord]
    decoded: list[KeyValue | ControlRecord | LogFinding]
    starts: np.ndarray
    ends: np.ndarray
    quiet: np.ndarray

    def batches(self) -> Iterator[DecodedBatch]:
        records, decoded = self.records, self.decoded
        for header, s, e in zip(self.headers, self.starts.tolist(), self.ends.tolist(),
                                strict=True):
            yield DecodedBatch(header, records[s:e], decoded[s:e], [])

    def items(self) -> Iterator[LogItem]:
        """The batches, each stretch of quiet ones gathered into `QuietRun`s that end where
        the record count passes a multiple of `QUIET_RUN_RECORDS` (found column-wise)."""
        starts, ends, quiet = self.starts, self.ends, self.quiet
        new = np.ones(len(starts), dtype=bool)
        window = starts // segment.QUIET_RUN_RECORDS
        new[1:] = ~quiet[1:] | ~quiet[:-1] | (window[1:] != window[:-1])
        firsts = np.flatnonzero(new)
        lasts = np.append(firsts[1:], len(starts))
        headers, records, decoded = self.headers, self.records, self.decoded
        for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True):
            s, e = int(starts[a]), int(ends[b - 1])
            if quiet[a]:
                yield QuietRun(headers[a:b], records[s:e], decoded[s:e],
                               (ends[a:b] - s).tolist())
            else:
                yield DecodedBatch(headers[a], records[s:e], decoded[s:e], [])


def _chunk(data: pa.RecordBatch, starts: np.ndarray, schemas: Dialect, topic: str) -> _Chunk:
    """The batches of one chunk of rows (beginning at `starts`), headers and records built
    column-wise."""
    n = data.num_rows
    ends = np.append(starts[1:], n)
    take = pa.array(starts)
    offsets = data.column("offset")
    timestamps = data.column("timestamp")
    # max over each batch's timestamps (nulls ignored; -1 where a batch has none)
    stamp = timestamps.fill_null(np.iinfo(np.int64).min).to_numpy()
    max_stamp = np.maximum.reduceat(stamp, starts)
    max_stamp[max_stamp == np.iinfo(np.int64).min] = -1

    def first(name: str) -> pa.Array:
        column = data.column(name).take(take)
        if isinstance(column, pa.DictionaryArray):
            column = column.dictionary_decode()
        return column.fill_null(HEADER_DEFAULTS[name])

    headers = tuples_of(BatchHeader, len(starts), [
        first("position"), pc.coalesce(data.column("batch_base_offset").take(take),
                                       offsets.take(take)),
        pc.coalesce(data.column("batch_last_offset").take(take),
                    offsets.take(pa.array(ends - 1))),
        first("batch_size"), first("partition_leader_epoch"), first("magic"), 0,
        first("crc_valid"), first("compression"), first("timestamp_type"),
        timestamps.take(take).fill_null(-1), pa.array(max_stamp), first("producer_id"),
        first("producer_epoch"), -1, first("is_transactional"), first("is_control"),
        pa.array(ends - starts), False])
    records = records_of(offsets, timestamps, data.column("key"), data.column("value"))
    control = _flags(data, "is_control", take)
    items: list[KeyValue | ControlRecord | LogFinding]
    if control.any():
        bounds = list(zip(starts.tolist(), ends.tolist(), strict=True))
        decoded = iter(decode_key_values(schemas, topic, [
            r for is_control, (s, e) in zip(control.tolist(), bounds, strict=True)
            if not is_control for r in records[s:e]]))
        items = [item for header, (s, e) in zip(headers, bounds, strict=True) for item in (
            [parse_control(r, header) for r in records[s:e]] if header.is_control
            else [next(decoded) for _ in range(s, e)])]
    else:
        items = list(decode_key_values(schemas, topic, records))
    quiet = ~(_flags(data, "is_transactional", take) | control)
    return _Chunk(headers, records, items, starts, ends, quiet)


def _flags(data: pa.RecordBatch, name: str, take: pa.Array) -> np.ndarray:
    """A boolean header column at each batch's first row (null: false)."""
    flags: np.ndarray = data.column(name).take(take).fill_null(False).to_numpy(
        zero_copy_only=False)
    return flags


def records_of(offsets: pa.Array, timestamps: pa.Array, keys: pa.Array, values: pa.Array
               ) -> list[RawRecord]:
    """The records of bronze columns: in C (`sharestate._native.Record`s over one copy of
    the key and value bytes, no Python object per field) when the extension is built and
    every offset and timestamp is set, else `RawRecord`s."""
    n = len(offsets)
    if not native.enabled() or not n or offsets.null_count or timestamps.null_count:
        return list(map(RawRecord, offsets.to_pylist(), timestamps.to_pylist(), repeat(-1, n),
                        keys.to_pylist(), values.to_pylist(), repeat((), n)))
    offsets, timestamps, keys, values = (
        array if array.offset == 0 else pa.concat_arrays([array])
        for array in (offsets, timestamps, keys, values))
    key_valid, key_offsets, key_data = keys.buffers()
    value_valid, value_offsets, value_data = values.buffers()
    head = key_data.to_pybytes() if key_data is not None else b""
    buffer = head + (value_data.to_pybytes() if value_data is not None else b"")
    return native.module.arrow_records(
        n, buffer, offsets.buffers()[1], timestamps.buffers()[1], key_offsets, key_valid,
        value_offsets, value_valid, len(head))
