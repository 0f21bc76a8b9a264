"""`sharestate sql` is a read-only door: every statement that writes or calls out of SQL is
refused before anything runs (exit 4, one line), and the evidence that it did not run is
checked for each kind; failures are one line with Spark's error class; empty results keep
their header. Real local Spark over a real warehouse."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sharestate.app.cli import main
from sharestate.lake import open_lake
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.slow
REFUSED = 4


@pytest.fixture(scope="module")
def warehouse(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs = tmp_path_factory.mktemp("logs")
    simulate(SimulationConfig(records=600, seed=3, groups=2, topics=1, partitions=2,
                              state_partitions=1, offsets_partitions=1), logs)
    root = tmp_path_factory.mktemp("warehouse")
    assert run_all(["--source", str(logs), "--warehouse", str(root)]) in (0, 1)
    return root


def _sql(warehouse: Path, *args: str) -> int:
    return main(["sql", "--warehouse", str(warehouse), *args])


def _redelivery(spark: Any, warehouse: Path) -> list[str]:
    rows = open_lake(spark).read(str(warehouse / "redelivery")).collect()
    return sorted(json.dumps(r.asDict(recursive=True), sort_keys=True) for r in rows)


def _refused(capfd: pytest.CaptureFixture[str], warehouse: Path, statement: str,
             what: str) -> None:
    assert _sql(warehouse, statement) == REFUSED, statement
    err = [line for line in capfd.readouterr().err.splitlines() if "sharestate" in line]
    assert len(err) == 1 and "[SHARESTATE_READ_ONLY] refused" in err[0] and what in err[0], err


def test_insert_overwrite_directory_over_a_table_is_refused(
        spark: Any, warehouse: Path, capfd: pytest.CaptureFixture[str]) -> None:
    before = _redelivery(spark, warehouse)
    assert before
    _refused(capfd, warehouse, f"INSERT OVERWRITE DIRECTORY '{warehouse / 'redelivery'}' "
                               "USING parquet SELECT 1 AS x", "INSERT OVERWRITE DIRECTORY")
    _refused(capfd, warehouse, f"WITH a AS (SELECT 1 AS x) INSERT OVERWRITE DIRECTORY "
                               f"'{warehouse / 'redelivery'}' USING parquet SELECT * FROM a",
             "INSERT OVERWRITE DIRECTORY")
    assert _redelivery(spark, warehouse) == before


def test_writes_to_tables_are_refused(spark: Any, warehouse: Path, tmp_path: Path,
                                      capfd: pytest.CaptureFixture[str]) -> None:
    before = _redelivery(spark, warehouse)
    _refused(capfd, warehouse, "INSERT INTO redelivery SELECT * FROM redelivery", "INSERT")
    _refused(capfd, warehouse, "CREATE TABLE made_here AS SELECT 1 AS x",
             "CREATE TABLE ... AS SELECT")
    _refused(capfd, warehouse, f"CREATE TABLE made_here USING parquet LOCATION "
                               f"'{tmp_path / 'made'}' AS SELECT 1 AS x", "CREATE TABLE")
    _refused(capfd, warehouse, "CREATE TEMPORARY VIEW made_view AS SELECT 1 AS x",
             "CREATE VIEW")
    _refused(capfd, warehouse, "DELETE FROM redelivery", "DELETE")
    _refused(capfd, warehouse, "CACHE TABLE redelivery", "CACHE TABLE")
    assert _redelivery(spark, warehouse) == before
    assert not spark.catalog.tableExists("made_here")
    assert not spark.catalog.tableExists("made_view")
    assert not (tmp_path / "made").exists()


def test_statements_that_run_statements_are_refused(
        warehouse: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "immediate"
    _refused(capfd, warehouse, f"EXECUTE IMMEDIATE 'INSERT OVERWRITE DIRECTORY \\'{target}\\' "
                               "USING parquet SELECT 1 AS x'", "EXECUTE IMMEDIATE")
    _refused(capfd, warehouse, f"BEGIN INSERT OVERWRITE DIRECTORY '{target}' USING parquet "
                               "SELECT 1 AS x; END", "refused")
    assert not target.exists()


def test_settings_and_code_loading_are_refused(spark: Any, warehouse: Path, tmp_path: Path,
                                               capfd: pytest.CaptureFixture[str]) -> None:
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    _refused(capfd, warehouse, "SET spark.sql.shuffle.partitions=1", "SET")
    assert spark.conf.get("spark.sql.shuffle.partitions") == partitions
    jar = tmp_path / "code.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip
    _refused(capfd, warehouse, f"ADD JAR '{jar}'", "ADD JAR")
    assert not any("code.jar" in j for j in spark.sparkContext._jsc.sc().listJars().mkString(
        ",").split(","))
    _refused(capfd, warehouse, f"ADD FILE '{jar}'", "ADD FILE")
    _refused(capfd, warehouse, "CREATE TEMPORARY FUNCTION f AS 'java.lang.Object' "
                               f"USING JAR '{jar}'", "CREATE FUNCTION")


@pytest.mark.parametrize("function", ["reflect", "java_method", "try_reflect"])
def test_java_calls_are_refused(spark: Any, warehouse: Path, function: str,
                                capfd: pytest.CaptureFixture[str]) -> None:
    prop = f"sharestate.door.{function}"
    system = spark._jvm.java.lang.System
    _refused(capfd, warehouse, f"SELECT {function}('java.lang.System', 'setProperty', "
                               f"'{prop}', 'called')", "Java methods")
    # hidden in a subquery of a filter
    _refused(capfd, warehouse, "SELECT * FROM redelivery WHERE records > (SELECT length("
                               f"{function}('java.lang.System', 'setProperty', '{prop}', "
                               "'called')))", "Java methods")
    assert system.getProperty(prop) is None


def test_programs_are_refused(warehouse: Path, tmp_path: Path,
                              capfd: pytest.CaptureFixture[str]) -> None:
    ran = tmp_path / "ran"
    _refused(capfd, warehouse, f"SELECT TRANSFORM(group_id) USING 'touch {ran}' AS (x) "
                               "FROM redelivery", "runs a program")
    assert not ran.exists()


def test_files_outside_the_warehouse_are_not_read(warehouse: Path, tmp_path: Path,
                                                  capfd: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the door\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert _sql(warehouse, f"SELECT * FROM text.`{secret}`", "-o", str(out)) == REFUSED
    assert "TABLE_OR_VIEW_NOT_FOUND" in capfd.readouterr().err
    assert "not for the door" not in (out.read_text("utf-8") if out.exists() else "")


def test_queries_run(warehouse: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert _sql(warehouse, "WITH r AS (SELECT group_id, records FROM redelivery) "
                           "SELECT group_id, sum(records) AS n FROM r GROUP BY group_id "
                           "ORDER BY n DESC LIMIT 5", "--format", "jsonl") == 0
    rows = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    assert rows and all(set(row) == {"group_id", "n"} for row in rows)


def test_every_cookbook_query_passes_the_door(spark: Any, warehouse: Path) -> None:
    from test_docs import cookbook_queries

    from sharestate.lake import register_views
    from sharestate.lake.read_only import check_statement

    register_views(spark, warehouse)
    for query in cookbook_queries():
        check_statement(spark, query)


def test_a_failed_query_is_one_line_with_the_error_class(
        warehouse: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert _sql(warehouse, "SELECT no_such_column FROM redelivery") == REFUSED
    err = capfd.readouterr().err
    assert "at org.apache.spark" not in err and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("sharestate")]
    assert len(lines) == 1 and "[UNRESOLVED_COLUMN" in lines[0], err
    assert _sql(warehouse, "SELEC 1") == REFUSED
    assert "[PARSE_SYNTAX_ERROR]" in capfd.readouterr().err
    assert _sql(warehouse, "--verbose", "SELECT no_such_column FROM redelivery") == REFUSED
    assert "at org.apache.spark" in capfd.readouterr().err


def test_a_query_leaves_the_sessions_logging_as_it_was(spark: Any, warehouse: Path) -> None:
    """sql turns the JVM's logging off while it runs, and back on after: in one process (the
    API's, a notebook's) the session went on silent, and a later warning was never seen."""
    root = spark._jvm.org.apache.logging.log4j.LogManager.getRootLogger()
    before = str(root.getLevel().toString())
    assert before != "OFF"
    assert _sql(warehouse, "SELECT no_such_column FROM redelivery") == REFUSED
    assert str(root.getLevel().toString()) == before


def test_an_empty_result_keeps_its_header(warehouse: Path,
                                          capfd: pytest.CaptureFixture[str]) -> None:
    assert _sql(warehouse, "SELECT group_id, records FROM redelivery WHERE false") == 0
    assert capfd.readouterr().out.splitlines() == ["group_id  records", "(0 rows)"]
    assert _sql(warehouse, "SELECT group_id, records FROM redelivery WHERE false",
                "--format", "csv") == 0
    assert capfd.readouterr().out.splitlines() == ["group_id,records"]


def test_write_needs_the_jvm_backend(warehouse: Path,
                                     capfd: pytest.CaptureFixture[str]) -> None:
    assert _sql(warehouse, "--write", "--backend", "rs", "DELETE FROM redelivery") == 2
    assert "--write needs the jvm backend" in capfd.readouterr().err


def test_time_travel_on_rs_says_how_to_get_it(warehouse: Path,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    assert _sql(warehouse, "--backend", "rs", "SELECT * FROM redelivery VERSION AS OF 0") \
        == REFUSED
    err = capfd.readouterr().err
    assert "time travel (VERSION AS OF, TIMESTAMP AS OF) needs the jvm backend" in err
    assert "--backend jvm" in err


def test_sql_takes_spark_settings(warehouse: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """--conf as for run: a setting reaches the session; a malformed one is exit 2."""
    assert _sql(warehouse, "--conf", "spark.sql.session.timeZone=America/New_York",
                "--format", "csv", "SELECT current_timezone() AS zone") == 0
    assert capfd.readouterr().out.splitlines() == ["zone", "America/New_York"]
    assert _sql(warehouse, "--conf", "noequals", "SELECT 1") == 2
    assert "--conf" in capfd.readouterr().err


DELTA_ERRORS = {
    "SELECT * FROM redelivery VERSION AS OF 99": "[DELTA_VERSION_NOT_FOUND]",
    "SELECT * FROM redelivery TIMESTAMP AS OF '2000-01-01 00:00:00'":
        "[DELTA_TIMESTAMP_EARLIER_THAN_COMMIT_RETENTION]",
    "SELECT * FROM redelivery TIMESTAMP AS OF '2999-01-01 00:00:00'":
        "[DELTA_TIMESTAMP_GREATER_THAN_COMMIT]",
    "SELECT * FROM table_changes('redelivery', 0)": "[DELTA_MISSING_CHANGE_DATA]",
}
DELTA_WRITE_ERRORS = {
    "VACUUM redelivery RETAIN 0 HOURS": "[DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT]",
    # an error with a query context: PySpark's own conversion of it fails
    "MERGE INTO redelivery t USING share_group_lag s ON t.group_id = s.group_id "
    "WHEN NOT MATCHED THEN INSERT *": "[DELTA_MERGE_UNRESOLVED_EXPRESSION]",
    "RESTORE TABLE redelivery TO VERSION AS OF 99": "[DELTA_CANNOT_RESTORE_TABLE_VERSION]",
    "UPDATE redelivery SET no_such_column = 1": "[UNRESOLVED_COLUMN",
}
"""--write statements the door lets through (to Delta, which refuses them)."""


@dataclass
class DeltaCalls:
    """`sql --backend jvm` calls on a copy of the warehouse, in one process: what each
    returned and printed on stderr (its `sharestate` line), by statement."""

    warehouse: Path
    outside: Path
    files_before: list[str]
    before: list[str]
    previous: int
    results: dict[str, tuple[int, list[str]]]


def _outside_statements(outside: Path, warehouse: Path) -> dict[str, str]:
    """--write statements that write outside the warehouse's tables, with what they name."""
    return {
        f"INSERT OVERWRITE DIRECTORY '{outside / 'dir'}' USING parquet SELECT 1 AS x":
            "INSERT OVERWRITE DIRECTORY",
        f"CREATE TABLE made USING delta LOCATION '{outside / 'ctas'}' AS SELECT 1 AS x":
            "CREATE TABLE ... AS SELECT",
        f"CONVERT TO DELTA parquet.`{outside / 'parquet'}`": "CONVERT TO DELTA",
        f"CREATE TABLE cloned SHALLOW CLONE redelivery LOCATION '{outside / 'clone'}'":
            "CLONE",
        f"CREATE DATABASE made LOCATION '{outside / 'database'}'": "CREATE DATABASE",
        f"VACUUM '{warehouse / 'redelivery'}' RETAIN 200 HOURS": "a table named by its path",
    }


