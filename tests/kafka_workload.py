"""A real workload on a real broker, driven by real clients only.

confluent-kafka's ShareConsumer (explicit acknowledgement: accept, release, reject) and
Kafka's own console share consumer drive share groups; confluent-kafka producers write the
data topics; consumer groups commit offsets plainly (classic and KIP-848 protocols) and
transactionally (`send_offsets_to_transaction`, committed, aborted and left open). Kafka's
tools reset one share group's offsets and delete a share group and a consumer group; one
consumer group's offsets expire. What the workload did is returned for the tests to check
sharestate against Kafka's own answers.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    Message,
    Producer,
    ShareConsumer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from kafka_broker import KafkaBroker, copy_log_folders

TOPICS = {"orders": 3, "events": 2, "payments": 1}
RECORDS_PER_PARTITION = {"orders": 30, "events": 20, "payments": 20}
SHARE_TOOL = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
CONSUMER_GROUP_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"

Ack = Callable[[Message, int], "AcknowledgeType | None"]


@dataclass
class Workload:
    """What was done, for the checks: groups by kind, topic ids, end offsets, timings."""

    broker: KafkaBroker
    topic_ids: dict[str, str] = field(default_factory=dict)
    end_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    share_groups: list[str] = field(default_factory=list)
    deleted_share_group: str = "sg-deleted"
    reset_share_group: str = "sg-reset"
    reset_to: int = 0
    consumer_groups: list[str] = field(default_factory=list)
    deleted_consumer_group: str = "cg-deleted"
    expiring_group: str = "cg-expire"
    expiring_commit_ms: int = 0
    transactional_group: str = "cg-txn"
    committed_txn_offset: int = 4
    aborted_txn_offset: int = 9
    pending_txn_offset: int = 12
    live_clients: list[Consumer | Producer] = field(default_factory=list)
    deliveries: dict[str, dict[tuple[str, int, int], int]] = field(default_factory=dict)
    stalled_records: int = 0
    _admin: AdminClient | None = None

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def admin(self) -> AdminClient:
        """One admin client for the workload (a dropped client never completes its futures)."""
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def close(self) -> None:
        """Close the clients the workload left running (the open transaction stays open)."""
        for client in self.live_clients:
            if isinstance(client, Consumer):
                client.close()
        self.live_clients.clear()

    def copy_internal_logs(self, target: Path) -> Path:
        """Copy the internal topics' partition folders (and checkpoints) out of log.dirs."""
        target.mkdir(parents=True, exist_ok=True)
        entries = sorted(self.broker.log_dirs.iterdir())
        copy_log_folders([folder for folder in entries if folder.name.startswith(
            ("__share_group_state-", "__consumer_offsets-"))], target)
        for entry in entries:
            if entry.is_file() and entry.name.endswith("checkpoint"):
                shutil.copy2(entry, target / entry.name)
        return target

    def log_start_offsets(self, topic: str) -> dict[int, int]:
        """The broker's log start offset of each partition of `topic` (ListOffsets EARLIEST)."""
        admin = self.admin()
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        request = {TopicPartition(topic, p): OffsetSpec.earliest() for p in partitions}
        return {tp.partition: future.result().offset
                for tp, future in admin.list_offsets(request).items()}

    def share_groups_describe(self, group: str) -> list[dict[str, str]]:
        """`kafka-share-groups --describe --offsets --verbose`: one row per partition."""
        out = self.broker.tool(SHARE_TOOL, "--bootstrap-server", self.bootstrap, "--describe",
                               "--offsets", "--verbose", "--group", group).stdout
        return _table(out)

    def consumer_groups_describe(self, group: str) -> list[dict[str, str]]:
        """`kafka-consumer-groups --describe --offsets --verbose`: one row per partition."""
        done = self.broker.tool(CONSUMER_GROUP_TOOL, "--bootstrap-server", self.bootstrap,
                                "--describe", "--offsets", "--group", group, check=False)
        return _table(done.stdout)


def _table(text: str) -> list[dict[str, str]]:
    """The rows of a table Kafka's group tools print (blank lines and notes skipped)."""
    rows: list[dict[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            header = None
            continue
        if cells[0] == "GROUP":
            header = cells
        elif header and len(cells) == len(header):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


def _wait(futures: Iterable[object]) -> None:
    for future in futures:
        future.result()  # type: ignore[attr-defined]


def create_topics(workload: Workload) -> None:
    admin = workload.admin()
    _wait(admin.create_topics([NewTopic(name, count, 1)
                               for name, count in TOPICS.items()]).values())
    time.sleep(1)
    described = admin.describe_topics(TopicCollection(list(TOPICS)))
    # The client prints ids in standard base64; Kafka's JSON and sharestate use the URL-safe
    # alphabet.
    workload.topic_ids = {name: str(future.result().topic_id).replace("+", "-").replace("/", "_")
                          for name, future in described.items()}


def produce(workload: Workload) -> None:
    producer = Producer({"bootstrap.servers": workload.bootstrap, "linger.ms": 5})
    for topic, partitions in TOPICS.items():
        for partition in range(partitions):
            for index in range(RECORDS_PER_PARTITION[topic]):
                producer.produce(topic, key=f"k{index}", value=f"{topic}-{partition}-{index}",
                                 partition=partition)
    producer.flush(30)
    producer.close()
    for topic, partitions in TOPICS.items():
        for partition in range(partitions):
            workload.end_offsets[(topic, partition)] = RECORDS_PER_PARTITION[topic]


def share_groups_start_earliest(workload: Workload, groups: Iterable[str]) -> None:
    resources = [ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)]) for group in groups]
    _wait(workload.admin().incremental_alter_configs(resources).values())


