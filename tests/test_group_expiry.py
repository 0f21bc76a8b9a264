"""KIP-211 offset-expiry forecast: one case per reason code, plus the records fixture."""

from __future__ import annotations

import json

import pytest
from conftest import conformance_dir

from sharestate.coordinator.expiry import (
    DEFAULT_RETENTION_MINUTES,
    ExpiryForecast,
    ExpiryReason,
    forecast_expiry,
    forecast_offset,
)
from sharestate.coordinator.group_offsets import CommittedOffset, GroupOffsets
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.coordinator.groups import (
    ClassicGroup,
    ClassicMember,
    ConsumerGroup,
    ConsumerMember,
    Group,
    ShareGroup,
    StreamsGroup,
    StreamsMember,
    StreamsTopology,
    Subtopology,
)
from sharestate.records import catalog
from sharestate.records.keyvalue import decode_key_value

WEEK = DEFAULT_RETENTION_MINUTES * 60_000
COMMIT_TS = 1_000_000


def _commit(expire: int | None = None) -> CommittedOffset:
    return CommittedOffset(5, None, "", COMMIT_TS, expire, 0, None, None)


def _member(member_id: str = "m1") -> ClassicMember:
    return ClassicMember(member_id, None, "c", "/h", 1, 1, b"", b"")


def _classic(protocol_type: str | None = "consumer", members: bool = True,
             topics: frozenset[str] | None = frozenset({"sub"}),
             empty_since: int | None = None, error: str | None = None) -> ClassicGroup:
    return ClassicGroup("g", protocol_type=protocol_type, protocol="range",
                        current_state_timestamp=empty_since,
                        members={"m1": _member()} if members else {},
                        subscribed_topics=topics, subscription_error=error)


def _streams(with_member: bool) -> StreamsGroup:
    group = StreamsGroup("g", topology=StreamsTopology(1, (
        Subtopology("0", ("src",), (), ("rep",), (), ("log",)),)))
    if with_member:
        group.members["m1"] = StreamsMember("m1")
    return group


CASES: list[tuple[str, Group | None, str, CommittedOffset, bool,
                  tuple[int | None, ExpiryReason, int | None]]] = [
    ("simple group: commit timestamp", ClassicGroup("g"), "t", _commit(), False,
     (COMMIT_TS + WEEK, ExpiryReason.COMMIT_TIMESTAMP, COMMIT_TS)),
    ("explicit expire timestamp wins", ClassicGroup("g"), "t", _commit(expire=42), False,
     (42, ExpiryReason.EXPLICIT_EXPIRE_TIMESTAMP, COMMIT_TS)),
    ("empty classic group: time it became empty",
     _classic(members=False, topics=frozenset(), empty_since=500), "t", _commit(), False,
     (500 + WEEK, ExpiryReason.GROUP_EMPTY_SINCE, 500)),
    ("empty classic group from old metadata: commit timestamp",
     _classic(members=False, topics=frozenset()), "t", _commit(), False,
     (COMMIT_TS + WEEK, ExpiryReason.COMMIT_TIMESTAMP, COMMIT_TS)),
    ("stable consumer-protocol group, unsubscribed topic", _classic(), "t", _commit(), False,
     (COMMIT_TS + WEEK, ExpiryReason.COMMIT_TIMESTAMP, COMMIT_TS)),
    ("stable consumer-protocol group, subscribed topic", _classic(), "sub", _commit(), False,
     (None, ExpiryReason.SUBSCRIBED_TOPIC, COMMIT_TS)),
    ("stable group, subscriptions unknown", _classic(topics=None, error="bad"), "t",
     _commit(expire=42), False, (None, ExpiryReason.SUBSCRIPTIONS_UNKNOWN, None)),
    ("non-empty group of another protocol", _classic("connect", topics=None), "t",
     _commit(), False, (None, ExpiryReason.GROUP_NOT_EMPTY, None)),
    ("pending transaction on the partition", ClassicGroup("g"), "t", _commit(expire=42), True,
     (None, ExpiryReason.PENDING_TRANSACTION, COMMIT_TS)),
    ("consumer group, subscribed", ConsumerGroup("g", members={
        "m1": ConsumerMember("m1", subscribed_topic_names=("sub",))}), "sub", _commit(), False,
     (None, ExpiryReason.SUBSCRIBED_TOPIC, COMMIT_TS)),
    ("consumer group, not subscribed", ConsumerGroup("g"), "t", _commit(), False,
     (COMMIT_TS + WEEK, ExpiryReason.COMMIT_TIMESTAMP, COMMIT_TS)),
    ("streams group with members, source topic", _streams(True), "rep", _commit(), False,
     (None, ExpiryReason.SUBSCRIBED_TOPIC, COMMIT_TS)),
    ("empty streams group subscribes to nothing", _streams(False), "src", _commit(), False,
     (COMMIT_TS + WEEK, ExpiryReason.COMMIT_TIMESTAMP, COMMIT_TS)),
    ("share group", ShareGroup("g"), "t", _commit(), False,
     (None, ExpiryReason.SHARE_GROUP, None)),
    ("group gone", None, "t", _commit(), False, (None, ExpiryReason.NO_GROUP, None)),
    # a damaged commit timestamp: base + retention past int64 made the pipeline's
    # consumer_group_offsets rows (and api.consumer_group_offsets) raise OverflowError
    ("retention ending past int64 never expires", ClassicGroup("g"), "t",
     CommittedOffset(5, None, "", (1 << 63) - 2, None, 0, None, None), False,
     (None, ExpiryReason.COMMIT_TIMESTAMP, (1 << 63) - 2)),
]


