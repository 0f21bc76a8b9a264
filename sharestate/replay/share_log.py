"""Replay one `__share_group_state` partition log into a `ShareShard`, as of any point.

One streaming pass: batches are decoded and applied in log order until the stop point, so
memory holds the live share-partitions (plus, for the prune accounting, the sizes of the
batches above the current prune point), never the log. An optional `history` callback sees
the shard after every applied record, which is what the history table is built from.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from operator import attrgetter, sub

from sharestate import native
from sharestate.coordinator.shard import KAFKA, NativeContext, ShareShard
from sharestate.coordinator.share_rules import (
    DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
    ShareRules,
    rules_for,
)
from sharestate.coordinator.share_state import (
    ShareKey,
    SharePartitionState,
    ValueSlots,
    share_key,
    share_value,
    value_slots,
)
from sharestate.log import BatchHeader, ControlRecord, LogFinding, RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect, dialect_names
from sharestate.records.segment import Decoded, LogItem, QuietRun
from sharestate.replay.logs import END, AsOf, LogSource
from sharestate.replay.prune import PruneLedger

History = Callable[[int, int, ShareKey, ShareShard], None]
"""Called after each applied data record: (offset, timestamp, key, shard)."""

HistoryEntry = tuple[int, int, ShareKey, SharePartitionState | None, int | None, int | None,
                     int | None, int | None]
"""After an applied data record: (offset, timestamp, key, state or None when deleted,
max leader epoch, max state epoch, snapshot update count, last snapshot offset)."""

HistorySink = Callable[[list[HistoryEntry]], None]
"""Receives the history entries of one batch, in log order."""

Observer = Callable[[LogItem], None]
"""Sees each batch (or batch-level finding) a replay reads, before its records apply; a
batch whose first record is past the stop point is not read."""


@dataclass
class ShareLogResult:
    """A replayed state-topic partition: the shard and what the log looked like."""

    log: LogSource
    shard: ShareShard
    as_of: AsOf
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


def rules_of(log: LogSource, limit: int) -> ShareRules:
    """Replay rules for a log: those of its newest dialect (an upgraded log ends newest)."""
    newest = dialect_names()
    used = sorted(set(log.dialects), key=newest.index)
    return rules_for(used[0] if used else newest[0], limit)


def replay_share_log(log: LogSource, *, as_of: AsOf = END, semantics: str = KAFKA,
                     snapshot_update_records_per_snapshot: int = (
                         DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT),
                     history: History | None = None,
                     history_sink: HistorySink | None = None) -> ShareLogResult:
    """Replay `log` up to `as_of` (default: its end).

    `history` is called after every applied data record; `history_sink`, when given, is
    called after every batch with the `HistoryEntry` of each data record it applied (the
    fast way to build the history table: memory stays bounded by one batch). Clean records
    are applied in C (`sharestate._native.share_apply`) when the extension is built, the
    shard allows it and no `history` callback is set; every other record takes
    `_Applier.apply`, the Python path that defines the semantics.
    """
    replay = ShareReplay(log, as_of=as_of, semantics=semantics,
                         snapshot_update_records_per_snapshot=(
                             snapshot_update_records_per_snapshot),
                         history=history, collect_history=history_sink is not None)
    for entries in replay.steps():
        if entries and history_sink is not None:
            history_sink(entries)
    return replay.result


class ShareReplay:
    """`replay_share_log` as steps: iterate `steps()` (one per batch) to drive it.

    Each step yields the history entries of one batch (empty unless `collect_history`),
    so a caller can turn them into output between batches; `result` is complete when the
    iteration ends. `resume`, a result an earlier replay of the same log left between two
    steps (a checkpoint of the live service), continues that replay over `log`, which
    starts where it stopped; its semantics and rules are kept.
    """

    def __init__(self, log: LogSource, *, as_of: AsOf = END, semantics: str = KAFKA,
                 snapshot_update_records_per_snapshot: int = (
                     DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT),
                 history: History | None = None, collect_history: bool = False,
                 observe: Observer | None = None, resume: ShareLogResult | None = None
                 ) -> None:
        self.log = log
        if resume is None:
            shard = ShareShard(rules_of(log, snapshot_update_records_per_snapshot), semantics)
            self.result = ShareLogResult(log, shard, as_of)
        else:  # the same log, continued from where an earlier replay of it stopped
            resume.log = log
            self.result = resume
        self.history = history
        self.collect_history = collect_history
        self.observe = observe

    def steps(self) -> Iterator[list[HistoryEntry]]:
        result = self.result
        shard = result.shard
        as_of = result.as_of
        findings = result.findings
        history = self.history
        context = shard.native_context() if native.enabled() and history is None else None
        slots = native_slots(tuple(sorted(set(self.log.dialects)))) if context else {}
        apply = native.module.share_apply if context is not None else None
        bounded = not as_of.unbounded
        collect = self.collect_history
        observe = self.observe
        applier = _Applier(shard, history)
        # A quiet run goes to C in one call when nothing can stop the replay inside it.
        quiet = apply is not None and not bounded
        for item in self.log.items() if quiet else self.log.batches():
            if isinstance(item, QuietRun):
                if observe is not None:
                    observe(item)
                yield self._quiet_run(item, applier, context, slots)
                continue
            if isinstance(item, LogFinding):
                if observe is not None:
                    observe(item)
                findings.append(item)
                continue
            header = item.header
            records = item.records
            if records and bounded and as_of.passed(records[0].offset, records[0].timestamp):
                break
            if observe is not None:
                observe(item)
            findings.extend(item.findings)
            findings.extend(item.failed)
            if not records:  # a refused batch (its finding says why), or an empty one
                continue
            if result.log_start_offset is None:
                result.log_start_offset = header.base_offset
            entries: list[HistoryEntry] = []
            applier.header = header
            applier.entries = entries if collect else None
            if apply is not None and context is not None:
                applied, stopped, last_offset, last_timestamp = apply(
                    context, records, item.decoded, as_of.offset, as_of.time, slots,
                    applier.apply, applier.entries)
            else:
                applied, stopped, last_offset, last_timestamp = applier.apply_all(
                    records, item.decoded, as_of)
            if applied:
                result.last_applied_offset = last_offset
                result.last_applied_timestamp = last_timestamp
            result.records += applied
            if stopped:
                if result.last_applied_offset is not None:
                    result.log_end_offset = result.last_applied_offset + 1
                yield entries
                break
            result.bytes += header.size_in_bytes
            result.log_end_offset = header.last_offset + 1
            result.ledger.add(header.last_offset, len(records), header.size_in_bytes)
            self._advance_ledger()
            yield entries
        self._advance_ledger()

    def _advance_ledger(self) -> None:
        """Move the prune ledger to the shard's prune point; `result` says what it frees
        (after every batch, so a replay that never ends is always current)."""
        result = self.result
        result.ledger.advance(result.shard.last_redundant_offset())
        result.reclaimable_records = result.ledger.records
        result.reclaimable_bytes = result.ledger.bytes

    def _quiet_run(self, run: QuietRun, applier: _Applier, context: NativeContext | None,
                   slots: SlotTable) -> list[HistoryEntry]:
        """Apply a whole quiet run in C (unbounded replay only); its history entries.

        The ledger then advances once for the run: the prune point only rises, and nothing
        in a quiet run holds it back, so the batches it releases are the same."""
        assert context is not None
        result = self.result
        headers = run.headers
        if result.log_start_offset is None:
            result.log_start_offset = headers[0].base_offset
        entries: list[HistoryEntry] = []
        applier.run = run
        applier.lasts = None
        applier.entries = entries if self.collect_history else None
        applied, _, last_offset, last_timestamp = native.module.share_apply(
            context, run.records, run.decoded, None, None, slots, applier.apply_in_run,
            applier.entries)
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


_SIZE = attrgetter("size_in_bytes")
_LAST_OFFSET = attrgetter("last_offset")


class _Applier:
    """Applies the records of one batch to the shard (the Python path)."""

    __slots__ = ("entries", "header", "history", "lasts", "run", "shard")

    def __init__(self, shard: ShareShard, history: History | None) -> None:
        self.shard = shard
        self.history = history
        self.header: BatchHeader | None = None
        """The batch being applied (set before each batch)."""
        self.entries: list[HistoryEntry] | None = None
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
            if self.history is not None:
                self.history(offset, record.timestamp, key, self.shard)
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
