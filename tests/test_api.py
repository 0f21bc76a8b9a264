"""The library API (`sharestate.api`, docs/api.md): its examples run as written, and its
answers are Kafka's (the conformance fixtures) and the command line's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import PROJECT_ROOT, conformance_dir

import sharestate
from sharestate import api
from sharestate.simulate import SimulationConfig, simulate
from sharestate.tables.spec import table

API_DOC = PROJECT_ROOT / "docs" / "api.md"


def test_the_documented_examples_run_in_order(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", API_DOC.read_text("utf-8"), re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(API_DOC), "exec"), scope)
    assert scope["states"].num_rows > 0 and scope["prune"].num_rows > 0
    assert scope["log"].log_records.num_rows > 0


def test_package_version_is_the_installed_release() -> None:
    from importlib.metadata import version

    assert sharestate.__version__ == version("sharestate")


def _kafka_checkpoints() -> list[tuple[Path, dict[str, Any]]]:
    """(log, full state) pairs: the fixtures' final states and a few checkpoints of the
    workloads whose log is a plain segment (the large one is for the benchmarks). Logs on
    which Kafka's own replay threw are left to the conformance tests, which say per record
    where our documented behaviour stands instead."""
    found = []
    for folder in ("kafka-4.4-dev", "kafka-4.0-dev"):
        for path in sorted(conformance_dir(folder).glob("share_*.jsonl")):
            name, _, kind = path.name.partition(".")
            log = path.with_name(f"{name}.log")
            if kind not in ("final_state.jsonl", "checkpoints.jsonl") or not log.is_file():
                continue
            states = path.with_name(f"{name}.states.jsonl")
            if states.is_file() and "replayException" in states.read_text("utf-8"):
                continue
            lines = path.read_text("utf-8").splitlines()
            found.extend((log, json.loads(line)) for line in lines[:: max(1, len(lines) // 4)])
    return found


def _kafka_state(entry: dict[str, Any]) -> dict[str, Any]:
    state = entry["state"]
    return {"group_id": entry["groupId"], "topic_id": entry["topicId"],
            "partition": entry["partition"], "state_epoch": state["stateEpoch"],
            "leader_epoch": state["leaderEpoch"], "start_offset": state["startOffset"],
            "batches": [(b["firstOffset"], b["lastOffset"], b["deliveryState"],
                         b["deliveryCount"]) for b in state["stateBatches"]]}


def _our_state(row: dict[str, Any]) -> dict[str, Any]:
    return {"group_id": row["group_id"], "topic_id": row["topic_id"],
            "partition": row["partition"], "state_epoch": row["state_epoch"],
            "leader_epoch": row["leader_epoch"], "start_offset": row["start_offset"],
            "batches": [(b["first_offset"], b["last_offset"], b["delivery_state"],
                         b["delivery_count"]) for b in row["state_batches"]]}


def test_states_and_prune_points_as_of_kafkas_checkpoints() -> None:
    """At each checkpoint Kafka's shard recorded (after offset N), the API's states and
    prune point are Kafka's."""
    checkpoints = _kafka_checkpoints()
    assert checkpoints
    for log, kafka in checkpoints:
        states = api.share_partition_states(log, as_of_offset=kafka["afterOffset"])
        assert states.schema == table("share_partition_state").arrow_schema()
        ours = sorted((_our_state(r) for r in states.to_pylist()),
                      key=lambda s: (s["group_id"], s["topic_id"], s["partition"]))
        theirs = sorted((_kafka_state(e) for e in kafka["partitions"]),
                        key=lambda s: (s["group_id"], s["topic_id"], s["partition"]))
        assert ours == theirs, f"{log.name} after {kafka['afterOffset']}"
        if "lastRedundantOffset" in kafka:  # the 4.0-dev fixtures do not record it
            prune = api.prune_points(log, as_of_offset=kafka["afterOffset"]).to_pylist()
            assert [row["prune_offset"] for row in prune] == [kafka["lastRedundantOffset"]]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("api") / "logs"
    simulate(SimulationConfig(records=4000, seed=5, state_partitions=2, offsets_partitions=2,
                              codec="zstd"), logs)
    return logs


def _cli(*argv: str) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "sharestate", *argv], capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_answers_equal_the_command_lines(simulated: Path) -> None:
    """The same log through `sharestate state / prune / offsets` and through the API."""
    for as_of in ([], ["--as-of-offset", "900"]):
        offset = int(as_of[1]) if as_of else None
        cli = {(r["group_id"], r["topic_id"], r["partition"]): r
               for r in _cli("state", str(simulated), *as_of)}
        states = api.share_partition_states(simulated, as_of_offset=offset).to_pylist()
        assert len(states) == len(cli) > 0
        for row in states:
            line = cli[(row["group_id"], row["topic_id"], row["partition"])]
            assert _our_state(row) == _our_state(line)
            for column in ("snapshot_epoch", "delivery_complete_count", "create_timestamp",
                           "write_timestamp", "last_snapshot_offset", "as_of_offset",
                           "max_leader_epoch", "max_state_epoch", "snapshot_update_count",
                           "state_partition", "dialect"):
                assert row[column] == line[column], column
        prune = {r["partition"]: r for r in _cli("prune", str(simulated), *as_of)}
        for row in api.prune_points(simulated, as_of_offset=offset).to_pylist():
            line = prune[row["state_partition"]]
            for column in ("prune_offset", "log_start_offset", "log_end_offset",
                           "reclaimable_records", "reclaimable_bytes", "holding"):
                assert row[column] == line[column], column
        offsets = _cli("offsets", str(simulated), "--pending", *as_of)
        table_rows = api.consumer_group_offsets(simulated, as_of_offset=offset,
                                                pending=True).to_pylist()
        assert table_rows == [{**{c: None for c in api.OFFSETS.names}, **line}
                              for line in offsets]
        assert len(table_rows) > 0


