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

from array import array
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_state import ShareKey
from sharestate.replay.logs import UNKNOWN_PARTITION

if TYPE_CHECKING:
    from sharestate.replay.share_log import ShareLogResult

COMPACT_AFTER = 4096
"""Batches below the point the ledger's columns keep before they are cut off the front
(then, and only when they are at least half of it)."""


class PruneLedger:
    """Records and bytes of the batches wholly below the (only rising) prune point.

    The batches above it stay listed, by column (last offset, records, bytes: 24 bytes a
    batch, as the log keeps them too until the point passes), so `below` can price any
    higher cut (a cold-partition snapshot's prune point) without another pass.
    """

    def __init__(self) -> None:
        self.last_offsets = array("q")
        self.counts = array("q")
        self.sizes = array("q")
        self.first = 0
        """The first listed batch not yet below the point (those before it are counted)."""
        self.records = 0
        self.bytes = 0

    def add(self, last_offset: int, records: int, size: int) -> None:
        self.last_offsets.append(last_offset)
        self.counts.append(records)
        self.sizes.append(size)

    def extend(self, last_offsets: Iterable[int], records: Iterable[int],
               sizes: Iterable[int]) -> None:
        """`add` for consecutive batches, by column."""
        self.last_offsets.extend(last_offsets)
        self.counts.extend(records)
        self.sizes.extend(sizes)

    def advance(self, prune_offset: int | None) -> None:
        if prune_offset is None:
            return
        first = self._end_below(prune_offset)
        if first == self.first:
            return
        self.records += sum(self.counts[self.first:first])
        self.bytes += sum(self.sizes[self.first:first])
        self.first = first
        if first >= COMPACT_AFTER and 2 * first >= len(self.last_offsets):
            for column in (self.last_offsets, self.counts, self.sizes):
                del column[:first]
            self.first = 0

    def forget_below(self, start: int, records: int, size: int) -> None:
        """Kafka's log start moved to `start` (deleteRecords): forget the batches wholly
        below it, `records` records of `size` bytes in all, whether counted below the point
        or still listed above it."""
        last_offsets, end = self.last_offsets, 0
        while end < len(last_offsets) and last_offsets[end] < start:
            end += 1
        uncounted = slice(self.first, max(end, self.first))
        self.records -= records - sum(self.counts[uncounted])
        self.bytes -= size - sum(self.sizes[uncounted])
        for column in (self.last_offsets, self.counts, self.sizes):
            del column[:end]
        self.first = max(self.first - end, 0)

    def below(self, offset: int) -> tuple[int, int]:
        """(records, bytes) of the batches wholly below `offset` (>= the prune point)."""
        end = self._end_below(offset)
        return (self.records + sum(self.counts[self.first:end]),
                self.bytes + sum(self.sizes[self.first:end]))

    def _end_below(self, offset: int) -> int:
        """The first listed batch from `first` on whose last offset is not below `offset`."""
        last_offsets, index, end = self.last_offsets, self.first, len(self.last_offsets)
        while index < end and last_offsets[index] < offset:
            index += 1
        return index


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
    partition = result.partition
    return {
        "state_topic": result.topic,
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
    return {"topic": result.topic, "partition": result.partition,
            **{name: row[name] for name in PRUNE_LINE}}