@pytest.mark.parametrize(("group", "topic", "commit", "pending", "expected"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_forecast_offset(group: Group | None, topic: str, commit: CommittedOffset,
                         pending: bool,
                         expected: tuple[int | None, ExpiryReason, int | None]) -> None:
    expires_at, reason, base, _ = forecast_offset(group, topic, commit, pending, WEEK)
    assert (expires_at, reason, base) == expected


def test_unknown_subscriptions_carry_the_parse_error() -> None:
    result = forecast_offset(_classic(topics=None, error="member m1: truncated"), "t",
                             _commit(), False, WEEK)
    assert result == (None, ExpiryReason.SUBSCRIPTIONS_UNKNOWN, None, "member m1: truncated")


def test_forecast_expiry_uses_retention_and_pending_state() -> None:
    dialect = catalog.dialect("4.1")
    offsets = GroupOffsets(dialect)
    value = (5, -1, "", COMMIT_TS, -1, "AAAAAAAAAAAAAAAAAAAAAA", None)
    offsets.replay(0, -1, 1, ("g", "t", 0, None), value, 3)
    offsets.replay(1, -1, 1, ("g", "t", 1, None), value, 3)
    offsets.replay(2, 9, 1, ("g", "t", 1, None), value, 3)
    forecasts = forecast_expiry(offsets, {"g": ClassicGroup("g")}, retention_minutes=1)
    assert forecasts == [
        ExpiryForecast("g", "t", 0, COMMIT_TS + 60_000, ExpiryReason.COMMIT_TIMESTAMP,
                       COMMIT_TS),
        ExpiryForecast("g", "t", 1, None, ExpiryReason.PENDING_TRANSACTION, COMMIT_TS),
    ]


def test_forecast_for_the_records_fixture() -> None:
    path = conformance_dir("kafka-4.4-dev") / "consumer_offsets_records.records.jsonl"
    dialect = catalog.dialect("4.1")
    replay = GroupCoordinatorReplay(dialect)
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        value = rec["valueHex"]
        replay.replay(rec["offset"], rec["batch"]["producerId"], decode_key_value(
            dialect, catalog.CONSUMER_OFFSETS_TOPIC, bytes.fromhex(rec["keyHex"]),
            None if value is None else bytes.fromhex(value)))
    forecasts = {(f.group, f.partition): (f.expires_at, f.reason)
                 for f in forecast_expiry(replay.offsets, replay.groups.groups)}
    # Both groups holding offsets are simple groups created by the commits themselves.
    assert forecasts[("classic-group", 1)] == (1760086400000,
                                               ExpiryReason.EXPLICIT_EXPIRE_TIMESTAMP)
    assert forecasts[("classic-group", 9)] == (1760000000000 + WEEK,
                                               ExpiryReason.COMMIT_TIMESTAMP)
    assert forecasts[("grupo-ünïcødé-🚀", 0)] == (1760000000006 + WEEK,
                                                ExpiryReason.COMMIT_TIMESTAMP)
    assert len(forecasts) == 7
