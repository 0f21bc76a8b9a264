"""The workload simulator: its segments replay to exactly the writers' state.

Segments are read back with the decoder (`detect_segment` + `decode_batches`) and replayed
into fresh shards; every key's state, epochs, update count and snapshot offset, and every
partition's prune point, must equal what the simulator's persisters hold. The
`__consumer_offsets` segments must replay to the committed offsets the simulator expects,
with share-group metadata consistent with the state (or inconsistent exactly as asked).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sharestate.app.cli import main
from sharestate.coordinator.group_metadata import SharePartitionMetadata
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_checks import (
    OrphanReason,
    initialized_without_state,
    orphaned_state,
    stuck_deleting,
)
from sharestate.coordinator.share_rules import rules_for
from sharestate.coordinator.share_state import ShareKey, share_key, share_value
from sharestate.log import COMPRESSION_NAMES, ControlRecord, discover
from sharestate.persister import shard_states
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC, dialect
from sharestate.records.keyvalue import KeyValue
from sharestate.records.segment import DecodedBatch, decode_batches, detect_segment
from sharestate.simulate import SimulationConfig, SimulationResult, simulate, simulator


def _replay_state(result: SimulationResult) -> dict[int, ShareShard]:
    config = result.config
    shards: dict[int, ShareShard] = {}
    for segment in discover([result.root], topics=[SHARE_STATE_TOPIC]):
        detection = detect_segment(segment)
        assert (detection.topic, detection.dialect) == (SHARE_STATE_TOPIC, config.dialect)
        assert segment.partition is not None
        shard = shards.setdefault(segment.partition,
                                  ShareShard(rules_for(config.dialect, config.snapshot_limit)))
        for item in decode_batches(segment, detection):
            assert isinstance(item, DecodedBatch) and not item.findings, item
            assert item.header.crc_valid and item.header.compression == config.codec
            for raw, kv in zip(item.records, item.decoded, strict=True):
                assert isinstance(kv, KeyValue) and kv.error is None, kv
                assert kv.kind is not None and kv.key is not None and kv.type_id is not None
                layout = (kv.kind.value_layout(kv.value_version)
                          if kv.value_version is not None else None)
                value = share_value(kv.value, layout) if kv.value is not None and layout else None
                shard.replay(raw.offset, kv.type_id, share_key(kv.key, kv.kind.key_layout()),
                             value)
    return shards


def _assert_round_trip(result: SimulationResult) -> None:
    shards = _replay_state(result)
    final = result.final_state()
    assert sorted(shards) == sorted(final)
    for partition, states in final.items():
        assert shard_states(shards[partition]) == states, f"partition {partition}"
        assert shards[partition].last_redundant_offset() == \
            result.persisters[partition].last_redundant_offset()
        assert not shards[partition].findings


def _replay_offsets(result: SimulationResult) -> list[GroupCoordinatorReplay]:
    replays = []
    for segment in discover([result.root], topics=[CONSUMER_OFFSETS_TOPIC]):
        detection = detect_segment(segment, dialect_name=result.config.dialect)
        replay = GroupCoordinatorReplay(dialect(result.config.dialect))
        for item in decode_batches(segment, detection):
            assert isinstance(item, DecodedBatch) and not item.findings, item
            for raw, decoded in zip(item.records, item.decoded, strict=True):
                if isinstance(decoded, ControlRecord):
                    replay.end_transaction(item.header.producer_id, decoded.type == "COMMIT",
                                           raw.offset)
                else:
                    assert isinstance(decoded, KeyValue)
                    assert replay.replay(raw.offset, item.header.producer_id, decoded,
                                         raw.timestamp)
        assert not replay.groups.anomalies and not replay.skipped
        replays.append(replay)
    return replays


def _share_metadata(replays: list[GroupCoordinatorReplay]) -> dict[str, SharePartitionMetadata]:
    return {group: info for replay in replays
            for group, info in replay.groups.share_partitions.items()}


def _state_keys(result: SimulationResult) -> set[ShareKey]:
    return {key for states in result.final_state().values() for key in states}


@pytest.mark.slow
def test_a_million_records_round_trip(tmp_path: Path) -> None:
    started = time.perf_counter()
    result = simulate(SimulationConfig(records=1_000_000, seed=20260804), tmp_path)
    assert result.records >= 1_000_000
    ops = result.operations
    for op in ("initializeState", "writeState", "readState", "deleteState",
               "maybeCleanupShareState", "writeState:error74"):
        assert ops[op] > 0, op
    _assert_round_trip(result)
    elapsed = time.perf_counter() - started
    print(f"1M round trip: simulate {result.seconds:.1f} s "
          f"({result.records / result.seconds:,.0f} records/s), total {elapsed:.1f} s")


@pytest.mark.parametrize("codec", COMPRESSION_NAMES)
def test_round_trip_per_codec(tmp_path: Path, codec: str) -> None:
    result = simulate(SimulationConfig(records=20_000, seed=11, codec=codec, snapshot_limit=25,
                                       cold_interval_ms=2_000, batch_records=7), tmp_path)
    assert result.operations["snapshotColdPartitions"] > 0
    _assert_round_trip(result)


def _archived_at_limit(root: Path, limit: int) -> set[tuple[ShareKey, int]]:
    """Every record some state in the log shows archived with `limit` deliveries or more."""
    out = root / "decoded.jsonl"
    assert main(["decode", str(root / "logs"), "--output", str(out)]) == 0
    found = set()
    for line in out.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        for b in (row["value"] or {}).get("state_batches") or []:
            if b["delivery_state"] == 4 and b["delivery_count"] >= limit:
                key = ShareKey(row["key"]["group_id"], row["key"]["topic_id"],
                               row["key"]["partition"])
                found.update((key, o) for o in range(b["first_offset"], b["last_offset"] + 1))
    return found


def test_poison_records_are_archived_at_the_delivery_limit(tmp_path: Path) -> None:
    """With `poison_rate`, records no consumer can process are released on every delivery
    until archived at `max_delivery_count`; the log still replays to the writers' state."""
    config = SimulationConfig(records=20_000, seed=3, max_delivery_count=5)
    simulate(config, tmp_path / "clean" / "logs")
    poisoned = simulate(replace(config, poison_rate=0.01), tmp_path / "poisoned" / "logs")
    _assert_round_trip(poisoned)
    assert not _archived_at_limit(tmp_path / "clean", 5)
    given_up = _archived_at_limit(tmp_path / "poisoned", 5)
    assert given_up, "no record reached the delivery limit"
    assert all(simulator.poison_record(0.01, key, offset) for key, offset in given_up)


