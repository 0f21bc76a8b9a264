"""The executors' reader of a live cluster against a log that changed since the run planned
its ranges, on the session's real Kafka 4.3.1 broker: the log start moved past a range's
start (Kafka deleted records, as the share coordinator's pruning does every few minutes).
The reader's consumer jumped to the log's end, as librdkafka's default reset does, and read
none of the range's records that were still there: the run wrote its tables without them
and said nothing. It now stops with ClusterNotReady (the run exits 75: run again later, when
a new plan starts at the new log start)."""

from __future__ import annotations

import gc
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import client_threads
from kafka_broker import KafkaBroker

from sharestate.cluster import OffsetRange, parse_options, read_range
from sharestate.cluster.kafka_plan import ClusterNotReady

pytestmark = pytest.mark.kafka_broker


def _records_from(bootstrap: str, records: int, log_start: int) -> str:
    """A new topic of one partition holding `records` records, those below `log_start`
    deleted; its name. The clients are gone on return: a client left alive logs its
    connection failures into later tests once the broker stops."""
    topic = f"reader-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for created in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        created.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(topic, key=b"%d" % i, value=b"v", partition=0)
    assert producer.flush(30) == 0
    if log_start:
        for deleted in admin.delete_records([TopicPartition(topic, 0, log_start)]).values():
            deleted.result(timeout=30)
    return topic


def _offsets(options: dict[str, str], offsets: OffsetRange) -> list[int]:
    return [o for batch in read_range(parse_options(options), offsets)
            for o in batch.column("offset").to_pylist()]


def test_a_range_whose_start_kafka_deleted_since_the_plan_is_not_read_as_empty(
        kafka_broker: KafkaBroker) -> None:
    gc.collect()  # a client an earlier test left, gone now rather than during this one
    threads = client_threads()
    topic = _records_from(kafka_broker.bootstrap, 100, 50)
    gc.collect()
    assert client_threads() <= threads  # the set-up's clients are gone
    options = {"bootstrap.servers": kafka_broker.bootstrap, "topics": topic,
               "timeoutMs": "10000"}
    with pytest.raises(ClusterNotReady, match=f"{topic}-0: offset 10 is no longer in the log "
                                              r"\(its log start moved past it"):
        _offsets(options, OffsetRange(topic, 0, 10, 100))
    assert _offsets(options, OffsetRange(topic, 0, 50, 100)) == list(range(50, 100))
    gc.collect()
    assert client_threads() <= threads  # the reader closed its consumer, failing or not
