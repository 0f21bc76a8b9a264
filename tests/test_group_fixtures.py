"""Group-coordinator replay against Kafka's own replay of the `__consumer_offsets` fixtures.

Every line of `consumer_offsets_*.records.jsonl` is decoded from its key/value bytes and
replayed in log order as Kafka's loader does (control batches: COMMIT/ABORT markers with the
batch's producer id; data batches: the batch's producer id). For kafka-4.4-dev the result must
equal `*.final_state.json` (committed offsets, pending producers, groups) and the per-record
decisions of `*.replay.jsonl`; the older kafka-4.0-dev files must replay cleanly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir

from sharestate.coordinator.group_offsets import CommittedOffset
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.coordinator.groups import ClassicGroup, ConsumerGroup, StreamsGroup
from sharestate.records import catalog
from sharestate.records.keyvalue import decode_key_value
from sharestate.records.spec import ZERO_UUID

TOPIC = catalog.CONSUMER_OFFSETS_TOPIC


def _replay(path: Path, dialect_name: str) -> tuple[GroupCoordinatorReplay, list[dict[str, Any]]]:
    """Replay one records.jsonl; also return Kafka-style per-record decisions."""
    dialect = catalog.dialect(dialect_name)
    replay = GroupCoordinatorReplay(dialect)
    decisions: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        batch = rec["batch"]
        offset = rec["offset"]
        if batch["isControl"]:
            control = rec["control"]["type"]
            if control in ("COMMIT", "ABORT"):
                replay.end_transaction(batch["producerId"], control == "COMMIT", offset)
            decisions.append({"offset": offset, "control": control})
            continue
        value_hex = rec["valueHex"]
        kv = decode_key_value(dialect, TOPIC, bytes.fromhex(rec["keyHex"]),
                              None if value_hex is None else bytes.fromhex(value_hex))
        applied = replay.replay(offset, batch["producerId"], kv, rec["timestamp"])
        assert applied == ("deserializeException" not in rec), (offset, kv.error)
        if applied:
            decisions.append({"offset": offset, "recordType": kv.type_id})
        else:
            decisions.append({"offset": offset, "skipped": kv.type_id})
    return replay, decisions


def _row(group: str, topic: str, partition: int, commit: CommittedOffset) -> dict[str, Any]:
    return {
        "group": group, "topic": topic, "partition": partition,
        "committedOffset": commit.committed_offset,
        "leaderEpoch": commit.leader_epoch,
        "metadata": commit.metadata,
        "commitTimestampMs": commit.commit_timestamp,
        "expireTimestampMs": commit.expire_timestamp,
        "recordOffset": commit.record_offset,
        "topicId": commit.topic_id or ZERO_UUID,
    }


def _key(row: dict[str, Any]) -> tuple[str, str, int]:
    return row["group"], row["topic"], row["partition"]


@pytest.mark.parametrize("name", ["consumer_offsets_records", "consumer_offsets_txn"])
def test_replay_matches_kafka(name: str) -> None:
    folder = conformance_dir("kafka-4.4-dev")
    replay, decisions = _replay(folder / f"{name}.records.jsonl", "4.1")
    expected = json.loads((folder / f"{name}.final_state.json").read_text(encoding="utf-8"))

    rows = sorted((_row(g, t, p, c) for (g, t, p), c in replay.offsets.committed()), key=_key)
    assert rows == sorted(expected["committedOffsets"], key=_key)
    assert replay.offsets.pending_producer_ids() == sorted(
        expected["pendingTransactionalProducerIds"])
    groups = sorted(({"groupId": g.group_id, "type": str(g.type), "state": g.state}
                     for g in replay.groups.groups.values()), key=lambda g: g["groupId"])
    assert groups == sorted(expected["groups"], key=lambda g: g["groupId"])
    assert replay.groups.anomalies == []

    kafka = [json.loads(line) for line in
             (folder / f"{name}.replay.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [d["offset"] for d in decisions] == [k["offset"] for k in kafka]
    for ours, theirs in zip(decisions, kafka, strict=True):
        assert ours.keys() == theirs.keys(), (ours, theirs)
        if "recordType" in ours or "control" in ours:
            assert ours == theirs


def test_records_fixture_details() -> None:
    """Facts of the records fixture beyond Kafka's summary."""
    replay, _ = _replay(conformance_dir("kafka-4.4-dev") / "consumer_offsets_records.records.jsonl",
                        "4.1")
    groups = replay.groups.groups
    assert [offset for offset, _ in replay.skipped] == [46, 47, 48]
    v4, simple, cg, stg = (groups[g] for g in ("classic-group-v4", "classic-group", "cg", "stg"))
    assert isinstance(v4, ClassicGroup) and isinstance(simple, ClassicGroup)
    assert v4.protocol_type == "consumer" and v4.generation == 5
    assert v4.current_state_timestamp == 1760000001004
    assert sorted(v4.members) == ["member-1", "member-2"]
    assert v4.members["member-1"].group_instance_id == "static-1"
    # "sub-1" is no ConsumerProtocolSubscription: subscriptions unknown, as in Kafka.
    assert v4.subscribed_topics is None and v4.subscription_error
    assert simple.is_simple and simple.protocol_type is None
    assert isinstance(cg, ConsumerGroup)
    assert cg.subscribed_topics == {"orders", "payments", "orders-eu"}
    assert cg.members["m1"].assigned_partitions == {"q5xWKzzkQ4eA4hoB1xQpEg": (0, 2)}
    assert isinstance(stg, StreamsGroup)
    assert stg.topology is not None and stg.validated_topology_epoch == 2
    assert "sg" not in groups and "sg" not in replay.groups.share_partitions


