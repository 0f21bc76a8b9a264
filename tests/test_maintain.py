"""`sharestate maintain`: small files merged, unused ones deleted, logs checkpointed, and the
next incremental run still going on from where the last one stopped.

The units run on real delta-rs tables; the pipeline test feeds one warehouse a simulated
log a day at a time (as test_pipeline_incremental does), maintains it between the days
and compares it, row by row, with one run over the whole log. Real local Spark.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from sharestate.app.cli import main as cli
from sharestate.app.maintain import file_key
from sharestate.lake.base import ActiveFile
from sharestate.lake.compact import compact, plan_bins, vacuum
from sharestate.lake.delta_log import data_changes
from sharestate.lake.lease import warehouse_lease
from sharestate.lake.rs import list_files
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.simulate import SimulationConfig, simulate
from sharestate.simulate.days import day_ends, segments, write_day
from sharestate.spark.run import main as run_all
from sharestate.tables.spec import table_names

RUN_COLUMNS = {"ingest_run", "run_id", "committed_at", "source"}
RUN_TABLES = {"ingest_runs", "log_start_offsets", "quality_results", "replay_state",
              "lag_state"}


def _file(tmp_path: Path, name: str, size: int, partition: dict[str, Any] | None = None,
          low: dict[str, Any] | None = None, high: dict[str, Any] | None = None
          ) -> ActiveFile:
    path = tmp_path / name
    path.write_bytes(b"x" * size)
    return ActiveFile(str(path), partition or {}, 1, low or {}, high or {})


def test_bins_pack_small_files_of_one_key_and_leave_the_rest(tmp_path: Path) -> None:
    files = [_file(tmp_path, f"a{i}", 30, {"p": 0}) for i in range(5)]
    files += [_file(tmp_path, f"b{i}", 30, {"p": 1}) for i in range(2)]  # too few
    files += [_file(tmp_path, "big", 200, {"p": 0})]  # not small
    files += [_file(tmp_path, f"k{i}", 10, {"p": 0}, {"x": 1}) for i in range(3)]
    bins = plan_bins(files, lambda f: f.min_values.get("x"), target_bytes=100, min_files=3)
    by_names = sorted(sorted(Path(f.uri).name for f in b.files) for b in bins)
    # p=0 without x: key None, left alone; p=0 with x=1: one bin; p=1: key None as well
    assert by_names == [["k0", "k1", "k2"]]
    bins = plan_bins(files, lambda f: 0, target_bytes=100, min_files=3)
    assert sorted(Path(f.uri).name for b in bins for f in b.files) == [
        "a0", "a1", "a2", "a3", "a4", "k0", "k1", "k2"]  # p=1's two are too few
    assert [b.bytes for b in bins] == [100, 80]


def _history_file(points: dict[tuple[str, int], int], partition: int, top: int,
                  since: int | None = None, latest: int = 7) -> Any:
    key = file_key("share_partition_state_history", points, since)
    return key(ActiveFile("f", {"state_partition": partition}, 1,
                          {"record_offset": 0, "timestamp": 1},
                          {"record_offset": top, "timestamp": latest}))


def test_history_and_findings_merge_only_below_the_replay_state() -> None:
    points = {(SHARE_STATE_TOPIC, 0): 100}
    assert _history_file(points, 0, 100) == ()
    assert _history_file(points, 0, 101) is None  # a died run's rows: dropped file by file
    assert _history_file(points, 1, 5) is None  # no state: the partition is replayed whole
    # the lag walk reads again every file with a row after the moment it goes on from
    assert _history_file(points, 0, 100, since=7) == ()
    assert _history_file(points, 0, 100, since=6) is None
    findings = file_key("audit_findings", points, None)

    def finding(rule: str, low: tuple[str, int, int], high: tuple[str, int, int]) -> Any:
        names = ("topic", "partition", "offset")
        return findings(ActiveFile("f", {"rule": rule}, 1, dict(zip(names, low, strict=True)),
                                   dict(zip(names, high, strict=True))))

    assert finding("deletion", (SHARE_STATE_TOPIC, 0, 3), (SHARE_STATE_TOPIC, 0, 90)) == (
        SHARE_STATE_TOPIC, 0)
    assert finding("deletion", (SHARE_STATE_TOPIC, 0, 3), (SHARE_STATE_TOPIC, 0, 101)) is None
    assert finding("deletion", (SHARE_STATE_TOPIC, 0, 3), (SHARE_STATE_TOPIC, 1, 9)) is None
    assert finding("quality_gate", (SHARE_STATE_TOPIC, 0, 3), (SHARE_STATE_TOPIC, 0, 9)) is None
    lag = file_key("share_group_lag_history", points, 50)
    assert lag(ActiveFile("f", {}, 1, {"time": 1}, {"time": 50})) == ()
    assert lag(ActiveFile("f", {}, 1, {"time": 1}, {"time": 51})) is None


def _append(path: Path, rows: dict[str, list[Any]]) -> None:
    write_deltalake(str(path), pa.table(rows), mode="append", partition_by=["p"])


def test_compaction_keeps_rows_and_is_no_data_change(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for day in range(4):
        _append(path, {"p": [0, 0, 1], "timestamp": [day * 10 + 1, day * 10 + 2, day * 10],
                       "v": [f"d{day}a", f"d{day}b", f"d{day}c"]})
    before = DeltaTable(str(path)).to_pyarrow_table().sort_by("v")
    version, then = DeltaTable(str(path)).version(), list_files(path)
    bins = plan_bins(then, lambda f: (), target_bytes=1 << 20, min_files=2)
    assert compact(path, bins, ["timestamp"]) == version + 1
    after = list_files(path)
    assert len(after) == 2 and {f.records for f in after} == {8, 4}
    assert DeltaTable(str(path)).to_pyarrow_table().sort_by("v").equals(before)
    for f in after:  # rows sorted by the clustering column, statistics written
        assert pq.read_table(f.uri)["timestamp"].to_pylist() == sorted(
            pq.read_table(f.uri)["timestamp"].to_pylist())
        assert f.min_values["timestamp"] <= f.max_values["timestamp"]
    assert data_changes(path, version, then) == []
    _append(path, {"p": [1], "timestamp": [99], "v": ["new"]})
    changed = data_changes(path, version, then)
    assert changed is not None and [m["timestamp"] for m in changed] == [99]
    # a compaction of a file added since counts as a change of its rows
    compact(path, plan_bins(list_files(path), lambda f: (), target_bytes=1 << 20,
                            min_files=2), ["timestamp"])
    changed = data_changes(path, version, then)
    assert changed is not None and [m["timestamp"] for m in changed] == [0]
    DeltaTable(str(path)).create_checkpoint()  # the log cleaned up before it: unknown
    os.remove(path / "_delta_log" / f"{version + 1:020d}.json")
    assert data_changes(path, version, then) is None


def test_vacuum_keeps_what_the_retention_covers(tmp_path: Path) -> None:
    path = tmp_path / "t"
    for day in range(3):
        _append(path, {"p": [0], "timestamp": [day], "v": [str(day)]})
    compact(path, plan_bins(list_files(path), lambda f: (), target_bytes=1 << 20,
                            min_files=2), [])
    on_disk = sorted(p.name for p in path.rglob("*.parquet"))
    assert len(on_disk) == 4
    assert vacuum(path, None, dry_run=False) == []  # removed just now: kept 7 days
    DeltaTable(str(path)).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 hours"})
    assert len(vacuum(path, 0, dry_run=False)) == 3
    assert [f.records for f in list_files(path)] == [3]
    assert len(list(path.rglob("*.parquet"))) == 1


def _rows(warehouse: Path, name: str) -> list[str]:
    data = DeltaTable(str(warehouse / name)).to_pyarrow_table()
    data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
    return sorted(map(repr, data.to_pylist()))


def _commits(table: Path) -> list[Any]:
    """The table's versions with their times, as `sql --as-of-time` reads them."""
    from sharestate.lake.rs import commit_times

    versions = [int(h["version"]) for h in DeltaTable(str(table)).history()]
    return [SimpleNamespace(version=v, timestamp_ms=t)
            for v, t in commit_times(str(table.resolve()), versions).items()]


