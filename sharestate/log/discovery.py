"""Find log segments from command-line style arguments, and read them.

An argument may be a segment file (`*.log`, or `*.log.gz` read through gzip, positions then
counting in the uncompressed stream) or a directory:
- a partition directory, `<topic>-<partition>` of an internal topic with a partition number
  Kafka can have (int32): its `<20-digit base offset>.log[.gz]` segments in base-offset order;
- any other folder: every segment in it and in the folders under it. Where a folder holds
  partition directories of the internal topics (a `log.dirs` root), those are read and other
  topics' partition directories beside them are not; Kafka's folders of deleted, moving or
  stray partitions (`<topic>-<partition>.<id>-delete`) never are.
What a directory held that was not read is said (`discover`'s `say`), and a source holding
no segment at all is an error, never an empty read.

`read_segment` is how every reader gets a segment's batches: a path that is not a regular
file (a FIFO, a device, a directory, a symlink loop) or cannot be opened is one
`unreadable_segment` finding, never a hang; the bytes read are bounded by the file's size
and by Kafka's largest segment (see `streams`), and every finding names its segment. A
segment whose first batch starts below the base offset its name gives is misnamed (Kafka
appends no offset below it): a `segment_name` finding, its batches still read.

A folder name is trusted only when it names a partition of one of the internal topics: a
segment in `backups-2026-11-23/` is of no known topic or partition (its topic is then
detected from its records), and `Segment.note` says why. A segment's topic and partition
come from its path alone (`segment_of`), so an executor given the path finds the same.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal, cast, overload

from sharestate.log.batch import Batch, BatchRun, LogFinding
from sharestate.log.files import open_regular
from sharestate.log.framing import DEFAULT_LIMITS, ReadLimits, read_batches
from sharestate.log.order import OffsetOrder
from sharestate.log.streams import FileStream, GzipStream

INTERNAL_TOPICS = ("__share_group_state", "__consumer_offsets")

MAX_PARTITION = 2**31 - 1
"""Kafka's partition numbers are int32: a larger number names no partition."""

_PARTITION_DIR = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)-(?P<partition>[0-9]+)")
_SEGMENT_FILE = re.compile(r"(?P<base>[0-9]{20})\.log(?:\.gz)?")
_KAFKA_ASIDE = re.compile(r"\S+-\S+\.\S+-(?:delete|future|stray)")
"""Kafka's names for a partition's folder being deleted, moved to another log dir, or left
stray (`<topic>-<partition>.<id>-delete`): not the partition's log."""


class SourceError(Exception):
    """A source argument that does not exist, cannot be read or holds no segments."""


class SourceUnavailable(SourceError):
    """A live source that did not answer, or stopped answering: it may answer later."""


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
    log_start: int | None = None
    """The partition's log start that another broker's copy of it checkpointed, when that
    is later than its own root's (`sharestate.log.replicas`)."""

    def open(self) -> BinaryIO:
        """The segment's bytes as a binary stream (inflated when gzipped, bounded as
        `streams` says). Raises `SourceError` when the path cannot be opened or is not a
        regular file (`files.open_regular`: opening never waits)."""
        try:
            raw, size = open_regular(self.path)
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        if self.gzipped:
            return cast(BinaryIO, GzipStream(raw))
        return cast(BinaryIO, FileStream(raw, size))


@overload
def read_segment(segment: Segment, *, start: int = 0, end: int | None = None,
                 limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                 runs: Literal[False] = False) -> Iterator[Batch | LogFinding]: ...


@overload
def read_segment(segment: Segment, *, start: int = 0, end: int | None = None,
                 limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                 runs: bool) -> Iterator[Batch | LogFinding | BatchRun]: ...


def read_segment(segment: Segment, *, start: int = 0, end: int | None = None,
                 limits: ReadLimits = DEFAULT_LIMITS, order: OffsetOrder | None = None,
                 runs: bool = False) -> Iterator[Batch | LogFinding | BatchRun]:
    """Every batch and finding of `segment` (of its split [start, end) when given, see
    `read_batches`, as are `runs`; `order`: its partition log's offset order), each finding
    naming the segment as its `source`. A segment that cannot be opened is one
    `unreadable_segment` finding (in its first split)."""
    source = str(segment.path)
    try:
        stream = segment.open()
    except SourceError as exc:
        if start == 0:
            yield LogFinding("unreadable_segment", str(exc), 0, None, b"", 0, source)
        return
    with stream:
        items = read_batches(stream, start_position=start, end_position=end,
                             max_batch_bytes=limits.max_batch_bytes,
                             max_inflated_bytes=limits.max_inflated_bytes,
                             max_batch_records=limits.max_batch_records,
                             max_raw_bytes=limits.max_raw_bytes, source=source,
                             order=order, runs=runs)
        if segment.base_offset is None or start != 0:
            yield from items
        else:
            yield from _checked_name(items, segment.base_offset, source)


