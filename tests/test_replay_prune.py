"""Prune recommendations with the cold-partition snapshot what-if (`sharestate.replay.prune`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conftest import conformance_dir

from sharestate.log import discover
from sharestate.log.log_starts import log_starts
from sharestate.records.segment import DecodedBatch
from sharestate.replay.logs import AsOf, checkpointed_starts, partition_logs
from sharestate.replay.prune import COMPACT_AFTER, PruneLedger, prune_recommendation
from sharestate.replay.rows import state_rows
from sharestate.replay.share_log import replay_share_log
from sharestate.tables.spec import table


def test_ledger_prices_any_cut_above_the_prune_point() -> None:
    ledger = PruneLedger()
    for last, records, size in ((4, 5, 100), (9, 5, 90), (10, 1, 40), (14, 4, 70)):
        ledger.add(last, records, size)
    ledger.advance(5)
    assert (ledger.records, ledger.bytes) == (5, 100)
    assert ledger.below(5) == (5, 100)
    assert ledger.below(10) == (10, 190)   # batch 10..10 is not wholly below 10
    assert ledger.below(11) == (11, 230)
    assert ledger.below(100) == (15, 300)


def test_ledger_keeps_its_totals_when_it_drops_batches_passed_long_ago() -> None:
    """Over many advances the batches below the point are cut off the ledger's front
    (COMPACT_AFTER), and every figure stays the sum over the batches themselves."""
    batches = [(offset * 3 + 2, 3, 50 + offset % 7) for offset in range(3 * COMPACT_AFTER)]
    ledger = PruneLedger()
    fed = 0
    for point in range(0, batches[-1][0] + 50, 997):
        while fed < len(batches) and batches[fed][0] < point + 1500:
            ledger.add(*batches[fed])
            fed += 1
        ledger.advance(point)
        listed = batches[:fed]
        below = [(records, size) for last, records, size in listed if last < point]
        assert (ledger.records, ledger.bytes) == (sum(r for r, _ in below),
                                                   sum(b for _, b in below))
        cut = point + 700
        assert ledger.below(cut) == (sum(r for last, r, _ in listed if last < cut),
                                     sum(b for last, _, b in listed if last < cut))
    assert len(ledger.last_offsets) < len(batches)   # the front was cut off


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def _below(records: list[dict[str, Any]], offset: int) -> tuple[int, int]:
    batches = {r["batch"]["position"]: r["batch"] for r in records
               if r["batch"]["lastOffset"] < offset}
    return (sum(b["recordCount"] for b in batches.values()),
            sum(b["sizeInBytes"] for b in batches.values()))


def test_recommendation_matches_kafka_at_every_checkpoint() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "share_replay_small.log"]))[0]
    records = _lines(folder / "share_replay_small.records.jsonl")
    checkpoints = _lines(folder / "share_replay_small.checkpoints.jsonl")
    final = json.loads((folder / "share_replay_small.final_state.json").read_text("utf-8"))
    assert checkpoints[-1]["afterOffset"] == final["afterOffset"]
    for checkpoint in checkpoints:
        at = checkpoint["afterOffset"]
        result = replay_share_log(log, as_of=AsOf(offset=at),
                                  snapshot_update_records_per_snapshot=5)
        row = prune_recommendation(result)
        assert list(row) == table("prune_recommendations").names
        point = checkpoint["lastRedundantOffset"]
        snapshots = {(p["groupId"], p["topicId"], p["partition"]): p["lastSnapshotOffset"]
                     for p in checkpoint["partitions"]
                     if p["state"] is not None and p.get("lastSnapshotOffset") is not None}
        assert row["prune_offset"] == point, at
        assert row["live_keys"] == sum(p["state"] is not None for p in checkpoint["partitions"])
        assert (row["log_end_offset"], row["as_of_offset"]) == (at + 1, at)
        assert (row["reclaimable_records"], row["reclaimable_bytes"]) == \
            (_below(records, point) if point is not None else (0, 0))
        oldest = min(snapshots.values())
        assert [(h["group_id"], h["topic_id"], h["partition"]) for h in row["holding"]] == \
            sorted(k for k, o in snapshots.items() if o == oldest)
        cold = min((o for o in snapshots.values() if o != oldest), default=at + 1)
        assert row["cold_snapshot_prune_offset"] == cold, at
        assert point is None or cold >= point
        assert (row["cold_snapshot_reclaimable_records"],
                row["cold_snapshot_reclaimable_bytes"]) == _below(records, cold), at


def test_final_recommendation_on_the_small_workload() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "share_replay_small.log"]))[0]
    row = prune_recommendation(replay_share_log(log))
    final = json.loads((folder / "share_replay_small.final_state.json").read_text("utf-8"))
    assert row["prune_offset"] == final["lastRedundantOffset"]
    assert row["cold_snapshot_prune_offset"] >= row["prune_offset"]
    assert row["cold_snapshot_reclaimable_records"] >= row["reclaimable_records"]
    assert row["cold_snapshot_reclaimable_bytes"] >= row["reclaimable_bytes"]
    assert row["holding"] and all(h["last_snapshot_offset"] == row["prune_offset"]
                                  for h in row["holding"])


def test_no_snapshot_no_prune_point() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "share_replay_small.log"]))[0]
    row = prune_recommendation(replay_share_log(log, as_of=AsOf(offset=0)))
    records = _lines(folder / "share_replay_small.records.jsonl")
    assert records[0]["recordType"] == 0 and row["prune_offset"] is None  # Kafka: 0 is empty
    assert row["cold_snapshot_prune_offset"] == 1 and row["live_keys"] == 1


def test_a_log_dirs_root_is_read_from_kafkas_checkpointed_log_start(tmp_path: Path) -> None:
    """Kafka's prune run moves the log start to the prune point (deleteRecords) and the
    root's log-start-offset-checkpoint says so, while the segment still holds the records
    below it: they are read no more, as Kafka's coordinator loads the log from the batch
    holding its start. Nothing is left to reclaim, and the state is the one Kafka holds (a
    real broker's copy said 2,032 records reclaimable from offset 19, where Kafka's log
    start and the live source said 2,051 and none)."""
    folder = conformance_dir("kafka-4.4-dev")
    final = json.loads((folder / "share_replay_small.final_state.json").read_text("utf-8"))
    start = final["lastRedundantOffset"]
    pruned, whole = tmp_path / "pruned", tmp_path / "whole"
    for root in (pruned, whole):
        (root / "__share_group_state-0").mkdir(parents=True)
        shutil.copy(folder / "share_replay_small.log",
                    root / "__share_group_state-0" / f"{0:020d}.log")
    (pruned / "log-start-offset-checkpoint").write_text(
        f"0\n2\n__share_group_state 0 {start}\n__consumer_offsets 1 7\n")
    (log,) = partition_logs(discover([pruned]))[0]
    first = next(b for b in log.batches() if isinstance(b, DecodedBatch))
    assert first.header.base_offset < start <= first.header.last_offset, "the batch holding it"
    result = replay_share_log(log, snapshot_update_records_per_snapshot=5)
    row = prune_recommendation(result)
    assert (row["prune_offset"], row["log_start_offset"], row["log_end_offset"]) == (
        start, start, final["afterOffset"] + 1)
    assert (row["reclaimable_records"], row["reclaimable_bytes"]) == (0, 0)
    (unpruned,) = partition_logs(discover([whole]))[0]
    everything = replay_share_log(unpruned, snapshot_update_records_per_snapshot=5)
    assert prune_recommendation(everything)["reclaimable_records"] > 0

    def state(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # the count of updates since a snapshot depends on where the replay began (Kafka's
        # reloaded coordinator counts from its log start too)
        return [{k: v for k, v in r.items() if k != "snapshot_update_count"} for r in rows]

    assert state(state_rows(result)) == state(state_rows(everything))
    assert len(state_rows(result)) == sum(p["state"] is not None for p in final["partitions"])


def test_a_checkpointed_start_past_the_log_end_is_a_finding(tmp_path: Path) -> None:
    """A log-start-offset-checkpoint whose start lies past the end of the partition's
    segments is damaged (or of other segments): a log_start_past_end finding with the
    checkpoint's line, and the segments read from their start, as if it said nothing (it
    made every batch be skipped without a word). A start at the log end is Kafka's (every
    record deleted): nothing is read, and nothing is found."""
    folder = conformance_dir("kafka-4.4-dev")
    end = json.loads((folder / "share_replay_small.final_state.json").read_text("utf-8"))[
        "afterOffset"] + 1
    results = {}
    for start in (None, end, end + 1, 1 << 40):
        root = tmp_path / f"root-{start}"
        (root / "__share_group_state-0").mkdir(parents=True)
        shutil.copy(folder / "share_replay_small.log",
                    root / "__share_group_state-0" / f"{0:020d}.log")
        if start is not None:
            (root / "log-start-offset-checkpoint").write_text(
                f"0\n1\n__share_group_state 0 {start}\n")
        (log,) = partition_logs(discover([root]))[0]
        results[start] = replay_share_log(log, snapshot_update_records_per_snapshot=5)
    whole = results[None]
    assert not results[end].findings and not state_rows(results[end])
    for start in (end + 1, 1 << 40):
        result = results[start]
        (finding,) = result.findings
        assert (finding.kind, finding.offset, finding.raw) == (
            "log_start_past_end", start, f"__share_group_state 0 {start}".encode())
        assert f"past the end of its segments (offset {end})" in finding.message
        assert state_rows(result) == state_rows(whole)
        assert prune_recommendation(result) == prune_recommendation(whole)


def test_checkpoint_lines_kafka_cannot_write_are_skipped(tmp_path: Path) -> None:
    """A start in digits that are not ASCII, or past int64, is not Kafka's (Long.parseLong
    refuses both): the line is skipped like any malformed one. int() of '²' raised and
    state, prune and offsets exited 70; 10^23 reached the pipeline's log_start_offsets
    table and its run exited 70 (an int64 column)."""
    folder = conformance_dir("kafka-4.4-dev")
    (tmp_path / "__share_group_state-0").mkdir()
    shutil.copy(folder / "share_codec_gzip.log",
                tmp_path / "__share_group_state-0" / f"{0:020d}.log")
    for bad in ("²", "99999999999999999999999", "-9223372036854775809"):
        (tmp_path / "log-start-offset-checkpoint").write_text(
            f"0\n2\n__share_group_state 0 {bad}\n__consumer_offsets 3  12\n")
        assert log_starts(tmp_path) == {("__consumer_offsets", 3): 12}
        assert checkpointed_starts(discover([tmp_path])) == {}


def test_an_empty_partition_starts_and_ends_where_kafka_says(tmp_path: Path) -> None:
    """A partition directory whose segments are empty Kafka-named files: its log starts at
    the first one's base offset (or the checkpointed start, if later and not past the end:
    then a log_start_past_end finding) and ends at the last one's, as ListOffsets answers,
    not unknown; an empty file of another name says nothing."""
    root = tmp_path / "root"
    for partition, bases in ((0, [0]), (1, [40, 75]), (2, [40]), (3, [40, 75])):
        for base in bases:
            folder = root / f"__share_group_state-{partition}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{base:020d}.log").write_bytes(b"")
    (root / "log-start-offset-checkpoint").write_text(
        "0\n2\n__share_group_state 1 60\n__share_group_state 3 90\n")
    (tmp_path / "empty.log").write_bytes(b"")
    logs, _ = partition_logs(discover([root, tmp_path / "empty.log"]),
                             topic="__share_group_state")
    results = {log.partition: replay_share_log(log) for log in logs}
    spans = {partition: (row["log_start_offset"], row["log_end_offset"], row["prune_offset"])
             for partition, result in results.items()
             for row in [prune_recommendation(result)]}
    # partition 3's checkpointed start lies past its end: refused, as over records
    assert spans == {0: (0, 0, None), 1: (60, 75, None), 2: (40, 40, None),
                     3: (40, 75, None), -1: (None, None, None)}
    assert {p: [(f.kind, f.offset) for f in r.findings] for p, r in results.items()} == {
        0: [], 1: [], 2: [], 3: [("log_start_past_end", 90)], -1: []}
