"""The four group types of the group coordinator, and how Kafka derives their state.

State names are Kafka's own strings:
- classic: a group loaded from GroupMetadata is "Empty" without members and "Stable" with
  members (the other classic states only exist while the broker runs a rebalance). A group
  created to hold offsets (a "simple" group) has no members, so it is "Empty".
- consumer (KIP-848): "Empty" without members; "Assigning" when the group epoch is ahead of
  the target-assignment epoch; "Reconciling" when some member is not stable at that epoch;
  otherwise "Stable".
- share: "Empty" without members, else "Stable".
- streams: "Empty" without members; "NotReady" without a topology or when the topology epoch
  is not the validated one; then "Assigning" / "Reconciling" / "Stable" as for consumer
  groups. Streams member state 1 is STABLE (consumer and share members use 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

CONSUMER_PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
INITIAL_ASSIGNMENT_EPOCH = 1
"""Target-assignment epoch of a group no assignment record touched (Kafka trunk, 4.4-dev)."""
DELETED_ASSIGNMENT_EPOCH = -1
"""Target-assignment epoch after a target-assignment-metadata tombstone."""
MODERN_MEMBER_STABLE = 0
STREAMS_MEMBER_STABLE = 1

TopicPartitions = dict[str, tuple[int, ...]]
"""Topic id -> partitions."""
TaskIds = dict[str, tuple[int, ...]]
"""Subtopology id -> partitions."""


class GroupType(StrEnum):
    """Kafka's group types, as `kafka-groups.sh` prints them."""

    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"
    STREAMS = "streams"


# -- classic ---------------------------------------------------------------------------------

@dataclass
class ClassicMember:
    """A member of a classic group; `rebalance_timeout_ms` falls back to the session timeout
    when the record has none (value v0), as Kafka does on load."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass
class ClassicGroup:
    """A classic group, from GroupMetadata or created for offsets alone (protocol type None).

    `subscribed_topics` is None when the coordinator cannot know them: no protocol type or
    one other than "consumer", no protocol, or a subscription that does not parse (then
    `subscription_error` says why).
    """

    type: ClassVar[GroupType] = GroupType.CLASSIC
    group_id: str
    protocol_type: str | None = None
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    subscribed_topics: frozenset[str] | None = None
    subscription_error: str | None = None

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def is_simple(self) -> bool:
        """A memberless group without protocol type: it only holds offsets."""
        return not self.protocol_type and not self.members

    @property
    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's rule: unknown subscriptions count as "subscribed" for consumer groups."""
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol


# -- consumer (KIP-848) ----------------------------------------------------------------------

@dataclass
class ConsumerMember:
    """A member of a consumer group; defaults are Kafka's for a member no record set yet."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_session_timeout_ms: int | None = None
    """Set when the member joined with the classic protocol."""
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = MODERN_MEMBER_STABLE
    assigned_partitions: TopicPartitions = field(default_factory=dict)
    partitions_pending_revocation: TopicPartitions = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == MODERN_MEMBER_STABLE and self.member_epoch == epoch


@dataclass(frozen=True)
class ResolvedRegex:
    """The topics a consumer group's regular expression matched."""

    topics: frozenset[str]
    version: int
    timestamp: int


@dataclass
class ConsumerGroup:
    """A KIP-848 consumer group."""

    type: ClassVar[GroupType] = GroupType.CONSUMER
    group_id: str
    epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = INITIAL_ASSIGNMENT_EPOCH
    assignment_timestamp: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target_assignment: dict[str, TopicPartitions] = field(default_factory=dict)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    has_partition_metadata_record: bool = False
    """A ConsumerGroupPartitionMetadata record (no longer written since 4.1) is live."""

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    @property
    def subscribed_topics(self) -> frozenset[str]:
        """Topics named by members plus topics of every resolved regular expression."""
        topics: set[str] = set()
        for member in self.members.values():
            topics.update(member.subscribed_topic_names)
        for resolved in self.resolved_regexes.values():
            topics.update(resolved.topics)
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topics


# -- share (KIP-932) -------------------------------------------------------------------------

@dataclass
class ShareMember:
    """A member of a share group."""

    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = MODERN_MEMBER_STABLE
    assigned_partitions: TopicPartitions = field(default_factory=dict)


@dataclass
class ShareGroup:
    """A share group (its share-partition bookkeeping is `SharePartitionMetadata`)."""

    type: ClassVar[GroupType] = GroupType.SHARE
    group_id: str
    epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = INITIAL_ASSIGNMENT_EPOCH
    assignment_timestamp: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target_assignment: dict[str, TopicPartitions] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    @property
    def subscribed_topics(self) -> frozenset[str]:
        return frozenset(t for m in self.members.values() for t in m.subscribed_topic_names)


# -- streams (KIP-1071) ----------------------------------------------------------------------

@dataclass(frozen=True)
class Subtopology:
    """One subtopology of a streams topology (topic names only)."""

    subtopology_id: str
    source_topics: tuple[str, ...]
    source_topic_regex: tuple[str, ...]
    repartition_source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    state_changelog_topics: tuple[str, ...]


@dataclass(frozen=True)
class StreamsTopology:
    """A streams group's topology."""

    epoch: int
    subtopologies: tuple[Subtopology, ...]

    @property
    def source_topics(self) -> frozenset[str]:
        """Source and repartition-source topics: the ones whose offsets the group commits."""
        return frozenset(t for s in self.subtopologies
                         for t in (*s.source_topics, *s.repartition_source_topics))


@dataclass
class StreamsMember:
    """A member of a streams group; Kafka leaves fields unset (None) until a record sets them."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None
    rebalance_timeout_ms: int | None = None
    topology_epoch: int | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: dict[str, str] = field(default_factory=dict)
    member_epoch: int | None = None
    previous_member_epoch: int | None = None
    state: int | None = None
    active_tasks: TaskIds = field(default_factory=dict)
    standby_tasks: TaskIds = field(default_factory=dict)
    warmup_tasks: TaskIds = field(default_factory=dict)
    active_tasks_pending_revocation: TaskIds = field(default_factory=dict)
    standby_tasks_pending_revocation: TaskIds = field(default_factory=dict)
    warmup_tasks_pending_revocation: TaskIds = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STREAMS_MEMBER_STABLE and self.member_epoch == epoch


@dataclass(frozen=True)
class StreamsTasks:
    """A streams member's target assignment."""

    active: TaskIds
    standby: TaskIds
    warmup: TaskIds


@dataclass
class StreamsGroup:
    """A KIP-1071 streams group."""

    type: ClassVar[GroupType] = GroupType.STREAMS
    group_id: str
    epoch: int = 0
    metadata_hash: int = 0
    validated_topology_epoch: int = -1
    last_assignment_configs: dict[str, str] = field(default_factory=dict)
    assignment_epoch: int = INITIAL_ASSIGNMENT_EPOCH
    assignment_timestamp: int = 0
    topology: StreamsTopology | None = None
    members: dict[str, StreamsMember] = field(default_factory=dict)
    target_assignment: dict[str, StreamsTasks] = field(default_factory=dict)

    @property
    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.topology is None or self.topology.epoch != self.validated_topology_epoch:
            return "NotReady"
        if self.epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's rule: an empty streams group is subscribed to nothing."""
        if not self.members or self.topology is None:
            return False
        return topic in self.topology.source_topics


Group = ClassicGroup | ConsumerGroup | ShareGroup | StreamsGroup
