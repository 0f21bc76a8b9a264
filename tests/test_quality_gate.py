"""The quality gate on real tables: a simulated warehouse passes; broken copies fail, each
with the expectation of its family named.

One small simulated cluster goes through the whole pipeline (the gate included) once per
module; each broken-table test copies the tables it needs into a fresh warehouse, breaks
one thing with the lake API and runs only the suites of that table.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sharestate.app.cli import main as cli
from sharestate.lake import open_lake
from sharestate.quality import GateResult, QualityConfig, load_config, run_gate
from sharestate.quality.config import load_acknowledgements
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.quality_job import DOCS
from sharestate.spark.quality_job import main as quality_main
from sharestate.spark.run import JOBS, QUALITY, parser, run

pytestmark = pytest.mark.slow

STATE, HISTORY = "share_partition_state", "share_partition_state_history"
BATCH = "struct<first_offset:bigint,last_offset:bigint,delivery_state:int,delivery_count:int>"


@pytest.fixture(scope="module")
def good(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean simulated warehouse, run through every job and the gate."""
    logs = tmp_path_factory.mktemp("logs")
    simulate(SimulationConfig(records=3000, seed=11, groups=2, topics=2, partitions=2,
                              state_partitions=2, offsets_partitions=1, batch_records=8,
                              cold_interval_ms=60_000), logs)
    warehouse = tmp_path_factory.mktemp("warehouse")
    args = parser().parse_args(["--source", str(logs), "--warehouse", str(warehouse),
                                "--delivery-limit", "5"])
    assert run(args, (*JOBS, QUALITY)) in (0, 1)
    return warehouse


def copy(good: Path, tmp_path: Path, *tables: str) -> Path:
    for name in tables:
        shutil.copytree(good / name, tmp_path / name)
    return tmp_path


def gate(spark: Any, warehouse: Path, table: str, config: QualityConfig | None = None
         ) -> GateResult:
    return run_gate(spark, warehouse, config or load_config(), run_id="t", tables=[table])


def failures(result: GateResult, level: str = "warning") -> set[str]:
    return {r.qualified_name for r in result.failed(level)}  # type: ignore[arg-type]


