"""The production Airflow DAG (`airflow/dags/sharestate_dag.py`), offline, with real Airflow.

- The DagBag imports it without errors: the task ids, the chain, retries, timeouts and the
  DAG's scheduling settings.
- Its templated fields render for a logical date: settings from Airflow Variables, DAG-run
  params overriding them, a run without a data interval, a missing required setting.
- The Spark tasks' exit-status handling, against a stand-in `spark-submit` on PATH (the real
  spark-submit command line the operator builds is recorded and checked), and the quality
  gate's.
- A real `airflow dags test sharestate 2025-10-10` of the whole DAG: SQLite metadata DB in a
  temporary AIRFLOW_HOME, the Spark connection at `local[2]` (this venv's spark-submit), a
  simulated log, then the Delta tables it wrote.
- `pipelines/run_all.py --run-id` (no Airflow needed).

Airflow is imported only in subprocesses (this file run as a script, or the `airflow` CLI):
importing it configures logging and settings for the whole process.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import metadata
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from sharestate.spark import run as run_all

ROOT = Path(__file__).resolve().parent.parent
DAGS = ROOT / "airflow" / "dags"
BIN = Path(sys.executable).parent
DAG_ID = "sharestate"
TASKS = ["ingest", "decode", "replay", "analytics", "quality", "maintain"]
SPARK_TASKS = TASKS[:4]
LOGICAL_DATE = "2025-10-10T00:00:00+00:00"
"""After the simulated log (its clock starts at 2025-10-09T08:53:20Z and runs minutes)."""
INTERVAL = ("2025-10-09T23:00:00+00:00", "2025-10-10T00:00:00+00:00")
"""The hourly data interval Airflow infers for a run at LOGICAL_DATE."""
RUN_ID = "airflow-20251009T230000Z-20251010T000000Z"
CONN_ID = "sharestate_spark_local"
URL_SECRET = "s3cret-in-a-dag-url"


def _airflow_missing() -> str | None:
    for dist in ("apache-airflow", "apache-airflow-providers-apache-spark"):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            return f"{dist} is not installed (make install-airflow)"
    return None


needs_airflow = pytest.mark.skipif(_airflow_missing() is not None,
                                   reason=_airflow_missing() or "")


def airflow_env(home: Path, variables: dict[str, str]) -> dict[str, str]:
    """The environment of an offline Airflow: its home, the dags folder, Variables and the
    Spark connection at local[2] from environment variables, this venv first on PATH."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AIRFLOW_", "AIRFLOW__", "PYSPARK_", "SPARK_"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps({"conn_type": "spark",
                                                        "host": "local[2]"}),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    })
    env.update({f"AIRFLOW_VAR_SHARESTATE_{name.upper()}": value
                for name, value in variables.items()})
    return env


def spark_conf(**more: str) -> str:
    """The `spark_conf` setting the tests use: this interpreter for Python, no UI."""
    return json.dumps({"spark.pyspark.python": sys.executable, "spark.ui.enabled": "false",
                       "spark.ui.showConsoleProgress": "false",
                       "spark.sql.shuffle.partitions": "2", **more})


# -- DagBag, rendering and exit statuses: one subprocess ---------------------------------


FAKE_SPARK_SUBMIT = """#!/usr/bin/env bash
# Stand-in spark-submit: records its argv, then behaves as $FAKE_SPARK_MODE says.
printf '%s\\n' "$@" > "$FAKE_SPARK_ARGV"
run_id=""
for arg in "$@"; do case "$arg" in --run-id=*) run_id="${arg#--run-id=}";; esac; done
case "$FAKE_SPARK_MODE" in
  clean) echo "tables in /w (run $run_id)"; exit 0;;
  findings) echo "analytics    1.0s  audit_findings 3  (3 findings)"
            echo "tables in /w (run $run_id)"; exit 1;;
  submit) echo "Error: Failed to load class main"; exit 1;;
  bug) echo "Traceback (most recent call last):"; echo "RuntimeError: boom"
       echo "sharestate: internal error (RuntimeError): this is a bug in sharestate"; exit 70;;
  usage) echo "sharestate: error: --warehouse is required"; exit 2;;
  unavailable) echo "sharestate: unavailable: cannot reach the cluster; run again later"
               exit 75;;
esac
exit 99
"""


