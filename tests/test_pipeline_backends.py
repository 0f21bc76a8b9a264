"""The pipeline on both Delta backends: `jvm` (Spark's own Delta, from the pinned jars) writes
the tables `rs` writes, Kafka's states among them, and a warehouse started by one backend is
continued by the other (an incremental ingest, a re-run) as if one backend had done it all.

The `rs` runs use the session's Spark (`sharestate.spark.run.main`, the backend it picks
without Delta's classes); the `jvm` runs are one process of their own, which runs the same
`main` once per run: a JVM for the `jvm` backend starts with Delta's jars, which the JVM
already running in this process lacks.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir, under_ci
from one_process import call_in_one_process
from test_pipeline import OFFSET_FILES, SHARE_FILES, _kafka_partition, layout

from sharestate.app.cli import main as cli_main
from sharestate.jars import delta_jars
from sharestate.lake import find_tables, open_lake
from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.slow

VOLATILE = {"ingest_run", "run_id", "finished_at", "started_at", "seconds", "committed_at"}
"""Columns that name or time a run: different in every run, whichever backend writes."""


@pytest.fixture(scope="module")
def spark(spark: Any) -> Any:
    """The session, where Delta's pinned jars are cached (the runs' jvm backend needs them)."""
    if not delta_jars().present:
        message = "Delta's pinned jars are not in the jar cache: run `make jars`"
        if under_ci():
            pytest.fail(message)
        pytest.skip(message)
    return spark


def _argv(source: Path, warehouse: Path) -> list[str]:
    return ["--source", str(source), "--warehouse", str(warehouse),
            "--snapshot-update-records", "5"]


def run_rs(spark: Any, source: Path, warehouse: Path) -> None:
    """A run on the session's Spark, which has no Delta classes: the `rs` backend."""
    assert open_lake(spark).backend == "rs"
    assert run_all(_argv(source, warehouse)) in (0, 1)