def test_round_trip_dialect_4_0(tmp_path: Path) -> None:
    result = simulate(SimulationConfig(records=20_000, seed=5, dialect="4.0", snapshot_limit=10,
                                       codec="lz4"), tmp_path)
    assert "initializeState" not in result.operations
    _assert_round_trip(result)
    committed = {k: c.committed_offset for replay in _replay_offsets(result)
                 for k, c in replay.offsets.committed()}
    assert committed == result.expected_offsets


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.log"))}


def test_a_seed_gives_identical_bytes(tmp_path: Path) -> None:
    config = SimulationConfig(records=15_000, seed=99, codec="gzip", orphaned_state=True)
    simulate(config, tmp_path / "a")
    simulate(config, tmp_path / "b")
    simulate(SimulationConfig(records=15_000, seed=100, codec="gzip"), tmp_path / "c")
    first, second = _files(tmp_path / "a"), _files(tmp_path / "b")
    assert first and first == second
    assert _files(tmp_path / "c") != first


def test_consumer_offsets_match_the_workload(tmp_path: Path) -> None:
    result = simulate(SimulationConfig(records=40_000, seed=3, cold_interval_ms=5_000),
                      tmp_path)
    replays = _replay_offsets(result)
    committed = {k: c.committed_offset for replay in replays for k, c in replay.offsets.committed()}
    assert committed == result.expected_offsets and committed
    metadata, keys = _share_metadata(replays), _state_keys(result)
    assert sorted(metadata) == ["share-group-0", "share-group-1", "share-grüppe-✓-2"]
    assert orphaned_state(metadata, keys) == []
    assert initialized_without_state(metadata, keys) == []
    assert stuck_deleting(metadata, keys) == []