def rewrite(spark: Any, path: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Replace the table's rows with `change`d ones (a whole-table overwrite)."""
    lake = open_lake(spark)
    df = lake.read(path)
    rows = [r.asDict(recursive=True) for r in df.collect()]
    change(rows)
    lake.overwrite(spark.createDataFrame(rows, df.schema), path, partitions=[{}])


def with_batches(rows: list[dict[str, Any]], *batches: tuple[int, int, int, int]) -> None:
    """Give the first live row the batches `batches`."""
    row = next(r for r in rows if r["state_batches"] is not None)
    row["state_batches"] = [{"first_offset": f, "last_offset": last, "delivery_state": s,
                             "delivery_count": c} for f, last, s, c in batches]


# -- the good warehouse ------------------------------------------------------------------


def test_simulated_warehouse_passes(spark: Any, good: Path) -> None:
    lake = open_lake(spark)
    results = [r.asDict() for r in lake.read(good / "quality_results").collect()]
    assert len(results) >= 19 and all(r["success"] for r in results), \
        [r["check"] for r in results if not r["success"]]
    assert {r["table"] for r in results} >= {STATE, HISTORY, "share_group_lag",
                                            "audit_findings", "decode_errors"}
    assert all(r["rows"] is not None and r["ge_version"] for r in results)
    assert not lake.read(good / "audit_findings").where("rule = 'quality_gate'").count()
    assert (good / DOCS / "index.html").is_file()


def test_gate_caches_each_frame_once(spark: Any, good: Path,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    """Each suite's frame is cached once, by the gate: Great Expectations' Spark data source
    cached it again for every validation (its `persist`, on by default), and Spark logged
    `WARN CacheManager: Asked to cache already cached data` for each. The JVM's stderr
    reaches this test's (a warning logged in the JVM shows it)."""
    capfd.readouterr()
    result = run_gate(spark, good, load_config(), run_id="t")
    assert len(result.results) >= 19
    spark._jvm.org.apache.logging.log4j.LogManager.getLogger("sharestate.test").warn("marker")
    err = ""
    for _ in range(50):  # the JVM's stderr comes through a thread
        err += capfd.readouterr().err
        if "marker" in err:
            break
        time.sleep(0.1)
    assert "WARN test: marker" in err
    assert "Asked to cache already cached data" not in err, err


def test_cli_gate_passes_and_builds_docs(good: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    index = (good / DOCS / "index.html").read_text(encoding="utf-8")
    assert "share_partition_state_history" in index  # written by the run_all job
    shutil.rmtree(good / DOCS)
    assert cli(["quality", "--warehouse", str(good), "--fail-on", "warning",
                "--table", "share_group_lag"]) == 0
    out = capsys.readouterr().out
    assert "quality gate passed (fail on warning): 2 of 2 checks" in out
    assert "data docs:" in out and (good / DOCS / "index.html").is_file()


def test_cli_bad_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["quality", "--warehouse", str(tmp_path)]) == 2
    assert cli(["quality", "--warehouse", str(tmp_path), "--fail-on", "never"]) == 2
    assert cli(["quality", "--warehouse", str(tmp_path), "--config", "nope.toml"]) == 2
    assert cli(["quality", "--warehouse", str(tmp_path), "--table", "log_records"]) == 2
    assert quality_main(["--warehouse", str(tmp_path)]) == 2  # spark-submit's entry
    assert len(capsys.readouterr().err.strip().splitlines()) == 5


def test_gate_that_cannot_run_exits_3(good: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("executor lost")

    monkeypatch.setattr("sharestate.spark.quality_job.quality", broken)
    assert cli(["quality", "--warehouse", str(good)]) == 3
    assert "the quality gate could not run: executor lost" in capsys.readouterr().err


# -- broken tables, one family each ------------------------------------------------------


@pytest.mark.parametrize("table", [STATE, HISTORY, "share_group_lag"])
def test_duplicate_keys(spark: Any, good: Path, tmp_path: Path, table: str) -> None:
    warehouse = copy(good, tmp_path, table)
    lake = open_lake(spark)
    lake.append(lake.read(warehouse / table).limit(1), warehouse / table)
    assert failures(gate(spark, warehouse, table)) == {f"{table}:keys_unique"}


def test_batch_first_after_last(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, STATE)
    rewrite(spark, warehouse / STATE, lambda rows: with_batches(rows, (90, 80, 0, 1)))
    assert failures(gate(spark, warehouse, STATE)) == {f"{STATE}.batches:batch_first_le_last"}


def test_batches_unsorted_or_overlapping(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, HISTORY)

    def change(rows: list[dict[str, Any]]) -> None:
        with_batches(rows, (20, 25, 0, 1), (10, 15, 2, 1))   # unsorted
        live = [r for r in rows if r["state_batches"]]
        live[-1]["state_batches"] = [{"first_offset": 10, "last_offset": 20, "delivery_state": 2,
                                      "delivery_count": 1},
                                     {"first_offset": 20, "last_offset": 30,  # overlaps
                                      "delivery_state": 0, "delivery_count": 2}]

    rewrite(spark, warehouse / HISTORY, change)
    result = gate(spark, warehouse, HISTORY)
    assert failures(result) == {f"{HISTORY}.batches:batch_order"}
    assert next(r for r in result.results if r.check == "batch_order").unexpected == 2


def test_delivery_state_outside_dialect(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, STATE)
    rewrite(spark, warehouse / STATE, lambda rows: with_batches(rows, (10, 19, 1, 1)))
    assert failures(gate(spark, warehouse, STATE)) == {
        f"{STATE}.batches:delivery_state_allowed[4.1]"}
    # ACQUIRED (1) is allowed where the settings allow it (logs of Kafka's test harnesses).
    config = load_config()
    allowing = QualityConfig(delivery_states={**config.delivery_states, "4.1": (0, 1, 2, 3, 4)})
    assert failures(gate(spark, warehouse, STATE, allowing)) == set()


def test_delivery_count_out_of_range(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, STATE)
    # (first, last, state, count): acknowledged though never delivered, archived past the
    # limit (5), available with count 0 (as Kafka 4.1.2 writes the records a console share
    # consumer fetched beyond --max-messages and released as it closed), available past it.
    rewrite(spark, warehouse / STATE, lambda rows: with_batches(
        rows, (10, 19, 2, 0), (20, 29, 4, 6), (30, 34, 0, 0), (35, 39, 0, 6)))
    result = gate(spark, warehouse, STATE)
    assert failures(result) == {f"{STATE}.batches:delivery_count_range",
                                f"{STATE}.batches:delivery_count_range[available]"}
    unexpected = {r.check: r.unexpected for r in result.results}
    assert unexpected["delivery_count_range"] == 2
    assert unexpected["delivery_count_range[available]"] == 1
    # With a higher limit only the acknowledged count of 0 is wrong.
    raised = gate(spark, warehouse, STATE, load_config().with_overrides(delivery_count_limit=6))
    assert failures(raised) == {f"{STATE}.batches:delivery_count_range"}
    assert next(r for r in raised.results if r.check == "delivery_count_range").unexpected == 1


def test_spso_moving_backwards(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, HISTORY)

    def change(rows: list[dict[str, Any]]) -> None:
        rows.sort(key=lambda r: r["record_offset"])
        first = next(r for r in rows if not r["deleted"] and r["start_offset"] > 0)
        later = next(r for r in rows if r["record_offset"] > first["record_offset"]
                     and not r["deleted"] and r["state_epoch"] == first["state_epoch"]
                     and all(r[k] == first[k] for k in ("group_id", "topic_id", "partition")))
        later["start_offset"] = first["start_offset"] - 1

    rewrite(spark, warehouse / HISTORY, change)
    result = gate(spark, warehouse, HISTORY)
    assert failures(result) == {f"{HISTORY}:spso_monotonic"}
    failed = next(r for r in result.results if r.check == "spso_monotonic")
    assert failed.sample and {"group_id", "record_offset"} <= set(failed.sample[0])


def test_negative_exact_lag(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path, "share_group_lag")

    def change(rows: list[dict[str, Any]]) -> None:
        rows[0].update(lag=-3, lag_is_lower_bound=False, end_offset_source="file")
        rows[1].update(lag=-3, lag_is_lower_bound=True)   # a lower bound may be anything

    rewrite(spark, warehouse / "share_group_lag", change)
    result = gate(spark, warehouse, "share_group_lag")
    assert failures(result) == {"share_group_lag:lag_non_negative"}
    assert next(r for r in result.results if r.check == "lag_non_negative").unexpected == 1


def test_orphaned_state_is_a_warning(spark: Any, good: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = copy(good, tmp_path, "audit_findings")

    def change(rows: list[dict[str, Any]]) -> None:
        rows.append({"rule": "orphaned_state", "severity": "warning", "topic": None,
                     "partition": None, "offset": None, "timestamp": None, "group_id": "g9",
                     "topic_id": "t9", "share_partition": 0, "detail_json": None,
                     "message": "state without metadata"})

    rewrite(spark, warehouse / "audit_findings", change)
    result = gate(spark, warehouse, "audit_findings")
    assert failures(result) == {"audit_findings:no_orphaned_state"}
    assert result.passed and not result.failed("error")
    # The command: passes at --fail-on error, fails at warning, records the finding.
    only = ["--table", "audit_findings", "--no-docs"]
    assert cli(["quality", "--warehouse", str(warehouse), *only]) == 0
    assert cli(["quality", "--warehouse", str(warehouse), "--fail-on", "warning", *only]) == 1
    assert "FAIL [warning] audit_findings:no_orphaned_state" in capsys.readouterr().out
    findings = open_lake(spark).read(warehouse / "audit_findings") \
        .where("rule = 'quality_gate'").collect()
    assert [(f["severity"], f["group_id"]) for f in findings] == [("warning", "g9")]
    assert "audit_findings:no_orphaned_state" in findings[0]["message"]


def test_decode_errors_need_acknowledgement(spark: Any, good: Path, tmp_path: Path) -> None:
    warehouse = copy(good, tmp_path / "wh", "decode_errors")
    lake = open_lake(spark)
    path = warehouse / "decode_errors"
    row = {"source": "/var/kafka/__share_group_state-1/00000000000000000000.log",
           "topic": "__share_group_state", "partition": 1, "segment": 0, "offset": 77,
           "position": 4096, "kind": "crc_mismatch", "message": "CRC-32C mismatch",
           "raw": b"\x00\x01", "raw_length": 2, "ingest_run": "r"}
    lake.append(spark.createDataFrame([row], lake.schema(path)), path)
    assert failures(gate(spark, warehouse, "decode_errors")) == {
        "decode_errors:decode_errors_acknowledged"}
    acks = tmp_path / "acks.toml"
    for entry, accepted in (('source = "*/__share_group_state-1/*.log"\noffset = 77', True),
                            ('source = "*/__share_group_state-1/*.log"\noffset = 78', False),
                            ('kind = "crc_mismatch"', True),
                            ('kind = "crc_mismatch"\nuntil = 2020-01-01', False)):
        acks.write_text(f'[[decode_error]]\n{entry}\nreason = "known"\n', encoding="utf-8")
        config = QualityConfig(acknowledgements=load_acknowledgements(acks))
        assert bool(failures(gate(spark, warehouse, "decode_errors", config))) != accepted, entry


def test_failed_gate_writes_findings_and_exits_1(spark: Any, good: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = copy(good, tmp_path, STATE, "audit_findings")
    lake = open_lake(spark)
    lake.append(lake.read(warehouse / STATE).limit(1), warehouse / STATE)
    assert cli(["quality", "--warehouse", str(warehouse), "--table", STATE]) == 1
    out = capsys.readouterr().out
    assert f"FAIL [error] {STATE}:keys_unique" in out and "quality gate FAILED" in out
    findings = lake.read(warehouse / "audit_findings").where("rule = 'quality_gate'").collect()
    assert [f["severity"] for f in findings] == ["error"]
    assert f"{STATE}:keys_unique" in findings[0]["message"]
    results = lake.read(warehouse / "quality_results").where("not success").collect()
    assert [(r["check"], r["blocking"], r["unexpected"]) for r in results] == [
        ("keys_unique", True, 2)]
    assert (warehouse / DOCS / "index.html").is_file()
    # Fixed tables: the next run replaces the gate's findings.
    lake.overwrite(open_lake(spark).read(good / STATE), warehouse / STATE, partitions=[{}])
    assert cli(["quality", "--warehouse", str(warehouse), "--table", STATE, "--no-docs"]) == 0
    assert not lake.read(warehouse / "audit_findings").where("rule = 'quality_gate'").count()
