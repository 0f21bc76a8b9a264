"""A data topic partition's end offset at given times, from its segment files alone.

The end offset at time t is taken as Kafka's ListOffsets by timestamp takes it: the offset
of the first record whose timestamp is at or after t (Kafka's `findOffsetByTimestamp`: the
first batch whose max timestamp reaches t, then its first record that does). Which clock
that is depends on the topic's `message.timestamp.type`, which every batch carries:

- **LogAppendTime**: the broker stamps each batch when it appends it, so the first record
  stamped at or after t is the first one appended at or after t, and the answer is the
  partition's end offset at t by the broker's clock: exact.
- **CreateTime** (Kafka's default): the producers' stamps. The answer is the end offset as
  the producers' clocks place the records, which is not the end offset at t: a record
  created before t and appended after it counts as there already, one stamped with a past
  time (mirroring, replays) moves the answer later, a producer clock ahead moves it earlier.

A time after every record's timestamp has the log end offset as its answer only when the
log is known to have taken no record since: up to the modification time of the partition's
newest segment file (Kafka appends nothing to a partition without writing that file; a
copy made with `cp -p` or `shutil.copy2` keeps the time, a plain copy has a later one).
A copy taken while the broker appends may end before the last appends its modification
time covers. A time whose answer would be the first retained offset, records having been
deleted before it, has no answer: the end offset then was at most that (outside retention).

`partition.metadata` (Kafka's file in each partition folder) gives the topic id. A deleted
topic's partition folders are renamed `<topic>-<partition>.<32 hex digits>-delete` and kept
for `file.delete.delay.ms` (a minute by default): a copy made meanwhile still tells that
topic's end offsets, under its own id.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sharestate.log.batch import CREATE_TIME, LOG_APPEND_TIME, Batch
from sharestate.log.discovery import Segment, SourceError, read_segment
from sharestate.log.files import read_regular
from sharestate.log.framing import DEFAULT_LIMITS, ReadLimits
from sharestate.log.log_starts import log_starts

_PARTITION_DIR = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>[0-9]+)"
                            r"(?P<deleted>\.[0-9a-f]{32}-delete)?")
_SEGMENT_FILE = re.compile(r"(?P<base>[0-9]{20})\.log")
_TOPIC_ID = re.compile(r"^topic_id:\s*(\S+)\s*$", re.M)
METADATA_FILE = "partition.metadata"


@dataclass(frozen=True)
class DataPartition:
    """One data topic partition's folder: its segments (in base-offset order), its topic id
    when `partition.metadata` names it, the log start offset Kafka checkpointed for it (0
    when none is found), and when its newest segment was last written (epoch ms)."""

    topic: str
    partition: int
    topic_id: str | None
    segments: tuple[Segment, ...]
    log_start_offset: int
    modified_ms: int


@dataclass(frozen=True)
class EndOffsets:
    """A partition's end offsets at the times asked (times outside retention left out), and
    the timestamp type of its batches (`LogAppendTime` only when every data batch has it)."""

    points: list[tuple[int, int]]
    timestamp_type: str
    unreadable: int
    """Batches or byte ranges that could not be read (findings), skipped."""


def topic_id_of(folder: Path) -> str | None:
    """The topic id `partition.metadata` names, in Kafka's URL-safe base64 form."""
    try:
        text = read_regular(folder / METADATA_FILE).decode("utf-8", errors="replace")
    except OSError:
        return None
    found = _TOPIC_ID.search(text)
    return found.group(1) if found else None


def is_data_partition(folder: Path) -> bool:
    """Whether a folder's name is a data topic partition's (a deleted one's too)."""
    named = _PARTITION_DIR.fullmatch(folder.name)
    return named is not None and not named["topic"].startswith("__")


def _partition(folder: Path, starts: dict[tuple[str, int], int]) -> DataPartition | None:
    named = _PARTITION_DIR.fullmatch(folder.name)
    if named is None or not is_data_partition(folder):
        return None
    topic, partition = named["topic"], int(named["partition"])
    try:
        files = sorted(entry for entry in folder.iterdir() if _SEGMENT_FILE.fullmatch(entry.name))
    except OSError as exc:
        raise SourceError(f"cannot list {folder}: {exc.strerror or exc}") from None
    segments = tuple(Segment(path, topic, partition, int(path.name[:20]), False)
                     for path in files)
    modified = max((int(os.stat(path).st_mtime * 1000) for path in files), default=0)
    return DataPartition(topic, partition, topic_id_of(folder), segments,
                         max(starts.get((topic, partition), 0), 0), modified)


