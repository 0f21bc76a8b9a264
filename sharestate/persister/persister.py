"""The share coordinator's write path over one `__share_group_state` partition.

`Persister` answers what a share-partition leader asks (initialize, read with a possible
leader-epoch bump, write, delete, read summary) and runs the coordinator's jobs (cold-partition
snapshots, cleanup of deleted topics), as Kafka's `ShareCoordinatorShard` does. Every record
it emits gets the next log offset and is replayed at once into its own `ShareShard`, so the
writer's state is always what a loader replaying the log would hold.

Checks run in this order (the first failing one answers; a refused request writes nothing):
topic id present and partition >= 0 (INVALID_REQUEST); negative leader or state epoch
(INVALID_REQUEST, 4.1); key without state (INVALID_REQUEST for write and read, 4.1); leader
epoch below the recorded one (FENCED_LEADER_EPOCH); state epoch below the recorded one
(FENCED_STATE_EPOCH); topic or partition missing from the metadata image
(UNKNOWN_TOPIC_OR_PARTITION). Initialize has no state or leader check; delete and summary
only check the key and the metadata.

A write becomes a ShareSnapshot when the key's update counter has reached
`snapshot_update_records_per_snapshot` (current batches combined with the request's), else a
ShareUpdate (the request's batches combined on their own). Dialect differences are the
fields of `WriterRules`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sharestate.coordinator.combiner import COMBINERS
from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_rules import (
    DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
    rules_for,
)
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    SharePartitionState,
    ShareValue,
    StateBatch,
)
from sharestate.persister import errors
from sharestate.persister.hash_order import TimelineOrder, hash_set_order
from sharestate.persister.java_hash import share_key_hash
from sharestate.persister.metadata import MetadataImage
from sharestate.persister.record_codec import EmittedRecord, ShareRecordCodec
from sharestate.persister.responses import ReadData, Result, Summary
from sharestate.persister.writer_rules import writer_rules_for

DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS = 300_000
"""Kafka's `share.coordinator.cold.partition.snapshot.interval.ms` default."""

_Error = tuple[int, str | None]
_Pending = tuple[int, ShareKey, ShareValue | None]


@dataclass(frozen=True, slots=True)
class PersisterConfig:
    """The share-coordinator settings the writer depends on."""

    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
    """`share.coordinator.snapshot.update.records.per.snapshot`."""
    cold_partition_snapshot_interval_ms: int = DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS
    """`share.coordinator.cold.partition.snapshot.interval.ms`."""


def wall_clock_ms() -> int:
    """The system clock in milliseconds (the default clock)."""
    return time.time_ns() // 1_000_000


