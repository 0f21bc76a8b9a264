"""A `__share_group_state` replay's state as snapshot tables and back (see
`sharestate.replay.snapshot` for the tables; `ShareReplay.snapshot` / `restore` call these)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from sharestate.coordinator.shard import KeyEntry, PendingRecord, ShareShard
from sharestate.coordinator.share_findings import ShardFinding
from sharestate.coordinator.share_rules import rules_for
from sharestate.coordinator.share_state import (
    ShareKey,
    SharePartitionState,
    ShareValue,
    StateBatch,
)
from sharestate.log import LogFinding
from sharestate.replay.prune import PruneLedger
from sharestate.replay.share_log import ShareLogResult
from sharestate.replay.snapshot import Snapshot, schema, table_of

_STATE = SharePartitionState._fields[:-1]
"""The state's scalar fields (its batches are a column of their own)."""
_VALUE = ("is_snapshot", "snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
          "delivery_complete_count", "create_timestamp", "write_timestamp")


def share_snapshot(result: ShareLogResult, stopped: bool) -> Snapshot:
    """The snapshot of a share replay's state (`stopped`: it reached its stop point)."""
    shard = result.shard
    ledger = result.ledger
    first = ledger.first
    replay = {
        "topic": result.topic, "partition": result.partition, "name": result.name,
        "dialect": shard.rules.dialect, "semantics": shard.semantics,
        "snapshot_update_records_per_snapshot": shard.rules.snapshot_update_records_per_snapshot,
        "stopped": stopped, "last_applied_offset": result.last_applied_offset,
        "last_applied_timestamp": result.last_applied_timestamp,
        "log_start_offset": result.log_start_offset, "log_end_offset": result.log_end_offset,
        "records": result.records, "bytes": result.bytes,
        "reclaimable_records": ledger.records, "reclaimable_bytes": ledger.bytes,
        "last_redundant_offset_raw": shard.last_redundant_offset_raw}
    tables = {
        "share_replay": table_of("share_replay", [replay]),
        "share_keys": table_of("share_keys", [_key_row(entry) for entry in shard.entries()]),
        "share_pending": table_of("share_pending", [
            _pending_row(producer_id, record)
            for producer_id, record in shard.pending_records()]),
        "prune_ledger": pa.Table.from_arrays(  # copies: the ledger goes on growing
            [pa.array(np.frombuffer(column, dtype=np.int64)[first:].copy())
             for column in (ledger.last_offsets, ledger.counts, ledger.sizes)],
            schema=schema("prune_ledger")),
        "shard_findings": table_of("shard_findings", [
            {"offset": f.offset, "code": f.code, "message": f.message, **_key(f.key)}
            for f in shard.findings]),
        "log_findings": log_findings_table(result.findings),
    }
    return Snapshot(result.topic, result.partition, tables)


def restore_share(snapshot: Snapshot) -> tuple[ShareLogResult, bool]:
    """The state a share snapshot holds, and whether its replay had stopped."""
    [replay] = snapshot.table("share_replay").to_pylist()
    rules = rules_for(replay["dialect"], replay["snapshot_update_records_per_snapshot"])
    shard = ShareShard.restored(
        rules, replay["semantics"],
        (_entry(row) for row in snapshot.table("share_keys").to_pylist()),
        replay["last_redundant_offset_raw"],
        ((row["producer_id"], _pending(row))
         for row in snapshot.table("share_pending").to_pylist()),
        (ShardFinding(row["offset"], row["code"], row["message"], _share_key(row))
         for row in snapshot.table("shard_findings").to_pylist()))
    ledger = PruneLedger()
    rows = snapshot.table("prune_ledger")
    for column, name in ((ledger.last_offsets, "last_offset"), (ledger.counts, "records"),
                         (ledger.sizes, "bytes")):
        column.frombytes(rows[name].to_numpy().astype(np.int64).tobytes())
    ledger.records, ledger.bytes = replay["reclaimable_records"], replay["reclaimable_bytes"]
    result = ShareLogResult(
        replay["topic"], replay["partition"], replay["name"], shard,
        last_applied_offset=replay["last_applied_offset"],
        last_applied_timestamp=replay["last_applied_timestamp"],
        log_start_offset=replay["log_start_offset"], log_end_offset=replay["log_end_offset"],
        records=replay["records"], bytes=replay["bytes"],
        reclaimable_records=ledger.records, reclaimable_bytes=ledger.bytes,
        findings=log_findings(snapshot), ledger=ledger)
    return result, replay["stopped"]


def log_findings_table(findings: list[LogFinding]) -> pa.Table:
    """The `log_findings` table of a replay's findings."""
    return table_of("log_findings", [
        {"kind": f.kind, "message": f.message, "position": f.position, "offset": f.offset,
         "raw": f.raw, "raw_length": f.raw_length, "source": f.source} for f in findings])


def log_findings(snapshot: Snapshot) -> list[LogFinding]:
    """The findings a snapshot's `log_findings` table holds."""
    return [LogFinding(**row) for row in snapshot.table("log_findings").to_pylist()]


def _key(key: ShareKey | None) -> dict[str, Any]:
    return {"group_id": key.group_id if key else None, "topic_id": key.topic_id if key else None,
            "partition": key.partition if key else None}


def _share_key(row: dict[str, Any]) -> ShareKey | None:
    return None if row["group_id"] is None else ShareKey(row["group_id"], row["topic_id"],
                                                         row["partition"])


def _key_row(entry: KeyEntry) -> dict[str, Any]:
    state = entry.state
    row = {**_key(entry.key), "live": state is not None,
           **dict.fromkeys(_STATE), "state_batches": None,
           "max_leader_epoch": entry.leader_epoch, "max_state_epoch": entry.state_epoch,
           "snapshot_update_count": entry.snapshot_update_count,
           "last_snapshot_offset": entry.last_snapshot_offset}
    if state is not None:
        row.update(zip(_STATE, state, strict=False))
        row["state_batches"] = state.batches
    return row


def _batches(rows: list[dict[str, int]] | None) -> tuple[StateBatch, ...]:
    return tuple(StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"],
                            b["delivery_count"]) for b in rows or ())


def _entry(row: dict[str, Any]) -> KeyEntry:
    key = _share_key(row)
    assert key is not None  # the column is not nullable
    state = SharePartitionState(
        row["snapshot_epoch"], row["state_epoch"], row["leader_epoch"], row["start_offset"],
        row["delivery_complete_count"], row["create_timestamp"], row["write_timestamp"],
        _batches(row["state_batches"])) if row["live"] else None
    return KeyEntry(key, state, row["max_leader_epoch"], row["max_state_epoch"],
                    row["snapshot_update_count"], row["last_snapshot_offset"])


def _pending_row(producer_id: int, record: PendingRecord) -> dict[str, Any]:
    value = record.value
    row = {"producer_id": producer_id, "offset": record.offset, "type_id": record.type_id,
           **_key(record.key), "tombstone": value is None, **dict.fromkeys(_VALUE),
           "state_batches": None}
    if value is not None:
        row.update({name: getattr(value, name) for name in _VALUE})
        row["state_batches"] = value.batches
    return row


def _pending(row: dict[str, Any]) -> PendingRecord:
    key = _share_key(row)
    assert key is not None  # the column is not nullable
    value = None if row["tombstone"] else ShareValue(
        row["is_snapshot"], row["snapshot_epoch"], row["state_epoch"], row["leader_epoch"],
        row["start_offset"], row["delivery_complete_count"], row["create_timestamp"],
        row["write_timestamp"], _batches(row["state_batches"]))
    return PendingRecord(row["offset"], row["type_id"], key, value)