class _FakeTI:
    """What the operators use of a task instance outside a DAG run."""

    dag_id, task_id, try_number, map_index = DAG_ID, "probe", 1, -1

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def probe(out: Path) -> None:
    """Import the DAG with a DagBag, render and execute its tasks; write the results (JSON)."""
    from types import SimpleNamespace

    import pendulum
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk.definitions.param import process_params
    from airflow.sdk.execution_time.context import VariableAccessor
    from airflow.timetables.interval import (
        CronDataIntervalTimetable as CoreCronDataIntervalTimetable,
    )

    bag = DagBag(dag_folder=str(DAGS))
    result: dict[str, Any] = {"import_errors": {str(k): str(v)
                                                for k, v in bag.import_errors.items()},
                              "dag_ids": sorted(bag.dag_ids)}
    dag = bag.dags.get(DAG_ID)  # not get_dag(): that asks the metadata DB
    assert dag is not None, result
    result["dag"] = {
        "max_active_runs": dag.max_active_runs, "catchup": dag.catchup,
        "tags": sorted(dag.tags), "timetable": type(dag.timetable).__name__,
        "schedule": dag.timetable.expression,
        "dagrun_timeout": dag.dagrun_timeout.total_seconds() if dag.dagrun_timeout else None,
        "doc_md": dag.doc_md or "", "params": sorted(dag.params.keys()),
    }
    result["tasks"] = {t.task_id: {
        "type": type(t).__name__, "bases": [c.__name__ for c in type(t).__mro__],
        "upstream": sorted(t.upstream_task_ids), "downstream": sorted(t.downstream_task_ids),
        "retries": t.retries, "owner": t.owner,
        "timeout": t.execution_timeout.total_seconds() if t.execution_timeout else None,
        "template_fields": list(t.template_fields)} for t in dag.tasks}

    logical = pendulum.parse(LOGICAL_DATE)
    # the scheduler's side of the DAG's timetable infers a manual run's data interval
    timetable = CoreCronDataIntervalTimetable(dag.timetable.expression, dag.timetable.timezone)
    interval = timetable.infer_manual_data_interval(run_after=logical)

    def context(task: Any, conf: dict[str, Any] | None, with_interval: bool) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "dag": task.dag, "task": task, "run_id": "manual__probe", "ti": _FakeTI(),
            "params": process_params(task.dag, task, conf, suppress_exception=False),
            "var": {"value": VariableAccessor(deserialize_json=False),
                    "json": VariableAccessor(deserialize_json=True)},
            "dag_run": SimpleNamespace(run_id="manual__probe", conf=conf or {},
                                       run_after=logical,
                                       logical_date=logical if with_interval else None)}
        if with_interval:
            ctx.update(logical_date=logical, data_interval_start=interval.start,
                       data_interval_end=interval.end)
        return ctx

    def rendered(task_id: str, conf: dict[str, Any] | None = None,
                 with_interval: bool = True) -> tuple[Any, dict[str, Any]]:
        # a fresh parse each time: rendering mutates the task, conf the DAG's params
        task = DagBag(dag_folder=str(DAGS)).dags[DAG_ID].get_task(task_id)
        ctx = context(task, conf, with_interval)
        task.render_template_fields(ctx)
        return task, ctx

    def fields(task: Any) -> dict[str, Any]:
        return {name: getattr(task, name) for name in task.template_fields}

    result["rendered"] = {task_id: fields(rendered(task_id)[0]) for task_id in TASKS}
    overrides = {"spark_conn_id": "from_param", "warehouse": "/param/wh",
                 "source": " /param/a\n/param/b ", "delivery_limit": 5, "full_ingest": True,
                 "end_offsets_from": '["kafka://b9:9092", "/param/data-logs"]',
                 "spark_conf": {"spark.executor.memory": "3g"}, "semantics": "transactional-acks",
                 "end_offsets": "/param/ends.json",
                 "kafka_options": {"security.protocol": "SASL_SSL"}}
    result["rendered_params"] = {task_id: fields(rendered(task_id, overrides)[0])
                                 for task_id in TASKS}
    result["rendered_no_interval"] = fields(rendered("replay", with_interval=False)[0])
    variable = os.environ.pop("AIRFLOW_VAR_SHARESTATE_WAREHOUSE")
    try:
        rendered("decode", {"warehouse": ""})
        result["missing_warehouse"] = None
    except Exception as exc:
        result["missing_warehouse"] = [type(exc).__name__, str(exc)]
    os.environ["AIRFLOW_VAR_SHARESTATE_WAREHOUSE"] = variable
    relative: dict[str, Any] = {}
    for task_id, conf in (("decode", {"warehouse": "warehouse"}),
                          ("quality", {"warehouse": "lake/wh"}),
                          ("ingest", {"source": '["/kafka/logs", "logs"]'}),
                          ("analytics", {"end_offsets": "ends.json"}),
                          ("analytics", {"end_offsets_from": "data-logs"}),
                          ("ingest", {"warehouse": "s3://lake/wh",
                                      "source": "kafka://b1:9092 /kafka/logs"})):
        try:
            task, _ = rendered(task_id, conf)
            relative[f"{task_id} {conf}"] = ["rendered", fields(task)]
        except Exception as exc:
            relative[f"{task_id} {conf}"] = [type(exc).__name__, str(exc)]
    result["relative_paths"] = relative
    try:
        rendered("ingest", {"source": f"/kafka/logs kafka://sharestate:{URL_SECRET}@b1:9092"})
        result["userinfo"] = None
    except Exception as exc:
        result["userinfo"] = [type(exc).__name__, str(exc)]

    outcomes: dict[str, Any] = {}
    argv_file = out.with_suffix(".argv")
    for mode, conf in (("clean", None), ("findings", None), ("submit", None), ("bug", None),
                       ("usage", None), ("unavailable", None),
                       ("findings_fail", {"fail_on_findings": True})):
        os.environ["FAKE_SPARK_MODE"] = mode.split("_")[0]
        os.environ["FAKE_SPARK_ARGV"] = str(argv_file)
        task, ctx = rendered("analytics", conf)
        try:
            task.execute(ctx)
            outcome = "success"
        except Exception as exc:
            outcome = type(exc).__name__
        outcomes[mode] = {"outcome": outcome, "xcom": ctx["ti"].xcom,
                          "argv": argv_file.read_text().splitlines()}
    result["spark_exit"] = outcomes

    gate: dict[str, Any] = {}
    for code in (0, 1, 2, 3, 70):
        command = ('echo "$SHARESTATE_WAREHOUSE $SHARESTATE_RUN_ID $SHARESTATE_INTERVAL_START '
                   f'$SHARESTATE_INTERVAL_END"; exit {code}')
        task, ctx = rendered("quality", {"quality_command": command})
        try:
            gate[str(code)] = ["success", task.execute(ctx)]
        except Exception as exc:
            gate[str(code)] = [type(exc).__name__, str(exc)]
    result["quality_exit"] = gate
    upkeep: dict[str, Any] = {}
    for code in (0, 2, 70):
        task, ctx = rendered("maintain", {"maintain_command": f'echo "$SHARESTATE_WAREHOUSE"; '
                                                              f"exit {code}"})
        try:
            upkeep[str(code)] = ["success", task.execute(ctx)]
        except Exception as exc:
            upkeep[str(code)] = [type(exc).__name__, str(exc)]
    result["maintain_exit"] = upkeep
    out.write_text(json.dumps(result, default=str))


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("airflow-probe")
    fake_bin = tmp / "bin"
    fake_bin.mkdir()
    (fake_bin / "spark-submit").write_text(FAKE_SPARK_SUBMIT)
    (fake_bin / "spark-submit").chmod(0o755)
    env = airflow_env(tmp / "home", {
        "spark_conn_id": CONN_ID, "warehouse": "/var/wh",
        "source": json.dumps(["/kafka/logs", "kafka://b1:9092,b2:9092"]),
        "pipelines_dir": "/opt/sharestate/pipelines", "spark_conf": spark_conf()})
    env["PATH"] = f"{fake_bin}{os.pathsep}{env['PATH']}"
    out = tmp / "probe.json"
    proc = subprocess.run([sys.executable, __file__, "probe", str(out)], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and out.exists(), proc.stdout[-5000:] + proc.stderr[-5000:]
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def lines(args: list[str]) -> list[str]:
    """The arguments a rendered `application_args` becomes: one per non-blank line."""
    return [line.strip() for arg in args for line in arg.splitlines() if line.strip()]


@needs_airflow
def test_dagbag_imports_the_dag(probed: dict[str, Any]) -> None:
    assert probed["import_errors"] == {}
    assert probed["dag_ids"] == [DAG_ID]
    dag = probed["dag"]
    assert dag["max_active_runs"] == 1 and dag["catchup"] is False
    assert dag["timetable"] == "CronDataIntervalTimetable" and dag["schedule"] == "0 * * * *"
    assert dag["dagrun_timeout"] == 4 * 3600
    assert {"sharestate", "spark"} <= set(dag["tags"])
    assert "catchup" in dag["doc_md"].lower() and "backfill" in dag["doc_md"].lower()
    assert {"spark_conn_id", "source", "warehouse", "quality_command"} <= set(dag["params"])
    tasks = probed["tasks"]
    assert list(tasks) == TASKS
    for before, after in pairwise(TASKS):
        assert tasks[before]["downstream"] == [after] and tasks[after]["upstream"] == [before]
    assert tasks["ingest"]["upstream"] == [] and tasks["maintain"]["downstream"] == []
    for task_id in SPARK_TASKS:
        task = tasks[task_id]
        assert "SparkSubmitOperator" in task["bases"]
        assert {"application", "conf", "py_files", "application_args",
                "spark_conn_id"} <= set(task["template_fields"])
        assert task["retries"] == 2 and task["owner"] == "sharestate"
        assert task["timeout"] and task["timeout"] <= 2 * 3600
    assert "BashOperator" in tasks["quality"]["bases"]
    assert tasks["quality"]["retries"] == 1 and tasks["quality"]["timeout"] == 1800
    assert "BashOperator" in tasks["maintain"]["bases"]
    assert tasks["maintain"]["retries"] == 1 and tasks["maintain"]["timeout"] == 1800


@needs_airflow
def test_templates_render_for_a_logical_date(probed: dict[str, Any]) -> None:
    r = probed["rendered"]
    start, end = INTERVAL
    for job in SPARK_TASKS:
        assert r[job]["application"] == f"/opt/sharestate/pipelines/{job}.py"
        assert r[job]["spark_conn_id"] == CONN_ID
        assert r[job]["py_files"] == ""
        assert r[job]["conf"] == {"spark.sharestate.interval": f"{start}/{end}",
                                  "spark.sharestate.airflow.dag_run": "manual__probe"}
        assert json.loads(r[job]["extra_conf"]) == json.loads(spark_conf())
        assert r[job]["name"] == f"sharestate-{job}-{RUN_ID}"
        assert r[job]["fail_on_findings"] == "false"
    args = {job: lines(r[job]["application_args"]) for job in SPARK_TASKS}
    assert args["ingest"] == ["--warehouse=/var/wh", f"--run-id={RUN_ID}",
                              "--source=/kafka/logs", "--source=kafka://b1:9092,b2:9092"]
    assert args["decode"] == ["--warehouse=/var/wh", f"--run-id={RUN_ID}"]
    assert args["replay"] == ["--warehouse=/var/wh", f"--run-id={RUN_ID}",
                              f"--as-of-time={end}"]
    # the live cluster's end offsets through time, so scheduled runs accumulate them
    assert args["analytics"] == [*args["replay"], "--end-offsets-from=kafka://b1:9092,b2:9092"]
    quality = r["quality"]
    assert quality["bash_command"] == 'sharestate quality --warehouse "$SHARESTATE_WAREHOUSE"'
    assert quality["env"] == {"SHARESTATE_WAREHOUSE": "/var/wh", "SHARESTATE_RUN_ID": RUN_ID,
                              "SHARESTATE_INTERVAL_START": start,
                              "SHARESTATE_INTERVAL_END": end}
    assert r["maintain"]["bash_command"] == (
        'sharestate maintain --warehouse "$SHARESTATE_WAREHOUSE"')
    assert r["maintain"]["env"] == quality["env"]


@needs_airflow
def test_params_override_variables(probed: dict[str, Any]) -> None:
    r = probed["rendered_params"]
    end = INTERVAL[1]
    assert {r[job]["spark_conn_id"] for job in SPARK_TASKS} == {"from_param"}
    assert json.loads(r["replay"]["extra_conf"]) == {"spark.executor.memory": "3g"}
    args = {job: lines(r[job]["application_args"]) for job in SPARK_TASKS}
    assert args["ingest"] == ["--warehouse=/param/wh", f"--run-id={RUN_ID}",
                              "--source=/param/a", "--source=/param/b",
                              "--kafka-option=security.protocol=SASL_SSL", "--full"]
    assert args["replay"] == ["--warehouse=/param/wh", f"--run-id={RUN_ID}",
                              f"--as-of-time={end}", "--semantics=transactional-acks",
                              "--delivery-limit=5"]
    assert args["analytics"] == ["--warehouse=/param/wh", f"--run-id={RUN_ID}",
                                 f"--as-of-time={end}", "--end-offsets=/param/ends.json",
                                 "--delivery-limit=5", "--end-offsets-from=kafka://b9:9092",
                                 "--end-offsets-from=/param/data-logs",
                                 "--kafka-option=security.protocol=SASL_SSL"]
    assert r["quality"]["env"]["SHARESTATE_WAREHOUSE"] == "/param/wh"


@needs_airflow
def test_a_run_without_data_interval_uses_run_after(probed: dict[str, Any]) -> None:
    args = lines(probed["rendered_no_interval"]["application_args"])
    assert f"--as-of-time={LOGICAL_DATE}" in args
    assert "--run-id=airflow-20251010T000000Z-20251010T000000Z" in args


@needs_airflow
def test_a_missing_required_setting_fails_without_retry(probed: dict[str, Any]) -> None:
    kind, message = probed["missing_warehouse"]
    assert kind == "AirflowFailException"
    assert "'warehouse'" in message and "sharestate_warehouse" in message


@needs_airflow
def test_a_relative_path_setting_fails_without_retry(probed: dict[str, Any]) -> None:
    """The tasks run in different working directories (the quality command in a temporary
    one): a relative warehouse, source or end-offsets file has no one meaning."""
    outcomes = probed["relative_paths"]
    refused = {key: value for key, value in outcomes.items() if value[0] != "rendered"}
    assert len(refused) == 5, outcomes
    for key, (kind, message) in refused.items():
        assert kind == "AirflowFailException", key
        assert "must be an absolute path or a URI" in message, message
    assert "'lake/wh'" in refused["quality {'warehouse': 'lake/wh'}"][1]
    assert "'logs'" in refused["ingest {'source': '[\"/kafka/logs\", \"logs\"]'}"][1]
    assert "'data-logs'" in refused["analytics {'end_offsets_from': 'data-logs'}"][1]
    kind, fields = outcomes["ingest {'warehouse': 's3://lake/wh', 'source': "
                            "'kafka://b1:9092 /kafka/logs'}"]
    assert kind == "rendered"
    assert lines(fields["application_args"])[:1] == ["--warehouse=s3://lake/wh"]


@needs_airflow
def test_a_url_with_a_password_fails_without_showing_it(probed: dict[str, Any]) -> None:
    """Rendered, it would be in spark-submit's command line, which Airflow logs."""
    kind, message = probed["userinfo"]
    assert kind == "AirflowFailException"
    assert "'source' holds a URL with a user name or password (not shown)" in message
    assert URL_SECRET not in message


def test_the_dag_knows_sharestates_exit_statuses() -> None:
    """The DAG keeps its own copy of the statuses it acts on (it imports nothing of
    sharestate): they are sharestate's."""
    import ast

    from sharestate import exit_codes

    module = ast.parse((DAGS / "sharestate_dag.py").read_text("utf-8"))
    constants = {node.targets[0].id: ast.literal_eval(node.value) for node in module.body
                 if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                 and node.targets[0].id.endswith("_EXIT")}
    assert constants == {"FINDINGS_EXIT": exit_codes.FINDINGS, "USAGE_EXIT": exit_codes.USAGE,
                         "UNAVAILABLE_EXIT": exit_codes.UNAVAILABLE,
                         "INTERNAL_EXIT": exit_codes.INTERNAL}


@needs_airflow
def test_spark_exit_statuses(probed: dict[str, Any]) -> None:
    """0 succeeds; 1 after the job's closing line is findings: success plus XCom (or a failure
    without retry when fail_on_findings); 2 (a setting to fix) fails without retry; 1 without
    the line (spark-submit's own failure), 75 (a live source did not answer) and 70 (a bug)
    fail and are retried."""
    runs = probed["spark_exit"]
    assert runs["clean"]["outcome"] == "success" and runs["clean"]["xcom"] == {"findings": False}
    assert runs["findings"]["outcome"] == "success"
    assert runs["findings"]["xcom"] == {"findings": True}
    assert runs["findings_fail"]["outcome"] == "AirflowFailException"
    assert runs["submit"]["outcome"] == "AirflowException"
    assert runs["bug"]["outcome"] == "AirflowException"
    assert runs["usage"]["outcome"] == "AirflowFailException"
    assert runs["unavailable"]["outcome"] == "AirflowException"
    argv = runs["clean"]["argv"]
    assert argv[:2] == ["--master", "local[2]"]
    settings = [argv[i + 1] for i, a in enumerate(argv) if a == "--conf"]
    assert f"spark.sharestate.interval={INTERVAL[0]}/{INTERVAL[1]}" in settings
    assert f"spark.pyspark.python={sys.executable}" in settings
    assert argv[argv.index("--name") + 1] == f"sharestate-analytics-{RUN_ID}"
    app = argv.index("/opt/sharestate/pipelines/analytics.py")
    assert argv[app + 1:] == ["--warehouse=/var/wh", f"--run-id={RUN_ID}",
                              f"--as-of-time={INTERVAL[1]}",
                              "--end-offsets-from=kafka://b1:9092,b2:9092"]
    assert "--py-files" not in argv


@needs_airflow
def test_quality_exit_statuses(probed: dict[str, Any]) -> None:
    gate = probed["quality_exit"]
    assert gate["0"] == ["success", f"/var/wh {RUN_ID} {INTERVAL[0]} {INTERVAL[1]}"]
    assert gate["1"][0] == "AirflowFailException"  # a gate failed: no retry
    assert gate["2"][0] == "AirflowFailException"  # bad settings: no retry
    assert gate["3"][0] == "AirflowException"  # the gate could not run: retried
    assert gate["70"][0] == "AirflowException"  # a bug: retried


@needs_airflow
def test_maintain_exit_statuses(probed: dict[str, Any]) -> None:
    upkeep = probed["maintain_exit"]
    assert upkeep["0"] == ["success", "/var/wh"]
    assert upkeep["2"][0] == "AirflowFailException"  # bad settings: no retry
    assert upkeep["70"][0] == "AirflowException"  # anything else: retried


# -- the whole DAG, for real --------------------------------------------------------------


STAND_IN_GATE = """import sys
from deltalake import DeltaTable

rows = DeltaTable(sys.argv[1] + "/share_partition_state").to_pyarrow_table().num_rows
print(f"stand-in quality gate: share_partition_state has {rows} rows")
sys.exit(0 if rows else 1)
"""


def quality_command_available() -> bool:
    """Whether `sharestate quality` exists in this venv (another engineer is writing it)."""
    proc = subprocess.run([str(BIN / "sharestate"), "quality", "--help"], capture_output=True,
                          timeout=120)
    return proc.returncode == 0


def xcom_findings(db: Path) -> dict[str, Any]:
    """The XCom `findings` each Spark task pushed."""
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT task_id, value FROM xcom WHERE dag_id = ? AND "
                                  "key = 'findings'", (DAG_ID,)).fetchall()
    return {task: json.loads(value) for task, value in rows}


