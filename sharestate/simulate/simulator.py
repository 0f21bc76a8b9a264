"""A seeded share-group workload that drives `Persister`s and writes real segment files.

The world: `topics` user topics of `partitions` partitions each, `groups` share groups
subscribed to every topic, a few consumer and classic groups committing offsets, and a
simulated clock. Every share-partition has a leader (`SharePartitionLeader`): records are
produced to its topic partition, consumers acquire runs of them under a lock, then accept,
release or reject them; locks time out; the SPSO and the delivery complete count follow, and
every transition is persisted with WriteShareGroupState. Share-partitions are picked with a
skew and groups lose their consumers for minutes at a time, so some share-partitions go cold
and the cold-partition job re-snapshots them.

Rarer events: a partition leader change (each share-partition on it reads with the new
leader epoch and reloads from the persisted state), an offset reset (InitializeShareGroupState
with a newer state epoch), deletion of a group's share-partitions of a topic
(DeleteShareGroupState, re-initialized later), deletion of a topic (metadata image update,
cleanup tombstones, a replacement topic with a new id), requests that must be fenced, and a
coordinator move half-way (the partition leader epoch of the state logs goes to 1).

`__share_group_state` records go through a `ShareStateTopic` (a `Persister` per partition,
partitions chosen with Kafka's hashing). `__consumer_offsets` gets ShareGroupMetadata and
ShareGroupStatePartitionMetadata (initializing -> initialized, deleting during deletions),
ConsumerGroupMetadata, GroupMetadata and plain and transactional offset commits. Options
leave one share-partition's state out of its group's metadata (`orphaned_state`) or one
topic stuck in a group's deleting list (`stuck_deleting`).

Dialect "4.0" has writes only (Kafka 4.0 development): no initialize, delete, topic cleanup
or cold snapshots; the first write creates a share-partition's state, a reset is a write
with the new state epoch, and a new leader epoch reaches the log with the leader's next
write.

The simulated clock advances 0 or 1 ms per step (about 2,000 steps per simulated second).
"""

from __future__ import annotations

import base64
import random
import time
import zlib
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sharestate.coordinator.share_state import ShareKey, StateBatch
from sharestate.persister.log_writer import LogDirs
from sharestate.persister.metadata import MetadataImage
from sharestate.persister.persister import PersisterConfig
from sharestate.persister.record_codec import EmittedRecord
from sharestate.persister.responses import Result
from sharestate.persister.state_topic import ShareStateTopic
from sharestate.persister.writer_rules import writer_rules_for
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.simulate.data_writer import DataTopics
from sharestate.simulate.offsets_writer import Commit, ConsumerOffsetsWriter, TopicPartitions
from sharestate.simulate.share_leader import (
    ACCEPT,
    REJECT,
    RELEASE,
    SharePartitionLeader,
)
from sharestate.simulate.simulation import SimulationConfig, SimulationResult

START_TIME_MS = 1_760_000_000_000
"""The simulated clock's start (ms)."""

_EVENT_RATES = (("commit_offsets", 0.004), ("leader_change", 0.0004), ("offset_reset", 0.0002),
                ("delete_share_partitions", 0.0001), ("reinitialize", 0.0004),
                ("delete_topic", 0.00002), ("fenced_write", 0.0002), ("idle_group", 0.00003))
"""Per-step probabilities of the rarer events; the other steps are share-partition activity."""
_KINDS = (ACCEPT, RELEASE, REJECT)
_ACCEPT_ALL, _RELEASE_ALL, _REJECT_ALL = (((0, kind),) for kind in _KINDS)


def poison_record(rate: float, key: ShareKey, offset: int) -> bool:
    """Whether the record at `offset` of the share-partition's topic-partition is one no
    consumer can process, at `rate` (decided by the record alone: every group fails on it)."""
    mark = zlib.crc32(f"{key.topic_id}:{key.partition}:{offset}".encode())
    return mark < rate * 0x1_0000_0000


