"""Kafka's own answers are the truth: sharestate against a real broker's tools and admin API.

One Kafka 4.3.1 broker (tests/kafka_broker.py) runs the real-client workload
(tests/kafka_workload.py) once per session; every test here asks Kafka a question —
kafka-dump-log on the segment files, kafka-share-groups / kafka-consumer-groups /
kafka-transactions, the broker's log start offsets — and sharestate the same one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kafka_judge import SHARESTATE, decoded_records, differences, dump_records, sharestate_json
from kafka_workload import Workload
from serve_support import ServeProcess, eventually, get

pytestmark = pytest.mark.kafka_broker

GROUP_METADATA = 2
CONSUMER_PROTOCOL_FIELDS = ("subscription", "assignment")


def segment_files(logs: Path, topic: str) -> list[Path]:
    files = sorted(logs.glob(f"{topic}-*/*.log"))
    assert files, f"no {topic} segments in {logs}"
    return files


def consumer_protocol_view(records: dict[Any, dict[str, Any]]) -> int:
    """Drop the members' subscription and assignment of classic `consumer` groups from
    Kafka's dump, where kafka-dump-log decodes them as ConsumerProtocolSubscription /
    ConsumerProtocolAssignment and sharestate keeps the bytes (docs/architecture.md);
    how many members had them."""
    members = 0
    for record in records.values():
        value = record["value"]
        if record["record_type_id"] != GROUP_METADATA or value is None:
            continue
        for member in value["members"]:
            if value["protocol_type"] == "consumer":
                for name in CONSUMER_PROTOCOL_FIELDS:
                    assert name in member
                    del member[name]
                members += 1
    return members


def test_decode_agrees_with_kafka_dump_log_on_share_group_state(
        kafka_workload: Workload, kafka_logs: Path) -> None:
    files = segment_files(kafka_logs, "__share_group_state")
    kafkas = dump_records(kafka_workload.broker.dump_log(files, "share-group-state-decoder"))
    ours = decoded_records(files)
    assert len(kafkas) >= 20
    kinds = {record["record_type_id"] for record in kafkas.values()}
    assert kinds == {0, 1}, "the workload writes ShareSnapshot and ShareUpdate records"
    assert any(record["value"] is None for record in kafkas.values()), "a deleted group"
    assert differences(ours, kafkas) == []


def test_decode_agrees_with_kafka_dump_log_on_consumer_offsets(
        kafka_workload: Workload, kafka_logs: Path) -> None:
    files = segment_files(kafka_logs, "__consumer_offsets")
    kafkas = dump_records(kafka_workload.broker.dump_log(files, "offsets-decoder"))
    ours = decoded_records(files)
    markers = {record["control"]["type"] for record in kafkas.values() if record["control"]}
    assert markers == {"COMMIT", "ABORT"}
    # classic, KIP-848 consumer and share group records all present
    kinds = {record["record_type_id"] for record in kafkas.values()}
    assert {1, 2, 3, 5, 8, 10, 11, 15} <= kinds, kinds
    assert consumer_protocol_view(kafkas) >= 2
    for record in ours.values():
        if record["record_type_id"] == GROUP_METADATA and record["value"]:
            for member in record["value"]["members"]:
                for name in CONSUMER_PROTOCOL_FIELDS:
                    member.pop(name)
    assert differences(ours, kafkas) == []


def _admin_share_view(workload: Workload) -> dict[tuple[str, str, int], dict[str, int] | None]:
    """kafka-share-groups --describe --offsets: per (group, topic, partition) the start
    offset, leader epoch and lag, or None where Kafka holds no state ("-")."""
    view: dict[tuple[str, str, int], dict[str, int] | None] = {}
    for group in [*workload.share_groups, workload.deleted_share_group]:
        for row in workload.share_groups_describe(group):
            where = (group, row["TOPIC"], int(row["PARTITION"]))
            view[where] = None if row["START-OFFSET"] == "-" else {
                "start_offset": int(row["START-OFFSET"]),
                "leader_epoch": int(row["LEADER-EPOCH"]), "lag": int(row["LAG"])}
    return view


def test_share_state_agrees_with_kafka_share_groups_describe(
        kafka_workload: Workload, kafka_logs: Path) -> None:
    admin = _admin_share_view(kafka_workload)
    names = {topic_id: name for name, topic_id in kafka_workload.topic_ids.items()}
    ours = {(row["group_id"], names[row["topic_id"]], row["partition"]): row
            for row in sharestate_json("state", str(kafka_logs))}
    assert not any(group == kafka_workload.deleted_share_group for group, _, _ in ours)
    assert all(group != kafka_workload.deleted_share_group for group, _, _ in admin)
    assert admin[(kafka_workload.reset_share_group, "payments", 0)] == {
        "start_offset": kafka_workload.reset_to, "leader_epoch": 0,
        "lag": kafka_workload.end_offsets[("payments", 0)]}
    compared = 0
    for where, truth in admin.items():
        if truth is None:
            # Kafka prints "-" for a share-partition initialised but never fetched from
            # (start offset -1) and for one it holds no state for.
            assert where not in ours or ours[where]["start_offset"] == -1, where
            continue
        mine = ours[where]
        end = kafka_workload.end_offsets[where[1:]]
        assert {"start_offset": mine["start_offset"], "leader_epoch": mine["leader_epoch"],
                "lag": end - mine["start_offset"] - mine["delivery_complete_count"]
                } == truth, where
        compared += 1
    assert compared >= 8
    assert set(ours) <= set(admin), "sharestate holds state Kafka does not describe"
    assert any(truth is None for truth in admin.values())


def test_consumer_group_offsets_agree_with_kafka(kafka_workload: Workload,
                                                 kafka_logs: Path) -> None:
    ours = sharestate_json("offsets", "--pending", str(kafka_logs))
    committed = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
                 for row in ours if row["state"] == "committed"}
    pending = [row for row in ours if row["state"].startswith("pending")]
    committed.pop((kafka_workload.expiring_group, "payments", 0), None)  # next test
    groups = [*kafka_workload.consumer_groups, kafka_workload.deleted_consumer_group]
    truth = {(row["GROUP"], row["TOPIC"], int(row["PARTITION"])): int(row["CURRENT-OFFSET"])
             for group in groups for row in kafka_workload.consumer_groups_describe(group)
             if row["CURRENT-OFFSET"] != "-"}
    assert committed == truth
    # The transactional group: COMMIT installed, ABORT never, the open one pending.
    txn = (kafka_workload.transactional_group, "payments", 0)
    assert truth[txn] == kafka_workload.committed_txn_offset
    assert [(row["group_id"], row["committed_offset"]) for row in pending] == [
        (kafka_workload.transactional_group, kafka_workload.pending_txn_offset)]
    described = kafka_workload.broker.tool(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server",
        kafka_workload.bootstrap, "describe", "--transactional-id", "tx-offsets").stdout
    header, values = (line.split() for line in described.strip().splitlines()[:2])
    transaction = dict(zip(header, values, strict=False))
    assert transaction["TransactionState"] == "Ongoing"
    assert pending[0]["state"] == f"pending:{transaction['ProducerId']}"
    assert not any(key[0] == kafka_workload.deleted_consumer_group for key in committed)


def test_serve_answers_kafkas_committed_offsets_by_default(kafka_workload: Workload) -> None:
    """`sharestate serve` reads read_committed unless told otherwise: the transactional
    group's aborted and still-open commits are not installed (a consumer sees no markers;
    read_uncommitted showed the open transaction's offset)."""
    service = ServeProcess("--source", f"kafka://{kafka_workload.bootstrap}")
    try:
        assert service.address is not None
        eventually(lambda: get(service.address, "/readyz")[0] == 200,  # type: ignore[arg-type]
                   timeout=60)
        rows = get(service.address, "/v1/consumer-group-offsets")[1]
    finally:
        assert service.stop(signal.SIGTERM) == 0, service.stderr
    committed = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
                 for row in rows}
    committed.pop((kafka_workload.expiring_group, "payments", 0), None)
    groups = [*kafka_workload.consumer_groups, kafka_workload.deleted_consumer_group]
    truth = {(row["GROUP"], row["TOPIC"], int(row["PARTITION"])): int(row["CURRENT-OFFSET"])
             for group in groups for row in kafka_workload.consumer_groups_describe(group)
             if row["CURRENT-OFFSET"] != "-"}
    assert committed == truth
    assert committed[(kafka_workload.transactional_group, "payments", 0)] == (
        kafka_workload.committed_txn_offset)


