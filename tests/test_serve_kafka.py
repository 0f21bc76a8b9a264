"""`sharestate serve` on a real Kafka 4.3.1 broker, judged by Kafka's own tools.

A broker of its own (tests/kafka_broker.py; not the session's, whose workload other judge
tests hold to exact answers) takes 20,000 records on two topics, half of them while the
service runs, in rounds; two share groups consume them with real ShareConsumers (one
accepts everything, one releases poison records until the delivery limit archives them and
rejects others) and a classic consumer group commits. `sharestate serve` runs as its own
process, started half-way, so records arrive while it runs; mid-stream it is killed (-9)
and started again, and must resume every partition from its checkpoint (written every
second). Once the workload is done its answers must be Kafka's: every share-partition's
start offset and leader epoch as `kafka-share-groups --describe` gives them, lag against
the data topics' real end offsets, the consumer group's offsets as `kafka-consumer-groups`
gives them — in the JSON answers and in /metrics. Scraped every half second meanwhile (with
checkpoints on), the service exports exactly the metrics the Grafana dashboard's PromQL
names (`up` aside, which Prometheus records itself).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from grafana_dashboard import PROMETHEUS_OWN, named_metrics
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_judge import sharestate_json
from kafka_workload import (
    Workload,
    accept,
    consume,
    mixed,
    share_consumer,
    share_groups_start_earliest,
)
from prometheus_client.parser import text_string_to_metric_families
from serve_support import ServeProcess, eventually, get

pytestmark = pytest.mark.kafka_broker

TOPICS = {"orders": 3, "events": 2}
PER_PARTITION = 4_000
ROUND = 400
"""Records per partition produced in each round while the service runs."""
SHARE_GROUPS = ("sg-all", "sg-poison")
CONSUMER_GROUP = "cg-orders"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(RELEASES["4.3"], tmp_path_factory.mktemp("kafka-serve")) as running:
        yield running


def create_topics(workload: Workload) -> Producer:
    """The data topics (their ids kept), and a producer to them."""
    admin = workload.admin()
    for future in admin.create_topics([NewTopic(name, count, 1)
                                       for name, count in TOPICS.items()]).values():
        future.result()
    time.sleep(1)
    described = admin.describe_topics(TopicCollection(list(TOPICS)))
    workload.topic_ids = {name: str(future.result().topic_id).replace("+", "-").replace("/", "_")
                          for name, future in described.items()}
    return Producer({"bootstrap.servers": workload.bootstrap, "linger.ms": 20})


def produce(producer: Producer, records: range) -> None:
    """Records number `records` of every partition of every topic."""
    for topic, partitions in TOPICS.items():
        for partition in range(partitions):
            for index in records:
                producer.produce(topic, value=f"{topic}-{partition}-{index}".encode(),
                                 partition=partition)
                producer.poll(0)
    assert producer.flush(60) == 0


def commit_consumer_group(workload: Workload, every: int) -> None:
    """A classic consumer group reads orders to its end, committing every `every` records."""
    consumer = Consumer({"bootstrap.servers": workload.bootstrap, "group.id": CONSUMER_GROUP,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders"])
    taken, idle_since = 0, time.monotonic()
    while not taken or time.monotonic() - idle_since < 2:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                idle_since = time.monotonic()
                taken += 1
                if taken % every == 0:
                    consumer.commit(message=message, asynchronous=False)
    consumer.commit(asynchronous=False)
    consumer.close()


def end_offsets(workload: Workload) -> dict[tuple[str, int], int]:
    request = {TopicPartition(topic, p): OffsetSpec.latest()
               for topic, count in TOPICS.items() for p in range(count)}
    return {(tp.topic, tp.partition): future.result().offset
            for tp, future in workload.admin().list_offsets(request).items()}


def kafkas_view(workload: Workload) -> dict[tuple[str, str, int], dict[str, int]]:
    """`kafka-share-groups --describe --offsets`: start offset, leader epoch and lag of every
    share-partition Kafka holds state for."""
    view = {}
    for group in SHARE_GROUPS:
        for row in workload.share_groups_describe(group):
            if row["START-OFFSET"] != "-":
                view[(group, row["TOPIC"], int(row["PARTITION"]))] = {
                    "start_offset": int(row["START-OFFSET"]),
                    "leader_epoch": int(row["LEADER-EPOCH"]), "lag": int(row["LAG"])}
    return view


def served_view(address: tuple[str, int], names: dict[str, str]
                ) -> dict[tuple[str, str, int], dict[str, int]]:
    states = {(s["group_id"], names[s["topic_id"]], s["partition"]): s
              for s in get(address, "/v1/share-partitions")[1]}
    lags = {(row["group_id"], row["topic"], row["partition"]): row["lag"]
            for row in get(address, "/v1/lag")[1]}
    return {where: {"start_offset": state["start_offset"],
                    "leader_epoch": state["leader_epoch"], "lag": lags[where]}
            for where, state in states.items()}


def test_serve_answers_kafkas_own_final_state(broker: KafkaBroker, tmp_path: Path) -> None:
    workload = Workload(broker)
    producer = create_topics(workload)
    produce(producer, range(PER_PARTITION // 2))
    share_groups_start_earliest(workload, SHARE_GROUPS)
    everything = share_consumer(workload, "sg-all", list(TOPICS))
    consume(workload, everything, "sg-all", accept, max_polls=8)
    commit_consumer_group(workload, every=700)
    arguments = ("--source", f"kafka://{broker.bootstrap}", "--checkpoint-dir",
                 str(tmp_path / "checkpoints"), "--checkpoint-seconds", "1")
    service = ServeProcess(*arguments)
    scraper = Scraper(service)
    seen: set[str] = set()
    try:
        assert service.address is not None
        eventually(lambda: get(service.address, "/readyz")[0] == 200, timeout=60)
        scraper.start()
        at_start = applied(service.address)
        # the rest arrives while it serves, in rounds each consumed before the next; after
        # two rounds the service is killed (-9) and started again from its checkpoint
        consume(workload, everything, "sg-all", accept, idle_s=1.5, limit_s=120)
        for index, start in enumerate(range(PER_PARTITION // 2, PER_PARTITION, ROUND)):
            produce(producer, range(start, start + ROUND))
            if index == 2:
                scraper.stop()
                seen |= scraper.seen
                service = restart_after_kill_9(service, arguments,
                                               tmp_path / "checkpoints" / "serve.checkpoint")
                scraper = Scraper(service)
                scraper.start()
            consume(workload, everything, "sg-all", accept, idle_s=1.5, limit_s=60)
        everything.close()
        commit_consumer_group(workload, every=700)
        poison = share_consumer(workload, "sg-poison", list(TOPICS))
        consume(workload, poison, "sg-poison", mixed, limit_s=180)
        poison.close()
        time.sleep(2 * broker.prune_interval_s + 1)
        truth = kafkas_view(workload)
        ends = end_offsets(workload)
        assert sum(ends.values()) == sum(TOPICS.values()) * PER_PARTITION
        assert len(truth) == 2 * sum(TOPICS.values())
        names = {topic_id: name for name, topic_id in workload.topic_ids.items()}
        eventually(lambda: served_view(service.address, names) == truth, timeout=60)
        assert applied(service.address) > at_start > 0
        check_lag_and_metrics(service.address, truth, ends, names)
        check_consumer_group(service.address, workload)
        check_offline_state(service.address, workload, tmp_path)
    finally:
        scraper.stop()
        status = service.stop(signal.SIGTERM)
    assert status == 0, service.stderr[-3000:]
    seen |= scraper.seen
    named = named_metrics()
    assert named - PROMETHEUS_OWN <= seen, sorted(named - PROMETHEUS_OWN - seen)
    assert seen <= named, f"not on the dashboard: {sorted(seen - named)}"


def restart_after_kill_9(service: ServeProcess, arguments: tuple[str, ...],
                         checkpoint: Path) -> ServeProcess:
    """Kill the service once it has written a checkpoint and start it again: it resumes
    every partition from the checkpoint, not from the log start."""
    eventually(checkpoint.exists, timeout=30)
    applied_before = applied(service.address) if service.address else 0
    assert service.stop(signal.SIGKILL) == -signal.SIGKILL
    restarted = ServeProcess(*arguments)
    found = re.search(r"resuming from checkpoint written \S+: (\d+) records applied; "
                      r"(\d+) of (\d+) partitions go on from their position", restarted.stderr)
    assert found, restarted.stderr
    assert 0 < int(found[1]) <= applied_before and found[2] == found[3], found[0]
    return restarted


class Scraper(threading.Thread):
    """Scrapes /metrics as Prometheus would (every half second) while the workload runs:
    `seen` is every series name the service exported meanwhile."""

    def __init__(self, service: ServeProcess) -> None:
        super().__init__(daemon=True)
        assert service.address is not None
        self.address = service.address
        self.seen: set[str] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            self.seen |= {sample.name for family in text_string_to_metric_families(
                get(self.address, "/metrics")[1]) for sample in family.samples}

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


def applied(address: tuple[str, int]) -> float:
    """Internal-topic records the service applied (its /metrics)."""
    return sum(s.value for f in text_string_to_metric_families(get(address, "/metrics")[1])
               if f.name == "sharestate_serve_records_applied" for s in f.samples
               if s.name.endswith("_total"))


def check_lag_and_metrics(address: tuple[str, int],
                          truth: dict[tuple[str, str, int], dict[str, int]],
                          ends: dict[tuple[str, int], int], names: dict[str, str]) -> None:
    lag = get(address, "/v1/lag")[1]
    assert {(row["group_id"], row["topic"], row["partition"]) for row in lag} == set(truth)
    for row in lag:
        assert not row["lag_is_lower_bound"], row
        assert row["end_offset"] == ends[(row["topic"], row["partition"])], row
        assert names[row["topic_id"]] == row["topic"]
    families = {f.name: f for f in text_string_to_metric_families(get(address, "/metrics")[1])}
    for name, field in (("sharestate_share_partition_start_offset", "start_offset"),
                        ("sharestate_share_partition_lag", "lag")):
        samples = {(s.labels["group"], s.labels["topic"], int(s.labels["partition"])): s.value
                   for s in families[name].samples}
        assert samples == {where: state[field] for where, state in truth.items()}, name
    for name in ("in_flight_records", "archived_records", "max_delivery_count", "state_epoch"):
        series = families[f"sharestate_share_partition_{name}"].samples
        assert {(s.labels["group"], s.labels["topic"], int(s.labels["partition"]))
                for s in series} <= set(truth), name
    assert {(s.labels["group"], s.labels["topic"], int(s.labels["partition"]))
            for s in families["sharestate_share_partition_state_epoch"].samples} == set(truth)


def check_consumer_group(address: tuple[str, int], workload: Workload) -> None:
    truth = {(row["GROUP"], row["TOPIC"], int(row["PARTITION"])): int(row["CURRENT-OFFSET"])
             for row in workload.consumer_groups_describe(CONSUMER_GROUP)
             if row["CURRENT-OFFSET"] != "-"}
    assert len(truth) == TOPICS["orders"]
    served = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
              for row in get(address, "/v1/consumer-group-offsets")[1]
              if row["group_id"] == CONSUMER_GROUP and row["state"] == "committed"}
    assert served == truth
    families = text_string_to_metric_families(get(address, "/metrics")[1])
    committed = {(s.labels["group"], s.labels["topic"], int(s.labels["partition"])): s.value
                 for f in families if f.name == "sharestate_consumer_group_committed_offset"
                 for s in f.samples if s.labels["group"] == CONSUMER_GROUP}
    assert committed == truth


def check_offline_state(address: tuple[str, int], workload: Workload, tmp_path: Path) -> None:
    """The same records from the broker's segment files through `sharestate state`. Where
    Kafka pruned a state partition the records below the new log start are deleted (the
    replay of the copy reads from its checkpointed log start), so an offline replay counts
    a key's updates since the last counter reset from a later start than the service,
    which read them before they went (as Kafka's coordinator did): there
    `snapshot_update_count` may differ, and every other field must not."""
    logs = workload.copy_internal_logs(tmp_path / "logs")
    pruned = {partition for partition, start in
              workload.log_start_offsets("__share_group_state").items() if start > 0}
    offline = sharestate_json("state", str(logs))
    served = get(address, "/v1/share-partitions")[1]
    assert [_key(row) for row in served] == [_key(row) for row in offline]
    for mine, theirs in zip(served, offline, strict=True):
        if mine["state_partition"] in pruned:
            mine, theirs = (_without(row, "snapshot_update_count") for row in (mine, theirs))
        assert mine == theirs


def _without(row: dict[str, Any], name: str) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key != name}


def _key(row: dict[str, Any]) -> tuple[str, str, int]:
    return row["group_id"], row["topic_id"], row["partition"]
