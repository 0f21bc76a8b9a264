"""What the pipeline's audit of a partition remembers, as snapshot tables and back: the share
rules' memory of each live and deleted share-partition (`ShareAuditor`) and the open
transactions (`TransactionAuditor`), and the findings of the replay counted past those it
lists (`FindingCap`): the tables `audit_keys`, `audit_deleted`, `audit_transactions` and
`audit_cap` of `schemas/state/`, kept in `replay_state` with the replay's snapshot so a run
goes on from where the last one stopped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from sharestate.analytics.audit import OpenTransaction, ShareAuditor, TransactionAuditor, _Seen
from sharestate.coordinator.share_state import ShareKey
from sharestate.records.segment import FindingCap
from sharestate.replay.snapshot import table_of


def _key(key: ShareKey) -> dict[str, Any]:
    return {"group_id": key.group_id, "topic_id": key.topic_id, "partition": key.partition}


def _share_key(row: Mapping[str, Any]) -> ShareKey:
    return ShareKey(row["group_id"], row["topic_id"], row["partition"])


def share_audit_tables(auditor: ShareAuditor) -> dict[str, pa.Table]:
    """The memory of a share-state audit (its transactions' included)."""
    seen, deleted = auditor.memory()
    return {"audit_keys": table_of("audit_keys", [{**_key(key), **held._asdict()}
                                                  for key, held in seen.items()]),
            "audit_deleted": table_of("audit_deleted", [
                {**_key(key), "state_epoch": epoch} for key, epoch in deleted.items()]),
            "audit_transactions": transaction_table(auditor.transactions)}


def restore_share_audit(auditor: ShareAuditor, tables: Mapping[str, pa.Table]) -> None:
    """Give a fresh share-state audit the memory `share_audit_tables` took."""
    auditor.remember(
        {_share_key(row): _Seen(row["max_leader_epoch"], row["max_state_epoch"],
                                row["state_epoch"], row["snapshot_epoch"], row["start_offset"])
         for row in tables["audit_keys"].to_pylist()},
        {_share_key(row): row["state_epoch"] for row in tables["audit_deleted"].to_pylist()})
    restore_transactions(auditor.transactions, tables)


def transaction_table(auditor: TransactionAuditor) -> pa.Table:
    """The open transactions a transaction audit follows."""
    return table_of("audit_transactions", [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset,
         "last_offset": txn.last_offset, "records": txn.records,
         "share_partitions": [_key(s) for s in sorted(s for s in txn.subjects
                                                      if isinstance(s, ShareKey))],
         "groups": sorted(s for s in txn.subjects if isinstance(s, str))}
        for txn in auditor.open_transactions()])


def restore_transactions(auditor: TransactionAuditor, tables: Mapping[str, pa.Table]) -> None:
    """Give a fresh transaction audit the open transactions `transaction_table` took."""
    auditor.reopen(OpenTransaction(
        row["producer_id"], row["first_offset"], row["last_offset"], row["records"],
        frozenset([*map(_share_key, row["share_partitions"]), *row["groups"]]))
        for row in tables["audit_transactions"].to_pylist())


def cap_table(cap: FindingCap) -> dict[str, pa.Table]:
    """How many findings a partition's replay lists and those it counted past them."""
    return {"audit_cap": table_of("audit_cap", [{"limit": cap.limit, "omitted": [
        {"kind": kind, "count": count, "position": position, "offset": offset}
        for kind, (count, position, offset) in cap.omitted.items()]}])}


def restore_cap(tables: Mapping[str, pa.Table], source: str, listed: int) -> FindingCap:
    """The `FindingCap` `cap_table` took, `listed` findings listed under it (the restored
    shard's)."""
    (row,) = tables["audit_cap"].to_pylist()
    cap = FindingCap(row["limit"], source, "partition")
    cap.left = max(0, cap.limit - listed)
    cap.omitted = {counted["kind"]: [counted["count"], counted["position"], counted["offset"]]
                   for counted in row["omitted"]}
    return cap
