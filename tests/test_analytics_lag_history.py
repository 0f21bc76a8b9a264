"""Lag through time (`sharestate.analytics.end_offsets`, `lag_history`) and a data
partition's end offsets from its segment files (`sharestate.log.end_offsets`)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from sharestate.analytics.end_offsets import (
    FILE,
    KAFKA,
    SEGMENTS,
    SERVE,
    STATE,
    Timeline,
    end_offset_row,
    merge_rows,
    sample_level,
    sampled,
    timelines,
)
from sharestate.analytics.lag import share_lag
from sharestate.analytics.lag_history import (
    GROUP,
    HISTORY_COLUMNS,
    SHARE_PARTITION,
    GroupState,
    HistoryRow,
    LagRow,
    lag_history_rows,
    lag_inputs,
    walk_groups,
)
from sharestate.analytics.lag_state import ends_allow, group_state, state_row
from sharestate.coordinator.share_state import SharePartitionState, StateBatch
from sharestate.log import CREATE_TIME, LOG_APPEND_TIME, RawRecord, build_batch
from sharestate.log.end_offsets import (
    data_partitions,
    end_offsets_at,
    log_end_offsets,
    topic_id_of,
)
from sharestate.tables.spec import table


def _row(time: int, end: int, source: str = KAFKA, stamp: str | None = LOG_APPEND_TIME,
         partition: int = 0, topic_id: str | None = "T") -> dict[str, Any]:
    return end_offset_row("orders", topic_id, partition, time, end, source, stamp)


def test_rows_say_which_are_exact() -> None:
    assert _row(1, 5)["exact"] and _row(1, 5, SERVE, None)["exact"]
    assert not _row(1, 5, SEGMENTS, CREATE_TIME)["exact"]
    assert not _row(1, 5, FILE, None)["exact"]
    assert list(_row(1, 5)) == table("topic_end_offsets").names
    with pytest.raises(ValueError, match="source"):
        _row(1, 5, "guess")


def test_an_exact_row_at_the_time_or_equal_rows_around_it_make_it_exact() -> None:
    line = Timeline([_row(100, 10), _row(200, 10), _row(300, 25)])
    assert line.at(100) == (10, 100, KAFKA, True, False)
    assert line.at(150) == (10, 100, KAFKA, True, False)  # nothing produced in between
    assert line.at(300).exact and line.at(300).end_offset == 25
    between = line.at(250)  # something was produced between 200 and 300: at least 10
    assert (between.end_offset, between.exact, between.lower_bound) == (10, False, True)
    assert line.at(400).lower_bound and line.at(400).end_offset == 25
    assert line.at(50) == (None, None, STATE, False, True)


def test_create_time_rows_give_the_producers_answer_neither_exact_nor_a_bound() -> None:
    line = Timeline([_row(100, 10, SEGMENTS, CREATE_TIME), _row(200, 30, SEGMENTS,
                                                                 CREATE_TIME)])
    assert line.at(100) == (10, 100, SEGMENTS, False, False)
    assert line.at(150).lower_bound and line.at(150).end_offset is None


def test_a_file_row_is_a_lower_bound_from_its_time_on() -> None:
    line = Timeline([_row(100, 10), _row(500, 40, FILE, None), _row(600, 35, FILE, None)])
    assert line.at(400) == (10, 100, KAFKA, False, True)
    assert line.at(700) == (40, 500, FILE, False, True)


def test_the_preferred_source_wins_a_tie() -> None:
    line = Timeline([_row(100, 11, SERVE, None), _row(100, 10, KAFKA)])
    assert line.at(100).source == KAFKA


def test_merge_keeps_earlier_runs_rows_and_replaces_the_same_observation() -> None:
    old = [_row(100, 10), _row(200, 12)]
    merged = merge_rows(old, [_row(200, 13), _row(300, 20)])
    assert [(r["time"], r["end_offset"]) for r in merged] == [(100, 10), (200, 13), (300, 20)]
    assert merge_rows(merged, [_row(200, 13), _row(300, 20)]) == merged


def test_replicas_observed_in_one_run_give_the_furthest_end_offset() -> None:
    """Two brokers' copies of a partition, one behind: the run keeps what the one ahead saw
    (the copy listed last won, whichever it was)."""
    for new in ([_row(200, 13), _row(200, 11)], [_row(200, 11), _row(200, 13)]):
        merged = merge_rows([_row(200, 9)], new)
        assert [(r["time"], r["end_offset"]) for r in merged] == [(200, 13)]


def test_sampling_is_bounded_and_nests() -> None:
    times = list(range(1_000, 1_000 + 50_000, 7))
    few = sampled(times, 100)
    assert 50 < len(few) <= 101 and set(few) <= set(times)
    assert few[0] == times[0] and few[-1] == times[-1]  # the latest time too
    assert sampled(times, 7_200) == times
    grown = sampled([*times, *range(51_000, 80_000, 13)], 100)
    assert {t for t in grown if t < 51_000} <= set(few)  # a longer history samples a subset
    assert sampled(times, 100) == few  # and a re-run the same
    # a few times close together are all sampled; the grid only coarsens past the bound
    assert sample_level([0, 1, 3, 10**12], 4) == 0 and sample_level([0, 1, 3, 10**12], 3) == 1
    assert sampled([5, 6, 7, 9_999], 1000) == [5, 6, 7, 9_999]


# -- lag history --------------------------------------------------------------------------


def _state(group: str, time: int, spso: int, *, partition: int = 0, offset: int = 0,
           complete: int = 0, end: int | None = None, deleted: bool = False) -> HistoryRow:
    return HistoryRow(group, "T", partition, 0, offset or time, time, deleted, spso, complete,
                      spso if end is None else end)


def _history(rows: list[HistoryRow], ends: Any, names: dict[str, str] | None = None
             ) -> list[dict[str, Any]]:
    return [row._asdict() for row in lag_history_rows(rows, ends, names)]


def test_history_rows_have_the_tables_columns() -> None:
    assert list(LagRow._fields) == table("share_group_lag_history").names


def test_lag_at_each_state_change_and_the_group_at_each_sample() -> None:
    ends = timelines([_row(100, 50), _row(200, 80), _row(300, 80, partition=1),
                      _row(400, 120)])
    history = [_state("g", 100, 40, complete=3), _state("g", 300, 60, partition=1,
                                                        end=70)]
    rows = _history(history, ends, {"T": "orders"})
    first = rows[0]
    assert (first["scope"], first["lag"], first["exact"], first["end_offset_source"],
            first["topic"]) == (SHARE_PARTITION, 50 - 40 - 3, True, KAFKA, "orders")
    groups = [(r["time"], r["lag"], r["exact"], r["partitions"]) for r in rows
              if r["scope"] == GROUP]
    # 200: partition 0's end moved (80 - 43); 300: partition 1 joins, exact (80 - 60), but
    # partition 0 is between 80 (200) and 120 (400): at least 80; 400: partition 0 exact
    # again (120 - 43), partition 1 past its only row: at least 80
    assert groups == [(100, 7, True, 1), (200, 37, True, 1), (300, 57, False, 2),
                      (400, 97, False, 2)]
    late = [r for r in rows if r["scope"] == GROUP][-1]
    assert late["lag_is_lower_bound"]


def test_without_end_offsets_the_state_gives_a_lower_bound() -> None:
    rows = _history([_state("g", 100, 40, end=45, complete=2)], {})
    assert [(r["scope"], r["lag"], r["end_offset_source"], r["exact"],
             r["lag_is_lower_bound"]) for r in rows] == [
        (SHARE_PARTITION, 3, STATE, False, True), (GROUP, 3, None, False, True)]


def test_a_higher_state_bound_beats_an_older_end_offset() -> None:
    ends = timelines([_row(100, 50), _row(300, 90)])
    rows = _history([_state("g", 200, 40, end=60)], ends)
    assert (rows[0]["end_offset"], rows[0]["end_offset_source"], rows[0]["lag"]) == \
        (60, STATE, 20)


def test_deleted_and_uninitialised_states_have_no_lag() -> None:
    ends = timelines([_row(t, 50) for t in (100, 200, 300)])
    history = [_state("g", 100, -1), _state("g", 200, 10), _state("g", 300, 10, deleted=True)]
    rows = _history(history, ends)
    own = [r["lag"] for r in rows if r["scope"] == SHARE_PARTITION]
    assert own == [None, 40, None]
    groups = [(r["time"], r["lag"], r["partitions"]) for r in rows if r["scope"] == GROUP]
    assert groups == [(100, None, 0), (200, 40, 1), (300, None, 0)]


def test_groups_are_kept_apart() -> None:
    ends = timelines([_row(100, 50), _row(200, 60)])
    history = [_state("a", 100, 10), _state("b", 200, 30)]
    rows = _history(history, ends)
    assert [(r["group_id"], r["scope"], r["time"], r["lag"]) for r in rows] == [
        ("a", SHARE_PARTITION, 100, 40), ("a", GROUP, 100, 40), ("a", GROUP, 200, 50),
        ("b", SHARE_PARTITION, 200, 30), ("b", GROUP, 200, 30)]


# -- segment files ------------------------------------------------------------------------


def _write_partition(root: Path, name: str, batches: list[tuple[int, int, int, str]],
                     topic_id: str | None = "AAAAAAAAAAAAAAAAAAAAAA",
                     mtime_ms: int | None = None) -> Path:
    """Batches of (first offset, records, timestamp, type) in one segment."""
    folder = root / name
    folder.mkdir(parents=True)
    data = b""
    for first, count, stamp, kind in batches:
        records = [RawRecord(first + i, stamp - (count - 1 - i) * (kind == CREATE_TIME), -1,
                             None, b"v", ()) for i in range(count)]
        data += build_batch(records, timestamp_type=kind, max_timestamp=stamp)
    segment = folder / f"{batches[0][0]:020d}.log"
    segment.write_bytes(data)
    if topic_id:
        (folder / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    if mtime_ms is not None:
        os.utime(segment, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return folder


def test_segment_files_give_the_first_offset_stamped_at_or_after_each_time(
        tmp_path: Path) -> None:
    _write_partition(tmp_path, "orders-0", [(0, 3, 1000, LOG_APPEND_TIME),
                                            (3, 2, 2000, LOG_APPEND_TIME),
                                            (5, 4, 2000, LOG_APPEND_TIME),
                                            (9, 1, 3500, LOG_APPEND_TIME)], mtime_ms=5000)
    (partition,) = data_partitions([tmp_path])
    assert (partition.topic, partition.partition, partition.topic_id) == \
        ("orders", 0, "AAAAAAAAAAAAAAAAAAAAAA")
    found = end_offsets_at(partition, [500, 1000, 1001, 2000, 3000, 4000, 6000])
    # 6000 is after the newest segment was last written: unknown
    assert found.points == [(500, 0), (1000, 0), (1001, 3), (2000, 3), (3000, 9),
                            (4000, 10)]
    assert found.timestamp_type == LOG_APPEND_TIME and found.unreadable == 0


def test_create_time_batches_answer_record_by_record(tmp_path: Path) -> None:
    _write_partition(tmp_path, "events-2", [(0, 5, 1004, CREATE_TIME)], mtime_ms=9000)
    (partition,) = data_partitions([tmp_path / "events-2"])
    found = end_offsets_at(partition, [1002])
    assert found.points == [(1002, 2)] and found.timestamp_type == CREATE_TIME


def test_times_before_the_retained_records_have_no_answer(tmp_path: Path) -> None:
    _write_partition(tmp_path, "orders-1", [(40, 5, 1000, LOG_APPEND_TIME),
                                            (45, 5, 2000, LOG_APPEND_TIME)], mtime_ms=3000)
    (partition,) = data_partitions([tmp_path])
    assert end_offsets_at(partition, [500, 1000, 1500]).points == [(1500, 45)]


def test_internal_topics_are_not_data_partitions(tmp_path: Path) -> None:
    _write_partition(tmp_path, "__share_group_state-0", [(0, 1, 1, LOG_APPEND_TIME)])
    _write_partition(tmp_path, "orders-0", [(0, 1, 1, LOG_APPEND_TIME)], topic_id=None)
    (partition,) = data_partitions([tmp_path])
    assert partition.topic == "orders" and partition.topic_id is None
    assert topic_id_of(tmp_path / "__share_group_state-0") == "AAAAAAAAAAAAAAAAAAAAAA"



@pytest.mark.timeout(30)
def test_kafkas_files_beside_the_segments_are_read_only_when_regular(tmp_path: Path) -> None:
    """A FIFO for `partition.metadata` or the root's `log-start-offset-checkpoint` waited
    for a writer for ever: each is passed over as unreadable."""
    folder = _write_partition(tmp_path, "orders-0", [(0, 1, 1, LOG_APPEND_TIME)],
                              topic_id=None)
    os.mkfifo(folder / "partition.metadata")
    os.mkfifo(tmp_path / "log-start-offset-checkpoint")
    (partition,) = data_partitions([tmp_path])
    assert partition.topic_id is None and partition.log_start_offset == 0

def test_a_root_read_for_its_end_offsets_is_not_said_unread(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --source ROOT --end-offsets-from ROOT`: ingest passes over the data topics'
    folders (a deleted topic's too), which the end offsets read; stderr says so only
    without the second, and always for an internal topic's folder set aside."""
    from sharestate.simulate import SimulationConfig, simulate
    from sharestate.spark.run import _check_files

    simulate(SimulationConfig(records=200, data_topics=True), tmp_path)
    aside = f"{'ab' * 16}-delete"
    shutil.copytree(tmp_path / "topic-0-0", tmp_path / f"topic-0-0.{aside}")
    _check_files([str(tmp_path)])
    said = capsys.readouterr().err
    assert "topic-0-1" in said and f"topic-0-0.{aside}" in said
    shutil.copytree(tmp_path / "__share_group_state-0", tmp_path / f"__share_group_state-0.{aside}")
    _check_files([str(tmp_path)], [str(tmp_path)])
    said = capsys.readouterr().err
    assert "topic-0" not in said and f"__share_group_state-0.{aside}" in said
    folders = {p.segments[0].path.parent.name for p in data_partitions([tmp_path])}
    assert f"topic-0-0.{aside}" in folders and "topic-0-0" in folders


