"""Per-dialect replay behaviour of Kafka's share-coordinator shard, as named fields.

Kafka's replay changed between the 4.0 development line (early-access share groups, dialect
"4.0") and 4.1+ (dialect "4.1"). Each difference is one field of `ShareRules`, so the shard
never branches on a version string. Released behaviour wins where the two disagree: a type-0
tombstone deletes the key under both rule sets, and the 4.0 rules only flag that Kafka's 4.0
development replay threw there (a pre-release defect). The prune point is tracked for every
dialect, although Kafka 4.0 development had no offsets manager yet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sharestate.coordinator.combiner import SWEEP, TREESET

DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT = 500
"""Kafka's `share.coordinator.snapshot.update.records.per.snapshot` default."""


@dataclass(frozen=True, slots=True)
class ShareRules:
    """How the shard replays records of one dialect."""

    dialect: str
    """The record dialect these rules belong to (see `sharestate.records.catalog`)."""
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
    """A snapshot resets a key's update counter to 0 only when the counter is >= this."""
    fresh_update_state_epoch: int = 0
    """State epoch of a state created by a ShareUpdate for a key with no state (4.0: -1)."""
    fresh_update_timestamp: int | None = 0
    """Create/write timestamps of such a state (None: the dialect has no timestamps)."""
    first_update_count: int = 1
    """Update counter set by a ShareUpdate when the key has none (4.0: 0); later ones add 1."""
    combiner: str = SWEEP
    """Which batch combiner Kafka used: `sweep` (4.4+, coalesces equal runs) or `treeset`
    (up to 4.3, may leave contiguous equal runs split); see `sharestate.coordinator.combiner`."""
    kafka_fails_on_snapshot_tombstone: bool = False
    """Kafka's replay of this line threw on every type-0 tombstone (4.0 development). The
    shard still deletes the key, as released Kafka does, and reports a finding."""

    def with_limit(self, snapshot_update_records_per_snapshot: int) -> ShareRules:
        """These rules with another snapshot-update limit (the broker config)."""
        return replace(self,
                       snapshot_update_records_per_snapshot=snapshot_update_records_per_snapshot)


RULES_4_1 = ShareRules(dialect="4.1")
"""Kafka 4.1 and later, checked against 4.4 development. Brokers 4.1 to 4.3 combined with
the `treeset` algorithm: `replace(RULES_4_1, combiner=TREESET)` reproduces their batch
boundaries (the per-offset content is the same)."""

RULES_4_0 = ShareRules(dialect="4.0", fresh_update_state_epoch=-1, fresh_update_timestamp=None,
                       first_update_count=0, combiner=TREESET,
                       kafka_fails_on_snapshot_tombstone=True)
"""Kafka 4.0 development (October 2024), the early-access share-group format."""

_BY_DIALECT = {rules.dialect: rules for rules in (RULES_4_1, RULES_4_0)}


def rules_for(dialect: str, snapshot_update_records_per_snapshot: int = (
        DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT)) -> ShareRules:
    """The rules of a dialect name ("4.1", "4.0") with the given snapshot-update limit."""
    try:
        rules = _BY_DIALECT[dialect]
    except KeyError:
        raise KeyError(f"no share replay rules for dialect {dialect!r}; "
                       f"known: {', '.join(sorted(_BY_DIALECT))}") from None
    return rules.with_limit(snapshot_update_records_per_snapshot)
