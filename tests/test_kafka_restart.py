"""A second real-broker workload, unlike the session's: many partitions, Kafka's admin tools
rewriting share groups' and consumer groups' offsets, topics deleted under groups, and a
broker restart mid-workload (the coordinators reload their logs), then more traffic.

Share groups: one deleted and recreated under the same name, consuming again; one whose
offsets for a topic are deleted (`--delete-offsets`), then consumed again from the earliest;
one reset `--to-latest`, one `--to-datetime`; one releasing and rejecting until records are
archived; one on a topic deleted and recreated under the same name; one on a topic whose
records were deleted below its start. Consumer groups: offsets deleted for one topic
(`kafka-consumer-groups --delete-offsets`), offsets on a deleted topic. After the restart and
more traffic the broker is asked (kafka-share-groups / kafka-consumer-groups --describe,
ListOffsets) and stopped cleanly; sharestate's Spark pipeline then reads its log.dirs (the
lag's end offsets from the data topics' folders there).
"""

from __future__ import annotations

import gc
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec
from conftest import client_threads
from kafka_broker import RELEASES, running_broker
from kafka_judge import SHARESTATE, sharestate_json
from kafka_workload import (
    CONSUMER_GROUP_TOOL,
    SHARE_TOOL,
    Ack,
    Workload,
    _wait,
    accept,
    consume,
    mixed,
    share_consumer,
    share_groups_start_earliest,
)

pytestmark = pytest.mark.kafka_broker

TOPICS = {"wide": 6, "narrow": 2, "trim": 2, "gone": 2}
RECREATED = "sg-recreated"
OFFSETS_DELETED = "sg-offsets-deleted"
TO_LATEST = "sg-to-latest"
TO_DATETIME = "sg-to-datetime"
ARCHIVING = "sg-archiving"
TOPIC_GONE = "sg-topic-gone"
TRIMMED = "sg-trimmed"
SHARE_GROUPS = (RECREATED, OFFSETS_DELETED, TO_LATEST, TO_DATETIME, ARCHIVING, TOPIC_GONE,
                TRIMMED)
CG_OFFSETS_DELETED = "cg-offsets-deleted"
CG_TOPIC_GONE = "cg-topic-gone"
CONSUMER_GROUPS = (CG_OFFSETS_DELETED, CG_TOPIC_GONE)
TRIMMED_TO = {0: 6, 1: 8}


@dataclass
class Answers:
    """Kafka's answers just before the clean stop, and the stopped broker's log.dirs."""

    workload: Workload
    log_dirs: Path
    topic_names: dict[str, str]
    """topic id: name, of every topic ever created (a recreated topic has a new id)."""
    end_offsets: dict[tuple[str, int], int]
    share: dict[tuple[str, str, int], dict[str, int] | None] = field(default_factory=dict)
    consumer: dict[tuple[str, str, int], int] = field(default_factory=dict)
    state_log_start: dict[int, int] = field(default_factory=dict)
    reset_to_datetime: dict[int, int] = field(default_factory=dict)


def _create(workload: Workload, topics: dict[str, int]) -> dict[str, str]:
    """Create the topics; topic id: name."""
    admin = workload.admin()
    _wait(admin.create_topics([NewTopic(name, count, 1)
                               for name, count in topics.items()]).values())
    time.sleep(1)
    described = admin.describe_topics(TopicCollection(list(topics)))
    return {str(future.result().topic_id).replace("+", "-").replace("/", "_"): name
            for name, future in described.items()}


def _produce(workload: Workload, topics: dict[str, int], count: int) -> None:
    producer = Producer({"bootstrap.servers": workload.bootstrap, "linger.ms": 5})
    for topic, partitions in topics.items():
        for partition in range(partitions):
            for index in range(count):
                producer.produce(topic, value=f"{topic}-{partition}-{index}",
                                 partition=partition)
    producer.flush(30)
    producer.close()


def _member(workload: Workload, group: str, topics: list[str], ack: Ack = accept,
            max_polls: int | None = None) -> int:
    """A share consumer's session: consume until idle, acknowledging as `ack` says."""
    member = share_consumer(workload, group, topics)
    try:
        return consume(workload, member, group, ack, idle_s=2.0, max_polls=max_polls)
    finally:
        member.close()


def _commit(workload: Workload, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": workload.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, partition, offset)
                             for (topic, partition), offset in offsets.items()],
                    asynchronous=False)
    consumer.close()


def _share_tool(workload: Workload, *args: str) -> str:
    return workload.broker.tool(SHARE_TOOL, "--bootstrap-server", workload.bootstrap,
                                *args).stdout