def share_consumer(workload: Workload, group: str, topics: list[str]) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": workload.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit",
                              "client.id": f"{group}-member"})
    consumer.subscribe(topics)
    return consumer


def consume(workload: Workload, consumer: ShareConsumer, group: str, ack: Ack,
            idle_s: float = 4.0, limit_s: float = 60.0, max_polls: int | None = None) -> int:
    """Poll, acknowledge each record as `ack` says, commit; until idle once records came
    (or `limit_s`). Records seen."""
    seen = workload.deliveries.setdefault(group, {})
    deadline, idle_since, polls, count = time.monotonic() + limit_s, time.monotonic(), 0, 0
    while time.monotonic() < deadline and (not count or time.monotonic() - idle_since < idle_s):
        if max_polls is not None and polls >= max_polls:
            break
        messages = consumer.poll(0.5)
        polls += 1
        records = [message for message in messages if message.error() is None]
        if not records:
            continue
        idle_since = time.monotonic()
        for message in records:
            where = (message.topic(), message.partition(), message.offset())
            seen[where] = seen.get(where, 0) + 1
            count += 1
            consumer.acknowledge(message, ack(message, seen[where]))
        consumer.commit_sync()
    return count


def accept(_message: Message, _delivery: int) -> AcknowledgeType:
    return AcknowledgeType.ACCEPT


def mixed(message: Message, _delivery: int) -> AcknowledgeType:
    """Poison records released until archived; some rejected; some released once."""
    offset = message.offset()
    if offset % 10 == 7:
        return AcknowledgeType.RELEASE
    if offset % 10 == 3:
        return AcknowledgeType.REJECT
    return AcknowledgeType.ACCEPT


def released_once(message: Message, delivery: int) -> AcknowledgeType:
    return AcknowledgeType.RELEASE if delivery == 1 and message.offset() % 4 == 1 \
        else AcknowledgeType.ACCEPT


def share_workload(workload: Workload) -> None:
    groups = ["sg-work", "sg-lock", "sg-console", workload.reset_share_group,
              workload.deleted_share_group]
    workload.share_groups = [group for group in groups if group != workload.deleted_share_group]
    share_groups_start_earliest(workload, groups)
    # Two members on orders+events: one joins late, the first leaves; poison records are
    # released until the delivery limit archives them, some are rejected, some released.
    first = share_consumer(workload, "sg-work", ["orders", "events"])
    consume(workload, first, "sg-work", mixed, max_polls=6)
    second = share_consumer(workload, "sg-work", ["orders", "events"])
    consume(workload, first, "sg-work", released_once, max_polls=4)
    first.close()
    consume(workload, second, "sg-work", mixed)
    second.close()
    # A member that polls and never acknowledges: its locks time out, another takes over.
    stalled = share_consumer(workload, "sg-lock", ["payments"])
    seen = 0
    deadline = time.monotonic() + 20
    while not seen and time.monotonic() < deadline:
        seen = len(stalled.poll(1.0))
    workload.stalled_records = seen
    time.sleep(3 * workload.broker.lock_duration_s)
    taker = share_consumer(workload, "sg-lock", ["payments"])
    consume(workload, taker, "sg-lock", accept)
    taker.close()
    stalled.close()
    # Kafka's console share consumer: releases what it reads, then accepts it on the rerun.
    for flag in ("--release", None):
        args = ["--bootstrap-server", workload.bootstrap, "--topic", "events", "--group",
                "sg-console", "--max-messages", "15", "--timeout-ms", "15000"]
        workload.broker.tool(CONSOLE_SHARE_CONSUMER, *args, *([flag] if flag else []),
                             timeout=90)
    # A group whose offsets are reset while it is empty, and a group deleted.
    for group in (workload.reset_share_group, workload.deleted_share_group):
        member = share_consumer(workload, group, ["payments"])
        consume(workload, member, group, accept)
        member.close()
    time.sleep(2)
    workload.broker.tool(SHARE_TOOL, "--bootstrap-server", workload.bootstrap,
                         "--reset-offsets", "--group", workload.reset_share_group, "--topic",
                         "payments", "--to-earliest", "--execute")
    workload.broker.tool(SHARE_TOOL, "--bootstrap-server", workload.bootstrap, "--delete",
                         "--group", workload.deleted_share_group)


