"""Kafka's state-batch combining (`PersisterStateBatchCombiner`) as pure functions.

`combine(so_far, new, start_offset)` concatenates both lists, prunes them at `start_offset`
(-1: no pruning; batches ending below it are dropped, batches straddling it are clipped) and,
when at least two batches remain, returns for every covered offset the batch with the highest
priority, where priority is (delivery_count, delivery_state), higher wins regardless of which
list it came from. Adjacent offsets with equal (count, state) form one batch; gaps stay gaps.
Fewer than two batches after pruning are returned as they are (Kafka's special case). This is
what Kafka 4.4's sweep-line combiner (KAFKA-20691) computes.

`combine_treeset` ports Kafka's earlier TreeSet algorithm (4.0 to 4.3) step by step. Per
offset it agrees with `combine`, but it can leave contiguous equal runs split, and Kafka's
state of those versions holds exactly those splits. The tests check both against a literal
model of the Java code, and `combine` against a per-offset brute force.

A batch with first > last covers no offset and is dropped by both (Kafka's combiners
mis-merge or reject it, and its TreeSet one can loop forever on it; the shard reports such
records). `combine` has two paths with the same
result: a general event sweep, and a splice path taken when `so_far` is a previous result of
`combine` (sorted, disjoint and coalesced by construction), which inserts each new batch with
two bisections. Both functions are tuple-in/tuple-out, so a native twin can replace them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from operator import itemgetter

from sharestate import native
from sharestate.coordinator.share_state import Batches, StateBatch

_FIRST = itemgetter(0)
_LAST = itemgetter(1)

Priority = tuple[int, int]
"""(delivery_count, delivery_state): the order in which batches win over each other."""

SWEEP = "sweep"
"""Name of `combine` (Kafka 4.4+)."""
TREESET = "treeset"
"""Name of `combine_treeset` (Kafka 4.0 to 4.3)."""


class _Normalized(tuple[StateBatch, ...]):
    """A batch tuple known to be sorted, disjoint and coalesced (a result of `combine`)."""

    __slots__ = ()


def combine(so_far: Sequence[StateBatch], new: Sequence[StateBatch],
            start_offset: int) -> Batches:
    """Combine `so_far` with `new`, pruned at `start_offset`, as Kafka's combiner does.

    Runs in C when `sharestate._native` is built (same result as `combine_py`).
    """
    if native.enabled():
        return native.module.combine(so_far, new, start_offset)
    return combine_py(so_far, new, start_offset)


def combine_py(so_far: Sequence[StateBatch], new: Sequence[StateBatch],
               start_offset: int) -> Batches:
    """The pure-Python `combine`."""
    if type(so_far) is _Normalized:
        return _splice_all(so_far, new, start_offset)
    batches: list[StateBatch] = []
    _prune_into(so_far, start_offset, batches)
    _prune_into(new, start_offset, batches)
    if len(batches) < 2:
        return _as_is(batches)
    return _sweep(batches)


def _prune_into(batches: Sequence[StateBatch], start: int, out: list[StateBatch]) -> None:
    if start == -1:
        out.extend(batches)
        return
    for b in batches:
        if b[1] < start:
            continue
        out.append(b if b[0] >= start else StateBatch(start, b[1], b[2], b[3]))


def _as_is(batches: list[StateBatch]) -> Batches:
    """Kafka returns fewer than two batches untouched; mark them normalized when valid."""
    if not batches or batches[0][0] <= batches[0][1]:
        return _Normalized(batches)
    return tuple(batches)


def _sweep(batches: list[StateBatch]) -> Batches:
    """Per-offset maximum by an ordered sweep over begin/end events."""
    events: list[tuple[int, int, Priority]] = []
    for b in batches:
        first, last = b[0], b[1]
        if first <= last:
            p = (b[3], b[2])
            events.append((first, 1, p))
            events.append((last + 1, 0, p))
    events.sort()
    out: list[StateBatch] = []
    active: dict[Priority, int] = {}
    run_first = run_last = cur = 0
    run: Priority | None = None
    for off, begin, p in events:
        if off != cur:
            if active:
                w = max(active)
                if w == run and run_last == cur - 1:
                    run_last = off - 1
                else:
                    if run is not None:
                        out.append(StateBatch(run_first, run_last, run[1], run[0]))
                    run, run_first, run_last = w, cur, off - 1
            cur = off
        if begin:
            active[p] = active.get(p, 0) + 1
        else:
            n = active[p] - 1
            if n:
                active[p] = n
            else:
                del active[p]
    if run is not None:
        out.append(StateBatch(run_first, run_last, run[1], run[0]))
    return _Normalized(out)


def _splice_all(so_far: _Normalized, new: Sequence[StateBatch], start: int) -> Batches:
    """`combine` for a normalized `so_far`: prune it by bisection, then splice `new` in."""
    base = list(so_far)
    if start != -1 and base and base[0][0] < start:
        base = base[bisect_left(base, start, key=_LAST):]
        if base and base[0][0] < start:
            b = base[0]
            base[0] = StateBatch(start, b[1], b[2], b[3])
    adds: list[StateBatch] = []
    _prune_into(new, start, adds)
    if len(base) + len(adds) < 2:
        return _as_is(base + adds)
    for b in adds:
        if b[0] <= b[1]:
            _splice(base, b)
    return _Normalized(base)


def _splice(base: list[StateBatch], b: StateBatch) -> None:
    """Insert `b` into the sorted, disjoint, coalesced `base`, keeping it so.

    Only the entries overlapping or touching [first, last] are rebuilt. An entry of higher
    priority than `b` stays whole; one of lower priority keeps its parts outside the range;
    one of equal priority joins the run of `b`'s priority, which also fills the gaps.
    """
    f, last, s, c = b
    i = bisect_left(base, f - 1, key=_LAST)
    j = bisect_right(base, last + 1, lo=i, key=_FIRST)
    if i == j:
        base.insert(i, b)
        return
    out: list[StateBatch] = []
    pos = f  # offsets below pos are placed; [run, pos - 1] is a pending run of b's priority
    run: int | None = None
    for k in range(i, j):
        e = base[k]
        ef, el, es, ec = e
        if ec > c or (ec == c and es > s):  # e wins wherever it is
            if run is not None or ef > pos:
                out.append(StateBatch(pos if run is None else run, ef - 1, s, c))
                run = None
            out.append(e)
        elif ec == c and es == s:  # same priority: e joins the run
            if run is None:
                run = ef if ef < pos else pos
        else:  # e loses inside [f, last]
            if ef < f:
                if el < f:  # touches the range from below
                    out.append(e)
                    continue
                out.append(StateBatch(ef, f - 1, es, ec))
            if run is None and pos <= last:
                run = pos
            if el > last:
                if run is not None:
                    out.append(StateBatch(run, last, s, c))
                    run = None
                out.append(e if ef > last else StateBatch(last + 1, el, es, ec))
        if el >= pos:
            pos = el + 1
    if pos <= last:
        if run is None:
            run = pos
        pos = last + 1
    if run is not None:
        out.append(StateBatch(run, pos - 1, s, c))
    base[i:j] = out


def combine_treeset(so_far: Sequence[StateBatch], new: Sequence[StateBatch],
                    start_offset: int) -> Batches:
    """Kafka's combiner up to 4.3 (a TreeSet worked pair by pair), ported step by step.

    Per offset it gives the same result as `combine`, but a batch it has already emitted is
    never revisited, so a later piece with the same (count, state) right after it stays a
    separate batch. Kafka 4.0 to 4.3 store exactly that; 4.4's sweep coalesces. A batch with
    first > last is dropped before merging: Kafka's loop never ends on one that overlaps
    another (say [0, 2] and [2, 0]).
    """
    batches: list[StateBatch] = []
    _prune_into(so_far, start_offset, batches)
    _prune_into(new, start_offset, batches)
    if len(batches) < 2:
        return tuple(batches)
    # Entries are (first, last, count, state): the TreeSet order; equal entries collapse.
    pending = sorted({(b[0], b[1], b[3], b[2]) for b in batches if b[0] <= b[1]})
    out: list[tuple[int, int, int, int]] = []
    lo = 0  # pending[:lo] is already in out
    while (i := _first_mergeable(pending, lo)) >= 0:
        out.extend(pending[lo:i])  # what the scan passed is final
        prev, cand = pending[i], pending[i + 1]
        del pending[i:i + 2]
        lo = i
        for piece in _resolve(prev, cand):
            k = bisect_left(pending, piece, lo)
            if k == len(pending) or pending[k] != piece:
                pending.insert(k, piece)
    out.extend(pending[lo:])
    return tuple(StateBatch(f, la, s, c) for f, la, c, s in out)


def _first_mergeable(pending: list[tuple[int, int, int, int]], lo: int) -> int:
    """Index (from `lo`) of the first adjacent pair that overlaps or continues with equal
    priority, or -1."""
    for i in range(lo, len(pending) - 1):
        _, pl, pc, ps = pending[i]
        nf, _, nc, ns = pending[i + 1]
        if nf <= pl or (pl + 1 == nf and nc == pc and ns == ps):
            return i
    return -1


def _resolve(prev: tuple[int, int, int, int],
             cand: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """The pieces that replace a mergeable pair (prev sorts before cand)."""
    pf, pl, pc, ps = prev
    cf, cl, cc, cs = cand
    if (cc, cs) == (pc, ps):
        return [(pf, max(pl, cl), pc, ps)]
    cand_lower = (cc, cs) < (pc, ps)
    if cf == pf:
        if cl == pl or not cand_lower:
            return [cand]
        return [prev, (pl + 1, cl, cc, cs)]
    if cl < pl:
        return [prev] if cand_lower else [(pf, cf - 1, pc, ps), cand, (cl + 1, pl, pc, ps)]
    if cl == pl:
        return [prev] if cand_lower else [(pf, cf - 1, pc, ps), cand]
    return [prev, (pl + 1, cl, cc, cs)] if cand_lower else [(pf, cf - 1, pc, ps), cand]


COMBINERS: dict[str, Callable[[Sequence[StateBatch], Sequence[StateBatch], int], Batches]] = {
    SWEEP: combine, TREESET: combine_treeset}
"""Combiners by name, as `ShareRules.combiner` refers to them."""
