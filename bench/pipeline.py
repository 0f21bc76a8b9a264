"""End-to-end pipeline throughput on a simulated log, with 1 and 2 local cores, or on a
Spark cluster against 2 local cores, on one Delta backend or both side by side.

Runs every job (ingest, decode, replay, analytics) on `local[1]` and on `local[2]` with
`spark.driver.memory=1g`, each in a fresh process into a fresh warehouse, and reports
records/s (share-state records of the input over the wall time of the run) and the peak RSS
of the driver (the JVM driver and its Python process). With `--repeat N` (default 3) the
settings run N times, alternating so that a slow spell of a shared machine hits them all,
and the median run of each counts. The simulated log (8 partitions of
`__share_group_state` by default, so replay has work for both cores) is generated once
into `bench/.cache/` (default 5,000,000 records). The last line printed is one JSON object.

`--backend rs jvm` runs each setting on both Delta backends (`jvm`: Spark's own Delta from
the pinned jars, `make jars`) and reports the ratio of their median wall times (jvm over
rs); `--cores 2` leaves out the 1-core runs.

With `--days N` it times incremental runs instead: a simulated log cut into N days by time
(about the same number of records a day, every partition), one warehouse fed a day at a
time — each day the log as it stood at the day's end (`sharestate.simulate.days`: closed
segments, the active one up to then), from day 3 on without the segments wholly before the
day before yesterday, as Kafka deletes what it pruned — and one run a day. It prints each
day's time and the last day's over the first's, then runs once over the whole log into a
fresh warehouse and says whether the two warehouses are equal, table by table and row by
row (the columns naming runs left out). `--maintain` feeds a second warehouse the same days,
each run followed by `sharestate maintain` (the DAG's default), the two runs of a day
back to back, and reports both series, the maintenance's own time and the two warehouses'
data files.

With `--master spark://HOST:PORT` the runs are `spark-submit pipelines/run_all.py` onto that
master as the README says to run them (the packed executor environment, built once into
`bench/.cache/`, on `--archives`; Delta's pinned jars on `--jars` for `jvm`), against
`local[2]`; the source and warehouse must be paths the cluster's nodes read (here: the same
machine).
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

from sharestate.arguments import BACKEND_CONF


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


def _is_java(pid: int) -> bool:
    try:
        return "java" in Path(f"/proc/{pid}/comm").read_text(errors="ignore")
    except OSError:  # gone since it was listed
        return False


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


def _command(source: Path, warehouse: Path, master: str, backend: str
             ) -> tuple[list[str], dict[str, str]]:
    """How a run on `master` starts: in-process jobs on a local master, spark-submit with
    the packed executor environment (and for `jvm` Delta's pinned jars) on a cluster."""
    settings = ["--conf", "spark.driver.memory=1g", "--conf", "spark.ui.enabled=false",
                "--conf", f"{BACKEND_CONF}={backend}"]
    job = ["--source", str(source), "--warehouse", str(warehouse)]
    if master.startswith("local["):
        cores = int(master[6:-1])
        return ([sys.executable, "-m", "sharestate.spark.run", *job, "--master", master,
                 *settings, "--conf", f"spark.sql.shuffle.partitions={cores * 2}"],
                dict(os.environ))
    from sharestate.jars import delta_jars

    env = {**os.environ, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYSPARK_PYTHON": "./environment/bin/python"}
    jars = ["--jars", ",".join(str(p) for p in delta_jars().paths)] if backend == "jvm" else []
    return ([str(Path(sys.executable).parent / "spark-submit"), "--master", master,
             "--archives", f"{ENVIRONMENT}#environment", *jars, *settings,
             str(PROJECT_ROOT / "pipelines" / "run_all.py"), *job], env)


def run_once(source: Path, master: str, backend: str = "rs",
             warehouse: Path | None = None) -> tuple[float, float]:
    """(seconds, peak driver RSS in MB) of one whole-pipeline run on `master` (into
    `warehouse`, default a fresh one)."""
    with tempfile.TemporaryDirectory() as tmp:
        command, env = _command(source, warehouse or Path(tmp) / "wh", master, backend)
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=env)
        peak = 0.0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                # The driver is the Python process and its JVM; Python workers are executors.
                pids = [p for p in _tree(process.pid) if p == process.pid or _is_java(p)]
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


RUN_COLUMNS = {"ingest_run", "run_id", "committed_at", "source"}
"""Columns that name the run that wrote a row, or where it read (they differ between the
warehouses: the daily one reads a folder of its own)."""
RUN_TABLES = {"ingest_runs", "log_start_offsets", "quality_results", "replay_state",
              "lag_state"}
"""Tables about the runs themselves."""


def tables_equal(left: Path, right: Path) -> list[str]:
    """The tables whose rows differ between two warehouses (run columns left out)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from sharestate.tables.spec import table_names

    def rows(warehouse: Path, name: str) -> list[str]:
        data = DeltaTable(str(warehouse / name)).to_pyarrow_table()
        data = data.drop_columns([c for c in data.column_names if c in RUN_COLUMNS])
        if name == "audit_findings":
            data = data.filter(pc.not_equal(data["rule"], "quality_gate"))
        return sorted(map(repr, data.to_pylist()))

    return [name for name in table_names() if name not in RUN_TABLES
            and rows(left, name) != rows(right, name)]


def _maintain(warehouse: Path) -> float:
    """Seconds `sharestate maintain` took on `warehouse`."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sharestate", "maintain", "--warehouse",
                    str(warehouse)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _data_files(warehouse: Path) -> int:
    """The Parquet data files under `warehouse` (removed ones not yet vacuumed included)."""
    return sum(1 for p in warehouse.rglob("*.parquet") if "_delta_log" not in p.parts)


def days_main(args: argparse.Namespace) -> None:
    """`--days`: one warehouse fed a day at a time against one run over every day."""
    from sharestate.simulate.days import day_ends, segments, write_day

    per_day = args.records // args.days
    root = simulated(per_day * args.days, args.state_partitions,
                     segment_bytes=args.segment_bytes)
    found = segments(root)
    ends = day_ends(found, args.days)
    master = "local[2]"
    times: list[float] = []
    kept: list[float] = []
    upkeep: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        source, warehouse = Path(tmp) / "source", Path(tmp) / "daily"
        maintained = Path(tmp) / "maintained"
        for day, end in enumerate(ends, start=1):
            write_day(found, root, source, end, ends[day - 3] if day >= 3 else None)
            wall, _ = run_once(source, master, warehouse=warehouse)
            times.append(wall)
            line = f"day {day}: {wall:.1f} s"
            if args.maintain:
                wall, _ = run_once(source, master, warehouse=maintained)
                kept.append(wall)
                upkeep.append(_maintain(maintained))
                line += f", maintained {kept[-1]:.1f} s (+ {upkeep[-1]:.1f} s maintain)"
            print(line, file=sys.stderr, flush=True)
        once = Path(tmp) / "once"
        run_once(root, master, warehouse=once)
        differing = tables_equal(warehouse, once)
        figures: dict[str, object] = {
            "days": args.days, "records_per_day": per_day,
            "seconds": [round(t, 1) for t in times],
            "last_over_first": round(times[-1] / times[0], 2),
            "equal_to_one_run": not differing, "differing_tables": differing}
        if args.maintain:
            differing = tables_equal(maintained, once)
            figures.update({
                "maintained_seconds": [round(t, 1) for t in kept],
                "maintained_last_over_first": round(kept[-1] / kept[0], 2),
                "maintain_seconds": [round(t, 1) for t in upkeep],
                "data_files": _data_files(warehouse),
                "maintained_data_files": _data_files(maintained),
                "maintained_equal_to_one_run": not differing,
                "maintained_differing_tables": differing})
    for name, value in figures.items():
        print(f"{name:>22}: {value}", file=sys.stderr)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=None,
                        help="records of the simulated log (default 5,000,000; with --days, "
                             "1,400,000)")
    parser.add_argument("--state-partitions", type=int, default=8,
                        help="partitions of __share_group_state (Kafka's default is 50)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each setting, alternating; the median counts")
    parser.add_argument("--master", metavar="spark://HOST:PORT",
                        help="time spark-submit onto this cluster against local[2]")
    parser.add_argument("--backend", nargs="+", choices=("rs", "jvm"), default=["rs"],
                        help="Delta backends to run, side by side (default: rs)")
    parser.add_argument("--cores", nargs="+", type=int, choices=(1, 2), default=[1, 2],
                        help="local cores to run with (default: 1 and 2)")
    parser.add_argument("--days", type=int, help="time daily incremental runs (see above)")
    parser.add_argument("--maintain", action="store_true",
                        help="with --days: also a warehouse maintained after each run")
    parser.add_argument("--segment-bytes", type=int, default=256 << 10,
                        help="segment size of the log --days splits (default %(default)s)")
    args = parser.parse_args()
    if args.maintain and args.days is None:
        parser.error("--maintain goes with --days")
    if args.days is not None:
        if args.days < 3:
            parser.error("--days must be at least 3")
        args.records = args.records or 1_400_000
        days_main(args)
        return
    args.records = args.records or 5_000_000
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.master is not None and not args.master.startswith("spark://"):
        parser.error("--master must be spark://HOST:PORT")
    if "jvm" in args.backend:
        from sharestate.jars import delta_jars

        if not delta_jars().present:
            parser.error("--backend jvm needs Delta's pinned jars: run `make jars`")
    source = simulated(args.records, args.state_partitions)
    shutil.rmtree(source / "_unused", ignore_errors=True)
    local = [f"local[{n}]" for n in sorted(set(args.cores))]
    masters = local if args.master is None else [args.master, "local[2]"]
    if args.master is not None and not ENVIRONMENT.is_file():
        from sharestate.spark.executor_env import pack

        pack(ENVIRONMENT)
    settings = [(master, backend) for master in masters for backend in args.backend]
    seconds: dict[tuple[str, str], list[float]] = {setting: [] for setting in settings}
    peak = 0.0
    for _ in range(args.repeat):
        for master, backend in settings:
            wall, rss = run_once(source, master, backend)
            print(f"{master} {backend}: {wall:.1f} s, peak driver RSS {rss:.0f} MB",
                  file=sys.stderr)
            seconds[master, backend].append(wall)
            peak = max(peak, rss)
    print(json.dumps(figures(args, masters, seconds, peak)))


