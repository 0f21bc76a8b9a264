"""Incremental replay tasks: a `__share_group_state` partition replayed day by day, each run
going on from the `replay_state` row the previous one made and reading only the bronze rows
above it (older segments removed from bronze's reading, as Kafka deletes them), appends the
history and findings and replaces the state tables with exactly what one run over all the
days gives — on Kafka's fixture logs, a simulated one, and a log of more findings than the
replay lists (their count goes on from one day to the next). (The Spark job and the
pipeline: tests/test_pipeline_incremental.py.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import damage
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import conformance_dir

from sharestate.log import SegmentWriter, discover
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.simulate import SimulationConfig, simulate
from sharestate.tables.bronze import Split, read_split
from sharestate.tables.gold_pass import GoldOptions
from sharestate.tables.replay_state import finding_limit, resumable
from sharestate.tables.spec import table
from sharestate.tables.tasks import REPLAY_TASKS, replay_partitions

APPENDED = ("share_partition_state_history", "audit_findings")
"""The tables a run appends to; it replaces the others (and its partition's
`omitted_findings` rows: the findings counted past those listed)."""
DAYS = 4


def _records(paths: list[Path]) -> pa.Table:
    rows = pa.Table.from_batches([staged.rows for segment in discover([str(p) for p in paths])
                                  for staged in read_split(Split(segment), "test")])
    return rows.filter(pc.equal(rows["row_kind"], "record")).select(table("log_records").names)


def _run(files: list[dict[str, Any]], state: dict[str, Any] | None, options: GoldOptions
         ) -> dict[str, list[dict[str, Any]]]:
    task = {"topic": SHARE_STATE_TOPIC, "partition": 0, "files": files,
            "state": None if state is None else state["state"],
            "above": None if state is None else state["last_applied_offset"]}
    out: dict[str, list[dict[str, Any]]] = {}
    batch = pa.RecordBatch.from_pylist([task], schema=REPLAY_TASKS)
    for name, rows in replay_partitions(iter([batch]), options):
        out.setdefault(name, []).extend(rows.to_pylist())
    return out


def _comparable(tables: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    skip = {"run_id", "committed_at", "state"}  # the state's bytes: compared by its answers
    return {name: sorted(repr(sorted((k, v) for k, v in row.items() if k not in skip))
                         for row in rows) for name, rows in tables.items()}


def _days(tmp_path: Path, rows: pa.Table) -> list[dict[str, Any]]:
    """`rows` as (up to) DAYS segments of about equal size (whole batches), Kafka-named."""
    starts = pc.unique(rows["batch_base_offset"]).to_pylist()
    days = min(DAYS, len(starts))
    bounds = [starts[len(starts) * day // days] for day in range(days)]
    files = []
    for day, low in enumerate(bounds):
        high = bounds[day + 1] if day + 1 < days else 1 << 62
        part = rows.filter(pc.and_(pc.greater_equal(rows["batch_base_offset"], low),
                                   pc.less(rows["batch_base_offset"], high)))
        path = tmp_path / f"{low:020d}.parquet"
        # as Delta writes a data file: the partition columns are in its folder's name only
        pq.write_table(part.drop_columns(["topic", "partition", "segment"]), path)
        files.append({"uri": str(path), "segment": low,
                      "first_offset": pc.min(part["offset"]).as_py(),
                      "last_offset": pc.max(part["offset"]).as_py(), "read_at": day})
    return files


def _check(tmp_path: Path, rows: pa.Table, max_findings: int = 1000) -> None:
    options = GoldOptions(run_id="run", started_at=1, max_findings=max_findings)
    files = _days(tmp_path, rows)
    whole = _run(files, None, options)
    assert whole["share_partition_state_history"] and whole["replay_state"]
    tables: dict[str, list[dict[str, Any]]] = {}
    state = None
    for day in range(len(files)):
        # from the third day on, the oldest segments are gone from the source: a run
        # reads none of them (all below the state)
        present = files[max(0, day - 2):day + 1]
        out = _run(present, state, options)
        for name in set(tables) | set(out):
            kept = [row for row in tables.get(name, []) if row.get("rule") != "omitted_findings"]
            tables[name] = [*kept, *out.get(name, [])] if name in APPENDED else out.get(name, [])
        (state,) = out["replay_state"]
    assert _comparable(tables) == _comparable(whole)


@pytest.mark.parametrize("path", sorted(conformance_dir().glob("kafka-*/share_*.log")),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_day_by_day_equals_one_run_on_kafkas_logs(tmp_path: Path, path: Path) -> None:
    _check(tmp_path, _records([path]))


def test_day_by_day_equals_one_run_on_a_simulated_log(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    simulate(SimulationConfig(records=5000, seed=2, state_partitions=1, snapshot_limit=20,
                              poison_rate=0.02), logs)
    _check(tmp_path, _records(sorted((logs / f"{SHARE_STATE_TOPIC}-0").glob("*.log"))))


@pytest.mark.parametrize("max_findings", [15, 150])
def test_day_by_day_counts_findings_past_the_cap_as_one_run(tmp_path: Path,
                                                           max_findings: int) -> None:
    """400 ShareUpdate-key tombstones, each a finding of the replay, 100 a day: the first
    `max_findings` of the partition listed (on the first day, or over two) and the rest
    counted on from day to day, one omitted_findings row in the end as in one run."""
    with SegmentWriter(tmp_path / "log", SHARE_STATE_TOPIC, 0) as writer:
        for base in range(0, 400, 10):
            writer.append(damage.update_tombstone_batch(base, 10))
    rows = _records(writer.paths)
    _check(tmp_path, rows, max_findings)
    whole = _run(_days(tmp_path, rows), None, GoldOptions(max_findings=max_findings))
    assert Counter(row["rule"] for row in whole["audit_findings"]) == {
        "update_tombstone": max_findings, "omitted_findings": 1}


def test_a_state_goes_on_only_under_the_cap_it_was_made_with(tmp_path: Path) -> None:
    """A `replay_state` row lists findings under its `--max-findings`: a run with another
    replays the partition from its log start (its findings would differ from one run's)."""
    with SegmentWriter(tmp_path / "log", SHARE_STATE_TOPIC, 0) as writer:
        writer.append(damage.update_tombstone_batch(0, 10))
    (state,) = _run(_days(tmp_path, _records(writer.paths)), None,
                    GoldOptions(max_findings=5))["replay_state"]
    assert finding_limit(state["state"]) == 5
    assert resumable(state, GoldOptions(max_findings=5))
    assert not resumable(state, GoldOptions(max_findings=6))
    assert finding_limit(state["state"][:len(state["state"]) // 2]) is None  # damaged
