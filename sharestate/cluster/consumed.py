"""What a live consumer reads of an internal topic, as the items a replay applies.

A consumer sees neither batch boundaries nor batch headers, so each consumed record is a
batch of its own whose header holds the record's offset and timestamp and neutral values
elsewhere: the batches the Spark replay task makes of the bronze rows of a live read
(`sharestate.tables.arrow_log`, a test holds the two equal).

`consumed_runs` splits what one `Consumer.consume()` returned into runs of one partition,
building each record and its header as it goes: in C (`sharestate._native.consumed_runs`)
when the extension is built, reading each message through its type's own C methods, so no
Python call is made per message. `consumed_items` decodes a partition's records window by
window into `QuietRun`s (a window holding a record that did not decode: batch by batch, the
record's finding with its batch), so each window applies while its records are in cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter
from typing import NamedTuple, cast

from confluent_kafka import KafkaError, Message

from sharestate import native
from sharestate.log import BatchHeader, RawRecord
from sharestate.log.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE
from sharestate.records.catalog import Dialect
from sharestate.records.keyvalue import decode_key_values
from sharestate.records.segment import (
    QUIET_RUN_RECORDS,
    Decoded,
    DecodedBatch,
    FindingCap,
    LogItem,
    QuietRun,
    failure_kind,
    record_finding,
)

TIMESTAMP_TYPES = (NO_TIMESTAMP_TYPE, CREATE_TIME, LOG_APPEND_TIME)
"""Timestamp type names by confluent-kafka's kind (TIMESTAMP_NOT_AVAILABLE, _CREATE_TIME,
_LOG_APPEND_TIME); any other kind is `NO_TIMESTAMP_TYPE`."""
HEADER = BatchHeader(
    position=-1, base_offset=0, last_offset=0, size_in_bytes=0, partition_leader_epoch=-1,
    magic=2, crc=0, crc_valid=True, compression="none", timestamp_type=CREATE_TIME,
    base_timestamp=-1, max_timestamp=-1, producer_id=-1, producer_epoch=-1, base_sequence=-1,
    is_transactional=False, is_control=False, record_count=1, has_delete_horizon=False)
"""A consumed record's batch header, but for its offsets, timestamp and timestamp type."""
_ERROR = itemgetter(5)  # KeyValue.error


class ConsumedRun(NamedTuple):
    """Consecutive consumed messages of one partition, or one error message alone.

    A run of records has them and their headers (`error` None, `offset` the last record's);
    an error message (e.g. the end of a partition, at `offset`) has none of either, and its
    `topic` and `partition` may be None (an error of no partition)."""

    topic: str | None
    partition: int | None
    records: list[RawRecord]
    headers: list[BatchHeader]
    error: KafkaError | None
    offset: int | None


def consumed_runs(messages: list[Message]) -> list[ConsumedRun]:
    """`messages` (as `consume()` returned them) as runs: consecutive messages of one
    partition, an error message alone (in C when the extension is built)."""
    if native.enabled():
        return native.module.consumed_runs(messages, HEADER, TIMESTAMP_TYPES)
    return consumed_runs_py(messages, HEADER, TIMESTAMP_TYPES)


def consumed_runs_py(messages: list[Message], header: BatchHeader,
                     timestamp_types: tuple[str, ...]) -> list[ConsumedRun]:
    """The pure-Python twin of `sharestate._native.consumed_runs`."""
    runs: list[ConsumedRun] = []
    records: list[RawRecord] = []
    headers: list[BatchHeader] = []
    where: tuple[str | None, int | None] | None = None
    for message in messages:
        error = message.error()
        at = (message.topic(), message.partition())
        if error is not None or at != where:
            if where is not None:
                runs.append(ConsumedRun(*where, records, headers, None, records[-1].offset))
                records, headers, where = [], [], None
            if error is not None:
                runs.append(ConsumedRun(*at, [], [], error, message.offset()))
                continue
            where = at
        offset = cast(int, message.offset())  # set: not an error message
        kind, timestamp = message.timestamp()
        records.append(RawRecord(offset, timestamp, -1, message.key(), message.value(), ()))
        headers.append(header._replace(
            base_offset=offset, last_offset=offset,
            timestamp_type=timestamp_types[kind] if 0 <= kind < len(timestamp_types)
            else NO_TIMESTAMP_TYPE, base_timestamp=timestamp, max_timestamp=timestamp))
    if where is not None:
        runs.append(ConsumedRun(*where, records, headers, None, records[-1].offset))
    return runs


def consumed_items(topic: str, schemas: Dialect, name: str, records: list[RawRecord],
                   headers: list[BatchHeader], cap: FindingCap) -> Iterator[LogItem]:
    """The items of consumed `records` (with their `headers`) of the partition `name`,
    decoded under `schemas` window by window: a `QuietRun` of up to `QUIET_RUN_RECORDS`
    records, or, for a window holding a record that did not decode, its batches one by one,
    each with the finding of its record if it failed and `cap` (the partition's) lists it
    (else the batch counts it in `omitted`, and no finding is made)."""
    for start in range(0, len(records), QUIET_RUN_RECORDS):
        window = records[start:start + QUIET_RUN_RECORDS]
        above = headers[start:start + QUIET_RUN_RECORDS]
        decoded = decode_key_values(schemas, topic, window)
        if list(map(_ERROR, decoded)).count(None) == len(decoded):
            yield QuietRun(above, window, cast(list[Decoded], decoded),
                           list(range(1, len(window) + 1)))
            continue
        for header, record, kv in zip(above, window, decoded, strict=True):
            kind = failure_kind(kv)
            if kind is None:
                yield DecodedBatch(header, [record], [kv], [])
            elif cap.admit(kind, header.position, record.offset):
                failed = record_finding(header, record, kv, name)
                assert failed is not None
                yield DecodedBatch(header, [record], [kv], [], (failed,))
            else:
                yield DecodedBatch(header, [record], [kv], [], (), 1)