def _tail(path: Path, lines: int = 80) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def dag_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("airflow-e2e")
    logs, warehouse, home = tmp / "logs", tmp / "warehouse", tmp / "airflow"
    subprocess.run([str(BIN / "sharestate"), "simulate", "--out", str(logs),
                    "--records", "20000"], check=True, capture_output=True, timeout=120)
    env = airflow_env(home, {"spark_conn_id": CONN_ID, "source": str(logs),
                             "warehouse": str(warehouse), "spark_conf": spark_conf()})
    migrate = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, cwd=tmp,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    conf: dict[str, Any] = {}
    real_gate = quality_command_available()
    if not real_gate:
        gate = tmp / "gate.py"
        gate.write_text(STAND_IN_GATE)
        conf["quality_command"] = (f"{shlex.quote(sys.executable)} {shlex.quote(str(gate))} "
                                   '"$SHARESTATE_WAREHOUSE"')
    output = tmp / "dags-test.log"
    started = time.monotonic()
    with output.open("w") as sink:
        proc = subprocess.run([str(BIN / "airflow"), "dags", "test", DAG_ID, LOGICAL_DATE,
                               "--conf", json.dumps(conf)], env=env, cwd=tmp, stdout=sink,
                              stderr=subprocess.STDOUT, timeout=900)
    yield {"status": proc.returncode, "output": output, "warehouse": warehouse,
           "db": home / "airflow.db", "real_gate": real_gate,
           "seconds": time.monotonic() - started}