def test_log_end_offsets_are_past_the_last_batch_or_at_the_newest_segments_base(
        tmp_path: Path) -> None:
    """The end offset ListOffsets LATEST answers for a stopped broker: past the newest
    segment's last batch; at a rolled empty segment's base; keyed by topic id, else by name
    (never a deleted topic's folder without an id, whose name a newer topic may have)."""
    _write_partition(tmp_path, "orders-0", [(0, 3, 1000, LOG_APPEND_TIME),
                                            (3, 4, 2000, LOG_APPEND_TIME)])
    rolled = _write_partition(tmp_path, "orders-1", [(0, 5, 1000, CREATE_TIME)])
    (rolled / f"{9:020d}.log").write_bytes(b"")
    _write_partition(tmp_path, "events-0", [(2, 2, 1000, CREATE_TIME)], topic_id=None)
    _write_partition(tmp_path, f"events-1.{'ab' * 16}-delete", [(0, 1, 1, CREATE_TIME)],
                     topic_id=None)
    _write_partition(tmp_path, "__share_group_state-0", [(0, 1, 1, LOG_APPEND_TIME)])
    ids = "AAAAAAAAAAAAAAAAAAAAAA"
    assert log_end_offsets([tmp_path, tmp_path / "missing", tmp_path / "events-0"]) == {
        (ids, 0): 7, (ids, 1): 9, ("events", 0): 4}
    # a follower's copy behind the leader's, read before or after it: the leader's end
    _write_partition(tmp_path / "follower", "orders-0", [(0, 3, 1000, LOG_APPEND_TIME)])
    for roots in ([tmp_path, tmp_path / "follower"], [tmp_path / "follower", tmp_path]):
        assert log_end_offsets(roots)[(ids, 0)] == 7