def consumer_group_workload(workload: Workload) -> None:
    bootstrap = workload.bootstrap
    # Simple-group commits that expire (offsets.retention.minutes=1) and a deleted group.
    for group, offset in ((workload.expiring_group, 7), (workload.deleted_consumer_group, 3)):
        simple = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "enable.auto.commit": False})
        simple.commit(offsets=[TopicPartition("payments", 0, offset)], asynchronous=False)
        simple.close()
    workload.expiring_commit_ms = int(time.time() * 1000)
    _wait(workload.admin().delete_consumer_groups([workload.deleted_consumer_group]).values())
    # Subscribed groups committing plainly: classic and KIP-848 protocols.
    for group, protocol, topic in (("cg-classic", "classic", "orders"),
                                   ("cg-848", "consumer", "events")):
        settings = {"bootstrap.servers": bootstrap, "group.id": group,
                    "group.protocol": protocol, "enable.auto.commit": False,
                    "auto.offset.reset": "earliest"}
        if protocol == "classic":
            settings["session.timeout.ms"] = 6000
        settings["max.poll.interval.ms"] = 900000
        consumer = Consumer(settings)
        consumer.subscribe([topic])
        taken = 0
        deadline = time.monotonic() + 30
        while taken < 25 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                taken += 1
                if taken % 10 == 0:
                    consumer.commit(message=message, asynchronous=False)
        consumer.commit(asynchronous=False)
        # The member stays (subscribed groups keep their offsets past the short retention).
        workload.live_clients.append(consumer)
        workload.consumer_groups.append(group)
    # Transactional commits: one COMMIT, one ABORT, one left open.
    group = workload.transactional_group
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    member.subscribe(["payments"])
    deadline = time.monotonic() + 30
    while not member.assignment() and time.monotonic() < deadline:
        member.poll(0.5)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-offsets",
                         "transaction.timeout.ms": 600000})
    producer.init_transactions(30)
    for offset, finish in ((workload.committed_txn_offset, producer.commit_transaction),
                           (workload.aborted_txn_offset, producer.abort_transaction),
                           (workload.pending_txn_offset, None)):
        producer.begin_transaction()
        producer.produce("payments", value=f"txn-{offset}", partition=0)
        producer.send_offsets_to_transaction([TopicPartition("payments", 0, offset)],
                                             member.consumer_group_metadata(), 30)
        if finish is not None:
            finish(30)
    producer.flush(10)
    workload.live_clients += [producer, member]
    workload.consumer_groups.append(group)


def run_workload(broker: KafkaBroker) -> Workload:
    """The whole workload; returns once the share coordinator has pruned what it will."""
    workload = Workload(broker)
    create_topics(workload)
    produce(workload)
    consumer_group_workload(workload)
    share_workload(workload)
    # The produced transactional records moved payments' end; take the broker's word for it.
    admin = workload.admin()
    request = {TopicPartition(topic, p): OffsetSpec.latest()
               for topic, count in TOPICS.items() for p in range(count)}
    for tp, future in admin.list_offsets(request).items():
        workload.end_offsets[(tp.topic, tp.partition)] = future.result().offset
    time.sleep(2 * broker.prune_interval_s + 1)
    return workload


RELEASE_GROUPS = {"sg-a": "orders", "sg-b": "events"}
"""The short workload's share groups, each with the topic a release's console consumer reads."""


def run_release_workload(broker: KafkaBroker) -> Workload:
    """The other releases' short share-group workload (tests/test_kafka_releases.py)."""
    workload = Workload(broker)
    create_topics(workload)
    produce(workload)
    share_groups_start_earliest(workload, RELEASE_GROUPS)
    if not broker.release.librdkafka_shares:
        # The release's own console consumer (librdkafka cannot fetch there), releasing
        # what it reads once, then accepting.
        for group, topic in RELEASE_GROUPS.items():
            every = str(TOPICS[topic] * RECORDS_PER_PARTITION[topic])
            for flag in ("--release", None):
                broker.tool(CONSOLE_SHARE_CONSUMER, "--bootstrap-server", broker.bootstrap,
                            "--topic", topic, "--group", group, "--max-messages", every,
                            "--timeout-ms", "15000", *([flag] if flag else []), timeout=90)
    else:
        for group, ack in zip(RELEASE_GROUPS, (mixed, released_once), strict=True):
            member = share_consumer(workload, group, ["orders", "events"])
            consume(workload, member, group, ack)
            member.close()
        member = share_consumer(workload, "sg-a", ["payments"])
        consume(workload, member, "sg-a", accept)
        member.close()
    time.sleep(2)
    workload.share_groups = list(RELEASE_GROUPS)
    return workload
