"""`sharestate serve` while the share coordinator moves the log start past what it read (a
real Kafka 4.3.1 broker of its own: one `__share_group_state` partition, a prune run every
second).

While the service is held (SIGSTOP) a share group is deleted (its tombstones written) and
the coordinator prunes past them, deleting records the service never read. Going on, its
consumer's position lay below the log start and librdkafka moved it to the log start
(`auto.offset.reset` earliest) on top of the state it had: the deleted group's state stayed,
where Kafka (a coordinator loads the log from its log start) holds none. The partition is
replayed from its log start, and the service's answers are Kafka's own
(`kafka-share-groups --describe --offsets`). (A restart from a checkpoint below the log
start was already replayed from the log start: `service._resumable`.)
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_workload import (
    SHARE_TOOL,
    Workload,
    accept,
    consume,
    share_consumer,
    share_groups_start_earliest,
)
from serve_support import ServeProcess, eventually, get

from sharestate.records.catalog import SHARE_STATE_TOPIC

pytestmark = pytest.mark.kafka_broker

TOPIC = "orders"
KEPT, GONE = "sg-kept", "sg-gone"
SETTINGS = {"share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.prune.interval.ms": "1000"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(RELEASES["4.3"], tmp_path_factory.mktemp("kafka-serve-start"),
                        SETTINGS) as running:
        yield running


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(count):
        producer.produce(TOPIC, value=b"%d" % index)
    assert producer.flush(30) == 0
    producer.close()


def _state_log(workload: Workload) -> tuple[int, int]:
    """(log start, end) of `__share_group_state-0`."""
    admin, where = workload.admin(), TopicPartition(SHARE_STATE_TOPIC, 0)
    start, end = (admin.list_offsets({where: spec})[where].result().offset
                  for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))
    return start, end


def _consume(workload: Workload, group: str, **limits: Any) -> None:
    member = share_consumer(workload, group, [TOPIC])
    consume(workload, member, group, accept, **limits)
    member.close()


def _served(address: tuple[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
    """(group, partition) -> (start offset, lag), as the service answers."""
    states = {(s["group_id"], s["partition"]): s["start_offset"]
              for s in get(address, "/v1/share-partitions")[1]}
    lags = {(r["group_id"], r["partition"]): r["lag"] for r in get(address, "/v1/lag")[1]}
    return {where: (start, lags.get(where)) for where, start in states.items()}


def _kafkas(workload: Workload) -> dict[tuple[str, int], tuple[int, int]]:
    return {(group, int(row["PARTITION"])): (int(row["START-OFFSET"]), int(row["LAG"]))
            for group in (KEPT, GONE) for row in workload.share_groups_describe(group)
            if row["START-OFFSET"] != "-"}


def test_a_restart_past_a_moved_log_start_answers_as_kafka(broker: KafkaBroker,
                                                           tmp_path: Path) -> None:
    workload = Workload(broker)
    workload.admin().create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    _produce(broker.bootstrap, 20)
    share_groups_start_earliest(workload, (KEPT, GONE))
    for group in (KEPT, GONE):
        _consume(workload, group, idle_s=1)
    service = ServeProcess("--source", f"kafka://{broker.bootstrap}")
    try:
        assert service.address is not None
        eventually(lambda: get(service.address, "/readyz")[0] == 200, timeout=30)
        eventually(lambda: {g for g, _ in _served(service.address)} == {KEPT, GONE})
        service.process.send_signal(signal.SIGSTOP)
        # GONE deleted (its member left: Kafka refuses before); KEPT acknowledges in rounds
        # until its snapshots take the prune point, and the log start, past GONE's tombstones
        before, deadline = _state_log(workload)[1], time.monotonic() + 30
        while _state_log(workload)[1] == before:
            assert time.monotonic() < deadline, "no tombstones"
            workload.broker.tool(SHARE_TOOL, "--bootstrap-server", workload.bootstrap,
                                 "--delete", "--group", GONE, check=False)
            time.sleep(0.5)
        gone_at = _state_log(workload)[1]
        member = share_consumer(workload, KEPT, [TOPIC])
        deadline = time.monotonic() + 30
        while _state_log(workload)[0] < gone_at:
            assert time.monotonic() < deadline, (_state_log(workload), gone_at)
            _produce(broker.bootstrap, 3)
            consume(workload, member, KEPT, accept, idle_s=0.5, limit_s=10)
            time.sleep(0.5)
        member.close()
        kafkas = _kafkas(workload)
        assert {group for group, _ in kafkas} == {KEPT}
        service.process.send_signal(signal.SIGCONT)
        eventually(lambda: _served(service.address) == kafkas, timeout=15)
        assert "replaying the partition from its log start" in service.stderr
    finally:
        service.process.send_signal(signal.SIGCONT)
        assert service.stop(signal.SIGTERM) == 0, service.stderr[-3000:]
