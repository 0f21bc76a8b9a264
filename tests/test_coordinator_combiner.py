"""The batch combiners against Kafka's test vectors, a per-offset reference and a literal
step-by-step model of Kafka's TreeSet algorithm (written here as an independent oracle)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharestate.coordinator.combiner import COMBINERS, SWEEP, TREESET, combine, combine_treeset
from sharestate.coordinator.share_state import StateBatch

B = StateBatch

# ---------------------------------------------------------------------------------------
# oracle: Kafka's PersisterStateBatchCombiner (up to 4.3), one Java step per Python step


class _TreeSetOracle:
    """Kafka's sorted-set combiner as the Java code walks it, kept deliberately naive."""

    def __init__(self, so_far: Sequence[StateBatch], new: Sequence[StateBatch],
                 start: int) -> None:
        self.combined = [*so_far, *new]
        self.start = start
        self.final: list[StateBatch] = []
        self.sorted: list[StateBatch] = []

    @staticmethod
    def order(b: StateBatch) -> tuple[int, int, int, int]:
        return (b.first_offset, b.last_offset, b.delivery_count, b.delivery_state)

    @staticmethod
    def delivery_cmp(a: StateBatch, b: StateBatch) -> int:
        if a.delivery_count != b.delivery_count:
            return -1 if a.delivery_count < b.delivery_count else 1
        if a.delivery_state != b.delivery_state:
            return -1 if a.delivery_state < b.delivery_state else 1
        return 0

    def add(self, b: StateBatch) -> None:
        if all(self.order(x) != self.order(b) for x in self.sorted):
            self.sorted.append(b)
            self.sorted.sort(key=self.order)

    def remove(self, b: StateBatch) -> None:
        self.sorted = [x for x in self.sorted if self.order(x) != self.order(b)]

    def run(self) -> list[StateBatch]:
        if self.start != -1:
            kept = []
            for b in self.combined:
                if b.last_offset < self.start:
                    continue
                if b.first_offset >= self.start:
                    kept.append(b)
                else:
                    kept.append(B(self.start, b.last_offset, b.delivery_state, b.delivery_count))
            self.combined = kept
        if len(self.combined) < 2:
            return self.combined
        for b in self.combined:
            self.add(b)
        pair = self.candidate_pair()
        while pair is not None:
            prev, cand = pair
            self.remove(prev)
            self.remove(cand)
            if self.delivery_cmp(cand, prev) == 0:
                self.add(B(prev.first_offset, max(prev.last_offset, cand.last_offset),
                           prev.delivery_state, prev.delivery_count))
            else:
                self.different_state(prev, cand)
            pair = self.candidate_pair()
        self.final.extend(self.sorted)
        return self.final

    def candidate_pair(self) -> tuple[StateBatch, StateBatch] | None:
        if not self.sorted:
            return None
        skipped: list[StateBatch] = []
        prev = self.sorted[0]
        for cand in self.sorted[1:]:
            if cand.first_offset <= prev.last_offset or (
                    prev.last_offset + 1 == cand.first_offset
                    and self.delivery_cmp(prev, cand) == 0):
                for b in skipped:
                    self.remove(b)
                self.final.extend(skipped)
                return prev, cand
            skipped.append(prev)
            prev = cand
        for b in skipped:
            self.remove(b)
        self.final.extend(skipped)
        return None

    def different_state(self, prev: StateBatch, cand: StateBatch) -> None:
        lower = self.delivery_cmp(cand, prev) < 0
        if cand.first_offset == prev.first_offset:
            if cand.last_offset == prev.last_offset:
                self.add(cand)
            elif lower:
                self.add(prev)
                self.add(B(prev.last_offset + 1, cand.last_offset, cand.delivery_state,
                           cand.delivery_count))
            else:
                self.add(cand)
        elif cand.last_offset < prev.last_offset:
            if lower:
                self.add(prev)
            else:
                self.add(B(prev.first_offset, cand.first_offset - 1, prev.delivery_state,
                           prev.delivery_count))
                self.add(cand)
                self.add(B(cand.last_offset + 1, prev.last_offset, prev.delivery_state,
                           prev.delivery_count))
        elif cand.last_offset == prev.last_offset:
            if lower:
                self.add(prev)
            else:
                self.add(B(prev.first_offset, cand.first_offset - 1, prev.delivery_state,
                           prev.delivery_count))
                self.add(cand)
        elif lower:
            self.add(prev)
            self.add(B(prev.last_offset + 1, cand.last_offset, cand.delivery_state,
                       cand.delivery_count))
        else:
            self.add(B(prev.first_offset, cand.first_offset - 1, prev.delivery_state,
                       prev.delivery_count))
            self.add(cand)


