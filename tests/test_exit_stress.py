"""A process that read Delta tables on the driver exits cleanly, every time.

The jobs read small tables on the driver (`Lake.read_arrow`: the replay job's last step
before it exits is one). delta-rs's default way to read them hands Arrow a file system
written in Python, so Arrow's I/O threads call into Python; one of them can still be
releasing a Python-owned buffer when the interpreter finalises, and then dies inside a C++
destructor: `terminate called without an active exception`, exit 134, after all the work
was done. The race is narrow, so this runs the exiting path many times, in fresh
interpreters, each ending like a job does: Python work that holds the GIL right up to the
interpreter's exit (which widens the window, as a longer tail of a real job would).
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

pytestmark = pytest.mark.slow

RUNS = 120
PARALLEL = 2
CHILD = """
import sys
from sharestate.lake.rs import read_table

for path in sys.argv[1:]:
    read_table(path)
sum(range(30_000_000))  # the job's tail, holding the GIL until the interpreter exits
"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Two small tables of several files each (partitioned, a few columns)."""
    root = tmp_path_factory.mktemp("exit-stress")
    paths = []
    for name, files in (("findings", 7), ("history", 3)):
        path = root / name
        for n in range(files):
            rows = 2_000
            write_deltalake(str(path), pa.table({
                "part": pa.array([n % 4] * rows, pa.int32()),
                "offset": pa.array(range(n * rows, (n + 1) * rows), pa.int64()),
                "rule": pa.array([f"rule-{i % 13}" for i in range(rows)]),
                "message": pa.array([f"message {i} of file {n}" for i in range(rows)])}),
                partition_by=["part"], mode="append")
        paths.append(str(path))
    return paths


def _exit_status(paths: list[str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", CHILD, *paths], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent.parent)
    return done.returncode, done.stderr[-500:]


def test_reading_tables_then_exiting_never_aborts(tables: list[str]) -> None:
    with ThreadPoolExecutor(PARALLEL) as pool:
        outcomes = list(pool.map(_exit_status, [tables] * RUNS))
    failed = [(status, err) for status, err in outcomes if status != 0]
    assert not failed, (f"{len(failed)} of {RUNS} exits failed, e.g. exit {failed[0][0]}: "
                        f"{failed[0][1]}")