def test_offset_expiry_forecast_matches_kafkas_expiry(kafka_workload: Workload,
                                                      tmp_path: Path) -> None:
    group = kafka_workload.expiring_group
    settings = kafka_workload.broker.settings
    retention = int(settings["offsets.retention.minutes"])
    check_ms = int(settings["offsets.retention.check.interval.ms"])
    # Kafka expires a simple group's offset once retention has passed since the commit
    # (KIP-211), on its next check: wait until Kafka says so, then read the log.
    deadline = kafka_workload.expiring_commit_ms / 1000 + retention * 60 + 60
    while kafka_workload.consumer_groups_describe(group) and time.time() < deadline:
        time.sleep(1)
    assert not kafka_workload.consumer_groups_describe(group), "Kafka never expired it"
    logs = str(kafka_workload.copy_internal_logs(tmp_path))
    assert not any(row["group_id"] == group for row in sharestate_json("offsets", logs))
    # As of just after the commit, sharestate forecast the expiry Kafka then carried out.
    as_of = str(kafka_workload.expiring_commit_ms + 1000)
    (row,) = [row for row in sharestate_json("offsets", "--as-of-time", as_of,
                                             "--retention-minutes", str(retention), logs)
              if row["group_id"] == group]
    assert row["expiry_reason"] == "commit_timestamp"
    assert row["expires_at"] == row["commit_timestamp"] + retention * 60_000
    (tombstone,) = [record for record in sharestate_json("decode", logs)
                    if record["record_type_id"] == 1 and record["value"] is None
                    and record["key"]["group"] == group]
    assert row["expires_at"] <= tombstone["timestamp"] <= row["expires_at"] + check_ms + 5_000


