"""Reading through damage: bytes per second of the reader where it must find the next batch.

Each case is a stream the reader walks to its end, timed in a process of its own (with a
time limit, so that a reader that cannot finish is reported as such):

- zeros: a batch, zero-filled bytes, a batch (zeros running to the end instead are a
  preallocated segment's unwritten tail, where the log ends);
- ones: a batch, 0x01 bytes (every position looks like a magic 1 entry), a batch;
- random: a batch, random bytes, a batch;
- fakes: a batch, one fake batch header repeated (every copy passes the cheap header
  checks and declares half the filler's length, so that checking each copy's CRC over
  its length would be quadratic), a batch;
- flipped: Kafka's 250,000-record segment with 3 bytes flipped -- resync through real
  record bytes after each damaged batch;
- flipped_gz: the same segment's `.log.gz` with 3 compressed bytes flipped, read as a
  segment file: the inflater often turns such damage into megabytes of garbage that looks
  like record bytes (shifted copies of earlier data) before its checksum fails.

The flipped cases run once per seed (`--seeds`, the flips differ) and report the slowest.
For each case: the bytes of the stream per second (best of `--runs`), the batches, records
and findings read. `--pure` runs without the C extension. The last line printed is one
JSON object with the figures.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import fixture_dir, large_segment

CASES = ("zeros", "ones", "random", "fakes", "flipped", "flipped_gz")
FLIPS = 3


def _batch(offset: int) -> bytes:
    from sharestate.log import RawRecord, build_batch

    return build_batch([RawRecord(offset, 1_700_000_000_000, -1, b"k", b"v", ())])


def _flipped(data: bytes, seed: int, start: int = 0) -> bytes:
    out = bytearray(data)
    rng = random.Random(seed)
    for _ in range(FLIPS):
        out[rng.randrange(start, len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _stream(case: str, mib: int, seed: int) -> bytes:
    size = mib << 20
    if case == "zeros":
        filler = bytes(size)
    elif case == "ones":
        filler = b"\x01" * size
    elif case == "random":
        filler = random.Random(seed).randbytes(size)
    elif case == "fakes":
        fake = struct.pack(">qiibIhiqqqhii", 0, size // 2, 0, 2, 0x12345678, 1, 0, 0, 0, -1,
                           -1, -1, 1) + b"\x1f\x8b"  # gzip, and the payload's magic
        filler = fake * (size // len(fake))
    else:
        return _flipped(large_segment(), seed)
    return _batch(0) + filler + _batch(1)


def measure(case: str, mib: int, runs: int, seed: int) -> dict[str, float | int]:
    """Read one case `runs` times in this process: the best rate and what was read."""
    from sharestate.log import Batch, LogFinding, discover, read_batches

    items: list[Batch | LogFinding] = []
    best = 0.0
    if case == "flipped_gz":
        source = fixture_dir() / "kafka-4.4-dev" / "share_replay_large.log.gz"
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "00000000000000000000.log.gz"
            path.write_bytes(_flipped(source.read_bytes(), seed, start=64))
            [segment] = discover([path])
            for _ in range(runs):
                started = time.perf_counter()
                with segment.open() as stream:
                    items = list(read_batches(stream))
                elapsed = time.perf_counter() - started
                size = sum(i.header.size_in_bytes if isinstance(i, Batch) else i.raw_length
                           for i in items)
                best = max(best, size / elapsed)
    else:
        data = _stream(case, mib, seed)
        size = len(data)
        for _ in range(runs):
            started = time.perf_counter()
            items = list(read_batches(io.BytesIO(data)))
            best = max(best, size / (time.perf_counter() - started))
    batches = [i for i in items if isinstance(i, Batch)]
    return {"bytes": size, "bytes_per_s": round(best),
            "batches": len(batches), "records": sum(len(b.records) for b in batches),
            "findings": len(items) - len(batches) + sum(len(b.findings) for b in batches)}


Figures = dict[str, float | int | str]


def in_subprocess(case: str, mib: int, runs: int, pure: bool, limit: float, seed: int
                  ) -> Figures:
    env = dict(os.environ, SHARESTATE_PURE_PYTHON="1" if pure else "0")
    try:
        done = subprocess.run([sys.executable, __file__, "--measure", case, "--mib", str(mib),
                               "--runs", str(runs), "--seed", str(seed)], env=env,
                              capture_output=True, text=True, timeout=limit, check=True)
    except subprocess.TimeoutExpired:
        return {"seed": seed, "timed_out_after_s": limit}
    figures: Figures = {"seed": seed, **json.loads(done.stdout.splitlines()[-1])}
    return figures


def slowest(case: str, args: argparse.Namespace) -> Figures:
    """The case's figures (the flipped ones: of the slowest seed, with every seed's rate)."""
    seeds = range(args.seeds) if case.startswith("flipped") else range(1)
    every = [in_subprocess(case, args.mib, args.runs, args.pure, args.limit, seed)
             for seed in seeds]
    worst = min(every, key=lambda f: float(f.get("bytes_per_s", -1)))
    if len(every) > 1:
        worst = {**worst, "rates_mb_per_s": json.dumps(
            [round(float(f["bytes_per_s"]) / 1e6, 1) if "bytes_per_s" in f else None
             for f in every])}
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measure", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--mib", type=int, default=64, help="MiB of filler (default 64)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--limit", type=float, default=300,
                        help="seconds a case may take before it counts as not finishing")
    parser.add_argument("--pure", action="store_true", help="without the C extension")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--seeds", type=int, default=8,
                        help="seeds (sets of flipped bytes) of the flipped cases")
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.mib, args.runs, args.seed)))
        return
    figures = {case: slowest(case, args) for case in args.cases}
    for case, found in figures.items():
        rate = found.get("bytes_per_s")
        shown = f"{rate / 1e6:10.1f} MB/s" if isinstance(rate, int) else f"{found}"
        print(f"{case:>12}: {shown}  {found}", file=sys.stderr)
    print(json.dumps({"native": not args.pure, "mib": args.mib, **figures}))


if __name__ == "__main__":
    main()
