"""Kafka's log start offsets of a log.dirs root, from its `log-start-offset-checkpoint`.

A partition's log start moves past its first segment's base offset when records are
deleted below it (`deleteRecords`, as the share coordinator prunes `__share_group_state`):
the segment files still hold them until Kafka's retention task deletes whole segments, but
no reader of the log sees them. The broker checkpoints each such start in the root's
`log-start-offset-checkpoint` (version, count, then `topic partition offset` lines), every
`log.flush.start.offset.checkpoint.interval.ms`: a copy's checkpoint may trail the start by
that much, never lead it.
"""

from __future__ import annotations

import re
from pathlib import Path

from sharestate.log.files import read_regular

LOG_START_CHECKPOINT = "log-start-offset-checkpoint"

_LINE = re.compile(r"(\S+) ([0-9]+) (-?[0-9]+)", re.ASCII)


def log_starts(root: Path) -> dict[tuple[str, int], int]:
    """The checkpointed log start of each partition of the log.dirs `root`; {} when the
    file is absent or unreadable. A line Kafka could not have written (not `topic partition
    offset` in ASCII digits, the offset outside int64) is skipped."""
    try:
        lines = read_regular(root / LOG_START_CHECKPOINT).decode("utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    starts = {}
    for line in lines[2:]:
        found = _LINE.fullmatch(" ".join(line.split()))
        if found and -(1 << 63) <= (offset := int(found[3])) < 1 << 63:
            starts[(found[1], int(found[2]))] = offset
    return starts
