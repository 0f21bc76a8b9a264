"""Offset order in a partition's log: the one rule every reader of a log applies.

Kafka gives each record of a partition the next offset and never goes back, so a log's
batches follow each other in offset order, each starting after the last offset of the one
before, and a batch's records lie in increasing order within its own range
[baseOffset, baseOffset + lastOffsetDelta] (that part the record parser checks:
`records_v2`). A batch's base offset is outside its CRC: a flipped bit there, a batch
copied twice or two batches swapped pass every other check.

`OffsetOrder` holds how far a log has got. `verdict(first, last)` says how a batch spanning
offsets [first, last] stands against it:

- `AHEAD`: it starts after everything admitted; admitting it (`advance`) moves the order
  to `last`;
- `BEHIND`: it ends at or before the last offset admitted (a repeat of what was read, or of
  what an earlier run applied);
- `OVERLAPS`: it starts at or before the last offset admitted but ends after it;
- `BEYOND_SEGMENT`: it ends more than 2^31 - 1 offsets past the first batch admitted in its
  segment, which no Kafka segment holds (its offsets relative to the segment's are int32):
  a flipped high bit of the base offset;
- `NEGATIVE`: it starts below offset 0, where every log starts (the sign bit flipped).

`admit(batch)` decides one batch: an `AHEAD` batch comes back as it is, any other refused
(no records) with an `offset_order` finding, as a batch failing its CRC is refused. A batch
refused already (its CRC fails) is neither checked nor moves the order: its offsets are not
to be trusted.

`in_order(items, order)` is what a log reader applies to its stream of batches: `admit`
with one batch of look-ahead, so that a single bad base offset costs its own batch only.
A batch that leaves a gap after the one before (or starts the log) is held until the next
batch: if that one goes back behind the held batch (`BEHIND` or `OVERLAPS`, without being a
copy of it) but follows the batches before it, the held batch jumped ahead (a flipped bit)
and is the one refused. At a log's start, with no batch before, that takes the next batch
lying wholly before the held one: a small jump there cannot be told from the next batch
going back, and the next one is refused. Whatever comes between
(findings, refused batches) waits with it, a few items at most. `read_batches` runs every
stream through `in_order` (with a new order unless given one); a partition's log passes one
order through all its segments (each stream calls `new_segment()`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from sharestate.log.batch import Batch, BatchRun, LogFinding

SEGMENT_SPAN = (1 << 31) - 1
"""Most offsets a segment spans past its base offset (Kafka's relative offsets: int32)."""
HELD_ITEMS = 16
"""Items that may wait behind a held batch before it is admitted without look-ahead."""


Item = TypeVar("Item", Batch | LogFinding, Batch | LogFinding | BatchRun)
"""What a log reader hands out: batches and findings, and runs of batches where asked."""


class Verdict(enum.Enum):
    """How a batch's offsets stand against an `OffsetOrder` (see the module docstring)."""

    AHEAD = "ahead"
    BEHIND = "behind"
    OVERLAPS = "overlaps"
    BEYOND_SEGMENT = "beyond_segment"
    NEGATIVE = "negative"


class OffsetOrder:
    """How far a partition's log has been admitted (see the module docstring).

    `after`: the last offset already admitted (or applied, by an earlier run), if any.
    """

    __slots__ = ("last", "segment_first")

    def __init__(self, after: int | None = None) -> None:
        self.last = after
        """The last offset admitted (None: nothing yet)."""
        self.segment_first: int | None = None
        """The first offset admitted in the current segment (None: none yet)."""

    def new_segment(self) -> None:
        """The batches that follow are of the log's next segment."""
        self.segment_first = None

    def verdict(self, first: int, last: int) -> Verdict:
        """How a batch spanning offsets [first, last] stands (nothing changes)."""
        if first < 0:
            return Verdict.NEGATIVE
        if self.segment_first is not None and last - self.segment_first > SEGMENT_SPAN:
            return Verdict.BEYOND_SEGMENT
        if self.last is None or first > self.last:
            return Verdict.AHEAD
        return Verdict.BEHIND if last <= self.last else Verdict.OVERLAPS

    def advance(self, first: int, last: int) -> None:
        """Admit a batch spanning [first, last] (its verdict being `AHEAD`)."""
        if self.segment_first is None:
            self.segment_first = first
        self.last = last

    def admit(self, batch: Batch, raw: bytes = b"", source: str | None = None) -> Batch:
        """`batch` when its offsets are in order (the order then moves past it), else
        the batch refused (`refused`). A batch whose CRC fails passes as it is."""
        header = batch.header
        if not header.crc_valid:
            return batch
        verdict = self.verdict(header.base_offset, header.last_offset)
        if verdict is Verdict.AHEAD:
            self.advance(header.base_offset, header.last_offset)
            return batch
        return self.refused(batch, verdict, raw, source)

    def refused(self, batch: Batch, verdict: Verdict, raw: bytes = b"",
                source: str | None = None) -> Batch:
        """`batch` without its records, with an `offset_order` finding saying why its
        `verdict` refuses it (with `raw`, its bytes or their first ones, when the caller
        has them)."""
        if verdict is Verdict.BEYOND_SEGMENT:
            why = (f"ends more than 2^31 - 1 offsets past {self.segment_first}, where its "
                   f"segment's offsets start, which no Kafka segment does")
        elif verdict is Verdict.NEGATIVE:
            why = "starts below offset 0, where every log starts"
        else:
            why = (f"{'ends' if verdict is Verdict.BEHIND else 'starts'} at or before "
                   f"offset {self.last}, already read: offsets go back")
        return _refused(batch, why, raw, source)


def _refused(batch: Batch, why: str, raw: bytes, source: str | None) -> Batch:
    """`batch` without its records, with an `offset_order` finding saying `why`."""
    header = batch.header
    first, last = header.base_offset, header.last_offset
    count = len(batch.records)
    finding = LogFinding(
        "offset_order", f"batch of offsets {first} to {last} {why}; "
        f"{count} record{'' if count == 1 else 's'} not read", header.position, first,
        raw, header.size_in_bytes, source)
    return Batch(header, [], [*batch.findings, finding])


def in_order(items: Iterable[Item], order: OffsetOrder,
             raw_of: Callable[[Batch], bytes] = lambda batch: b"",
             source: str | None = None) -> Iterator[Item]:
    """`items` (a log's batches and findings, in log order) with every batch through
    `order`, one batch of look-ahead (see the module docstring). `raw_of(batch)`: the
    bytes a refused batch's finding keeps, asked while the batch is the latest item. A
    `BatchRun` among them was checked against the order as it stood when it was read, so
    that is where it must come: after every item before it has been taken."""
    held: Batch | None = None
    held_raw = b""
    before: tuple[int | None, int | None] = (None, None)  # the order without the held batch
    waiting: list[Batch | LogFinding] = []
    for item in items:
        if isinstance(item, BatchRun):  # right after the last admitted offset: admitted
            if held is not None:
                yield held
                yield from waiting
                held, waiting = None, []
            order.last = item.batches[-1].header.last_offset
            yield item
            continue
        if isinstance(item, LogFinding) or not item.header.crc_valid:
            if held is None:
                yield item
                continue
            waiting.append(item)
            if len(waiting) < HELD_ITEMS:
                continue
            yield held
            yield from waiting
            held, waiting = None, []
            continue
        header = item.header
        first, last = header.base_offset, header.last_offset
        if held is None and order.last is not None and first == order.last + 1 \
                and order.segment_first is not None \
                and last - order.segment_first <= SEGMENT_SPAN:
            order.last = last  # the usual batch: right after the one before (`advance`)
            yield item
            continue
        if held is not None:
            verdict = order.verdict(first, last)
            if verdict in (Verdict.BEHIND, Verdict.OVERLAPS) and (first, last) != (
                    held.header.base_offset, held.header.last_offset):  # not a copy of it
                beside = OffsetOrder(before[0])
                beside.segment_first = before[1]
                if beside.verdict(first, last) is Verdict.AHEAD and (
                        before[0] is not None or last < held.header.base_offset):
                    # the held batch jumped (at the log's start: over the whole next one)
                    order.last, order.segment_first = before
                    held = _refused(held, f"jumps ahead of the batch after it (offsets "
                                    f"{first} to {last}), which follows the batches before "
                                    f"it: its base offset is wrong", held_raw, source)
            yield held
            yield from waiting
            held, waiting = None, []
        verdict = order.verdict(first, last)
        if verdict is not Verdict.AHEAD:
            yield order.refused(item, verdict, raw_of(item), source)
            continue
        gap = order.last is None or first > order.last + 1
        before = (order.last, order.segment_first)
        order.advance(first, last)
        if gap:
            held, held_raw = item, raw_of(item)
        else:
            yield item
    if held is not None:
        yield held
        yield from waiting