def _around(first: int, last: int, poison: list[int]) -> tuple[tuple[int, str], ...]:
    """Acknowledgement pieces for [first, last]: each offset of `poison` (ascending) released
    on its own, the records between accepted (the last piece takes what is left)."""
    pieces: list[tuple[int, str]] = []
    at = first
    for offset in poison:
        if offset > at:
            pieces.append((offset - at, ACCEPT))
        pieces.append((1, RELEASE))
        at = offset + 1
    if at <= last:
        pieces.append((last - at + 1, ACCEPT))
    return tuple(pieces)
_IDLE_MS = (60_000, 900_000)
"""How long an idle group stays without consumers (uniform range)."""
_NEVER = 1 << 62
_TRANSACTIONAL_PRODUCER = 7000
_COORDINATOR_EPOCH = 7


class SimulationError(RuntimeError):
    """The persister answered a request in a way the workload did not expect."""


@dataclass
class _Topic:
    name: str
    topic_id: str
    log_ends: list[int]
    leader_epochs: list[int]


@dataclass
class _ShareGroup:
    group_id: str
    epoch: int = 1
    initializing: dict[str, TopicPartitions] = field(default_factory=dict)
    initialized: dict[str, TopicPartitions] = field(default_factory=dict)
    deleting: dict[str, TopicPartitions] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    """Topics whose state is kept out of the metadata (the orphaned-state option)."""
    idle_until: int | None = None
    """While set, the group has no consumers: its share-partitions see no activity."""


