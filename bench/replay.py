"""Decode + replay throughput (one core) and peak memory, on Kafka's 250k-record segment and a
simulated multi-million-record log.

Each measurement runs in a fresh subprocess so its peak RSS is its own. The simulated log is
generated once into `bench/.cache/` (override the size with `--records`). The last line
printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from common import ROOT, large_segment

CACHE = ROOT / "bench" / ".cache"


def measure(paths: list[str]) -> dict[str, float]:
    """Replay every share-state partition under `paths`, best of 3; rate and peak RSS."""
    from sharestate.log import discover
    from sharestate.replay.logs import partition_logs
    from sharestate.replay.share_log import replay_share_log
    from sharestate.runtime import quiet_gc

    quiet_gc()  # as the CLI and the pipeline's tasks run
    logs = [log for log in partition_logs(discover(paths))[0]
            if log.topic == "__share_group_state"]
    best = 0.0
    records = 0
    for _ in range(3):
        start = time.perf_counter()
        records = sum(replay_share_log(log).records for log in logs)
        best = max(best, records / (time.perf_counter() - start))
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"records": records, "records_per_s": round(best), "peak_rss_mb": round(peak_mb, 1)}


def in_subprocess(paths: list[str]) -> dict[str, float]:
    output = subprocess.run([sys.executable, __file__, "--measure", *paths], check=True,
                            capture_output=True, text=True, cwd=ROOT / "bench").stdout
    result: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return result


def simulated(records: int, state_partitions: int = 3, segment_bytes: int | None = None
              ) -> Path:
    """A simulated log of `records` share-state records over `state_partitions` partitions
    of `__share_group_state` (generated once, then reused; `segment_bytes`: its segment
    size, default the simulator's)."""
    from sharestate.simulate import SimulationConfig, simulate

    root = CACHE / (f"sim-{records}-p{state_partitions}"
                    + ("" if segment_bytes is None else f"-s{segment_bytes}"))
    if not (root / ".complete").exists():
        if root.exists():
            import shutil

            shutil.rmtree(root)
        config = SimulationConfig(records=records, seed=11, groups=5, topics=5, partitions=4,
                                  state_partitions=state_partitions)
        if segment_bytes is not None:
            config = replace(config, segment_bytes=segment_bytes)
        simulate(config, root)
        (root / ".complete").touch()
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5_000_000,
                        help="size of the simulated log (default %(default)s)")
    parser.add_argument("--state-partitions", type=int, default=8,
                        help="its __share_group_state partitions (default %(default)s, as "
                             "bench/pipeline.py, so both share the generated log)")
    parser.add_argument("--measure", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        segment = Path(tmp) / "share_replay_large.log"
        segment.write_bytes(large_segment())
        fixture = in_subprocess([str(segment)])
    big = in_subprocess([str(simulated(args.records, args.state_partitions))])
    figures = {
        "replay_records_per_s": fixture["records_per_s"],
        "peak_rss_mb": fixture["peak_rss_mb"],
        "simulated_records": big["records"],
        "simulated_replay_records_per_s": big["records_per_s"],
        "simulated_peak_rss_mb": big["peak_rss_mb"],
    }
    for name, value in figures.items():
        print(f"{name:>32}: {value}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
