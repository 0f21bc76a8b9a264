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
from typing import Any

import pyarrow as pa

from sharestate.log import BatchHeader, ControlRecord, Finding, RawRecord, parse_control
from sharestate.records.catalog import Dialect, dialect
from sharestate.records.keyvalue import KeyValue, decode_key_values
from sharestate.records.segment import DecodedBatch

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

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dialects(self) -> tuple[str, ...]:
        return (self.dialect_name,)

    def batches(self) -> Iterator[DecodedBatch | Finding]:
        schemas = dialect(self.dialect_name)
        for data in self.rows:
            columns = {name: data.column(name).to_pylist() for name in COLUMNS}
            positions = columns["position"]
            bases = columns["batch_base_offset"]
            start = 0
            n = data.num_rows
            for i in range(1, n + 1):
                if i == n or positions[i] is None or positions[i] != positions[start] \
                        or bases[i] != bases[start]:
                    yield _batch(columns, start, i, schemas, self.topic)
                    start = i


def _value(value: Any, default: Any) -> Any:
    return default if value is None else value


def _batch(columns: dict[str, list[Any]], start: int, end: int, schemas: Dialect,
           topic: str) -> DecodedBatch:
    def first(name: str, default: Any) -> Any:
        return _value(columns[name][start], default)

    offsets = columns["offset"][start:end]
    timestamps = columns["timestamp"][start:end]
    header = BatchHeader(
        first("position", -1), first("batch_base_offset", offsets[0]),
        first("batch_last_offset", offsets[-1]), first("batch_size", 0),
        first("partition_leader_epoch", -1), first("magic", 2), 0, first("crc_valid", True),
        first("compression", "none"), first("timestamp_type", "CreateTime"),
        _value(timestamps[0], -1), _value(max(t for t in timestamps if t is not None)
                                          if any(t is not None for t in timestamps) else None,
                                          -1),
        first("producer_id", -1), first("producer_epoch", -1), -1,
        bool(first("is_transactional", False)), bool(first("is_control", False)),
        end - start, False)
    records = [RawRecord(o, t, -1, k, v, ()) for o, t, k, v in
               zip(offsets, timestamps, columns["key"][start:end],
                   columns["value"][start:end], strict=True)]
    decoded: list[KeyValue | ControlRecord | Finding]
    if header.is_control:
        decoded = [parse_control(r, header) for r in records]
    else:
        decoded = list(decode_key_values(schemas, topic, records))
    return DecodedBatch(header, records, decoded, [])
