"""The SparkSession builder: layered settings, conf file, Delta wiring, a real session."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sharestate.spark.class_archive import JAVA_OPTIONS
from sharestate.spark.session import (
    CONF_FILE_ENV,
    DEFAULT_CONF_FILE,
    DELTA_CATALOG,
    DELTA_EXTENSION,
    JIT_SETTING,
    LEAN_HEAP,
    QUICK_JIT,
    REPO_ROOT,
    SESSION_ZONE,
    SettingError,
    check_worker_python,
    conf_file_path,
    delta_jars_present,
    driver_java_options,
    driver_jit,
    read_conf_file,
    resolve_conf,
    with_delta,
)


@pytest.fixture
def conf_file(tmp_path: Path) -> Path:
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# comment\n\nspark.sql.shuffle.partitions   3\n"
                    "spark.driver.memory=1g\nspark.app.name  from-file\n")
    return path


def test_conf_file_format(conf_file: Path, tmp_path: Path) -> None:
    assert read_conf_file(conf_file) == {"spark.sql.shuffle.partitions": "3",
                                         "spark.driver.memory": "1g",
                                         "spark.app.name": "from-file"}
    bad = tmp_path / "bad.conf"
    bad.write_text("lonely-key\n")
    with pytest.raises(SettingError, match=r"bad.conf:1: expected 'key value'"):
        read_conf_file(bad)


def test_conf_file_lookup(conf_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONF_FILE_ENV, raising=False)
    assert conf_file_path() == (DEFAULT_CONF_FILE if DEFAULT_CONF_FILE.is_file() else None)
    monkeypatch.setenv(CONF_FILE_ENV, str(conf_file))
    assert conf_file_path() == conf_file
    with pytest.raises(SettingError, match="not found"):
        conf_file_path(conf_file.with_name("missing.conf"))


def test_settings_are_layered(conf_file: Path) -> None:
    settings = resolve_conf(conf_file=conf_file)
    assert settings["spark.master"] == "local[2]"
    assert settings["spark.sql.session.timeZone"] == "UTC"
    assert settings["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert settings["spark.sql.shuffle.partitions"] == "3"  # file over defaults
    assert settings["spark.driver.host"] == "127.0.0.1"  # local master
    assert "spark.executorEnv.PYTHONPATH" not in settings  # workers import the installed package
    assert "spark.ui.enabled" not in settings
    layered = resolve_conf({"spark.driver.memory": "3g"}, conf_file=conf_file,
                           launched={"spark.sql.shuffle.partitions": "7",
                                     "spark.driver.memory": "5g"},
                           app_name="job", ui=False)
    assert layered["spark.sql.shuffle.partitions"] == "7"  # spark-submit over file
    assert layered["spark.driver.memory"] == "3g"  # explicit conf over spark-submit
    assert layered["spark.app.name"] == "job" and layered["spark.ui.enabled"] == "false"
    remote = resolve_conf(conf_file=conf_file, master="yarn",
                          conf={"spark.executorEnv.PYTHONPATH": "/x"})
    assert "spark.driver.host" not in remote and remote["spark.executorEnv.PYTHONPATH"] == "/x"
    # Delta's log replay in a few tasks on a cluster too (its 50 took 20-25 s a read there)
    assert remote["spark.databricks.delta.snapshotPartitions"] == "4"
    assert resolve_conf(conf_file=conf_file, launched={
        "spark.master": "spark://h:7077", "spark.databricks.delta.snapshotPartitions": "50",
    })["spark.databricks.delta.snapshotPartitions"] == "50"  # spark-submit's own wins
    local = resolve_conf(conf_file=conf_file, conf={"spark.executorEnv.PYTHONPATH": "/x"})
    assert local["spark.executorEnv.PYTHONPATH"] == "/x"  # the user's, as given


def test_delta_wiring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert delta_jars_present({"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"})
    assert delta_jars_present({"spark.jars": "/opt/a.jar,/opt/delta-spark_2.13-4.0.0.jar"})
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "delta-spark_2.13-4.0.0.jar").touch()
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert delta_jars_present({})
    wired = with_delta({"spark.sql.extensions": "com.example.Ext"})
    assert wired["spark.sql.extensions"] == f"com.example.Ext,{DELTA_EXTENSION}"
    assert wired["spark.sql.catalog.spark_catalog"] == DELTA_CATALOG
    assert with_delta(wired) == wired


def test_driver_jit_is_quick_only_where_the_caller_asks_on_a_local_master(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    local = {"spark.master": "local[2]", "spark.sharestate.classArchive": "off"}
    assert driver_jit(local, lean_driver=True) == "quick"
    assert driver_jit(local, lean_driver=False) == "full"  # reports: long queries in the JVM
    assert driver_jit({**local, "spark.master": "spark://h:7077"}, lean_driver=True) == "full"
    # either backend: the executors write the files, the JVM plans and commits
    assert driver_jit({**local, "spark.sharestate.lake.backend": "jvm"}, True) == "quick"
    assert driver_jit({**local, "spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"},
                      lean_driver=True) == "quick"
    assert driver_jit({**local, JIT_SETTING: "full"}, lean_driver=True) == "full"
    assert driver_jit({**local, JIT_SETTING: "quick"}, lean_driver=False) == "quick"
    with pytest.raises(SettingError, match="quick or full"):
        resolve_conf({JIT_SETTING: "fast"})

    lean = " ".join((QUICK_JIT, *LEAN_HEAP))
    assert driver_java_options(local, lean_driver=True) == lean
    assert driver_java_options(local, lean_driver=False) is None
    assert driver_java_options({**local, "spark.master": "spark://h:7077"}, True) is None
    assert driver_java_options({**local, JAVA_OPTIONS: "-Xss4m"}, True) == f"-Xss4m {lean}"
    for own in ("-XX:TieredStopAtLevel=4", "-XX:-TieredCompilation"):  # the user's choice wins
        assert driver_java_options({**local, JAVA_OPTIONS: own}, lean_driver=True) == \
            f"{own} {' '.join(LEAN_HEAP)}"
    collector, initial = LEAN_HEAP  # a collector or initial heap of the user's wins
    for own, added in (("-XX:+UseG1GC", initial), ("-XX:+UseParallelGC -Xms1g", ""),
                       ("-XX:InitialHeapSize=256m", collector)):
        assert driver_java_options({**local, JAVA_OPTIONS: own}, True) == \
            f"{own} {QUICK_JIT} {added}".strip()
    zoned = {**local, SESSION_ZONE: "Asia/Kolkata"}  # Delta's TIMESTAMP AS OF reads the JVM's
    assert driver_java_options(zoned, lean_driver=False) == "-Duser.timezone=Asia/Kolkata"
    assert driver_java_options({**zoned, JAVA_OPTIONS: "-Duser.timezone=UTC"}, False) is None


def test_a_local_masters_workers_need_their_python_here(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """A local master runs the Python workers on this machine, from this folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYSPARK_PYTHON", "./environment/bin/python")
    shipped = {"spark.master": "local[2]",
               "spark.archives": "file:///x/dist/sharestate-env.tar.gz#environment"}
    with pytest.raises(SettingError, match=r"^PYSPARK_PYTHON \./environment/bin/python is not "
                                           r"a program on this machine, where a local\[2\] "
                                           r"master runs the Python workers: --archives "
                                           r"unpacks environment/ for a cluster's executors"):
        check_worker_python(shipped)
    with pytest.raises(SettingError, match=r"master runs the Python workers$"):
        check_worker_python({"spark.master": "local", "spark.pyspark.python": "./nowhere/py"})
    check_worker_python({**shipped, "spark.master": "spark://h:7077"})  # unpacked there
    check_worker_python({**shipped, "spark.master": "local-cluster[2,1,1024]"})  # likewise
    check_worker_python({**shipped, "spark.pyspark.python": sys.executable})
    (tmp_path / "environment" / "bin").mkdir(parents=True)
    (tmp_path / "environment" / "bin" / "python").symlink_to(sys.executable)
    check_worker_python(shipped)  # there after all


