"""ShareShard replay against Kafka's own shard, record by record, on the conformance fixtures.

Each record of a fixture is decoded from its bytes with the catalog, replayed, and the state of
the key it touched is compared with Kafka's (`*.states.jsonl`); full states are compared at
the end (`*.final_state.jsonl`) and, for the workloads, at every checkpoint and prune point.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, cast

import pytest
from conftest import conformance_dir

from sharestate.coordinator.shard import TRANSACTIONAL_ACKS, ShareShard
from sharestate.coordinator.share_findings import SNAPSHOT_TOMBSTONE_FAILED, UPDATE_TOMBSTONE
from sharestate.coordinator.share_rules import rules_for
from sharestate.coordinator.share_state import (
    ShareKey,
    SharePartitionState,
    ShareValue,
    share_key,
    share_value,
)
from sharestate.log import Batch, ControlRecord, parse_control, read_batches
from sharestate.records.catalog import SHARE_STATE_TOPIC, Dialect, dialect
from sharestate.records.codec import read_struct

FOLDERS = {"kafka-4.4-dev": "4.1", "kafka-4.0-dev": "4.0"}
"""Fixture folder -> record dialect."""

KNOWN_DIVERGENCES: dict[tuple[str, str], dict[int, str]] = {
    # Kafka's 4.0 development replay threw NullPointerException on every tombstone; the real
    # loader would have aborted there. We apply released behaviour instead: a type-0
    # tombstone deletes the key, a type-1 tombstone changes nothing (as in 4.4).
    ("kafka-4.0-dev", "share_tombstones"): {30: "deleted", 31: "unchanged", 32: "deleted",
                                           33: "deleted"},
}
"""Lines with `replayException` where our documented behaviour is asserted instead."""

KAFKA_FAILURES: dict[tuple[str, str], dict[int, str]] = {
    # Type-1 tombstones: Kafka 4.4 throws too and leaves the state unchanged, as we do.
    ("kafka-4.4-dev", "share_update_tombstone"): {12: "unchanged", 13: "unchanged"},
}
"""Lines with `replayException` where our state equals Kafka's (we report a finding)."""

_STATE_FIELDS = {
    "snapshotEpoch": "snapshot_epoch", "stateEpoch": "state_epoch",
    "leaderEpoch": "leader_epoch", "startOffset": "start_offset",
    "deliveryCompleteCount": "delivery_complete_count",
    "createTimestamp": "create_timestamp", "writeTimestamp": "write_timestamp",
}


class Record(NamedTuple):
    """One log record: a data record (type id, key, value) or a control marker."""

    offset: int
    producer_id: int
    transactional: bool
    control: str | None
    type_id: int
    key: ShareKey | None
    value: ShareValue | None


def decode(catalog: Dialect, key: bytes, value: bytes | None) -> tuple[int, ShareKey | None,
                                                                       ShareValue | None]:
    type_id = int.from_bytes(key[:2], "big", signed=True)
    kind = catalog.kind(SHARE_STATE_TOPIC, type_id)
    if kind is None:
        return type_id, None, None
    key_layout = kind.key_layout()
    key_values, _ = read_struct(key_layout, key, 2, len(key))
    if value is None:
        return type_id, share_key(key_values, key_layout), None
    layout = kind.value_layout(int.from_bytes(value[:2], "big", signed=True))
    assert layout is not None
    values, end = read_struct(layout, value, 2, len(value))
    assert end == len(value)
    return type_id, share_key(key_values, key_layout), share_value(values, layout)


def records_from_jsonl(path: Path, catalog: Dialect) -> Iterator[Record]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            rec = json.loads(line)
            batch = rec["batch"]
            if "control" in rec:
                yield Record(rec["offset"], batch["producerId"], batch["isTransactional"],
                             rec["control"]["type"], -1, None, None)
                continue
            raw_value = rec["valueHex"]
            type_id, key, value = decode(catalog, bytes.fromhex(rec["keyHex"]),
                                         None if raw_value is None else bytes.fromhex(raw_value))
            yield Record(rec["offset"], batch["producerId"], batch["isTransactional"], None,
                         type_id, key, value)


def records_from_segment(path: Path, catalog: Dialect) -> Iterator[Record]:
    """The records of a gzipped segment, read with the project's log reader."""
    with cast(BinaryIO, gzip.open(path, "rb")) as stream:
        for item in read_batches(stream):
            assert isinstance(item, Batch), item
            header = item.header
            assert header.crc_valid and not item.findings
            for raw in item.records:
                if header.is_control:
                    marker = parse_control(raw, header)
                    assert isinstance(marker, ControlRecord), marker
                    yield Record(raw.offset, header.producer_id, True, marker.type, -1, None,
                                 None)
                    continue
                assert raw.key is not None
                type_id, key, value = decode(catalog, raw.key, raw.value)
                yield Record(raw.offset, header.producer_id, header.is_transactional, None,
                             type_id, key, value)


