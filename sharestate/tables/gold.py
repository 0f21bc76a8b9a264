"""Gold rows of the share-state replay as Arrow record batches.

`history_batch` turns the `HistoryEntry`s a replay adds to `history_columns` into rows of
`share_partition_state_history` (the state after every applied record), column-wise (in C,
as the replay makes them, when the extension is built);
`state_batch` gives the rows of `share_partition_state` (every live share-partition as of
the replay's stop point) that `replay.rows.state_rows` builds for every front end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute

from sharestate.analytics.context import StateContext
from sharestate.coordinator.share_state import ShareKey, SharePartitionState, StateBatch
from sharestate.replay.rows import has_delivery_complete_count, state_rows
from sharestate.replay.share_log import ShareLogResult
from sharestate.tables.columns import Path, RowColumns
from sharestate.tables.spec import table

SNAPSHOT, UPDATE, TOMBSTONE = "ShareSnapshot", "ShareUpdate", "Tombstone"
HISTORY_SCHEMA = table("share_partition_state_history").arrow_schema()
STATE_SCHEMA = table("share_partition_state").arrow_schema()


_HISTORY_COLUMNS = {  # column: path in a HistoryEntry
    "record_offset": (0,), "timestamp": (1,), "group_id": (2, 0), "topic_id": (2, 1),
    "partition": (2, 2), "snapshot_epoch": (3, 0), "state_epoch": (3, 1),
    "leader_epoch": (3, 2), "start_offset": (3, 3), "delivery_complete_count": (3, 4),
    "create_timestamp": (3, 5), "write_timestamp": (3, 6), "state_batches": (3, 7),
    "last_snapshot_offset": (7,), "max_leader_epoch": (4,), "max_state_epoch": (5,),
    "snapshot_update_count": (6,)}


def history_columns(dialect: str) -> RowColumns:
    """Where a replay's `HistoryEntry`s go (its `history` rows) to become
    `share_partition_state_history` columns (`history_batch`)."""
    return RowColumns([(path, HISTORY_SCHEMA.field(name).type)
                       for name, path in _history_paths(dialect).items()])


def _history_paths(dialect: str) -> dict[str, Path]:
    return {name: path for name, path in _HISTORY_COLUMNS.items()
            if name != "delivery_complete_count" or has_delivery_complete_count(dialect)}


def history_batch(entries: RowColumns, state_topic: str, state_partition: int,
                  dialect: str) -> pa.RecordBatch:
    """`share_partition_state_history` rows of the history entries added to `entries`
    (`history_columns`) since the last batch, one row each."""
    columns: dict[str, Any] = dict(zip(_history_paths(dialect), entries.take(), strict=True))
    n = len(columns["record_offset"])
    deleted = columns["state_batches"].is_null()  # a deleted key has no state
    snapshots = pa.compute.equal(columns["last_snapshot_offset"], columns["record_offset"])
    columns.update({
        "state_topic": pa.repeat(pa.scalar(state_topic, pa.string()), n),
        "state_partition": pa.repeat(pa.scalar(state_partition, pa.int32()), n),
        "deleted": deleted,
        "record_type": pa.compute.if_else(deleted, TOMBSTONE, pa.compute.if_else(
            pa.compute.fill_null(snapshots, False), SNAPSHOT, UPDATE)),
        "dialect": pa.repeat(pa.scalar(dialect, pa.string()), n)})
    return pa.RecordBatch.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in HISTORY_SCHEMA],
        schema=HISTORY_SCHEMA)


def state_batch(result: ShareLogResult) -> pa.RecordBatch:
    """`share_partition_state` rows: every live share-partition of a replayed partition
    (`state_rows`, the one builder of these rows)."""
    return pa.RecordBatch.from_pylist(state_rows(result), schema=STATE_SCHEMA)


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