def test_a_log_dirs_run_takes_the_lag_from_its_data_topics_unless_told_otherwise(
        tmp_path: Path) -> None:
    """`run --source LOG.DIRS`: the lag's end offsets are the data topics' log end offsets
    (the simulator's own end offsets), not the state's lower bound; an --end-offsets file,
    a kafka:// source or an --as-of point (the log end is now's) leave them alone."""
    from sharestate.analytics.lag import FILE, SEGMENTS
    from sharestate.arguments import read_end_offsets
    from sharestate.simulate import SimulationConfig, simulate
    from sharestate.spark.run import _analytics_inputs, parser

    simulate(SimulationConfig(records=200, data_topics=True), tmp_path / "logs")
    ends = tmp_path / "logs" / "end-offsets.json"
    truth = read_end_offsets(str(ends))

    def inputs(*extra: str) -> tuple[dict[tuple[str, int], int] | None, str]:
        args = parser().parse_args(["--source", str(tmp_path / "logs"), "--warehouse",
                                    str(tmp_path / "warehouse"), *extra])
        found = _analytics_inputs(args, ["analytics"], {})
        return found.end_offsets, found.end_offset_source

    assert inputs() == (truth, SEGMENTS)
    assert inputs("--end-offsets", str(ends)) == (truth, FILE)
    assert inputs("--as-of-offset", "5") == (None, FILE)