def test_orphaned_and_stuck_cases_on_request(tmp_path: Path) -> None:
    result = simulate(SimulationConfig(records=60_000, seed=8, orphaned_state=True,
                                       stuck_deleting=True), tmp_path)
    metadata, keys = _share_metadata(_replay_offsets(result)), _state_keys(result)
    orphans = orphaned_state(metadata, keys)
    hidden = [o.key for o in orphans if o.reason == OrphanReason.NOT_INITIALIZED]
    deleting = [o.key for o in orphans if o.reason == OrphanReason.TOPIC_DELETING]
    assert len(hidden) + len(deleting) == len(orphans)
    assert {(k[0], k[1]) for k in hidden} == {("share-group-0", hidden[0][1])}
    (stuck,) = stuck_deleting(metadata, keys)
    assert stuck.state_partitions == tuple(sorted(k[2] for k in deleting))
    assert {(k[0], k[1]) for k in deleting} == {(stuck.group_id, stuck.topic_id)}
    _assert_round_trip(result)


def test_cli_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "logs"
    assert main(["simulate", "--out", str(out), "--records", "3000", "--seed", "4",
                 "--groups", "2", "--topics", "2", "--partitions", "2",
                 "--state-partitions", "2", "--codec", "snappy", "--batch-records", "5"]) == 0
    line = capsys.readouterr().out
    assert re.fullmatch(r"\d+ records in \d+ batches, \d+ bytes, 2 segments "
                        r"\(__share_group_state\); \d+ __consumer_offsets records; "
                        r"[\d.]+ s \([\d,]+ records/s\)\n", line), line
    assert int(line.split()[0]) >= 3000
    assert {p.name for p in out.iterdir()} >= {"__share_group_state-0", "__share_group_state-1"}


@pytest.mark.parametrize("args", [
    ["--records", "0"],
    ["--records", "ten"],
    ["--records", "10", "--codec", "brotli"],
    ["--records", "10", "--dialect", "3.9"],
    ["--records", "10", "--snapshot-limit", "-1"],
    ["--records", "10", "--dialect", "4.0", "--stuck-deleting"],
    [],
])
def test_cli_simulate_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    args: list[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path / "x"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sharestate: error: ") and err.count("\n") == 1


def test_cli_simulate_refuses_a_used_directory(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--out", str(tmp_path), "--records", "100"]) == 0
    assert main(["simulate", "--out", str(tmp_path), "--records", "100"]) == 2
    assert "already holds" in capsys.readouterr().err


@pytest.mark.parametrize("dialect_name", ["4.1", "4.0"])
def test_frequent_rare_events_still_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               dialect_name: str) -> None:
    rates = tuple((name, rate * 40) for name, rate in simulator._EVENT_RATES)
    monkeypatch.setattr(simulator, "_EVENT_RATES", rates)
    result = simulate(SimulationConfig(records=30_000, seed=21, dialect=dialect_name,
                                       snapshot_limit=4, cold_interval_ms=1_000,
                                       stuck_deleting=dialect_name == "4.1",
                                       orphaned_state=True), tmp_path)
    if dialect_name == "4.1":
        assert min(result.operations[op] for op in (
            "deleteState", "maybeCleanupShareState", "writeState:error42",
            "writeState:error74", "writeState:error124", "snapshotColdPartitions")) > 0
    _assert_round_trip(result)
    committed = {k: c.committed_offset for replay in _replay_offsets(result)
                 for k, c in replay.offsets.committed()}
    assert committed == result.expected_offsets
