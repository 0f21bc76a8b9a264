"""`sharestate state / prune / offsets` against Kafka's own replay of the fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_root

from sharestate.app.cli import main
from sharestate.records.spec import snake_case

# Offsets where Kafka 4.0-dev's replay threw on a tombstone (a pre-release defect): we delete
# the key as released Kafka does, so Kafka's state differs from ours from there on.
DIVERGENT_KEYS_4_0 = {("share_tombstones", "grupo-ünïcødé-✓-🚀", "AAAAAAAAAAAAAAAAAAAAAQ", 1)}


def _run(tmp_path: Path, *argv: str) -> tuple[int, list[dict[str, Any]]]:
    out = tmp_path / "rows.jsonl"
    status = main([*argv, "--output", str(out)])
    return status, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _sibling(log: Path, suffix: str) -> Path:
    """`share_x.log` / `share_x.log.gz` -> `share_x<suffix>`."""
    return log.with_name(log.name.split(".")[0] + suffix)


def _limit(log: Path) -> list[str]:
    """The workload's snapshot-update limit (fixtures use Kafka's default)."""
    summary = _sibling(log, ".summary.json")
    if not summary.is_file():
        return []
    config = json.loads(summary.read_text("utf-8"))
    return ["--snapshot-update-records",
            str(config["shareCoordinatorSnapshotUpdateRecordsPerSnapshot"])]


def _share_logs() -> list[Any]:
    """Kafka's share-state fixtures; the large ones (the benchmark's) marked slow."""
    root = conformance_root()
    found = sorted([*root.glob("*/share_*.log"), *root.glob("*/share_*.log.gz")]) \
        if root.is_dir() else []
    return [pytest.param(p, marks=[pytest.mark.slow] if "_large" in p.name else [])
            for p in found]


def _expected_partition(kafka: dict[str, Any]) -> dict[str, Any]:
    state = kafka["state"]
    batches = [{snake_case(k): v for k, v in b.items()} for b in state["stateBatches"]]
    return {
        "group_id": kafka["groupId"], "topic_id": kafka["topicId"],
        "partition": kafka["partition"], "state_epoch": state["stateEpoch"],
        "snapshot_epoch": state["snapshotEpoch"], "leader_epoch": state["leaderEpoch"],
        "start_offset": state["startOffset"], "state_batches": batches,
        "delivery_complete_count": state.get("deliveryCompleteCount"),
        "create_timestamp": state.get("createTimestamp"),
        "write_timestamp": state.get("writeTimestamp"),
        "max_leader_epoch": kafka["leaderEpochMap"], "max_state_epoch": kafka["stateEpochMap"],
        "snapshot_update_count": kafka["snapshotUpdateCount"],
        **({"last_snapshot_offset": kafka["lastSnapshotOffset"]}
           if "lastSnapshotOffset" in kafka else {}),
    }


def _compare(rows: list[dict[str, Any]], kafka_state: dict[str, Any], name: str) -> None:
    ours = {(r["group_id"], r["topic_id"], r["partition"]): r for r in rows}
    expected = {}
    for p in kafka_state["partitions"]:
        if p["state"] is None:
            continue
        key = (p["groupId"], p["topicId"], p["partition"])
        if (name, *key) in DIVERGENT_KEYS_4_0:
            assert key not in ours, f"{name}: {key} was tombstoned and must be gone"
            continue
        expected[key] = _expected_partition(p)
    assert set(ours) == set(expected), name
    for key, want in expected.items():
        got = {k: ours[key][k] for k in want}
        assert got == want, f"{name} {key}"
        assert ours[key]["as_of_offset"] == kafka_state["afterOffset"], name


@pytest.mark.parametrize("log", _share_logs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_state_at_end_equals_kafka_final_state(log: Path, tmp_path: Path) -> None:
    final = _sibling(log, ".final_state.jsonl")
    if not final.is_file():
        final = _sibling(log, ".final_state.json")
    kafka_state = json.loads(final.read_text(encoding="utf-8").splitlines()[0]) \
        if final.suffix == ".jsonl" else json.loads(final.read_text(encoding="utf-8"))
    status, rows = _run(tmp_path, "state", str(log), *_limit(log))
    _compare(rows, kafka_state, log.name.split(".")[0])
    assert status in (0, 1)


def _checkpointed_logs() -> list[Path]:
    root = conformance_root()
    return sorted(root.glob("*/share_replay_small.log")) if root.is_dir() else []


@pytest.mark.parametrize("log", _checkpointed_logs(), ids=lambda p: p.parent.name)
def test_state_as_of_every_checkpoint(log: Path, tmp_path: Path) -> None:
    checkpoints = [json.loads(line) for line in
                   log.with_suffix(".checkpoints.jsonl").read_text("utf-8").splitlines()]
    for checkpoint in checkpoints:
        _, rows = _run(tmp_path, "state", str(log), "--as-of-offset",
                       str(checkpoint["afterOffset"]), *_limit(log))
        _compare(rows, checkpoint, log.stem)


def test_prune_points_follow_kafka(tmp_path: Path) -> None:
    log = conformance_root() / "kafka-4.4-dev" / "share_replay_small.log"
    if not log.is_file():
        pytest.skip(f"{log} not found")
    points = [json.loads(line) for line in
              log.with_suffix(".prune.jsonl").read_text("utf-8").splitlines()]
    for here, after in zip(points, [*points[1:], None], strict=True):
        for offset in {here["offset"], (after["offset"] - 1) if after else here["offset"]}:
            _, rows = _run(tmp_path, "prune", str(log), "--as-of-offset", str(offset))
            assert rows[0]["prune_offset"] == here["lastRedundantOffset"], offset


def test_prune_reports_holding_keys_and_reclaimable_bytes(tmp_path: Path) -> None:
    log = conformance_root() / "kafka-4.4-dev" / "share_replay_small.log"
    if not log.is_file():
        pytest.skip(f"{log} not found")
    _, rows = _run(tmp_path, "prune", str(log))
    (row,) = rows
    kafka = json.loads(log.with_suffix(".final_state.json").read_text("utf-8"))
    assert row["prune_offset"] == kafka["lastRedundantOffset"]
    holders = [p for p in kafka["partitions"] if p["lastSnapshotOffset"] == row["prune_offset"]]
    assert [(h["group_id"], h["topic_id"], h["partition"]) for h in row["holding"]] == \
        sorted((p["groupId"], p["topicId"], p["partition"]) for p in holders)
    below = [r for r in (json.loads(line) for line in
                         log.with_suffix(".records.jsonl").read_text("utf-8").splitlines())
             if r["batch"]["lastOffset"] < row["prune_offset"]]
    assert row["reclaimable_records"] == len(below)
    assert row["reclaimable_bytes"] == sum(
        {r["batch"]["position"]: r["batch"]["sizeInBytes"] for r in below}.values())


def test_state_as_of_time_stops_at_the_first_later_record(tmp_path: Path) -> None:
    log = conformance_root() / "kafka-4.4-dev" / "share_replay_small.log"
    if not log.is_file():
        pytest.skip(f"{log} not found")
    records = [json.loads(line) for line in
               log.with_suffix(".records.jsonl").read_text("utf-8").splitlines()]
    middle = records[len(records) // 2]
    _, by_offset = _run(tmp_path, "state", str(log), "--as-of-offset", str(middle["offset"]),
                        "--snapshot-update-records", "5")
    _, by_time = _run(tmp_path, "state", str(log), "--as-of-time", str(middle["timestamp"]),
                      "--snapshot-update-records", "5")
    last = max(r["offset"] for r in records if r["timestamp"] <= middle["timestamp"])
    assert {r["as_of_offset"] for r in by_time} == {last}
    if last == middle["offset"]:
        assert by_time == by_offset


def test_offsets_equal_kafka_group_coordinator(tmp_path: Path) -> None:
    folder = conformance_root() / "kafka-4.4-dev"
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    for name in ("consumer_offsets_records", "consumer_offsets_txn"):
        kafka = json.loads((folder / f"{name}.final_state.json").read_text("utf-8"))
        _, rows = _run(tmp_path, "offsets", str(folder / f"{name}.log"), "--pending")
        ours = {(r["group_id"], r["topic"], r["partition"]): r for r in rows
                if r["state"] == "committed"}
        want = {(c["group"], c["topic"], c["partition"]): c for c in kafka["committedOffsets"]}
        assert set(ours) == set(want), name
        for key, c in want.items():
            r = ours[key]
            assert (r["committed_offset"], r["leader_epoch"], r["metadata"],
                    r["commit_timestamp"], r["expire_timestamp"], r["record_offset"],
                    r["topic_id"] or "AAAAAAAAAAAAAAAAAAAAAA") == \
                (c["committedOffset"], c["leaderEpoch"], c["metadata"], c["commitTimestampMs"],
                 c["expireTimestampMs"], c["recordOffset"], c["topicId"]), (name, key)
        pending = {int(r["state"].split(":")[1]) for r in rows if r["state"] != "committed"}
        assert pending <= set(kafka["pendingTransactionalProducerIds"])


def test_offsets_as_of_before_a_commit_marker_shows_it_pending(tmp_path: Path) -> None:
    log = conformance_root() / "kafka-4.4-dev" / "consumer_offsets_txn.log"
    if not log.is_file():
        pytest.skip(f"{log} not found")
    records = [json.loads(line) for line in
               log.with_suffix(".records.jsonl").read_text("utf-8").splitlines()]
    commit = next(r for r in records if r.get("control", {}).get("type") == "COMMIT")
    producer = commit["batch"]["producerId"]
    _, before = _run(tmp_path, "offsets", str(log), "--pending",
                     "--as-of-offset", str(commit["offset"] - 1))
    _, after = _run(tmp_path, "offsets", str(log), "--pending",
                    "--as-of-offset", str(commit["offset"]))
    assert any(r["state"] == f"pending:{producer}" for r in before)
    assert not any(r["state"] == f"pending:{producer}" for r in after)
    assert any(r["producer_id"] == producer and r["state"] == "committed" for r in after)


def test_bad_arguments_exit_2_with_one_line(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state", str(tmp_path / "missing.log")]) == 2
    assert main(["state", "--as-of-offset", "x", str(tmp_path)]) == 2
    assert main(["state", str(tmp_path), "--as-of-time", "yesterday"]) == 2
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("sharestate: error: ") for line in err)
