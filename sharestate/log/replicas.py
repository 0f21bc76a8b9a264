"""One copy of each partition when the sources hold several: the replicas of a cluster.

Copying the `log.dirs` of every broker of a cluster gives each internal-topic partition once
per replica (`__share_group_state` and `__consumer_offsets` have three replicas by default).
Followers append the leader's batches as they are, so the copies hold the same records, each
up to where that replica had caught up; read together they would give every record once per
copy, and all but the first as offsets going back. So each partition is read from one copy:
the one whose log reaches furthest (the highest last offset, as the leader's would), on a tie
the one holding more bytes (more of the history the log cleaner or retention left), then the
first by path. What was passed over is said.

The copy read keeps the latest log start any copy's root checkpointed for the partition
(`log-start-offset-checkpoint`): a follower takes the leader's log start from its fetches
and a log start never moves back, so no copy checkpoints one Kafka had not set, while a
copy's own may trail it (checkpointed before the share coordinator's last prune reached
that broker). Right after a failover the new leader may still serve an earlier start,
until its share coordinator prunes again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from sharestate.log.batch import Batch, BatchRun
from sharestate.log.discovery import Segment, read_segment
from sharestate.log.log_starts import log_starts


def one_replica(segments: Iterable[Segment], say: Callable[[str], None]) -> list[Segment]:
    """`segments` with each topic-partition's segments from one folder only (see the module
    docstring), in their order; segments whose path names no partition are all kept."""
    segments = list(segments)
    folders: dict[tuple[str, int], dict[Path, list[Segment]]] = {}
    for segment in segments:
        if segment.topic is not None and segment.partition is not None:
            folders.setdefault((segment.topic, segment.partition), {}).setdefault(
                segment.path.parent, []).append(segment)
    passed: set[Path] = set()
    starts: dict[Path, int] = {}
    for (topic, partition), copies in folders.items():
        if len(copies) < 2:
            continue
        reach = {folder: _reach(copy) for folder, copy in copies.items()}
        chosen = max(sorted(copies), key=reach.__getitem__)  # the first by path on a tie
        others = sorted(folder for folder in copies if folder != chosen)
        passed.update(others)
        start = {folder: log_starts(folder.parent).get((topic, partition), 0)
                 for folder in copies}
        latest = max(others, key=start.__getitem__)
        later = ""
        if start[latest] > start[chosen]:
            starts[chosen] = start[latest]
            later = f"; log start {start[latest]} as {latest.parent} checkpointed it"
        say(f"{topic}-{partition}: {len(copies)} copies (replicas of several brokers?); "
            f"read {chosen} (last offset {_offset(reach[chosen][0])}), not "
            + ", ".join(f"{folder} ({_offset(reach[folder][0])})" for folder in others)
            + later)
    return [replace(s, log_start=starts[s.path.parent]) if s.path.parent in starts else s
            for s in segments if s.path.parent not in passed]


def _reach(copy: list[Segment]) -> tuple[int, int]:
    """(last offset of the copy's last readable batch, -1 if none; bytes of its files)."""
    size = 0
    for segment in copy:
        try:
            size += segment.path.stat().st_size
        except OSError:
            continue
    for segment in sorted(copy, key=lambda s: s.base_offset or 0, reverse=True):
        last = -1
        for item in read_segment(segment, runs=True):
            if isinstance(item, BatchRun):
                last = max(last, item.batches[-1].header.last_offset)
            elif isinstance(item, Batch) and item.header.crc_valid:
                last = max(last, item.header.last_offset)
        if last >= 0:
            return last, size
    return -1, size


def _offset(last: int) -> str:
    return str(last) if last >= 0 else "none readable"

