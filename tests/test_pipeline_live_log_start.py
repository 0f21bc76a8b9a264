"""Incremental runs over a live cluster whose share coordinator pruned between them.

A real Kafka 4.3.1 broker of its own (one `__share_group_state` partition, a prune run every
second) and three runs into one warehouse, each after the coordinator moved the log start
(deleteRecords):
- past all the first run applied, and past a deleted group's tombstones: the second run
  went on from its state and kept the deleted group's state (Kafka holds none); a
  coordinator loading the log starts from the log start, and so does the replay now;
- to within what the second run read, once the group holding the prune point back is
  deleted: the third run read the chunk again from the new start, losing bronze's rows below
  it, so the replay could not tell what the start forgot: `prune_recommendations` counted 4
  reclaimable records where a run from scratch counts none; the chunk now keeps them.
After the third run the state tables are those of a run from scratch over the cluster, and
Kafka's own answers (`kafka-share-groups --describe --offsets`): no state for the deleted
groups, the kept group's start offsets and lag.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from deltalake import DeltaTable
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_workload import (
    SHARE_TOOL,
    Ack,
    Workload,
    accept,
    consume,
    mixed,
    share_consumer,
    share_groups_start_earliest,
)

from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.kafka_broker

TOPIC, PARTITIONS = "orders", 2
KEPT, GONE, HOLDING = "sg-kept", "sg-gone", "sg-holding"
SETTINGS = {"share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.prune.interval.ms": "1000"}
"""Every share-partition's state in one partition, pruned every second."""
VOLATILE = {"snapshot_update_count", "as_of_timestamp"}
"""State columns that depend on where a replay began (the updates counted since the
snapshot a reloaded coordinator starts from; the time of the last record applied)."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with running_broker(RELEASES["4.3"], tmp_path_factory.mktemp("kafka-log-start"),
                        SETTINGS) as running:
        yield running


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for index in range(count):
            producer.produce(TOPIC, value=f"{partition}-{index}".encode(), partition=partition)
    assert producer.flush(30) == 0
    producer.close()


def _state_log(workload: Workload) -> tuple[int, int]:
    """(log start, end) of `__share_group_state-0`, as ListOffsets answers."""
    admin = workload.admin()
    where = TopicPartition(SHARE_STATE_TOPIC, 0)
    start, end = (future.result().offset for future in (
        admin.list_offsets({where: spec})[where] for spec in (OffsetSpec.earliest(),
                                                               OffsetSpec.latest())))
    return start, end


def _run(bootstrap: str, warehouse: Path) -> None:
    assert run_all(["--source", f"kafka://{bootstrap}", "--warehouse", str(warehouse),
                    "--conf", "spark.ui.enabled=false"]) in (0, 1)


def _rows(warehouse: Path, name: str, drop: set[str]) -> list[dict[str, Any]]:
    rows = DeltaTable(str(warehouse / name)).to_pyarrow_table().to_pylist()
    return sorted(({k: v for k, v in row.items() if k not in drop} for row in rows), key=repr)


def _applied(warehouse: Path) -> int:
    """The last offset of `__share_group_state-0` the warehouse's replay state applied."""
    (row,) = [row for row in _rows(warehouse, "replay_state", set())
              if row["topic"] == SHARE_STATE_TOPIC]
    offset: int = row["last_applied_offset"]
    return offset


def _delete(workload: Workload, group: str) -> int:
    """Delete a share group whose member left; the state log's end after its tombstones."""
    before, deadline = _state_log(workload)[1], time.monotonic() + 30
    while _state_log(workload)[1] == before and time.monotonic() < deadline:
        time.sleep(0.5)  # until its member is gone, Kafka refuses to delete the group
        workload.broker.tool(SHARE_TOOL, "--bootstrap-server", workload.bootstrap, "--delete",
                             "--group", group, check=False)
    end = _state_log(workload)[1]
    assert end > before, f"no tombstones for {group}"
    return end


def _consume_all(workload: Workload, group: str, ack: Ack) -> None:
    member = share_consumer(workload, group, [TOPIC])
    consume(workload, member, group, ack, idle_s=1)
    member.close()


def test_runs_across_prunes_give_kafkas_state(spark: Any, broker: KafkaBroker,
                                              tmp_path: Path) -> None:
    workload = Workload(broker)
    admin = workload.admin()
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(30)
    time.sleep(1)
    (described,) = admin.describe_topics(TopicCollection([TOPIC])).values()
    topic_id = str(described.result().topic_id).replace("+", "-").replace("/", "_")
    _produce(broker.bootstrap, 20)
    share_groups_start_earliest(workload, (KEPT, GONE, HOLDING))
    _consume_all(workload, KEPT, mixed)
    _consume_all(workload, GONE, accept)
    warehouse = tmp_path / "warehouse"
    _run(broker.bootstrap, warehouse)
    # GONE is deleted; HOLDING's first snapshots come after its tombstones; the kept group
    # acknowledges in rounds until its new snapshots and HOLDING's take the prune point, and
    # the log start, past the tombstones and all the first run applied
    gone_at = _delete(workload, GONE)
    _consume_all(workload, HOLDING, accept)
    member = share_consumer(workload, KEPT, [TOPIC])
    deadline = time.monotonic() + 60
    while _state_log(workload)[0] < gone_at and time.monotonic() < deadline:
        _produce(broker.bootstrap, 3)
        consume(workload, member, KEPT, accept, idle_s=0.5, limit_s=10)
        time.sleep(0.5)
    member.close()
    first = _applied(warehouse)
    start, _ = _state_log(workload)
    assert start > first + 1 and start >= gone_at, (first, gone_at, start)
    _run(broker.bootstrap, warehouse)
    # HOLDING deleted: the prune point moves to the kept group's latest snapshots, which
    # the second run applied: the log start moves within what it read
    second = _applied(warehouse)
    _delete(workload, HOLDING)
    deadline = time.monotonic() + 30
    while _state_log(workload)[0] == start and time.monotonic() < deadline:
        time.sleep(0.5)
    moved, _ = _state_log(workload)
    assert start < moved <= second, (start, moved, second)
    _run(broker.bootstrap, warehouse)
    fresh = tmp_path / "fresh"
    _run(broker.bootstrap, fresh)
    # Kafka's answer: no state for the deleted groups, the kept one's start offsets and lag
    kafkas = {(row["TOPIC"], int(row["PARTITION"])): (int(row["START-OFFSET"]), int(row["LAG"]))
              for row in workload.share_groups_describe(KEPT)}
    assert len(kafkas) == PARTITIONS
    for name in (warehouse, fresh):
        lag = _rows(name, "share_group_lag", set())
        assert {(row["group_id"], row["topic_id"]) for row in lag} == {(KEPT, topic_id)}, name
        assert {(TOPIC, row["partition"]): (row["start_offset"], row["lag"])
                for row in lag} == kafkas, name
    # what Kafka deleted after a run read it stays in bronze
    bronze = [row["offset"] for row in _rows(warehouse, "log_records", set())
              if row["topic"] == SHARE_STATE_TOPIC]
    assert min(bronze) == 0 < moved
    for table in ("share_partition_state", "share_group_lag", "prune_recommendations"):
        assert _rows(warehouse, table, VOLATILE) == _rows(fresh, table, VOLATILE), table
