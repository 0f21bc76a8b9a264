"""When each committed offset would expire under KIP-211, as the coordinator implements it.

The forecast assumes the groups stay as replayed. Per offset (KIP-211; Kafka's
`OffsetMetadataManager.cleanupExpiredOffsets`):
1. a share group has no offset expiry, and offsets of a group that no longer exists are never
   looked at by the expiry job;
2. the group picks the base timestamp: a classic group with a protocol type uses the time it
   became Empty (`current_state_timestamp`, else the commit timestamp) when Empty, the commit
   timestamp when Stable on the consumer protocol with known subscriptions, and nothing
   otherwise (its offsets do not expire); simple classic, consumer and streams groups use the
   commit timestamp;
3. an offset of a topic the group is subscribed to does not expire;
4. nor does one with an open transactional commit on the same partition;
5. an explicit expire timestamp (OffsetCommitValue v1) wins over the base: it expires then;
   otherwise it expires `offsets.retention.minutes` after the base.
The broker acts on the next retention check after `expires_at` (every 10 minutes by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from sharestate.coordinator.group_offsets import CommittedOffset, GroupOffsets
from sharestate.coordinator.groups import ClassicGroup, Group, ShareGroup

DEFAULT_RETENTION_MINUTES = 10080
MAX_TIMESTAMP = (1 << 63) - 1
"""Kafka's timestamps are int64 ms: an offset whose retention ends past this never expires
(Kafka's `now - base >= retention` never holds), and no int64 column could hold the time."""


class ExpiryReason(StrEnum):
    """Why an offset expires when it does, or never does."""

    EXPLICIT_EXPIRE_TIMESTAMP = "explicit_expire_timestamp"
    GROUP_EMPTY_SINCE = "group_empty_since"
    COMMIT_TIMESTAMP = "commit_timestamp"
    SUBSCRIBED_TOPIC = "subscribed_topic_never_expires"
    GROUP_NOT_EMPTY = "group_not_empty"
    SUBSCRIPTIONS_UNKNOWN = "subscriptions_unknown"
    PENDING_TRANSACTION = "pending_transaction"
    SHARE_GROUP = "share_group"
    NO_GROUP = "no_group"


@dataclass(frozen=True, slots=True)
class ExpiryForecast:
    """`expires_at` (ms) is None when the offset never expires as things stand."""

    group: str
    topic: str
    partition: int
    expires_at: int | None
    reason: ExpiryReason
    base_timestamp: int | None
    detail: str | None = None


def _base(group: Group, commit: CommittedOffset) -> tuple[int | None, ExpiryReason, str | None]:
    """The group's expiration base for `commit`, or None and why there is none."""
    if not isinstance(group, ClassicGroup) or not group.protocol_type:
        return commit.commit_timestamp, ExpiryReason.COMMIT_TIMESTAMP, None
    if not group.members:
        if group.current_state_timestamp is not None:
            return group.current_state_timestamp, ExpiryReason.GROUP_EMPTY_SINCE, None
        return commit.commit_timestamp, ExpiryReason.COMMIT_TIMESTAMP, None
    if group.uses_consumer_protocol:
        if group.subscribed_topics is not None:
            return commit.commit_timestamp, ExpiryReason.COMMIT_TIMESTAMP, None
        return None, ExpiryReason.SUBSCRIPTIONS_UNKNOWN, group.subscription_error
    return None, ExpiryReason.GROUP_NOT_EMPTY, f"protocol type {group.protocol_type}"


def forecast_offset(group: Group | None, topic: str, commit: CommittedOffset,
                    pending_transaction: bool, retention_ms: int
                    ) -> tuple[int | None, ExpiryReason, int | None, str | None]:
    """(expires_at, reason, base_timestamp, detail) for one committed offset."""
    if group is None:
        return None, ExpiryReason.NO_GROUP, None, None
    if isinstance(group, ShareGroup):
        return None, ExpiryReason.SHARE_GROUP, None, None
    base, reason, detail = _base(group, commit)
    if base is None:
        return None, reason, None, detail
    if group.is_subscribed_to(topic):
        return None, ExpiryReason.SUBSCRIBED_TOPIC, base, None
    if pending_transaction:
        return None, ExpiryReason.PENDING_TRANSACTION, base, None
    if commit.expire_timestamp is not None:
        return commit.expire_timestamp, ExpiryReason.EXPLICIT_EXPIRE_TIMESTAMP, base, None
    if base + retention_ms > MAX_TIMESTAMP:
        return None, reason, base, f"the retention ends past {MAX_TIMESTAMP} ms"
    return base + retention_ms, reason, base, None


def forecast_expiry(offsets: GroupOffsets, groups: Mapping[str, Group],
                    retention_minutes: int = DEFAULT_RETENTION_MINUTES) -> list[ExpiryForecast]:
    """A forecast for every committed offset, in `offsets` order."""
    retention_ms = retention_minutes * 60_000
    forecasts = []
    for (group_id, topic, partition), commit in offsets.committed():
        expires_at, reason, base, detail = forecast_offset(
            groups.get(group_id), topic, commit,
            offsets.has_pending(group_id, topic, partition), retention_ms)
        forecasts.append(ExpiryForecast(group_id, topic, partition, expires_at, reason, base,
                                        detail))
    return forecasts
