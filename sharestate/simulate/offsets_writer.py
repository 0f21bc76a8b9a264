"""`__consumer_offsets` records for the simulator: group metadata and offset commits.

Records are built by field name (`struct_tuple`), so the same calls write either dialect;
fields a dialect lacks (4.0: no MetadataHash, no InitializingTopics) are left out. Each group
lives on partition `Utils.abs(groupId.hashCode()) % partitions`. Offset commits are plain or
transactional (a transactional batch under a producer id and epoch, later closed by a COMMIT
or ABORT marker). `expected_offsets` is what a loader must end with: plain commits apply at
once; transactional ones apply on COMMIT when their record lies after the stored one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sharestate.log import RawRecord
from sharestate.persister.java_hash import offsets_partition
from sharestate.persister.log_writer import LogDirs, PartitionLog
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, dialect
from sharestate.records.keyvalue import encode_key_value
from sharestate.records.spec import StructLayout

OffsetKey = tuple[str, str, int]
"""(group, topic name, partition)."""


class TopicPartitions(NamedTuple):
    """A topic in a share group's state-partition metadata."""

    topic_id: str
    topic_name: str
    partitions: tuple[int, ...]


class Commit(NamedTuple):
    """One partition's committed offset."""

    topic: str
    topic_id: str
    partition: int
    offset: int


def struct_tuple(layout: StructLayout, fields: Mapping[str, Any]) -> tuple[Any, ...]:
    """A decoded-struct tuple of `layout` from snake_case fields (lists of mappings fill
    arrays of structs); fields the layout lacks are ignored, missing ones take defaults."""
    values = [*layout.defaults, None]
    for name, value in fields.items():
        if name not in layout.names:
            continue
        index = layout.index(name)
        slot = layout.slots[index]
        element = slot.element if slot is not None else None
        if element is not None and element.struct is not None:
            value = tuple(struct_tuple(element.struct, item) for item in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[index] = value
    return tuple(values)


class ConsumerOffsetsWriter:
    """Writes group-coordinator records of one dialect into `__consumer_offsets` logs."""

    def __init__(self, logs: LogDirs, dialect_name: str, partitions: int) -> None:
        self.logs = logs
        self.dialect = dialect(dialect_name)
        self.partitions = partitions
        self._kinds = {k.name: k for k in self.dialect.topics[CONSUMER_OFFSETS_TOPIC].values()}
        self.commit_version = 4 if dialect_name != "4.0" else 3
        """OffsetCommitValue version written (Kafka 4.1+ writes v4, 4.0 wrote v3)."""
        self.expected_offsets: dict[OffsetKey, int] = {}
        self._record_offsets: dict[OffsetKey, int] = {}
        self._pending: dict[int, list[tuple[OffsetKey, int, int]]] = {}

    def share_group_metadata(self, group_id: str, epoch: int, metadata_hash: int,
                             now: int) -> None:
        """A ShareGroupMetadata record."""
        self._append(group_id, [self._record("ShareGroupMetadata", {"group_id": group_id}, {
            "epoch": epoch, "metadata_hash": metadata_hash})], now)

    def share_state_partitions(self, group_id: str, initializing: Sequence[TopicPartitions],
                               initialized: Sequence[TopicPartitions],
                               deleting: Sequence[TopicPartitions], now: int) -> None:
        """A ShareGroupStatePartitionMetadata record (the group's three topic lists)."""
        def topics(items: Sequence[TopicPartitions]) -> list[dict[str, Any]]:
            return [t._asdict() for t in items]
        self._append(group_id, [self._record("ShareGroupStatePartitionMetadata",
                                             {"group_id": group_id}, {
            "initializing_topics": topics(initializing),
            "initialized_topics": topics(initialized),
            "deleting_topics": topics(deleting)})], now)

    def consumer_group_metadata(self, group_id: str, epoch: int, now: int) -> None:
        """A ConsumerGroupMetadata record (a KIP-848 consumer group)."""
        self._append(group_id, [self._record("ConsumerGroupMetadata", {"group_id": group_id},
                                             {"epoch": epoch})], now)

    def classic_group_metadata(self, group_id: str, generation: int, now: int) -> None:
        """A GroupMetadata record (v3) of an empty classic consumer group."""
        self._append(group_id, [self._record("GroupMetadata", {"group": group_id}, {
            "protocol_type": "consumer", "generation": generation, "protocol": "range",
            "leader": None, "current_state_timestamp": now, "members": []}, version=3)], now)

    def commit(self, group_id: str, commits: Sequence[Commit], now: int) -> None:
        """Plain offset commits (one batch)."""
        log = self._log(group_id)
        start = log.next_offset
        self._append(group_id, self._commit_records(group_id, commits, now), now)
        for i, c in enumerate(commits):
            key = (group_id, c.topic, c.partition)
            self.expected_offsets[key] = c.offset
            self._record_offsets[key] = start + i

    def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                             commits: Sequence[Commit], now: int) -> None:
        """Offset commits inside an open transaction of `producer_id` (one batch)."""
        log = self._log(group_id)
        start = log.next_offset
        entries = self._commit_records(group_id, commits, now)
        log.append_transactional([RawRecord(start + i, now, -1, k, v, ())
                                  for i, (k, v) in enumerate(entries)],
                                 producer_id=producer_id, producer_epoch=producer_epoch)
        self._pending.setdefault(producer_id, []).extend(
            ((group_id, c.topic, c.partition), c.offset, start + i) for i, c in enumerate(commits))

    def end_transaction(self, group_id: str, producer_id: int, producer_epoch: int,
                        committed: bool, coordinator_epoch: int, now: int) -> None:
        """The COMMIT (`committed`) or ABORT marker closing `producer_id`'s transaction."""
        self._log(group_id).append_marker("COMMIT" if committed else "ABORT", timestamp=now,
                                          producer_id=producer_id,
                                          producer_epoch=producer_epoch,
                                          coordinator_epoch=coordinator_epoch)
        for key, offset, record_offset in self._pending.pop(producer_id, []):
            if committed and record_offset > self._record_offsets.get(key, -1):
                self.expected_offsets[key] = offset
                self._record_offsets[key] = record_offset

    def _commit_records(self, group_id: str, commits: Sequence[Commit],
                        now: int) -> list[tuple[bytes, bytes | None]]:
        return [self._record("OffsetCommit",
                             {"group": group_id, "topic": c.topic, "partition": c.partition},
                             {"offset": c.offset, "commit_timestamp": now,
                              "topic_id": c.topic_id}, version=self.commit_version)
                for c in commits]

    def _record(self, name: str, key: Mapping[str, Any], value: Mapping[str, Any],
                version: int = 0) -> tuple[bytes, bytes | None]:
        kind = self._kinds[name]
        layout = kind.value_layout(version)
        if layout is None:
            raise ValueError(f"{name} has no value version {version} in {self.dialect.name}")
        return encode_key_value(kind, struct_tuple(kind.key_layout(), key), version,
                                struct_tuple(layout, value))

    def _log(self, group_id: str) -> PartitionLog:
        return self.logs.log(CONSUMER_OFFSETS_TOPIC, offsets_partition(group_id,
                                                                       self.partitions))

    def _append(self, group_id: str, entries: list[tuple[bytes, bytes | None]],
                now: int) -> None:
        log = self._log(group_id)
        start = log.next_offset
        log.append([RawRecord(start + i, now, -1, k, v, ()) for i, (k, v) in enumerate(entries)])
