"""The prune point of a `__share_group_state` partition (Kafka's `ShareCoordinatorOffsetsManager`).

Kafka keeps, per key, the log offset of the key's latest ShareSnapshot record, and after each
type-0 record (snapshot or tombstone) at offset `o` for key `k` sets `offsets[k] = o` and
`lastRedundantOffset = min(offsets.values())`, computed while `k` is still present; a
tombstone then drops `k`. Everything below that offset is redundant and the prune job deletes
it. Keys that never had a snapshot do not hold the point back; ShareUpdate records never move it.

Kafka's loop may stop early when it meets the current value, but it only stops on a value that
is already the minimum (the stored value never exceeds any tracked offset), so a plain `min`
gives the same result.
"""

from __future__ import annotations

from collections.abc import Hashable

LONG_MAX = (1 << 63) - 1
"""Kafka's initial `lastRedundantOffset` (Long.MAX_VALUE): no snapshot seen yet."""


class OffsetsManager:
    """Latest-snapshot offsets per key and the resulting last redundant offset."""

    __slots__ = ("_offsets", "raw")

    def __init__(self) -> None:
        self._offsets: dict[Hashable, int] = {}
        self.raw = LONG_MAX
        """The internal value, Long.MAX_VALUE until the first type-0 record."""

    @classmethod
    def restored(cls, offsets: dict[Hashable, int], raw: int) -> OffsetsManager:
        """A manager holding `offsets` (what `tracked()` gave) and internal value `raw`."""
        manager = cls()
        manager._offsets = offsets
        manager.raw = raw
        return manager

    def update_state(self, key: Hashable, offset: int, is_delete: bool) -> None:
        """Record a type-0 record (`is_delete` for a tombstone) at `offset` for `key`."""
        offsets = self._offsets
        offsets[key] = offset
        self.raw = min(offsets.values())
        if is_delete:
            del offsets[key]

    def last_redundant_offset(self) -> int | None:
        """The prune point, or None when it is <= 0 or was never set (Kafka's empty)."""
        raw = self.raw
        return raw if 0 < raw < LONG_MAX else None

    def snapshot_offset(self, key: Hashable) -> int | None:
        """The offset of `key`'s latest snapshot, or None when it is not tracked."""
        return self._offsets.get(key)

    def tracked(self) -> dict[Hashable, int]:
        """The live map key -> latest snapshot offset (read-only by contract)."""
        return self._offsets

    def __len__(self) -> int:
        return len(self._offsets)