@pytest.mark.slow
@needs_airflow
def test_dags_test_runs_every_task(dag_run: dict[str, Any]) -> None:
    output: Path = dag_run["output"]
    print(f"airflow dags test: {dag_run['seconds']:.0f}s, quality gate: "
          f"{'sharestate quality' if dag_run['real_gate'] else 'stand-in'}")
    assert dag_run["status"] == 0, _tail(output)
    with sqlite3.connect(dag_run["db"]) as db:
        states = dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = ?",
                                 (DAG_ID,)).fetchall())
        runs = db.execute("SELECT data_interval_start, data_interval_end, state FROM dag_run "
                          "WHERE dag_id = ?", (DAG_ID,)).fetchall()
    assert states == dict.fromkeys(TASKS, "success"), _tail(output)
    assert [state for _, _, state in runs] == ["success"]
    assert [r[:2] for r in runs] == [("2025-10-09 23:00:00.000000", "2025-10-10 00:00:00.000000")]
    findings = xcom_findings(dag_run["db"])
    assert sorted(findings) == sorted(SPARK_TASKS)
    assert {type(value) for value in findings.values()} == {bool}
    log = output.read_text(errors="replace")
    assert f"spark.sharestate.interval={INTERVAL[0]}/{INTERVAL[1]}" in log
    assert f"--as-of-time={INTERVAL[1]}" in log


