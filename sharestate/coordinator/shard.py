"""Offline twin of Kafka's `ShareCoordinatorShard` replay for one `__share_group_state` partition.

Per key the shard holds the state (`SharePartitionState`), the highest leader and state epochs
seen, the number of updates since the last snapshot, and (in an `OffsetsManager`) the offset of
the key's latest snapshot, from which the partition's prune point follows.

Replay rules (dialect differences live in `ShareRules`):

- ShareSnapshot (type 0): epochs are maxed into the epoch maps, the state is replaced by the
  snapshot as it is, a key's update counter is reset to 0 only when it has reached the
  snapshot-update limit, and the offsets manager records the offset.
- Type-0 tombstone: the key leaves every map; the offsets manager records the offset, computes
  the prune point, then forgets the key.
- ShareUpdate (type 1): the leader epoch is maxed into its map. A key without state takes the
  update as its state, batches as they are (state epoch and timestamps from the rules).
  Otherwise start offset and leader epoch -1 mean "keep", snapshot/state epochs and
  timestamps are kept, the delivery complete count is taken from the update as it is (even
  -1), and the batches are combined with the new start offset by the rules' combiner. The
  update counter becomes `first_update_count` or previous + 1. Updates never touch the
  offsets manager.
- Type-1 tombstones and unknown type ids change nothing and become findings.

Transaction semantics, chosen per shard:

- `kafka` (what Kafka does today): the share coordinator never writes transactionally, and
  its replay ignores producer ids and markers, so records of transactional batches (even
  aborted ones) are applied at their position and `end_transaction` does nothing.
- `transactional-acks` (the proposed KIP for transactional share acknowledgements): records
  of a transactional batch stay pending per producer id. A COMMIT marker applies them in log
  order at the marker's position; an ABORT drops them. Like the group coordinator's pending
  transactional offsets, a tombstone applied for a key discards that key's pending records.
  The prune point never passes the first still-pending record, which a reload still needs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TYPE_CHECKING, Final, NamedTuple, cast

from sharestate.coordinator.combiner import COMBINERS, SWEEP
from sharestate.coordinator.offsets_manager import OffsetsManager
from sharestate.coordinator.share_findings import (
    INVALID_STATE_BATCH,
    PENDING_DISCARDED,
    SNAPSHOT_TOMBSTONE_FAILED,
    UNKNOWN_RECORD_TYPE,
    UPDATE_TOMBSTONE,
    ShardFinding,
)
from sharestate.coordinator.share_rules import RULES_4_1, ShareRules
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    Batches,
    ShareKey,
    SharePartitionState,
    ShareValue,
)

if TYPE_CHECKING:
    from sharestate.records.segment import FindingCap

KAFKA: Final = "kafka"
TRANSACTIONAL_ACKS: Final = "transactional-acks"
SEMANTICS: Final = (KAFKA, TRANSACTIONAL_ACKS)
"""The transaction semantics a shard can replay with."""

NO_PRODUCER_ID: Final = -1


class PendingRecord(NamedTuple):
    """A record of an open transaction (`transactional-acks`), waiting for its marker."""

    offset: int
    type_id: int
    key: ShareKey
    value: ShareValue | None


class KeyEntry(NamedTuple):
    """Everything the shard holds for one key (None: not in that map)."""

    key: ShareKey
    state: SharePartitionState | None
    leader_epoch: int | None
    state_epoch: int | None
    snapshot_update_count: int | None
    last_snapshot_offset: int | None


class NativeContext(NamedTuple):
    """What `sharestate._native.share_apply` needs to apply clean records to a shard in C:
    the shard's maps (updated in place), its rules and the types it builds. C reads the
    fields by position (the `CTX_*` constants of csrc/native.h, checked by
    tests/test_native.py)."""

    states: dict[ShareKey, SharePartitionState]
    leader_epochs: dict[ShareKey, int]
    state_epochs: dict[ShareKey, int]
    counts: dict[ShareKey, int]
    update_offsets: Callable[[Hashable, int, bool], None]
    """The offsets manager's `update_state` (called for each snapshot)."""
    snapshot_update_records_per_snapshot: int
    first_update_count: int
    fresh_update_state_epoch: int
    fresh_update_timestamp: int | None
    key_type: type[ShareKey]
    state_type: type[SharePartitionState]
    snapshot_offsets: dict[Hashable, int]
    """The offsets manager's live map (read for history entries)."""


