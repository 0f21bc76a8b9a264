"""Audit rules over `__share_group_state` and `__consumer_offsets`: the `audit_findings` rows.

Rules, severity, and what feeds them:
- `ShareAuditor` (per share-state record):
  - `epoch_regression`: a leader epoch (other than -1) below the highest seen: warning; a
    snapshot state epoch below the highest seen: error.
  - `state_epoch_bump`: info; an offset reset, or a re-initialisation after deletion.
  - `spso_regression`: error; the SPSO moved back within one state epoch.
  - `deletion`: info; a type-0 tombstone.
  - `snapshot_epoch_gap`: warning; a snapshot epoch other than the previous one + 1.
- `TransactionAuditor` (records and markers): `aborted_transaction`, warning on
  `__share_group_state` (Kafka's share coordinator never writes transactionally and its
  replay ignores markers, so the aborted records were applied), info on `__consumer_offsets`.
- `shard_finding_rows` (`ShareShard.findings`, code in snake case): `update_tombstone` error
  (Kafka's loader fails on it), `invalid_state_batch` error, `unknown_record_type` warning
  (Kafka skips it), `snapshot_tombstone_replay_failed` warning (a 4.0-dev replay defect),
  `pending_discarded` info (`transactional-acks` semantics). Past a partition's first
  `--max-findings` they are counted, not listed (`FindingCap`, as `state` does):
  `omitted_findings` (`omitted_finding_rows`), one per code, of that code's severity.
- `overlap_finding_rows` (`sharestate.tables.gold_pass`, from bronze files' statistics):
  `offset_order`, error; a segment read together with another one (the same ingest run)
  whose offsets it overlaps. A sound log's segments never overlap (a log cleaner's output
  replaces the segments it merged, through a `.swap` file); the CLI refuses the batches
  going back with `offset_order` findings, the replay applies each offset once.
- `log_finding_rows` (framing, CRC, decompression, undecodable records of either topic):
  `decode_error`, error.
- `before_log_rows` (a replay with a stop point, either topic): `as_of_before_log`, error;
  the stop point lies before the first record a partition's log holds (not offset 0): the
  records its state then rests on were deleted (Kafka's log start), so none is given.
- `cross_topic_rows` (share groups' metadata against the keys with state, `share_checks`):
  `orphaned_state`, `initialized_without_state`, `stuck_deleting`, all warnings (an
  orphan whose group has no share metadata at all is info: its `__consumer_offsets`
  partition may just not be in the input).

`ShareAuditor` sees each applied share-state record in log order: offset, timestamp, record
type and the decoded value, from a segment walk (`batch`) or from `share_state_records` rows
(`observe`). It applies records as Kafka's `kafka` semantics do (at their position, whatever
their producer) and remembers per live key the highest state epoch seen (Kafka's fencing
epoch), the state's state epoch, snapshot epoch and SPSO, and the highest leader epoch *within
that state epoch*: an initialisation (offset reset) writes leader epoch 0, so leader epochs
and SPSOs are only compared within one state epoch. A leader epoch or SPSO of -1 in an update
means "unchanged" and never regresses. Per tombstoned key it keeps the last state epoch
(None: unknown) until the key comes back; the first snapshot after a tombstone is a
re-initialisation (`state_epoch_bump` with `after_deletion`), reported unless its state epoch
is not above a known previous one. A key first seen mid-log (the log was pruned) starts clean;
a key whose state began with an update has no known state epoch until its first snapshot.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from sharestate import native
from sharestate.coordinator.group_metadata import SharePartitionMetadata
from sharestate.coordinator.share_checks import (
    initialized_without_state,
    orphaned_state,
    stuck_deleting,
)
from sharestate.coordinator.share_findings import ShardFinding
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareValue,
    share_key,
    share_value,
)
from sharestate.log import ControlRecord, LogFinding, RawRecord
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.keyvalue import KeyValue
from sharestate.records.segment import DecodedBatch, FindingCap, LogItem, QuietRun
from sharestate.replay.logs import AS_OF_BEFORE_LOG
from sharestate.replay.share_log import native_slots

INFO: Final = "info"
WARNING: Final = "warning"
ERROR: Final = "error"

class Rule(NamedTuple):
    """An audit rule: its default severity and the job that owns its `audit_findings`
    partition (that job alone replaces it)."""

    severity: str
    job: str


RULES: Final[Mapping[str, Rule]] = {
    "epoch_regression": Rule(WARNING, "replay"),
    "state_epoch_bump": Rule(INFO, "replay"),
    "spso_regression": Rule(ERROR, "replay"),
    "deletion": Rule(INFO, "replay"),
    "snapshot_epoch_gap": Rule(WARNING, "replay"),
    "aborted_transaction": Rule(INFO, "replay"),
    "update_tombstone": Rule(ERROR, "replay"),
    "invalid_state_batch": Rule(ERROR, "replay"),
    "unknown_record_type": Rule(WARNING, "replay"),
    "snapshot_tombstone_replay_failed": Rule(WARNING, "replay"),
    "pending_discarded": Rule(INFO, "replay"),
    "omitted_findings": Rule(WARNING, "replay"),
    "offset_order": Rule(ERROR, "replay"),
    "as_of_before_log": Rule(ERROR, "replay"),
    "orphaned_state": Rule(WARNING, "analytics"),
    "initialized_without_state": Rule(WARNING, "analytics"),
    "stuck_deleting": Rule(WARNING, "analytics"),
    "decode_error": Rule(ERROR, "analytics"),
    "quality_gate": Rule(WARNING, "quality"),
}
"""Every rule of `audit_findings`; a finding may raise its rule's default severity
(state-epoch regressions, share-topic aborts) or set its own (a quality check's)."""


def rules_of(job: str) -> tuple[str, ...]:
    """The rules whose `audit_findings` partitions `job` owns."""
    return tuple(name for name, rule in RULES.items() if rule.job == job)

Row = dict[str, Any]


def finding_row(rule: str, message: str, *, severity: str | None = None,
                topic: str | None = None, partition: int | None = None,
                offset: int | None = None, timestamp: int | None = None,
                group_id: str | None = None, topic_id: str | None = None,
                share_partition: int | None = None,
                detail: Mapping[str, Any] | None = None) -> Row:
    """One `audit_findings` row (`severity` defaults to the rule's): the one place such rows
    are made, `detail` serialised as sorted-key JSON."""
    return {
        "rule": rule,
        "severity": severity or RULES[rule].severity,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "group_id": group_id,
        "topic_id": topic_id,
        "share_partition": share_partition,
        "message": message,
        "detail_json": None if detail is None else json.dumps(
            detail, ensure_ascii=False, sort_keys=True, default=str),
    }


def _drain(rows: list[Row]) -> list[Row]:
    """Hand out `rows` and empty the list in place (auditors may share it)."""
    out = rows[:]
    rows.clear()
    return out


# -- transactions ---------------------------------------------------------------------------

Subject = ShareKey | str | None
"""What a record concerns: its share-partition, its group id (`__consumer_offsets`), or None."""

SubjectOf = Callable[[RawRecord, KeyValue], Subject]


def group_of(record: RawRecord, decoded: KeyValue) -> Subject:
    """The group id of a decoded `__consumer_offsets` record (every key starts with it)."""
    key = decoded.key
    return key[0] if decoded.error is None and key and isinstance(key[0], str) else None


@dataclass
class _OpenTransaction:
    first_offset: int
    last_offset: int
    records: int = 0
    subjects: set[ShareKey | str] = field(default_factory=set)


class OpenTransaction(NamedTuple):
    """A transaction a `TransactionAuditor` follows: its producer, offsets, record count and
    the share-partitions or groups its records concern."""

    producer_id: int
    first_offset: int
    last_offset: int
    records: int
    subjects: frozenset[ShareKey | str]


class TransactionAuditor:
    """Finds aborted transactional writes from records and markers seen in log order.

    Memory: one small entry per open transaction (its offsets, record count and the distinct
    groups or share-partitions it wrote). Markers match on producer id, as Kafka's do.
    """

    def __init__(self, topic: str, partition: int | None, rows: list[Row] | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.rows: list[Row] = [] if rows is None else rows
        self._open: dict[int, _OpenTransaction] = {}

    def drain(self) -> list[Row]:
        """The findings emitted since the last call."""
        return _drain(self.rows)

    def open_transactions(self) -> list[OpenTransaction]:
        """What it follows of the transactions still open, by producer in the order they
        opened (what `reopen` takes back)."""
        return [OpenTransaction(producer_id, txn.first_offset, txn.last_offset, txn.records,
                                frozenset(txn.subjects))
                for producer_id, txn in self._open.items()]

    def reopen(self, transactions: Iterable[OpenTransaction]) -> None:
        """Follow `transactions` (what `open_transactions` of another auditor gave), as that
        one would."""
        for producer_id, first, last, records, subjects in transactions:
            self._open[producer_id] = _OpenTransaction(first, last, records, set(subjects))

    def record(self, offset: int, producer_id: int, transactional: bool,
               subject: Subject = None) -> None:
        """A data record of a batch written by `producer_id` (transactionally or not)."""
        if not transactional:
            return
        txn = self._open.get(producer_id)
        if txn is None:
            txn = self._open[producer_id] = _OpenTransaction(offset, offset)
        txn.last_offset = offset
        txn.records += 1
        if subject is not None:
            txn.subjects.add(subject)

    def marker(self, offset: int, timestamp: int | None, producer_id: int, committed: bool,
               producer_epoch: int | None = None) -> None:
        """A COMMIT (`committed`) or ABORT marker; an ABORT of open records is a finding."""
        txn = self._open.pop(producer_id, None)
        if txn is None or committed:
            return
        keys = sorted(s for s in txn.subjects if isinstance(s, ShareKey))
        groups = sorted({s.group_id if isinstance(s, ShareKey) else s for s in txn.subjects})
        share_topic = self.topic == SHARE_STATE_TOPIC
        epoch = "" if producer_epoch is None else f" (epoch {producer_epoch})"
        message = (f"producer {producer_id}{epoch} aborted {txn.records} record(s) at offsets "
                   f"{txn.first_offset}-{txn.last_offset}")
        if share_topic:
            message += "; the share coordinator ignores markers and applied them"
        detail: dict[str, Any] = {"producer_id": producer_id, "producer_epoch": producer_epoch,
                                  "records": txn.records, "first_offset": txn.first_offset,
                                  "last_offset": txn.last_offset, "group_ids": groups}
        if keys:
            detail["share_partitions"] = [list(k) for k in keys]
        one_key = keys[0] if len(keys) == 1 else None
        self.rows.append(finding_row(
            "aborted_transaction", message, severity=WARNING if share_topic else INFO,
            topic=self.topic, partition=self.partition, offset=offset, timestamp=timestamp,
            group_id=groups[0] if len(groups) == 1 else None,
            topic_id=one_key.topic_id if one_key else None,
            share_partition=one_key.partition if one_key else None, detail=detail))

    def batch(self, item: DecodedBatch | LogFinding, subject: SubjectOf = group_of) -> None:
        """Feed every record of a decoded batch (framing findings are `log_finding_rows`'s).

        `subject` is called once per data record, in order, and names what it concerns.
        """
        if isinstance(item, LogFinding):
            return
        header = item.header
        for record, decoded in zip(item.records, item.decoded, strict=True):
            if isinstance(decoded, ControlRecord):
                if decoded.type in ("COMMIT", "ABORT"):
                    self.marker(record.offset, record.timestamp, header.producer_id,
                                decoded.type == "COMMIT", header.producer_epoch)
            elif isinstance(decoded, KeyValue):
                self.record(record.offset, header.producer_id, header.is_transactional,
                            subject(record, decoded))


# -- share-state records --------------------------------------------------------------------

class _Seen(NamedTuple):
    """What the rules remember of a live key (`max_leader_epoch`: within `state_epoch`)."""

    max_leader_epoch: int
    max_state_epoch: int | None
    state_epoch: int | None
    snapshot_epoch: int
    start_offset: int


class ShareAuditor:
    """Per-record rules over one `__share_group_state` partition, plus its transactions."""

    def __init__(self, partition: int | None, topic: str = SHARE_STATE_TOPIC,
                 dialects: tuple[str, ...] | None = None) -> None:
        """`dialects`: the record dialects of the log fed to `batch`; when given and the
        C extension is built, records that raise no finding are taken in C."""
        self.topic = topic
        self.partition = partition
        self.rows: list[Row] = []
        self.transactions = TransactionAuditor(topic, partition, self.rows)
        self._seen: dict[ShareKey, _Seen] = {}
        self._deleted: dict[ShareKey, int | None] = {}
        self._slots = (native_slots(tuple(sorted(set(dialects))))
                       if dialects and native.enabled() else None)

    def drain(self) -> list[Row]:
        """The findings emitted since the last call (its transactions' included)."""
        return _drain(self.rows)

    def memory(self) -> tuple[dict[ShareKey, _Seen], dict[ShareKey, int | None]]:
        """What the rules remember (copies): each live key's `_Seen`, in the order keys were
        first seen, and each deleted key's last state epoch (`remember` takes them back)."""
        return dict(self._seen), dict(self._deleted)

    def remember(self, seen: Mapping[ShareKey, _Seen],
                 deleted: Mapping[ShareKey, int | None]) -> None:
        """Go on from what `memory` of another auditor of the same log gave."""
        self._seen.update(seen)
        self._deleted.update(deleted)

    def batch(self, item: LogItem) -> None:
        """Feed a decoded batch (or quiet run): its share-state records and its
        transactional records."""
        if self._slots is not None and (isinstance(item, QuietRun) or (
                isinstance(item, DecodedBatch) and not item.header.is_transactional
                and not item.header.is_control)):
            native.module.share_audit(self._seen, _Seen, ShareKey, item.records, item.decoded,
                                      self._slots, self._decoded)
            return
        for batch in item.batches() if isinstance(item, QuietRun) else (item,):
            self.transactions.batch(batch, self._decoded)

    def _decoded(self, record: RawRecord, decoded: KeyValue) -> Subject:
        kind = decoded.kind
        if decoded.error is not None or kind is None or decoded.key is None:
            return None
        key = share_key(decoded.key, kind.key_layout())
        value = None
        if decoded.value is not None and decoded.value_version is not None:
            layout = kind.value_layout(decoded.value_version)
            assert layout is not None  # a decoded value has a layout
            value = share_value(decoded.value, layout)
        self.observe(record.offset, record.timestamp, kind.type_id, key, value)
        return key

    def observe(self, offset: int, timestamp: int | None, type_id: int, key: ShareKey,
                value: ShareValue | None) -> None:
        """One share-state record (`value` None: tombstone), in log order.

        Type-1 tombstones and unknown types change nothing here (the shard reports them);
        a snapshot without a state epoch is a ValueError, as in the shard.
        """
        prev = self._seen.get(key)
        at = _Where(self, offset, timestamp, key)
        if value is None:
            if type_id == SNAPSHOT_TYPE:
                self._delete(at, prev)
            return
        if type_id == SNAPSHOT_TYPE:
            self._snapshot(at, prev, value)
        elif type_id == UPDATE_TYPE:
            self._update(at, prev, value)

    def _snapshot(self, at: _Where, prev: _Seen | None, value: ShareValue) -> None:
        leader, state_epoch, start = value.leader_epoch, value.state_epoch, value.start_offset
        if state_epoch is None:
            raise ValueError(f"offset {at.offset}: snapshot value without a state epoch")
        same_epoch = prev is not None and state_epoch == prev.state_epoch
        if prev is None:
            if at.key in self._deleted:
                self._reinitialised(at, self._deleted.pop(at.key), state_epoch, start)
        elif same_epoch:
            self._leader_regression(at, prev, leader)
            self._spso_regression(at, prev, start)
        elif prev.state_epoch is not None:
            if state_epoch > prev.state_epoch:
                at.emit("state_epoch_bump",
                        f"state epoch {prev.state_epoch} -> {state_epoch}: offsets reset",
                        detail={"from": prev.state_epoch, "to": state_epoch,
                                "start_offset": start, "after_deletion": False})
            if prev.max_state_epoch is not None and state_epoch < prev.max_state_epoch:
                at.emit("epoch_regression",
                        f"snapshot state epoch {state_epoch} is below {prev.max_state_epoch} "
                        "already seen", severity=ERROR,
                        detail={"epoch": "state", "value": state_epoch,
                                "max_seen": prev.max_state_epoch})
        if prev is not None and value.snapshot_epoch != prev.snapshot_epoch + 1:
            at.emit("snapshot_epoch_gap",
                    f"snapshot epoch {value.snapshot_epoch} follows {prev.snapshot_epoch} "
                    f"(expected {prev.snapshot_epoch + 1})",
                    detail={"previous": prev.snapshot_epoch,
                            "snapshot_epoch": value.snapshot_epoch})
        max_state = state_epoch
        if prev is not None and prev.max_state_epoch is not None:
            max_state = max(prev.max_state_epoch, state_epoch)
        max_leader = leader
        if prev is not None and same_epoch:
            max_leader = max(prev.max_leader_epoch, leader)
        self._seen[at.key] = _Seen(max_leader, max_state, state_epoch, value.snapshot_epoch,
                                   start)

    @staticmethod
    def _reinitialised(at: _Where, before: int | None, state_epoch: int, start: int) -> None:
        if before is None or state_epoch > before:
            was = "unknown" if before is None else str(before)
            at.emit("state_epoch_bump",
                    f"re-initialised after deletion with state epoch {state_epoch} "
                    f"(was {was})",
                    detail={"from": before, "to": state_epoch, "start_offset": start,
                            "after_deletion": True})

    def _update(self, at: _Where, prev: _Seen | None, value: ShareValue) -> None:
        leader, start = value.leader_epoch, value.start_offset
        if prev is None:
            self._deleted.pop(at.key, None)
            self._seen[at.key] = _Seen(leader, None, None, value.snapshot_epoch, start)
            return
        self._leader_regression(at, prev, leader)
        self._spso_regression(at, prev, start)
        self._seen[at.key] = prev._replace(
            max_leader_epoch=max(prev.max_leader_epoch, leader),
            start_offset=prev.start_offset if start == -1 else start)

    def _delete(self, at: _Where, prev: _Seen | None) -> None:
        self._deleted[at.key] = prev.state_epoch if prev is not None else None
        if prev is None:
            at.emit("deletion", "tombstone for a share-partition without state",
                    detail={"had_state": False})
            return
        del self._seen[at.key]
        at.emit("deletion", "share-partition state deleted (tombstone)",
                detail={"had_state": True, "state_epoch": prev.state_epoch,
                        "start_offset": prev.start_offset})

    @staticmethod
    def _leader_regression(at: _Where, prev: _Seen, leader: int) -> None:
        if leader != -1 and leader < prev.max_leader_epoch:
            at.emit("epoch_regression",
                    f"leader epoch {leader} is below {prev.max_leader_epoch} already seen",
                    detail={"epoch": "leader", "value": leader,
                            "max_seen": prev.max_leader_epoch})

    @staticmethod
    def _spso_regression(at: _Where, prev: _Seen, start: int) -> None:
        if start != -1 and prev.start_offset != -1 and start < prev.start_offset:
            at.emit("spso_regression",
                    f"start offset moved back from {prev.start_offset} to {start} within "
                    "the same state epoch",
                    detail={"from": prev.start_offset, "to": start,
                            "state_epoch": prev.state_epoch})


class _Where(NamedTuple):
    """The record a `ShareAuditor` rule is looking at."""

    auditor: ShareAuditor
    offset: int
    timestamp: int | None
    key: ShareKey

    def emit(self, rule: str, message: str, *, severity: str | None = None,
             detail: Mapping[str, Any] | None = None) -> None:
        a, key = self.auditor, self.key
        a.rows.append(finding_row(
            rule, message, severity=severity, topic=a.topic, partition=a.partition,
            offset=self.offset, timestamp=self.timestamp, group_id=key.group_id,
            topic_id=key.topic_id, share_partition=key.partition, detail=detail))


# -- findings of the replay -----------------------------------------------------------------

def shard_finding_rows(findings: Iterable[ShardFinding], partition: int | None,
                       topic: str = SHARE_STATE_TOPIC) -> Iterator[Row]:
    """A row per `ShareShard.findings` entry; the rule is its code in snake case."""
    for f in findings:
        rule = _shard_rule(f.code)
        key = f.key
        yield finding_row(rule, f.message, severity=_severity(rule), topic=topic,
                          partition=partition, offset=f.offset,
                          group_id=key.group_id if key else None,
                          topic_id=key.topic_id if key else None,
                          share_partition=key.partition if key else None)


def omitted_finding_rows(cap: FindingCap, partition: int | None,
                         topic: str = SHARE_STATE_TOPIC) -> Iterator[Row]:
    """An `omitted_findings` row per `ShareShard.findings` code that `cap` counted past those
    it listed: the `FindingCap.summary` finding `state` prints, at the first one's offset,
    of the severity of that code's rule (`detail`: the rule and how many)."""
    for summary, (code, (count, _, _)) in zip(cap.summary(), cap.omitted.items(),
                                               strict=True):
        rule = _shard_rule(code)
        yield finding_row("omitted_findings", summary.message, severity=_severity(rule),
                          topic=topic, partition=partition, offset=summary.offset,
                          detail={"rule": rule, "count": count})


def _shard_rule(code: str) -> str:
    return code.replace("-", "_")


def _severity(rule: str) -> str:
    known = RULES.get(rule)
    return known.severity if known else WARNING


def log_finding_rows(findings: Iterable[LogFinding], topic: str,
                     partition: int | None) -> Iterator[Row]:
    """A `decode_error` row per finding of a replayed log (either topic)."""
    for f in findings:
        yield finding_row("decode_error", f.message, topic=topic, partition=partition,
                          offset=f.offset, detail={"kind": f.kind, "position": f.position})


def before_log_rows(findings: Iterable[LogFinding], topic: str,
                    partition: int | None) -> Iterator[Row]:
    """An `as_of_before_log` row per such finding of a replayed log (`before_log_finding`);
    its other findings are ingest's (`decode_error`)."""
    for f in findings:
        if f.kind == AS_OF_BEFORE_LOG:
            yield finding_row(AS_OF_BEFORE_LOG, f.message, topic=topic,
                              partition=partition, offset=f.offset)


# -- cross-topic ----------------------------------------------------------------------------

def cross_topic_rows(metadata: Mapping[str, SharePartitionMetadata],
                     state_keys: Mapping[ShareKey, int | None], *,
                     offsets_partition: int | None = None) -> Iterator[Row]:
    """Share groups' state-partition metadata against the keys with state.

    `state_keys` maps the live keys of *every* `__share_group_state` partition to their
    state partition (None: unknown); `metadata` is the group coordinator's
    `share_partitions` of the `__consumer_offsets` partition `offsets_partition`.
    """
    for orphan in orphaned_state(metadata, state_keys):
        key = ShareKey(*orphan.key)
        # A group with no share metadata at all: its offsets partition may simply not be in
        # the input, so this is worth knowing, not a defect.
        unknown = orphan.reason.value == "no_share_partition_metadata"
        yield finding_row(
            "orphaned_state",
            f"state without a place in the group's share metadata ({orphan.reason.value})",
            severity=INFO if unknown else None,
            topic=SHARE_STATE_TOPIC, partition=state_keys.get(key), group_id=key.group_id,
            topic_id=key.topic_id, share_partition=key.partition,
            detail={"reason": orphan.reason.value})
    for group_id, topic_id, partition in initialized_without_state(metadata, state_keys):
        info = metadata[group_id]
        yield finding_row(
            "initialized_without_state",
            "the group's share metadata says initialized, but there is no state",
            topic=CONSUMER_OFFSETS_TOPIC, partition=offsets_partition,
            offset=info.record_offset, group_id=group_id, topic_id=topic_id,
            share_partition=partition,
            detail={"topic_name": info.initialized[topic_id].topic_name})
    for topic in stuck_deleting(metadata, state_keys):
        yield finding_row(
            "stuck_deleting",
            f"topic {topic.topic_name} still being deleted since offset {topic.since_offset} "
            f"with state left in {len(topic.state_partitions)} partition(s)",
            topic=CONSUMER_OFFSETS_TOPIC, partition=offsets_partition,
            offset=topic.since_offset, timestamp=topic.since_timestamp,
            group_id=topic.group_id, topic_id=topic.topic_id,
            detail={"topic_name": topic.topic_name,
                    "state_partitions": list(topic.state_partitions)})


DECODE_ERROR_DETAIL: Final = ("kind", "source", "segment", "position", "raw_length")
"""The `decode_errors` columns a `decode_error` finding carries in its detail."""


def decode_error_row(error: Mapping[str, Any]) -> Row:
    """The `decode_error` finding of one `decode_errors` row (its raw bytes are not needed):
    the detail is the row's kind, source, segment, position and raw length, nulls left out."""
    return finding_row("decode_error", f"{error['kind']}: {error['message']}",
                       topic=error["topic"], partition=error["partition"],
                       offset=error["offset"],
                       detail={k: error[k] for k in DECODE_ERROR_DETAIL if error[k] is not None})
