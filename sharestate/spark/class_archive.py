"""A class-data-sharing archive that makes a local Spark JVM start faster.

Most of a local session's start is the JVM loading and verifying Spark's classes: 7.5 s on
the development machine, 4 s with the archive (and the first query 1.2 s instead of 2.6 s).
Java 13+ dumps the classes a run loaded into an archive (`-XX:ArchiveClassesAtExit`) and
maps it at later starts (`-XX:SharedArchiveFile`). `create` runs the pipeline once on a
small simulated log with the dump on, in a child process, waits for that JVM to exit and
moves the archive into place; `build_session` adds it to the options of a JVM it starts
itself (a local master, not spark-submit) when it exists for this Spark and this Java.
The file lives in the user's cache folder (`$SHARESTATE_CACHE_DIR`, else
`$XDG_CACHE_HOME/sharestate`, else `~/.cache/sharestate`) and its name carries the Spark
release, its jars (where, size, time) and the Java build, so reinstalling either makes a
new one. A JVM that cannot map
an archive starts without it. `spark.sharestate.classArchive off` leaves it out.

    python -m sharestate.spark.class_archive          # create it (make install does)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from sharestate.jars import user_cache

SETTING = "spark.sharestate.classArchive"
"""`auto` (default: use the archive when it exists) or `off`."""
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_PID_LINE = "archiving-jvm"


def java_home() -> Path | None:
    """The Java installation Spark's launcher runs: `$JAVA_HOME`, else `java` on PATH."""
    if home := os.environ.get("JAVA_HOME"):
        return Path(home).resolve()
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def _java_build(home: Path) -> str | None:
    """The runtime version in the installation's `release` file, when Java is 13 or newer."""
    try:
        release = (home / "release").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = dict(line.split("=", 1) for line in release.splitlines() if "=" in line)
    version = fields.get("JAVA_RUNTIME_VERSION", fields.get("JAVA_VERSION", "")).strip('"')
    major = version.split(".")[0].split("+")[0]
    return version if major.isdigit() and int(major) >= 13 else None


def archive_path() -> Path | None:
    """Where the archive for this Spark release and Java build is (None: Java cannot)."""
    import pyspark

    home = java_home()
    build = _java_build(home) if home else None
    if home is None or build is None:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    # The JVM refuses an archive whose classpath jars moved or changed (size, time): a
    # reinstalled Spark gets a new archive.
    stamps = sorted((jar.name, jar.stat().st_size, jar.stat().st_mtime_ns)
                    for jar in jars.glob("*.jar"))
    key = hashlib.sha256(f"{pyspark.__version__}|{jars}|{stamps}|{home}|{build}".encode()
                         ).hexdigest()
    return user_cache() / f"spark-{pyspark.__version__}-classes-{key[:16]}.jsa"


def java_options(settings: Mapping[str, str]) -> str | None:
    """`spark.driver.extraJavaOptions` with the archive mapped, or None when it does not
    apply (switched off, missing, or the options name an archive already)."""
    current = settings.get(JAVA_OPTIONS, "")
    if settings.get(SETTING, "auto") == "off" or "SharedArchiveFile" in current \
            or "ArchiveClassesAtExit" in current:
        return None
    path = archive_path()
    if path is None or not path.is_file():
        return None
    return f"{current} -XX:SharedArchiveFile={path}".strip()


def create(records: int = 20_000) -> Path | None:
    """Make the archive unless it exists; its path (None: this Java cannot)."""
    from sharestate.simulate import demo_config, simulate

    path = archive_path()
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        simulate(demo_config(records, seed=1), Path(tmp) / "logs")
        child = subprocess.run(
            [sys.executable, "-m", "sharestate.spark.class_archive", "--dump", str(partial),
             str(Path(tmp) / "logs"), str(Path(tmp) / "warehouse")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False,
            timeout=600)
        # the pipe closes when the JVM (which writes to it too) has gone
        pids = [line.split()[1] for line in child.stdout.splitlines()
                if line.startswith(_PID_LINE)]
        jvm = pids[-1] if pids else ""
        if child.returncode != 0 or not jvm.isdigit():
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"the archiving run failed (exit {child.returncode})")
        _wait_for_exit(int(jvm))
        if not partial.is_file():
            return None
        os.replace(partial, path)
    return path


def _wait_for_exit(pid: int, timeout: float = 120.0) -> None:
    """Wait until process `pid` is gone (the JVM writes the archive as it exits)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def _dump(partial: str, logs: str, warehouse: str) -> None:
    """The child: run the pipeline with the dump on; print the JVM's pid last."""
    from sharestate.spark.run import parser, run
    from sharestate.spark.session import build_session

    spark = build_session("sharestate-class-archive", ui=False, conf={
        JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={partial}", SETTING: "off"})
    run(parser().parse_args(["--source", logs, "--warehouse", warehouse]),
        spark_factory=lambda *_, **__: spark)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    print(_PID_LINE, jvm.java.lang.ProcessHandle.current().pid(), flush=True)
    spark.stop()


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--dump":
        _dump(*sys.argv[2:])
        return 0
    try:
        path = create()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:  # sessions start without
        print(f"class archive: not made ({exc}); Spark starts without it", file=sys.stderr)
        return 0
    print(f"class archive: {path}" if path else "class archive: this Java cannot make one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
