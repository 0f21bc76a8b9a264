"""Every query of the SQL cookbook in one `sharestate sql` session on a demo warehouse, typed
at the prompt through a pseudo-terminal as a user would: the seconds to the prompt, then
each query's seconds from its last line to the next prompt, and the CPU seconds the session's
processes (Python, the JVM) spent on it, which tell the query's cost from the machine's load.

The warehouse is `sharestate demo`'s (200k records by default), made once into
`bench/.cache/` unless `--warehouse` names one. The last line printed is one JSON object
with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

sys.path.insert(0, str(ROOT / "tests"))
from terminal import Terminal  # type: ignore[import-not-found]  # tests/, on sys.path

from sharestate.app.sql_session import MORE, PROMPT

CACHE = ROOT / "bench" / ".cache"
COOKBOOK = ROOT / "docs" / "sql-cookbook.md"
TICKS = os.sysconf("SC_CLK_TCK")


def demo_warehouse(records: int) -> Path:
    """`sharestate demo`'s warehouse of `records` records (made once, then reused)."""
    root = CACHE / f"demo-{records}"
    if not (root / ".complete").exists():
        subprocess.run([sys.executable, "-m", "sharestate", "demo", "--records", str(records),
                        "--logs", str(root / "logs"), "--warehouse", str(root / "warehouse")],
                       check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        (root / ".complete").touch()
    return root / "warehouse"


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of `pid` and every process under it."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0.0)
        todo.extend(children.get(current, []))
    return total


def load() -> float:
    return os.getloadavg()[0]


def session(warehouse: Path, queries: list[str], conf: list[str]) -> dict[str, object]:
    """Open the prompt on `warehouse` (with `--conf` settings `conf`) and run `queries` in
    it."""
    with tempfile.TemporaryDirectory(prefix="sharestate-bench-") as home:
        env = {**os.environ, "TERM": "dumb", "HOME": home, "XDG_STATE_HOME": home}
        loads = [load()]
        started = time.monotonic()
        terminal = Terminal([sys.executable, "-m", "sharestate", "sql", "--warehouse",
                             str(warehouse), *(f"--conf={setting}" for setting in conf)], env)
        try:
            terminal.expect(PROMPT)
            opened = time.monotonic() - started
            opened_cpu = cpu_seconds(terminal.process.pid)
            seconds, cpu = [], []
            for query in queries:
                before = cpu_seconds(terminal.process.pid)
                printed, took = terminal.statement(query.strip() + ";", PROMPT, MORE.strip())
                if "sharestate: error" in printed:
                    raise SystemExit(f"query failed:\n{printed}")
                cpu.append(round(cpu_seconds(terminal.process.pid) - before, 2))
                seconds.append(round(took, 2))
                loads.append(load())
                print(f"query {len(seconds)}: {took:.2f} s (CPU {cpu[-1]:.2f} s), "
                      f"load {loads[-1]:.1f}", file=sys.stderr)
            terminal.type("\\q")
        finally:
            terminal.close()
    return {"prompt_s": round(opened, 2), "prompt_cpu_s": round(opened_cpu, 2),
            "query_s": seconds, "query_cpu_s": cpu,
            "load": [round(min(loads), 1), round(max(loads), 1)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=200_000,
                        help="records of the demo warehouse (default %(default)s)")
    parser.add_argument("--warehouse", type=Path,
                        help="a warehouse to query instead of the demo's")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session, as sharestate sql --conf")
    args = parser.parse_args()
    warehouse = args.warehouse or demo_warehouse(args.records)
    queries = re.findall(r"```sql\n(.*?)```", COOKBOOK.read_text("utf-8"), re.S)
    print(json.dumps({"warehouse": str(warehouse), "conf": args.conf,
                      **session(warehouse, queries, args.conf)}))


if __name__ == "__main__":
    main()