# -- going on from where a run left the walk (lag_state) -----------------------------------


def _random_history(rng: random.Random) -> list[HistoryRow]:
    """Groups of share-partitions (two topics, three state partitions) whose state records
    come at random times, some in the same millisecond, some stamped before an earlier
    record of their partition (a clock stepping back), tombstones and SPSO -1 among them."""
    rows = []
    for group in ("a", "b", "c"):
        for topic, partition in (("T", 0), ("T", 1), ("U", 0)):
            if rng.random() < 0.2:
                continue
            spso, offset = rng.randrange(-1, 5), 0
            for _ in range(rng.randrange(1, 12)):
                spso += rng.randrange(0, 30)
                offset += rng.randrange(1, 4)
                time = rng.randrange(0, 1_000)
                rows.append(HistoryRow(group, topic, partition, rng.randrange(3), offset, time,
                                       rng.random() < 0.05, spso, rng.randrange(0, 5),
                                       spso + rng.randrange(0, 20)))
    return sorted(rows, key=lambda r: (r.group_id, r.time, r.state_partition, r.record_offset))


def _random_ends(rng: random.Random) -> list[dict[str, Any]]:
    rows, end = [], 0
    for topic, partition in (("T", 0), ("T", 1), ("U", 0)):
        for time in sorted(rng.sample(range(0, 1_100), rng.randrange(0, 8))):
            end += rng.randrange(0, 3) * rng.randrange(0, 40)
            source, stamp = rng.choice([(KAFKA, LOG_APPEND_TIME), (SEGMENTS, CREATE_TIME),
                                        (FILE, None), (SERVE, None)])
            rows.append(end_offset_row("t", topic, partition, time, end, source, stamp))
    return rows