def test_prune_point_is_kafkas_log_start_after_a_prune_run(kafka_workload: Workload,
                                                           kafka_logs: Path) -> None:
    """Kafka's log start trails sharestate's prune point between prune runs, never leads it
    (architecture.md); after the workload's quiet wait a run has caught up: they are equal."""
    log_start = kafka_workload.log_start_offsets("__share_group_state")
    ours = {int(row["partition"]): row for row in sharestate_json("prune", str(kafka_logs))}
    assert set(ours) <= set(log_start)
    for partition, start in log_start.items():
        row = ours.get(partition)
        recommended = row["prune_offset"] if row else None
        # Kafka deletes up to its lastRedundantOffset on every prune run; after the quiet
        # wait the two must agree. Kafka never moves the start to 0 (no prune then).
        assert (recommended or 0) == start, (partition, row, start)
        # The segment files still hold the records below the start (until Kafka's retention
        # task deletes whole segments): read from the checkpointed start, nothing is left
        # to reclaim.
        if row and start:
            assert (row["log_start_offset"], row["reclaimable_records"]) == (start, 0), row


def _table(warehouse: Path, name: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    rows: list[dict[str, Any]] = DeltaTable(str(warehouse / name)).to_pyarrow_table().to_pylist()
    return rows


@pytest.mark.parametrize("source", ["segment files", "live read_committed",
                                    "live read_uncommitted"])
def test_pipeline_tables_agree_with_kafka(source: str, kafka_workload: Workload,
                                          kafka_logs: Path, tmp_path: Path) -> None:
    """The whole Spark pipeline into Delta: share-group lag and consumer-group offsets."""
    warehouse = tmp_path / "warehouse"
    args = ["run", "--warehouse", str(warehouse), "--conf", "spark.ui.enabled=false"]
    if source.startswith("live"):
        args += ["--source", f"kafka://{kafka_workload.bootstrap}",
                 "--kafka-option", f"isolation.level={source.split()[1]}"]
    else:
        ends = tmp_path / "end-offsets.json"
        ends.write_text(json.dumps([
            {"topic": topic, "partition": partition, "end_offset": end}
            for (topic, partition), end in kafka_workload.end_offsets.items()]))
        args += ["--source", str(kafka_logs), "--end-offsets", str(ends)]
    done = subprocess.run([SHARESTATE, *args], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    names = {topic_id: name for name, topic_id in kafka_workload.topic_ids.items()}
    lag = {(row["group_id"], names[row["topic_id"]], row["partition"]): row
           for row in _table(warehouse, "share_group_lag")}
    admin = _admin_share_view(kafka_workload)
    compared = 0
    for where, truth in admin.items():
        if truth is None:
            assert where not in lag or lag[where]["start_offset"] == -1, where
            continue
        row = lag[where]
        assert not row["lag_is_lower_bound"], row
        assert row["end_offset"] == kafka_workload.end_offsets[where[1:]], row
        assert (row["start_offset"], row["lag"]) == (truth["start_offset"], truth["lag"]), where
        compared += 1
    assert compared >= 8
    current = {(row["group_id"], row["topic"], row["partition"]): row["committed_offset"]
               for row in _table(warehouse, "consumer_group_offsets") if row["is_current"]}
    current.pop((kafka_workload.expiring_group, "payments", 0), None)
    groups = [*kafka_workload.consumer_groups, kafka_workload.deleted_consumer_group]
    truth_offsets = {(row["GROUP"], row["TOPIC"], int(row["PARTITION"])):
                     int(row["CURRENT-OFFSET"])
                     for group in groups for row in kafka_workload.consumer_groups_describe(group)
                     if row["CURRENT-OFFSET"] != "-"}
    if source == "live read_uncommitted":
        # What a consumer sees without transaction markers or producer ids cannot tell a
        # transactional commit from a plain one: aborted and open transactions' offsets
        # look installed, the last one wins (docs/architecture.md). read_committed is
        # Kafka's answer (it hides aborted and undecided transactions).
        group = (kafka_workload.transactional_group, "payments", 0)
        assert current.pop(group) == kafka_workload.pending_txn_offset
        assert truth_offsets.pop(group) == kafka_workload.committed_txn_offset
    assert current == truth_offsets
