"""What the shard reports instead of failing: records Kafka's replay would not accept."""

from __future__ import annotations

from typing import NamedTuple

from sharestate.coordinator.share_state import ShareKey
from sharestate.log import LogFinding

UPDATE_TOMBSTONE = "update-tombstone"
"""A ShareUpdate-key tombstone: Kafka's replay throws (its loader would fail); state kept."""
UNKNOWN_RECORD_TYPE = "unknown-record-type"
"""A record type id with no share schema: Kafka's loader skips it with a warning."""
INVALID_STATE_BATCH = "invalid-state-batch"
"""A state batch with first_offset > last_offset: Kafka's combiner fails or mis-merges it."""
SNAPSHOT_TOMBSTONE_FAILED = "snapshot-tombstone-replay-failed"
"""A type-0 tombstone in a dialect whose Kafka replay threw on it; the key is deleted here."""
PENDING_DISCARDED = "pending-discarded"
"""Transactional-acks semantics: a tombstone discarded still-pending records of its key."""


class ShardFinding(NamedTuple):
    """An input the shard handled differently from (or could not match) Kafka's replay."""

    offset: int
    code: str
    message: str
    key: ShareKey | None

    def listed(self, source: str) -> LogFinding:
        """As the findings of the partition's log `source` are listed: under its code, at
        no position and with no bytes."""
        return LogFinding(self.code, self.message, -1, self.offset, b"", 0, source)