def apply(shard: ShareShard, rec: Record) -> None:
    if rec.control is not None:
        shard.end_transaction(rec.producer_id, rec.control == "COMMIT", rec.offset)
    else:
        assert rec.key is not None
        shard.replay(rec.offset, rec.type_id, rec.key, rec.value, rec.producer_id,
                     rec.transactional)


# ---------------------------------------------------------------------------------------
# views in the fixtures' JSON shape


def state_json(state: SharePartitionState | None, like: dict[str, Any]) -> dict[str, Any] | None:
    """Our state with exactly the fields `like` (Kafka's JSON) has."""
    if state is None:
        return None
    out = {name: getattr(state, attr) for name, attr in _STATE_FIELDS.items() if name in like}
    out["stateBatches"] = [{"firstOffset": b.first_offset, "lastOffset": b.last_offset,
                            "deliveryState": b.delivery_state, "deliveryCount": b.delivery_count}
                           for b in state.batches]
    return out


def partition_json(shard: ShareShard, key: ShareKey, like: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "groupId": key.group_id, "topicId": key.topic_id, "partition": key.partition,
        "state": state_json(shard.state(key), like.get("state") or {}),
        "leaderEpochMap": shard.leader_epoch(key), "stateEpochMap": shard.state_epoch(key),
        "snapshotUpdateCount": shard.snapshot_update_count(key),
    }
    if "lastSnapshotOffset" in like:
        out["lastSnapshotOffset"] = shard.last_snapshot_offset(key)
    return out


def _java_order(p: dict[str, Any]) -> tuple[bytes, bytes, int]:
    # Java compares strings by UTF-16 code unit.
    return (p["groupId"].encode("utf-16-be"), p["topicId"].encode("utf-16-be"), p["partition"])


def _key(p: dict[str, Any]) -> ShareKey:
    return ShareKey(p["groupId"], p["topicId"], p["partition"])


def check_full_state(shard: ShareShard, expected: dict[str, Any], where: str,
                     diverged: set[ShareKey]) -> None:
    """Compare everything the shard holds with a final-state/checkpoint object."""
    parts = expected["partitions"]
    like = parts[0] if parts else {"state": {}}
    kept = [p for p in parts if _key(p) not in diverged]
    assert [_key(p) for p in parts] == [_key(p) for p in sorted(parts, key=_java_order)]
    ours = [partition_json(shard, k, like) for k in shard if k not in diverged]
    ours.sort(key=_java_order)
    assert ours == kept, where
    for key in diverged:
        assert key not in shard, f"{where}: {key} was deleted by a divergent tombstone"
    if "lastRedundantOffset" in expected:
        assert shard.last_redundant_offset() == expected["lastRedundantOffset"], where
        assert shard.last_redundant_offset_raw == expected["lastRedundantOffsetRaw"], where


# ---------------------------------------------------------------------------------------
# per-record fixtures


def _limit(folder: Path, name: str) -> int:
    summary = folder / f"{name}.summary.json"
    if summary.exists():
        config = json.loads(summary.read_text(encoding="utf-8"))
        return int(config["shareCoordinatorSnapshotUpdateRecordsPerSnapshot"])
    return 500


def _fixtures(folder_name: str) -> list[str]:
    try:
        folder = conformance_dir(folder_name)
    except pytest.skip.Exception:
        return []
    return sorted(p.name[:-len(".states.jsonl")] for p in folder.glob("share_*.states.jsonl"))


def _cases() -> list[Any]:
    cases = [pytest.param(folder, name, id=f"{folder}/{name}")
             for folder in FOLDERS for name in _fixtures(folder)]
    return cases or [pytest.param("", "", marks=pytest.mark.skip(
        reason="conformance fixtures not found (set SHARESTATE_CONFORMANCE_DIR)"))]


@pytest.mark.parametrize(("folder_name", "name"), _cases())
def test_states_after_every_record(folder_name: str, name: str) -> None:
    folder = conformance_dir(folder_name)
    catalog = dialect(FOLDERS[folder_name])
    shard = ShareShard(rules_for(catalog.name, _limit(folder, name)))
    divergences = KNOWN_DIVERGENCES.get((folder_name, name), {})
    failures = KAFKA_FAILURES.get((folder_name, name), {})
    diverged: set[ShareKey] = set()
    states = (folder / f"{name}.states.jsonl").open(encoding="utf-8")
    with states:
        for rec, line in zip(records_from_jsonl(folder / f"{name}.records.jsonl", catalog),
                             states, strict=True):
            expected = json.loads(line)
            assert expected["offset"] == rec.offset
            apply(shard, rec)
            where = f"{name} offset {rec.offset}"
            if "lastRedundantOffset" in expected:
                assert shard.last_redundant_offset() == expected["lastRedundantOffset"], where
            if rec.control is not None:
                assert expected["control"] == rec.control
                continue
            assert rec.key is not None
            after = expected["after"]
            assert _key(after) == rec.key, where
            if "replayException" in expected:
                assert rec.offset in divergences or rec.offset in failures, where
            if rec.offset in divergences and divergences[rec.offset] == "deleted":
                if after["state"] is not None:
                    diverged.add(rec.key)
                assert rec.key not in shard
                assert partition_json(shard, rec.key, after) == {
                    **after, "state": None, "leaderEpochMap": None, "stateEpochMap": None,
                    "snapshotUpdateCount": None}, where
                assert shard.findings[-1][:2] == (rec.offset, SNAPSHOT_TOMBSTONE_FAILED)
                continue
            assert rec.key not in diverged, f"{where}: touches a diverged key; extend the test"
            assert partition_json(shard, rec.key, after) == after, where
            if divergences.get(rec.offset) == "unchanged" or rec.offset in failures:
                assert shard.findings[-1][:2] == (rec.offset, UPDATE_TOMBSTONE)
    listed = set(divergences) | set(failures)
    assert {f.offset for f in shard.findings} == listed
    final = folder / f"{name}.final_state.jsonl"
    if final.exists():
        check_full_state(shard, json.loads(final.read_text(encoding="utf-8")), f"{name} final",
                         diverged)


