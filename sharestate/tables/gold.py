"""Gold rows of the share-state replay as Arrow record batches.

`history_batch` turns the `HistoryEntry`s of `replay_share_log` into rows of
`share_partition_state_history` (the state after every applied record); `state_batch`
turns a replayed shard into rows of `share_partition_state` (every live share-partition as
of the replay's stop point). Both are columnar: the state batches go through
`columns.state_batches_array`, which runs in C when the extension is built.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute

from sharestate.analytics.context import StateContext
from sharestate.coordinator.share_state import ShareKey, SharePartitionState, StateBatch
from sharestate.replay.rows import has_delivery_complete_count
from sharestate.replay.share_log import HistoryEntry, ShareLogResult
from sharestate.tables.columns import int_columns, state_batches_array, transpose
from sharestate.tables.spec import table

SNAPSHOT, UPDATE, TOMBSTONE = "ShareSnapshot", "ShareUpdate", "Tombstone"
HISTORY_SCHEMA = table("share_partition_state_history").arrow_schema()


def _field(states: Sequence[Any], index: int) -> list[Any]:
    return [None if s is None else s[index] for s in states]


def _state_columns(states: Sequence[Any], dcc: bool) -> dict[str, Any]:
    return {
        "snapshot_epoch": _field(states, 0),
        "state_epoch": _field(states, 1),
        "leader_epoch": _field(states, 2),
        "start_offset": _field(states, 3),
        "delivery_complete_count": _field(states, 4) if dcc else [None] * len(states),
        "create_timestamp": _field(states, 5),
        "write_timestamp": _field(states, 6),
        "state_batches": state_batches_array(states),
    }


def _key_columns(keys: Sequence[ShareKey]) -> dict[str, list[Any]]:
    return {"group_id": [k[0] for k in keys], "topic_id": [k[1] for k in keys],
            "partition": [k[2] for k in keys]}




_HISTORY_INTS = {  # column: path in a HistoryEntry
    "partition": (2, 2), "record_offset": (0,), "timestamp": (1,),
    "snapshot_epoch": (3, 0), "state_epoch": (3, 1), "leader_epoch": (3, 2),
    "start_offset": (3, 3), "delivery_complete_count": (3, 4), "create_timestamp": (3, 5),
    "write_timestamp": (3, 6), "last_snapshot_offset": (7,), "max_leader_epoch": (4,),
    "max_state_epoch": (5,), "snapshot_update_count": (6,)}


def history_batch(entries: list[HistoryEntry], state_topic: str, state_partition: int,
                  dialect: str) -> pa.RecordBatch:
    """`share_partition_state_history` rows for replay history entries (one row each)."""
    n = len(entries)
    group, topic_id, states = transpose(entries, ((2, 0), (2, 1), (3,)))
    names = [name for name in _HISTORY_INTS
             if name != "delivery_complete_count" or has_delivery_complete_count(dialect)]
    columns: dict[str, Any] = dict(zip(names, int_columns(
        entries, tuple(_HISTORY_INTS[name] for name in names),
        tuple(HISTORY_SCHEMA.field(name).type for name in names)), strict=True))
    deleted = pa.array([s is None for s in states], pa.bool_())
    snapshots = pa.compute.equal(columns["last_snapshot_offset"], columns["record_offset"])
    columns.update({
        "state_topic": pa.repeat(pa.scalar(state_topic, pa.string()), n),
        "state_partition": pa.repeat(pa.scalar(state_partition, pa.int32()), n),
        "group_id": group, "topic_id": topic_id, "deleted": deleted,
        "record_type": pa.compute.if_else(deleted, TOMBSTONE, pa.compute.if_else(
            pa.compute.fill_null(snapshots, False), SNAPSHOT, UPDATE)),
        "state_batches": state_batches_array(states),
        "dialect": pa.repeat(pa.scalar(dialect, pa.string()), n)})
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in HISTORY_SCHEMA],
        schema=HISTORY_SCHEMA)


def state_batch(result: ShareLogResult, state_partition: int) -> pa.RecordBatch:
    """`share_partition_state` rows: every live share-partition of a replayed partition."""
    shard = result.shard
    keys = sorted(shard)
    states = [shard.state(k) for k in keys]
    dialect = shard.rules.dialect
    n = len(keys)
    columns = {
        "state_topic": [result.topic] * n,
        "state_partition": [state_partition] * n,
        **_key_columns(keys),
        **_state_columns(states, has_delivery_complete_count(dialect)),
        "last_snapshot_offset": [shard.last_snapshot_offset(k) for k in keys],
        "max_leader_epoch": [shard.leader_epoch(k) for k in keys],
        "max_state_epoch": [shard.state_epoch(k) for k in keys],
        "snapshot_update_count": [shard.snapshot_update_count(k) for k in keys],
        "as_of_offset": [result.last_applied_offset] * n,
        "as_of_timestamp": [result.last_applied_timestamp] * n,
        "dialect": [dialect] * n,
    }
    return pa.RecordBatch.from_pydict(columns, schema=table("share_partition_state")
                                      .arrow_schema())


def states_from_rows(rows: pa.RecordBatch
                     ) -> Iterator[tuple[StateContext, list[tuple[ShareKey, SharePartitionState]]]]:
    """`share_partition_state` rows back as (context, [(key, state)]) per state partition."""
    data = rows.to_pylist()
    by_partition: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in data:
        by_partition.setdefault((row["state_topic"], row["state_partition"]), []).append(row)
    for (topic, partition), group in by_partition.items():
        first = group[0]
        context = StateContext(topic, partition, first["as_of_offset"], first["as_of_timestamp"])
        yield context, [(ShareKey(r["group_id"], r["topic_id"], r["partition"]),
                         SharePartitionState(
                             r["snapshot_epoch"], r["state_epoch"], r["leader_epoch"],
                             r["start_offset"],
                             -1 if r["delivery_complete_count"] is None
                             else r["delivery_complete_count"],
                             r["create_timestamp"], r["write_timestamp"],
                             tuple(StateBatch(b["first_offset"], b["last_offset"],
                                              b["delivery_state"], b["delivery_count"])
                                   for b in r["state_batches"] or ())))
                        for r in group]
