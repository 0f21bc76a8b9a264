"""The replay job's input: each internal-topic partition's bronze files in offset order, not
segment order, each offset once. A segment Kafka's log cleaner rewrote (`...000.log` holding
what `...117.log` held, that segment deleted) repeats offsets bronze holds from the segments
it merged; replayed in segment order, the older copies came after the merged ones and put
committed offsets back. Applied in offset order the fullest log (compaction's removals
included) gives the answers of the log as it was written.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import conformance_dir

from sharestate.log import discover
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.tables.bronze import Split, read_split
from sharestate.tables.gold_pass import GoldOptions, merge_by_offset
from sharestate.tables.spec import table
from sharestate.tables.tasks import REPLAY_TASKS, replay_partitions


def _records(path: Path) -> pa.Table:
    """A fixture segment's bronze `log_records` rows."""
    (segment,) = discover([path])
    rows = pa.Table.from_batches([staged.rows for staged in read_split(Split(segment), "test")])
    return rows.filter(pc.equal(rows["row_kind"], "record")).select(table("log_records").names)


def _file(tmp_path: Path, name: str, rows: pa.Table, segment: int, read_at: int
          ) -> dict[str, Any]:
    # as Delta writes a data file: the partition columns are in its folder's name only
    pq.write_table(rows.drop_columns(["topic", "partition", "segment"]),
                   tmp_path / f"{name}.parquet")
    offsets = rows["offset"]
    return {"uri": str(tmp_path / f"{name}.parquet"), "segment": segment,
            "first_offset": pc.min(offsets).as_py(),
            "last_offset": pc.max(offsets).as_py(), "read_at": read_at}


def _replayed(topic: str, files: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    task = pa.RecordBatch.from_pylist([{"topic": topic, "partition": 0, "files": files}],
                                      schema=REPLAY_TASKS)
    out: dict[str, list[dict[str, Any]]] = {}
    for name, rows in replay_partitions(iter([task]), GoldOptions()):
        out.setdefault(name, []).extend(rows.to_pylist())
    return out


def _compacted(rows: pa.Table) -> pa.Table:
    """What Kafka's log cleaner leaves of `rows` (no transactions among them): the latest
    record of each key (same bytes, same offset)."""
    latest = {key: index for index, key in enumerate(rows["key"].to_pylist())}
    return rows.take(sorted(latest.values()))


def _current(replayed: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The committed offsets at the end (and the other state tables)."""
    return [*(row for row in replayed["consumer_group_offsets"] if row["is_current"]),
            *replayed["share_group_partitions"]]


def test_a_cleaned_segment_and_the_ones_it_merged_replay_in_offset_order(
        tmp_path: Path) -> None:
    rows = _records(conformance_dir("kafka-4.4-dev") / "consumer_offsets_records.log")
    assert not any(rows["is_transactional"].to_pylist())
    cut, end = (rows["offset"][rows.num_rows * i // 3].as_py() for i in (1, 2))
    # ...<cut>.log read while it was the active segment (up to `end`), still in bronze
    stale = rows.filter(pc.and_(pc.greater_equal(rows["offset"], cut),
                                pc.less(rows["offset"], end)))
    written = _replayed(CONSUMER_OFFSETS_TOPIC, [_file(tmp_path, "written", rows, 0, 1)])
    assert written["consumer_group_offsets"]
    # then it grew, and the cleaner merged it into ...000.log: bronze holds the cleaned
    # segment (read later) and the stale rows of the one Kafka deleted
    cleaned = _compacted(rows)
    assert cleaned.num_rows < rows.num_rows
    merged = [_file(tmp_path, "cleaned", cleaned, 0, 2),
              _file(tmp_path, "stale", stale, cut, 1)]
    replayed = _replayed(CONSUMER_OFFSETS_TOPIC, merged)
    assert _current(replayed) == _current(written)
    # the same as the log those files hold, merged by offset, in one file, in any order
    union = merge_by_offset([cleaned, stale], [2, 1])
    assert _replayed(CONSUMER_OFFSETS_TOPIC, [_file(tmp_path, "union", union, 0, 1)]) == \
        replayed == _replayed(CONSUMER_OFFSETS_TOPIC, merged[::-1])


@pytest.mark.parametrize("name", ["consumer_offsets_records", "consumer_offsets_txn"])
def test_a_segment_read_again_with_the_rows_of_another_is_one_record_an_offset(
        tmp_path: Path, name: str) -> None:
    rows = _records(conformance_dir("kafka-4.4-dev") / f"{name}.log")
    cut = rows["offset"][rows.num_rows // 2].as_py()
    tail = rows.filter(pc.greater_equal(rows["offset"], cut))
    expected = _replayed(CONSUMER_OFFSETS_TOPIC, [_file(tmp_path, "written", rows, 0, 1)])
    both = [_file(tmp_path, "whole", rows, 0, 2), _file(tmp_path, "again", tail, cut, 1)]
    assert _replayed(CONSUMER_OFFSETS_TOPIC, both) == expected
    assert _replayed(CONSUMER_OFFSETS_TOPIC, both[::-1]) == expected


def test_a_segment_overlapping_another_is_one_record_an_offset(tmp_path: Path) -> None:
    """A share-state partition whose two bronze segments overlap (a segment read again after
    it grew, its earlier rows kept under another base): each offset applies once."""
    rows = _records(conformance_dir("kafka-4.4-dev") / "share_replay_small.log")
    expected = _replayed(SHARE_STATE_TOPIC, [_file(tmp_path, "all", rows, 0, 1)])
    part = rows.slice(0, rows.num_rows // 2)
    doubled = [_file(tmp_path, "grown", rows, 0, 2), _file(tmp_path, "early", part, 7, 1)]
    assert _replayed(SHARE_STATE_TOPIC, doubled) == expected
    history = expected["share_partition_state_history"]
    assert len(history) == len({row["record_offset"] for row in history}) > 0


@pytest.mark.parametrize("enabled", [True, False])
def test_a_replay_task_pauses_the_collector_and_gives_it_back(tmp_path: Path,
                                                              enabled: bool) -> None:
    """The cyclic collector is off while a task works (a replay keeps every record's state
    until its history rows are built, and each young collection visited all of it) and as
    it was when the task ends, or is abandoned: a Python worker runs other tasks after."""
    rows = _records(conformance_dir("kafka-4.4-dev") / "share_replay_small.log")
    task = pa.RecordBatch.from_pylist(
        [{"topic": SHARE_STATE_TOPIC, "partition": 0,
          "files": [_file(tmp_path, "all", rows, 0, 1)]}], schema=REPLAY_TASKS)
    (gc.enable if enabled else gc.disable)()
    try:
        during = [gc.isenabled() for _ in replay_partitions(iter([task]), GoldOptions())]
        assert during and not any(during)
        assert gc.isenabled() == enabled
        abandoned = replay_partitions(iter([task]), GoldOptions())
        next(abandoned)
        assert not gc.isenabled()
        abandoned.close()
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
