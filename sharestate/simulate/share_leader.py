"""A share-partition leader's view of its in-flight records (KIP-932), for the simulator.

The leader tracks every record from the share-partition start offset (SPSO) to the end of
what it has fetched: its delivery state (0 available, 1 acquired, 2 acknowledged, 4
archived) and delivery count, one byte each. Consumers acquire runs of available records
(the count goes up on acquisition) under a lock; acknowledging them accepts (2), rejects (4)
or releases them (back to 0, or archived once the count reached the limit), and a lock that
times out releases them the same way. The SPSO then moves past the leading terminal records
(2 or 4), and the delivery complete count is the number of terminal records at or above it
(KIP-1226). Each transition yields the state batches to persist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from sharestate.coordinator.share_state import ShareKey, StateBatch

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
ACCEPT, RELEASE, REJECT = "accept", "release", "reject"
"""Acknowledgement types (the consumer's AcknowledgeType)."""

_TERMINAL_RUN = re.compile(rb"[\x02\x04]*")
_AVAILABLE_RUN = re.compile(rb"\x00+")
_SAME_BYTE_RUN = re.compile(rb"(.)\1*", re.DOTALL)


class Delivery(NamedTuple):
    """Records acquired together: [first, last], their delivery count and lock deadline."""

    first: int
    last: int
    delivery_count: int
    deadline: int


class SharePartitionLeader:
    """In-flight records of one share-partition, with the epochs its requests carry."""

    __slots__ = ("base", "counts", "deliveries", "key", "leader_epoch", "max_delivery_count",
                 "state_epoch", "states")

    def __init__(self, key: ShareKey, leader_epoch: int, state_epoch: int,
                 max_delivery_count: int) -> None:
        self.key = key
        self.leader_epoch = leader_epoch
        self.state_epoch = state_epoch
        self.max_delivery_count = max_delivery_count
        self.base = 0
        """The share-partition start offset (SPSO)."""
        self.states = bytearray()
        self.counts = bytearray()
        self.deliveries: list[Delivery] = []

    @property
    def end(self) -> int:
        """The next offset to fetch."""
        return self.base + len(self.states)

    def load(self, start_offset: int, batches: Iterable[StateBatch]) -> None:
        """Rebuild the window from persisted state; records in no batch are available."""
        self.base = start_offset
        batches = [b for b in batches if b.last_offset >= start_offset]
        end = max((b.last_offset + 1 for b in batches), default=start_offset)
        self.states = bytearray(end - start_offset)
        self.counts = bytearray(end - start_offset)
        for b in batches:
            lo = max(b.first_offset, start_offset) - start_offset
            hi = b.last_offset + 1 - start_offset
            self.states[lo:hi] = bytes((b.delivery_state,)) * (hi - lo)
            self.counts[lo:hi] = bytes((min(b.delivery_count, 255),)) * (hi - lo)
        self.deliveries = []
        self.advance()

    def acquire(self, now: int, want: int, log_end: int, max_in_flight: int,
                lock_ms: int) -> Delivery | None:
        """Acquire up to `want` records with equal delivery counts: available ones first,
        else new ones below `log_end` while the window stays within `max_in_flight`."""
        states, counts = self.states, self.counts
        i = states.find(AVAILABLE)
        if i >= 0:
            run = _AVAILABLE_RUN.match(states, i)
            same = _SAME_BYTE_RUN.match(counts, i)
            assert run is not None and same is not None
            j = min(i + want, run.end(), same.end())
        else:
            i = len(states)
            room = min(want, log_end - self.base - i, max_in_flight - i)
            if room <= 0:
                return None
            j = i + room
            states.extend(bytes(room))
            counts.extend(bytes(room))
        count = counts[i] + 1
        states[i:j] = bytes((ACQUIRED,)) * (j - i)
        counts[i:j] = bytes((count,)) * (j - i)
        delivery = Delivery(self.base + i, self.base + j - 1, count, now + lock_ms)
        self.deliveries.append(delivery)
        return delivery

    def acknowledge(self, index: int, pieces: Sequence[tuple[int, str]]) -> list[StateBatch]:
        """Settle delivery `index` in consecutive pieces of (length, acknowledge type); the
        last piece takes what is left. Returns the batches to persist."""
        delivery = self.deliveries.pop(index)
        out = []
        first = delivery.first
        for n, (length, kind) in enumerate(pieces):
            last = delivery.last if n == len(pieces) - 1 else min(first + length - 1,
                                                                   delivery.last)
            state = (ACKNOWLEDGED if kind == ACCEPT else ARCHIVED if kind == REJECT
                     else self._released(delivery.delivery_count))
            out.append(self._settle(first, last, state, delivery.delivery_count))
            first = last + 1
            if first > delivery.last:
                break
        return out

    def expire(self, now: int) -> list[StateBatch]:
        """Release every delivery whose lock timed out; returns the batches to persist."""
        out = []
        deliveries = self.deliveries
        while deliveries and deliveries[0].deadline <= now:
            d = deliveries.pop(0)
            count = d.delivery_count
            out.append(self._settle(d.first, d.last, self._released(count), count))
        return out

    def advance(self) -> None:
        """Move the SPSO past the leading acknowledged/archived records."""
        match = _TERMINAL_RUN.match(self.states)
        k = match.end() if match is not None else 0
        if k:
            del self.states[:k]
            del self.counts[:k]
            self.base += k

    def delivery_complete_count(self) -> int:
        """Terminal (acknowledged or archived) records at or above the SPSO."""
        return self.states.count(ACKNOWLEDGED) + self.states.count(ARCHIVED)

    def reset(self, start_offset: int) -> None:
        """Start over at `start_offset` with nothing in flight (an offset reset)."""
        self.base = start_offset
        self.states = bytearray()
        self.counts = bytearray()
        self.deliveries = []

    def _released(self, count: int) -> int:
        return ARCHIVED if count >= self.max_delivery_count else AVAILABLE

    def _settle(self, first: int, last: int, state: int, count: int) -> StateBatch:
        lo, hi = first - self.base, last + 1 - self.base
        self.states[lo:hi] = bytes((state,)) * (hi - lo)
        return StateBatch(first, last, state, count)
