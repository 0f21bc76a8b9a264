"""The pipeline's replay tasks over a copy of a broker whose share coordinator pruned: Kafka's
log start (the root's `log-start-offset-checkpoint`, which ingest records) reaches the
replay, so its prune row and state are `sharestate prune`'s and `state`'s over the same
folder; a partition that goes on from its `replay_state` while the start moves keeps its
state and history and forgets what Kafka deleted. (The Spark run: tests/test_pipeline.py.)
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import conformance_dir

from sharestate import exit_codes
from sharestate.app.cli import main
from sharestate.log import discover
from sharestate.log.log_starts import LOG_START_CHECKPOINT
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.records.segment import DecodedBatch
from sharestate.replay.logs import (
    AS_OF_BEFORE_LOG,
    END,
    AsOf,
    checkpointed_starts,
    partition_logs,
)
from sharestate.replay.prune import PRUNE_LINE, prune_row
from sharestate.replay.rows import state_rows
from sharestate.replay.share_log import exact_from, replay_share_log
from sharestate.simulate import SimulationConfig, simulate
from sharestate.tables.bronze import Split, read_split
from sharestate.tables.gold_pass import GoldOptions
from sharestate.tables.spec import table
from sharestate.tables.tasks import REPLAY_TASKS, replay_partitions

LIMIT = 20
"""ShareUpdate records per snapshot, in the simulation and the replays."""
VOLATILE = {"snapshot_update_count", "as_of_timestamp"}
"""State columns that depend on where a replay began (the updates counted since a snapshot:
Kafka's reloaded coordinator counts from its log start too)."""


def _root(tmp_path: Path, segments: list[Path], start: int | None) -> Path:
    """A log.dirs root of one `__share_group_state-0` directory of `segments`, with a
    checkpointed log start `start` (None: no checkpoint)."""
    root = tmp_path / f"root-{start}"
    folder = root / f"{SHARE_STATE_TOPIC}-0"
    folder.mkdir(parents=True)
    for segment in segments:  # a lone fixture file named as a partition's first segment
        shutil.copy(segment, folder / (segment.name if len(segments) > 1 else f"{0:020d}.log"))
    if start is not None:
        (root / LOG_START_CHECKPOINT).write_text(
            f"0\n2\n__consumer_offsets 3 12\n{SHARE_STATE_TOPIC} 0 {start}\n")
    return root


def _cli(root: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`sharestate prune`'s row and `state`'s rows of the root's partition."""
    (log,), _ = partition_logs(discover([root]))
    result = replay_share_log(log, snapshot_update_records_per_snapshot=LIMIT)
    return prune_row(result), state_rows(result)


def _files(tmp_path: Path, segments: list[Path]) -> list[dict[str, Any]]:
    """Each segment's bronze rows as a data file written as Delta writes one."""
    files = []
    for found in discover([str(p) for p in segments]):
        rows = pa.Table.from_batches([staged.rows for staged in read_split(Split(found), "t")])
        rows = rows.filter(pc.equal(rows["row_kind"], "record")).select(
            table("log_records").names)
        base = found.base_offset or 0
        path = tmp_path / f"{base:020d}.parquet"
        pq.write_table(rows.drop_columns(["topic", "partition", "segment"]), path)
        files.append({"uri": str(path), "segment": base,
                      "first_offset": pc.min(rows["offset"]).as_py(),
                      "last_offset": pc.max(rows["offset"]).as_py(), "read_at": 0})
    return files


def _task(files: list[dict[str, Any]], state: dict[str, Any] | None, log_start: int | None,
          as_of: AsOf = END) -> dict[str, list[dict[str, Any]]]:
    task = {"topic": SHARE_STATE_TOPIC, "partition": 0, "files": files,
            "state": None if state is None else state["state"],
            "above": None if state is None else state["last_applied_offset"],
            "log_start": log_start}
    out: dict[str, list[dict[str, Any]]] = {}
    options = GoldOptions(as_of=as_of, snapshot_update_records_per_snapshot=LIMIT, run_id="r",
                          started_at=1)
    for name, rows in replay_partitions(iter([pa.RecordBatch.from_pylist(
            [task], schema=REPLAY_TASKS)]), options):
        out.setdefault(name, []).extend(rows.to_pylist())
    return out


def _pipeline_prune(out: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    (row,) = out["prune_recommendations"]
    return {"topic": row["state_topic"], "partition": row["state_partition"],
            **{name: row[name] for name in PRUNE_LINE}}


def _state(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keep = {"group_id", "topic_id", "partition", "state_epoch", "start_offset",
            "state_batches", "last_snapshot_offset", "leader_epoch", "write_timestamp"}
    return sorted(({k: v for k, v in r.items() if k in keep} for r in rows),
                  key=lambda r: (r["group_id"], r["topic_id"], r["partition"]))


def test_a_replay_task_reads_from_kafkas_checkpointed_log_start(tmp_path: Path) -> None:
    """A copy of Kafka's share_replay_small partition, its log start checkpointed at the
    prune point as Kafka's prune run leaves it: the replay task given that start gives
    `sharestate prune`'s row (no record reclaimable) and `state`'s share-partitions, where
    it gave the first offset as the log start and the deleted records as reclaimable."""
    segment = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    whole, _ = _cli(_root(tmp_path, [segment], None))
    start = whole["prune_offset"]
    assert start > 0 and whole["reclaimable_records"] > 0
    root = _root(tmp_path, [segment], start)
    assert checkpointed_starts(discover([root])) == {(SHARE_STATE_TOPIC, 0): (root, start)}
    prune, state = _cli(root)
    assert (prune["log_start_offset"], prune["reclaimable_records"]) == (start, 0)
    out = _task(_files(tmp_path, [segment]), None, start)
    assert _pipeline_prune(out) == prune
    assert _state(out["share_partition_state"]) == _state(state)


def test_day_by_day_while_kafka_prunes_equals_prune_over_the_copy(tmp_path: Path) -> None:
    """A simulated partition of twelve segments read a segment a day, each run going on from
    the last one's replay_state; from the fourth day on Kafka has pruned (its log start the
    prune point of three days before, moving most days). The last run's prune row equals
    `sharestate prune`'s over the copy with that checkpoint; the share-partitions equal
    `state`'s; the history rows of every day stay, the same as one run over every day."""
    logs = tmp_path / "logs"
    simulate(SimulationConfig(records=6000, seed=3, state_partitions=1, snapshot_limit=LIMIT,
                              segment_bytes=48 << 10), logs)
    segments = sorted((logs / f"{SHARE_STATE_TOPIC}-0").glob("*.log"))
    assert len(segments) >= 8
    files = _files(tmp_path, segments)
    state = None
    history: list[dict[str, Any]] = []
    points: list[int] = []
    for day in range(len(files)):
        # Kafka's prune runs have moved the log start to the prune point of three days
        # before (a copy's checkpoint may trail what the coordinator frees)
        start = points[day - 3] if day >= 3 else None
        out = _task(files[:day + 1], state, start)
        history.extend(out["share_partition_state_history"])
        (state,) = out["replay_state"]
        points.append(_pipeline_prune(out)["prune_offset"])
    assert start is not None and start > files[1]["first_offset"]
    prune, rows = _cli(_root(tmp_path, segments, start))
    assert prune["log_start_offset"] == start < prune["prune_offset"]
    assert prune["reclaimable_records"] > 0
    assert _pipeline_prune(out) == prune
    assert _state(out["share_partition_state"]) == _state(rows)
    once = _task(files, None, None)["share_partition_state_history"]
    assert sorted(map(repr, history)) == sorted(map(repr, once))


def test_a_stop_point_below_kafkas_log_start_is_a_finding_not_an_empty_state(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka pruned share_replay_small to its prune point (checkpointed as the log start):
    as of an offset before the first record read from there, the state rests on records
    Kafka deleted. `state` printed no share-partition and "no live share-partitions" (exit
    0) and the pipeline's share_partition_state had none, silently, where Kafka then held
    them (seen on a real 4.3.1 broker's pruned partition); now an as_of_before_log finding
    says the state is not known. Without the checkpoint the same stop point has a state."""
    segment = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    unpruned = _root(tmp_path, [segment], None)
    whole, _ = _cli(unpruned)
    root = _root(tmp_path, [segment], whole["prune_offset"])
    (log,), _ = partition_logs(discover([root]))
    first = next(item for item in log.batches() if isinstance(item, DecodedBatch)).records[0]
    assert first.offset > 0
    below = AsOf(offset=first.offset - 1)
    result = replay_share_log(log, as_of=below, snapshot_update_records_per_snapshot=LIMIT)
    assert state_rows(result) == []
    assert [(f.kind, f.offset) for f in result.findings] == [(AS_OF_BEFORE_LOG, first.offset)]
    (whole_log,), _ = partition_logs(discover([unpruned]))
    kept = replay_share_log(whole_log, as_of=below, snapshot_update_records_per_snapshot=LIMIT)
    assert state_rows(kept) and kept.findings == []
    exact = exact_from(log)
    assert exact is not None and exact >= first.offset
    at = replay_share_log(log, as_of=AsOf(offset=exact), snapshot_update_records_per_snapshot=LIMIT)
    assert at.findings == []
    status = main(["state", "--as-of-offset", str(below.offset), str(root)])
    captured = capsys.readouterr()
    assert (status, captured.out) == (exit_codes.FINDINGS, "")
    assert f"offset {first.offset}: {AS_OF_BEFORE_LOG}: offset {below.offset} lies before" \
        in captured.err
    assert "no live share-partitions" not in captured.err
    out = _task(_files(tmp_path, [segment]), None, whole["prune_offset"], below)
    assert out.get("share_partition_state", []) == []
    assert [(row["rule"], row["offset"]) for row in out["audit_findings"]] == [
        (AS_OF_BEFORE_LOG, first.offset)]


def test_a_stop_point_before_every_key_is_snapshotted_again_is_a_finding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's log start is its prune point: every key live then has a snapshot after it,
    but until its own, a key's state rests on records below the start. A simulated
    partition pruned to its prune point: as of any offset before the last such snapshot
    (`exact_from`) the replay from the log start missed or mis-stated share-partitions
    (as of the log start, 26 of 27), silently; now an as_of_before_log finding. From that
    offset on its state is the whole log's."""
    logs = tmp_path / "logs"
    simulate(SimulationConfig(records=6000, seed=3, state_partitions=1, snapshot_limit=LIMIT,
                              segment_bytes=48 << 10), logs)
    segments = sorted((logs / f"{SHARE_STATE_TOPIC}-0").glob("*.log"))
    unpruned = _root(tmp_path, segments, None)
    whole, _ = _cli(unpruned)
    root = _root(tmp_path, segments, whole["prune_offset"])
    (log,), _ = partition_logs(discover([root]))
    (whole_log,), _ = partition_logs(discover([unpruned]))
    exact = exact_from(log)
    assert exact is not None and whole["prune_offset"] < exact
    assert exact_from(whole_log) is None

    def at(source: Any, offset: int) -> tuple[list[dict[str, Any]], list[str]]:
        result = replay_share_log(source, as_of=AsOf(offset=offset),
                                  snapshot_update_records_per_snapshot=LIMIT)
        return _state(state_rows(result)), [f.kind for f in result.findings]

    before, found = at(log, exact - 1)
    assert found == [AS_OF_BEFORE_LOG] and before != at(whole_log, exact - 1)[0]
    assert at(log, exact) == (at(whole_log, exact)[0], [])
    status = main(["state", "--as-of-offset", str(exact - 1), str(root)])
    err = capsys.readouterr().err
    assert status == exit_codes.FINDINGS
    assert f"offset {exact}: {AS_OF_BEFORE_LOG}: offset {exact - 1} lies before offset " \
        f"{exact}, from which" in err
    assert main(["state", "--as-of-offset", str(exact), str(root)]) == exit_codes.OK
