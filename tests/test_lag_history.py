"""Lag through time on real Spark and Delta: `topic_end_offsets` from the simulated data
topics' segment files and `share_group_lag_history`, held to what the simulator produced
and when (its record of every append, not the segments the reader reads) and to Kafka's
formula as `sharestate.analytics.lag.share_lag` applies it."""

from __future__ import annotations

import shutil
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SimulatedWarehouse

from sharestate.analytics.end_offsets import FILE, SEGMENTS, sampled
from sharestate.analytics.lag import share_lag
from sharestate.coordinator.share_state import SharePartitionState, StateBatch
from sharestate.lake import open_lake
from sharestate.spark.run import parser, run
from sharestate.spark.session import LAG_BIN_SETTING

pytestmark = pytest.mark.slow


def _rows(spark: Any, warehouse: Path, name: str) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in open_lake(spark).read(warehouse / name).collect()]


def _truth(sim: SimulatedWarehouse) -> dict[tuple[str, int], Any]:
    """(topic id, partition) -> the end offset at t: after the last append before t (the
    lag takes the state's own bound when that is higher: `_end`)."""
    def at(appends: list[tuple[int, int]]) -> Any:
        times = [time for time, _ in appends]
        return lambda t: appends[bisect_left(times, t) - 1][1] if bisect_left(times, t) else 0
    return {where: at(appends) for where, appends in sim.result.data_ends.items()}


def _end(truth: dict[tuple[str, int], Any], h: dict[str, Any], t: int) -> int:
    """The end offset the lag of history row `h` is against at t: the true one, or the
    offset after its last in-flight record (appended in the same millisecond) if higher."""
    own = share_lag(_state(h)).end_offset
    return max(truth[(h["topic_id"], h["partition"])](t), own if own is not None else 0)


def _state(row: dict[str, Any]) -> SharePartitionState:
    return SharePartitionState(0, 0, 0, row["start_offset"],
                               row["delivery_complete_count"]
                               if row["delivery_complete_count"] is not None else -1, None, None,
                               tuple(StateBatch(b["first_offset"], b["last_offset"],
                                                b["delivery_state"], b["delivery_count"])
                                     for b in row["state_batches"] or ()))


def test_end_offsets_from_segments_are_what_was_appended_before_each_time(
        spark: Any, simulated_warehouse: SimulatedWarehouse) -> None:
    sim = simulated_warehouse
    truth = _truth(sim)
    rows = _rows(spark, sim.warehouse, "topic_end_offsets")
    segments = [r for r in rows if r["source"] == SEGMENTS]
    assert segments and all(r["exact"] and r["timestamp_type"] == "LogAppendTime"
                            for r in segments)
    assert [(r["time"], r["end_offset"]) for r in segments] == \
        [(r["time"], truth[(r["topic_id"], r["partition"])](r["time"])) for r in segments]
    files = [r for r in rows if r["source"] == FILE]
    assert sorted((r["topic_id"], r["partition"], r["end_offset"]) for r in files) == sorted(
        (e["topic_id"], e["partition"], e["end_offset"]) for e in sim.result.end_offsets)
    # the times asked for are `sampled` over the state changes of the groups consuming each
    history = _rows(spark, sim.warehouse, "share_partition_state_history")
    group_times: dict[str, set[int]] = defaultdict(set)
    consumers: dict[tuple[str, int], set[str]] = defaultdict(set)
    for h in history:
        group_times[h["group_id"]].add(h["timestamp"])
        consumers[(h["topic_id"], h["partition"])].add(h["group_id"])
    asked = {(r["topic_id"], r["partition"], r["time"]) for r in segments}
    expected = {(*where, t) for where, groups in consumers.items() if where in truth
                for t in sampled(set().union(*(group_times[g] for g in groups)))}
    assert asked == expected