def oracle(so_far: Sequence[StateBatch], new: Sequence[StateBatch],
           start: int) -> tuple[StateBatch, ...]:
    return tuple(_TreeSetOracle(so_far, new, start).run())


def per_offset(batches: Sequence[StateBatch], start: int) -> dict[int, tuple[int, int]]:
    """Brute force: offset -> highest (count, state) over the pruned batches covering it."""
    best: dict[int, tuple[int, int]] = {}
    for b in batches:
        lo = b.first_offset if start == -1 else max(b.first_offset, start)
        for off in range(lo, b.last_offset + 1):
            p = (b.delivery_count, b.delivery_state)
            if off not in best or best[off] < p:
                best[off] = p
    return best


def runs(best: dict[int, tuple[int, int]]) -> tuple[StateBatch, ...]:
    """Maximal runs of consecutive offsets with equal priority."""
    out: list[StateBatch] = []
    for off in sorted(best):
        count, state = best[off]
        if out and out[-1].last_offset == off - 1 and (
                out[-1].delivery_count, out[-1].delivery_state) == (count, state):
            out[-1] = out[-1]._replace(last_offset=off)
        else:
            out.append(B(off, off, state, count))
    return tuple(out)


def coalesce(batches: Sequence[StateBatch]) -> tuple[StateBatch, ...]:
    out: list[StateBatch] = []
    for b in batches:
        if out and out[-1].last_offset + 1 == b.first_offset and (
                out[-1].delivery_count, out[-1].delivery_state) == (
                b.delivery_count, b.delivery_state):
            out[-1] = out[-1]._replace(last_offset=b.last_offset)
        else:
            out.append(b)
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Kafka's vectors (`PersisterStateBatchCombinerTest`): (so_far, new, start, expected)

V15_SO_FAR = [B(100, 110, 0, 1), B(121, 130, 0, 1)]
V15_NEW = [B(111, 119, 2, 2), B(116, 123, 2, 2)]

