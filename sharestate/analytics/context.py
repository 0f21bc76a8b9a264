"""What the gold rows of one replayed state partition share: where and as of when the state
is, the live (key, state) pairs, and the in-flight batches of a state.

The analytics take states and a `StateContext` rather than a `ShareLogResult`, so a job that
replays per share-partition (and never holds a whole shard) can build the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sharestate.coordinator.offsets_manager import LONG_MAX
from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_state import ShareKey, SharePartitionState, StateBatch
from sharestate.replay.logs import UNKNOWN_PARTITION
from sharestate.replay.share_log import ShareLogResult

LAST_RECORD_OFFSET = LONG_MAX - 1
"""The highest offset a record can have: the log end offset after it is an int64."""


@dataclass(frozen=True, slots=True)
class StateContext:
    """The state-topic partition the states come from and the point they are as of."""

    state_topic: str
    state_partition: int
    as_of_offset: int | None
    as_of_timestamp: int | None

    @classmethod
    def of(cls, result: ShareLogResult) -> StateContext:
        """The context of a replayed partition log."""
        partition = result.partition
        return cls(result.topic, UNKNOWN_PARTITION if partition is None else partition,
                   result.last_applied_offset, result.last_applied_timestamp)


def live_states(shard: ShareShard) -> Iterator[tuple[ShareKey, SharePartitionState]]:
    """Every live share-partition of `shard` with its state."""
    for key in shard:
        state = shard.state(key)
        if state is not None:
            yield key, state


def in_flight(state: SharePartitionState) -> Iterator[StateBatch]:
    """The state's batches at or above its SPSO, a batch straddling the SPSO clipped to it.

    Kafka's combiner already drops and clips batches below the start offset on every update,
    but a snapshot is stored as written; this applies the same rule. With SPSO -1 (not
    initialized) every batch is in flight. Batches are also clipped to the offsets a record
    can have, 0 to `LAST_RECORD_OFFSET`: a damaged offset beyond them holds no record (and a
    count of its records would overflow the tables' int64 columns).
    """
    start = max(state.start_offset, 0)
    for batch in state.batches:
        first, last = batch[0], batch[1]
        if last < start or last < first or first > LAST_RECORD_OFFSET:
            continue
        if first < start or last > LAST_RECORD_OFFSET:
            yield StateBatch(max(first, start), min(last, LAST_RECORD_OFFSET), batch[2],
                             batch[3])
        else:
            yield batch
