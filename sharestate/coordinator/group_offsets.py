"""Committed offsets of `__consumer_offsets`, with Kafka's transactional replay rules.

Facts replayed here (Kafka's `OffsetMetadataManager` and `CoordinatorLoaderImpl`):
- a non-transactional commit (producer id -1) replaces the committed offset at once;
- a transactional commit waits, per producer id, for that producer's end marker;
- COMMIT installs each pending offset only when no committed offset exists or the pending
  one was written later in the log (higher record offset); ABORT drops them; a marker for a
  producer with nothing pending is ignored;
- a tombstone removes the committed offset and every producer's pending offset for that
  partition.
LegacyOffsetCommit (record type 0 since Kafka 4.1) replays as an ordinary offset commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sharestate.coordinator.record_fields import optional_int, optional_uuid
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, Dialect
from sharestate.records.spec import StructLayout

NO_PRODUCER_ID = -1
OFFSET_COMMIT_KINDS = frozenset({"OffsetCommit", "LegacyOffsetCommit"})

OffsetKey = tuple[str, str, int]
"""(group, topic, partition)."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One offset commit as the coordinator keeps it.

    `leader_epoch`, `expire_timestamp` and `topic_id` are None when the record leaves them
    unset; `producer_id` is None for a non-transactional commit.
    """

    committed_offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None
    record_offset: int
    topic_id: str | None
    producer_id: int | None


class OffsetEventType(StrEnum):
    """What happened to an offset commit."""

    APPLIED = "applied"
    """A non-transactional commit became the committed offset."""
    PENDING = "pending"
    """A transactional commit now waits for its producer's marker."""
    COMMITTED = "committed"
    """A COMMIT marker installed a pending commit."""
    STALE = "stale"
    """A COMMIT marker skipped a pending commit: a later-written commit was already installed."""
    ABORTED = "aborted"
    """An ABORT marker dropped a pending commit."""
    DELETED = "deleted"
    """A tombstone removed the committed offset."""
    PENDING_DELETED = "pending_deleted"
    """A tombstone dropped a pending transactional commit."""


@dataclass(frozen=True, slots=True)
class OffsetEvent:
    """One change, at log offset `offset` (the data record or the marker that caused it)."""

    type: OffsetEventType
    offset: int
    group: str
    topic: str
    partition: int
    commit: CommittedOffset


OffsetListener = Callable[[OffsetEvent], None]


class _CommitSlots:
    """Where each commit field sits in one value layout (None: the schema lacks it)."""

    __slots__ = ("commit_timestamp", "expire_timestamp", "layout", "leader_epoch", "metadata",
                 "offset", "topic_id")

    def __init__(self, layout: StructLayout) -> None:
        names = layout.names

        def find(name: str) -> int | None:
            return names.index(name) if name in names else None

        self.layout = layout
        self.offset = names.index("offset")
        self.metadata = names.index("metadata")
        self.commit_timestamp = names.index("commit_timestamp")
        self.leader_epoch = find("leader_epoch")
        self.expire_timestamp = find("expire_timestamp")
        self.topic_id = find("topic_id")

    def commit(self, value: tuple[Any, ...], record_offset: int,
               producer_id: int | None) -> CommittedOffset:
        return CommittedOffset(
            committed_offset=value[self.offset],
            leader_epoch=None if self.leader_epoch is None
            else optional_int(value[self.leader_epoch]),
            metadata=value[self.metadata],
            commit_timestamp=value[self.commit_timestamp],
            expire_timestamp=None if self.expire_timestamp is None
            else optional_int(value[self.expire_timestamp]),
            record_offset=record_offset,
            topic_id=None if self.topic_id is None else optional_uuid(value[self.topic_id]),
            producer_id=producer_id,
        )


