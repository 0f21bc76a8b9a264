"""Shared helpers of the benchmarks: the fixture segment and a best-of timer."""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fixture_dir() -> Path:
    """The Kafka conformance fixtures (`SHARESTATE_CONFORMANCE_DIR`, default ../shared/fixtures)."""
    configured = os.environ.get("SHARESTATE_CONFORMANCE_DIR")
    return Path(configured) if configured else ROOT.parent / "shared" / "fixtures"


def large_segment() -> bytes:
    """The 250,000-record `share_replay_large` segment of Kafka 4.4, unpacked in memory."""
    path = fixture_dir() / "kafka-4.4-dev" / "share_replay_large.log.gz"
    if not path.is_file():
        raise SystemExit(f"benchmark input not found: {path} (set SHARESTATE_CONFORMANCE_DIR)")
    with gzip.open(path) as stream:
        return stream.read()


def best_rate(work: Callable[[], int], runs: int = 5) -> float:
    """Items per second of the fastest of `runs` calls (`work` returns its item count)."""
    best = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        items = work()
        best = max(best, items / (time.perf_counter() - start))
    return best