@pytest.mark.parametrize("loose", [False, True])
def test_share_partition_state_rows_are_one_shape_everywhere(simulated: Path, tmp_path: Path,
                                                             loose: bool) -> None:
    """`sharestate state`'s lines, the API's rows and the Delta table's rows are the same
    rows (one builder), also for a loose segment that names no partition
    (`state_partition` -1 in all), with the as-of timestamp in all."""
    source = simulated
    if loose:
        source = tmp_path / "loose.log"
        source.write_bytes((simulated / "__share_group_state-1" /
                            "00000000000000000000.log").read_bytes())
    lines = _cli("state", str(source))
    rows = api.share_partition_states(source).to_pylist()
    assert rows == lines and rows
    assert list(rows[0]) == table("share_partition_state").names
    assert {row["state_partition"] for row in rows} == ({-1} if loose else {0, 1})
    assert all(row["as_of_timestamp"] is not None for row in rows)


def test_snapshots_hold_what_the_tables_answer(simulated: Path) -> None:
    """`replay_snapshots` gives each partition's whole replay state: its live share-partitions
    are `share_partition_states`' rows, its committed offsets `consumer_group_offsets`'."""
    for offset in (None, 900):
        taken = api.replay_snapshots(simulated, as_of_offset=offset)
        assert {(s.kind, s.partition) for s in taken} == {
            (kind, p) for kind in ("share", "group") for p in (0, 1)}
        keys = [row for s in taken if s.kind == "share"
                for row in s.tables["share_keys"].to_pylist() if row["live"]]
        states = api.share_partition_states(simulated, as_of_offset=offset).to_pylist()
        assert sorted((k["group_id"], k["topic_id"], k["partition"], k["start_offset"],
                       k["state_batches"], k["snapshot_update_count"]) for k in keys) == sorted(
            (r["group_id"], r["topic_id"], r["partition"], r["start_offset"],
             r["state_batches"], r["snapshot_update_count"]) for r in states)
        committed = sorted((row["group_id"], row["topic"], row["partition"],
                            row["committed_offset"])
                           for s in taken if s.kind == "group"
                           for row in s.tables["committed_offsets"].to_pylist())
        assert committed == sorted(
            (row["group_id"], row["topic"], row["partition"], row["committed_offset"])
            for row in api.consumer_group_offsets(simulated, as_of_offset=offset).to_pylist())
        assert committed and keys


def test_read_log_holds_every_record_and_finding(simulated: Path, tmp_path: Path) -> None:
    log = api.read_log(simulated)
    decoded = _cli("decode", str(simulated))
    assert log.log_records.num_rows == len(decoded)
    assert log.decode_errors.num_rows == 0
    assert (log.share_state_records.num_rows + log.group_records.num_rows
            == sum(1 for r in decoded if r["record_type"] is not None or r["control"]))
    damaged = tmp_path / "damaged.log"
    segment = next(simulated.rglob("*.log")).read_bytes()
    damaged.write_bytes(segment[:200] + b"\xff" * 16 + segment[216:])
    broken = api.read_log(damaged)
    assert broken.decode_errors.num_rows >= 1
    assert broken.decode_errors.schema == table("decode_errors").arrow_schema()
    assert isinstance(broken.log_records, pa.Table)


def test_what_a_folder_holds_unread_is_a_warning(tmp_path: Path) -> None:
    """The API reads folders as the command line does: a backup folder named `<x>-<digits>`
    is read (it was empty), and other topics' partitions in a log.dirs root are a warning,
    not silence; a folder without segments raises."""
    from sharestate.log import SourceError

    data = (conformance_dir("kafka-4.4-dev") / "share_txn.log").read_bytes()
    for path in ("backups-2026-11-23/share_txn.log", "root/__share_group_state-0/"
                 f"{0:020d}.log", f"root/orders-0/{0:020d}.log"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    assert api.read_log(tmp_path / "backups-2026-11-23").log_records.num_rows == 84
    with pytest.warns(UserWarning, match=r"root: not read: orders-0 \(partition directories"):
        assert api.read_log(tmp_path / "root").log_records.num_rows == 84
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no log segments"):
        api.share_partition_states(tmp_path / "empty")