@pytest.mark.slow
@needs_airflow
def test_dags_test_wrote_the_tables(dag_run: dict[str, Any]) -> None:
    from deltalake import DeltaTable

    assert dag_run["status"] == 0, _tail(dag_run["output"])
    warehouse: Path = dag_run["warehouse"]
    state = DeltaTable(str(warehouse / "share_partition_state"))
    assert state.to_pyarrow_table().num_rows > 0
    commit = json.loads(state.history(1)[0]["userMetadata"])
    end_ms = int(datetime.fromisoformat(INTERVAL[1]).astimezone(UTC).timestamp() * 1000)
    assert commit["run"] == RUN_ID and commit["as_of"]["time"] == end_ms
    runs = [r for r in DeltaTable(str(warehouse / "ingest_runs")).to_pyarrow_table().to_pylist()
            if r["job"] == "ingest"]
    assert runs and {r["ingest_run"] for r in runs} == {RUN_ID}
    assert {r["topic"] for r in runs} == {"__share_group_state", "__consumer_offsets"}
    assert sum(r["records"] for r in runs) > 20_000
    history = DeltaTable(str(warehouse / "share_partition_state_history")).to_pyarrow_table()
    assert history.num_rows >= 20_000
    errors = DeltaTable(str(warehouse / "decode_errors")).to_pyarrow_table().num_rows
    # ingest exits 1 (findings) exactly when it recorded decode errors
    assert xcom_findings(dag_run["db"]).get("ingest") == (errors > 0)
    for name in ("share_group_lag", "consumer_group_offsets"):
        assert json.loads(DeltaTable(str(warehouse / name)).history(1)[0]["userMetadata"])[
            "run"] == RUN_ID