def _list_offsets(workload: Workload, topics: dict[str, int], spec: OffsetSpec
                  ) -> dict[tuple[str, int], int]:
    request = {TopicPartition(topic, partition): spec
               for topic, count in topics.items() for partition in range(count)}
    return {(tp.topic, tp.partition): future.result().offset
            for tp, future in workload.admin().list_offsets(request).items()}


def _before_restart(workload: Workload, names: dict[str, str]) -> dict[int, int]:
    """Everything up to the restart; the offsets `--to-datetime` reset wide to."""
    _produce(workload, TOPICS, 10)
    time.sleep(1.5)
    middle_ms = int(time.time() * 1000)
    time.sleep(1.5)
    _produce(workload, TOPICS, 10)
    share_groups_start_earliest(workload, SHARE_GROUPS)
    _member(workload, RECREATED, ["wide", "narrow"])
    _member(workload, OFFSETS_DELETED, ["wide", "narrow"])
    _member(workload, TO_LATEST, ["narrow"], max_polls=2)
    _member(workload, TO_DATETIME, ["wide"])
    _member(workload, ARCHIVING, ["narrow"], mixed)
    _member(workload, TOPIC_GONE, ["gone", "narrow"])
    _member(workload, TRIMMED, ["trim"], max_polls=3)
    _commit(workload, CG_OFFSETS_DELETED, {("wide", p): 5 + p for p in range(6)}
            | {("narrow", 0): 7, ("narrow", 1): 8})
    _commit(workload, CG_TOPIC_GONE, {("gone", 0): 4, ("gone", 1): 5, ("narrow", 0): 6})
    time.sleep(2)
    _share_tool(workload, "--delete", "--group", RECREATED)
    _share_tool(workload, "--delete-offsets", "--group", OFFSETS_DELETED, "--topic", "narrow")
    _share_tool(workload, "--reset-offsets", "--group", TO_LATEST, "--topic", "narrow",
                "--to-latest", "--execute")
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle_ms / 1000))
    _share_tool(workload, "--reset-offsets", "--group", TO_DATETIME, "--topic", "wide",
                "--to-datetime", f"{when}.{middle_ms % 1000:03d}", "--execute")
    workload.broker.tool(CONSUMER_GROUP_TOOL, "--bootstrap-server", workload.bootstrap,
                         "--delete-offsets", "--group", CG_OFFSETS_DELETED, "--topic", "narrow")
    admin = workload.admin()
    _wait(admin.delete_topics(["gone"]).values())
    time.sleep(3)
    names |= _create(workload, {"gone": 2})
    _produce(workload, {"gone": 2}, 3)
    _wait(admin.delete_records([TopicPartition("trim", partition, offset)
                                for partition, offset in TRIMMED_TO.items()]).values())
    share_groups_start_earliest(workload, [RECREATED])
    _member(workload, RECREATED, ["narrow"], max_polls=3)
    return {partition: offset for (_, partition), offset in _list_offsets(
        workload, {"wide": TOPICS["wide"]}, OffsetSpec.for_timestamp(middle_ms)).items()}


def _after_restart(workload: Workload) -> None:
    _produce(workload, {name: TOPICS[name] for name in ("wide", "narrow", "trim")}, 5)
    _member(workload, OFFSETS_DELETED, ["wide", "narrow"])
    _member(workload, TO_LATEST, ["narrow"])
    _member(workload, RECREATED, ["wide", "narrow"], max_polls=4)
    _member(workload, ARCHIVING, ["narrow", "wide"], mixed)
    _member(workload, TRIMMED, ["trim"])


def _ask_kafka(answers: Answers) -> None:
    workload = answers.workload
    for group in SHARE_GROUPS:
        for row in workload.share_groups_describe(group):
            answers.share[(group, row["TOPIC"], int(row["PARTITION"]))] = (
                None if row["START-OFFSET"] == "-" else {
                    "start_offset": int(row["START-OFFSET"]),
                    "leader_epoch": int(row["LEADER-EPOCH"]), "lag": int(row["LAG"])})
    for group in CONSUMER_GROUPS:
        for row in workload.consumer_groups_describe(group):
            if row["CURRENT-OFFSET"] != "-":
                answers.consumer[(group, row["TOPIC"], int(row["PARTITION"]))] = int(
                    row["CURRENT-OFFSET"])
    answers.state_log_start = workload.log_start_offsets("__share_group_state")


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Answers]:
    """The workload run on its own broker, Kafka's answers, then the broker stopped."""
    root = tmp_path_factory.mktemp("restart")
    threads = client_threads()
    overrides = {"offsets.retention.minutes": "60",
                 "share.coordinator.snapshot.update.records.per.snapshot": "2"}
    with running_broker(RELEASES["4.3"], root / "broker", overrides) as broker:
        workload = Workload(broker)
        try:
            names = _create(workload, TOPICS)
            datetime_offsets = _before_restart(workload, names)
            workload._admin = None
            broker.stop()
            broker.launch()
            _after_restart(workload)
            time.sleep(2 * broker.prune_interval_s + 1)
            ends = _list_offsets(workload, TOPICS, OffsetSpec.latest())
            found = Answers(workload, broker.log_dirs, names, ends,
                            reset_to_datetime=datetime_offsets)
            _ask_kafka(found)
        finally:
            workload.close()
            workload._admin = None
            gc.collect()
    assert client_threads() <= threads, "the workload left Kafka clients running"
    yield found


