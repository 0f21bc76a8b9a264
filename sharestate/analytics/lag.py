"""Share-group lag per share-partition: the `share_group_lag` rows.

Kafka's formula (KIP-1226): `lag = end - SPSO - deliveryCompleteCount`, the
end offset being the next offset to be produced; Kafka reports no lag when SPSO is -1.

Choices made here:
- In-flight figures count *records* (offsets), not batches, of the batches at or above the
  SPSO (`context.in_flight`); `terminal_in_state` is acknowledged (2) + archived (4) among
  them. ARCHIVING (3) is not terminal, as in Kafka.
- `delivery_complete_count` is Kafka's value as the state holds it, -1 when unknown (an
  uninitialised share-partition, a 4.0/4.1 writer, or a dialect without the field). When it is
  unknown the lag uses `terminal_in_state` instead (Kafka would report -1); a row shows which
  was used: `delivery_complete_count` -1 means the batch count.
- The end offset comes from the caller (`live`: fetched from a cluster, `file`: a file of end
  offsets, `segments`: the log end offsets of a log.dirs' data topic folders), looked up by
  (topic id, partition) then (topic name, partition); a share-partition missing there, or
  every one when no end offsets are given, gets the `state` source: the offset after the
  last in-flight record, or the SPSO when there is none. That is a lower bound, so
  `lag_is_lower_bound` is true and the lag is a lower bound too.
- The lag is not clamped: a negative lag means the given end offset is older than the state.
  Damaged states can make figures no int64 holds: a lag that is none (a start offset near
  int64's ends) is unknown (None), record counts of overlapping batches stop at int64's
  largest value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sharestate.analytics.context import StateContext, in_flight
from sharestate.coordinator.group_metadata import SharePartitionMetadata
from sharestate.coordinator.offsets_manager import LONG_MAX
from sharestate.coordinator.share_state import ShareKey, SharePartitionState

LIVE: Final = "live"
FILE: Final = "file"
SEGMENTS: Final = "segments"
STATE: Final = "state"
END_OFFSET_SOURCES: Final = (LIVE, FILE, SEGMENTS, STATE)

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVING, ARCHIVED = 0, 1, 2, 3, 4
"""Delivery states (Kafka's `RecordState`)."""

EndOffsets = Mapping[tuple[str, int], int]
"""(topic id or topic name, partition) -> end offset (the next offset to be produced)."""


@dataclass(frozen=True, slots=True)
class ShareLag:
    """The lag figures of one share-partition state.

    `records_by_state` maps each delivery state present to its record count at or above the
    SPSO; `in_flight_batches` and `max_delivery_count` cover the same batches.
    """

    start_offset: int
    end_offset: int | None
    end_offset_source: str
    records_by_state: Mapping[int, int]
    in_flight_batches: int
    max_delivery_count: int | None
    delivery_complete_count: int
    terminal_in_state: int
    lag: int | None

    @property
    def lag_is_lower_bound(self) -> bool:
        return self.end_offset_source == STATE

    def records(self, delivery_state: int) -> int:
        """Records in `delivery_state` at or above the SPSO."""
        return self.records_by_state.get(delivery_state, 0)


def share_lag(state: SharePartitionState, end_offset: int | None = None,
              end_offset_source: str = FILE) -> ShareLag:
    """The lag of `state` against `end_offset` (None: derive a lower bound from the state)."""
    if end_offset_source not in END_OFFSET_SOURCES:
        raise ValueError(f"unknown end offset source {end_offset_source!r}")
    start = state.start_offset
    counts: dict[int, int] = {}
    batches = 0
    max_count: int | None = None
    last = -1
    for first_offset, last_offset, delivery_state, delivery_count in in_flight(state):
        counts[delivery_state] = min(counts.get(delivery_state, 0) + last_offset
                                     - first_offset + 1, LONG_MAX)
        batches += 1
        if max_count is None or delivery_count > max_count:
            max_count = delivery_count
        last = max(last, last_offset)
    if end_offset is None:
        end_offset_source = STATE
        end_offset = max(last + 1, start) if batches or start != -1 else None
    terminal = min(counts.get(ACKNOWLEDGED, 0) + counts.get(ARCHIVED, 0), LONG_MAX)
    complete = state.delivery_complete_count
    lag = None
    if start != -1 and end_offset is not None:
        lag = end_offset - start - (complete if complete >= 0 else terminal)
        if not -LONG_MAX - 1 <= lag <= LONG_MAX:
            lag = None
    return ShareLag(start, end_offset, end_offset_source, counts, batches, max_count,
                    complete, terminal, lag)


def topic_names(metadata: Mapping[str, SharePartitionMetadata]) -> dict[str, str]:
    """Topic id -> name from share groups' state-partition metadata (any of its lists)."""
    names: dict[str, str] = {}
    for info in metadata.values():
        for topics in (info.deleting, info.initializing, info.initialized):
            names.update((topic_id, topic.topic_name) for topic_id, topic in topics.items())
    return names


def end_offset(end_offsets: EndOffsets | None, key: ShareKey, name: str | None) -> int | None:
    """The end offset of `key`'s partition in `end_offsets`, looked up by topic id, then
    by topic `name` (None: not there)."""
    if not end_offsets:
        return None
    end = end_offsets.get((key.topic_id, key.partition))
    if end is None and name is not None:
        end = end_offsets.get((name, key.partition))
    return end


def lag_rows(states: Iterable[tuple[ShareKey, SharePartitionState]], context: StateContext,
             *, end_offsets: EndOffsets | None = None, end_offset_source: str = FILE,
             names: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """One `share_group_lag` row per (key, state).

    `end_offsets` come from `end_offset_source` (`live`, `file` or `segments`); keys they
    lack fall back to the `state` lower bound. `names` maps topic ids to names (see `topic_names`).
    """
    for key, state in states:
        name = names.get(key.topic_id) if names else None
        lag = share_lag(state, end_offset(end_offsets, key, name), end_offset_source)
        yield {
            "group_id": key.group_id,
            "topic_id": key.topic_id,
            "partition": key.partition,
            "topic": name,
            "start_offset": lag.start_offset,
            "end_offset": lag.end_offset,
            "end_offset_source": lag.end_offset_source,
            "lag_is_lower_bound": lag.lag_is_lower_bound,
            "delivery_complete_count": lag.delivery_complete_count,
            "terminal_in_state": lag.terminal_in_state,
            "lag": lag.lag,
            "available": lag.records(AVAILABLE),
            "acknowledged": lag.records(ACKNOWLEDGED),
            "archived": lag.records(ARCHIVED),
            "in_flight_batches": lag.in_flight_batches,
            "max_delivery_count": lag.max_delivery_count,
            "as_of_offset": context.as_of_offset,
            "as_of_timestamp": context.as_of_timestamp,
            "state_topic": context.state_topic,
            "state_partition": context.state_partition,
        }
