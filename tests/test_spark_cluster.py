"""The pipeline on a real Spark cluster: a standalone master and two one-core workers from
the installed PySpark on 127.0.0.1, jobs submitted exactly as the README's cluster section
says (from a directory that is not the checkout), on both Delta backends. Executors get
sharestate and its C extension from the packed environment the job ships, and the tables
equal a `local[2]` run's — one whose executors were made to run pure Python, which also
proves that such a run warns and says so in its commits.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_ROOT, under_ci
from test_pipeline import OFFSET_FILES, SHARE_FILES, layout
from test_pipeline_backends import snapshot

from sharestate.jars import delta_jars
from sharestate.lake import open_lake

pytestmark = pytest.mark.slow

README = PROJECT_ROOT / "README.md"


def readme_cluster_lines() -> list[str]:
    block = re.search(r"```cluster\n(.*?)```", README.read_text("utf-8"), re.S)
    assert block, "README has no cluster block"
    return [line[2:] for line in block.group(1).splitlines() if line.startswith("$ ")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _wait_for(path: Path, text: str, timeout: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and text in path.read_text("utf-8", "replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"{path.name}: no {text!r}: {path.read_text('utf-8', 'replace')[-2000:]}")


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and two workers of one core and 1 GiB each, on 127.0.0.1."""
    root = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(_spark_home() / "bin" / "spark-class")
    env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_LOCAL_IP": "127.0.0.1"}
    daemons = []
    try:
        with (root / "master.log").open("wb") as log:
            daemons.append(subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(_free_port())],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        _wait_for(root / "master.log", "I have been elected leader", 120, daemons[0])
        for n in (1, 2):
            work = root / f"worker{n}"
            work.mkdir()
            with (root / f"worker{n}.log").open("wb") as log:
                daemons.append(subprocess.Popen(
                    [spark_class, "org.apache.spark.deploy.worker.Worker", url,
                     "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                     "--webui-port", str(_free_port()), "--work-dir", str(work)],
                    stdout=log, stderr=subprocess.STDOUT, env=env))
            _wait_for(root / f"worker{n}.log", "Successfully registered with master", 120,
                      daemons[-1])
        yield url
    finally:
        for daemon in daemons:
            daemon.terminate()
        for daemon in daemons:
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logs")
    layout(root, "kafka-4.4-dev", SHARE_FILES, "__share_group_state")
    layout(root, "kafka-4.4-dev", OFFSET_FILES, "__consumer_offsets")
    return root


@dataclass
class Packing:
    """`make executor-env`'s command, running in `cwd` while the cluster starts."""

    cwd: Path
    process: subprocess.Popen[bytes]

    def done(self) -> Path:
        """Wait for it; the directory holding `dist/sharestate-env.tar.gz`."""
        out, _ = self.process.communicate(timeout=900)
        assert self.process.returncode == 0, out.decode("utf-8", "replace")[-3000:]
        assert (self.cwd / "dist" / "sharestate-env.tar.gz").is_file()
        return self.cwd


@pytest.fixture(scope="module")
def packing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Packing]:
    """Where the README's commands run: not the checkout. The packed environment is made
    there, by the command `make executor-env` runs (started first: it packs while the
    master and workers start)."""
    cwd = tmp_path_factory.mktemp("elsewhere")
    recipe = re.search(r"^executor-env:.*\n\t(.*)$", (PROJECT_ROOT / "Makefile").read_text(),
                       re.M)
    assert recipe is not None
    command = recipe.group(1).replace("$(BIN)/python", sys.executable)
    process = subprocess.Popen(command, shell=True, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        yield Packing(cwd, process)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _readme_script(lines: list[str]) -> str:
    """The README's lines after `make executor-env`, with the checkout's relative paths
    made absolute (they run elsewhere); `dist/` stays relative to where they run."""
    assert lines[0] == "make executor-env"
    checkout = f"{PROJECT_ROOT}/"
    script = ["set -euo pipefail"]
    for line in lines[1:]:
        line = re.sub(r"(?<![\w/.])\.venv/", f"{checkout}.venv/", line)
        script.append(re.sub(r"(?<![\w/.])pipelines/", f"{checkout}pipelines/", line))
    return "\n".join(script)


@pytest.fixture(scope="module")
def cluster_runs(packing: Packing, master: str, logs: Path) -> dict[str, Any]:
    """Both README submits (rs, then jvm) into warehouses of their own."""
    outside = packing.done()
    if not delta_jars().present:
        message = "Delta's pinned jars are not in the jar cache: run `make jars`"
        if under_ci():
            pytest.fail(message)
        pytest.skip(message)
    lines = readme_cluster_lines()
    submits = [line for line in lines if "spark-submit" in line]
    assert len(submits) == 2 and "--backend jvm" in submits[1]
    runs = {}
    for backend, submit in zip(("rs", "jvm"), submits, strict=True):
        warehouse = outside / f"warehouse-{backend}"
        script = _readme_script([lines[0], *[x for x in lines[1:] if x not in submits], submit])
        env = {k: v for k, v in os.environ.items()
               if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
        env |= {"SPARK_MASTER": master, "KAFKA_LOGS": str(logs), "WAREHOUSE": str(warehouse),
                "SPARK_LOCAL_IP": "127.0.0.1"}
        done = subprocess.run(["bash", "-c", script], cwd=outside, env=env, text=True,
                              capture_output=True, timeout=900)
        assert done.returncode in (0, 1), done.stderr[-4000:]
        runs[backend] = {"warehouse": warehouse, "stdout": done.stdout, "stderr": done.stderr}
    return runs


@pytest.fixture(scope="module")
def local_pure(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same log on `local[2]`, its executors told to run the pure-Python twins."""
    warehouse = tmp_path_factory.mktemp("local") / "wh"
    done = subprocess.run(
        [sys.executable, "-m", "sharestate.spark.run", "--source", str(logs), "--warehouse",
         str(warehouse), "--master", "local[2]", "--backend", "rs",
         "--conf", "spark.executorEnv.SHARESTATE_PURE_PYTHON=1",
         "--conf", "spark.ui.enabled=false"], capture_output=True, text=True, timeout=900)
    assert done.returncode in (0, 1), done.stderr[-4000:]
    return {"warehouse": warehouse, "stdout": done.stdout, "stderr": done.stderr}


def _commit_executors(spark: Any, warehouse: Path) -> set[str]:
    """What the ingest commits of `log_records` say the executors ran."""
    history = open_lake(spark, "rs").history(str(warehouse / "log_records"))
    return {str(c.metadata["executors"]) for c in history
            if isinstance(c.metadata, dict) and "executors" in c.metadata}


def test_executors_run_the_shipped_environment(spark: Any,
                                               cluster_runs: dict[str, Any]) -> None:
    for backend, run in cluster_runs.items():
        line = next(x for x in run["stdout"].splitlines() if x.startswith("executors "))
        assert line.startswith("executors native: sharestate from "), (backend, line)
        module = line.removeprefix("executors native: sharestate from ").split(" and ")[0]
        assert "/environment/" in module and str(PROJECT_ROOT) not in module, module
        assert "without its C extension" not in run["stderr"]
        assert _commit_executors(spark, run["warehouse"]) == {"native"}, backend


def test_cluster_tables_equal_the_local_run(spark: Any, cluster_runs: dict[str, Any],
                                            local_pure: dict[str, Any]) -> None:
    reference = _without_build(snapshot(spark, local_pure["warehouse"]))
    assert len(reference) >= 12
    for backend, run in cluster_runs.items():
        tables = _without_build(snapshot(spark, run["warehouse"]))
        assert sorted(tables) == sorted(reference), backend
        for name in reference:
            assert tables[name] == reference[name], (backend, name)


def _without_build(tables: dict[str, Any]) -> dict[str, Any]:
    """`replay_state`'s and `lag_state`'s rows without the fingerprints of the code that
    made them (the rows' `code`, and the core's in a `replay_state` row's `state`): they name
    the executors' build (the C extension's sources, or none), native on the cluster, pure
    here; a run on the other build replays and walks from the start, as it should."""
    for name in ("replay_state", "lag_state"):
        rows = [json.loads(row) for row in tables[name]["rows"]]
        for row in rows:
            assert re.fullmatch("[0-9a-f]{64}", row.pop("code"))
            if name == "replay_state":
                row["state"], found = re.subn("[0-9a-f]{64}(?![0-9a-f])", "<build>",
                                              row["state"])
                assert found == 1
        tables[name]["rows"] = sorted(json.dumps(row, sort_keys=True) for row in rows)
    return tables


def test_a_pure_python_executor_says_so(spark: Any, local_pure: dict[str, Any]) -> None:
    assert "executors pure: sharestate from " in local_pure["stdout"]
    assert "every executor run" in local_pure["stderr"]
    assert "without its C extension" in local_pure["stderr"]
    assert _commit_executors(spark, local_pure["warehouse"]) == {"pure"}


def test_the_readme_submit_on_a_local_master_stops_before_any_work(
        logs: Path, tmp_path: Path) -> None:
    """The README's submit with `--master local[2]`: a local master runs the Python workers
    on this machine, where `--archives` unpacks no `./environment/`; its first Spark job
    failed (`Cannot run program "./environment/bin/python"`, exit 70). Now it stops before
    any work with one line saying a local master needs no archive, exit 2."""
    lines = readme_cluster_lines()
    submit = next(line for line in lines if "spark-submit" in line)
    (tmp_path / "dist").mkdir()
    subprocess.run(["tar", "czf", "dist/sharestate-env.tar.gz", "-C", str(logs), "."],
                   cwd=tmp_path, check=True)  # any archive: a local master never unpacks it
    warehouse = tmp_path / "warehouse"
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env |= {"SPARK_MASTER": "local[2]", "KAFKA_LOGS": str(logs), "WAREHOUSE": str(warehouse),
            "SPARK_LOCAL_IP": "127.0.0.1"}
    script = _readme_script([lines[0], *[x for x in lines[1:] if "spark-submit" not in x],
                             submit])
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=600)
    output = done.stdout + done.stderr  # spark-submit passes the driver's stderr to stdout
    errors = [line for line in output.splitlines() if line.startswith("sharestate")]
    assert done.returncode == 2 and len(errors) == 1, output[-4000:]
    assert errors[0] == (
        "sharestate: error: PYSPARK_PYTHON ./environment/bin/python is not a program on this "
        "machine, where a local[2] master runs the Python workers: --archives unpacks "
        "environment/ for a cluster's executors only; a local master needs no archive: point "
        f"PYSPARK_PYTHON at a Python with sharestate here, such as {PROJECT_ROOT}/.venv/bin/"
        "python"), errors
    assert "Traceback" not in output and not warehouse.exists()
