"""Find log segments from command-line style arguments, and read them.

An argument may be a segment file (`*.log`, or `*.log.gz` read through gzip, positions then
counting in the uncompressed stream), a partition directory (`<topic>-<partition>`, its
`<20-digit base offset>.log[.gz]` segments in base-offset order), or a `log.dirs` root
(every partition directory of the internal topics under it).

`read_segment` is how every reader gets a segment's batches: a path that is not a regular
file (a FIFO, a device, a directory, a symlink loop) or cannot be opened is one
`unreadable_segment` finding, never a hang; the bytes read are bounded by the file's size
and by Kafka's largest segment (see `streams`), and every finding names its segment.

A folder name is trusted only when it names one of the internal topics: a segment in
`backups-2026-11-23/` is of no known topic or partition (its topic is then detected from its
records), and `Segment.note` says why.
"""

from __future__ import annotations

import io
import os
import re
import stat
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from sharestate.log.batch import Batch, LogFinding
from sharestate.log.framing import DEFAULT_LIMITS, ReadLimits, read_batches
from sharestate.log.streams import FileStream, GzipStream

INTERNAL_TOPICS = ("__share_group_state", "__consumer_offsets")

_PARTITION_DIR = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>[0-9]+)")
_SEGMENT_FILE = re.compile(r"(?P<base>[0-9]{20})\.log(?:\.gz)?")


class SourceError(Exception):
    """A source argument that does not exist, cannot be read or holds no segments."""


@dataclass(frozen=True, slots=True)
class Segment:
    """One segment file and what its path tells (None where the path does not say)."""

    path: Path
    topic: str | None
    partition: int | None
    base_offset: int | None
    gzipped: bool
    note: str | None = None
    """Why the path names no topic-partition, when it looks as if it did."""

    def open(self) -> BinaryIO:
        """The segment's bytes as a binary stream (inflated when gzipped, bounded as
        `streams` says). Raises `SourceError` when the path cannot be opened or is not a
        regular file; opening never waits (a FIFO without a writer is refused at once)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SourceError(f"{self.path}: not a regular file "
                                  f"({_file_type(info.st_mode)})")
            os.set_blocking(fd, True)
            raw = io.FileIO(fd, "rb")
        except BaseException:
            os.close(fd)
            raise
        if self.gzipped:
            return cast(BinaryIO, GzipStream(raw))
        return cast(BinaryIO, FileStream(raw, info.st_size))


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a file"


def read_segment(segment: Segment, *, start: int = 0, end: int | None = None,
                 limits: ReadLimits = DEFAULT_LIMITS) -> Iterator[Batch | LogFinding]:
    """Every batch and finding of `segment` (of its split [start, end) when given, see
    `read_batches`), each finding naming the segment as its `source`. A segment that
    cannot be opened is one `unreadable_segment` finding (in its first split)."""
    source = str(segment.path)
    try:
        stream = segment.open()
    except SourceError as exc:
        if start == 0:
            yield LogFinding("unreadable_segment", str(exc), 0, None, b"", 0, source)
        return
    with stream:
        yield from read_batches(stream, start_position=start, end_position=end,
                                max_batch_bytes=limits.max_batch_bytes,
                                max_inflated_bytes=limits.max_inflated_bytes,
                                max_batch_records=limits.max_batch_records,
                                max_raw_bytes=limits.max_raw_bytes, source=source)


def _resolved(path: Path) -> Path:
    """`path` resolved, or made absolute where it cannot be (a symlink loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def segment_of(path: Path, topics: Collection[str] = INTERNAL_TOPICS) -> Segment:
    """The `Segment` for a file path, with topic/partition from its parent directory when
    that is named `<topic>-<partition>` for one of `topics`."""
    name = path.name
    gzipped = name.endswith(".log.gz")
    if not (gzipped or name.endswith(".log")):
        raise SourceError(f"{path}: not a log segment (expected *.log or *.log.gz)")
    named = _SEGMENT_FILE.fullmatch(name)
    folder = _resolved(path).parent.name
    parent = _PARTITION_DIR.fullmatch(folder)
    base = int(named["base"]) if named else None
    if parent is None:
        return Segment(path, None, None, base, gzipped)
    if parent["topic"] not in topics:
        return Segment(path, None, None, base, gzipped, note=(
            f"folder {folder!r} is not <topic>-<partition> of {' or '.join(topics)}"))
    return Segment(path, parent["topic"], int(parent["partition"]), base, gzipped)


def _listing(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError as exc:
        raise SourceError(f"cannot list {directory}: {exc.strerror or exc}") from None


def _partition_segments(directory: Path, topics: Collection[str]) -> list[Segment]:
    """Every entry named like a segment: one that is not a readable file is a finding
    when it is read, not skipped."""
    segments = [segment_of(entry, topics) for entry in _listing(directory)
                if _SEGMENT_FILE.fullmatch(entry.name)]
    return sorted(segments, key=lambda s: (s.base_offset or 0, s.gzipped))


def _partition_dirs(root: Path, topics: Collection[str]) -> list[Path]:
    partitions: list[tuple[str, int, Path]] = []
    for entry in _listing(root):
        match = _PARTITION_DIR.fullmatch(entry.name)
        if match and match["topic"] in topics and entry.is_dir():
            partitions.append((match["topic"], int(match["partition"]), entry))
    return [directory for *_, directory in sorted(partitions)]


def _directory_segments(directory: Path, topics: Collection[str]) -> list[Segment]:
    """A log.dirs root (it holds partition directories of `topics`) or a partition dir."""
    partitions = _partition_dirs(directory, topics)
    if partitions:
        return [segment for partition in partitions
                for segment in _partition_segments(partition, topics)]
    if _PARTITION_DIR.fullmatch(directory.resolve().name):
        return _partition_segments(directory, topics)
    raise SourceError(f"{directory}: neither a partition directory (<topic>-<partition>) nor "
                      f"a log directory holding partitions of {', '.join(topics)}")


def discover(sources: Iterable[str | os.PathLike[str]], *,
             topics: Collection[str] = INTERNAL_TOPICS) -> list[Segment]:
    """All segments named by `sources`, in argument order (duplicates dropped).

    Raises `SourceError` for a path that does not exist or cannot be read, a file that is
    not a segment, or a directory that is neither a partition directory nor a root holding
    partition directories of `topics`. A segment-named symlink that leads nowhere (dangling,
    a loop) is a segment whose reading is one finding, as inside a partition directory.
    """
    found: list[Segment] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            if not os.path.lexists(path):
                raise SourceError(f"{path}: no such file or directory")
            found.append(segment_of(path))
            continue
        if not os.access(path, os.R_OK):
            raise SourceError(f"{path}: permission denied")
        if path.is_dir():
            found.extend(_directory_segments(path, topics))
        else:
            found.append(segment_of(path, topics))
    seen: set[Path] = set()
    unique: list[Segment] = []
    for segment in found:
        key = _resolved(segment.path)
        if key not in seen:
            seen.add(key)
            unique.append(segment)
    return unique
