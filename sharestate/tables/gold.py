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
from sharestate.replay.share_log import HistoryEntry, ShareLogResult
from sharestate.replay.views import has_delivery_complete_count
from sharestate.tables.columns import state_batches_array, transpose
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




_HISTORY_PATHS = (
    (2, 0), (2, 1), (2, 2),  # key
    (0,), (1,),  # record offset, timestamp
    (3, 0), (3, 1), (3, 2), (3, 3), (3, 4), (3, 5), (3, 6),  # state fields
    (7,), (4,), (5,), (6,),  # last snapshot offset, max epochs, update count
)


def history_batch(entries: list[HistoryEntry], state_topic: str, state_partition: int,
                  dialect: str) -> pa.RecordBatch:
    """`share_partition_state_history` rows for replay history entries (one row each)."""
    n = len(entries)
    (group, topic_id, partition, offsets, timestamps, snapshot_epoch, state_epoch, leader_epoch,
     start_offset, dcc, created, written, last_snapshot, max_leader, max_state,
     count) = transpose(entries, _HISTORY_PATHS)
    states = transpose(entries, ((3,),))[0]
    deleted = pa.array([s is None for s in states], pa.bool_())
    offsets_array = pa.array(offsets, pa.int64())
    snapshots = pa.compute.equal(pa.array(last_snapshot, pa.int64()), offsets_array)
    kinds = pa.compute.if_else(deleted, TOMBSTONE,
                               pa.compute.if_else(pa.compute.fill_null(snapshots, False),
                                                  SNAPSHOT, UPDATE))
    columns = {
        "state_topic": pa.array([state_topic] * n, pa.string()),
        "state_partition": pa.array([state_partition] * n, pa.int32()),
        "group_id": group, "topic_id": topic_id, "partition": partition,
        "record_offset": offsets_array, "timestamp": timestamps,
        "record_type": kinds, "deleted": deleted,
        "snapshot_epoch": snapshot_epoch, "state_epoch": state_epoch,
        "leader_epoch": leader_epoch, "start_offset": start_offset,
        "delivery_complete_count": dcc if has_delivery_complete_count(dialect) else [None] * n,
        "create_timestamp": created, "write_timestamp": written,
        "state_batches": state_batches_array(states),
        "last_snapshot_offset": last_snapshot, "max_leader_epoch": max_leader,
        "max_state_epoch": max_state, "snapshot_update_count": count,
        "dialect": pa.array([dialect] * n, pa.string()),
    }
    return pa.RecordBatch.from_pydict(columns, schema=HISTORY_SCHEMA)


def state_batch(result: ShareLogResult, state_partition: int) -> pa.RecordBatch:
    """`share_partition_state` rows: every live share-partition of a replayed partition."""
    shard = result.shard
    keys = sorted(shard)
    states = [shard.state(k) for k in keys]
    dialect = shard.rules.dialect
    n = len(keys)
    columns = {
        "state_topic": [result.log.topic] * n,
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