class ShareShard:
    """Replays share-state records in log order and exposes what Kafka's shard would hold.

    `findings` lists what it handled differently from Kafka's replay; with a `cap` (a
    `FindingCap`, shared with the log's findings where the caller lists them together) only
    those the cap admits, the rest counted in it per code."""

    __slots__ = ("_combine", "_counts", "_leader_epochs", "_offsets", "_pending", "_state_epochs",
                 "_states", "cap", "findings", "rules", "semantics")

    def __init__(self, rules: ShareRules = RULES_4_1, semantics: str = KAFKA) -> None:
        if semantics not in SEMANTICS:
            raise ValueError(f"unknown semantics {semantics!r}; known: {', '.join(SEMANTICS)}")
        self.rules = rules
        self._combine = COMBINERS[rules.combiner]
        self.semantics = semantics
        self._states: dict[ShareKey, SharePartitionState] = {}
        self._leader_epochs: dict[ShareKey, int] = {}
        self._state_epochs: dict[ShareKey, int] = {}
        self._counts: dict[ShareKey, int] = {}
        self._offsets = OffsetsManager()
        self._pending: dict[int, list[PendingRecord]] | None = (
            {} if semantics == TRANSACTIONAL_ACKS else None)
        self.findings: list[ShardFinding] = []
        self.cap: FindingCap | None = None

    @classmethod
    def restored(cls, rules: ShareRules, semantics: str, entries: Iterable[KeyEntry],
                 last_redundant_offset_raw: int, pending: Iterable[tuple[int, PendingRecord]],
                 findings: Iterable[ShardFinding]) -> ShareShard:
        """A shard holding what `entries()`, `last_redundant_offset_raw`, `pending_records()`
        and `findings` of another one held: it replays on exactly as that one would."""
        shard = cls(rules, semantics)
        offsets: dict[Hashable, int] = {}
        for key, state, leader_epoch, state_epoch, count, snapshot_offset in entries:
            if state is not None:
                shard._states[key] = state
            if leader_epoch is not None:
                shard._leader_epochs[key] = leader_epoch
            if state_epoch is not None:
                shard._state_epochs[key] = state_epoch
            if count is not None:
                shard._counts[key] = count
            if snapshot_offset is not None:
                offsets[key] = snapshot_offset
        shard._offsets = OffsetsManager.restored(offsets, last_redundant_offset_raw)
        for producer_id, record in pending:
            if shard._pending is None:
                raise ValueError(f"pending records under the {semantics} semantics")
            shard._pending.setdefault(producer_id, []).append(record)
        shard.findings.extend(findings)
        return shard

    # -- replay -------------------------------------------------------------------------

    def replay(self, offset: int, type_id: int, key: ShareKey | None, value: ShareValue | None,
               producer_id: int = NO_PRODUCER_ID, transactional: bool = False) -> None:
        """Apply one data record (`value` None: tombstone) at log offset `offset`.

        `key` may be None only for a type id without a share schema (nothing to decode it
        with). `producer_id` and `transactional` come from the record's batch; only the
        `transactional-acks` semantics uses them.
        """
        if type_id != UPDATE_TYPE and type_id != SNAPSHOT_TYPE:
            self._finding(offset, UNKNOWN_RECORD_TYPE, key,
                          f"unknown record type {type_id}: Kafka's loader skips it")
            return
        if key is None:
            raise ValueError(f"offset {offset}: record of type {type_id} without a key")
        if transactional and self._pending is not None:
            self._pending.setdefault(producer_id, []).append(
                PendingRecord(offset, type_id, key, value))
            return
        if value is None:
            if type_id == SNAPSHOT_TYPE:
                self._delete(offset, key)
            else:
                self._finding(offset, UPDATE_TOMBSTONE, key,
                              "ShareUpdate-key tombstone: Kafka's replay throws here and its "
                              "loader would fail; state left unchanged")
        elif value.is_snapshot != (type_id == SNAPSHOT_TYPE):
            raise ValueError(f"offset {offset}: type {type_id} record with a "
                             f"{'snapshot' if value.is_snapshot else 'update'} value")
        elif type_id == UPDATE_TYPE:
            self._update(offset, key, value)
        else:
            self._snapshot(offset, key, value)

    def end_transaction(self, producer_id: int, committed: bool, offset: int) -> int:
        """A COMMIT (`committed`) or ABORT marker of `producer_id` at log offset `offset`.

        Returns how many pending records it applied or dropped (always 0 under `kafka`).
        """
        if self._pending is None:
            return 0
        records = self._pending.pop(producer_id, None)
        if not records:
            return 0
        if records[-1].offset > offset:
            raise ValueError(f"marker at offset {offset} precedes a record of producer "
                             f"{producer_id} at offset {records[-1].offset}")
        if committed:
            for r in records:
                self.replay(r.offset, r.type_id, r.key, r.value)
        return len(records)

    def _snapshot(self, offset: int, key: ShareKey, value: ShareValue) -> None:
        leader_epoch = value.leader_epoch
        state_epoch = value.state_epoch
        if state_epoch is None:
            raise ValueError(f"offset {offset}: snapshot value without a state epoch")
        epochs = self._leader_epochs
        prev = epochs.get(key)
        if prev is None or prev < leader_epoch:
            epochs[key] = leader_epoch
        epochs = self._state_epochs
        prev = epochs.get(key)
        if prev is None or prev < state_epoch:
            epochs[key] = state_epoch
        batches = value.batches
        self._check_batches(offset, key, batches)
        self._states[key] = SharePartitionState(
            value.snapshot_epoch, state_epoch, leader_epoch, value.start_offset,
            value.delivery_complete_count, value.create_timestamp, value.write_timestamp,
            batches)
        count = self._counts.get(key)
        if count is not None and count >= self.rules.snapshot_update_records_per_snapshot:
            self._counts[key] = 0
        self._offsets.update_state(key, offset, False)

    def _update(self, offset: int, key: ShareKey, value: ShareValue) -> None:
        leader_epoch = value.leader_epoch
        epochs = self._leader_epochs
        prev = epochs.get(key)
        if prev is None or prev < leader_epoch:
            epochs[key] = leader_epoch
        batches = value.batches
        if batches:
            self._check_batches(offset, key, batches)
        state = self._states.get(key)
        if state is None:
            rules = self.rules
            stamp = rules.fresh_update_timestamp
            self._states[key] = SharePartitionState(
                value.snapshot_epoch, rules.fresh_update_state_epoch, leader_epoch,
                value.start_offset, value.delivery_complete_count, stamp, stamp, batches)
        else:
            start = value.start_offset
            if start == -1:
                start = state.start_offset
            if leader_epoch == -1:
                leader_epoch = state.leader_epoch
            self._states[key] = SharePartitionState(
                state.snapshot_epoch, state.state_epoch, leader_epoch, start,
                value.delivery_complete_count, state.create_timestamp, state.write_timestamp,
                self._combine(state.batches, batches, start))
        count = self._counts.get(key)
        self._counts[key] = self.rules.first_update_count if count is None else count + 1

    def _delete(self, offset: int, key: ShareKey) -> None:
        self._states.pop(key, None)
        self._leader_epochs.pop(key, None)
        self._state_epochs.pop(key, None)
        self._counts.pop(key, None)
        self._offsets.update_state(key, offset, True)
        if self.rules.kafka_fails_on_snapshot_tombstone:
            self._finding(offset, SNAPSHOT_TOMBSTONE_FAILED, key,
                          f"Kafka's {self.rules.dialect} replay threw on this tombstone "
                          "(pre-release defect); the key is deleted as released Kafka does")
        if self._pending:
            self._discard_pending(offset, key)

    def _discard_pending(self, offset: int, key: ShareKey) -> None:
        assert self._pending is not None
        for producer_id, records in list(self._pending.items()):
            kept = [r for r in records if r.key != key]
            if len(kept) == len(records):
                continue
            self._finding(offset, PENDING_DISCARDED, key,
                          f"tombstone discarded {len(records) - len(kept)} pending record(s) "
                          f"of producer {producer_id}")
            if kept:
                self._pending[producer_id] = kept
            else:
                del self._pending[producer_id]

    def _check_batches(self, offset: int, key: ShareKey, batches: Batches) -> None:
        for b in batches:
            if b[0] > b[1]:
                self._finding(offset, INVALID_STATE_BATCH, key,
                              f"state batch [{b[0]}, {b[1]}] has first_offset > last_offset: "
                              "Kafka's combiner fails or mis-merges it; it covers no offset "
                              "here")
                return

    def _finding(self, offset: int, code: str, key: ShareKey | None, message: str) -> None:
        if self.cap is None or self.cap.admit(code, -1, offset):
            self.findings.append(ShardFinding(offset, code, message, key))

    def native_context(self) -> NativeContext | None:
        """What `sharestate._native.share_apply` needs to apply clean records in C.

        None when this shard must replay in Python: the `transactional-acks` semantics or a
        combiner other than the sweep (the C path implements `_snapshot`/`_update` with it).
        """
        rules = self.rules
        if self._pending is not None or rules.combiner != SWEEP:
            return None
        return NativeContext(
            self._states, self._leader_epochs, self._state_epochs, self._counts,
            self._offsets.update_state, rules.snapshot_update_records_per_snapshot,
            rules.first_update_count, rules.fresh_update_state_epoch,
            rules.fresh_update_timestamp, ShareKey, SharePartitionState,
            self._offsets.tracked())

    def copy(self) -> ShareShard:
        """A shard holding what this one holds now, untouched by what this one replays
        next (its states, epochs and counts are immutable values: copying the maps
        suffices); without a cap (it counts nothing)."""
        other = ShareShard.__new__(ShareShard)
        other.rules, other._combine, other.semantics = self.rules, self._combine, self.semantics
        other._states = dict(self._states)
        other._leader_epochs = dict(self._leader_epochs)
        other._state_epochs = dict(self._state_epochs)
        other._counts = dict(self._counts)
        other._offsets = OffsetsManager.restored(dict(self._offsets.tracked()),
                                                 self._offsets.raw)
        other._pending = None if self._pending is None else {
            producer_id: list(records) for producer_id, records in self._pending.items()}
        other.findings = list(self.findings)
        other.cap = None
        return other

    # -- views --------------------------------------------------------------------------

    def state(self, key: ShareKey) -> SharePartitionState | None:
        """The key's state, or None when it has none."""
        return self._states.get(key)

    def leader_epoch(self, key: ShareKey) -> int | None:
        """The highest leader epoch seen for the key (Kafka's `leaderEpochMap`)."""
        return self._leader_epochs.get(key)

    def state_epoch(self, key: ShareKey) -> int | None:
        """The highest snapshot state epoch seen for the key (Kafka's `stateEpochMap`)."""
        return self._state_epochs.get(key)

    def snapshot_update_count(self, key: ShareKey) -> int | None:
        """Updates since the key's last counter reset (Kafka's `snapshotUpdateCount`)."""
        return self._counts.get(key)

    def last_snapshot_offset(self, key: ShareKey) -> int | None:
        """The offset of the key's latest snapshot as the offsets manager tracks it."""
        return self._offsets.snapshot_offset(key)

    def last_redundant_offset(self) -> int | None:
        """The prune point (records below it are redundant), or None (Kafka's empty)."""
        point = self._offsets.last_redundant_offset()
        if point is not None and self._pending:
            first = min(records[0].offset for records in self._pending.values())
            if first < point:
                point = first if first > 0 else None
        return point

    @property
    def last_redundant_offset_raw(self) -> int:
        """The offsets manager's internal value (Long.MAX_VALUE before any snapshot)."""
        return self._offsets.raw

    def __iter__(self) -> Iterator[ShareKey]:
        """The live keys (those with state), in the order they gained their state."""
        return iter(self._states)

    def entries(self) -> Iterator[KeyEntry]:
        """Every key the shard holds anything for, with all of it: the live keys in the
        order they gained their state, then any other (none, as the rules go)."""
        keys = list(self._states)
        for held in (self._leader_epochs, self._state_epochs, self._counts,
                     self._offsets.tracked()):
            keys.extend(cast(ShareKey, k) for k in held
                        if k not in self._states and k not in keys)
        for key in keys:
            yield KeyEntry(key, self._states.get(key), self._leader_epochs.get(key),
                           self._state_epochs.get(key), self._counts.get(key),
                           self._offsets.snapshot_offset(key))

    def pending_records(self) -> Iterator[tuple[int, PendingRecord]]:
        """(producer id, record) of every record awaiting a marker, by producer in the
        order they opened, then in log order (`transactional-acks` only)."""
        for producer_id, records in (self._pending or {}).items():
            for record in records:
                yield producer_id, record

    def pending_producers(self) -> tuple[int, ...]:
        """Producer ids with records awaiting a marker (`transactional-acks` only)."""
        return tuple(self._pending) if self._pending else ()

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: object) -> bool:
        return key in self._states
