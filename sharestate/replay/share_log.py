"""Replay one `__share_group_state` partition log into a `ShareShard`, as of any point.

`ShareReplay` is pushed the log's items (decoded batches, quiet runs, findings) in log
order and applies them until the stop point, so memory holds the live share-partitions
(plus, for the prune accounting, the sizes of the batches above the current prune point),
never the log; `replay_share_log` is the loop that feeds it a whole log. The history
entries it can return after each item are what the history table is built from.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from operator import attrgetter, sub
from typing import TYPE_CHECKING, Protocol

from sharestate import native
from sharestate.coordinator.shard import KAFKA, ShareShard
from sharestate.coordinator.share_rules import (
    DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
    ShareRules,
    rules_for,
)
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    ShareKey,
    SharePartitionState,
    ValueSlots,
    share_key,
    share_value,
    value_slots,
)
from sharestate.log import BatchHeader, ControlRecord, LogFinding, RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect, dialect_names
from sharestate.records.segment import Decoded, DecodedBatch, LogItem, QuietRun
from sharestate.replay.logs import (
    AS_OF_BEFORE_LOG,
    END,
    AsOf,
    LogSource,
    before_log_finding,
)
from sharestate.replay.prune import PruneLedger

if TYPE_CHECKING:
    from sharestate.replay.snapshot import Snapshot

HistoryEntry = tuple[int, int, ShareKey, SharePartitionState | None, int | None, int | None,
                     int | None, int | None]
"""After an applied data record: (offset, timestamp, key, state or None when deleted,
max leader epoch, max state epoch, snapshot update count, last snapshot offset)."""

HistorySink = Callable[[list[HistoryEntry]], None]
"""Receives the history entries of one batch, in log order."""


class HistoryRows(Protocol):
    """Takes each history entry as a row as it is made: the rows of
    `sharestate.tables.gold.history_columns` (the history table's columns, built in C as the
    entries come when the extension is built; `share_apply` then takes only its own)."""

    def append(self, row: HistoryEntry, /) -> None: ...



Observer = Callable[[LogItem], None]
"""Sees each batch (or batch-level finding) a replay reads, before its records apply; a
batch whose first record is past the stop point is not read."""


@dataclass
class ShareLogResult:
    """The state of one replayed state-topic partition: the shard, the prune ledger and
    what the log looked like up to the last record applied (all of it data: see
    `sharestate.replay.snapshot`)."""

    topic: str
    partition: int | None
    name: str
    """How findings name the log (`<topic>-<partition>`, or the file of a loose segment)."""
    shard: ShareShard
    last_applied_offset: int | None = None
    last_applied_timestamp: int | None = None
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    records: int = 0
    bytes: int = 0
    reclaimable_records: int = 0
    reclaimable_bytes: int = 0
    findings: list[LogFinding] = field(default_factory=list)
    """Every finding of the log read (up to the stop point): `read_segment`'s, each batch's
    own and its records' (see `sharestate.records.segment`)."""
    ledger: PruneLedger = field(default_factory=PruneLedger, repr=False, compare=False)


def rules_of(dialects: Iterable[str], limit: int) -> ShareRules:
    """Replay rules for a log of `dialects`: those of its newest (an upgraded log ends
    newest)."""
    newest = dialect_names()
    used = sorted(set(dialects), key=newest.index)
    return rules_for(used[0] if used else newest[0], limit)


def replay_share_log(log: LogSource, *, as_of: AsOf = END, semantics: str = KAFKA,
                     snapshot_update_records_per_snapshot: int = (
                         DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT),
                     history_sink: HistorySink | None = None) -> ShareLogResult:
    """Replay `log` up to `as_of` (default: its end): its items applied one by one.

    `history_sink`, when given, is called after every batch with the `HistoryEntry` of each
    data record it applied (the fast way to build the history table: memory stays bounded
    by one batch).
    """
    replay = ShareReplay.of_log(log, as_of=as_of, semantics=semantics,
                                snapshot_update_records_per_snapshot=(
                                    snapshot_update_records_per_snapshot),
                                collect_history=history_sink is not None)
    replay.run(log.items(), history_sink)
    if (found := partial_state_finding(log, replay)) is not None:
        replay.result.findings.append(found)
    return replay.result


