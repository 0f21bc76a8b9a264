"""End-to-end pipeline throughput on a simulated log, with 1 and 2 local cores, or on a
Spark cluster against 2 local cores.

Runs every job (ingest, decode, replay, analytics) on `local[1]` and on `local[2]` with
`spark.driver.memory=1g`, each in a fresh process into a fresh warehouse, and reports
records/s (share-state records of the input over the wall time of the run) and the peak RSS
of the driver (the JVM driver and its Python process). With `--repeat N` (default 3) the two
settings run N times, alternating so that a slow spell of a shared machine hits both, and
the median run of each counts. The simulated log (8 partitions of
`__share_group_state` by default, so replay has work for both cores) is generated once
into `bench/.cache/` (default 5,000,000 records). The last line printed is one JSON object.

With `--master spark://HOST:PORT` the runs are `spark-submit pipelines/run_all.py` onto that
master as the README says to run them (the packed executor environment, built once into
`bench/.cache/`, on `--archives`), against `local[2]`; the source and warehouse must be
paths the cluster's nodes read (here: the same machine).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from replay import simulated


def _tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENVIRONMENT = PROJECT_ROOT / "bench" / ".cache" / "sharestate-env.tar.gz"


def _command(source: Path, warehouse: Path, master: str) -> tuple[list[str], dict[str, str]]:
    """How a run on `master` starts: in-process jobs on a local master, spark-submit with
    the packed executor environment on a cluster."""
    settings = ["--conf", "spark.driver.memory=1g", "--conf", "spark.ui.enabled=false"]
    if master.startswith("local["):
        cores = int(master[6:-1])
        return ([sys.executable, "-m", "sharestate.spark.run", "--source", str(source),
                 "--warehouse", str(warehouse), "--master", master, *settings,
                 "--conf", f"spark.sql.shuffle.partitions={cores * 2}"], dict(os.environ))
    env = {**os.environ, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYSPARK_PYTHON": "./environment/bin/python"}
    return ([str(Path(sys.executable).parent / "spark-submit"), "--master", master,
             "--archives", f"{ENVIRONMENT}#environment", *settings,
             str(PROJECT_ROOT / "pipelines" / "run_all.py"), "--source", str(source),
             "--warehouse", str(warehouse)], env)


def run_once(source: Path, master: str) -> tuple[float, float]:
    """(seconds, peak driver RSS in MB) of one whole-pipeline run on `master`."""
    with tempfile.TemporaryDirectory() as tmp:
        command, env = _command(source, Path(tmp) / "wh", master)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env)
        peak = 0.0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                # The driver is the Python process and its JVM; Python workers are executors.
                pids = [p for p in _tree(process.pid) if p == process.pid
                        or "java" in Path(f"/proc/{p}/comm").read_text(errors="ignore")]
                peak = max(peak, sum(_rss_mb(p) for p in pids))
                time.sleep(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        status = process.wait()
        done.set()
        sampler.join()
        seconds = time.perf_counter() - start
        if status not in (0, 1):
            raise SystemExit(f"pipeline run failed with status {status}: {' '.join(command)}")
        return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--state-partitions", type=int, default=8,
                        help="partitions of __share_group_state (Kafka's default is 50)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each setting, alternating; the median counts")
    parser.add_argument("--master", metavar="spark://HOST:PORT",
                        help="time spark-submit onto this cluster against local[2]")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.master is not None and not args.master.startswith("spark://"):
        parser.error("--master must be spark://HOST:PORT")
    source = simulated(args.records, args.state_partitions)
    shutil.rmtree(source / "_unused", ignore_errors=True)
    masters = ["local[1]", "local[2]"] if args.master is None else [args.master, "local[2]"]
    if args.master is not None and not ENVIRONMENT.is_file():
        from sharestate.spark.executor_env import pack

        pack(ENVIRONMENT)
    seconds: dict[str, list[float]] = {master: [] for master in masters}
    peak = 0.0
    for _ in range(args.repeat):
        for master in masters:
            wall, rss = run_once(source, master)
            print(f"{master}: {wall:.1f} s, peak driver RSS {rss:.0f} MB", file=sys.stderr)
            seconds[master].append(wall)
            peak = max(peak, rss)
    first, second = (statistics.median(seconds[master]) for master in masters)
    names = ("1core", "2cores") if args.master is None else ("cluster", "2cores")
    figures = {
        "records": args.records,
        **({} if args.master is None else {"master": args.master}),
        f"records_per_s_{names[0]}": round(args.records / first),
        f"records_per_s_{names[1]}": round(args.records / second),
        ("speedup_2_vs_1" if args.master is None else "cluster_vs_2cores"): round(
            first / second if args.master is None else second / first, 2),
        "peak_driver_rss_mb": round(peak, 1),
        "runs": args.repeat,
        f"seconds_{names[0]}": [round(s, 1) for s in seconds[masters[0]]],
        f"seconds_{names[1]}": [round(s, 1) for s in seconds[masters[1]]],
    }
    for name, value in figures.items():
        print(f"{name:>22}: {value}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
