"""The prune point of a `__share_group_state` partition and what follows from it: the one
place `sharestate prune`, the `prune_recommendations` table and the live service get it.

The point itself is Kafka's `lastRedundantOffset` (`coordinator.offsets_manager`, which the
shard keeps): the oldest latest-snapshot offset over the tracked keys; the keys sitting at
that offset hold it back. The cold-partition snapshot job would write a fresh snapshot of
such a key at the log end, so after snapshotting the holding keys the point becomes the
oldest latest-snapshot offset of the *other* tracked keys, or the log end offset when there
are none. Reclaimable figures count whole batches below a point, as Kafka's
`deleteRecords` frees them (`PruneLedger`, fed during the replay).

When nothing holds the point back (no tracked key) the cold-snapshot figures equal the
current ones. Under the `transactional-acks` semantics with open transactions they are null:
the first pending record caps any prune point and the shard does not expose it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_state import ShareKey
from sharestate.replay.logs import UNKNOWN_PARTITION

if TYPE_CHECKING:
    from sharestate.replay.share_log import ShareLogResult


class PruneLedger:
    """Records and bytes of the batches wholly below the (only rising) prune point.

    The batches above it stay listed, (last offset, records, bytes) each, so `below` can
    price any higher cut (a cold-partition snapshot's prune point) without another pass.
    """

    def __init__(self) -> None:
        self.above: deque[tuple[int, int, int]] = deque()
        self.records = 0
        self.bytes = 0

    def add(self, last_offset: int, records: int, size: int) -> None:
        self.above.append((last_offset, records, size))

    def extend(self, batches: Iterable[tuple[int, int, int]]) -> None:
        """`add` for consecutive batches: (last offset, records, bytes) each."""
        self.above.extend(batches)

    def advance(self, prune_offset: int | None) -> None:
        if prune_offset is None:
            return
        above = self.above
        while above and above[0][0] < prune_offset:
            _, records, size = above.popleft()
            self.records += records
            self.bytes += size

    def below(self, offset: int) -> tuple[int, int]:
        """(records, bytes) of the batches wholly below `offset` (>= the prune point)."""
        records, size = self.records, self.bytes
        for last_offset, count, batch_bytes in self.above:
            if last_offset >= offset:
                break
            records += count
            size += batch_bytes
        return records, size


def holding_keys(shard: ShareShard) -> list[ShareKey]:
    """The keys whose latest snapshot is the oldest: they hold the prune point back."""
    offsets = {k: o for k in shard if (o := shard.last_snapshot_offset(k)) is not None}
    if not offsets:
        return []
    oldest = min(offsets.values())
    return sorted(k for k, o in offsets.items() if o == oldest)


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


PRUNE_LINE = ("prune_offset", "log_start_offset", "log_end_offset", "reclaimable_records",
              "reclaimable_bytes", "holding")
"""The recommendation's fields a `sharestate prune` line carries after topic and partition."""


def prune_row(result: ShareLogResult) -> dict[str, Any]:
    """One state-topic partition as `sharestate prune` prints it: the recommendation's
    current figures, under the partition's topic and number (null when unknown)."""
    row = prune_recommendation(result)
    return {"topic": result.log.topic, "partition": result.log.partition,
            **{name: row[name] for name in PRUNE_LINE}}