def exact_from(log: LogSource) -> int | None:
    """The offset from which a replay of `log` gives Kafka's state at every point, when
    the log does not begin at offset 0 (else None: everywhere).

    Kafka deletes the records below its log start (the prune point: every key live then
    has a later snapshot), so a key whose first record read is an update, a tombstone or a
    snapshot with a snapshot epoch above 0 (only a key with no state gets epoch 0) had a
    state before it that the log no longer holds: the replay knows that key only from its
    first type-0 record on. A key never snapshotted after its updates is known at the end
    alone (where Kafka's load gives the same state)."""
    first: int | None = None
    known: dict[ShareKey, bool] = {}
    exact = last = 0
    for item in log.batches():
        if not isinstance(item, DecodedBatch):
            continue
        for record, decoded in zip(item.records, item.decoded, strict=True):
            if first is None:
                if record.offset <= 0:
                    return None
                first = record.offset
            last = record.offset
            if isinstance(decoded, ControlRecord | LogFinding) or decoded.error is not None \
                    or decoded.kind is None or decoded.key is None:
                continue
            kind = decoded.kind
            key = share_key(decoded.key, kind.key_layout())
            if known.get(key):
                continue
            if kind.type_id != SNAPSHOT_TYPE:
                known[key] = False
            elif key not in known and _initial(decoded):
                known[key] = True
            else:
                known[key], exact = True, record.offset
    if first is None:
        return None
    return max(exact, first) if all(known.values()) else last


def _initial(decoded: Decoded) -> bool:
    """Whether a snapshot is a key's first (snapshot epoch 0: it had no state)."""
    assert not isinstance(decoded, ControlRecord | LogFinding) and decoded.kind is not None
    if decoded.value is None or decoded.value_version is None:
        return False
    layout = decoded.kind.value_layout(decoded.value_version)
    return layout is not None and share_value(decoded.value, layout).snapshot_epoch == 0


def partial_state_finding(log: LogSource, replay: ShareReplay) -> LogFinding | None:
    """An `as_of_before_log` finding when `replay` of `log` stopped, after applying some
    records, before the offset from which it gives Kafka's state (`exact_from`)."""
    result = replay.result
    applied = result.last_applied_offset
    if not replay.stopped or applied is None:
        return None
    exact = exact_from(log)
    if exact is None or applied >= exact:
        return None
    return LogFinding(
        AS_OF_BEFORE_LOG, f"{replay.as_of.describe()} lies before offset {exact}, from "
        f"which this log gives the state of every share-partition: "
        f"before it some rest on records deleted below the log's first one, so the state "
        f"given is not Kafka's then", -1, exact, b"", 0, result.name)


def share_state(topic: str, partition: int | None, dialects: Iterable[str], *,
                name: str | None = None, semantics: str = KAFKA,
                snapshot_update_records_per_snapshot: int = (
                    DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT)) -> ShareLogResult:
    """The empty state of a state-topic partition whose records are of `dialects`."""
    shard = ShareShard(rules_of(dialects, snapshot_update_records_per_snapshot), semantics)
    return ShareLogResult(topic, partition, name or f"{topic}-{partition}", shard)