class _Simulation:
    """The simulated world and its driver; see the module docstring."""

    def __init__(self, config: SimulationConfig, root: Path) -> None:
        self.config = config
        self.rules = writer_rules_for(config.dialect)
        self.rng = random.Random(config.seed)
        self.now = START_TIME_MS
        self.next_cold = START_TIME_MS + config.cold_interval_ms
        self.metadata = MetadataImage()
        self.logs = LogDirs(root, compression=config.codec,
                            records_per_batch=config.batch_records, linger_ms=config.linger_ms,
                            segment_bytes=config.segment_bytes)
        self.state = ShareStateTopic(
            self.logs, config.state_partitions, config.dialect,
            config=PersisterConfig(config.snapshot_limit, config.cold_interval_ms),
            metadata=self.metadata, clock=lambda: self.now)
        self.offsets = ConsumerOffsetsWriter(self.logs, config.dialect, config.offsets_partitions)
        self.data = DataTopics(root, config.segment_bytes) if config.data_topics else None
        self.topics: list[_Topic] = []
        self.topic_by_id: dict[str, _Topic] = {}
        self.groups: list[_ShareGroup] = []
        self.consumer_groups: list[str] = []
        self.leaders: dict[ShareKey, SharePartitionLeader] = {}
        self.idle: dict[str, _ShareGroup] = {}
        self.next_wake = _NEVER
        self.active: list[ShareKey] = []
        self.active_index: dict[ShareKey, int] = {}
        self.deleted: list[tuple[_ShareGroup, str]] = []
        self.topic_deletions = 0
        self.stuck = False
        """Whether the one topic left in a deleting list (`stuck_deleting`) exists yet."""
        self.open_transaction = False
        self.producer_epoch = 0
        self.records = 0
        self.operations: Counter[str] = Counter()
        self.events: list[Callable[[], None]] = [getattr(self, name) for name, _ in _EVENT_RATES]
        self.thresholds: list[float] = []
        total = 0.0
        for _, rate in _EVENT_RATES:
            total += rate
            self.thresholds.append(total)

    # -- plumbing -----------------------------------------------------------------------

    def emit(self, partition: int, records: tuple[EmittedRecord, ...]) -> None:
        """Append one operation's records to a state partition's log."""
        self.records += self.state.append(partition, records)

    def expect(self, op: str, result: Result[Any], code: int = 0) -> None:
        """Count the answer; anything but `code` is a simulator bug."""
        self.operations[op if result.error_code == 0 else f"{op}:error{result.error_code}"] += 1
        if result.error_code != code:
            raise SimulationError(f"{op} answered {result.error_code} ({result.error_message}), "
                                  f"expected {code}")

    def activate(self, leader: SharePartitionLeader) -> None:
        """Track a leader; its share-partition is driven unless its group is idle."""
        self.leaders[leader.key] = leader
        if leader.key.group_id not in self.idle:
            self.active_index[leader.key] = len(self.active)
            self.active.append(leader.key)

    def deactivate(self, key: ShareKey) -> None:
        """Forget a share-partition (deleted, or left behind)."""
        self.leaders.pop(key, None)
        self.pause(key)

    def pause(self, key: ShareKey) -> None:
        """Stop driving a share-partition, keeping its leader."""
        index = self.active_index.pop(key, None)
        if index is None:
            return
        last = self.active.pop()
        if last != key:
            self.active[index] = last
            self.active_index[last] = index

    def new_topic_id(self) -> str:
        return base64.urlsafe_b64encode(self.rng.randbytes(16))[:22].decode("ascii")

    def write_group_partitions(self, group: _ShareGroup) -> None:
        """The group's ShareGroupStatePartitionMetadata record (hidden topics left out)."""
        def visible(items: dict[str, TopicPartitions]) -> list[TopicPartitions]:
            return [t for tid, t in items.items() if tid not in group.hidden]
        self.offsets.share_state_partitions(group.group_id, visible(group.initializing),
                                            visible(group.initialized), visible(group.deleting),
                                            self.now)

    # -- setup --------------------------------------------------------------------------

    def setup(self) -> None:
        """Topics, share groups with initialized share-partitions, committing groups."""
        config, rng = self.config, self.rng
        for i in range(config.topics):
            self.add_topic(f"topic-{i}", [rng.randrange(0, 1000)
                                          for _ in range(config.partitions)])
        for i in range(config.groups):
            last = i == config.groups - 1 and i > 0  # a non-ASCII group id when there are two+
            name = f"share-grüppe-✓-{i}" if last else f"share-group-{i}"
            group = _ShareGroup(name)
            self.groups.append(group)
            self.offsets.share_group_metadata(name, group.epoch, rng.getrandbits(63), self.now)
            for t, topic in enumerate(self.topics):
                self.initialize_topic(group, topic,
                                      orphan=config.orphaned_state and i == 0 and t == 0)
        for i in range(max(1, config.groups // 2)):
            self.consumer_groups.append(f"consumer-group-{i}")
            self.offsets.consumer_group_metadata(f"consumer-group-{i}", 1, self.now)
        self.consumer_groups.append("classic-group-0")
        self.offsets.classic_group_metadata("classic-group-0", 1, self.now)

    def add_topic(self, name: str, log_ends: list[int]) -> _Topic:
        topic = _Topic(name, self.new_topic_id(), log_ends, [0] * len(log_ends))
        self.topics.append(topic)
        self.topic_by_id[topic.topic_id] = topic
        self.metadata.add_topic(topic.topic_id, len(log_ends))
        if self.data is not None:  # what the topic holds already, appended just before
            self.data.create(name, topic.topic_id, len(log_ends))
            for p, end in enumerate(log_ends):
                self.data.produce(name, p, 0, end, self.now - 1)
        return topic

    def initialize_topic(self, group: _ShareGroup, topic: _Topic, orphan: bool = False) -> None:
        """Bring a group's share-partitions of a topic to life (initializing -> initialized)."""
        info = TopicPartitions(topic.topic_id, topic.name, tuple(range(len(topic.log_ends))))
        if orphan:
            group.hidden.add(topic.topic_id)
        if self.rules.lifecycle_operations:
            group.initializing[topic.topic_id] = info
            self.write_group_partitions(group)
        for p, log_end in enumerate(topic.log_ends):
            key = ShareKey(group.group_id, topic.topic_id, p)
            leader = SharePartitionLeader(key, topic.leader_epochs[p], group.epoch,
                                          self.config.max_delivery_count)
            if self.rules.lifecycle_operations:
                persister, partition = self.state.route(key)
                start = -1 if self.rng.random() < 0.5 else log_end
                result = persister.initialize(key, group.epoch, start, now=self.now)
                self.expect("initializeState", result)
                self.emit(partition, result.records)
                self.load(leader, log_end)
            else:
                leader.reset(log_end)
            self.activate(leader)
        group.initializing.pop(topic.topic_id, None)
        group.initialized[topic.topic_id] = info
        self.write_group_partitions(group)

    def load(self, leader: SharePartitionLeader, log_end: int) -> None:
        """The leader reads the persisted state (with its leader epoch) and reloads."""
        persister, partition = self.state.route(leader.key)
        result = persister.read(leader.key, leader.leader_epoch, now=self.now)
        self.expect("readState", result)
        self.emit(partition, result.records)
        assert result.data is not None
        start = result.data.start_offset
        leader.load(log_end if start == -1 else start, result.data.batches)

    # -- the workload -------------------------------------------------------------------

    def run(self) -> None:
        config, random, activity = self.config, self.rng.random, self.activity
        target, half = config.records, config.records // 2
        events, thresholds, active = self.events, self.thresholds, self.active
        rare = thresholds[-1]
        while self.records < target:
            now = self.now = self.now + (random() < 0.5)
            if now >= self.next_cold:
                self.cold_snapshots()
            if now >= self.next_wake:
                self.wake_groups()
            if self.state.partition_leader_epoch == 0 and self.records >= half:
                self.state.set_leader_epoch(1)  # the coordinator moved
            r = random()
            if r < rare:
                events[bisect_right(thresholds, r)]()
            elif active:
                u = random()
                activity(active[int(len(active) * u * u * u)])
            elif not self.deleted:
                raise SimulationError("no share-partition is left to drive")
            else:
                self.reinitialize()

    def activity(self, key: ShareKey) -> None:
        """A consumer's poll on a share-partition: locks that timed out are released, the
        acknowledgements of an earlier delivery ride along (persisted in one write), and
        new records are acquired (produced first when the leader has caught up)."""
        random, leader, now = self.rng.random, self.leaders[key], self.now
        deliveries = leader.deliveries
        batches = leader.expire(now) if deliveries and deliveries[0].deadline <= now else []
        if deliveries and (random() < 0.85 or len(deliveries) >= 8):
            batches += self.acknowledge(leader)
        if random() < 0.9:
            log_ends = self.topic_by_id[key.topic_id].log_ends
            if leader.end >= log_ends[key.partition]:
                produced = 1 + int(random() * 49)
                if self.data is not None:
                    self.data.produce(self.topic_by_id[key.topic_id].name, key.partition,
                                      log_ends[key.partition], produced, now)
                log_ends[key.partition] += produced
            leader.acquire(now, 1 + int(random() * 39), log_ends[key.partition],
                           self.config.max_in_flight, self.config.lock_timeout_ms)
        if batches:
            leader.advance()
            self.write(leader, batches)

    def acknowledge(self, leader: SharePartitionLeader) -> list[StateBatch]:
        """A consumer acknowledges one delivery: mostly accepted whole, sometimes split."""
        random = self.rng.random
        index = 0 if random() < 0.8 else int(random() * len(leader.deliveries))
        r = random()
        pieces: tuple[tuple[int, str], ...]
        if r < 0.8:
            pieces = _ACCEPT_ALL
        elif r < 0.87:
            pieces = _RELEASE_ALL
        elif r < 0.92:
            pieces = _REJECT_ALL
        else:
            d = leader.deliveries[index]
            pieces = ((1 + int(random() * (d.last - d.first + 1)), _KINDS[int(random() * 3)]),
                      (0, _KINDS[int(random() * 3)]))
        if self.config.poison_rate:
            d = leader.deliveries[index]
            poison = [o for o in range(d.first, d.last + 1) if self.poison(leader.key, o)]
            if poison:  # the consumer fails on those records: it releases them, accepts the rest
                pieces = _around(d.first, d.last, poison)
        return leader.acknowledge(index, pieces)

    def poison(self, key: ShareKey, offset: int) -> bool:
        return poison_record(self.config.poison_rate, key, offset)

    def write(self, leader: SharePartitionLeader, batches: list[StateBatch],
              leader_epoch: int | None = None, state_epoch: int | None = None,
              expected: int = 0) -> None:
        """WriteShareGroupState from the leader (epochs overridable), answered `expected`."""
        persister, partition = self.state.route(leader.key)
        result = persister.write(
            leader.key, leader.leader_epoch if leader_epoch is None else leader_epoch,
            leader.state_epoch if state_epoch is None else state_epoch, leader.base, batches,
            leader.delivery_complete_count(), now=self.now)
        self.expect("writeState", result, expected)
        self.emit(partition, result.records)

    def cold_snapshots(self) -> None:
        """The coordinator's cold-partition snapshot job, on every state partition."""
        self.next_cold += self.config.cold_interval_ms
        if not self.rules.lifecycle_operations:
            return
        for p, persister in sorted(self.state.persisters.items()):
            result = persister.snapshot_cold_partitions(self.now)
            self.expect("snapshotColdPartitions", result)
            self.emit(p, result.records)

    def initialized_pair(self) -> tuple[_ShareGroup, _Topic] | None:
        """A random group and one of its initialized topics (not a hidden one)."""
        group = self.rng.choice(self.groups)
        candidates = [tid for tid in group.initialized if tid not in group.hidden]
        if not candidates:
            return None
        return group, self.topic_by_id[self.rng.choice(candidates)]

    def leader_change(self) -> None:
        """A user partition gets a new leader: its share-partitions re-read their state."""
        topic = self.rng.choice(self.topics)
        p = self.rng.randrange(len(topic.log_ends))
        topic.leader_epochs[p] += 1
        for group in self.groups:
            leader = self.leaders.get(ShareKey(group.group_id, topic.topic_id, p))
            if leader is None:
                continue
            leader.leader_epoch = topic.leader_epochs[p]
            self.load(leader, topic.log_ends[p])

    def offset_reset(self) -> None:
        """A group resets a topic's share-partitions to a new start (a new state epoch)."""
        pair = self.initialized_pair()
        if pair is None:
            return
        group, topic = pair
        group.epoch += 1
        self.offsets.share_group_metadata(group.group_id, group.epoch, self.rng.getrandbits(63),
                                          self.now)
        for p, log_end in enumerate(topic.log_ends):
            leader = self.leaders[ShareKey(group.group_id, topic.topic_id, p)]
            leader.state_epoch = group.epoch
            start = self.rng.choice((log_end, max(0, log_end - self.rng.randrange(1, 500))))
            if self.rules.lifecycle_operations:
                persister, partition = self.state.route(leader.key)
                result = persister.initialize(leader.key, group.epoch, start, now=self.now)
                self.expect("initializeState", result)
                self.emit(partition, result.records)
                self.load(leader, log_end)
            else:
                leader.reset(start)
                self.write(leader, [])
                self.load(leader, log_end)

    def delete_share_partitions(self) -> None:
        """A group drops its share-partitions of a topic (deleting -> gone), or leaves them
        stuck in the deleting list once when `stuck_deleting` is set."""
        if not self.rules.lifecycle_operations:
            return
        pair = self.initialized_pair()
        if pair is None:
            return
        group, topic = pair
        info = group.initialized.pop(topic.topic_id)
        group.deleting[topic.topic_id] = info
        self.write_group_partitions(group)
        stuck = (self.config.stuck_deleting and not self.stuck
                 and len(self.active) > len(info.partitions))
        self.stuck = self.stuck or stuck
        for p in info.partitions:
            key = ShareKey(group.group_id, topic.topic_id, p)
            self.deactivate(key)
            if not stuck:
                persister, partition = self.state.route(key)
                result = persister.delete(key, now=self.now)
                self.expect("deleteState", result)
                self.emit(partition, result.records)
        if not stuck:
            del group.deleting[topic.topic_id]
            self.write_group_partitions(group)
            self.deleted.append((group, topic.topic_id))

    def reinitialize(self) -> None:
        """Deleted share-partitions come back; a stray write may come first (refused)."""
        if not self.deleted:
            return
        group, topic_id = self.deleted.pop(self.rng.randrange(len(self.deleted)))
        topic = self.topic_by_id[topic_id]
        if self.rng.random() < 0.05:
            stray = SharePartitionLeader(ShareKey(group.group_id, topic_id, 0), 0, group.epoch,
                                         self.config.max_delivery_count)
            stray.reset(topic.log_ends[0])
            self.write(stray, [], expected=42)
        self.initialize_topic(group, topic)

    def delete_topic(self) -> None:
        """A topic is deleted (cleanup tombstones) and created again under a new id."""
        if not self.rules.lifecycle_operations or self.topic_deletions >= self.config.topics:
            return
        kept = {tid for g in self.groups for tid in (*g.deleting, *g.hidden)}
        candidates = [t for t in self.topics if t.topic_id not in kept]
        if not candidates:
            return
        self.topic_deletions += 1
        topic = self.rng.choice(candidates)
        self.topics.remove(topic)
        del self.topic_by_id[topic.topic_id]
        self.metadata.remove_topic(topic.topic_id)
        affected = [g for g in self.groups if topic.topic_id in g.initialized]
        for group in affected:
            group.deleting[topic.topic_id] = group.initialized.pop(topic.topic_id)
            self.write_group_partitions(group)
            for p in range(len(topic.log_ends)):
                self.deactivate(ShareKey(group.group_id, topic.topic_id, p))
        self.deleted = [(g, tid) for g, tid in self.deleted if tid != topic.topic_id]
        for p, persister in sorted(self.state.persisters.items()):
            result = persister.on_topics_deleted([topic.topic_id], now=self.now)
            self.expect("maybeCleanupShareState", result)
            self.emit(p, result.records)
        for group in affected:
            del group.deleting[topic.topic_id]
            self.write_group_partitions(group)
        if self.data is not None:
            self.data.delete(topic.name, len(topic.log_ends))
        replacement = self.add_topic(topic.name, [0] * len(topic.log_ends))
        for group in self.groups:
            self.initialize_topic(group, replacement)

    def idle_group(self) -> None:
        """A group loses its consumers for a while; its share-partitions go cold."""
        awake = [g for g in self.groups if g.idle_until is None]
        if len(awake) < 2:
            return
        group = self.rng.choice(awake)
        group.idle_until = self.now + self.rng.randrange(*_IDLE_MS)
        self.idle[group.group_id] = group
        self.next_wake = min(self.next_wake, group.idle_until)
        for key in [k for k in self.active if k.group_id == group.group_id]:
            self.pause(key)

    def wake_groups(self) -> None:
        """Idle groups whose time is up get their consumers back."""
        for group in [g for g in self.idle.values()
                      if g.idle_until is not None and g.idle_until <= self.now]:
            group.idle_until = None
            del self.idle[group.group_id]
            for leader in [lead for key, lead in self.leaders.items()
                           if key.group_id == group.group_id]:
                self.activate(leader)
        self.next_wake = min((g.idle_until for g in self.idle.values()
                              if g.idle_until is not None), default=_NEVER)

    def fenced_write(self) -> None:
        """A zombie leader writes with an old leader (or state) epoch and is fenced."""
        if not self.active:
            return
        leader = self.leaders[self.rng.choice(self.active)]
        shard = self.state.route(leader.key)[0].shard
        stored_leader, stored_state = shard.leader_epoch(leader.key), shard.state_epoch(leader.key)
        if stored_leader is not None and stored_leader > 0:
            self.write(leader, [], leader_epoch=stored_leader - 1, expected=74)
        elif stored_state is not None and stored_state > 0:
            self.write(leader, [], leader_epoch=stored_leader, state_epoch=stored_state - 1,
                       expected=124)

    def commit_offsets(self) -> None:
        """A consumer group commits offsets, plainly or inside a transaction."""
        rng = self.rng
        topic = rng.choice(self.topics)
        commits = [Commit(topic.name, topic.topic_id, p, max(0, end - rng.randrange(100)))
                   for p, end in enumerate(topic.log_ends)]
        if rng.random() < 0.7:
            self.offsets.commit(rng.choice(self.consumer_groups), commits, self.now)
            return
        group = "txn-group-0"
        if not self.open_transaction:
            self.offsets.commit_transactional(group, _TRANSACTIONAL_PRODUCER, self.producer_epoch,
                                              commits, self.now)
            self.open_transaction = True
            return
        committed = rng.random() < 0.8
        self.offsets.end_transaction(group, _TRANSACTIONAL_PRODUCER, self.producer_epoch,
                                     committed, _COORDINATOR_EPOCH, self.now)
        self.open_transaction = False
        if not committed:
            self.producer_epoch += 1


END_OFFSETS_FILE = "end-offsets.json"
"""Written beside the partition directories: the user topics' end offsets, for the lag."""


def simulate(config: SimulationConfig, out: str | Path) -> SimulationResult:
    """Run the workload and write its segments under `out` (a `log.dirs` root), and the
    user topics' end offsets as `END_OFFSETS_FILE` (the pipeline's `--end-offsets`).

    Raises ValueError for a bad config or when `out` already holds partition directories of
    the two topics.
    """
    config.check()
    root = Path(out)
    if root.is_dir() and any(entry.name.startswith((f"{SHARE_STATE_TOPIC}-",
                                                    f"{CONSUMER_OFFSETS_TOPIC}-"))
                             for entry in root.iterdir()):
        raise ValueError(f"{root} already holds {SHARE_STATE_TOPIC} or "
                         f"{CONSUMER_OFFSETS_TOPIC} partitions")
    started = time.perf_counter()
    sim = _Simulation(config, root)
    sim.setup()
    sim.run()
    sim.logs.close()
    if sim.data is not None:
        sim.data.close()
    seconds = time.perf_counter() - started
    state_logs = [log for (topic, _), log in sim.logs.logs.items() if topic == SHARE_STATE_TOPIC]
    result = SimulationResult(
        config=config, root=root, records=sum(log.records for log in state_logs),
        batches=sum(log.batches for log in state_logs),
        bytes=sum(log.bytes for log in state_logs),
        segments=sum(len(log.segments) for log in state_logs),
        offsets_records=sum(log.records for (topic, _), log in sim.logs.logs.items()
                            if topic != SHARE_STATE_TOPIC),
        seconds=seconds, persisters=dict(sorted(sim.state.persisters.items())),
        expected_offsets=dict(sim.offsets.expected_offsets), operations=sim.operations,
        end_offsets=[{"topic": t.name, "topic_id": t.topic_id, "partition": p,
                      "end_offset": end} for t in sim.topics
                     for p, end in enumerate(t.log_ends)],
        data_ends=sim.data.ends if sim.data is not None else {})
    result.write_end_offsets(root / END_OFFSETS_FILE)
    return result