JIT_PROBE = """
import sys
from pyspark.sql import SparkSession
from sharestate.spark import run
run.run(run.parser().parse_args(["--warehouse", sys.argv[1], "--backend", "rs",
                                         "--conf", "spark.ui.enabled=false"]), ())
jvm = SparkSession.getActiveSession().sparkContext._jvm
print(" ".join(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()))
"""


@pytest.mark.slow
def test_the_pipeline_runs_a_lean_driver(tmp_path: Path) -> None:
    """The pipeline's JVM: the quick JIT, the serial collector from a small heap."""
    done = subprocess.run([sys.executable, "-c", JIT_PROBE, str(tmp_path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=True)
    assert {QUICK_JIT, *LEAN_HEAP} <= set(done.stdout.split())


BUILT_PROBE = """
import json, os, sys
from sharestate.spark.session import build_session

spark = build_session("test-session", conf_file=sys.argv[1], ui=False,
                      conf={"spark.sql.shuffle.partitions": "5"})


def probe(batches):
    import sys

    import pyarrow as pa

    import sharestate.spark.session

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"python": [sys.executable],
                                      "module": [sharestate.spark.session.__file__]})


row = spark.range(1).mapInArrow(probe, "python string, module string").collect()[0]
names = ["spark.sql.session.timeZone", "spark.sql.shuffle.partitions", "spark.app.name",
         "spark.sql.execution.arrow.pyspark.enabled", "spark.sharestate.lake.backend",
         "spark.ui.enabled", "spark.sql.extensions"]
bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({"conf": {name: spark.conf.get(name, None) for name in names},
                  "master": spark.sparkContext.master,
                  "jvm": list(bean.getInputArguments()), "worker_python": row.python,
                  "worker_module": row.module, "pyspark_python": os.environ["PYSPARK_PYTHON"]}))
"""


@pytest.mark.slow
def test_built_session(tmp_path: Path) -> None:
    """A session built in a JVM of its own (the conf file and settings are the JVM's)."""
    conf_file = tmp_path / "spark-defaults.conf"
    conf_file.write_text("spark.sql.shuffle.partitions 3\nspark.sharestate.lake.backend rs\n")
    done = subprocess.run([sys.executable, "-c", BUILT_PROBE, str(conf_file)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=True)
    built = json.loads(done.stdout.splitlines()[-1])
    conf = built["conf"]
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.shuffle.partitions"] == "5"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.sharestate.lake.backend"] == "rs"
    assert conf["spark.app.name"] == "test-session"
    assert conf["spark.ui.enabled"] == "false"
    assert built["master"] == "local[2]"
    assert DELTA_EXTENSION not in (conf["spark.sql.extensions"] or "")
    assert QUICK_JIT not in built["jvm"]  # queries: the JVM's full JIT
    assert Path(built["worker_module"]) == REPO_ROOT / "sharestate" / "spark" / "session.py"
    assert Path(built["worker_python"]).resolve() == Path(built["pyspark_python"]).resolve()