def _checked_name(items: Iterator[Batch | LogFinding | BatchRun], base: int, source: str
                  ) -> Iterator[Batch | LogFinding | BatchRun]:
    """`items` of a segment whose file name gives `base` as its base offset, with a
    `segment_name` finding before its first batch with a valid CRC when that batch starts
    below `base`: Kafka names a segment after the first offset appended to it and appends
    none below, so the name (renamed, or copied under another's name) or that base offset
    is wrong. A legacy (magic 0 or 1) compressed entry is taken at its last offset, the only
    one Kafka knew when it named a segment after it."""
    for item in items:
        first = item.batches[0] if isinstance(item, BatchRun) else item
        if isinstance(first, Batch) and first.header.crc_valid:
            header = first.header
            offset = header.base_offset if header.magic >= 2 else header.last_offset
            if offset < base:
                yield LogFinding(
                    "segment_name", f"the segment's first batch starts at offset {offset}, "
                    f"below {base}, the base offset its file name gives: Kafka appends no "
                    f"offset below it, so the name or that batch's base offset is wrong",
                    header.position, offset, b"", 0, source)
            yield item
            break
        yield item
    yield from items


def _resolved(path: Path) -> Path:
    """`path` resolved, or made absolute where it cannot be (a symlink loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


def _partition_folder(name: str, topics: Collection[str]) -> tuple[str, int] | str | None:
    """What a folder's name tells: (topic, partition) when it is a partition directory of one
    of `topics`; why it is not, when it only looks like one (`<name>-<digits>`); else None."""
    match = _PARTITION_DIR.fullmatch(name)
    if match is None:
        return None
    if match["topic"] not in topics:
        return f"folder {name!r} is not <topic>-<partition> of {' or '.join(topics)}"
    partition = int(match["partition"])
    if partition > MAX_PARTITION:
        return (f"folder {name!r} names partition {partition}, past Kafka's largest "
                f"({MAX_PARTITION}), so it is no partition directory")
    return match["topic"], partition


def _other_topics_partition(name: str, topics: Collection[str]) -> bool:
    """Whether a folder's name is Kafka's for a partition of a topic not in `topics`."""
    match = _PARTITION_DIR.fullmatch(name)
    return (match is not None and match["topic"] not in topics
            and int(match["partition"]) <= MAX_PARTITION)


def segment_of(path: Path, topics: Collection[str] = INTERNAL_TOPICS) -> Segment:
    """The `Segment` for a file path, with topic/partition from its parent directory when
    that is a partition directory (`<topic>-<partition>`) of one of `topics`."""
    name = path.name
    gzipped = name.endswith(".log.gz")
    if not (gzipped or name.endswith(".log")):
        raise SourceError(f"{path}: not a log segment (expected *.log or *.log.gz)")
    named = _SEGMENT_FILE.fullmatch(name)
    base = int(named["base"]) if named else None
    folder = _partition_folder(_resolved(path).parent.name, topics)
    if isinstance(folder, tuple):
        return Segment(path, *folder, base, gzipped)
    return Segment(path, None, None, base, gzipped, note=folder)


def _listing(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError as exc:
        raise SourceError(f"cannot list {directory}: {exc.strerror or exc}") from None


@dataclass
class _Walk:
    """The segments found in and under one source directory, and what was passed over."""

    root: Path
    topics: Collection[str]
    read_elsewhere: Callable[[Path], bool] = lambda folder: False
    """Folders another reader takes: not said to be passed over."""
    segments: list[Segment] = field(default_factory=list)
    passed: dict[str, list[str]] = field(default_factory=dict)
    """Paths passed over (under `root`), by why."""
    seen: set[Path] = field(default_factory=set)

    def pass_over(self, entry: Path, why: str) -> None:
        if not self.read_elsewhere(entry):
            self.passed.setdefault(why, []).append(entry.relative_to(self.root).as_posix())

    def folder(self, directory: Path) -> None:
        """A partition directory's segments; in any other folder, every segment in it and
        under it, except in a `log.dirs` root (it holds partition directories of `topics`)
        other topics' partition directories."""
        key = _resolved(directory)
        if key in self.seen:  # a symlink back up the tree
            return
        self.seen.add(key)
        if isinstance(_partition_folder(key.name, self.topics), tuple):
            self._partition(directory)
            return
        entries = [(entry, entry.is_dir()) for entry in _listing(directory)]
        partitions = sorted((folder, entry) for entry, is_dir in entries if is_dir and
                            isinstance(folder := _partition_folder(entry.name, self.topics),
                                       tuple))
        for _, entry in partitions:
            self.folder(entry)
        read = {entry for _, entry in partitions}
        for entry, is_dir in entries:
            if not is_dir:
                if entry.name.endswith((".log", ".log.gz")):
                    self.segments.append(segment_of(entry, self.topics))
            elif entry in read:
                continue
            elif _KAFKA_ASIDE.fullmatch(entry.name):
                self.pass_over(entry, "Kafka's folders of deleted, moving or stray partitions")
            elif partitions and _other_topics_partition(entry.name, self.topics):
                self.pass_over(entry, "partition directories of other topics in a log.dirs "
                                      "root; name one as a source to read it")
            else:
                self.folder(entry)

    def _partition(self, directory: Path) -> None:
        """Its segments named by base offset, in that order (an entry so named that is no
        readable file is a finding when it is read, not skipped)."""
        segments = []
        for entry in _listing(directory):
            if _SEGMENT_FILE.fullmatch(entry.name):
                segments.append(segment_of(entry, self.topics))
            elif entry.name.endswith((".log", ".log.gz")):
                self.pass_over(entry, "in a partition directory, not named <base offset>.log; "
                                      "name the file as a source to read it")
        self.segments.extend(sorted(segments, key=lambda s: (s.base_offset or 0, s.gzipped)))

    def passed_over(self, most: int = 3) -> list[str]:
        """What was passed over, one phrase per reason, naming `most` entries at most."""
        phrases = []
        for why, names in self.passed.items():
            shown = ", ".join(names[:most]) + (f" and {len(names) - most} more"
                                               if len(names) > most else "")
            phrases.append(f"{shown} ({why})")
        return phrases


