"""Several calls of an entry point (`sharestate.spark.run.main`, `sharestate.app.cli.main`)
in one Python process of their own, in order: one JVM for all of them, started with the
settings the first call asks for (the `jvm` backend's Delta jars, which the test process's
JVM lacks). The calls after the first join its session, as a second `main` in a
spark-submit'ed script would, with an empty session catalog, as in a process of their own
(`sharestate sql` registers the warehouse's tables there: as temporary views, or on the
`jvm` backend as external tables).

A step may instead be a program to run between two calls (`{"command": [...]}`, e.g. a
`mount`), and the process may be started through a launcher (e.g. `unshare -m`, so that
its mounts are its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CALLS = """import importlib, json, subprocess, sys
from pyspark.sql import SparkSession
main = importlib.import_module(sys.argv[1]).main
for argv in json.loads(sys.argv[2]):
    if isinstance(argv, dict):
        subprocess.run(argv["command"], check=True)
        continue
    status = main(argv)
    print(f"{sys.argv[3]} {status}", flush=True)
    session = SparkSession.getActiveSession()
    for table in session.catalog.listTables() if session is not None else []:
        if table.isTemporary:
            session.catalog.dropTempView(table.name)
        else:  # an external table (`sql` on jvm): its data stays
            session.sql(f"DROP TABLE `{table.name}`")
"""
EXIT = "one_process: exit"


@dataclass
class Calls:
    """What the calls did: each one's exit status, and the process's output."""

    statuses: list[int]
    stdout: str
    stderr: str


Step = Sequence[str] | Mapping[str, Sequence[str]]
"""A call's argv, or `{"command": argv}`: a program run between calls (it must succeed)."""


def call_in_one_process(module: str, argvs: Sequence[Step], *,
                        launcher: Sequence[str] = (), env: Mapping[str, str] | None = None
                        ) -> Calls:
    """Call `module.main(argv)` for each of `argvs`, in order, whatever each returns; the
    process is started as `*launcher, python, ...`, with `env` added to the environment."""
    steps = [{"command": list(a["command"])} if isinstance(a, Mapping) else list(a)
             for a in argvs]
    done = subprocess.run(
        [*launcher, sys.executable, "-c", CALLS, module, json.dumps(steps), EXIT],
        capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    statuses = [int(line.removeprefix(EXIT)) for line in done.stdout.splitlines()
                if line.startswith(EXIT)]
    calls = [a for a in argvs if not isinstance(a, Mapping)]
    assert len(statuses) == len(calls), done.stdout[-2000:] + done.stderr[-3000:]
    return Calls(statuses, done.stdout, done.stderr)
