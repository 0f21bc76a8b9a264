"""The one way to build a SparkSession for sharestate jobs.

`build_session()` layers settings, each layer overriding the one before it:

1. built-in defaults (`DEFAULTS`, plus `LOCAL_DEFAULTS` when the master is `local[...]`):
   `local[2]`, 4 shuffle partitions, 2g driver memory, Arrow for PySpark, session time zone
   UTC (a JVM it starts runs in the session's zone: `driver_java_options`), log level WARN,
   driver bound to 127.0.0.1, Delta's log replay in 4 partitions, on a local master
   Python workers importing the installed pyspark (`sharestate.spark.worker_daemon`),
   Python workers running this interpreter (which has sharestate installed; on a local
   master the one they are given must be a program here: `check_worker_python`);
2. the conf file: `conf/spark-defaults.conf` at the repository root, or the file named by
   `$SHARESTATE_SPARK_CONF`, or the `conf_file` argument. Spark's own format: one
   `key value` per line (whitespace or `=` between them), `#` starts a comment;
3. whatever the JVM was already started with — `spark-submit --conf ...` (the Airflow DAG,
   ad-hoc runs) or an already active session;
4. the `conf` argument (`--conf`-style `{"spark.key": "value"}`);
5. the keyword arguments `master`, `app_name` and `ui=False` (UI and console progress off,
   as tests want).

A JVM it starts itself maps the class archive of `sharestate.spark.class_archive` when one exists
(a faster start; `spark.sharestate.classArchive off` leaves it out). Where the caller asks
for a lean driver (`lean_driver=True`) on a local master, the JVM compiles with the quick
JIT only (`-XX:TieredStopAtLevel=1`) and keeps a heap the size of what it holds (the serial
collector from an initial heap of 64 MiB): the pipeline jobs, whose Python workers do the
work with either backend (both have the executors write the data files; the JVM plans,
reads and commits), where full optimisation and a parallel collector cost CPU that the
workers need; and `sharestate sql`, whose queries are short, so that C2's compilations cost
more CPU than they ever save. `spark.sharestate.driverJit` (`quick`, `full`) overrides the
JIT; a collector or initial heap named in `spark.driver.extraJavaOptions` wins over ours.

Unless `spark.sharestate.verbose` is true, a JVM it starts itself is quiet: no Spark banner,
no progress bars, its notices filtered (`sharestate.spark.console`).

It also raises the `py4j` logger to INFO: at DEBUG py4j logs every command sent to the JVM,
reader options — credentials among them — included.

Delta wiring (`delta=`): `"auto"` adds Delta's SQL extension and catalog when Delta's jars
are on the classpath (`spark.jars`, `spark.jars.packages`, `$SPARK_HOME/jars`, pyspark's
`jars/`); `"on"` always adds them (the jars must come from elsewhere); `"pip"` also calls
`delta.configure_spark_with_delta_pip`, which makes Spark fetch the jars from Maven at
start-up — only where Maven is reachable; `"off"` never wires Delta. A JVM started for the
`jvm` backend where no setting brings Delta's jars gets the pinned ones `make jars` keeps in
the cache (`sharestate.jars.delta_jars`; `auto` never reaches for them). The lake backend is
chosen later from the running session (`sharestate.lake.open_lake`), or fixed with the
`spark.sharestate.lake.backend` setting (`auto`, `rs`, `jvm`); a backend that cannot run
(an unknown name, `jvm` without Delta's classes) is a `SettingError` as soon as the session
exists.

Example::

    spark = build_session("bronze", conf={"spark.sql.shuffle.partitions": "8"})
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from sharestate import jars
from sharestate.lake.select import BACKEND_CONF, BACKENDS, BackendError, open_lake
from sharestate.spark import class_archive, console

DeltaMode = Literal["auto", "on", "off", "pip"]
JitMode = Literal["quick", "full"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONF_FILE = REPO_ROOT / "conf" / "spark-defaults.conf"
CONF_FILE_ENV = "SHARESTATE_SPARK_CONF"

SESSION_ZONE = "spark.sql.session.timeZone"
"""The zone Spark reads and writes times in; a JVM sharestate starts runs in it too."""
DEFAULTS: Mapping[str, str] = {
    "spark.master": "local[2]",
    "spark.app.name": "sharestate",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "2g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    SESSION_ZONE: "UTC",
    "spark.log.level": "WARN",
    # A file write whose tasks' rows are not sorted by the partition columns keeps a file
    # open per partition value (up to this many per task) instead of sorting every row
    # first: the pipeline's tasks each write a few partitions, and the sort cost the
    # jvm backend's writes a tenth of their time.
    "spark.sql.maxConcurrentOutputFileWriters": "16",
    # The jvm backend's Delta rebuilds a table's state from its log in this many tasks
    # before each read. A run's tables have logs of a few commits: Delta's default, 50
    # tasks of a few small files each, took 20-25 s a read on a standalone cluster of two
    # 1-core workers, where each task waits for an executor's core.
    "spark.databricks.delta.snapshotPartitions": "4",
}
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.daemon.module": "sharestate.spark.worker_daemon",
}
NO_UI: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


class SettingError(ValueError):
    """A bad setting (conf file, `spark.sharestate.*` value): the caller's bad argument."""