def test_a_walk_gone_on_from_its_state_gives_the_rows_of_one_walk() -> None:
    """Run 1 walks the rows stamped before its end, keeps those before its horizon and saves
    each group's walk there; run 2 goes on from the saved walks over every row at or after
    the horizon, with end offsets that changed only where `ends_allow` says no kept row
    looked. Together they give what one walk over every row gives, row for row."""
    compared = 0
    for seed in range(300):
        rng = random.Random(seed)
        history, ends = _random_history(rng), _random_ends(rng)
        end = rng.randrange(100, 1_000)
        horizon = rng.randrange(50, end + 1)
        ends_before = [r for r in ends if r["time"] < end or rng.random() < 0.3]
        if not ends_allow(ends_before, ends, horizon - 1, {}):
            continue
        compared += 1
        one = sorted(map(repr, lag_history_rows(history, timelines(ends))))
        first = list(walk_groups([r for r in history if r.time < end],
                                 timelines(ends_before), {}, horizon))
        kept = [r for r in first if isinstance(r, LagRow) and r.time < horizon]
        saved = [group_state(state_row(s, {}, "run", 0)) for s in first
                 if isinstance(s, GroupState)]
        resumed = sorted([*saved, *(r for r in history if r.time >= horizon)],
                         key=lambda r: (r.group_id, isinstance(r, HistoryRow),
                                        getattr(r, "time", 0), getattr(r, "state_partition", 0),
                                        getattr(r, "record_offset", 0)))
        second = [r for r in walk_groups(resumed, timelines(ends)) if isinstance(r, LagRow)]
        assert sorted(map(repr, [*kept, *second])) == one, seed
    assert compared > 100


def test_end_offsets_that_change_where_a_kept_row_looked_stop_the_walk_going_on() -> None:
    old = [_row(100, 10), _row(300, 30)]
    assert ends_allow(old, old, 200, {})
    assert ends_allow(old, [*old, _row(400, 30)], 200, {})  # after the last, which is later
    assert not ends_allow(old, [*old, _row(250, 10)], 200, {})  # before the horizon
    assert not ends_allow([_row(100, 10)], [_row(100, 10), _row(400, 10)], 200, {})
    # (an equal end offset at 400 makes 100..400 exact: rows at 101..200 change)
    assert not ends_allow(old, [_row(100, 11), _row(300, 30)], 200, {})