def test_lag_history_is_kafkas_formula_at_each_time(
        spark: Any, simulated_warehouse: SimulatedWarehouse) -> None:
    sim = simulated_warehouse
    truth = _truth(sim)
    history = sorted(_rows(spark, sim.warehouse, "share_partition_state_history"),
                     key=lambda h: (h["timestamp"], h["state_partition"], h["record_offset"]))
    lag = _rows(spark, sim.warehouse, "share_group_lag_history")
    own = {(r["state_partition"], r["record_offset"]): r for r in lag
           if r["scope"] == "share_partition"}
    assert len(own) == len(history)
    exact = 0
    for h in history:
        row = own[(h["state_partition"], h["record_offset"])]
        if h["deleted"] or h["start_offset"] < 0 or (h["topic_id"], h["partition"]) not in truth:
            assert row["exact"] is False or row["lag"] is not None
            continue
        expected = share_lag(_state(h), _end(truth, h, h["timestamp"]))
        assert row["delivery_complete_count"] == (
            expected.delivery_complete_count if expected.delivery_complete_count >= 0
            else expected.terminal_in_state)
        if row["exact"]:
            exact += 1
            assert row["lag"] == expected.lag, row
        else:  # a lower bound is never above the truth
            assert row["lag_is_lower_bound"] and row["lag"] <= expected.lag, row
    assert exact > len(history) // 4
    # each group row: its share-partitions' latest states then, against the true end offsets
    latest: dict[str, dict[tuple[str, int], dict[str, Any]]] = defaultdict(dict)
    groups = sorted((r for r in lag if r["scope"] == "group"),
                    key=lambda r: (r["group_id"], r["time"]))
    by_group = defaultdict(list)
    for h in history:
        by_group[h["group_id"]].append(h)
    checked = 0
    for group, rows in by_group.items():
        index = 0
        for row in (r for r in groups if r["group_id"] == group):
            while index < len(rows) and rows[index]["timestamp"] <= row["time"]:
                h = rows[index]
                latest[group][(h["topic_id"], h["partition"])] = h
                index += 1
            states = [h for h in latest[group].values()
                      if not h["deleted"] and h["start_offset"] >= 0]
            if any((h["topic_id"], h["partition"]) not in truth for h in states):
                continue
            total = sum(share_lag(_state(h), _end(truth, h, row["time"])).lag or 0
                        for h in states)
            assert row["partitions"] == len(states)
            if row["exact"]:
                checked += 1
                assert row["lag"] == total, row
            elif states:
                assert row["lag_is_lower_bound"] and row["lag"] <= total, row
    assert checked > 100


def test_the_last_point_agrees_with_the_lag_now(
        spark: Any, simulated_warehouse: SimulatedWarehouse) -> None:
    sim = simulated_warehouse
    lag = _rows(spark, sim.warehouse, "share_group_lag_history")
    last: dict[str, dict[str, Any]] = {}
    for row in sorted((r for r in lag if r["scope"] == "group"), key=lambda r: r["time"]):
        last[row["group_id"]] = row
    now: dict[str, int] = defaultdict(int)
    for row in _rows(spark, sim.warehouse, "share_group_lag"):
        now[row["group_id"]] += row["lag"] or 0
    assert all(row["exact"] for row in last.values())
    # equal but for what was appended in the last millisecond (the end offset at t counts
    # the records stamped before t)
    assert sorted(now, key=now.__getitem__) == sorted(last, key=lambda g: last[g]["lag"])
    assert all(0 <= now[g] - last[g]["lag"] <= 49 * 4 for g in last)


@pytest.fixture(params=[None, "0"], ids=["binned", "shuffled"])
def bin_rows(spark: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    """`spark.sharestate.lagBinRows` unset (the tasks read and sort their bins' rows), or 0
    (every bin over it: Spark shuffles and sorts the rows)."""
    if request.param is not None:
        spark.conf.set(LAG_BIN_SETTING, request.param)
    yield
    spark.conf.unset(LAG_BIN_SETTING)


@pytest.mark.usefixtures("bin_rows")
def test_a_rerun_writes_the_same_rows(spark: Any, simulated_warehouse: SimulatedWarehouse,
                                      tmp_path: Path) -> None:
    """The same rows again, whether the walk's tasks read and sort their groups' rows
    themselves or Spark shuffles and sorts them."""
    sim = simulated_warehouse
    warehouse = tmp_path / "warehouse"
    shutil.copytree(sim.warehouse, warehouse)
    before = {name: _rows(spark, warehouse, name)
              for name in ("topic_end_offsets", "share_group_lag_history", "lag_state")}
    assert run(parser().parse_args(["--warehouse", str(warehouse), "--end-offsets",
                                    str(sim.end_offsets), "--end-offsets-from", str(sim.logs)]),
               ("analytics",)) == 1
    def key(row: dict[str, Any]) -> list[tuple[str, str]]:
        return sorted((k, str(v)) for k, v in row.items() if k != "run_id")

    for name, rows in before.items():
        assert sorted(map(key, _rows(spark, warehouse, name))) == sorted(map(key, rows)), name