class ShareReplay:
    """One `__share_group_state` partition replayed as its log items arrive.

    Kafka's `ShareCoordinatorShard` is fed record by record (`replay(offset, producerId,
    producerEpoch, record)`); this is fed item by item: `apply` takes a decoded batch, a
    `QuietRun` (applied in C in one call when the extension is built and no stop point can
    fall inside it) or a batch-level finding, in log order, and updates `result`, the whole
    state. Records past the stop point `as_of` are not applied: `stopped` turns true and
    later items change nothing. With `collect_history`, `apply` returns the `HistoryEntry`
    of each data record it applied; given `history` rows, it appends them there instead
    (and returns none); `observe` sees each item before its records apply (not a batch
    whose first record is past the stop point).

    Clean records are applied in C (`sharestate._native.share_apply`) when the extension is
    built and the shard allows it; every other record takes `_Applier.apply`, the Python
    path that defines the semantics.
    """

    def __init__(self, result: ShareLogResult, *, as_of: AsOf = END,
                 collect_history: bool = False, history: HistoryRows | None = None,
                 observe: Observer | None = None) -> None:
        self.result = result
        self.as_of = as_of
        self.collect_history = collect_history
        self.history = history
        self.observe = observe
        self.stopped = False
        self.log_start = 0
        """Kafka's log start offset where the log knows it: the result's log start is not
        below it (the first batch read may begin below it)."""
        shard = result.shard
        self._context = shard.native_context() if native.enabled() else None
        self._slots = native_slots(tuple(sorted(dialect_names()))) if self._context else {}
        self._applier = _Applier(shard)
        self._runs = self._context is not None and as_of.unbounded
        """Whether a quiet run goes to C in one call (nothing can stop the replay in it)."""

    @classmethod
    def of_log(cls, log: LogSource, *, as_of: AsOf = END, semantics: str = KAFKA,
               snapshot_update_records_per_snapshot: int = (
                   DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT),
               collect_history: bool = False, observe: Observer | None = None
               ) -> ShareReplay:
        """A replay of `log` from its start (feed it `log.items()`)."""
        replay = cls(share_state(log.topic, log.partition, log.dialects, name=log.name,
                                 semantics=semantics,
                                 snapshot_update_records_per_snapshot=(
                                     snapshot_update_records_per_snapshot)),
                     as_of=as_of, collect_history=collect_history, observe=observe)
        replay.log_start = log.log_start_offset
        if (span := log.empty_span) is not None:
            replay.result.log_start_offset, replay.result.log_end_offset = span
        return replay

    def snapshot(self) -> Snapshot:
        """The whole state as versioned Arrow tables (`sharestate.replay.snapshot`)."""
        from sharestate.replay.share_snapshot import share_snapshot  # pyarrow: only here

        return share_snapshot(self.result, self.stopped)

    @classmethod
    def restore(cls, snapshot: Snapshot, *, as_of: AsOf = END, collect_history: bool = False,
                history: HistoryRows | None = None, observe: Observer | None = None
                ) -> ShareReplay:
        """The replay a snapshot was taken of, to be fed the log's items after it: it goes on
        to exactly the state of a replay never interrupted."""
        from sharestate.replay.share_snapshot import restore_share

        result, stopped = restore_share(snapshot)
        replay = cls(result, as_of=as_of, collect_history=collect_history, history=history,
                     observe=observe)
        replay.stopped = stopped
        return replay

    def move_log_start(self, start: int, read: Iterable[DecodedBatch | LogFinding]) -> None:
        """Kafka's log start moved to `start` since this replay began (the coordinator
        pruned: deleteRecords), seen as a coordinator that kept running sees it: the state
        stays, the batches wholly below `start` leave the prune ledger and the log starts
        where a replay from `start` would. `read`: the batches this replay applied from its
        own log start on, in order (up to the one holding `start`, or all)."""
        result = self.result
        self.log_start = max(self.log_start, start)
        if result.log_start_offset is None or start <= result.log_start_offset:
            return
        records = size = 0
        begins = start
        for item in read:
            if not isinstance(item, DecodedBatch) or not item.records:
                continue
            header = item.header
            if header.last_offset >= start:
                begins = max(header.base_offset, start)
                break
            records += len(item.records)
            size += header.size_in_bytes
        result.log_start_offset = begins
        result.ledger.forget_below(start, records, size)
        self._advance_ledger()

    def run(self, items: Iterable[LogItem], history_sink: HistorySink | None = None) -> None:
        """Apply `items` in turn until they end or the stop point is reached, each item's
        history entries (when collected) to `history_sink`."""
        for item in items:
            entries = self.apply(item)
            if entries and history_sink is not None:
                history_sink(entries)
            if self.stopped:
                return

    def apply(self, item: LogItem) -> list[HistoryEntry]:
        """Apply the next item of the log; the history entries of its data records (empty
        unless `collect_history`)."""
        if self.stopped:
            return []
        if isinstance(item, QuietRun):
            if self._runs:
                if self.observe is not None:
                    self.observe(item)
                return self._quiet_run(item)
            return self._batches(item)
        if isinstance(item, LogFinding):
            if self.observe is not None:
                self.observe(item)
            self.result.findings.append(item)
            return []
        return self._batch(item)

    def _batches(self, run: QuietRun) -> list[HistoryEntry]:
        """Apply a quiet run batch by batch (a stop point may fall inside it)."""
        entries: list[HistoryEntry] = []
        for batch in run.batches():
            entries.extend(self._batch(batch))
            if self.stopped:
                break
        return entries

    def _batch(self, item: DecodedBatch) -> list[HistoryEntry]:
        result = self.result
        as_of = self.as_of
        header = item.header
        records = item.records
        if records and as_of.passed(records[0].offset, records[0].timestamp):
            if result.last_applied_offset is None and (found := before_log_finding(
                    result.name, as_of, records[0].offset, records[0].timestamp)):
                result.findings.append(found)
            self._stop()  # the log read ends with the batch before
            return []
        if self.observe is not None:
            self.observe(item)
        result.findings.extend(item.findings)
        result.findings.extend(item.failed)
        entries: list[HistoryEntry] = []
        if not records:  # a refused batch (its finding says why), or an empty one
            return entries
        if result.log_start_offset is None:
            result.log_start_offset = _log_start(header, self.log_start)
        applier = self._applier
        applier.header = header
        applier.entries = self._sink(entries)
        context = self._context
        if context is not None:
            applied, stopped, last_offset, last_timestamp = native.module.share_apply(
                context, records, item.decoded, as_of.offset, as_of.time, self._slots,
                applier.apply, applier.entries)
        else:
            applied, stopped, last_offset, last_timestamp = applier.apply_all(
                records, item.decoded, as_of)
        if applied:
            result.last_applied_offset = last_offset
            result.last_applied_timestamp = last_timestamp
        result.records += applied
        if stopped:  # inside this batch: the log read ends after its last record applied
            if result.last_applied_offset is not None:
                result.log_end_offset = result.last_applied_offset + 1
            self._stop()
            return entries
        result.bytes += header.size_in_bytes
        result.log_end_offset = header.last_offset + 1
        result.ledger.add(header.last_offset, len(records), header.size_in_bytes)
        self._advance_ledger()
        return entries

    def _sink(self, entries: list[HistoryEntry]) -> list[HistoryEntry] | HistoryRows | None:
        """Where the history entries of the next records go."""
        return self.history if self.history is not None else (
            entries if self.collect_history else None)

    def _stop(self) -> None:
        """The stop point is reached: nothing more applies."""
        self.stopped = True
        self._advance_ledger()

    def _advance_ledger(self) -> None:
        """Move the prune ledger to the shard's prune point; `result` says what it frees
        (after every batch, so a replay that never ends is always current)."""
        result = self.result
        result.ledger.advance(result.shard.last_redundant_offset())
        result.reclaimable_records = result.ledger.records
        result.reclaimable_bytes = result.ledger.bytes

    def _quiet_run(self, run: QuietRun) -> list[HistoryEntry]:
        """Apply a whole quiet run in C (unbounded replay only); its history entries.

        The ledger then advances once for the run: the prune point only rises, and nothing
        in a quiet run holds it back, so the batches it releases are the same."""
        result = self.result
        headers = run.headers
        if result.log_start_offset is None:
            result.log_start_offset = _log_start(headers[0], self.log_start)
        context = self._context
        assert context is not None
        entries: list[HistoryEntry] = []
        applier = self._applier
        applier.run = run
        applier.lasts = None
        applier.entries = self._sink(entries)
        applied, _, last_offset, last_timestamp = native.module.share_apply(
            context, run.records, run.decoded, None, None, self._slots,
            applier.apply_in_run, applier.entries)
        if applied:
            result.last_applied_offset = last_offset
            result.last_applied_timestamp = last_timestamp
        result.records += applied
        sizes = list(map(_SIZE, headers))
        result.bytes += sum(sizes)
        ledger = result.ledger
        ledger.extend(map(_LAST_OFFSET, headers), map(sub, run.ends, [0, *run.ends[:-1]]),
                      sizes)
        result.log_end_offset = headers[-1].last_offset + 1
        self._advance_ledger()
        return entries