def _directory_segments(directory: Path, topics: Collection[str], say: Callable[[str], None],
                        read_elsewhere: Callable[[Path], bool]) -> list[Segment]:
    walk = _Walk(directory, topics, read_elsewhere)
    walk.folder(directory)
    passed = walk.passed_over()
    if not walk.segments:
        raise SourceError(f"{directory}: no log segments (*.log, *.log.gz) in it or under it"
                          + "".join(f"; not read: {phrase}" for phrase in passed))
    for phrase in passed:
        say(f"{directory}: not read: {phrase}")
    return walk.segments


def discover(sources: Iterable[str | os.PathLike[str]], *,
             topics: Collection[str] = INTERNAL_TOPICS,
             say: Callable[[str], None] | None = None,
             read_elsewhere: Callable[[Path], bool] | None = None) -> list[Segment]:
    """All segments named by `sources`, in argument order (duplicates dropped, and of a
    partition found in several folders only one copy: `replicas`); `say` is told what a
    directory held that was not read, in one line per reason, but for the folders
    `read_elsewhere` says another reader takes.

    A source that holds no segment is never read as empty: raises `SourceError` for a path
    that does not exist or cannot be read, a file that is not a segment, or a directory
    with no segment in it or under it (read as the module says). A segment-named symlink
    that leads nowhere (dangling, a loop) is a segment whose reading is one finding, as
    inside a partition directory.
    """
    found: list[Segment] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            if not os.path.lexists(path):
                raise SourceError(f"{path}: no such file or directory")
            found.append(segment_of(path, topics))
            continue
        if not os.access(path, os.R_OK):
            raise SourceError(f"{path}: permission denied")
        if path.is_dir():
            found.extend(_directory_segments(path, topics, say or (lambda line: None),
                                             read_elsewhere or (lambda folder: False)))
        else:
            found.append(segment_of(path, topics))
    from sharestate.log.replicas import one_replica

    seen: set[Path] = set()
    unique: list[Segment] = []
    for segment in found:
        key = _resolved(segment.path)
        if key not in seen:
            seen.add(key)
            unique.append(segment)
    return one_replica(unique, say or (lambda line: None))