class GroupOffsets:
    """Committed and pending transactional offsets of one `__consumer_offsets` partition."""

    def __init__(self, dialect: Dialect, listener: OffsetListener | None = None) -> None:
        self._dialect = dialect
        self._listener = listener
        self._committed: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self._pending: dict[int, dict[OffsetKey, CommittedOffset]] = {}
        self._open: dict[OffsetKey, set[int]] = {}
        self._slots: dict[int, _CommitSlots] = {}

    def load(self, committed: Iterable[tuple[OffsetKey, CommittedOffset]],
             pending: Mapping[int, Mapping[OffsetKey, CommittedOffset]]) -> None:
        """Hold what `committed()` and `pending()` of another instance gave (this one holding
        nothing yet): it replays on exactly as that one would."""
        for (group, topic, partition), commit in committed:
            self._committed.setdefault(group, {})[(topic, partition)] = commit
        for producer_id, commits in pending.items():
            self._pending[producer_id] = dict(commits)
            for okey in commits:
                self._open.setdefault(okey, set()).add(producer_id)

    # -- replay -----------------------------------------------------------------------------

    def replay(self, offset: int, producer_id: int, type_id: int, key: tuple[Any, ...],
               value: tuple[Any, ...] | None, value_version: int | None) -> None:
        """Apply an OffsetCommit / LegacyOffsetCommit record (value None = tombstone)."""
        kind = self._dialect.kind(CONSUMER_OFFSETS_TOPIC, type_id)
        if kind is None or kind.name not in OFFSET_COMMIT_KINDS:
            raise ValueError(f"record type {type_id} is not an offset commit in dialect "
                             f"{self._dialect.name}")
        okey: OffsetKey = (key[0], key[1], key[2])
        if value is None:
            self._delete(offset, okey)
            return
        layout = kind.value_layout(value_version) if value_version is not None else None
        if layout is None:
            raise ValueError(f"{kind.value.name} has no version {value_version}")
        slots = self._slots.get(id(layout))
        if slots is None or slots.layout is not layout:
            slots = self._slots[id(layout)] = _CommitSlots(layout)
        if producer_id == NO_PRODUCER_ID:
            commit = slots.commit(value, offset, None)
            self._committed.setdefault(okey[0], {})[(okey[1], okey[2])] = commit
            self._emit(OffsetEventType.APPLIED, offset, okey, commit)
        else:
            commit = slots.commit(value, offset, producer_id)
            self._pending.setdefault(producer_id, {})[okey] = commit
            self._open.setdefault(okey, set()).add(producer_id)
            self._emit(OffsetEventType.PENDING, offset, okey, commit)

    def end_transaction(self, producer_id: int, committed: bool, offset: int) -> bool:
        """Apply a COMMIT (`committed`) or ABORT marker; False when nothing was pending."""
        pending = self._pending.pop(producer_id, None)
        if pending is None:
            return False
        for okey in pending:
            producers = self._open.get(okey)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open[okey]
        for okey, commit in pending.items():
            if not committed:
                self._emit(OffsetEventType.ABORTED, offset, okey, commit)
                continue
            group, topic, partition = okey
            existing = self.get(group, topic, partition)
            if existing is None or commit.record_offset > existing.record_offset:
                self._committed.setdefault(group, {})[(topic, partition)] = commit
                self._emit(OffsetEventType.COMMITTED, offset, okey, commit)
            else:
                self._emit(OffsetEventType.STALE, offset, okey, commit)
        return True

    def _delete(self, offset: int, okey: OffsetKey) -> None:
        group, topic, partition = okey
        by_partition = self._committed.get(group)
        if by_partition is not None:
            removed = by_partition.pop((topic, partition), None)
            if not by_partition:
                del self._committed[group]
            if removed is not None:
                self._emit(OffsetEventType.DELETED, offset, okey, removed)
        for producer_id in sorted(self._open.pop(okey, ())):
            pending = self._pending.get(producer_id)
            dropped = pending.pop(okey, None) if pending is not None else None
            if dropped is not None:
                self._emit(OffsetEventType.PENDING_DELETED, offset, okey, dropped)

    def _emit(self, type_: OffsetEventType, offset: int, okey: OffsetKey,
              commit: CommittedOffset) -> None:
        if self._listener is not None:
            self._listener(OffsetEvent(type_, offset, okey[0], okey[1], okey[2], commit))

    # -- queries ----------------------------------------------------------------------------

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of one partition, if any."""
        by_partition = self._committed.get(group)
        return by_partition.get((topic, partition)) if by_partition is not None else None

    def committed(self) -> Iterator[tuple[OffsetKey, CommittedOffset]]:
        """Every committed offset, grouped by group."""
        for group, by_partition in self._committed.items():
            for (topic, partition), commit in by_partition.items():
                yield (group, topic, partition), commit

    def group_offsets(self, group: str) -> Mapping[tuple[str, int], CommittedOffset]:
        """The committed offsets of one group, by (topic, partition)."""
        return self._committed.get(group, {})

    def pending(self) -> dict[int, dict[OffsetKey, CommittedOffset]]:
        """Open transactional commits by producer id (a copy).

        A producer stays listed until its marker, even when tombstones dropped all its
        offsets: its transaction is still open (Kafka keeps the producer's entry too).
        """
        return {pid: dict(commits) for pid, commits in self._pending.items()}

    def pending_producer_ids(self) -> list[int]:
        """Producers whose transaction is still open here, ascending."""
        return sorted(self._pending)

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        """Whether an open transaction holds an offset for this partition."""
        return (group, topic, partition) in self._open