VECTORS = {
    "1 same": ([B(100, 110, 0, 1)], [B(100, 110, 0, 1)], -1, [B(100, 110, 0, 1)]),
    "1b inside same state": ([B(100, 110, 0, 1)], [B(105, 108, 0, 1)], -1,
                             [B(100, 110, 0, 1)]),
    "2": ([B(100, 110, 0, 1)], [B(100, 105, 0, 1)], -1, [B(100, 110, 0, 1)]),
    "3": ([B(100, 110, 0, 1)], [B(100, 115, 0, 1)], -1, [B(100, 115, 0, 1)]),
    "4": ([B(100, 110, 0, 1)], [B(105, 110, 0, 1)], -1, [B(100, 110, 0, 1)]),
    "5": ([B(100, 110, 0, 1)], [B(105, 115, 0, 1)], -1, [B(100, 115, 0, 1)]),
    "6 contiguous": ([B(100, 110, 0, 1)], [B(111, 115, 0, 1)], -1, [B(100, 115, 0, 1)]),
    "7 higher count": ([B(100, 110, 0, 1)], [B(100, 110, 0, 2)], -1, [B(100, 110, 0, 2)]),
    "8 newer loses": ([B(100, 110, 0, 3)], [B(100, 110, 0, 1)], -1, [B(100, 110, 0, 3)]),
    "9": ([B(100, 110, 0, 1)], [B(100, 105, 0, 2)], -1,
          [B(100, 105, 0, 2), B(106, 110, 0, 1)]),
    "10": ([B(100, 110, 0, 3)], [B(100, 105, 0, 1)], -1, [B(100, 110, 0, 3)]),
    "11": ([B(100, 110, 0, 3)], [B(100, 115, 0, 1)], -1,
           [B(100, 110, 0, 3), B(111, 115, 0, 1)]),
    "12 higher state": ([B(100, 115, 0, 1)], [B(105, 110, 1, 1)], -1,
                        [B(100, 104, 0, 1), B(105, 110, 1, 1), B(111, 115, 0, 1)]),
    "13 lower state": ([B(100, 115, 1, 1)], [B(105, 110, 0, 1)], -1, [B(100, 115, 1, 1)]),
    "14": ([B(100, 110, 0, 1)], [B(105, 115, 0, 2)], -1,
           [B(100, 104, 0, 1), B(105, 115, 0, 2)]),
    "14 reversed": ([B(100, 110, 0, 2)], [B(105, 115, 0, 1)], -1,
                    [B(100, 110, 0, 2), B(111, 115, 0, 1)]),
    # The Java test expects no (124, 130) tail, but that case is never run (shouldRun is
    # false); the algorithm keeps the tail, which nothing of higher priority covers.
    "15 algorithm output": (V15_SO_FAR, V15_NEW, -1,
                            [B(100, 110, 0, 1), B(111, 123, 2, 2), B(124, 130, 0, 1)]),
    "16": ([B(100, 110, 0, 1)], [B(101, 105, 1, 2), B(101, 115, 2, 2), B(101, 120, 3, 2)], -1,
           [B(100, 100, 0, 1), B(101, 120, 3, 2)]),
    "17 pruned": (V15_SO_FAR, V15_NEW, 120, [B(120, 123, 2, 2), B(124, 130, 0, 1)]),
    "18": ([B(111, 120, 0, 1)], [B(111, 113, 0, 2), B(114, 114, 2, 1), B(115, 119, 0, 2)], -1,
           [B(111, 113, 0, 2), B(114, 114, 2, 1), B(115, 119, 0, 2), B(120, 120, 0, 1)]),
    "19 prune so_far": ([B(100, 130, 0, 1)], [], 120, [B(120, 130, 0, 1)]),
    "19 prune new": ([], [B(100, 130, 0, 1)], 120, [B(120, 130, 0, 1)]),
    "19 empty": ([], [], 120, []),
}


@pytest.mark.parametrize("name", list(VECTORS))
@pytest.mark.parametrize("combiner", [SWEEP, TREESET])
def test_kafka_vectors(name: str, combiner: str) -> None:
    so_far, new, start, expected = VECTORS[name]
    assert COMBINERS[combiner](tuple(so_far), tuple(new), start) == tuple(expected)
    assert oracle(so_far, new, start) == tuple(expected)


@pytest.mark.parametrize("name", list(VECTORS))
def test_kafka_vectors_through_the_splice_path(name: str) -> None:
    """The same vectors with `so_far` first normalized, so the splice path runs."""
    so_far, new, start, expected = VECTORS[name]
    normalized = combine(tuple(so_far), (), -1)
    assert combine(normalized, tuple(new), start) == tuple(expected)


def test_fewer_than_two_batches_are_returned_as_they_are() -> None:
    odd = B(10, 5, 0, 1)  # invalid, but Kafka does not look at a lone batch
    assert combine((), (odd,), -1) == (odd,)
    assert combine((odd,), (), 3) == (odd,)
    assert combine_treeset((odd,), (), -1) == (odd,)
    assert combine((B(1, 9, 0, 1),), (B(2, 3, 4, 1),), 5) == (B(5, 9, 0, 1),)


def test_invalid_batches_cover_nothing() -> None:
    assert combine((B(1, 5, 0, 1),), (B(9, 7, 4, 3),), -1) == (B(1, 5, 0, 1),)
    normalized = combine((B(1, 5, 0, 1), B(6, 8, 2, 1)), (), -1)
    assert combine(normalized, (B(9, 7, 4, 3),), -1) == normalized


