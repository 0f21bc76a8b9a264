"""Iteration orders of the Java hash tables whose order reaches the share-state log.

Kafka emits the records of a cold-partition snapshot in the iteration order of the shard's
`TimelineHashMap` and those of a topic-deletion cleanup in the order of a `java.util.HashSet`
filled from that map. Both orders are reproduced here from hash codes alone:

- `TimelineOrder` models Kafka's `BaseHashTable`: a power-of-two array (initially 2 slots)
  whose slot is the top bits of `hash * -7046029254386353131` (Fibonacci hashing), colliding
  entries kept in insertion order, a replacement keeping its place, and the array doubled
  when `(size + 1) * 0.75 > length` before any put (a replacement included). Doubling maps
  slot s to 2s or 2s+1 and keeps each slot's order, so the order is always "by slot, then by
  time of insertion", which is what `ordered()` sorts by.
- `hash_set_order` models `java.util.HashMap` filled in a given order: 16 buckets to start,
  bucket `(h ^ (h >>> 16)) & (n - 1)`, doubled when the size passes 0.75 n or (below 64
  buckets) when a bucket would hold 9 entries; splits keep each bucket's order. Buckets
  that Java would turn into trees (9+ entries with 64+ buckets) are kept in insertion order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_MASK64 = (1 << 64) - 1
_FIBONACCI = -7046029254386353131
_MAX_CAPACITY = 1 << 30


def timeline_slot(hash_code: int, length: int) -> int:
    """`BaseHashTable.findSlot`: the slot of a hash code in an array of `length` slots."""
    return ((hash_code * _FIBONACCI) & _MASK64) >> (65 - length.bit_length())


class TimelineOrder(Generic[K]):
    """The iteration order of a Kafka `TimelineHashMap` (created with expected size 0)."""

    __slots__ = ("_counter", "_hash", "_hashes", "_length", "_seq")

    def __init__(self, hash_code: Callable[[K], int]) -> None:
        self._hash = hash_code
        self._hashes: dict[K, int] = {}
        self._seq: dict[K, int] = {}
        self._length = 2
        self._counter = 0

    def put(self, key: K) -> None:
        """A `put` of `key` (new or replacing)."""
        seq = self._seq
        if (len(seq) + 1) * 0.75 > self._length and self._length < _MAX_CAPACITY:
            self._length *= 2
        if key not in seq:
            seq[key] = self._counter
            self._counter += 1

    def remove(self, key: K) -> None:
        """A `remove` of `key` (absent keys are ignored)."""
        self._seq.pop(key, None)

    def ordered(self) -> list[K]:
        """The keys in the map's iteration order."""
        hashes = self._hashes
        for key in self._seq:
            if key not in hashes:
                hashes[key] = self._hash(key)
        length = self._length
        seq = self._seq
        return sorted(seq, key=lambda k: (timeline_slot(hashes[k], length), seq[k]))

    def __len__(self) -> int:
        return len(self._seq)


def _bucket(hash_code: int, buckets: int) -> int:
    h = hash_code & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (buckets - 1)


def _bucket_sizes(entries: list[tuple[K, int]], buckets: int) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for _, h in entries:
        b = _bucket(h, buckets)
        sizes[b] = sizes.get(b, 0) + 1
    return sizes


def hash_set_order(keys: Iterable[K], hash_code: Callable[[K], int]) -> list[K]:
    """The iteration order of a `java.util.HashSet` to which `keys` were added in order."""
    entries = [(key, hash_code(key)) for key in dict.fromkeys(keys)]
    buckets = 16
    sizes: dict[int, int] = {}
    for size, (_, h) in enumerate(entries, start=1):
        b = _bucket(h, buckets)
        sizes[b] = sizes.get(b, 0) + 1
        if sizes[b] >= 9 and buckets < 64:  # treeifyBin resizes small tables instead
            buckets *= 2
            sizes = _bucket_sizes(entries[:size], buckets)
        if size > buckets * 0.75:
            buckets *= 2
            sizes = _bucket_sizes(entries[:size], buckets)
    order = sorted(range(len(entries)), key=lambda i: (_bucket(entries[i][1], buckets), i))
    return [entries[i][0] for i in order]
