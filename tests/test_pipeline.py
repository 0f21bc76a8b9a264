"""The Spark pipeline end to end: real local Spark, real Delta tables on disk, Kafka's fixtures.

The fixture segments are laid out as a broker's `log.dirs` (one partition directory per
file), run through every job, and the tables are compared with what Kafka's own Java code
replayed (`*.final_state.*`, `*.states.jsonl`) and with the core's `replay_share_log`.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_dir

from sharestate.lake import open_lake
from sharestate.records.spec import snake_case
from sharestate.replay.prune import PRUNE_LINE
from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.slow

SHARE_FILES = ["share_tombstones", "share_txn", "share_replay_small", "share_interleaved",
               "share_update_tombstone"]
OFFSET_FILES = ["consumer_offsets_txn", "consumer_offsets_records"]


def layout(root: Path, folder: str, names: list[str], topic: str) -> list[str]:
    """Copy fixture segments into `root` as partitions 0..n-1 of `topic`; their names."""
    fixtures = conformance_dir(folder)
    for partition, name in enumerate(names):
        target = root / f"{topic}-{partition}"
        target.mkdir(parents=True)
        shutil.copy(fixtures / f"{name}.log", target / "00000000000000000000.log")
    return names


def run(spark: Any, source: Path, warehouse: Path, *extra: str) -> int:
    return run_all(["--source", str(source), "--warehouse", str(warehouse), *extra])


PRUNED = SHARE_FILES.index("share_replay_small")
"""The partition whose log start the root's checkpoint moved to its prune point, as Kafka's
share coordinator prunes (the segment still holds the records below it)."""
DAMAGED = SHARE_FILES.index("share_interleaved")
"""The partition whose checkpointed log start lies past its log's end (a damaged line)."""
PAST_END = 10**9


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    layout(root, "kafka-4.4-dev", SHARE_FILES, "__share_group_state")
    layout(root, "kafka-4.4-dev", OFFSET_FILES, "__consumer_offsets")
    small = json.loads((conformance_dir("kafka-4.4-dev") / "share_replay_small.final_state.json")
                       .read_text("utf-8"))
    (root / "log-start-offset-checkpoint").write_text(
        f"0\n2\n__share_group_state {PRUNED} {small['lastRedundantOffset']}\n"
        f"__share_group_state {DAMAGED} {PAST_END}\n")
    return root


@pytest.fixture(scope="module")
def warehouse(spark: Any, logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("warehouse")
    assert run(spark, logs, out, "--snapshot-update-records", "5") in (0, 1)
    return out


def rows(spark: Any, warehouse: Path, name: str, where: str = "true") -> list[dict[str, Any]]:
    df = open_lake(spark).read(str(warehouse / name)).where(where)
    return [r.asDict(recursive=True) for r in df.collect()]


def _kafka_partition(p: dict[str, Any]) -> dict[str, Any]:
    state = p["state"]
    return {"group_id": p["groupId"], "topic_id": p["topicId"], "partition": p["partition"],
            "state_epoch": state["stateEpoch"], "snapshot_epoch": state["snapshotEpoch"],
            "leader_epoch": state["leaderEpoch"], "start_offset": state["startOffset"],
            "delivery_complete_count": state.get("deliveryCompleteCount", -1),
            "create_timestamp": state["createTimestamp"],
            "write_timestamp": state["writeTimestamp"],
            "state_batches": [{snake_case(k): v for k, v in b.items()}
                              for b in state["stateBatches"]],
            "max_leader_epoch": p["leaderEpochMap"], "max_state_epoch": p["stateEpochMap"],
            "last_snapshot_offset": p["lastSnapshotOffset"]}


def test_share_partition_state_equals_kafka(spark: Any, warehouse: Path) -> None:
    fixtures = conformance_dir("kafka-4.4-dev")
    for partition, name in enumerate(SHARE_FILES):
        if name == "share_replay_small":  # its workload config is 5 updates per snapshot
            final = json.loads((fixtures / f"{name}.final_state.json").read_text("utf-8"))
        else:
            final = json.loads((fixtures / f"{name}.final_state.jsonl").read_text("utf-8")
                               .splitlines()[0])
        ours = {(r["group_id"], r["topic_id"], r["partition"]): r
                for r in rows(spark, warehouse, "share_partition_state",
                              f"state_partition = {partition}")}
        want = {(p["groupId"], p["topicId"], p["partition"]): _kafka_partition(p)
                for p in final["partitions"] if p["state"] is not None}
        assert set(ours) == set(want), name
        for key, expected in want.items():
            assert {k: ours[key][k] for k in expected} == expected, (name, key)
            assert ours[key]["as_of_offset"] == final["afterOffset"], name


def test_history_answers_as_of_queries_like_kafka(spark: Any, warehouse: Path) -> None:
    """`state as of offset X` from the history table = Kafka's shard after record X."""
    fixtures = conformance_dir("kafka-4.4-dev")
    partition = SHARE_FILES.index("share_tombstones")
    spark_rows = rows(spark, warehouse, "share_partition_state_history",
                      f"state_partition = {partition}")
    lines = [json.loads(x) for x in
             (fixtures / "share_tombstones.states.jsonl").read_text("utf-8").splitlines()]
    for line in lines:
        if "after" not in line:
            continue
        after = line["after"]
        key = (after["groupId"], after["topicId"], after["partition"])
        history = [r for r in spark_rows if (r["group_id"], r["topic_id"], r["partition"]) == key
                   and r["record_offset"] <= line["offset"]]
        latest = max(history, key=lambda r: r["record_offset"]) if history else None
        if after["state"] is None:
            assert latest is None or latest["deleted"], line["offset"]
            continue
        assert latest is not None and not latest["deleted"], line["offset"]
        expected = _kafka_partition(after)
        assert {k: latest[k] for k in expected} == expected, line["offset"]


def test_consumer_group_offsets_equal_kafka(spark: Any, warehouse: Path) -> None:
    fixtures = conformance_dir("kafka-4.4-dev")
    for partition, name in enumerate(OFFSET_FILES):
        final = json.loads((fixtures / f"{name}.final_state.json").read_text("utf-8"))
        current = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"]
                   for r in rows(spark, warehouse, "consumer_group_offsets",
                                 f"offsets_partition = {partition} and is_current")}
        assert current == {(c["group"], c["topic"], c["partition"]): c["committedOffset"]
                           for c in final["committedOffsets"]}, name