def data_partitions(sources: Iterable[str | os.PathLike[str]]) -> list[DataPartition]:
    """The data topics' partition folders (not the internal `__*` topics) of each source:
    a log.dirs root or one partition folder. Raises SourceError for a path that does not
    exist or holds no data topic partition."""
    found: list[DataPartition] = []
    for source in sources:
        path = Path(source)
        if not path.is_dir():
            raise SourceError(f"{path}: not a directory (a log.dirs root or a data topic "
                              f"partition folder)")
        own = _partition(path, log_starts(path.parent))
        if own is not None:
            found.append(own)
            continue
        starts = log_starts(path)
        try:
            folders = sorted(entry for entry in path.iterdir() if entry.is_dir())
        except OSError as exc:
            raise SourceError(f"cannot list {path}: {exc.strerror or exc}") from None
        partitions = [p for p in (_partition(folder, starts) for folder in folders) if p]
        if not partitions:
            raise SourceError(f"{path}: holds no data topic partition folder "
                              f"(<topic>-<partition>)")
        found.extend(partitions)
    return found


def _batches(partition: DataPartition, limits: ReadLimits,
             unreadable: list[int]) -> Iterator[Batch]:
    for segment in partition.segments:
        for item in read_segment(segment, limits=limits):
            if isinstance(item, Batch):
                if item.header.crc_valid and item.records:
                    yield item
                else:
                    unreadable[0] += 1
            else:
                unreadable[0] += 1


def end_offsets_at(partition: DataPartition, times: Sequence[int], *,
                   limits: ReadLimits = DEFAULT_LIMITS) -> EndOffsets:
    """The end offset at each of `times` (see the module docstring), in one pass over the
    partition's batches."""
    wanted = sorted(set(times))
    points: list[tuple[int, int]] = []
    unreadable = [0]
    appended = True
    at = 0  # the next time to answer
    first_offset: int | None = None
    end = partition.log_start_offset
    for batch in _batches(partition, limits, unreadable):
        header = batch.header
        if first_offset is None:
            first_offset = batch.records[0].offset
        if not header.is_control and header.timestamp_type != LOG_APPEND_TIME:
            appended = False
        end = max(end, header.last_offset + 1)
        while at < len(wanted) and header.max_timestamp >= wanted[at]:
            t = wanted[at]
            offset = next((r.offset for r in batch.records if r.timestamp >= t), None)
            if offset is None:  # the record holding the max timestamp was compacted away
                break
            start = max(partition.log_start_offset, first_offset)
            if offset > start or start == 0:
                points.append((t, offset))
            at += 1
        if at == len(wanted):
            break
    else:
        known_until = max(partition.modified_ms, 0)
        points.extend((t, end) for t in wanted[at:] if t <= known_until)
    return EndOffsets(points, LOG_APPEND_TIME if appended else CREATE_TIME, unreadable[0])


def log_end_offset(partition: DataPartition, *, limits: ReadLimits = DEFAULT_LIMITS) -> int:
    """The partition's log end offset as its files tell it (what ListOffsets LATEST answers
    for a stopped broker's single replica): past the last batch of the newest segment
    holding one, and never before the newest segment's base offset (Kafka rolls a segment
    at the log end offset) nor the log start offset."""
    end = max([partition.log_start_offset,
               *(segment.base_offset or 0 for segment in partition.segments)])
    for segment in reversed(partition.segments):
        last = None
        for item in read_segment(segment, limits=limits):
            if isinstance(item, Batch) and item.header.crc_valid:
                last = item.header.last_offset
        if last is not None:
            return max(end, last + 1)
    return end


def log_end_offsets(roots: Iterable[str | os.PathLike[str]], *,
                    limits: ReadLimits = DEFAULT_LIMITS) -> dict[tuple[str, int], int]:
    """The log end offset of every data topic partition folder in `roots` (log.dirs roots
    or partition folders; a root holding none adds nothing), keyed by (topic id,
    partition); a folder without `partition.metadata` by (topic name, partition), unless it
    is a deleted topic's (its name may be a newer topic's now). A partition in several
    roots (replicas: brokers' copies of a cluster) has the largest, its leader's."""
    ends: dict[tuple[str, int], int] = {}
    for root in roots:
        try:
            partitions = data_partitions([root])
        except SourceError:
            continue
        for partition in partitions:
            if partition.topic_id is not None:
                key = partition.topic_id
            elif partition.segments and not partition.segments[0].path.parent.name.endswith(
                    "-delete"):
                key = partition.topic
            else:
                continue
            where = (key, partition.partition)
            ends[where] = max(ends.get(where, 0), log_end_offset(partition, limits=limits))
    return ends