def _log_start(first: BatchHeader, known: int) -> int:
    """Where a log read from its `first` batch starts: at Kafka's `known` log start when
    that batch holds it, else at the batch (a start past the log's end, refused:
    `PartitionLog`)."""
    return max(first.base_offset, known) if first.last_offset >= known else first.base_offset


_SIZE = attrgetter("size_in_bytes")
_LAST_OFFSET = attrgetter("last_offset")


class _Applier:
    """Applies the records of one batch to the shard (the Python path)."""

    __slots__ = ("entries", "header", "lasts", "run", "shard")

    def __init__(self, shard: ShareShard) -> None:
        self.shard = shard
        self.header: BatchHeader | None = None
        """The batch being applied (set before each batch)."""
        self.entries: list[HistoryEntry] | HistoryRows | None = None
        """Where history entries of this batch go (None: not collected)."""
        self.run: QuietRun | None = None
        """The quiet run being applied (set before each run, with `lasts` None)."""
        self.lasts: list[int] | None = None
        """The last record offset of each batch of `run`, once a record needed it."""

    def apply_in_run(self, record: RawRecord, decoded: Decoded) -> None:
        """`apply` for a record of the current quiet run (finds its batch's header)."""
        run = self.run
        assert run is not None
        if self.lasts is None:
            self.lasts = [run.records[end - 1].offset for end in run.ends]
        self.header = run.headers[bisect_left(self.lasts, record.offset)]
        self.apply(record, decoded)

    def apply_all(self, records: list[RawRecord], decoded: list[Decoded],
                  as_of: AsOf) -> tuple[int, bool, int | None, int | None]:
        """Apply records until `as_of`: (applied, stopped, last offset, last timestamp)."""
        applied = 0
        last: RawRecord | None = None
        for record, item in zip(records, decoded, strict=True):
            if as_of.passed(record.offset, record.timestamp):
                return applied, True, *_where(last)
            self.apply(record, item)
            applied += 1
            last = record
        return applied, False, *_where(last)

    def apply(self, record: RawRecord, decoded: Decoded) -> None:
        """Apply one record: a control marker or a share-state record. A record that did
        not decode is skipped: its finding came with its batch (`DecodedBatch.failed`)."""
        offset = record.offset
        header = self.header
        assert header is not None
        if isinstance(decoded, ControlRecord):
            if decoded.type in ("COMMIT", "ABORT"):
                self.shard.end_transaction(header.producer_id, decoded.type == "COMMIT", offset)
        elif isinstance(decoded, LogFinding) or decoded.error is not None \
                or decoded.kind is None or decoded.key is None:
            return
        else:
            kind = decoded.kind
            key = share_key(decoded.key, kind.key_layout())
            value = None
            if decoded.value is not None and decoded.value_version is not None:
                layout = kind.value_layout(decoded.value_version)
                assert layout is not None
                value = share_value(decoded.value, layout)
            self.shard.replay(offset, kind.type_id, key, value, header.producer_id,
                              header.is_transactional)
            if self.entries is not None:
                shard = self.shard
                self.entries.append((offset, record.timestamp, key, shard.state(key),
                                     shard.leader_epoch(key), shard.state_epoch(key),
                                     shard.snapshot_update_count(key),
                                     shard.last_snapshot_offset(key)))


def _where(record: RawRecord | None) -> tuple[int | None, int | None]:
    return (None, None) if record is None else (record.offset, record.timestamp)


SlotTable = dict[int, dict[int, ValueSlots]]
"""{id(record kind): {value version: ValueSlots}}: the value layouts C may apply. Keyed by
the kind object (dialects are loaded once per process), not by type id and version, which
two dialects share with different layouts."""


@cache
def native_slots(dialects: tuple[str, ...]) -> SlotTable:
    """The slot table of the share record kinds of `dialects` (what
    `sharestate._native.share_apply` and `share_audit` read)."""
    table: SlotTable = {}
    for name in dialects:
        for kind in dialect(name).topics.get(SHARE_STATE_TOPIC, {}).values():
            if kind.key_layout().names[:3] != ("group_id", "topic_id", "partition"):
                continue
            valid = kind.value.valid
            for version in range(valid.lo, (valid.hi if valid.hi is not None else valid.lo) + 1):
                layout = kind.value_layout(version)
                if layout is not None:
                    table.setdefault(id(kind), {})[version] = value_slots(layout)
    return table