def run_jvm(*runs: tuple[Path, Path]) -> None:
    """`(source, warehouse)` runs on the `jvm` backend, in order, in one process."""
    calls = call_in_one_process("sharestate.spark.run", [
        [*_argv(source, warehouse), "--backend", "jvm", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.ui.showConsoleProgress=false"] for source, warehouse in runs])
    assert all(status in (0, 1) for status in calls.statuses), calls.stderr[-3000:]
    assert calls.stdout.count("tables in ") == len(runs), calls.stdout[-3000:]


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The first day's log, and the same log a day later with one more partition; the
    share coordinator pruned share_replay_small's partition before each day's copy (its
    checkpointed log start at half its prune point, then at it)."""
    first = tmp_path_factory.mktemp("first")
    layout(first, "kafka-4.4-dev", SHARE_FILES[:-1], "__share_group_state")
    layout(first, "kafka-4.4-dev", OFFSET_FILES, "__consumer_offsets")
    later = tmp_path_factory.mktemp("later")
    shutil.copytree(first, later, dirs_exist_ok=True)
    point = json.loads((conformance_dir("kafka-4.4-dev") / "share_replay_small.final_state.json")
                       .read_text("utf-8"))["lastRedundantOffset"]
    for root, start in ((first, point // 2), (later, point)):
        (root / "log-start-offset-checkpoint").write_text(
            f"0\n1\n__share_group_state {SHARE_FILES.index('share_replay_small')} {start}\n")
    extra = later / f"__share_group_state-{len(SHARE_FILES) - 1}"
    extra.mkdir()
    shutil.copy(conformance_dir("kafka-4.4-dev") / f"{SHARE_FILES[-1]}.log",
                extra / "00000000000000000000.log")
    return first, later


@pytest.fixture(scope="module")
def warehouses(spark: Any, sources: tuple[Path, Path],
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`rs` alone (`rs_first`: after the first day), `jvm` alone (the first day), and each
    continued by the other a day later."""
    first, later = sources
    made = {name: tmp_path_factory.mktemp(name) / "wh"
            for name in ("rs", "rs_first", "jvm", "rs_then_jvm", "jvm_then_rs")}
    run_rs(spark, first, made["rs"])
    shutil.copytree(made["rs"], made["rs_first"])
    shutil.copytree(made["rs"], made["rs_then_jvm"])
    run_jvm((first, made["jvm"]), (later, made["rs_then_jvm"]))
    shutil.copytree(made["jvm"], made["jvm_then_rs"])
    run_rs(spark, later, made["jvm_then_rs"])
    run_rs(spark, later, made["rs"])  # the reference for the continued warehouses
    return made


def snapshot(spark: Any, warehouse: Path) -> dict[str, Any]:
    """Every table's rows (run-naming columns left out), schema, partitioning, properties."""
    lake = open_lake(spark, "rs")
    tables = {}
    for name, path in sorted(find_tables(warehouse).items()):
        frame = lake.read(path)
        rows = sorted(json.dumps({k: v for k, v in r.asDict(recursive=True).items()
                                  if k not in VOLATILE}, sort_keys=True, default=str)
                      for r in frame.collect())
        properties = {k: v for k, v in lake.properties(path).items()
                      if not k.startswith("delta.")}
        tables[name] = {"rows": rows, "schema": frame.schema.jsonValue(),
                        "partition_by": lake.partition_columns(path),
                        "properties": properties}
    return tables


def test_jvm_tables_equal_rs_tables(spark: Any, warehouses: dict[str, Path]) -> None:
    jvm, rs = snapshot(spark, warehouses["jvm"]), snapshot(spark, warehouses["rs_first"])
    assert sorted(jvm) == sorted(rs) and len(rs) >= 12
    for name in rs:
        assert jvm[name] == rs[name], name


def test_jvm_share_partition_state_is_kafkas(spark: Any, warehouses: dict[str, Path]) -> None:
    """What the jvm backend wrote equals what Kafka's share coordinator holds at the end of
    each log."""
    fixtures = conformance_dir("kafka-4.4-dev")
    lake = open_lake(spark, "rs")
    for partition, name in enumerate(SHARE_FILES):
        if name == "share_replay_small":  # its workload config is 5 updates per snapshot
            final = json.loads((fixtures / f"{name}.final_state.json").read_text("utf-8"))
        else:
            final = json.loads((fixtures / f"{name}.final_state.jsonl").read_text("utf-8")
                               .splitlines()[0])
        ours = {(r["group_id"], r["topic_id"], r["partition"]): r.asDict(recursive=True)
                for r in lake.read(str(warehouses["rs_then_jvm"] / "share_partition_state"))
                .where(f"state_partition = {partition}").collect()}
        want = {(p["groupId"], p["topicId"], p["partition"]): _kafka_partition(p)
                for p in final["partitions"] if p["state"] is not None}
        assert set(ours) == set(want), name
        for key, expected in want.items():
            assert {k: ours[key][k] for k in expected} == expected, (name, key)


def test_a_warehouse_continued_by_the_other_backend(spark: Any,
                                                    warehouses: dict[str, Path]) -> None:
    """... and the partition whose log start moved between the days went on from its state
    to Kafka's figures: the start the later copy checkpoints, nothing below it reclaimable."""
    reference = snapshot(spark, warehouses["rs"])
    final = json.loads((conformance_dir("kafka-4.4-dev") / "share_replay_small.final_state.json")
                       .read_text("utf-8"))
    [pruned] = open_lake(spark, "rs").read(str(warehouses["rs"] / "prune_recommendations")).where(
        f"state_partition = {SHARE_FILES.index('share_replay_small')}").collect()
    assert (pruned["log_start_offset"], pruned["reclaimable_records"]) == (
        final["lastRedundantOffset"], 0)
    assert snapshot(spark, warehouses["rs_then_jvm"]) == reference
    assert snapshot(spark, warehouses["jvm_then_rs"]) == reference


def _last_commit_ms(spark: Any, warehouse: Path) -> int:
    lake = open_lake(spark, "rs")
    return max(c.timestamp_ms for path in find_tables(warehouse).values()
               for c in lake.history(str(path)))


QUERY = "SELECT group_id, topic_id, partition, start_offset FROM share_partition_state"


def _rows(path: Path) -> list[str]:
    return sorted(json.dumps(json.loads(line), sort_keys=True)
                  for line in path.read_text("utf-8").splitlines())


def test_sql_as_of_time_reads_the_warehouse_as_it_was(spark: Any, warehouses: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """A warehouse continued a day later, queried as of the end of its first day, answers
    what the first day's warehouse answers — on the backend that wrote neither half too.
    `sharestate sql` on the session's Spark for `rs`, in a process of its own for `jvm`."""
    lake = open_lake(spark, "rs")
    for first, continued, backend in (("jvm", "jvm_then_rs", "jvm"),
                                      ("rs_first", "rs_then_jvm", "rs")):
        then = _last_commit_ms(spark, warehouses[first])
        assert then < _last_commit_ms(spark, warehouses[continued])
        expected = sorted(json.dumps(r.asDict(), sort_keys=True) for r in lake.read(
            str(warehouses[first] / "share_partition_state")).select(
            "group_id", "topic_id", "partition", "start_offset").collect())
        past, now = tmp_path / f"{continued}-then.jsonl", tmp_path / f"{continued}-now.jsonl"
        argv = ["sql", "--warehouse", str(warehouses[continued]), "--backend", backend,
                "--format", "jsonl"]
        queries = [[*argv, "--output", str(past), "--as-of-time", str(then), QUERY],
                   [*argv, "--output", str(now), QUERY]]
        if backend == "jvm":
            calls = call_in_one_process("sharestate.app.cli", queries)
            assert calls.statuses == [0, 0], calls.stderr[-2000:]
        else:
            assert [cli_main(query) for query in queries] == [0, 0]
        assert _rows(past) == expected, (continued, backend)
        assert len(_rows(now)) > len(expected)  # the second day added a partition
