"""A log cut into days, as a daily job over a live `log.dirs` sees it: each day, every
partition's log up to that day's end (the segments closed by then, and the active one up to
its last batch before the end), and, from the third day on, without the segments that lie
wholly before the day before yesterday, as Kafka deletes segments below its log start.

The days' ends split the records into `days` parts of about equal size by time (each
batch's largest timestamp): what the benchmark's and the tests' daily runs read.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from sharestate.log.batch import Batch
from sharestate.log.framing import read_batches


@dataclass(frozen=True)
class Segment:
    """A segment file of the log and its batches' (end position, largest timestamp,
    records), in file order."""

    path: Path
    batches: tuple[tuple[int, int, int], ...]

    def cut(self, end: int) -> int:
        """The bytes of the segment holding its batches stamped before `end`, up to the first
        one that is not (a partition's clock only goes forward)."""
        size = 0
        for position, stamp, _ in self.batches:
            if stamp >= end:
                break
            size = position
        return size


def segments(root: Path) -> list[Segment]:
    """Every segment under `root` (partition folders of `.log` files)."""
    found = []
    for path in sorted(root.glob("*/*.log")):
        batches = []
        with open(path, "rb") as stream:
            for item in read_batches(stream, source=str(path)):
                if isinstance(item, Batch):
                    header = item.header
                    batches.append((header.position + header.size_in_bytes,
                                    header.max_timestamp, header.record_count))
        found.append(Segment(path, tuple(batches)))
    return found


def day_ends(found: list[Segment], days: int) -> list[int]:
    """The end of each day (exclusive, epoch ms): the records cut into `days` parts of about
    equal size by time; the last day ends after every record."""
    stamped = sorted((stamp, records) for s in found for _, stamp, records in s.batches)
    total = sum(records for _, records in stamped)
    ends, seen, day = [], 0, 1
    for stamp, records in stamped:
        seen += records
        if day < days and seen >= total * day // days:
            ends.append(stamp + 1)
            day += 1
    last = stamped[-1][0] + 1 if stamped else 0
    return [*ends, *[last] * (days - len(ends))]


def write_day(found: list[Segment], root: Path, target: Path, end: int,
              deleted_before: int | None) -> None:
    """The log as it stood at `end` into `target` (emptied first): each segment's batches
    stamped before it; a segment whose batches all are before `deleted_before` (and that is
    not its partition's last) left out. Whole segments are hard links."""
    shutil.rmtree(target, ignore_errors=True)
    by_folder: dict[Path, list[Segment]] = {}
    for segment in found:
        by_folder.setdefault(segment.path.parent, []).append(segment)
    for folder, listed in by_folder.items():
        kept = [(s, s.cut(end)) for s in listed]
        kept = [(s, size) for s, size in kept if size]
        for index, (segment, size) in enumerate(kept):
            if (deleted_before is not None and index + 1 < len(kept)
                    and all(stamp < deleted_before for _, stamp, _ in segment.batches)):
                continue
            out = target / folder.relative_to(root) / segment.path.name
            out.parent.mkdir(parents=True, exist_ok=True)
            if size == segment.path.stat().st_size:
                os.link(segment.path, out)
            else:
                with open(segment.path, "rb") as source, open(out, "wb") as sink:
                    sink.write(source.read(size))
