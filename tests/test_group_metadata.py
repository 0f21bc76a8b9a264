"""Group records of `__consumer_offsets`: classic, consumer, share and streams groups.

Records are written to bytes with the dialect's schemas and decoded back, then replayed
through `GroupCoordinatorReplay`, as a real log would be.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from sharestate.coordinator.consumer_protocol import SubscriptionError, subscribed_topics
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.coordinator.groups import (
    ClassicGroup,
    ConsumerGroup,
    ShareGroup,
    StreamsGroup,
)
from sharestate.records import catalog
from sharestate.records.codec import write_struct
from sharestate.records.keyvalue import KeyValue, decode_key_value
from sharestate.records.spec import StructLayout

DIALECT = catalog.dialect("4.1")
TOPIC = catalog.CONSUMER_OFFSETS_TOPIC
KINDS = {kind.name: kind for kind in DIALECT.topics[TOPIC].values()}
T1 = "q5xWKzzkQ4eA4hoB1xQpEg"


def _struct(layout: StructLayout, fields: dict[str, Any]) -> tuple[Any, ...]:
    values = [*layout.defaults, None]
    for name, value in fields.items():
        index = layout.index(name)
        slot = layout.slots[index]
        assert slot is not None, f"{layout.name}.{name} is not in this version"
        if slot.element is not None and slot.element.struct is not None and value is not None:
            value = tuple(_struct(slot.element.struct, item) for item in value)
        elif slot.struct is not None and value is not None:
            value = _struct(slot.struct, value)
        elif isinstance(value, list):
            value = tuple(value)
        values[index] = value
    return tuple(values)


def _record(name: str, key: dict[str, Any], value: dict[str, Any] | None,
            version: int = 0) -> KeyValue:
    kind = KINDS[name]
    key_bytes = struct.pack(">h", kind.type_id) + write_struct(
        kind.key_layout(), _struct(kind.key_layout(), key))
    value_bytes = None
    if value is not None:
        layout = kind.value_layout(version)
        assert layout is not None
        value_bytes = struct.pack(">h", version) + write_struct(layout, _struct(layout, value))
    kv = decode_key_value(DIALECT, TOPIC, key_bytes, value_bytes)
    assert kv.error is None, kv.error
    return kv


class _Log:
    def __init__(self) -> None:
        self.replay = GroupCoordinatorReplay(DIALECT)
        self.next = 0

    def add(self, name: str, key: dict[str, Any], value: dict[str, Any] | None = None,
            version: int = 0) -> int:
        at = self.next
        assert self.replay.replay(at, -1, _record(name, key, value, version), 1_000 + at)
        self.next += 1
        return at

    def group(self, group_id: str) -> Any:
        return self.replay.groups.groups[group_id]

    def anomalies(self) -> list[tuple[int, str]]:
        return [(a.offset, a.message) for a in self.replay.groups.anomalies]


def _subscription(topics: list[str], version: int = 1, user_data: bytes | None = None,
                  tail: bytes = b"") -> bytes:
    """A ConsumerProtocolSubscription: version, topics, user data, then later fields."""
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data))
    return out + (user_data or b"") + tail


def _member(member_id: str, subscription: bytes, rebalance: int = 300_000) -> dict[str, Any]:
    return {"member_id": member_id, "client_id": "c", "client_host": "/h",
            "rebalance_timeout": rebalance, "session_timeout": 45_000,
            "subscription": subscription, "assignment": b""}


# -- consumer protocol -----------------------------------------------------------------------

def test_subscription_topics_parse_any_version_as_v0() -> None:
    assert subscribed_topics(_subscription(["a", "b"], version=0)) == ["a", "b"]
    owned = struct.pack(">i", 0) + struct.pack(">i", 7)  # v1+ fields after the v0 prefix
    assert subscribed_topics(_subscription(["ö"], version=3, user_data=b"x", tail=owned)) == ["ö"]


@pytest.mark.parametrize("data", [
    b"sub-1",                                              # the fixture's placeholder bytes
    struct.pack(">hi", 0, -1),                             # null topic array
    struct.pack(">hih", 0, 1, 5) + b"ab",                  # truncated topic name
    struct.pack(">hi", 0, 0),                              # no user data length
    struct.pack(">hii", 0, 0, 4) + b"ab",                  # truncated user data
])
def test_malformed_subscriptions_are_refused(data: bytes) -> None:
    with pytest.raises(SubscriptionError):
        subscribed_topics(data)


# -- classic ---------------------------------------------------------------------------------

def test_classic_group_load_state_and_subscriptions() -> None:
    log = _Log()
    log.add("GroupMetadata", {"group": "stable"}, {
        "protocol_type": "consumer", "generation": 4, "protocol": "range", "leader": "m1",
        "current_state_timestamp": 77,
        "members": [_member("m1", _subscription(["a", "b"]), rebalance=-1),
                    _member("m2", _subscription(["c"]))]}, version=3)
    log.add("GroupMetadata", {"group": "empty"}, {
        "protocol_type": "consumer", "generation": 5, "protocol": None, "leader": None,
        "members": []}, version=0)
    log.add("GroupMetadata", {"group": "no-protocol"}, {
        "protocol_type": "consumer", "generation": 1, "protocol": None, "leader": None,
        "members": [_member("m1", _subscription(["a"]))]}, version=1)
    log.add("GroupMetadata", {"group": "connect"}, {
        "protocol_type": "connect", "generation": 1, "protocol": "default", "leader": "m1",
        "members": [_member("m1", b"\x00")]}, version=4)

    stable, empty = log.group("stable"), log.group("empty")
    assert isinstance(stable, ClassicGroup) and stable.state == "Stable"
    assert stable.subscribed_topics == frozenset({"a", "b", "c"})
    assert stable.current_state_timestamp == 77
    assert stable.members["m1"].rebalance_timeout_ms == 45_000  # -1: session timeout
    assert stable.is_subscribed_to("a") and not stable.is_subscribed_to("z")
    assert empty.state == "Empty" and empty.subscribed_topics == frozenset()
    assert empty.current_state_timestamp is None and not empty.is_simple
    no_protocol = log.group("no-protocol")
    assert no_protocol.subscribed_topics is None
    assert no_protocol.subscription_error == "no protocol selected"
    assert no_protocol.is_subscribed_to("anything")  # unknown + consumer protocol
    connect = log.group("connect")
    assert connect.subscribed_topics is None and connect.subscription_error is None
    assert not connect.is_subscribed_to("a")


def test_group_metadata_replaces_and_deletes_any_group_type() -> None:
    log = _Log()
    log.add("ConsumerGroupMetadata", {"group_id": "g"}, {"epoch": 1})
    log.add("GroupMetadata", {"group": "g"}, {"protocol_type": "", "generation": 0,
                                              "members": []}, version=2)
    group = log.group("g")
    assert isinstance(group, ClassicGroup) and group.is_simple
    log.add("ShareGroupMetadata", {"group_id": "s"}, {"epoch": 1})
    log.add("GroupMetadata", {"group": "s"})
    assert "s" not in log.replay.groups.groups


# -- simple groups ---------------------------------------------------------------------------

def test_offset_commit_creates_a_simple_group_that_modern_groups_replace() -> None:
    log = _Log()
    commit = {"offset": 1, "metadata": "", "commit_timestamp": 5}
    for group_id in ("c", "st", "sh"):
        log.add("OffsetCommit", {"group": group_id, "topic": "t", "partition": 0}, commit, 3)
    log.add("OffsetCommit", {"group": "none", "topic": "t", "partition": 0})  # tombstone
    assert "none" not in log.replay.groups.groups
    assert all(log.group(g).is_simple and log.group(g).state == "Empty"
               for g in ("c", "st", "sh"))
    log.add("ConsumerGroupMetadata", {"group_id": "c"}, {"epoch": 3})
    log.add("StreamsGroupTopology", {"group_id": "st"}, {"epoch": 0, "subtopologies": []})
    at = log.add("ShareGroupMetadata", {"group_id": "sh"}, {"epoch": 3})
    assert isinstance(log.group("c"), ConsumerGroup)
    assert isinstance(log.group("st"), StreamsGroup)
    assert isinstance(log.group("sh"), ClassicGroup)  # Kafka refuses: not replaced
    assert log.anomalies() == [
        (at, "ShareGroupMetadata: group sh is a classic group, not a share group "
             "(Kafka fails the load)")]
    # An offset commit for an existing group does not touch it.
    log.add("OffsetCommit", {"group": "c", "topic": "t", "partition": 1}, commit, 3)
    assert isinstance(log.group("c"), ConsumerGroup)


# -- consumer groups -------------------------------------------------------------------------

def test_consumer_group_states() -> None:
    log = _Log()
    member = {"group_id": "g", "member_id": "m1"}
    log.add("ConsumerGroupMemberMetadata", member, {
        "client_id": "c1", "client_host": "/h", "subscribed_topic_names": ["a"],
        "rebalance_timeout_ms": 1000,
        "classic_member_metadata": {"session_timeout_ms": 45_000, "supported_protocols": []}})
    group = log.group("g")
    assert isinstance(group, ConsumerGroup)
    assert group.members["m1"].classic_session_timeout_ms == 45_000
    # Epoch 0, initial assignment epoch 1, member epoch 0: not reconciled.
    assert group.state == "Reconciling"
    log.add("ConsumerGroupMetadata", {"group_id": "g"}, {"epoch": 5, "metadata_hash": 9})
    assert group.state == "Assigning"
    log.add("ConsumerGroupTargetAssignmentMetadata", {"group_id": "g"},
            {"assignment_epoch": 5, "assignment_timestamp": 1})
    log.add("ConsumerGroupTargetAssignmentMember", member,
            {"topic_partitions": [{"topic_id": T1, "partitions": [0, 1]}]})
    assert group.state == "Reconciling"
    log.add("ConsumerGroupCurrentMemberAssignment", member, {
        "member_epoch": 5, "previous_member_epoch": 4, "state": 1,
        "assigned_partitions": [{"topic_id": T1, "partitions": [0]}],
        "partitions_pending_revocation": []})
    assert group.state == "Reconciling"  # state 1: UNREVOKED_PARTITIONS
    log.add("ConsumerGroupCurrentMemberAssignment", member, {
        "member_epoch": 5, "previous_member_epoch": 4, "state": 0,
        "assigned_partitions": [{"topic_id": T1, "partitions": [0, 1]}],
        "partitions_pending_revocation": []})
    assert group.state == "Stable"
    assert group.target_assignment == {"m1": {T1: (0, 1)}}
    log.add("ConsumerGroupRegularExpression", {"group_id": "g", "regular_expression": "b.*"},
            {"topics": ["b1", "b2"], "version": 1, "timestamp": 2})
    assert group.subscribed_topics == {"a", "b1", "b2"}
    log.add("ConsumerGroupRegularExpression", {"group_id": "g", "regular_expression": "b.*"})
    assert group.subscribed_topics == {"a"}

    # Clean removal in Kafka's order leaves no anomaly.
    log.add("ConsumerGroupCurrentMemberAssignment", member)
    log.add("ConsumerGroupTargetAssignmentMember", member)
    log.add("ConsumerGroupMemberMetadata", member)
    assert group.state == "Empty"
    log.add("ConsumerGroupTargetAssignmentMetadata", {"group_id": "g"})
    log.add("ConsumerGroupMetadata", {"group_id": "g"})
    assert "g" not in log.replay.groups.groups
    assert log.anomalies() == []


def test_out_of_order_tombstones_are_applied_and_reported() -> None:
    log = _Log()
    member = {"group_id": "g", "member_id": "m1"}
    log.add("ConsumerGroupMetadata", {"group_id": "g"}, {"epoch": 1})
    log.add("ConsumerGroupCurrentMemberAssignment", member, {
        "member_epoch": 1, "previous_member_epoch": 0, "state": 0})
    log.add("ConsumerGroupTargetAssignmentMember", member, {"topic_partitions": []})
    first = log.add("ConsumerGroupMemberMetadata", member)
    second = log.add("ConsumerGroupMetadata", {"group_id": "g"})
    assert "g" not in log.replay.groups.groups
    assert [offset for offset, _ in log.anomalies()] == [first, first, second, second]
    assert "before its current-assignment tombstone" in log.anomalies()[0][1]
    # Tombstones for unknown groups and members are ignored silently.
    log.add("ConsumerGroupMemberMetadata", {"group_id": "x", "member_id": "m"})
    log.add("ShareGroupMemberMetadata", {"group_id": "x", "member_id": "m"})
    log.add("StreamsGroupMetadata", {"group_id": "x"})
    assert len(log.anomalies()) == 4 and log.replay.groups.groups == {}


# -- share groups ----------------------------------------------------------------------------

def test_share_group_and_state_partition_metadata() -> None:
    log = _Log()
    member = {"group_id": "s", "member_id": "m1"}
    log.add("ShareGroupMemberMetadata", member, {"client_id": "c", "client_host": "/h",
                                                 "subscribed_topic_names": ["orders"]})
    group = log.group("s")
    assert isinstance(group, ShareGroup) and group.state == "Stable"
    assert group.subscribed_topics == {"orders"}
    first = log.add("ShareGroupStatePartitionMetadata", {"group_id": "s"}, {
        "initializing_topics": [{"topic_id": T1, "topic_name": "orders", "partitions": [0, 1]}],
        "initialized_topics": [],
        "deleting_topics": [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "topic_name": "old"}]})
    second = log.add("ShareGroupStatePartitionMetadata", {"group_id": "s"}, {
        "initializing_topics": [],
        "initialized_topics": [{"topic_id": T1, "topic_name": "orders", "partitions": [0, 1]}],
        "deleting_topics": [{"topic_id": "AAAAAAAAAAAAAAAAAAAAAQ", "topic_name": "old"}]})
    info = log.replay.groups.share_partitions["s"]
    assert info.record_offset == second and info.initializing == {}
    orders = info.initialized[T1]
    assert (orders.topic_name, orders.partitions, orders.since_offset) == (
        "orders", frozenset({0, 1}), second)
    old = info.deleting["AAAAAAAAAAAAAAAAAAAAAQ"]
    assert (old.since_offset, old.since_timestamp, old.partitions) == (
        first, 1_000 + first, frozenset())

    log.add("ShareGroupCurrentMemberAssignment", member, {
        "member_epoch": 2, "previous_member_epoch": 1, "state": 0,
        "assigned_partitions": [{"topic_id": T1, "partitions": [0, 1]}]})
    assert group.members["m1"].assigned_partitions == {T1: (0, 1)}
    log.add("ShareGroupCurrentMemberAssignment", member)
    log.add("ShareGroupMemberMetadata", member)
    assert group.state == "Empty"
    log.add("ShareGroupTargetAssignmentMetadata", {"group_id": "s"})
    log.add("ShareGroupMetadata", {"group_id": "s"})
    assert "s" not in log.replay.groups.groups
    assert "s" in log.replay.groups.share_partitions  # kept until its own tombstone
    log.add("ShareGroupStatePartitionMetadata", {"group_id": "s"})
    assert log.replay.groups.share_partitions == {} and log.anomalies() == []


# -- streams groups --------------------------------------------------------------------------

def test_streams_group_states() -> None:
    log = _Log()
    member = {"group_id": "st", "member_id": "m1"}
    log.add("StreamsGroupMemberMetadata", member, {
        "client_id": "c", "client_host": "/h", "rebalance_timeout_ms": 1, "topology_epoch": 2,
        "process_id": "p", "user_endpoint": {"host": "h", "port": 9},
        "client_tags": [{"key": "zone", "value": "a"}]})
    group = log.group("st")
    assert isinstance(group, StreamsGroup) and group.state == "NotReady"
    assert group.members["m1"].user_endpoint == ("h", 9)
    assert group.members["m1"].member_epoch is None
    log.add("StreamsGroupTopology", {"group_id": "st"}, {"epoch": 2, "subtopologies": [
        {"subtopology_id": "0", "source_topics": ["in"],
         "repartition_source_topics": [{"name": "rep", "partitions": 1}]}]})
    assert group.state == "NotReady"  # validated topology epoch still -1
    log.add("StreamsGroupMetadata", {"group_id": "st"},
            {"epoch": 3, "metadata_hash": 1, "validated_topology_epoch": 2})
    assert group.state == "Assigning"
    log.add("StreamsGroupTargetAssignmentMetadata", {"group_id": "st"},
            {"assignment_epoch": 3})
    assert group.state == "Reconciling"  # member has no assignment record yet
    log.add("StreamsGroupCurrentMemberAssignment", member, {
        "member_epoch": 3, "previous_member_epoch": 2, "state": 1,
        "active_tasks": [{"subtopology_id": "0", "partitions": [0]}]})
    assert group.state == "Stable"
    assert group.is_subscribed_to("in") and group.is_subscribed_to("rep")
    assert not group.is_subscribed_to("other")
    log.add("StreamsGroupCurrentMemberAssignment", member)
    log.add("StreamsGroupMemberMetadata", member)
    assert group.state == "Empty" and not group.is_subscribed_to("in")
    assert log.anomalies() == []
