"""Audit findings (`sharestate.analytics.audit`): per-record rules, transactions, replay
findings and cross-topic checks, on hand-built records and on Kafka's fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import conformance_dir

from sharestate.analytics.audit import (
    ShareAuditor,
    TransactionAuditor,
    cross_topic_rows,
    finding_row,
    log_finding_rows,
    shard_finding_rows,
)
from sharestate.coordinator.group_metadata import SharePartitionMetadata, ShareTopic
from sharestate.coordinator.share_findings import ShardFinding
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareValue,
    StateBatch,
)
from sharestate.log import LogFinding, discover
from sharestate.replay.logs import PartitionLog, partition_logs
from sharestate.replay.share_log import replay_share_log
from sharestate.tables.spec import table

K = ShareKey("g", "tid", 0)
NAMES = table("audit_findings").names


def _snapshot(snapshot_epoch: int, state_epoch: int, leader_epoch: int,
              start: int) -> ShareValue:
    return ShareValue(True, snapshot_epoch, state_epoch, leader_epoch, start, -1, 0, 0,
                      (StateBatch(start, start + 9, 0, 1),) if start >= 0 else ())


def _update(leader_epoch: int, start: int, snapshot_epoch: int = 0) -> ShareValue:
    return ShareValue(False, snapshot_epoch, None, leader_epoch, start, -1, None, None, ())


def _audit(*records: tuple[int, ShareValue | None]) -> list[tuple[int, str, str]]:
    """Feed (type id, value) records at offsets 0, 1, ... -> (offset, rule, severity)."""
    auditor = ShareAuditor(5)
    for offset, (type_id, value) in enumerate(records):
        auditor.observe(offset, 1_000 + offset, type_id, K, value)
    rows = auditor.drain()
    assert all(list(r) == NAMES for r in rows) and auditor.drain() == []
    return [(r["offset"], r["rule"], r["severity"]) for r in rows]


def test_a_clean_history_has_no_findings() -> None:
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 1, 0, 100)),
                  (UPDATE_TYPE, _update(-1, 105)),
                  (UPDATE_TYPE, _update(2, -1)),
                  (SNAPSHOT_TYPE, _snapshot(1, 1, 2, 110)),
                  (UPDATE_TYPE, _update(2, 110, snapshot_epoch=1))) == []


def test_leader_epoch_regression_within_a_state_epoch() -> None:
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 1, 3, 100)),
                  (UPDATE_TYPE, _update(2, 101)),
                  (UPDATE_TYPE, _update(-1, 102)),
                  (SNAPSHOT_TYPE, _snapshot(1, 1, 1, 103))) == [
        (1, "epoch_regression", "warning"), (3, "epoch_regression", "warning")]


def test_offset_reset_bumps_the_state_epoch_and_restarts_leader_epochs() -> None:
    # An initialisation writes leader epoch 0 and may move the SPSO anywhere.
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 1, 4, 100)),
                  (SNAPSHOT_TYPE, _snapshot(1, 2, 0, 50)),
                  (UPDATE_TYPE, _update(0, 60))) == [(1, "state_epoch_bump", "info")]


def test_state_epoch_regression_is_an_error() -> None:
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 3, 0, 100)),
                  (SNAPSHOT_TYPE, _snapshot(1, 2, 0, 100))) == [
        (1, "epoch_regression", "error")]


def test_spso_moving_back_within_a_state_epoch() -> None:
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 1, 0, 100)),
                  (UPDATE_TYPE, _update(0, 90)),
                  (UPDATE_TYPE, _update(0, -1)),
                  (SNAPSHOT_TYPE, _snapshot(1, 1, 0, 80))) == [
        (1, "spso_regression", "error"), (3, "spso_regression", "error")]


def test_snapshot_epoch_gap() -> None:
    assert _audit((SNAPSHOT_TYPE, _snapshot(0, 1, 0, 100)),
                  (SNAPSHOT_TYPE, _snapshot(2, 1, 0, 100)),
                  (SNAPSHOT_TYPE, _snapshot(2, 1, 0, 100))) == [
        (1, "snapshot_epoch_gap", "warning"), (2, "snapshot_epoch_gap", "warning")]


def test_deletion_and_reinitialisation() -> None:
    auditor = ShareAuditor(5)
    auditor.observe(0, 10, SNAPSHOT_TYPE, K, _snapshot(3, 2, 1, 100))
    auditor.observe(1, 11, SNAPSHOT_TYPE, K, None)
    auditor.observe(2, 12, SNAPSHOT_TYPE, K, _snapshot(0, 3, 0, -1))
    auditor.observe(3, 13, SNAPSHOT_TYPE, K, None)
    auditor.observe(4, 14, SNAPSHOT_TYPE, K, _snapshot(0, 1, 0, 5))  # not above 3: no bump
    auditor.observe(5, 15, UPDATE_TYPE, K, None)  # a type-1 tombstone is the shard's finding
    rows = auditor.drain()
    assert [(r["offset"], r["rule"]) for r in rows] == [
        (1, "deletion"), (2, "state_epoch_bump"), (3, "deletion")]
    deletion, bump, _ = rows
    assert deletion == finding_row(
        "deletion", "share-partition state deleted (tombstone)", topic="__share_group_state",
        partition=5, offset=1, timestamp=11, group_id="g", topic_id="tid", share_partition=0,
        detail={"had_state": True, "state_epoch": 2, "start_offset": 100})
    assert json.loads(bump["detail_json"]) == {"from": 2, "to": 3, "start_offset": -1,
                                               "after_deletion": True}


def test_transactions_abort_only_their_open_records() -> None:
    txns = TransactionAuditor("__consumer_offsets", 2)
    txns.record(10, 7, True, "a")
    txns.record(11, -1, False, "b")
    txns.record(12, 7, True, "a")
    txns.record(13, 8, True, "c")
    txns.marker(14, 99, 7, False, 3)
    txns.marker(15, 100, 8, True)
    txns.marker(16, 101, 9, False)      # nothing open: Kafka ignores it
    (row,) = txns.drain()
    assert (row["rule"], row["severity"], row["offset"], row["timestamp"], row["group_id"]) == \
        ("aborted_transaction", "info", 14, 99, "a")
    assert json.loads(row["detail_json"]) == {
        "producer_id": 7, "producer_epoch": 3, "records": 2, "first_offset": 10,
        "last_offset": 12, "group_ids": ["a"]}


def test_shard_and_log_findings_become_rows() -> None:
    shard = [ShardFinding(12, "update-tombstone", "m1", K),
             ShardFinding(13, "unknown-record-type", "m2", None)]
    rows = list(shard_finding_rows(shard, 4))
    assert [(r["rule"], r["severity"], r["offset"], r["group_id"]) for r in rows] == [
        ("update_tombstone", "error", 12, "g"), ("unknown_record_type", "warning", 13, None)]
    (row,) = log_finding_rows([LogFinding("crc_mismatch", "bad crc", 61, 7, b"", 0)],
                              "__share_group_state", 4)
    assert (row["rule"], row["severity"], row["offset"], row["message"]) == \
        ("decode_error", "error", 7, "bad crc")
    assert json.loads(row["detail_json"]) == {"kind": "crc_mismatch", "position": 61}


def test_cross_topic_rules() -> None:
    def topic(topic_id: str, name: str, partitions: set[int]) -> dict[str, ShareTopic]:
        return {topic_id: ShareTopic(topic_id, name, frozenset(partitions), 3, 30)}

    metadata = {"g": SharePartitionMetadata("g", {}, topic("tid", "orders", {0, 1}),
                                            topic("old", "gone", set()), 9)}
    state = {K: 4, ShareKey("g", "old", 2): 1, ShareKey("x", "tid", 0): None}
    rows = list(cross_topic_rows(metadata, state, offsets_partition=11))
    assert all(list(r) == NAMES for r in rows)
    assert [(r["rule"], r["group_id"], r["topic_id"], r["share_partition"], r["topic"],
             r["partition"], r["offset"]) for r in rows] == [
        ("orphaned_state", "g", "old", 2, "__share_group_state", 1, None),
        ("orphaned_state", "x", "tid", 0, "__share_group_state", None, None),
        ("initialized_without_state", "g", "tid", 1, "__consumer_offsets", 11, 9),
        ("stuck_deleting", "g", "old", None, "__consumer_offsets", 11, 3),
    ]
    assert json.loads(rows[0]["detail_json"]) == {"reason": "topic_deleting"}
    assert json.loads(rows[3]["detail_json"]) == {"topic_name": "gone", "state_partitions": [2]}


# -- fixtures -------------------------------------------------------------------------------

def _log(name: str) -> PartitionLog:
    (log,) = partition_logs(discover([conformance_dir("kafka-4.4-dev") / name]))[0]
    return log


def _walk(log: PartitionLog) -> list[dict[str, Any]]:
    auditor = ShareAuditor(log.partition, dialects=log.dialects)
    for item in log.batches():
        auditor.batch(item)
    return auditor.drain()


def test_fixture_tombstones_and_reinitialisation() -> None:
    rows = _walk(_log("share_tombstones.log"))
    deletions = [r for r in rows if r["rule"] == "deletion"]
    assert [r["offset"] for r in deletions] == [30, 31, 32, 33]
    assert [json.loads(r["detail_json"])["had_state"] for r in deletions] == \
        [False, True, False, True]
    (reinit,) = [r for r in rows if r["offset"] == 34]
    assert (reinit["rule"], reinit["group_id"], reinit["share_partition"]) == \
        ("state_epoch_bump", "g1", 0)
    assert json.loads(reinit["detail_json"]) == {"from": None, "to": 4, "start_offset": -1,
                                                 "after_deletion": True}


def test_fixture_update_tombstones() -> None:
    log = _log("share_update_tombstone.log")
    result = replay_share_log(log)
    rows = list(shard_finding_rows(result.shard.findings, log.partition))
    assert [(r["rule"], r["offset"], r["group_id"]) for r in rows] == [
        ("update_tombstone", 12, "g1"), ("update_tombstone", 13, "never-written")]
    assert all(r["offset"] not in (12, 13) for r in _walk(log))


def test_fixture_aborted_share_state_transactions() -> None:
    rows = [r for r in _walk(_log("share_txn.log")) if r["rule"] == "aborted_transaction"]
    details = [json.loads(r["detail_json"]) for r in rows]
    assert [(d["producer_id"], d["producer_epoch"]) for d in details] == [(4001, 0), (4002, 1)]
    assert {r["severity"] for r in rows} == {"warning"}
    records = [json.loads(line) for line in (conformance_dir("kafka-4.4-dev")
                                             / "share_txn.records.jsonl").read_text("utf-8")
               .splitlines()]
    for row, detail in zip(rows, details, strict=True):
        pid = detail["producer_id"]
        marker = next(r for r in records if r["offset"] == row["offset"])
        assert marker["control"]["type"] == "ABORT" and marker["batch"]["producerId"] == pid
        aborted = [r["offset"] for r in records if r["batch"]["producerId"] == pid
                   and r["batch"]["producerEpoch"] == detail["producer_epoch"]
                   and "control" not in r]
        assert (detail["records"], detail["first_offset"], detail["last_offset"]) == \
            (len(aborted), aborted[0], aborted[-1])


def test_fixture_aborted_offset_commits() -> None:
    log = _log("consumer_offsets_txn.log")
    txns = TransactionAuditor(log.topic, log.partition)
    for item in log.batches():
        txns.batch(item)
    assert [(r["offset"], json.loads(r["detail_json"])["producer_id"], r["group_id"],
             r["severity"]) for r in txns.drain()] == [
        (510, 7001, "txn-group", "info"), (514, 7000, "txn-group", "info")]


def test_kafka_written_workload_audits_clean() -> None:
    rows = _walk(_log("share_replay_small.log"))
    assert {r["rule"] for r in rows} == {"deletion", "state_epoch_bump"}
    assert {r["severity"] for r in rows} == {"info"}


def test_damaged_log_gives_decode_errors(tmp_path: Path) -> None:
    data = bytearray((conformance_dir("kafka-4.4-dev") / "share_tombstones.log").read_bytes())
    data[200] ^= 0xFF
    damaged = tmp_path / "share_tombstones.log"
    damaged.write_bytes(bytes(data))
    (log,) = partition_logs(discover([damaged]))[0]
    result = replay_share_log(log)
    rows = list(log_finding_rows(result.findings, log.topic, log.partition))
    assert rows and {(r["rule"], r["severity"]) for r in rows} == {("decode_error", "error")}