WRITE_DELETE = "DELETE FROM redelivery WHERE records > 1"
HISTORY = "DESCRIBE HISTORY redelivery"
TIMES = ("SELECT timestamp_millis(86400000) AS t, named_struct('at', timestamp_millis(0)) AS s, "
         "array(timestamp_millis(0)) AS a, map('k', timestamp_millis(1)) AS m")
MACHINE_ZONE = "America/New_York"
"""The delta_calls process's zone (TZ): not the session's (UTC)."""


@pytest.fixture(scope="module")
def delta_calls(spark: Any, warehouse: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> DeltaCalls:
    """Delta's errors and the --write door, each statement once, in order, in one process
    (a JVM with Delta's jars, on a machine in MACHINE_ZONE); then four change the table and
    read what changed: a DELETE without --write, one with it, DESCRIBE HISTORY and the
    version before it; the last two print times on each backend."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from one_process import call_in_one_process

    from sharestate.jars import delta_jars

    if not delta_jars().present:
        pytest.skip("Delta's jars are not in the jar cache (make jars)")
    copy = tmp_path_factory.mktemp("delta") / "wh"
    shutil.copytree(warehouse, copy)
    outside = tmp_path_factory.mktemp("outside")
    (outside / "parquet").mkdir()
    pq.write_table(pa.table({"x": [1]}), outside / "parquet" / "part-0.parquet")
    files = sorted(p.name for p in (copy / "redelivery").rglob("*.parquet"))
    before = _redelivery(spark, copy)
    previous = max(c.version for c in open_lake(spark).history(str(copy / "redelivery")))
    committed = _commit_time(copy / "redelivery", previous)
    sql = ["sql", "--warehouse", str(copy), "--backend", "jvm", "--format", "jsonl"]
    argvs = {statement: [*sql, statement] for statement in DELTA_ERRORS}
    argvs |= {statement: [*sql, "--write", statement] for statement in
              [*DELTA_WRITE_ERRORS, *_outside_statements(outside, copy)]}
    argvs |= {"DELETE FROM redelivery": [*sql, "DELETE FROM redelivery"],
              WRITE_DELETE: [*sql, "--write", WRITE_DELETE],
              HISTORY: [*sql, "--output", str(outside / "history.jsonl"), HISTORY],
              "VERSION AS OF previous": [*sql, "--output", str(outside / "old.jsonl"),
                                         f"SELECT * FROM redelivery VERSION AS OF {previous}"],
              "TIMESTAMP AS OF previous": [
                  *sql, "--output", str(outside / "at.jsonl"),
                  f"SELECT * FROM redelivery TIMESTAMP AS OF '{committed:%Y-%m-%d %H:%M:%S.%f}'"],
              "times jvm": [*sql, "--output", str(outside / "times.jsonl"), TIMES],
              "times rs": ["sql", "--warehouse", str(copy), "--backend", "rs", "--output",
                           str(outside / "times.txt"), TIMES]}
    calls = call_in_one_process("sharestate.app.cli", list(argvs.values()),
                                env={"TZ": MACHINE_ZONE})
    assert "Traceback" not in calls.stderr, calls.stderr[-3000:]
    # each call's `sharestate` lines: the calls' stderr in order, split at the refusals
    lines = iter(line for line in calls.stderr.splitlines() if line.startswith("sharestate"))
    results = {statement: (status, [next(lines)] if status else [])
               for statement, status in zip(argvs, calls.statuses, strict=True)}
    assert next(lines, None) is None, calls.stderr[-3000:]
    return DeltaCalls(copy, outside, files, before, previous, results)


def test_delta_errors_are_one_line_naming_deltas_error(delta_calls: DeltaCalls) -> None:
    """On the jvm backend Delta's own errors (time travel out of range, change data never
    recorded, VACUUM under Delta's retention check, a MERGE Delta cannot resolve) are exit 4
    with Delta's error class and message in one line, not `[INTERNAL_ERROR] Cannot find
    main error class` and exit 70; the refused VACUUM deleted nothing."""
    for statement, error_class in {**DELTA_ERRORS, **DELTA_WRITE_ERRORS}.items():
        status, lines = delta_calls.results[statement]
        assert status == REFUSED and len(lines) == 1, (statement, status, lines)
        assert f"query failed: {error_class}" in lines[0], lines
        assert "INTERNAL_ERROR" not in lines[0]
    assert "Available versions: [0, 1]" in delta_calls.results[
        "SELECT * FROM redelivery VERSION AS OF 99"][1][0]
    assert set(delta_calls.files_before) <= {
        p.name for p in (delta_calls.warehouse / "redelivery").rglob("*.parquet")}


def test_write_changes_only_the_warehouse_tables(delta_calls: DeltaCalls) -> None:
    """--write runs DELETE, UPDATE, MERGE, OPTIMIZE, VACUUM and RESTORE of a warehouse table
    by name (DELETE: test_write_changes_delta_tables_under_the_lease; UPDATE, MERGE, VACUUM,
    RESTORE reach Delta: DELTA_WRITE_ERRORS); every statement that writes elsewhere (a
    directory, a table or database at a location, a conversion or clone, a table by its
    path) is refused, one line, and wrote nothing."""
    for statement, what in _outside_statements(delta_calls.outside,
                                               delta_calls.warehouse).items():
        status, lines = delta_calls.results[statement]
        assert status == REFUSED and len(lines) == 1, (statement, status, lines)
        assert "[SHARESTATE_READ_ONLY] refused: --write runs" in lines[0] \
            and f"and {what} is not one" in lines[0], lines
    assert sorted(p.name for p in delta_calls.outside.iterdir()) == [
        "at.jsonl", "history.jsonl", "old.jsonl", "parquet", "times.jsonl", "times.txt"]
    assert not (delta_calls.outside / "parquet" / "_delta_log").exists()


def test_write_changes_delta_tables_under_the_lease(spark: Any,
                                                    delta_calls: DeltaCalls) -> None:
    """--write on the jvm backend: Delta's DELETE runs (and only there); Delta's own SQL then
    sees the table's history and reads the version before the DELETE."""
    results, copy = delta_calls.results, delta_calls.warehouse
    status, lines = results["DELETE FROM redelivery"]
    assert status == REFUSED and "DELETE" in lines[0], lines
    assert [results[s][0] for s in (WRITE_DELETE, HISTORY, "VERSION AS OF previous")] \
        == [0, 0, 0]
    after = _redelivery(spark, copy)
    before = delta_calls.before
    assert after == [r for r in before if json.loads(r)["records"] <= 1] and after != before

    history = delta_calls.outside / "history.jsonl"
    commits = [json.loads(line) for line in history.read_text("utf-8").splitlines()]
    assert [c["version"] for c in commits] == [c.version for c in
                                              open_lake(spark).history(str(copy / "redelivery"))]
    # one commit after the table as it was: the refused statements wrote nothing, --write's
    # DELETE did
    assert commits[0]["operation"] == "DELETE" and commits[1]["version"] == delta_calls.previous
    old = delta_calls.outside / "old.jsonl"
    assert sorted(json.dumps(json.loads(line), sort_keys=True)
                  for line in old.read_text("utf-8").splitlines()) == before


def test_times_are_printed_in_the_sessions_zone(delta_calls: DeltaCalls) -> None:
    """Times, nested ones too, print in the session's zone (UTC), in which Spark reads time
    literals, on both backends, whatever the machine's zone: they printed in the machine's
    (1970-01-01 19:00:00 in New York for 1970-01-02 00:00 UTC), so a time copied into
    TIMESTAMP AS OF meant another moment. DESCRIBE HISTORY's is its commit's time, and
    TIMESTAMP AS OF that time reads that version."""
    assert [delta_calls.results[call][0] for call in ("times jvm", "times rs")] == [0, 0]
    outside = delta_calls.outside
    assert json.loads((outside / "times.jsonl").read_text("utf-8")) == {
        "t": "1970-01-02 00:00:00", "s": {"at": "1970-01-01 00:00:00"},
        "a": ["1970-01-01 00:00:00"], "m": {"k": "1970-01-01 00:00:00.001"}}
    table = (outside / "times.txt").read_text("utf-8").splitlines()
    assert table[1].startswith("1970-01-02 00:00:00  {\"at\": \"1970-01-01 00:00:00\"}"), table
    assert table[-1] == "(1 row, times in UTC)"
    (latest, *_) = (json.loads(line) for line in (outside / "history.jsonl").read_text(
        "utf-8").splitlines())
    assert datetime.datetime.fromisoformat(latest["timestamp"]) == _commit_time(
        delta_calls.warehouse / "redelivery", latest["version"])
    # and Delta reads such a time as that moment (it read it in the JVM's zone, the machine's)
    assert delta_calls.results["TIMESTAMP AS OF previous"] == (0, [])
    assert sorted(json.dumps(json.loads(line), sort_keys=True) for line in (
        outside / "at.jsonl").read_text("utf-8").splitlines()) == delta_calls.before


def _commit_time(table: Path, version: int) -> datetime.datetime:
    """A commit's time as Delta tells it (its file's, to the millisecond), UTC."""
    written = (table / "_delta_log" / f"{version:020d}.json").stat().st_mtime_ns // 1_000_000
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=written)


def test_describe_history_on_rs_says_how_to_get_it(warehouse: Path,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """Spark's own parser reads `DESCRIBE HISTORY t` as DESCRIBE of column t of a table
    HISTORY: refused saying it is Delta's SQL on the jvm backend, as time travel is."""
    for statement in ("DESCRIBE HISTORY redelivery", "describe history `redelivery`"):
        assert _sql(warehouse, "--backend", "rs", statement) == REFUSED
        err = [line for line in capfd.readouterr().err.splitlines() if "sharestate" in line]
        assert len(err) == 1 and "DESCRIBE HISTORY needs the jvm backend" in err[0] \
            and "--backend jvm" in err[0], err