def test_txn_fixture_history() -> None:
    """The history hook sees every transactional outcome of the txn fixture."""
    events: list[tuple[str, int, int, int]] = []
    dialect = catalog.dialect("4.1")
    replay = GroupCoordinatorReplay(
        dialect, lambda e: events.append((str(e.type), e.offset, e.partition,
                                          e.commit.record_offset)))
    path = conformance_dir("kafka-4.4-dev") / "consumer_offsets_txn.records.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec["batch"]["isControl"]:
            replay.end_transaction(rec["batch"]["producerId"], rec["control"]["type"] == "COMMIT",
                                   rec["offset"])
        else:
            value = rec["valueHex"]
            replay.replay(rec["offset"], rec["batch"]["producerId"], decode_key_value(
                dialect, TOPIC, bytes.fromhex(rec["keyHex"]),
                None if value is None else bytes.fromhex(value)))
    by_type: dict[str, list[tuple[int, int, int]]] = {}
    for type_, offset, partition, record_offset in events:
        by_type.setdefault(type_, []).append((offset, partition, record_offset))
    assert by_type["applied"] == [(500, 0, 500), (501, 1, 501), (502, 2, 502)]
    assert by_type["committed"] == [(509, 0, 503), (509, 1, 504), (509, 2, 505),
                                    (518, 0, 515), (518, 1, 516)]
    assert by_type["aborted"] == [(510, 0, 506), (510, 1, 507), (510, 2, 508),
                                  (514, 0, 511), (514, 1, 512), (514, 2, 513)]
    assert by_type["deleted"] == [(517, 2, 505)]
    assert len(by_type["pending"]) == 11
    txn = replay.offsets.get("txn-group", "in", 0)
    plain = replay.offsets.get("plain-group", "in", 0)
    assert txn is not None and txn.producer_id == 7000
    assert plain is not None and plain.producer_id is None


def test_kafka_40_records_replay() -> None:
    """The 4.0-format records file: type 0 is an OffsetCommit key, type 9 exists.

    Its share group is deleted while it still has a member and a target assignment (no member
    tombstones were written): today's Kafka refuses that on load, so it shows as anomalies.
    """
    replay, _ = _replay(conformance_dir("kafka-4.0-dev") / "consumer_offsets_records.records.jsonl",
                        "4.0")
    assert replay.skipped == []
    assert [(a.offset, a.group_id, a.message.split(": ", 1)[1])
            for a in replay.groups.anomalies] == [
        (28, "sg", "group deleted with 1 members left"),
        (28, "sg", "group deleted with 1 target assignments left"),
        (28, "sg", "group deleted before its target-assignment-metadata tombstone"),
    ]
    offsets = {key: c.committed_offset for key, c in replay.offsets.committed()}
    assert offsets == {("classic-group", "orders", 1): 142, ("classic-group", "orders", 2): 242,
                       ("classic-group", "orders", 3): 342, ("classic-group", "orders", 4): 442}
    v1 = replay.offsets.get("classic-group", "orders", 1)
    assert v1 is not None and v1.expire_timestamp == 1730086400000
    states = {g.group_id: (str(g.type), g.state) for g in replay.groups.groups.values()}
    assert states == {
        "classic-group": ("classic", "Empty"),
        "classic-group-v1": ("classic", "Stable"), "classic-group-v2": ("classic", "Stable"),
        "classic-group-v3": ("classic", "Stable"), "classic-group-v4": ("classic", "Stable"),
        "cg": ("consumer", "Stable"),
    }
    assert replay.groups.share_partitions == {}


def test_kafka_40_txn_replay() -> None:
    """4.0 txn file: producer 7000's first transaction commits, everything else aborts."""
    replay, _ = _replay(conformance_dir("kafka-4.0-dev") / "consumer_offsets_txn.records.jsonl",
                        "4.0")
    committed = {key: (c.committed_offset, c.record_offset, c.producer_id)
                 for key, c in replay.offsets.committed()}
    assert committed == {
        ("plain-group", "in", 0): (10, 500, None),
        ("plain-group", "in", 1): (11, 501, None),
        ("plain-group", "in", 2): (12, 502, None),
        ("txn-group", "in", 0): (1000, 503, 7000),
        ("txn-group", "in", 1): (1001, 504, 7000),
        ("txn-group", "in", 2): (1002, 505, 7000),
    }
    assert replay.offsets.pending_producer_ids() == []
