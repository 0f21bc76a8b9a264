"""`sharestate sql` is a read-only door: every statement that writes or calls out of SQL is
refused before anything runs (exit 4, one line), and the evidence that it did not run is
checked for each kind; failures are one line with Spark's error class; empty results keep
their header. Real local Spark over a real warehouse."""

from __future__ import annotations

import json
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


def test_write_changes_delta_tables_under_the_lease(spark: Any, warehouse: Path,
                                                    tmp_path: Path) -> None:
    """--write on the jvm backend: Delta's DELETE runs (and only there); Delta's own SQL then
    sees the table's history and reads the version before the DELETE. The four statements
    run in order in one process (a JVM with Delta's jars)."""
    import shutil

    from one_process import call_in_one_process

    from sharestate.jars import delta_jars

    if not delta_jars().present:
        pytest.skip("Delta's jars are not in the jar cache (make jars)")
    copy = tmp_path / "wh"
    shutil.copytree(warehouse, copy)
    before = _redelivery(spark, copy)
    previous = max(c.version for c in open_lake(spark).history(str(copy / "redelivery")))
    history, old = tmp_path / "history.jsonl", tmp_path / "old.jsonl"
    sql = ["sql", "--warehouse", str(copy), "--backend", "jvm", "--format", "jsonl"]
    calls = call_in_one_process("sharestate.app.cli", [
        [*sql, "DELETE FROM redelivery"],
        [*sql, "--write", "DELETE FROM redelivery WHERE records > 1"],
        [*sql, "--output", str(history), "DESCRIBE HISTORY redelivery"],
        [*sql, "--output", str(old), f"SELECT * FROM redelivery VERSION AS OF {previous}"]])
    assert calls.statuses == [REFUSED, 0, 0, 0], calls.stderr[-3000:]
    errors = [line for line in calls.stderr.splitlines() if line.startswith("sharestate")]
    assert len(errors) == 1 and "DELETE" in errors[0], calls.stderr[-3000:]
    after = _redelivery(spark, copy)
    assert after == [r for r in before if json.loads(r)["records"] <= 1] and after != before

    commits = [json.loads(line) for line in history.read_text("utf-8").splitlines()]
    assert [c["version"] for c in commits] == [c.version for c in
                                              open_lake(spark).history(str(copy / "redelivery"))]
    # one commit after the table as it was: the refused DELETE wrote nothing, --write's did
    assert commits[0]["operation"] == "DELETE" and commits[1]["version"] == previous
    assert sorted(json.dumps(json.loads(line), sort_keys=True)
                  for line in old.read_text("utf-8").splitlines()) == before


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


def test_delta_errors_are_one_line_naming_deltas_error(
        spark: Any, warehouse: Path, tmp_path: Path) -> None:
    """On the jvm backend Delta's own errors (time travel out of range, change data never
    recorded, VACUUM under Delta's retention check) are exit 4 with Delta's error class and
    message in one line, not `[INTERNAL_ERROR] Cannot find main error class` and exit 70;
    the refused VACUUM deleted nothing. One process (a JVM with Delta's jars)."""
    import shutil

    from one_process import call_in_one_process

    from sharestate.jars import delta_jars

    if not delta_jars().present:
        pytest.skip("Delta's jars are not in the jar cache (make jars)")
    copy = tmp_path / "wh"
    shutil.copytree(warehouse, copy)
    files = sorted(p.name for p in (copy / "redelivery").rglob("*.parquet"))
    sql = ["sql", "--warehouse", str(copy), "--backend", "jvm"]
    calls = call_in_one_process("sharestate.app.cli", [
        *([*sql, statement] for statement in DELTA_ERRORS),
        [*sql, "--write", "VACUUM redelivery RETAIN 0 HOURS"]])
    assert calls.statuses == [REFUSED] * (len(DELTA_ERRORS) + 1), calls.stderr[-3000:]
    assert "Traceback" not in calls.stderr and "INTERNAL_ERROR" not in calls.stderr
    errors = [line for line in calls.stderr.splitlines() if line.startswith("sharestate")]
    expected = [*DELTA_ERRORS.values(), "[DELTA_VACUUM_RETENTION_PERIOD_TOO_SHORT]"]
    assert len(errors) == len(expected), calls.stderr[-3000:]
    for line, error_class in zip(errors, expected, strict=True):
        assert f"query failed: {error_class} " in line, line
    assert "Available versions: [0, 1]" in errors[0]
    assert sorted(p.name for p in (copy / "redelivery").rglob("*.parquet")) == files


def test_describe_history_on_rs_says_how_to_get_it(warehouse: Path,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """Spark's own parser reads `DESCRIBE HISTORY t` as DESCRIBE of column t of a table
    HISTORY: refused saying it is Delta's SQL on the jvm backend, as time travel is."""
    for statement in ("DESCRIBE HISTORY redelivery", "describe history `redelivery`"):
        assert _sql(warehouse, "--backend", "rs", statement) == REFUSED
        err = [line for line in capfd.readouterr().err.splitlines() if "sharestate" in line]
        assert len(err) == 1 and "DESCRIBE HISTORY needs the jvm backend" in err[0] \
            and "--backend jvm" in err[0], err
