"""Reading one offset range from a live cluster into Arrow batches of raw records.

Rows have the stable raw schema `RAW_SCHEMA` (Spark DDL `RAW_DDL`):

| column | type | |
|---|---|---|
| topic | string, not null | |
| partition | int, not null | |
| offset | bigint, not null | |
| timestamp | bigint | epoch milliseconds, as the record holds it (-1: none) |
| timestamp_type | string | CreateTime, LogAppendTime or NoTimestampType |
| key | binary | raw key bytes, null when absent |
| value | binary | raw value bytes, null for a tombstone |
| headers | array<struct<key: string, value: binary>> | record headers, in order |

The segment-file reader of the pipelines yields the same columns, plus batch-level ones
that a consumer cannot see (null for this source). The consumer is assigned the partition
at the range's start and reads until its position reaches the range's end; offsets of
control records (transaction markers) and compacted-away records are simply absent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sharestate.cluster.kafka_options import KafkaReadOptions
from sharestate.cluster.kafka_plan import (
    ClusterNotReady,
    KafkaSourceError,
    OffsetRange,
    quiet_log,
    retriable,
    source_error,
)
from sharestate.log.batch import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
RAW_SCHEMA = pa.schema([
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    ("timestamp", pa.int64()),
    ("timestamp_type", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
])
RAW_DDL = ("topic string not null, partition int not null, offset bigint not null, "
           "timestamp bigint, timestamp_type string, key binary, value binary, "
           "headers array<struct<key: string, value: binary>>")
BATCH_ROWS = 10_000
POLL_TIMEOUT_S = 1.0
TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}
"""confluent_kafka's timestamp kinds by name (any other: `NO_TIMESTAMP_TYPE`)."""


UNUSED_GROUP_ERRORS = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED})
"""Errors about the consumer group a reader must name (librdkafka wants a `group.id`) but
never joins or commits to: its client looks the group's coordinator up, which a principal
without Describe on the group may not. The fetches need no group; the error is ignored."""


def _headers(message: Message) -> list[dict[str, object]]:
    headers = message.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return [{"key": key, "value": value} for key, value in pairs]


def messages_batch(rows: list[Message]) -> pa.RecordBatch:
    """Consumed messages as one batch of `RAW_SCHEMA` rows."""
    timestamps = [m.timestamp() for m in rows]
    return pa.RecordBatch.from_arrays([
        pa.array([m.topic() for m in rows], pa.string()),
        pa.array([m.partition() for m in rows], pa.int32()),
        pa.array([m.offset() for m in rows], pa.int64()),
        pa.array([ts for _, ts in timestamps], pa.int64()),
        pa.array([TIMESTAMP_TYPES.get(kind, NO_TIMESTAMP_TYPE) for kind, _ in timestamps]),
        pa.array([m.key() for m in rows], pa.binary()),
        pa.array([m.value() for m in rows], pa.binary()),
        pa.array([_headers(m) for m in rows], HEADER_TYPE),
    ], schema=RAW_SCHEMA)


def read_range(options: KafkaReadOptions, offsets: OffsetRange,
               batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The records of `offsets` in offset order, as batches of at most `batch_rows` rows.
    The consumer's own log lines (a broker refusing connections, ...) stay off stderr: the
    last error among them says why when no records came in time. A range the log no longer
    holds whole since it was planned (the log start moved past its next offset: Kafka
    deleted records below it; the log truncated or not yet stable before its end) raises
    ClusterNotReady: a run planned again reads what the log holds then. A consumer's
    default would jump to the log's end and read none of the range's records left."""
    where = f"{offsets.topic}-{offsets.partition}"
    log, heard = quiet_log()
    try:
        consumer = Consumer({**options.client_config("sharestate-reader"),
                             "enable.partition.eof": "true", "auto.offset.reset": "error",
                             "logger": log})
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot create a Kafka client: {exc}")) from None
    try:
        consumer.assign([TopicPartition(offsets.topic, offsets.partition, offsets.start)])
        position = offsets.start
        pending: list[Message] = []
        deadline = time.monotonic() + options.timeout_ms / 1000
        while position < offsets.end:
            wanted = min(batch_rows - len(pending), offsets.end - position)
            messages = consumer.consume(wanted, POLL_TIMEOUT_S)
            for message in messages:
                error, offset = message.error(), message.offset()
                if error is not None and error.code() in UNUSED_GROUP_ERRORS:
                    continue
                if error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
                    raise ClusterNotReady(
                        f"{where}: offset {position} is no longer in the log (its log start "
                        f"moved past it since the run planned to read {offsets.start} to "
                        f"{offsets.end}: Kafka deleted the records below)")
                if error is not None and error.code() != KafkaError._PARTITION_EOF:
                    kind = ClusterNotReady if retriable(error) else KafkaSourceError
                    raise kind(options.redact(f"reading {where}: {error}"))
                if offset is None:
                    raise KafkaSourceError(f"reading {where}: a message without an offset")
                if error is not None and offset < offsets.end:
                    raise ClusterNotReady(f"{where} ends at offset {offset}, before the "
                                          f"planned end {offsets.end} (truncated, or not "
                                          f"yet stable)")
                if error is not None or offset >= offsets.end:
                    position = offsets.end
                    break
                pending.append(message)
                position = offset + 1
            if messages:
                deadline = time.monotonic() + options.timeout_ms / 1000
            elif time.monotonic() > deadline:
                why = "" if heard.last is None else f": {heard.last}"
                raise ClusterNotReady(options.redact(
                    f"no records from {where} for {options.timeout_ms} ms at offset "
                    f"{position} (range ends at {offsets.end}){why}"))
            if len(pending) >= batch_rows or (pending and position >= offsets.end):
                yield messages_batch(pending)
                pending = []
    except KafkaException as exc:
        raise source_error(options, f"reading {where}", exc) from None
    finally:
        consumer.close()