def test_lag_inputs_count_the_state_where_its_batches_are() -> None:
    """`complete`: Kafka's count when known, else the acknowledged (2) and archived (4)
    records at or above the SPSO (a batch straddling it clipped); `state_end`: the offset
    after the last batch at or above the SPSO, at least the SPSO. Batches below the SPSO or
    with last < first count for neither; rows with no time are left out."""
    batches = [(5, 8, 2, 1), (8, 12, 2, 1), (13, 15, 4, 2), (16, 17, 1, 1), (30, 29, 2, 1)]
    rows = [  # (time, SPSO, Kafka's count, batches) -> (complete, state_end)
        (1, 10, -1, batches), (2, 10, 7, batches), (3, None, -1, [(1, 2, 2, 1)]),
        (4, 5, None, None), (None, 10, -1, batches), (5, -1, -1, [(0, 3, 2, 1)]),
        (6, 40, -1, batches)]
    history = pa.Table.from_pylist([
        {"group_id": "g", "topic_id": "T", "partition": 0, "state_partition": 0,
         "record_offset": i, "timestamp": t, "deleted": b is None, "start_offset": spso,
         "delivery_complete_count": dcc,
         "state_batches": None if b is None else [dict(zip(
             ("first_offset", "last_offset", "delivery_state", "delivery_count"), x,
             strict=True)) for x in b]}
        for i, (t, spso, dcc, b) in enumerate(rows)],
        schema=table("share_partition_state_history").arrow_schema()).select(
        list(HISTORY_COLUMNS)).to_batches()[0]
    found = lag_inputs(history).to_pylist()
    assert [(r["time"], r["complete"], r["state_end"]) for r in found] == [
        (1, 3 + 3, 18), (2, 7, 18), (3, 0, None), (4, None, 5), (5, 4, 4), (6, 0, 40)]
    assert [r["record_offset"] for r in found] == [0, 1, 2, 3, 5, 6]


def test_lag_inputs_at_int64s_ends_are_what_share_lag_counts() -> None:
    """A batch ending at 2^63 - 1 made the offset after it, and counts of its records, wrap
    in numpy (state_end 0 and complete -2^63 for [0, 2^63 - 1] acknowledged; the pure walk's
    lag of that failed the run): the inputs are `share_lag`'s end offset and terminal count
    (batches clipped as `in_flight` clips them, counts stopping at 2^63 - 1)."""
    top = (1 << 63) - 1
    states = [(0, [(5, top, 0, 1)]), (0, [(0, top, 2, 1)]), (-top - 1, [(0, top, 2, 1)]),
              (top, [(-top - 1, top, 4, 1)]), (0, [(0, top, 2, 1), (0, top, 4, 3), (3, 4, 2, 1)]),
              (top - 1, [(top - 1, top, 0, 1)]), (-1, [(-top - 1, 9, 2, 2), (0, top, 4, 3)])]
    history = pa.Table.from_pylist([
        {"group_id": "g", "topic_id": "T", "partition": i, "state_partition": 0,
         "record_offset": i, "timestamp": 1, "deleted": False, "start_offset": spso,
         "delivery_complete_count": -1, "state_batches": [dict(zip(
             ("first_offset", "last_offset", "delivery_state", "delivery_count"), x,
             strict=True)) for x in batches]}
        for i, (spso, batches) in enumerate(states)],
        schema=table("share_partition_state_history").arrow_schema()).select(
        list(HISTORY_COLUMNS)).to_batches()[0]
    found = [(r["complete"], r["state_end"]) for r in lag_inputs(history).to_pylist()]
    expected = []
    for spso, batches in states:
        lag = share_lag(SharePartitionState(0, 0, 0, spso, -1, None, None, tuple(
            StateBatch(*b) for b in batches)))
        expected.append((lag.terminal_in_state, lag.end_offset))
    assert found == expected
    assert found[1] == (top, top)


def test_a_group_lag_outside_int64_is_unknown() -> None:
    """Two share-partitions lagging 2^63 - 1 each (damaged states): their sum is no int64,
    and the pure walk's rows failed to fit the table (the run exited 70)."""
    top = (1 << 63) - 1
    rows = [HistoryRow("g", "T", p, 0, p, 10 + p, False, 0, 0, top) for p in (0, 1)]
    lags = [(r.scope, r.lag) for r in lag_history_rows(rows, {})]
    assert lags == [(SHARE_PARTITION, top), (GROUP, top), (SHARE_PARTITION, top), (GROUP, None)]