@pytest.mark.timeout(10)
def test_treeset_drops_invalid_batches_instead_of_looping() -> None:
    """Kafka's TreeSet loop resolves [0, 2] against [2, 0] into the same pair forever."""
    assert combine_treeset((B(0, 2, 0, 1),), (B(2, 0, 0, 2),), -1) == (B(0, 2, 0, 1),)
    so_far = (B(117, 128, 0, 3), B(131, 128, 2, 5), B(151, 166, 4, 1))
    new = (B(120, 131, 0, 5),)
    assert combine_treeset(so_far, new, 117) == combine(so_far, new, 117)


def test_treeset_can_leave_equal_runs_split() -> None:
    """Kafka <= 4.3 emits (98, 103) before (104, 109) is made from the overlap that follows."""
    so_far = (B(98, 103, 4, 5), B(104, 105, 0, 1))
    new = (B(104, 109, 4, 5),)
    assert combine_treeset(so_far, new, -1) == (B(98, 103, 4, 5), B(104, 109, 4, 5))
    assert oracle(so_far, new, -1) == (B(98, 103, 4, 5), B(104, 109, 4, 5))
    assert combine(so_far, new, -1) == (B(98, 109, 4, 5),)


# ---------------------------------------------------------------------------------------
# properties


@st.composite
def batch_lists(draw: st.DrawFn, max_size: int = 8) -> list[StateBatch]:
    out = []
    for _ in range(draw(st.integers(0, max_size))):
        first = draw(st.integers(0, 60))
        out.append(B(first, first + draw(st.integers(0, 15)), draw(st.sampled_from([0, 1, 2, 4])),
                     draw(st.integers(1, 3))))
    return out


@st.composite
def disjoint_lists(draw: st.DrawFn) -> list[StateBatch]:
    """Many short batches with small gaps: what a long-lived state looks like."""
    out = []
    first = draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 20))):
        last = first + draw(st.integers(0, 4))
        out.append(B(first, last, draw(st.sampled_from([0, 2, 4])), draw(st.integers(1, 3))))
        first = last + 1 + draw(st.integers(0, 3))
    return out


starts = st.one_of(st.just(-1), st.integers(0, 70))


@settings(max_examples=400, deadline=None)
@given(batch_lists(), batch_lists(), starts)
def test_sweep_is_the_per_offset_maximum(so_far: list[StateBatch], new: list[StateBatch],
                                         start: int) -> None:
    out = combine(tuple(so_far), tuple(new), start)
    pruned = [b for b in so_far + new if start == -1 or b.last_offset >= start]
    if len(pruned) >= 2:
        assert out == runs(per_offset(so_far + new, start))
    # sorted, disjoint, coalesced
    for a, b in pairwise(out):
        assert a.last_offset < b.first_offset
        assert a.last_offset + 1 < b.first_offset or (a.delivery_count, a.delivery_state) != (
            b.delivery_count, b.delivery_state)
    # idempotent: combining the result with nothing (at a start it already respects) keeps it
    assert combine(out, (), -1) == out
    if out:
        assert combine(out, (), out[0].first_offset) == out


@settings(max_examples=400, deadline=None)
@given(batch_lists(), batch_lists(), starts)
def test_sweep_matches_kafkas_treeset_algorithm(so_far: list[StateBatch],
                                                new: list[StateBatch], start: int) -> None:
    kafka = oracle(so_far, new, start)
    ours = combine(tuple(so_far), tuple(new), start)
    assert per_offset(kafka, -1) == per_offset(ours, -1)
    if len(kafka) >= 2 or len(ours) >= 2:
        assert ours == coalesce(kafka)
    assert combine_treeset(tuple(so_far), tuple(new), start) == kafka


@settings(max_examples=400, deadline=None)
@given(st.one_of(batch_lists(), disjoint_lists()), batch_lists(), starts)
def test_splice_path_equals_sweep(so_far: list[StateBatch], new: list[StateBatch],
                                  start: int) -> None:
    normalized = combine(tuple(so_far), (), -1)
    assert combine(normalized, tuple(new), start) == combine(tuple(normalized), tuple(new), start)
