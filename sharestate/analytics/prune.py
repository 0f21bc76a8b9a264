"""Pruning recommendation per `__share_group_state` partition: the `prune_recommendations` row.

Kafka's prune point (`lastRedundantOffset`) is the oldest latest-snapshot offset over the
tracked keys (kafka-facts §6); the keys sitting at that offset hold it back. The
cold-partition snapshot job would write a fresh snapshot of such a key at the log end, so
after snapshotting the holding keys the prune point becomes the oldest latest-snapshot
offset of the *other* tracked keys, or the log end offset when there are none. Reclaimable
figures count whole batches below a point, as Kafka's `deleteRecords` frees them.

When nothing holds the point back (no tracked key) the cold-snapshot figures equal the
current ones. Under the `transactional-acks` semantics with open transactions they are null:
the first pending record caps any prune point and the shard does not expose it.
"""

from __future__ import annotations

from typing import Any

from sharestate.analytics.context import UNKNOWN_PARTITION
from sharestate.replay.rows import holding_keys
from sharestate.replay.share_log import ShareLogResult


def prune_recommendation(result: ShareLogResult) -> dict[str, Any]:
    """The `prune_recommendations` row of one replayed state partition."""
    shard = result.shard
    point = shard.last_redundant_offset()
    snapshots = [o for k in shard if (o := shard.last_snapshot_offset(k)) is not None]
    holding = []
    for key in holding_keys(shard):
        state = shard.state(key)
        holding.append({"group_id": key.group_id, "topic_id": key.topic_id,
                        "partition": key.partition,
                        "last_snapshot_offset": shard.last_snapshot_offset(key),
                        "write_timestamp": state.write_timestamp if state else None})
    cold: int | None = point
    cold_records: int | None = result.reclaimable_records
    cold_bytes: int | None = result.reclaimable_bytes
    if shard.pending_producers():
        cold = cold_records = cold_bytes = None
    elif snapshots and result.log_end_offset is not None:
        oldest = min(snapshots)
        cold = min((o for o in snapshots if o != oldest), default=result.log_end_offset)
        cold_records, cold_bytes = result.ledger.below(cold)
    partition = result.log.partition
    return {
        "state_topic": result.log.topic,
        "state_partition": UNKNOWN_PARTITION if partition is None else partition,
        "prune_offset": point,
        "log_start_offset": result.log_start_offset,
        "log_end_offset": result.log_end_offset,
        "reclaimable_records": result.reclaimable_records,
        "reclaimable_bytes": result.reclaimable_bytes,
        "holding": holding,
        "cold_snapshot_prune_offset": cold,
        "cold_snapshot_reclaimable_records": cold_records,
        "cold_snapshot_reclaimable_bytes": cold_bytes,
        "live_keys": len(shard),
        "as_of_offset": result.last_applied_offset,
    }