JIT_SETTING = "spark.sharestate.driverJit"
LAG_BIN_SETTING = "spark.sharestate.lagBinRows"
QUICK_JIT = "-XX:TieredStopAtLevel=1"
LEAN_HEAP = ("-XX:+UseSerialGC", "-Xms64m")
"""A lean driver's heap: the JVM's defaults start it at 1/64 of the machine's memory (384
MiB on 24 GiB) and G1 grows it with the allocation rate and adds its remembered sets (58
MiB), so the driver of `sharestate run` on a few megabytes peaked at 450-560 MB, and more on
a larger machine; the serial collector grows it with what is live (345-365 MB). Over 5 M
records with `spark.driver.memory=1g` the driver JVM peaked at 1.06-1.08 GB against
1.33-1.34 GB, in about the same wall time (see docs/benchmarks.md)."""

_CONF_LINE = re.compile(r"^([^\s=]+)\s*(?:=\s*|\s+)(.*)$")


_MASTER = re.compile(r"local(\[(?P<threads>[0-9]+|\*)(,\s*[0-9]+)?\])?"
                     r"|local-cluster\[[0-9]+,\s*[0-9]+,\s*[0-9]+\]|yarn|(spark|k8s)://\S+")
_BYTES = re.compile(r"[0-9]+([kmgtp]b?|b)?", re.IGNORECASE)
MEMORY_SETTINGS = ("spark.driver.memory", "spark.executor.memory", "spark.driver.memoryOverhead",
                   "spark.executor.memoryOverhead", "spark.executor.pyspark.memory",
                   "spark.driver.maxResultSize")
COUNT_SETTINGS = ("spark.sql.shuffle.partitions", "spark.default.parallelism",
                  "spark.driver.cores", "spark.executor.cores", "spark.task.cpus",
                  "spark.task.maxFailures")


def check_settings(settings: Mapping[str, str]) -> None:
    """Refuse values Spark would fail on later, with a stack, or ignore: the lake backend,
    the master, memory sizes (`512m`, `2g`), counts that must be positive."""
    backend = settings.get(BACKEND_CONF, "auto")
    if backend not in BACKENDS:
        raise SettingError(f"{BACKEND_CONF} must be one of {', '.join(BACKENDS)}, "
                           f"not {backend!r}")
    master = settings.get("spark.master", "")
    match = _MASTER.fullmatch(master)
    if match is None or match.group("threads") == "0":
        raise SettingError(f"spark.master {master!r} is not a Spark master (local, local[N], "
                           f"local[*], spark://host:port, yarn, k8s://...)")
    for key in MEMORY_SETTINGS:
        value = settings.get(key)
        if value is not None and not _BYTES.fullmatch(value.strip()):
            raise SettingError(f"{key} must be a size such as 512m or 2g, not {value!r}")
    for key in COUNT_SETTINGS:
        value = settings.get(key)
        if value is not None and not (value.strip().isdigit() and int(value) >= 1):
            raise SettingError(f"{key} must be a positive integer, not {value!r}")
    bins = settings.get(LAG_BIN_SETTING)
    if bins is not None and not bins.strip().isdigit():
        raise SettingError(f"{LAG_BIN_SETTING} must be a number of rows (0: always shuffle), "
                           f"not {bins!r}")


def read_conf_file(path: Path) -> dict[str, str]:
    """Parse a `spark-defaults.conf`-style file: `key value` lines, `#` comments."""
    settings: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _CONF_LINE.match(line)
        if match is None:
            raise SettingError(f"{path}:{number}: expected 'key value', got {line!r}")
        settings[match.group(1)] = match.group(2).strip()
    return settings