def _uris(table: Path) -> set[str]:
    return set(DeltaTable(str(table)).file_uris())


@pytest.mark.slow
def test_maintained_daily_runs_go_on_and_equal_one_run(
        spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "log"
    simulate(SimulationConfig(records=9_000, seed=11, state_partitions=2,
                              offsets_partitions=1, segment_bytes=16 << 10,
                              snapshot_limit=20, poison_rate=0.02), root)
    found = segments(root)
    ends = day_ends(found, 4)
    source, daily, once = tmp_path / "source", tmp_path / "daily", tmp_path / "once"
    tables = [n for n in table_names() if n not in RUN_TABLES]
    for day, end in enumerate(ends, start=1):
        write_day(found, root, source, end, ends[day - 3] if day >= 3 else None)
        assert run_all(["--source", str(source), "--warehouse", str(daily)]) in (0, 1)
        if day == len(ends):
            break
        before = {name: _rows(daily, name) for name in tables}
        files = {name: len(_uris(daily / name)) for name in tables}
        assert cli(["maintain", "--warehouse", str(daily), "--min-files", "2"]) == 0
        out = capsys.readouterr().out
        assert {name: _rows(daily, name) for name in tables} == before
        if day == 3:  # two days the lag walk is past: their history and lag history merged
            for name in ("share_partition_state_history", "share_group_lag_history"):
                assert len(_uris(daily / name)) < files[name], (name, out)
        merged = {name: _uris(daily / name) for name in (
            "share_partition_state_history", "audit_findings", "share_group_lag_history")}
    # the last day went on from the maintained state: the merged files are still there
    for name, uris in merged.items():
        assert uris & _uris(daily / name), name
    assert run_all(["--source", str(root), "--warehouse", str(once)]) in (0, 1)
    assert {name: _rows(daily, name) for name in tables} == \
        {name: _rows(once, name) for name in tables}
    # past a vacuum without retention, the first day's versions cannot be read: said so
    first_day = sorted(c.timestamp_ms for c in _commits(daily / "share_group_lag"))[1]
    DeltaTable(str(daily / "share_group_lag")).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": "interval 0 hours"})
    assert vacuum(daily / "share_group_lag", 0, dry_run=False)
    capsys.readouterr()
    assert cli(["sql", "--warehouse", str(daily), "--as-of-time", str(first_day),
                "SELECT count(*) FROM share_group_lag"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("sharestate: error: ") and "files are gone" in err[-1], err


def test_maintain_refuses_a_short_retention_and_a_held_lease(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = tmp_path / "wh"
    path = warehouse / "ingest_runs"
    for day in range(3):
        write_deltalake(str(path), pa.table({"topic": ["t"], "v": [day]}), mode="append",
                        partition_by=["topic"])
    versions = DeltaTable(str(path)).version()
    assert cli(["maintain", "--warehouse", str(warehouse), "--retain-hours", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sharestate: error: ") and "retention" in err and "\n" not in err
    assert DeltaTable(str(path)).version() == versions  # refused before any change
    with warehouse_lease(warehouse, run="other", what="a test"):
        assert cli(["maintain", "--warehouse", str(warehouse)]) == 2
    assert "in use" in capsys.readouterr().err
    assert cli(["maintain", "--warehouse", str(warehouse), "--min-files", "2",
                "--dry-run"]) == 0
    assert "3 would be merged into 1" in capsys.readouterr().out
    assert DeltaTable(str(path)).version() == versions
    assert cli(["maintain", "--warehouse", str(warehouse), "--min-files", "2"]) == 0
    assert "ingest_runs: 3 files; 3 merged into 1" in capsys.readouterr().out
    assert len(list_files(path)) == 1


def test_a_table_delta_rs_cannot_read_is_left_as_it_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = tmp_path / "wh"
    for name in ("ingest_runs", "quality_results", "replay_state"):
        for day in range(2):
            write_deltalake(str(warehouse / name), pa.table({"v": [day]}), mode="append")
    for name in ("ingest_runs", "replay_state"):  # the history's merges depend on the latter
        (warehouse / name / "_delta_log" / f"{1:020d}.json").write_text("not json\n")
    for day in range(2):
        write_deltalake(str(warehouse / "redelivery"), pa.table({"v": [day]}), mode="append")
    os.remove(list_files(warehouse / "redelivery")[0].uri)  # a data file lost
    assert cli(["maintain", "--warehouse", str(warehouse), "--min-files", "2",
                "--retain-hours", "200"]) == 1
    out = capsys.readouterr().out
    assert "ingest_runs: left as it is: " in out and "replay_state: left as it is: " in out
    assert "redelivery: left as it is: " in out and "No such file" in out
    assert "quality_results: 2 files; 2 merged into 1" in out
    assert [p.name for p in (warehouse / "redelivery").glob("*.parquet")] == [
        Path(f.uri).name for f in list_files(warehouse / "redelivery")][1:]  # nothing written
