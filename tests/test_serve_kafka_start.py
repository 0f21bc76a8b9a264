"""`sharestate serve` starting against a real Kafka broker (tests/kafka_broker.py, a broker of
its own):

- on a new cluster it makes the broker create no internal topic. A consumer belongs to a
  group, and its coordinator lookup (FindCoordinator) makes the broker create
  `__consumer_offsets`: the service reads the cluster with an admin client until a group
  has created the topics, then reads them;
- a broker that is down when the service starts is waited for, with a line each try (never
  exit 2, the status systemd's unit does not restart), and read once it is back.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_broker import RELEASES, KafkaBroker, running_broker
from serve_support import ServeProcess, eventually, get

from sharestate.app.serve.tailer import NEW_PARTITIONS_S

pytestmark = pytest.mark.kafka_broker


def internal_topics(broker: KafkaBroker) -> set[str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    return {name for name in admin.list_topics(timeout=10).topics if name.startswith("__")}


def commit_offset(broker: KafkaBroker, group: str, offset: int) -> None:
    """Group `group` commits `offset` of topic `orders` (which makes the broker create
    `__consumer_offsets`)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", 1, 1)])["orders"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for index in range(offset):
        producer.produce("orders", b"%d" % index)
    assert producer.flush(30) == 0
    producer.close()  # the broker stops with the test: a client left would log for ever
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": "false"})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def committed(address: tuple[str, int] | None) -> list[tuple[Any, ...]]:
    if address is None:
        return []
    status, rows = get(address, "/v1/consumer-group-offsets")
    return [(row["group_id"], row["topic"], row["partition"], row["committed_offset"])
            for row in rows] if status == 200 else []


def test_serve_creates_no_internal_topic_and_waits_for_a_broker_that_is_down(
        tmp_path: Path) -> None:
    with running_broker(RELEASES["4.3"], tmp_path / "broker") as broker:
        service = ServeProcess("--source", f"kafka://{broker.bootstrap}")
        try:
            assert service.address is not None
            eventually(lambda: get(service.address, "/readyz")[0] == 200)  # type: ignore[arg-type]
            time.sleep(NEW_PARTITIONS_S + 2)  # it has looked for the topics since
            assert internal_topics(broker) == set(), service.stderr
            commit_offset(broker, "g1", 3)
            assert "__consumer_offsets" in internal_topics(broker)
            eventually(lambda: committed(service.address) == [("g1", "orders", 0, 3)],
                       timeout=60)
        finally:
            assert service.stop(signal.SIGTERM) == 0, service.stderr
        assert "Traceback" not in service.stderr

        broker.stop()
        waiting = ServeProcess("--source", f"kafka://{broker.bootstrap}", "--connect-timeout",
                               "1", wait=False)
        try:
            tries = f"cannot reach the cluster at {broker.bootstrap} within 1 s: "
            eventually(lambda: waiting.stderr.count(tries) >= 2, timeout=60)
            assert waiting.process.poll() is None, waiting.stderr
            lines = [line for line in waiting.lines if tries in line]
            assert lines[0].rstrip().endswith("; trying again in 1 s"), lines
            assert lines[1].rstrip().endswith("; trying again in 2 s"), lines
            broker.launch()
            eventually(lambda: waiting.address is not None, timeout=90)
            eventually(lambda: committed(waiting.address) == [("g1", "orders", 0, 3)],
                       timeout=60)
        finally:
            assert waiting.stop(signal.SIGTERM) == 0, waiting.stderr
        assert "Traceback" not in waiting.stderr


def test_a_broker_gone_while_serving_is_a_status_line_not_the_clients_own(
        tmp_path: Path) -> None:
    """The broker stopped under a running service: its consumer printed librdkafka's own
    lines (`%3|...|FAIL|rdkafka#consumer-1| ... Connect to ... failed: Connection refused`)
    on stderr at every retry. They go to the service's log at DEBUG; a status line says
    the cluster does not answer and why (after `FIRST_S`, then every `STATUS_S`), and one
    that it answers again, after which the service reads on."""
    with running_broker(RELEASES["4.3"], tmp_path / "broker") as broker:
        commit_offset(broker, "g1", 3)
        service = ServeProcess("--source", f"kafka://{broker.bootstrap}")
        try:
            assert service.address is not None
            eventually(lambda: committed(service.address) == [("g1", "orders", 0, 3)])
            broker.stop()
            gone = f"the cluster at {broker.bootstrap} has not answered for "
            eventually(lambda: gone in service.stderr)
            time.sleep(5)  # librdkafka retries meanwhile, several times
            lines = [line for line in service.lines if gone in line]
            assert len(lines) == 1 and "Connection refused; trying again" in lines[0], lines
            broker.launch()
            eventually(lambda: f"the cluster at {broker.bootstrap} answers again, after "
                               in service.stderr, timeout=30)
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g1",
                                 "enable.auto.commit": "false"})
            try:
                consumer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)
            finally:
                consumer.close()
            eventually(lambda: committed(service.address) == [("g1", "orders", 0, 5)])
        finally:
            assert service.stop(signal.SIGTERM) == 0, service.stderr
        assert not re.findall(r"^%\d\|", service.stderr, re.M), service.stderr
        assert "Traceback" not in service.stderr
