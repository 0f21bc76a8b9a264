"""Replay of the group records of `__consumer_offsets` (everything but offset commits).

Rules followed, as Kafka's group coordinator applies them on load:
- GroupMetadata replaces whatever group has the id with a classic group (Empty without
  members, Stable with), and its tombstone removes the group whatever its type.
- A consumer / share / streams record creates its group when a value arrives and the id is
  free. A consumer or streams record also replaces a "simple" classic group (one created for
  offsets alone); any other group of the wrong type makes Kafka fail the load: here that is
  an `Anomaly` and the record is skipped.
- Tombstones for unknown groups or members are ignored. A member tombstone is expected after
  the member's current-assignment tombstone and target-assignment tombstone, and a group
  tombstone after its members and target assignment are gone; Kafka fails the load when that
  order is broken. Here the tombstone is applied anyway and an `Anomaly` is recorded.
- ShareGroupStatePartitionMetadata is kept per group id apart from the group itself (its
  tombstone may follow the group's).
- ConsumerGroupPartitionMetadata (and the 4.0-only ShareGroupPartitionMetadata and
  StreamsGroupPartitionMetadata) only create the group: their topic metadata is not kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sharestate.coordinator.consumer_protocol import SubscriptionError, subscribed_topics
from sharestate.coordinator.groups import (
    CONSUMER_PROTOCOL_TYPE,
    DELETED_ASSIGNMENT_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ClassicGroup,
    ClassicMember,
    ConsumerGroup,
    ConsumerMember,
    Group,
    ResolvedRegex,
    ShareGroup,
    ShareMember,
    StreamsGroup,
    StreamsMember,
    StreamsTasks,
    StreamsTopology,
    Subtopology,
    TaskIds,
    TopicPartitions,
)
from sharestate.coordinator.record_fields import Fields, optional_int
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, Dialect


@dataclass(frozen=True)
class Anomaly:
    """A record Kafka's loader would have failed on."""

    offset: int
    group_id: str
    message: str


@dataclass(frozen=True)
class ShareTopic:
    """A topic in one list of a share group's state-partition metadata.

    `since_offset` / `since_timestamp` are those of the first record of the current unbroken
    run of records listing the topic in that list. Deleting topics have no partitions.
    """

    topic_id: str
    topic_name: str
    partitions: frozenset[int]
    since_offset: int
    since_timestamp: int | None


@dataclass(frozen=True)
class SharePartitionMetadata:
    """ShareGroupStatePartitionMetadata of one share group, topics keyed by topic id."""

    group_id: str
    initializing: Mapping[str, ShareTopic]
    initialized: Mapping[str, ShareTopic]
    deleting: Mapping[str, ShareTopic]
    record_offset: int


@dataclass(frozen=True)
class _Record:
    offset: int
    timestamp: int | None
    name: str
    key: Fields
    value: Fields | None

    @property
    def group_id(self) -> str:
        group_id: str = self.key["group_id" if "group_id" in self.key.layout.names else "group"]
        return group_id


class _WrongGroupType(Exception):
    pass


_Modern = TypeVar("_Modern", bound=ConsumerGroup | ShareGroup | StreamsGroup)


def _partitions(items: list[Fields]) -> TopicPartitions:
    return {item["topic_id"]: tuple(item["partitions"]) for item in items}


def _tasks(items: list[Fields]) -> TaskIds:
    return {item["subtopology_id"]: tuple(item["partitions"]) for item in items}