# ---------------------------------------------------------------------------------------
# workloads: checkpoints, final state, prune points


def _workloads() -> list[Any]:
    cases = []
    for folder in FOLDERS:
        for size in ("small", "large"):
            marks = [pytest.mark.slow] if size == "large" else []
            cases.append(pytest.param(folder, f"share_replay_{size}", marks=marks,
                                      id=f"{folder}/share_replay_{size}"))
    return cases


@pytest.mark.parametrize(("folder_name", "name"), _workloads())
def test_workload_checkpoints(folder_name: str, name: str) -> None:
    folder = conformance_dir(folder_name)
    catalog = dialect(FOLDERS[folder_name])
    shard = ShareShard(rules_for(catalog.name, _limit(folder, name)))
    jsonl = folder / f"{name}.records.jsonl"
    records = (records_from_jsonl(jsonl, catalog) if jsonl.exists()
               else records_from_segment(folder / f"{name}.log.gz", catalog))
    checkpoints = folder / f"{name}.checkpoints.jsonl"
    with checkpoints.open(encoding="utf-8") as lines:
        expected = [json.loads(line) for line in lines]
    pending = iter(expected)
    target = next(pending)
    prune: list[dict[str, Any]] = []
    seen = 0
    for rec in records:
        apply(shard, rec)
        seen += 1
        point = shard.last_redundant_offset()
        if not prune or prune[-1]["lastRedundantOffset"] != point:
            prune.append({"offset": rec.offset, "lastRedundantOffset": point})
        while target is not None and target["afterOffset"] == rec.offset:
            check_full_state(shard, target, f"{name} checkpoint {rec.offset}", set())
            target = next(pending, None)
    assert target is None, "checkpoints left unchecked"
    assert not shard.findings
    final = json.loads((folder / f"{name}.final_state.json").read_text(encoding="utf-8"))
    assert final == expected[-1]
    summary = json.loads((folder / f"{name}.summary.json").read_text(encoding="utf-8"))
    assert seen == summary["records"]
    prune_file = folder / f"{name}.prune.jsonl"
    if prune_file.exists():
        with prune_file.open(encoding="utf-8") as lines:
            assert prune == [json.loads(line) for line in lines]
        assert shard.last_redundant_offset() == summary["finalLastRedundantOffset"]


# ---------------------------------------------------------------------------------------
# the `transactional-acks` semantics on Kafka's transactional fixture


def _snapshot_of(shard: ShareShard) -> dict[ShareKey, tuple[Any, ...]]:
    return {k: (shard.state(k), shard.leader_epoch(k), shard.state_epoch(k),
                shard.snapshot_update_count(k), shard.last_snapshot_offset(k))
            for k in shard}


@pytest.mark.parametrize("folder_name", list(FOLDERS))
def test_transactional_acks_equal_replaying_committed_records_at_their_markers(
        folder_name: str) -> None:
    folder = conformance_dir(folder_name)
    catalog = dialect(FOLDERS[folder_name])
    rules = rules_for(catalog.name)
    records = list(records_from_jsonl(folder / "share_txn.records.jsonl", catalog))
    shard = ShareShard(rules, semantics=TRANSACTIONAL_ACKS)
    for rec in records:
        apply(shard, rec)
    # Oracle: move committed transactional records to their COMMIT marker, drop aborted ones.
    open_txns: dict[int, list[Record]] = {}
    reordered: list[Record] = []
    aborted = 0
    for rec in records:
        if rec.control is not None:
            txn = open_txns.pop(rec.producer_id, [])
            if rec.control == "COMMIT":
                reordered.extend(txn)
            else:
                aborted += len(txn)
        elif rec.transactional:
            open_txns.setdefault(rec.producer_id, []).append(rec)
        else:
            reordered.append(rec._replace(transactional=False))
    assert not open_txns and aborted > 0
    expected = ShareShard(rules)
    for rec in reordered:
        apply(expected, rec)
    kafka = ShareShard(rules)
    for rec in records:
        apply(kafka, rec)
    assert not shard.findings and shard.pending_producers() == ()
    assert _snapshot_of(shard) == _snapshot_of(expected) != _snapshot_of(kafka)
    assert shard.last_redundant_offset() == expected.last_redundant_offset()
