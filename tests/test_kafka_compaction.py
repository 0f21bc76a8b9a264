"""A real broker's compacted `__consumer_offsets` under a warehouse: runs over a live
`log.dirs` before and after Kafka's log cleaner merged its segments give Kafka's committed
offsets, as does a fresh warehouse. The cleaner rewrites `...000.log` to hold what later
segments held and deletes those: bronze keeps the deleted segments' rows, and a replay in
segment order put their stale commits after the merged ones (an independent workload saw
10 where Kafka said 20); in offset order they change nothing.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from deltalake import DeltaTable
from kafka_broker import RELEASES, running_broker

from sharestate.spark.run import main as run_all
from sharestate.tables.log_changes import WENT_BACK

pytestmark = pytest.mark.kafka_broker

PARTITION = "__consumer_offsets-0"
GROUP, TOPIC, PARTITIONS = "cg-compacted", "orders", 3
CLEANING = {
    "offsets.topic.num.partitions": "1",
    "offsets.retention.minutes": "1440",
    "log.roll.ms": "1000",
    "log.cleaner.backoff.ms": "300",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.min.compaction.lag.ms": "3600000",
}
"""Small segments that roll every second, not cleaned until `_clean_now` (then as soon as
they are dirty)."""


def _clean_now(admin: AdminClient) -> None:
    """The log cleaner let loose on `__consumer_offsets`: no compaction lag."""
    resource = ConfigResource(ResourceType.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _commit(bootstrap: str, start: int, rounds: int, group: str = GROUP) -> None:
    """`rounds` commits of every partition, a little over a segment's time apart."""
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False})
    try:
        for index in range(rounds):
            member.commit(offsets=[TopicPartition(TOPIC, p, start + 10 * index + p)
                                   for p in range(PARTITIONS)], asynchronous=False)
            time.sleep(1.2)
    finally:
        member.close()


def _kafkas(admin: AdminClient) -> dict[tuple[str, int], int]:
    """The group's committed offsets as Kafka answers them."""
    [future] = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(GROUP)]).values()
    return {(tp.topic, tp.partition): tp.offset for tp in future.result().topic_partitions}


def _ours(warehouse: Path) -> dict[tuple[str, int], int]:
    rows = DeltaTable(str(warehouse / "consumer_group_offsets")).to_pyarrow_table().to_pylist()
    return {(r["topic"], r["partition"]): r["committed_offset"] for r in rows
            if r["is_current"] and r["group_id"] == GROUP}


def _sync(folder: Path, target: Path) -> set[str]:
    """`target` made what `folder` holds now (as a job reading log.dirs finds it): new and
    changed files copied, files Kafka deleted gone. The segments now there."""
    target.mkdir(parents=True, exist_ok=True)
    now = {p.name for p in folder.iterdir() if p.is_file()}
    for name in sorted(now):
        shutil.copy2(folder / name, target / name)
    for stale in target.iterdir():
        if stale.name not in now:
            stale.unlink()
    return {name for name in now if name.endswith(".log")}


def _run(source: Path, warehouse: Path) -> None:
    assert run_all(["--source", str(source), "--warehouse", str(warehouse)]) in (0, 1)


def test_runs_before_and_after_the_cleaner_merges_give_kafkas_offsets(
        spark: Any, tmp_path: Path) -> None:
    with running_broker(RELEASES["4.3"], tmp_path / "kafka", CLEANING) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(30)
        folder = broker.log_dirs / PARTITION
        start, deadline = 0, time.monotonic() + 120
        while len(list(folder.glob("*.log"))) < 4 and time.monotonic() < deadline:
            _commit(broker.bootstrap, start, 3)
            start += 1000
        source, warehouse = tmp_path / "source", tmp_path / "warehouse"
        before = _sync(folder, source / PARTITION)
        assert len(before) >= 4
        _run(source, warehouse)
        assert _ours(warehouse) == _kafkas(admin)
        # the group's last commits, then another group's until the cleaner merged into
        # `...000.log` every segment after it, those holding the last commits too: read
        # after it, the segments the first run read hold older commits of the same keys
        _commit(broker.bootstrap, start, 3)
        last = {p.name for p in folder.glob("*.log")} - {min(before)}
        _clean_now(admin)
        deadline = time.monotonic() + 120
        while last & {p.name for p in folder.glob("*.log")} and time.monotonic() < deadline:
            _commit(broker.bootstrap, 0, 2, group="cg-other")
        assert not last & {p.name for p in folder.glob("*.log")}, \
            "the log cleaner did not merge segments in time"
        _sync(folder, source / PARTITION)
        _run(source, warehouse)
        expected = _kafkas(admin)
        assert _ours(warehouse) == expected
        fresh = tmp_path / "fresh"
        _run(source, fresh)
        assert _ours(fresh) == expected
    # a cleaned segment keeps the records it keeps as they were: no log went back
    notes = DeltaTable(str(warehouse / "ingest_runs")).to_pyarrow_table()["note"].to_pylist()
    assert not [n for n in notes if n and n.startswith(WENT_BACK)]