class Persister:
    """Kafka's share-coordinator writer for one `__share_group_state` partition.

    `metadata` defaults to an image that knows every topic. `clock` gives the time (ms) of
    calls made without `now`; it stamps snapshot timestamps and record timestamps.
    `next_offset` is the log end offset the first emitted record gets.
    """

    __slots__ = ("_combine", "_limit", "_lossy", "_order", "clock", "codec", "config", "metadata",
                 "next_offset", "shard", "writer_rules")

    def __init__(self, dialect: str = "4.1", *, config: PersisterConfig | None = None,
                 metadata: MetadataImage | None = None,
                 clock: Callable[[], int] = wall_clock_ms, next_offset: int = 0) -> None:
        self.config = config or PersisterConfig()
        self.writer_rules = writer_rules_for(dialect)
        self.shard = ShareShard(rules_for(dialect,
                                          self.config.snapshot_update_records_per_snapshot))
        self.codec = ShareRecordCodec(dialect, self.writer_rules.update_value_version)
        self.metadata = metadata if metadata is not None else MetadataImage.permissive()
        self.clock = clock
        self.next_offset = next_offset
        self._combine = COMBINERS[self.shard.rules.combiner]
        self._limit = self.config.snapshot_update_records_per_snapshot
        self._order: TimelineOrder[ShareKey] = TimelineOrder(share_key_hash)
        self._lossy = self.codec.lossy(SNAPSHOT_TYPE) or self.codec.lossy(UPDATE_TYPE)

    # -- requests -----------------------------------------------------------------------

    def initialize(self, key: ShareKey, state_epoch: int, start_offset: int, *,
                   now: int | None = None) -> Result[None]:
        """InitializeShareGroupState: a fresh snapshot (no batches, leader epoch 0)."""
        if not self.writer_rules.lifecycle_operations:
            return _fail(errors.UNSUPPORTED_VERSION)
        error = self._key_error(key)
        if error is None and self.writer_rules.negative_epochs_rejected and state_epoch < 0:
            error = (errors.INVALID_REQUEST, errors.NEGATIVE_STATE_EPOCH)
        if error is None:
            stored = self.shard.state_epoch(key)
            if stored is not None and stored > state_epoch:
                error = (errors.FENCED_STATE_EPOCH, None)
        error = error or self._metadata_error(key)
        if error is not None:
            return _fail(*error)
        now = self.clock() if now is None else now
        state = self.shard.state(key)
        value = ShareValue(True, 0 if state is None else state.snapshot_epoch + 1, state_epoch, 0,
                           start_offset, -1 if start_offset == -1 else 0, now, now, ())
        return Result(errors.NONE, None, None, self._emit([(SNAPSHOT_TYPE, key, value)], now))

    def write(self, key: ShareKey, leader_epoch: int, state_epoch: int, start_offset: int,
              batches: Iterable[StateBatch], delivery_complete_count: int = -1, *,
              now: int | None = None) -> Result[None]:
        """WriteShareGroupState: one ShareSnapshot or ShareUpdate record."""
        state = self.shard.state(key)
        error = self._request_error(key, state, leader_epoch, state_epoch,
                                    None if self.writer_rules.first_write_creates_state
                                    else errors.WRITE_UNINITIALIZED)
        if error is not None:
            return _fail(*error)
        now = self.clock() if now is None else now
        new = tuple(batches)
        if state is None:
            value = ShareValue(True, 0, state_epoch, leader_epoch, start_offset, -1, None, None,
                               self._combine((), new, start_offset))
            pending: _Pending = (SNAPSHOT_TYPE, key, value)
        else:
            pending = self._state_record(key, state, leader_epoch, state_epoch, start_offset,
                                         new, delivery_complete_count, now, False)
        return Result(errors.NONE, None, None, self._emit([pending], now))

    def read(self, key: ShareKey, leader_epoch: int, *,
             now: int | None = None) -> Result[ReadData]:
        """ReadShareGroupState; a newer leader epoch is persisted with one record (4.1)."""
        rules = self.writer_rules
        state = self.shard.state(key)
        error = self._request_error(key, state, leader_epoch, None,
                                    errors.READ_UNINITIALIZED if rules.lifecycle_operations
                                    else None)
        if error is not None:
            return _fail(*error)
        if state is None:
            return Result(errors.NONE, None, ReadData(0, -1, ()), ())
        data = ReadData(state.state_epoch, state.start_offset, state.batches)
        if (not rules.lifecycle_operations or leader_epoch == -1
                or self.shard.leader_epoch(key) == leader_epoch):
            return Result(errors.NONE, None, data, ())
        now = self.clock() if now is None else now
        pending = self._state_record(key, state, leader_epoch, state.state_epoch,
                                     state.start_offset, (), state.delivery_complete_count,
                                     now, True)
        return Result(errors.NONE, None, data, self._emit([pending], now))

    def read_summary(self, key: ShareKey) -> Result[Summary]:
        """ReadShareGroupStateSummary: start offset, epochs and delivery complete count."""
        error = self._key_error(key) or self._metadata_error(key)
        if error is not None:
            return _fail(*error)
        state = self.shard.state(key)
        if state is None:
            return Result(errors.NONE, None, Summary(-1, 0, 0, -1), ())
        return Result(errors.NONE, None, Summary(state.start_offset, state.leader_epoch,
                                                 state.state_epoch,
                                                 state.delivery_complete_count), ())

    def delete(self, key: ShareKey, *, now: int | None = None) -> Result[None]:
        """DeleteShareGroupState: a ShareSnapshot tombstone, nothing when there is no state."""
        if not self.writer_rules.lifecycle_operations:
            return _fail(errors.UNSUPPORTED_VERSION)
        error = self._key_error(key) or self._metadata_error(key)
        if error is not None:
            return _fail(*error)
        if key not in self.shard:
            return Result(errors.NONE, None, None, ())
        now = self.clock() if now is None else now
        return Result(errors.NONE, None, None, self._emit([(SNAPSHOT_TYPE, key, None)], now))

    # -- jobs ---------------------------------------------------------------------------

    def snapshot_cold_partitions(self, now: int | None = None) -> Result[None]:
        """The cold-partition job: re-snapshot keys whose last snapshot is `interval` old.

        Nothing happens when every key was already re-snapshotted (create != write time).
        Records follow the shard map's iteration order. No-op in dialects without it.
        """
        if not self.writer_rules.lifecycle_operations:
            return Result(errors.NONE, None, None, ())
        now = self.clock() if now is None else now
        shard = self.shard
        states = [(key, _present(shard.state(key))) for key in self._order.ordered()]
        if all(s.create_timestamp != s.write_timestamp for _, s in states):
            return Result(errors.NONE, None, None, ())
        interval = self.config.cold_partition_snapshot_interval_ms
        pending: list[_Pending] = [
            (SNAPSHOT_TYPE, key, ShareValue(True, s.snapshot_epoch + 1, s.state_epoch,
                                            s.leader_epoch, s.start_offset,
                                            s.delivery_complete_count, s.create_timestamp, now,
                                            s.batches))
            for key, s in states if now - (s.write_timestamp or 0) >= interval]
        return Result(errors.NONE, None, None, self._emit(pending, now))

    def on_topics_deleted(self, topic_ids: Iterable[str], *,
                          now: int | None = None) -> Result[None]:
        """Topic deletion cleanup: a tombstone for every key of the deleted topics.

        Records follow Kafka's order (a HashSet filled from the shard map). No-op in
        dialects without it.
        """
        deleted = frozenset(topic_ids)
        if not deleted or not self.writer_rules.lifecycle_operations:
            return Result(errors.NONE, None, None, ())
        keys = hash_set_order([k for k in self._order.ordered() if k.topic_id in deleted],
                              share_key_hash)
        now = self.clock() if now is None else now
        return Result(errors.NONE, None, None,
                      self._emit([(SNAPSHOT_TYPE, key, None) for key in keys], now))

    # -- views --------------------------------------------------------------------------

    def last_redundant_offset(self) -> int | None:
        """The partition's prune point (see `ShareShard.last_redundant_offset`)."""
        return self.shard.last_redundant_offset()

    def keys_in_map_order(self) -> list[ShareKey]:
        """The live keys in the iteration order of Kafka's shard map."""
        return self._order.ordered()

    # -- internals ----------------------------------------------------------------------

    def _key_error(self, key: ShareKey) -> _Error | None:
        if not key.topic_id:
            return errors.INVALID_REQUEST, errors.NULL_TOPIC_ID
        if key.partition < 0:
            return errors.INVALID_REQUEST, errors.NEGATIVE_PARTITION_ID
        return None

    def _request_error(self, key: ShareKey, state: SharePartitionState | None,
                       leader_epoch: int, state_epoch: int | None,
                       uninitialized: str | None) -> _Error | None:
        """The checks of a write, or of a read (`state_epoch` None), in Kafka's order;
        `uninitialized` is the message for a key without state (None: allowed)."""
        if not key.topic_id or key.partition < 0:
            return self._key_error(key)
        if self.writer_rules.negative_epochs_rejected:
            if leader_epoch < 0:
                return errors.INVALID_REQUEST, errors.NEGATIVE_LEADER_EPOCH
            if state_epoch is not None and state_epoch < 0:
                return errors.INVALID_REQUEST, errors.NEGATIVE_STATE_EPOCH
        if state is None and uninitialized is not None:
            return errors.INVALID_REQUEST, uninitialized
        stored = self.shard.leader_epoch(key)
        if stored is not None and stored > leader_epoch:
            return errors.FENCED_LEADER_EPOCH, None
        if state_epoch is not None:
            stored = self.shard.state_epoch(key)
            if stored is not None and stored > state_epoch:
                return errors.FENCED_STATE_EPOCH, None
        return self._metadata_error(key)

    def _metadata_error(self, key: ShareKey) -> _Error | None:
        if self.metadata.has_partition(key.topic_id, key.partition):
            return None
        return errors.UNKNOWN_TOPIC_OR_PARTITION, None

    def _state_record(self, key: ShareKey, state: SharePartitionState, leader_epoch: int,
                      state_epoch: int, start_offset: int, batches: tuple[StateBatch, ...],
                      delivery_complete_count: int, now: int, new_leader: bool) -> _Pending:
        """The snapshot or update a write (or a read with a newer leader epoch) produces."""
        rules = self.writer_rules
        snapshot = (self.shard.snapshot_update_count(key) or 0) >= self._limit
        if rules.request_epochs_persisted:
            leader = leader_epoch if leader_epoch != -1 or not snapshot else state.leader_epoch
            state_epoch = state_epoch if state_epoch != -1 else state.state_epoch
            if snapshot and start_offset == -1:
                start_offset = state.start_offset
        else:
            leader = leader_epoch if new_leader else state.leader_epoch
            state_epoch = state.state_epoch
            if rules.higher_start_offset_wins and state.start_offset > start_offset:
                start_offset = state.start_offset
        if snapshot:
            return SNAPSHOT_TYPE, key, ShareValue(
                True, state.snapshot_epoch + 1, state_epoch, leader, start_offset,
                delivery_complete_count, now, now,
                self._combine(state.batches, batches, start_offset))
        return UPDATE_TYPE, key, ShareValue(
            False, state.snapshot_epoch, None, leader, start_offset, delivery_complete_count,
            None, None, self._combine((), batches, start_offset))

    def _emit(self, pending: list[_Pending], now: int) -> tuple[EmittedRecord, ...]:
        """Give each record the next offset and replay it, in order."""
        shard, order, codec = self.shard, self._order, self.codec
        lossy = self._lossy
        out = []
        for type_id, key, value in pending:
            offset = self.next_offset
            self.next_offset = offset + 1
            encoded: tuple[Any, ...] | None = None
            if value is None:
                order.remove(key)
            else:
                if lossy:
                    value = codec.storable(type_id, value)
                encoded = codec.value_tuple(type_id, value)
                order.put(key)
            shard.replay(offset, type_id, key, value)
            out.append(EmittedRecord(offset, now, type_id, key, encoded, value))
        return tuple(out)


def _fail(code: int, message: str | None = None) -> Result[Any]:
    return Result(code, message if message is not None else errors.DEFAULT_MESSAGES.get(code),
                  None, ())


def _present(state: SharePartitionState | None) -> SharePartitionState:
    if state is None:
        raise AssertionError("the shard map order lists a key without state")
    return state