def _pipeline(answers: Answers, warehouse: Path) -> dict[str, list[dict[str, Any]]]:
    from deltalake import DeltaTable

    done = subprocess.run([SHARESTATE, "run", "--warehouse", str(warehouse), "--conf",
                           "spark.ui.enabled=false", "--source", str(answers.log_dirs)],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return {name: DeltaTable(str(warehouse / name)).to_pyarrow_table().to_pylist()
            for name in ("share_group_lag", "consumer_group_offsets",
                         "prune_recommendations")}


def test_workload_reached_what_it_meant_to(answers: Answers) -> None:
    """Kafka's own view of the workload's steps (what the comparisons below rest on)."""
    share = answers.share
    assert {topic for group, topic, _ in share if group == RECREATED} == {"wide", "narrow"}
    assert set(answers.reset_to_datetime.values()) == {10}, "the second batch's first offset"
    assert all(share[(TO_DATETIME, "wide", p)] == {
        "start_offset": offset, "leader_epoch": 0, "lag": answers.end_offsets[("wide", p)]
        - offset} for p, offset in answers.reset_to_datetime.items())
    assert not any(topic == "gone" and truth for (_, topic, _), truth in share.items())
    assert (CG_OFFSETS_DELETED, "narrow", 0) not in answers.consumer
    assert (CG_TOPIC_GONE, "gone", 0) not in answers.consumer
    assert answers.consumer[(CG_TOPIC_GONE, "narrow", 0)] == 6
    for partition, start in TRIMMED_TO.items():
        assert answers.end_offsets[("trim", partition)] > start


def test_tables_of_the_stopped_brokers_log_dirs_agree_with_kafka(answers: Answers,
                                                                 tmp_path: Path) -> None:
    tables = _pipeline(answers, tmp_path / "warehouse")
    names = answers.topic_names
    lag = {(row["group_id"], names[row["topic_id"]], row["partition"]): row
           for row in tables["share_group_lag"]}
    compared = 0
    for where, truth in answers.share.items():
        if truth is None:
            assert where not in lag or lag[where]["start_offset"] == -1, where
            continue
        row = lag[where]
        # No end offsets given: the data topics' log end offsets in log.dirs, Kafka's own.
        assert (row["end_offset_source"], row["end_offset"]) == (
            "segments", answers.end_offsets[where[1:]]), row
        assert (row["start_offset"], row["lag"]) == (truth["start_offset"], truth["lag"]), (
            where, row)
        compared += 1
    assert compared >= 25
    assert set(lag) <= set(answers.share), "sharestate holds state Kafka does not describe"
    current = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
               for row in tables["consumer_group_offsets"] if row["is_current"]}
    assert current == answers.consumer
    prune = {row["state_partition"]: row["prune_offset"] for row in tables["prune_recommendations"]
             if row["prune_offset"] is not None}
    assert {p: prune.get(p, 0) for p in answers.state_log_start} == answers.state_log_start


def test_cli_state_and_offsets_of_the_log_dirs_agree_with_kafka(answers: Answers) -> None:
    names = answers.topic_names
    ours = {(row["group_id"], names[row["topic_id"]], row["partition"]): row
            for row in sharestate_json("state", str(answers.log_dirs))}
    for where, truth in answers.share.items():
        mine = ours.get(where)
        if truth is None:
            assert mine is None or mine["start_offset"] == -1, where
            continue
        assert mine is not None, where
        end = answers.end_offsets[where[1:]]
        assert {"start_offset": mine["start_offset"], "leader_epoch": mine["leader_epoch"],
                "lag": end - mine["start_offset"] - mine["delivery_complete_count"]
                } == truth, where
    assert set(ours) <= set(answers.share)
    committed = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
                 for row in sharestate_json("offsets", str(answers.log_dirs))
                 if row["group_id"] in CONSUMER_GROUPS}
    assert committed == answers.consumer
