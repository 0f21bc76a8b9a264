"""Replay one `__share_group_state` partition log into a `ShareShard`, as of any point.

One streaming pass: batches are decoded and applied in log order until the stop point, so
memory holds the live share-partitions (plus, for the prune accounting, the sizes of the
batches above the current prune point), never the log. An optional `history` callback sees
the shard after every applied record, which is what the history table is built from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sharestate.coordinator.shard import KAFKA, ShareShard
from sharestate.coordinator.share_rules import (
    DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
    ShareRules,
    rules_for,
)
from sharestate.coordinator.share_state import ShareKey, share_key, share_value
from sharestate.log import ControlRecord, Finding
from sharestate.records.catalog import dialect_names
from sharestate.replay.logs import END, AsOf, PartitionLog

History = Callable[[int, int, ShareKey, ShareShard], None]
"""Called after each applied data record: (offset, timestamp, key, shard)."""


@dataclass(frozen=True, slots=True)
class LogFinding:
    """A record or byte range of the log that could not be applied, and why."""

    offset: int | None
    position: int | None
    kind: str
    message: str


@dataclass
class ShareLogResult:
    """A replayed state-topic partition: the shard and what the log looked like."""

    log: PartitionLog
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


class _PruneLedger:
    """Records and bytes of the batches wholly below the (only rising) prune point."""

    def __init__(self) -> None:
        self.above: deque[tuple[int, int, int]] = deque()  # (last offset, records, bytes)
        self.records = 0
        self.bytes = 0

    def add(self, last_offset: int, records: int, size: int) -> None:
        self.above.append((last_offset, records, size))

    def advance(self, prune_offset: int | None) -> None:
        if prune_offset is None:
            return
        above = self.above
        while above and above[0][0] < prune_offset:
            _, records, size = above.popleft()
            self.records += records
            self.bytes += size


def rules_of(log: PartitionLog, limit: int) -> ShareRules:
    """Replay rules for a log: those of its newest dialect (an upgraded log ends newest)."""
    newest = dialect_names()
    used = sorted({d.dialect for d in log.detections}, key=newest.index)
    return rules_for(used[0] if used else newest[0], limit)


def replay_share_log(log: PartitionLog, *, as_of: AsOf = END, semantics: str = KAFKA,
                     snapshot_update_records_per_snapshot: int = (
                         DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT),
                     history: History | None = None) -> ShareLogResult:
    """Replay `log` up to `as_of` (default: its end)."""
    shard = ShareShard(rules_of(log, snapshot_update_records_per_snapshot), semantics)
    result = ShareLogResult(log, shard, as_of)
    ledger = _PruneLedger()
    findings = result.findings
    replay = shard.replay
    for item in log.batches():
        if isinstance(item, Finding):
            findings.append(LogFinding(item.offset, item.position, item.kind, item.message))
            continue
        header = item.header
        records = item.records
        if not records:
            continue
        if as_of.passed(records[0].offset, records[0].timestamp):
            break
        for finding in item.findings:
            findings.append(LogFinding(finding.offset, finding.position, finding.kind,
                                       finding.message))
        if result.log_start_offset is None:
            result.log_start_offset = header.base_offset
        producer_id = header.producer_id
        transactional = header.is_transactional
        stopped = False
        applied = 0
        for record, decoded in zip(records, item.decoded, strict=True):
            offset = record.offset
            if as_of.passed(offset, record.timestamp):
                stopped = True
                break
            applied += 1
            if isinstance(decoded, ControlRecord):
                if decoded.type in ("COMMIT", "ABORT"):
                    shard.end_transaction(producer_id, decoded.type == "COMMIT", offset)
            elif isinstance(decoded, Finding):
                findings.append(LogFinding(offset, header.position, decoded.kind,
                                           decoded.message))
            elif decoded.error is not None or decoded.kind is None or decoded.key is None:
                error = decoded.error
                findings.append(LogFinding(offset, header.position,
                                           error.kind if error else "undecoded",
                                           error.message if error else "no key"))
            else:
                kind = decoded.kind
                key = share_key(decoded.key, kind.key_layout())
                value: Any = None
                if decoded.value is not None and decoded.value_version is not None:
                    layout = kind.value_layout(decoded.value_version)
                    assert layout is not None
                    value = share_value(decoded.value, layout)
                replay(offset, kind.type_id, key, value, producer_id, transactional)
                if history is not None:
                    history(offset, record.timestamp, key, shard)
            result.last_applied_offset = offset
            result.last_applied_timestamp = record.timestamp
        result.records += applied
        if stopped:
            if result.last_applied_offset is not None:
                result.log_end_offset = result.last_applied_offset + 1
            break
        result.bytes += header.size_in_bytes
        result.log_end_offset = header.last_offset + 1
        ledger.add(header.last_offset, len(records), header.size_in_bytes)
        ledger.advance(shard.last_redundant_offset())
    ledger.advance(shard.last_redundant_offset())
    result.reclaimable_records = ledger.records
    result.reclaimable_bytes = ledger.bytes
    return result
