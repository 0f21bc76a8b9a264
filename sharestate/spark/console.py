"""What a Spark command shows on the terminal: sharestate's own phase lines, and Spark's
console output only when asked for.

A command of several phases (`run`, `demo`) prints one line on stderr as each begins, once
its arguments and the warehouse lease are checked (`[sharestate] ingest`), on a terminal or
not: a phase lasts seconds to minutes, so a log gets a handful of lines, and no line is
ever rewritten. While a phase or another long operation (`report`, `quality`,
`executor_env`, `maintain`, a `sql` statement such as VACUUM) works, a terminal gets a
heartbeat every `HEARTBEAT_SECONDS` (`[sharestate] ingest: still working (40 s)`); a log
does not.
Results stay on stdout; errors are `sharestate: error: ...` lines.

A JVM that `build_session` starts itself is quiet unless `spark.sharestate.verbose` is
true (`--verbose`): it logs with `log4j2.properties` beside this module (Spark's layout at
WARN, without Spark's start-up banner and two notices no one can act on), draws no stage
progress bars and serves no web UI (unless the settings say otherwise), and its stderr
passes through a filter that drops the JDK's one-line notices that Spark's launcher loaded
an incubator module and that options came from JAVA_TOOL_OPTIONS or _JAVA_OPTIONS.
Everything else the JVM and its Python workers write to stderr (warnings, errors,
tracebacks) still comes through. Verbose, the JVM keeps Spark's own defaults and writes to
stderr directly. A JVM started by spark-submit is the caller's: its logging is left as
launched.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from sharestate.arguments import VERBOSE_CONF

LOG4J_PROPERTIES = Path(__file__).with_name("log4j2.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
# Spark's web UI too: a second Spark on the machine makes it warn that port 4040 is taken.
QUIET: Mapping[str, str] = {"spark.ui.showConsoleProgress": "false", "spark.ui.enabled": "false"}
# What the JVMs (Spark's launcher's, then Spark's) write before any logger exists: the JDK's
# notice that Spark's launcher added jdk.incubator.vector (--add-modules), printed on every
# start, and its echo of the options taken from the environment (JAVA_TOOL_OPTIONS, set
# machine-wide on some hosts, and _JAVA_OPTIONS).
DROPPED_LINES = (b"WARNING: Using incubator modules: ", b"Picked up JAVA_TOOL_OPTIONS: ",
                 b"Picked up _JAVA_OPTIONS: ")


HEARTBEAT_SECONDS = 10.0


@contextmanager
def phase(text: str) -> Iterator[None]:
    """A phase of the command: one progress line on stderr as it begins, and a heartbeat
    while it works."""
    print(f"[sharestate] {text}", file=sys.stderr, flush=True)
    with heartbeat(text):
        yield


@contextmanager
def heartbeat(what: str, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """While the block runs, `[sharestate] what: still working (N s)` on stderr every `every`
    seconds, when stderr is a terminal (nothing otherwise)."""
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without a file, or closed
        terminal = False
    if not terminal:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            try:
                print(f"[sharestate] {what}: still working ({time.monotonic() - start:.0f} s)",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):  # stderr is gone: nothing more to say
                return

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def verbose(settings: Mapping[str, str]) -> bool:
    """Whether `spark.sharestate.verbose` asks for Spark's own console output."""
    return settings.get(VERBOSE_CONF, "false").strip().lower() == "true"


@contextmanager
def jvm_logging_off(spark: SparkSession) -> Iterator[None]:
    """The JVM's logging off for a block, and back at its level before after it: a session
    the process goes on using (the API's, a notebook's, the tests') keeps its logging."""
    root = spark._jvm.org.apache.logging.log4j.LogManager.getRootLogger()  # type: ignore[union-attr]
    level = str(root.getLevel().toString())
    spark.sparkContext.setLogLevel("OFF")
    try:
        yield
    finally:
        spark.sparkContext.setLogLevel(level)


def quiet_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """`settings` for a JVM this process starts: unless verbose, no progress bars and no
    web UI (unless set) and sharestate's log4j2 profile (unless the Java options name one)."""
    quiet = dict(settings)
    if verbose(settings):
        return quiet
    for key, value in QUIET.items():
        quiet.setdefault(key, value)
    options = quiet.get(JAVA_OPTIONS, "")
    if "log4j" not in options:
        quiet[JAVA_OPTIONS] = f"{options} -Dlog4j2.configurationFile={LOG4J_PROPERTIES}".strip()
    return quiet


FIRST_CALL_IMPORT = "pyspark.testing.utils"
"""What PySpark imports on the first call into the JVM (its numpy converter asks the
testing module whether numpy is there, and that imports pandas): 0.16 s of a session's
start, overlapped with the JVM's own when imported beside it."""


def launch_jvm(settings: Mapping[str, str]) -> None:
    """Start the JVM the next SparkContext uses, with `settings` on spark-submit's command
    line, its stderr filtered unless verbose (nothing to do when a JVM already runs)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or verbose(settings):
        return
    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    # imported while the JVM starts, not on the first call into it, which waits for it
    threading.Thread(target=importlib.import_module, args=(FIRST_CALL_IMPORT,),
                     name="warm-imports", daemon=True).start()
    gateway = launch_gateway(conf,  # type: ignore[no-untyped-call]
                             popen_kwargs={"stderr": subprocess.PIPE})
    stderr = gateway.proc.stderr
    threading.Thread(target=_forward, args=(stderr,), name="jvm-stderr", daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def _forward(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to ours, line by line, less `DROPPED_LINES`. It reads to the
    end whatever happens to our stderr: a JVM whose stderr pipe fills up would stall."""
    with stream:
        for line in stream:
            if line.startswith(DROPPED_LINES):
                continue
            left = memoryview(line)
            try:
                while left:
                    left = left[os.write(2, left):]
            except OSError:  # our stderr is gone: the line is lost, the JVM goes on
                pass