# -- the install: pyspark-client left pyspark alone ---------------------------------------


@needs_airflow
def test_pyspark_client_left_pyspark_intact() -> None:
    """pyspark-client (the Spark provider's dependency) writes its files over pyspark's: every
    file both list must still be byte-identical to pyspark's own record of it."""
    import pyspark

    pyspark_dist, client = metadata.distribution("pyspark"), metadata.distribution("pyspark-client")
    assert pyspark.__version__ == pyspark_dist.version == client.version
    assert pyspark.__version__.startswith("4.2.")
    ours = {str(f): f for f in pyspark_dist.files or [] if f.hash is not None}
    shared = [ours[str(f)] for f in client.files or [] if str(f) in ours]
    assert len(shared) > 300
    for record in shared:
        digest = hashlib.new(record.hash.mode, record.locate().read_bytes()).digest()
        assert base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == record.hash.value, \
            f"{record} differs from pyspark {pyspark_dist.version}'s"


# -- pipelines/run_all.py --run-id (no Airflow) --------------------------------------------


def test_run_all_records_the_given_run_id(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`--run-id` reaches the jobs; the closing line the DAG looks for (exit 1 = findings
    only after it) names the run."""
    from sharestate.spark.jobs import decode as decode_job
    from sharestate.spark.jobs.warehouse import RunReport

    seen: list[str] = []

    def decode(spark: Any, warehouse: Any, *, run_id: str,
               only_run: str | None) -> RunReport:
        seen.append(run_id)
        assert only_run == (RUN_ID if len(seen) == 1 else None)
        return RunReport("decode", run_id)

    monkeypatch.setattr(decode_job, "decode", decode)
    args = run_all.parser().parse_args(["--warehouse", "/tmp/wh", "--run-id", RUN_ID])
    assert run_all.run(args, ("decode",), spark_factory=lambda *a, **k: None) == 0
    closing = capsys.readouterr().out.splitlines()[-1]
    assert closing.startswith("tables in ") and closing.endswith(f"(run {RUN_ID})")
    args = run_all.parser().parse_args(["--warehouse", "/tmp/wh"])
    assert run_all.run(args, ("decode",), spark_factory=lambda *a, **k: None) == 0
    assert seen[0] == RUN_ID and seen[1] != RUN_ID and seen[1]
    with pytest.raises(run_all.ArgumentError, match="--run-id"):
        run_all.run(run_all.parser().parse_args(["--warehouse", "/w", "--run-id", " "]),
                    ("decode",), spark_factory=lambda *a, **k: None)


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description="subprocess side of tests/test_airflow_dag.py")
    cli.add_argument("what", choices=["probe"])
    cli.add_argument("out", type=Path)
    probe(cli.parse_args().out)