def _classic_subscriptions(protocol_type: str | None, protocol: str | None,
                           members: list[ClassicMember]) -> tuple[frozenset[str] | None,
                                                                  str | None]:
    """Subscribed topics of a loaded classic group, or None and why they are unknown."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None, None
    if not members:
        return frozenset(), None
    if protocol is None:
        return None, "no protocol selected"
    topics: set[str] = set()
    for member in members:
        try:
            topics.update(subscribed_topics(member.subscription))
        except SubscriptionError as exc:
            return None, f"member {member.member_id}: {exc}"
    return frozenset(topics), None


class GroupMetadata:
    """Groups and share-partition metadata of one `__consumer_offsets` partition."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self.groups: dict[str, Group] = {}
        self.share_partitions: dict[str, SharePartitionMetadata] = {}
        self.anomalies: list[Anomaly] = []
        self._handlers = self._handler_table()

    def _handler_table(self) -> dict[str, Callable[[_Record], None]]:
        """The method that applies each record kind (by its schema name)."""
        return {
            "GroupMetadata": self._classic,
            "ConsumerGroupMetadata": lambda r: self._modern_metadata(r, ConsumerGroup),
            "ConsumerGroupPartitionMetadata": self._consumer_partition_metadata,
            "ConsumerGroupMemberMetadata": self._consumer_member,
            "ConsumerGroupTargetAssignmentMetadata":
                lambda r: self._target_metadata(r, ConsumerGroup),
            "ConsumerGroupTargetAssignmentMember": lambda r: self._target_member(r, ConsumerGroup),
            "ConsumerGroupCurrentMemberAssignment": self._consumer_assignment,
            "ConsumerGroupRegularExpression": self._consumer_regex,
            "ShareGroupMetadata": lambda r: self._modern_metadata(r, ShareGroup),
            "ShareGroupPartitionMetadata": self._share_partition_metadata,
            "ShareGroupMemberMetadata": self._share_member,
            "ShareGroupTargetAssignmentMetadata": lambda r: self._target_metadata(r, ShareGroup),
            "ShareGroupTargetAssignmentMember": lambda r: self._target_member(r, ShareGroup),
            "ShareGroupCurrentMemberAssignment": self._share_assignment,
            "ShareGroupStatePartitionMetadata": self._share_state_partitions,
            "StreamsGroupMetadata": self._streams_metadata,
            "StreamsGroupPartitionMetadata": self._streams_partition_metadata,
            "StreamsGroupTopology": self._streams_topology,
            "StreamsGroupMemberMetadata": self._streams_member,
            "StreamsGroupTargetAssignmentMetadata":
                lambda r: self._target_metadata(r, StreamsGroup),
            "StreamsGroupTargetAssignmentMember": self._streams_target_member,
            "StreamsGroupCurrentMemberAssignment": self._streams_assignment,
        }

    def replay(self, offset: int, type_id: int, key: tuple[Any, ...],
               value: tuple[Any, ...] | None, value_version: int | None,
               timestamp: int | None = None) -> None:
        """Apply one group record (value None = tombstone); `timestamp` is the record's."""
        kind = self._dialect.kind(CONSUMER_OFFSETS_TOPIC, type_id)
        if kind is None or kind.name not in self._handlers:
            raise ValueError(f"record type {type_id} is not a group record in dialect "
                             f"{self._dialect.name}")
        value_fields = None
        if value is not None:
            layout = kind.value_layout(value_version) if value_version is not None else None
            if layout is None:
                raise ValueError(f"{kind.value.name} has no version {value_version}")
            value_fields = Fields(layout, value)
        record = _Record(offset, timestamp, kind.name, Fields(kind.key_layout(), key),
                         value_fields)
        try:
            self._handlers[kind.name](record)
        except _WrongGroupType as exc:
            self._anomaly(record, str(exc))

    def ensure_group(self, group_id: str) -> None:
        """An offset commit for an unknown group creates a simple classic group."""
        if group_id not in self.groups:
            self.groups[group_id] = ClassicGroup(group_id)

    # -- helpers ----------------------------------------------------------------------------

    def _anomaly(self, record: _Record, message: str) -> None:
        self.anomalies.append(Anomaly(record.offset, record.group_id,
                                      f"{record.name}: {message}"))

    def _persisted(self, record: _Record, cls: type[_Modern], create: bool) -> _Modern | None:
        """The group `record` belongs to, created when `create` and the id is free."""
        group_id = record.group_id
        group = self.groups.get(group_id)
        if group is None and not create:
            return None
        if isinstance(group, cls):
            return group
        replaceable = group is None or (cls is not ShareGroup and isinstance(group, ClassicGroup)
                                        and group.is_simple)
        if not replaceable:
            assert group is not None
            raise _WrongGroupType(f"group {group_id} is a {group.type} group, not a "
                                  f"{cls.type} group (Kafka fails the load)")
        created = cls(group_id)
        self.groups[group_id] = created
        return created

    def _check_member_gone(self, record: _Record, epoch: int | None,
                           in_target: bool) -> None:
        member_id = record.key["member_id"]
        if epoch != LEAVE_GROUP_MEMBER_EPOCH:
            self._anomaly(record, f"member {member_id} deleted before its current-assignment "
                                  "tombstone")
        if in_target:
            self._anomaly(record, f"member {member_id} deleted while in the target assignment")

    def _check_group_gone(self, record: _Record, members: int, targets: int,
                          assignment_epoch: int) -> None:
        if members:
            self._anomaly(record, f"group deleted with {members} members left")
        if targets:
            self._anomaly(record, f"group deleted with {targets} target assignments left")
        if assignment_epoch != DELETED_ASSIGNMENT_EPOCH:
            self._anomaly(record, "group deleted before its target-assignment-metadata "
                                  "tombstone")

    # -- shared by the modern group types ---------------------------------------------------

    def _modern_metadata(self, record: _Record, cls: type[ConsumerGroup] | type[ShareGroup]
                         ) -> None:
        value = record.value
        group = self._persisted(record, cls, value is not None)
        if group is None:
            return
        if value is not None:
            group.epoch = value["epoch"]
            group.metadata_hash = value.get("metadata_hash", 0)
            return
        self._check_group_gone(record, len(group.members), len(group.target_assignment),
                               group.assignment_epoch)
        del self.groups[group.group_id]

    def _target_metadata(self, record: _Record, cls: type[_Modern]) -> None:
        value = record.value
        group = self._persisted(record, cls, value is not None)
        if group is None:
            return
        if value is not None:
            group.assignment_epoch = value["assignment_epoch"]
            group.assignment_timestamp = value.get("assignment_timestamp", 0)
            return
        if group.target_assignment:
            self._anomaly(record, "target-assignment metadata deleted with "
                                  f"{len(group.target_assignment)} member assignments left")
        group.assignment_epoch, group.assignment_timestamp = DELETED_ASSIGNMENT_EPOCH, 0

    def _target_member(self, record: _Record, cls: type[ConsumerGroup] | type[ShareGroup]
                       ) -> None:
        value = record.value
        group = self._persisted(record, cls, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        if value is None:
            group.target_assignment.pop(member_id, None)
        else:
            group.target_assignment[member_id] = _partitions(value.items("topic_partitions"))

    # -- classic ----------------------------------------------------------------------------

    def _classic(self, record: _Record) -> None:
        value = record.value
        if value is None:
            self.groups.pop(record.group_id, None)
            return
        members = []
        for item in value.items("members"):
            session_timeout = item["session_timeout"]
            rebalance_timeout = item["rebalance_timeout"]
            members.append(ClassicMember(
                member_id=item["member_id"],
                group_instance_id=item["group_instance_id"],
                client_id=item["client_id"],
                client_host=item["client_host"],
                rebalance_timeout_ms=session_timeout if rebalance_timeout == -1
                else rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=item["subscription"],
                assignment=item["assignment"],
            ))
        protocol_type = value["protocol_type"] or None
        protocol = value["protocol"]
        topics, error = _classic_subscriptions(protocol_type, protocol, members)
        self.groups[record.group_id] = ClassicGroup(
            group_id=record.group_id,
            protocol_type=protocol_type,
            generation=value["generation"],
            protocol=protocol,
            leader=value["leader"],
            current_state_timestamp=optional_int(value["current_state_timestamp"]),
            members={m.member_id: m for m in members},
            subscribed_topics=topics,
            subscription_error=error,
        )

    # -- consumer ---------------------------------------------------------------------------

    def _consumer_partition_metadata(self, record: _Record) -> None:
        group = self._persisted(record, ConsumerGroup, record.value is not None)
        if group is not None:
            group.has_partition_metadata_record = record.value is not None

    def _consumer_member(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, ConsumerGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                self._check_member_gone(record, member.member_epoch,
                                        member_id in group.target_assignment)
                del group.members[member_id]
            return
        member = member or ConsumerMember(member_id)
        member.instance_id = value["instance_id"]
        member.rack_id = value["rack_id"]
        member.client_id = value["client_id"]
        member.client_host = value["client_host"]
        member.subscribed_topic_names = tuple(value["subscribed_topic_names"])
        member.subscribed_topic_regex = value["subscribed_topic_regex"]
        member.rebalance_timeout_ms = value["rebalance_timeout_ms"]
        member.server_assignor = value["server_assignor"]
        classic = value.struct("classic_member_metadata")
        member.classic_session_timeout_ms = (classic["session_timeout_ms"]
                                             if classic is not None else None)
        group.members[member_id] = member

    def _consumer_assignment(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, ConsumerGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                member.member_epoch = member.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
                member.assigned_partitions, member.partitions_pending_revocation = {}, {}
            return
        member = member or ConsumerMember(member_id)
        member.member_epoch = value["member_epoch"]
        member.previous_member_epoch = value["previous_member_epoch"]
        member.state = value["state"]
        member.assigned_partitions = _partitions(value.items("assigned_partitions"))
        member.partitions_pending_revocation = _partitions(
            value.items("partitions_pending_revocation"))
        group.members[member_id] = member

    def _consumer_regex(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, ConsumerGroup, value is not None)
        if group is None:
            return
        regex = record.key["regular_expression"]
        if value is None:
            group.resolved_regexes.pop(regex, None)
        else:
            group.resolved_regexes[regex] = ResolvedRegex(
                frozenset(value["topics"]), value["version"], value["timestamp"])

    # -- share ------------------------------------------------------------------------------

    def _share_partition_metadata(self, record: _Record) -> None:
        self._persisted(record, ShareGroup, record.value is not None)

    def _share_member(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, ShareGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                self._check_member_gone(record, member.member_epoch,
                                        member_id in group.target_assignment)
                del group.members[member_id]
            return
        member = member or ShareMember(member_id)
        member.rack_id = value["rack_id"]
        member.client_id = value["client_id"]
        member.client_host = value["client_host"]
        member.subscribed_topic_names = tuple(value["subscribed_topic_names"])
        group.members[member_id] = member

    def _share_assignment(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, ShareGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                member.member_epoch = member.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
                member.assigned_partitions = {}
            return
        member = member or ShareMember(member_id)
        member.member_epoch = value["member_epoch"]
        member.previous_member_epoch = value["previous_member_epoch"]
        member.state = value["state"]
        member.assigned_partitions = _partitions(value.items("assigned_partitions"))
        group.members[member_id] = member

    def _share_state_partitions(self, record: _Record) -> None:
        value = record.value
        self._persisted(record, ShareGroup, value is not None)
        group_id = record.group_id
        if value is None:
            self.share_partitions.pop(group_id, None)
            return
        previous = self.share_partitions.get(group_id)
        self.share_partitions[group_id] = SharePartitionMetadata(
            group_id=group_id,
            initializing=self._share_topics(record, value.items("initializing_topics"),
                                            previous.initializing if previous else {}),
            initialized=self._share_topics(record, value.items("initialized_topics"),
                                           previous.initialized if previous else {}),
            deleting=self._share_topics(record, value.items("deleting_topics"),
                                        previous.deleting if previous else {}),
            record_offset=record.offset,
        )

    def _share_topics(self, record: _Record, items: list[Fields],
                      before: Mapping[str, ShareTopic]) -> dict[str, ShareTopic]:
        topics: dict[str, ShareTopic] = {}
        for item in items:
            topic_id = item["topic_id"]
            partitions = frozenset(item.get("partitions", ()))
            if topic_id in topics:
                self._anomaly(record, f"topic {topic_id} listed twice (Kafka fails the load)")
                partitions |= topics[topic_id].partitions
            earlier = before.get(topic_id)
            topics[topic_id] = ShareTopic(
                topic_id=topic_id,
                topic_name=item["topic_name"],
                partitions=partitions,
                since_offset=earlier.since_offset if earlier else record.offset,
                since_timestamp=earlier.since_timestamp if earlier else record.timestamp,
            )
        return topics

    # -- streams ----------------------------------------------------------------------------

    def _streams_metadata(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, StreamsGroup, value is not None)
        if group is None:
            return
        if value is not None:
            group.epoch = value["epoch"]
            group.metadata_hash = value.get("metadata_hash", 0)
            group.validated_topology_epoch = value.get("validated_topology_epoch", -1)
            group.last_assignment_configs = {
                item["key"]: item["value"] for item in value.items("last_assignment_configs")}
            return
        self._check_group_gone(record, len(group.members), 0, group.assignment_epoch)
        del self.groups[group.group_id]

    def _streams_partition_metadata(self, record: _Record) -> None:
        self._persisted(record, StreamsGroup, record.value is not None)

    def _streams_topology(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, StreamsGroup, value is not None)
        if group is None:
            return
        if value is None:
            group.topology = None
            return
        group.topology = StreamsTopology(value["epoch"], tuple(
            Subtopology(
                subtopology_id=item["subtopology_id"],
                source_topics=tuple(item["source_topics"]),
                source_topic_regex=tuple(item["source_topic_regex"]),
                repartition_source_topics=tuple(
                    t["name"] for t in item.items("repartition_source_topics")),
                repartition_sink_topics=tuple(item["repartition_sink_topics"]),
                state_changelog_topics=tuple(
                    t["name"] for t in item.items("state_changelog_topics")),
            ) for item in value.items("subtopologies")))

    def _streams_member(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, StreamsGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                self._check_member_gone(record, member.member_epoch,
                                        member_id in group.target_assignment)
                del group.members[member_id]
            return
        member = member or StreamsMember(member_id)
        member.instance_id = value["instance_id"]
        member.rack_id = value["rack_id"]
        member.client_id = value["client_id"]
        member.client_host = value["client_host"]
        member.rebalance_timeout_ms = value["rebalance_timeout_ms"]
        member.topology_epoch = value["topology_epoch"]
        member.process_id = value["process_id"]
        endpoint = value.struct("user_endpoint")
        member.user_endpoint = (endpoint["host"], endpoint["port"]) if endpoint else None
        member.client_tags = {tag["key"]: tag["value"] for tag in value.items("client_tags")}
        group.members[member_id] = member

    def _streams_target_member(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, StreamsGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        if value is None:
            group.target_assignment.pop(member_id, None)
        else:
            group.target_assignment[member_id] = StreamsTasks(
                active=_tasks(value.items("active_tasks")),
                standby=_tasks(value.items("standby_tasks")),
                warmup=_tasks(value.items("warmup_tasks")))

    def _streams_assignment(self, record: _Record) -> None:
        value = record.value
        group = self._persisted(record, StreamsGroup, value is not None)
        if group is None:
            return
        member_id = record.key["member_id"]
        member = group.members.get(member_id)
        if value is None:
            if member is not None:
                member.member_epoch = member.previous_member_epoch = LEAVE_GROUP_MEMBER_EPOCH
                member.active_tasks, member.standby_tasks, member.warmup_tasks = {}, {}, {}
                member.active_tasks_pending_revocation = {}
                member.standby_tasks_pending_revocation = {}
                member.warmup_tasks_pending_revocation = {}
            return
        member = member or StreamsMember(member_id)
        member.member_epoch = value["member_epoch"]
        member.previous_member_epoch = value["previous_member_epoch"]
        member.state = value["state"]
        member.active_tasks = _tasks(value.items("active_tasks"))
        member.standby_tasks = _tasks(value.items("standby_tasks"))
        member.warmup_tasks = _tasks(value.items("warmup_tasks"))
        member.active_tasks_pending_revocation = _tasks(
            value.items("active_tasks_pending_revocation"))
        member.standby_tasks_pending_revocation = _tasks(
            value.items("standby_tasks_pending_revocation"))
        member.warmup_tasks_pending_revocation = _tasks(
            value.items("warmup_tasks_pending_revocation"))
        group.members[member_id] = member
