"""Per-dialect behaviour of Kafka's share-coordinator writer, as named fields.

The replay side lives in `sharestate.coordinator.share_rules`; these fields cover what the
writer decides: which operations exist, how epochs and start offsets of a write reach the
record, and which requests are refused.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WriterRules:
    """How the writer of one dialect turns requests into records."""

    dialect: str
    lifecycle_operations: bool = True
    """Initialize, delete, read-with-new-leader-epoch records, cold-partition snapshots and
    topic cleanup exist (4.0 development had writes only; they answer UNSUPPORTED_VERSION)."""
    first_write_creates_state: bool = False
    """A write to a key without state creates it with a snapshot (4.0); else INVALID_REQUEST."""
    request_epochs_persisted: bool = False
    """Writes carry the request's leader epoch (and a snapshot its state epoch), -1 meaning
    "keep" (4.0). Otherwise a write keeps the current epochs; only initialize sets the state
    epoch and only a read with a newer leader epoch sets the leader epoch."""
    higher_start_offset_wins: bool = True
    """A write's start offset is max(request, current), so it never regresses (4.4+).
    Otherwise -1 means "current" in a snapshot and an update stores the request's value."""
    negative_epochs_rejected: bool = True
    """Negative leader/state epochs in writes, reads and initializes are INVALID_REQUEST
    (4.4+); otherwise they are compared like any epoch."""
    update_value_version: int = 0
    """The value version ShareUpdate records are written with (4.0 development: 1)."""


RULES_4_1 = WriterRules(dialect="4.1")
"""Kafka 4.1 and later, checked against 4.4 development."""

RULES_4_0 = WriterRules(dialect="4.0", lifecycle_operations=False,
                        first_write_creates_state=True, request_epochs_persisted=True,
                        higher_start_offset_wins=False, negative_epochs_rejected=False,
                        update_value_version=1)
"""Kafka 4.0 development (October 2024), the early-access share-group writer."""

_BY_DIALECT = {rules.dialect: rules for rules in (RULES_4_1, RULES_4_0)}


def writer_rules_for(dialect: str) -> WriterRules:
    """The writer rules of a dialect name ("4.1", "4.0")."""
    try:
        return _BY_DIALECT[dialect]
    except KeyError:
        raise KeyError(f"no share writer rules for dialect {dialect!r}; "
                       f"known: {', '.join(sorted(_BY_DIALECT))}") from None
