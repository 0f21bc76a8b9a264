"""One copy of each partition when the sources hold several: the replicas of a cluster.

Copying the `log.dirs` of every broker of a cluster gives each internal-topic partition once
per replica (`__share_group_state` and `__consumer_offsets` have three replicas by default).
Followers append the leader's batches as they are, so the copies hold the same records, each
up to where that replica had caught up; read together they would give every record once per
copy, and all but the first as offsets going back. So each partition is read from one copy:
the one that knows the newest leader epoch (its folder's `leader-epoch-checkpoint`, or its
last batch's partition leader epoch), then whose log reaches furthest (the highest last
offset, as the leader's would), on a tie the one holding more bytes (more of the history the
log cleaner or retention left), then the first by path. What was passed over is said.

The epoch comes first because a leader that died may have appended records no follower
fetched: a new leader's epoch starts at its own log end, and Kafka truncates the old
leader's copy to it when that broker comes back, so those records were never the
partition's (a 3-broker 4.3.1 cluster, the leader of a `__consumer_offsets` partition killed
while its followers were stopped: its copy reached three commits further, at the old epoch).

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
from typing import NamedTuple

from sharestate.log.batch import Batch, BatchRun
from sharestate.log.discovery import Segment, read_segment
from sharestate.log.files import read_regular
from sharestate.log.log_starts import log_starts

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


class Reach(NamedTuple):
    """How far a copy of a partition goes, in the order copies are preferred."""

    epoch: int
    """The newest leader epoch the copy knows (-1: none)."""
    last: int
    """The last offset of its last readable batch (-1: none)."""
    size: int
    """The bytes of its files."""


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
        # a copy with a readable batch first; the first by path on a tie
        chosen = max(sorted(copies), key=lambda f: (reach[f].last >= 0, reach[f]))
        others = sorted(folder for folder in copies if folder != chosen)
        passed.update(others)
        start = {folder: log_starts(folder.parent).get((topic, partition), 0)
                 for folder in copies}
        latest = max(others, key=start.__getitem__)
        later = ""
        if start[latest] > start[chosen]:
            starts[chosen] = start[latest]
            later = f"; log start {start[latest]} as {latest.parent} checkpointed it"
        older = [folder for folder in others if reach[folder].last > reach[chosen].last]
        if older:
            later += (f"; {', '.join(map(str, older))} "
                      f"{'reach' if len(older) > 1 else 'reaches'} further at an older "
                      f"leader epoch than {reach[chosen].epoch} (records Kafka truncates)")
        say(f"{topic}-{partition}: {len(copies)} copies (replicas of several brokers?); "
            f"read {chosen} (last offset {_offset(reach[chosen].last)}), not "
            + ", ".join(f"{folder} ({_offset(reach[folder].last)})" for folder in others)
            + later)
    return [replace(s, log_start=starts[s.path.parent]) if s.path.parent in starts else s
            for s in segments if s.path.parent not in passed]


def _reach(copy: list[Segment]) -> Reach:
    """How far `copy` (one folder's segments) goes: the newest leader epoch its folder's
    checkpoint or its last readable batch gives, that batch's last offset, its bytes."""
    size = 0
    for segment in copy:
        try:
            size += segment.path.stat().st_size
        except OSError:
            continue
    epoch = _checkpointed_epoch(copy[0].path.parent)
    for segment in sorted(copy, key=lambda s: s.base_offset or 0, reverse=True):
        last = None
        for item in read_segment(segment, runs=True):
            if isinstance(item, BatchRun):
                header = item.batches[-1].header
            elif isinstance(item, Batch) and item.header.crc_valid:
                header = item.header
            else:
                continue
            if last is None or header.last_offset > last.last_offset:
                last = header
        if last is not None:
            return Reach(max(epoch, last.partition_leader_epoch), last.last_offset, size)
    return Reach(epoch, -1, size)


def _checkpointed_epoch(folder: Path) -> int:
    """The newest leader epoch of the partition folder's `leader-epoch-checkpoint` (version,
    count, then `epoch start-offset` lines); -1 when it is absent or unreadable."""
    try:
        lines = read_regular(folder / LEADER_EPOCH_CHECKPOINT, limit=1 << 20).decode(
            "utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return -1
    epochs = [int(parts[0]) for parts in (line.split() for line in lines[2:])
              if len(parts) == 2 and all(part.lstrip("-").isdigit() for part in parts)]
    return max(epochs, default=-1)


def _offset(last: int) -> str:
    return str(last) if last >= 0 else "none readable"

