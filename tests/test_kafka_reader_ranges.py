"""The executors' reader of a live cluster against a log that changed since the run planned
its ranges, on the session's real Kafka 4.3.1 broker: the log start moved past a range's
start (Kafka deleted records, as the share coordinator's pruning does every few minutes).
The reader's consumer jumped to the log's end, as librdkafka's default reset does, and read
none of the range's records that were still there: the run wrote its tables without them
and said nothing. It now stops with ClusterNotReady (the run exits 75: run again later, when
a new plan starts at the new log start)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_broker import KafkaBroker

from sharestate.cluster import OffsetRange, parse_options, read_range
from sharestate.cluster.kafka_plan import ClusterNotReady

pytestmark = pytest.mark.kafka_broker


def test_a_range_whose_start_kafka_deleted_since_the_plan_is_not_read_as_empty(
        kafka_broker: KafkaBroker) -> None:
    topic = f"reader-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for created in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        created.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(100):
        producer.produce(topic, key=b"%d" % i, value=b"v", partition=0)
    assert producer.flush(30) == 0
    options = parse_options({"bootstrap.servers": kafka_broker.bootstrap, "topics": topic,
                             "timeoutMs": "10000"})
    assert [o for batch in read_range(options, OffsetRange(topic, 0, 10, 100))
            for o in batch.column("offset").to_pylist()] == list(range(10, 100))
    for deleted in admin.delete_records([TopicPartition(topic, 0, 50)]).values():
        deleted.result(timeout=30)
    with pytest.raises(ClusterNotReady, match=f"{topic}-0: offset 10 is no longer in the log "
                                              r"\(its log start moved past it"):
        list(read_range(options, OffsetRange(topic, 0, 10, 100)))
    assert [o for batch in read_range(options, OffsetRange(topic, 0, 50, 100))
            for o in batch.column("offset").to_pylist()] == list(range(50, 100))
