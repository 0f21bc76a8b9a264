"""A comparable snapshot of everything a `ShareShard` holds per key."""

from __future__ import annotations

from typing import NamedTuple

from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_state import ShareKey, SharePartitionState


class KeyState(NamedTuple):
    """One key's state and the shard's bookkeeping for it."""

    state: SharePartitionState
    leader_epoch: int | None
    state_epoch: int | None
    snapshot_update_count: int | None
    last_snapshot_offset: int | None


def shard_states(shard: ShareShard) -> dict[ShareKey, KeyState]:
    """Every live key of `shard` with its state, epoch maps, update count and snapshot offset."""
    out: dict[ShareKey, KeyState] = {}
    for key in shard:
        state = shard.state(key)
        assert state is not None
        out[key] = KeyState(state, shard.leader_epoch(key), shard.state_epoch(key),
                            shard.snapshot_update_count(key), shard.last_snapshot_offset(key))
    return out