def conf_file_path(conf_file: str | Path | None = None) -> Path | None:
    """The conf file to read: the argument, `$SHARESTATE_SPARK_CONF`, else the repo's if any.

    A file named explicitly (argument or environment) must exist.
    """
    named = conf_file if conf_file is not None else os.environ.get(CONF_FILE_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise SettingError(f"Spark conf file not found: {path}")
        return path
    return DEFAULT_CONF_FILE if DEFAULT_CONF_FILE.is_file() else None


def resolve_conf(conf: Mapping[str, str] | None = None, *,
                 conf_file: str | Path | None = None,
                 launched: Mapping[str, str] | None = None,
                 master: str | None = None, app_name: str | None = None,
                 ui: bool = True) -> dict[str, str]:
    """The settings `build_session` applies, layered as the module docstring describes.

    `launched` holds the settings of an already running JVM (spark-submit); they win over
    the defaults and the conf file.
    """
    from_file = read_conf_file(path) if (path := conf_file_path(conf_file)) else {}
    explicit: dict[str, str] = {**(launched or {}), **(conf or {})}
    if master is not None:
        explicit["spark.master"] = master
    if app_name is not None:
        explicit["spark.app.name"] = app_name
    if not ui:
        explicit.update(NO_UI)
    settings = {**DEFAULTS, **from_file, **explicit}
    check_settings(settings)
    if settings.get(JIT_SETTING, "full") not in ("quick", "full"):
        raise SettingError(f"{JIT_SETTING} must be quick or full, not {settings[JIT_SETTING]!r}")
    if settings["spark.master"].startswith("local"):
        settings = {**LOCAL_DEFAULTS, **settings}
    return settings


ARCHIVE_SETTINGS = ("spark.archives", "spark.yarn.dist.archives")
"""Where spark-submit's `--archives` lands."""


def check_worker_python(settings: Mapping[str, str]) -> None:
    """On a `local` master the Python workers run on this machine, started from the current
    folder: their interpreter (`spark.pyspark.python`, else `$PYSPARK_PYTHON`) must be a
    program here. An environment shipped with `--archives` is unpacked for a cluster's
    executors only: given `./environment/bin/python`, a local master's first Spark job
    failed (`Cannot run program`). SettingError otherwise."""
    master = settings["spark.master"]
    if master != "local" and not master.startswith("local["):
        return
    where = "spark.pyspark.python" if settings.get("spark.pyspark.python") else "PYSPARK_PYTHON"
    python = settings.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
    if not python or shutil.which(python) is not None:
        return
    aliases = {entry.rpartition("#")[2] for key in ARCHIVE_SETTINGS
               for entry in settings.get(key, "").split(",") if "#" in entry}
    folder = Path(python).parts[0] if not Path(python).is_absolute() else None
    why = (f": --archives unpacks {folder}/ for a cluster's executors only; a local master "
           f"needs no archive: point {where} at a Python with sharestate here, such as "
           f"{sys.executable}" if folder in aliases else "")
    raise SettingError(f"{where} {python} is not a program on this machine, where a {master} "
                       f"master runs the Python workers{why}")


def delta_jars_present(settings: Mapping[str, str]) -> bool:
    """Whether Delta's jars will be on the classpath of a JVM started with `settings`."""
    if "io.delta:delta-spark" in settings.get("spark.jars.packages", ""):
        return True
    if any("delta-spark" in Path(jar).name for jar in settings.get("spark.jars", "").split(",")):
        return True
    import pyspark

    folders = [Path(pyspark.__file__).parent / "jars"]
    if spark_home := os.environ.get("SPARK_HOME"):
        folders.append(Path(spark_home) / "jars")
    return any(glob.glob(str(folder / "delta-spark_*.jar")) for folder in folders)


def with_pinned_delta(settings: Mapping[str, str]) -> dict[str, str]:
    """`settings`, plus the pinned Delta jars `make jars` fetched on `spark.jars` when the
    `jvm` backend is asked for and the settings bring Delta's jars from nowhere else."""
    wired = dict(settings)
    pinned = jars.delta_jars()
    if wired.get(BACKEND_CONF) != "jvm" or delta_jars_present(wired) or not pinned.present:
        return wired
    listed = [jar for jar in wired.get("spark.jars", "").split(",") if jar]
    wired["spark.jars"] = ",".join([*listed, *(str(path) for path in pinned.paths)])
    return wired


def with_delta(settings: Mapping[str, str]) -> dict[str, str]:
    """`settings` plus Delta's SQL extension (kept alongside any others) and catalog."""
    wired = dict(settings)
    extensions = [e for e in wired.get("spark.sql.extensions", "").split(",") if e]
    if DELTA_EXTENSION not in extensions:
        extensions.append(DELTA_EXTENSION)
    wired["spark.sql.extensions"] = ",".join(extensions)
    wired.setdefault("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
    return wired


def driver_jit(settings: Mapping[str, str], lean_driver: bool) -> JitMode:
    """The JIT a JVM started with `settings` gets: `spark.sharestate.driverJit` if set, else
    quick for a lean driver on a local master (the pipeline jobs, where the
    JVM plans, reads and commits while Python workers do the work: over 300 k records with
    the `jvm` backend, 40 and 71 s against 63 and 95 s with the full JIT, run in turns; and
    `sharestate sql`: the cookbook three times in one session on the demo warehouse took
    10.3, 6.5 and 6.2 CPU-s against 19.9, 12.8 and 11.2)."""
    chosen = settings.get(JIT_SETTING)
    if chosen is not None:
        return "quick" if chosen == "quick" else "full"
    return "quick" if lean_driver and _local(settings) else "full"


def _local(settings: Mapping[str, str]) -> bool:
    return settings["spark.master"].startswith("local")


def driver_java_options(settings: Mapping[str, str], lean_driver: bool) -> str | None:
    """`spark.driver.extraJavaOptions` for a JVM this process starts: the class archive
    mapped, the JIT chosen, a lean driver's heap on a local master (`LEAN_HEAP`) and the
    session's time zone as the JVM's own (None: nothing to add). Options the user set win.

    Delta resolves `TIMESTAMP AS OF` through the JVM's zone: where it is not the session's
    (the machine's TZ), a time literal, read in the session's, named another moment."""
    current = settings.get(class_archive.JAVA_OPTIONS, "")
    options = class_archive.java_options(settings) or current
    if driver_jit(settings, lean_driver) == "quick" and "Tiered" not in current:
        options = f"{options} {QUICK_JIT}".strip()
    if lean_driver and _local(settings):
        collector, initial = LEAN_HEAP
        if not re.search(r"-XX:\+Use\w*GC\b", current):
            options = f"{options} {collector}".strip()
        if not re.search(r"-Xms|InitialHeapSize", current):
            options = f"{options} {initial}".strip()
    if (zone := settings.get(SESSION_ZONE)) and "-Duser.timezone=" not in current:
        options = f"{options} -Duser.timezone={zone}".strip()
    return options if options != current else None


def _launched_settings() -> dict[str, str] | None:
    """Settings of a JVM that already runs (spark-submit or an active session), else None."""
    active = SparkContext._active_spark_context
    if active is not None:
        return dict(active.getConf().getAll())
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # started by spark-submit: the JVM exists
        SparkContext._ensure_initialized()
        return dict(SparkConf().getAll())
    return None


def build_session(app_name: str | None = None, *, master: str | None = None,
                  conf: Mapping[str, str] | None = None,
                  conf_file: str | Path | None = None,
                  delta: DeltaMode = "auto", ui: bool = True,
                  lean_driver: bool = False) -> SparkSession:
    """Build (or join) the SparkSession for a sharestate job; see the module docstring."""
    launched = _launched_settings()
    # spark-submit starts the JVM but not the SparkContext: static settings (Delta's SQL
    # extension and catalog) still apply then; once a context runs, they no longer can.
    running = SparkContext._active_spark_context is not None
    resolved = settings = resolve_conf(conf, conf_file=conf_file, launched=launched,
                                       master=master, app_name=app_name, ui=ui)
    if launched is None:
        # Before the JVM starts: its Python workers must run this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        if settings["spark.master"].startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        settings = console.quiet_settings(settings)
        if options := driver_java_options(settings, lean_driver):
            settings[class_archive.JAVA_OPTIONS] = options
        settings = with_pinned_delta(settings)
    else:
        settings = {k: v for k, v in settings.items() if launched.get(k) != v}
    check_worker_python(resolved)
    if delta in ("on", "pip") or (delta == "auto" and not running
                                  and delta_jars_present({**resolved, **settings})):
        settings = with_delta(settings)
    # py4j logs every command sent to the JVM at DEBUG, option values (credentials) included.
    if logging.getLogger("py4j").level < logging.INFO:
        logging.getLogger("py4j").setLevel(logging.INFO)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    if delta == "pip":
        from delta import configure_spark_with_delta_pip

        builder = configure_spark_with_delta_pip(builder)
    if launched is None:
        console.launch_jvm(builder._options)
    session = builder.getOrCreate()
    try:  # a backend that cannot run is a bad setting: say so now, before any work
        open_lake(session)
    except BackendError as exc:
        raise SettingError(str(exc)) from None
    return session