def test_audits_lag_and_prune_tables(spark: Any, warehouse: Path) -> None:
    audit = rows(spark, warehouse, "audit_findings")
    rules = {(r["rule"], r["partition"]) for r in audit}
    assert ("deletion", SHARE_FILES.index("share_tombstones")) in rules
    assert ("update_tombstone", SHARE_FILES.index("share_update_tombstone")) in rules
    assert ("aborted_transaction", SHARE_FILES.index("share_txn")) in rules
    prune = {r["state_partition"]: r for r in rows(spark, warehouse, "prune_recommendations")}
    small = json.loads((conformance_dir("kafka-4.4-dev") / "share_replay_small.final_state.json")
                       .read_text("utf-8"))
    assert prune[SHARE_FILES.index("share_replay_small")]["prune_offset"] == \
        small["lastRedundantOffset"]
    lag = rows(spark, warehouse, "share_group_lag")
    state = rows(spark, warehouse, "share_partition_state")
    assert len(lag) == len(state) and all(r["lag_is_lower_bound"] for r in lag)


def test_prune_recommendations_equal_sharestate_prune(spark: Any, logs: Path,
                                                      warehouse: Path) -> None:
    """Over a copy of a broker whose share coordinator pruned a partition (its checkpointed
    log start the prune point), the pipeline's rows are `sharestate prune`'s: Kafka's log
    start, nothing below it reclaimable (it gave the first offset and the deleted records).
    A start past a partition's log end (a damaged checkpoint line) is refused by both, the
    partition read from its start (the pipeline skipped all of it)."""
    done = subprocess.run([sys.executable, "-m", "sharestate", "prune", str(logs),
                           "--snapshot-update-records", "5"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stderr
    assert f"log_start_past_end: __share_group_state-{DAMAGED}: the log start offset " \
        f"{PAST_END}" in done.stderr
    cli = {r["partition"]: r for r in map(json.loads, done.stdout.splitlines())}
    ours = {r["state_partition"]: {"topic": r["state_topic"], "partition": r["state_partition"],
                                   **{k: r[k] for k in PRUNE_LINE}}
            for r in rows(spark, warehouse, "prune_recommendations")}
    assert ours == cli
    assert cli[PRUNED]["log_start_offset"] == cli[PRUNED]["prune_offset"] > 0
    assert cli[PRUNED]["reclaimable_records"] == 0
    assert cli[DAMAGED]["log_start_offset"] == 0 and cli[DAMAGED]["prune_offset"] is not None
    assert {(r["source"], r["topic"], r["partition"], r["log_start_offset"])
            for r in rows(spark, warehouse, "log_start_offsets")} == {
        (str(logs), "__share_group_state", PRUNED, cli[PRUNED]["log_start_offset"]),
        (str(logs), "__share_group_state", DAMAGED, PAST_END)}


def _snapshot(spark: Any, warehouse: Path) -> dict[str, list[str]]:
    """Every table's rows (minus run ids and times), sorted, as comparable strings."""
    volatile = {"ingest_run", "finished_at"}
    out = {}
    for name in ("log_records", "decode_errors", "share_state_records", "group_records",
                 "share_partition_state_history", "share_partition_state", "share_group_lag",
                 "redelivery", "audit_findings", "prune_recommendations",
                 "consumer_group_offsets"):
        out[name] = sorted(json.dumps({k: v for k, v in r.items() if k not in volatile},
                                      sort_keys=True, default=str)
                           for r in rows(spark, warehouse, name))
    return out


def test_rerunning_gives_identical_tables(spark: Any, warehouse: Path) -> None:
    before = _snapshot(spark, warehouse)
    source = Path(open_lake(spark).read(str(warehouse / "log_records")).first()["source"])
    root = source.parent.parent
    assert run(spark, root, warehouse, "--snapshot-update-records", "5", "--full") in (0, 1)
    assert _snapshot(spark, warehouse) == before


def test_jobs_one_at_a_time_equal_the_fused_run(spark: Any, warehouse: Path,
                                                tmp_path: Path) -> None:
    """`run_all` writes silver in the ingest pass; ingest then decode as separate jobs (the
    DAG's way, decode reading bronze back) must give the same tables."""
    source = Path(open_lake(spark).read(str(warehouse / "log_records")).first()["source"])
    args = ["--source", str(source.parent.parent), "--warehouse", str(tmp_path / "wh"),
            "--snapshot-update-records", "5"]
    for job in ("ingest", "decode", "replay", "analytics"):
        assert run_all(args, jobs=(job,)) in (0, 1)
    assert _snapshot(spark, tmp_path / "wh") == _snapshot(spark, warehouse)


def test_decode_with_a_run_id_decodes_only_that_ingest_runs_segments(spark: Any,
                                                                     tmp_path: Path) -> None:
    """The DAG's way: ingest and decode as separate jobs with the interval's run id; the
    second interval's decode rewrites only the silver partitions of its new segment."""
    root, wh = tmp_path / "logs", tmp_path / "wh"
    layout(root, "kafka-4.4-dev", ["share_txn"], "__share_group_state")
    for run_id in ("interval-1", "interval-2"):
        args = ["--source", str(root), "--warehouse", str(wh), "--run-id", run_id]
        assert run_all(args, jobs=("ingest",)) in (0, 1)
        before = _silver_files(wh)
        assert run_all(args, jobs=("decode",)) in (0, 1)
        after = _silver_files(wh)
        if run_id == "interval-1":
            target = root / "__share_group_state-1"  # a new segment for the next interval
            target.mkdir()
            shutil.copy(conformance_dir("kafka-4.4-dev") / "share_tombstones.log",
                        target / "00000000000000000000.log")
    assert after["0"] == before["0"]  # partition 0 was not decoded again
    assert after["1"] and not before.get("1")
    decoded = rows(spark, wh, "share_state_records")
    assert {r["state_partition"] for r in decoded} == {0, 1}
    bronze = rows(spark, wh, "log_records", "topic = '__share_group_state'")
    assert len(decoded) == len(bronze)


def _silver_files(warehouse: Path) -> dict[str, set[str]]:
    """The data files of `share_state_records` by state partition."""
    import pyarrow as pa
    from deltalake import DeltaTable

    files: dict[str, set[str]] = {}
    for action in pa.table(DeltaTable(str(warehouse / "share_state_records")).get_add_actions(
            flatten=True)).to_pylist():
        files.setdefault(str(action["partition.state_partition"]), set()).add(action["path"])
    return files


def test_corrupt_segment_lands_in_decode_errors(spark: Any, tmp_path: Path) -> None:
    data = (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes()
    broken = bytearray(data)
    broken[len(data) // 2] ^= 0xFF
    target = tmp_path / "logs" / "__share_group_state-3"
    target.mkdir(parents=True)
    (target / "00000000000000001000.log").write_bytes(bytes(broken[: len(broken) - 9]))
    status = run(spark, tmp_path / "logs", tmp_path / "wh")
    assert status == 1
    errors = rows(spark, tmp_path / "wh", "decode_errors")
    assert {"crc_mismatch", "truncated_batch"} <= {e["kind"] for e in errors}
    assert rows(spark, tmp_path / "wh", "audit_findings", "rule = 'decode_error'")
    assert len(rows(spark, tmp_path / "wh", "share_partition_state")) > 0


def _damaged_share_log() -> tuple[bytes, list[int]]:
    """Kafka's transactional share-state segment with four batches damaged four ways (a
    codec id that does not exist, a marker whose count became 0, a flipped byte in a
    record, a length running over the next batch, a marker); where each damaged batch
    starts."""
    data = (conformance_dir("kafka-4.4-dev") / "share_txn.log").read_bytes()
    spans = damage.layout(data)
    marker = next(i for i, s in enumerate(spans) if s.is_control)
    codec, flipped = 1, marker + 1
    covering = next(i for i, s in enumerate(spans) if i > flipped and spans[i + 1].is_control)
    out = damage.set_codec(data, spans[codec].position, 6)
    out = damage.set_count(out, spans[marker].position, 0, crc=False)
    out = damage.flip(out, spans[flipped].position + spans[flipped].size - 3)
    out = damage.set_length(out, spans[covering].position,
                            spans[covering].size + spans[covering + 1].size - 12)
    return out, [spans[i].position for i in (codec, marker, flipped, covering)]


def test_every_damaged_batch_has_its_decode_errors_row(spark: Any, tmp_path: Path) -> None:
    """The pipeline's decode_errors hold exactly the findings `sharestate decode` reports
    for the same bytes, one per damaged batch; every intact record is in log_records."""
    from sharestate.app.cli import main as cli

    data, damaged = _damaged_share_log()
    target = tmp_path / "logs" / "__share_group_state-0"
    target.mkdir(parents=True)
    segment = target / "00000000000000000000.log"
    segment.write_bytes(data)
    assert run(spark, tmp_path / "logs", tmp_path / "wh") == 1
    errors = rows(spark, tmp_path / "wh", "decode_errors")
    assert sorted(e["position"] for e in errors) == damaged
    assert cli(["decode", str(segment), "-o", str(tmp_path / "rows.jsonl"), "--findings",
                str(tmp_path / "findings.jsonl")]) == 1
    findings = [json.loads(line) for line in
                (tmp_path / "findings.jsonl").read_text("utf-8").splitlines()]
    assert sorted((e["source"], e["position"], e["offset"], e["kind"], e["message"],
                   e["raw_length"]) for e in errors) == \
        sorted((f["source"], f["position"], f["offset"], f["kind"], f["message"],
                f["raw_length"]) for f in findings)
    decoded = [json.loads(line) for line in
               (tmp_path / "rows.jsonl").read_text("utf-8").splitlines()]
    assert sorted(r["offset"] for r in rows(spark, tmp_path / "wh", "log_records")) == \
        sorted(r["offset"] for r in decoded if r["error"] is None)


def test_overlapping_segments_are_one_offset_order_finding(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A partition folder holding a second segment that repeats the first one's tail, which
    no sound log holds (a log cleaner's output replaces the segments it merged): the run
    applies each offset once, so its state is the clean log's, and records one
    `offset_order` finding naming both segments and the offsets repeated, exiting 1 as
    `sharestate state` does over the folder; a second run over it (going on from its state)
    adds none, nor does a third where the lake cannot list bronze's files."""
    from sharestate import api
    from sharestate.app.cli import main as cli
    from sharestate.lake.rs import RsLake
    from sharestate.log import Batch, read_batches

    data = (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes()
    clean = tmp_path / "clean" / "__share_group_state-0"
    clean.mkdir(parents=True)
    (clean / "00000000000000000000.log").write_bytes(data)
    batches = [b.header for b in read_batches(io.BytesIO(data)) if isinstance(b, Batch)]
    tail, end = batches[len(batches) // 2], batches[-1].last_offset
    target = tmp_path / "logs" / "__share_group_state-0"
    target.mkdir(parents=True)
    (target / "00000000000000000000.log").write_bytes(data)
    (target / f"{tail.base_offset:020d}.log").write_bytes(data[tail.position:])
    assert cli(["state", str(tmp_path / "logs"), "-o", str(tmp_path / "state.jsonl")]) == 1
    for attempt in range(3):
        if attempt == 2:
            monkeypatch.setattr(RsLake, "active_files", lambda self, path: None)
        assert run(spark, tmp_path / "logs", tmp_path / "wh") == 1
        found = rows(spark, tmp_path / "wh", "audit_findings", "rule = 'offset_order'")
        assert [(f["topic"], f["partition"], f["offset"], f["severity"],
                 json.loads(f["detail_json"])) for f in found] == [
            ("__share_group_state", 0, tail.base_offset, "error",
             {"segment": tail.base_offset, "overlapped_segment": 0,
              "first_offset": tail.base_offset, "last_offset": end})]
        assert rows(spark, tmp_path / "wh", "audit_findings",
                    "severity <> 'info' AND rule <> 'offset_order'") == []
    state = sorted(map(repr, rows(spark, tmp_path / "wh", "share_partition_state")))
    assert state and state == sorted(map(repr, api.share_partition_states([clean]).to_pylist()))
    assert sorted(map(repr, rows(spark, tmp_path / "wh", "prune_recommendations"))) == \
        sorted(map(repr, api.prune_points([clean]).to_pylist()))



def _overlapping_folder(root: Path) -> tuple[Path, Any, int]:
    """A partition folder of share_codec_none.log and a copy of its tail (a second segment);
    (the folder, the copy's first batch header, the log's last offset)."""
    from sharestate.log import Batch, read_batches

    data = (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes()
    batches = [b.header for b in read_batches(io.BytesIO(data)) if isinstance(b, Batch)]
    tail = batches[len(batches) // 2]
    target = root / "__share_group_state-0"
    target.mkdir(parents=True)
    (target / "00000000000000000000.log").write_bytes(data)
    (target / f"{tail.base_offset:020d}.log").write_bytes(data[tail.position:])
    return target, tail, batches[-1].last_offset


def test_an_overlap_past_the_stop_point_is_reported_as_the_cli_does(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`sharestate state --as-of-offset` reads the segments in order and stops at the first
    record past the point: the copied segment (offsets going back) is read, and refused with
    offset_order findings, only when the point is at or past the end of the segment it
    repeats. The run reported the overlap whatever its stop point; it now does as the CLI
    (exit 0 and no finding before that end, exit 1 and the finding from it on), by offset
    and by time alike, and where the lake cannot list bronze's files."""
    from sharestate.app.cli import main as cli
    from sharestate.lake.rs import RsLake

    _, tail, end = _overlapping_folder(tmp_path / "logs")
    cases = [("--as-of-offset", str(end - 5), str(end)),
             ("--as-of-time", "1760000000054", "1760000000059"), ("", str(end - 5), str(end))]
    for case, (flag, before, after) in enumerate(cases):
        if not flag:  # the offsets again, the overlaps found by the driver
            flag = "--as-of-offset"
            monkeypatch.setattr(RsLake, "active_files", lambda self, path: None)
        for point, expected in ((before, 0), (after, 1)):
            warehouse = tmp_path / f"wh-{case}-{expected}"
            assert cli(["state", str(tmp_path / "logs"), flag, point, "-o",
                        str(tmp_path / "state.jsonl")]) == expected, (flag, point)
            assert run(spark, tmp_path / "logs", warehouse, flag, point) == expected
            found = rows(spark, warehouse, "audit_findings", "rule = 'offset_order'")
            assert [f["offset"] for f in found] == [tail.base_offset] * expected, (flag, point)


def test_an_overlap_survives_a_segment_read_again_alone(spark: Any, tmp_path: Path) -> None:
    """The copied segment touched (its modification time changed, its bytes not) is read again
    by the next run, alone: a later run replaying from the log start without reading them
    again (a stop point, another `--max-findings`, another sharestate) took the two segments
    for ones read apart (a log cleaner's rewrite) and lost the finding. Segments read
    together keep being so while their offsets are the ones read then."""
    target, tail, end = _overlapping_folder(tmp_path / "logs")
    warehouse = tmp_path / "wh"
    assert run(spark, tmp_path / "logs", warehouse) == 1
    copy = target / f"{tail.base_offset:020d}.log"
    later = time.time() + 60
    os.utime(copy, (later, later))
    assert run(spark, tmp_path / "logs", warehouse) == 1
    reads = rows(spark, warehouse, "ingest_runs", "job = 'ingest'")
    assert sorted(r["segment"] for r in reads) == [0, tail.base_offset, tail.base_offset]
    for extra in ((), ("--max-findings", "99"), ("--as-of-offset", str(end))):
        assert run(spark, tmp_path / "logs", warehouse, *extra) == 1, extra
        found = rows(spark, warehouse, "audit_findings", "rule = 'offset_order'")
        assert [f["offset"] for f in found] == [tail.base_offset], extra


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all(["--warehouse"]) == 2
    assert run_all(["--warehouse", "w", "--as-of-time", "soon"]) == 2
    assert run_all(["--source", "logs", "--warehouse", "w",
                    "--conf", "spark.sharestate.driverJit=fast"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and "driverJit must be quick or full" in errors[-1]


def test_killed_run_then_rerun_completes(spark: Any, warehouse: Path, tmp_path: Path) -> None:
    source = Path(open_lake(spark).read(str(warehouse / "log_records")).first()["source"])
    root = source.parent.parent
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "sharestate.spark.run", "--source", str(root), "--warehouse",
               str(out), "--snapshot-update-records", "5", "--conf", "spark.ui.enabled=false"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "share_state_records" / "_delta_log" / "00000000000000000001.json").exists():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.2)
    process.kill()
    process.wait()
    assert run(spark, root, out, "--snapshot-update-records", "5") in (0, 1)
    assert _snapshot(spark, out) == _snapshot(spark, warehouse)



def _ingest_runs(spark: Any, warehouse: Path) -> list[dict[str, Any]]:
    return sorted(({k: v for k, v in r.items() if k not in ("finished_at", "ingest_run")}
                   for r in rows(spark, warehouse, "ingest_runs")),
                  key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _bronze_extent(spark: Any, warehouse: Path) -> dict[int, tuple[int, int, int]]:
    """(first offset, last offset, records) of each partition's log_records rows."""
    extent: dict[int, tuple[int, int, int]] = {}
    for r in rows(spark, warehouse, "log_records"):
        first, last, count = extent.get(r["partition"], (r["offset"], r["offset"], 0))
        extent[r["partition"]] = (min(first, r["offset"]), max(last, r["offset"]), count + 1)
    return extent


def test_ingest_runs_record_what_each_run_read(spark: Any, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """ingest_runs holds, per segment and run, the offsets, records and findings the run
    wrote (from the written files' statistics; read back from the rows where the backend
    cannot list files: both give the same); a segment read again without its findings
    loses the old ones."""
    from sharestate.lake.rs import RsLake

    root = tmp_path / "logs"
    layout(root, "kafka-4.4-dev", ["share_txn", "share_tombstones"], "__share_group_state")
    damaged = root / "__share_group_state-1" / "00000000000000000000.log"
    clean = damaged.read_bytes()
    flipped = bytearray(clean)
    flipped[len(clean) // 2] ^= 0xFF
    broken = bytes(flipped[: len(flipped) - 9])

    def write(data: bytes, seconds: int) -> None:  # the same file times in both runs
        damaged.write_bytes(data)
        os.utime(damaged, (seconds, seconds))

    def ingest(warehouse: Path) -> list[Any]:
        args = ["--source", str(root), "--warehouse", str(warehouse)]
        write(broken, 1_700_000_000)
        assert run_all(args, jobs=("ingest",)) == 1
        seen = [_ingest_runs(spark, warehouse), len(rows(spark, warehouse, "decode_errors")),
                _bronze_extent(spark, warehouse)]
        write(clean, 1_700_000_100)
        assert run_all(args, jobs=("ingest",)) == 0  # reads the repaired segment only
        return [*seen, _ingest_runs(spark, warehouse),
                len(rows(spark, warehouse, "decode_errors")), _bronze_extent(spark, warehouse)]

    first, errors, extent, second, errors_after, extent_after = ingest(tmp_path / "files")
    assert errors > 0 and errors_after == 0  # the repaired segment's findings are gone
    assert sorted((r["partition"], r["findings"]) for r in first) == [(0, 0), (1, errors)]
    assert {r["partition"]: (r["first_offset"], r["last_offset"], r["records"])
            for r in first} == extent
    added = [r for r in second if r not in first]
    assert [(r["partition"], r["findings"]) for r in added] == [(1, 0)]
    assert (added[0]["first_offset"], added[0]["last_offset"], added[0]["records"]) == \
        extent_after[1]
    monkeypatch.setattr(RsLake, "active_files", lambda self, path: None)
    assert ingest(tmp_path / "rows") == [first, errors, extent, second, errors_after,
                                         extent_after]