def _name(master: str) -> str:
    return "cluster" if master.startswith("spark://") else f"{master[6:-1]}core" + (
        "s" if master != "local[1]" else "")


def figures(args: argparse.Namespace, masters: list[str],
            seconds: dict[tuple[str, str], list[float]], peak: float) -> dict[str, object]:
    """The figures of an invocation, printed one a line on stderr: records/s of each
    setting's median run (keys name the backend when several ran), the speed-ups of 2
    cores over 1 and of a cluster against `local[2]`, jvm's time over rs's, every run."""
    several = len(args.backend) > 1
    median = {setting: statistics.median(runs) for setting, runs in seconds.items()}
    out: dict[str, object] = {"records": args.records,
                              **({} if args.master is None else {"master": args.master})}
    for (master, backend), wall in median.items():
        suffix = f"_{backend}" if several else ""
        out[f"records_per_s_{_name(master)}{suffix}"] = round(args.records / wall)
    for backend in args.backend:
        suffix = f"_{backend}" if several else ""
        if args.master is not None:
            out[f"cluster_vs_2cores{suffix}"] = round(
                median["local[2]", backend] / median[args.master, backend], 2)
        elif len(masters) == 2:
            out[f"speedup_2_vs_1{suffix}"] = round(
                median["local[1]", backend] / median["local[2]", backend], 2)
    if several:
        for master in masters:
            out[f"jvm_vs_rs_{_name(master)}"] = round(
                median[master, "jvm"] / median[master, "rs"], 2)
    out["peak_driver_rss_mb"] = round(peak, 1)
    out["runs"] = args.repeat
    for (master, backend), runs in seconds.items():
        suffix = f"_{backend}" if several else ""
        out[f"seconds_{_name(master)}{suffix}"] = [round(s, 1) for s in runs]
    for name, value in out.items():
        print(f"{name:>26}: {value}", file=sys.stderr)
    return out


if __name__ == "__main__":
    main()
