"""Find log segments from command-line style arguments.

An argument may be a segment file (`*.log`, or `*.log.gz` read through gzip, positions then
counting in the uncompressed stream), a partition directory (`<topic>-<partition>`, its
`<20-digit base offset>.log[.gz]` segments in base-offset order), or a `log.dirs` root
(every partition directory of the internal topics under it).

A folder name is trusted only when it names one of the internal topics: a segment in
`backups-2026-11-23/` is of no known topic or partition (its topic is then detected from its
records), and `Segment.note` says why.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

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
        """The segment's bytes as a binary stream (decompressed when gzipped)."""
        try:
            if self.gzipped:
                return cast(BinaryIO, gzip.open(self.path, "rb"))
            return self.path.open("rb")
        except OSError as exc:
            raise SourceError(f"cannot read {self.path}: {exc.strerror or exc}") from None


def segment_of(path: Path, topics: Collection[str] = INTERNAL_TOPICS) -> Segment:
    """The `Segment` for a file path, with topic/partition from its parent directory when
    that is named `<topic>-<partition>` for one of `topics`."""
    name = path.name
    gzipped = name.endswith(".log.gz")
    if not (gzipped or name.endswith(".log")):
        raise SourceError(f"{path}: not a log segment (expected *.log or *.log.gz)")
    named = _SEGMENT_FILE.fullmatch(name)
    folder = path.resolve().parent.name
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
    segments = [segment_of(entry, topics) for entry in _listing(directory)
                if _SEGMENT_FILE.fullmatch(entry.name) and entry.is_file()]
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
    partition directories of `topics`.
    """
    found: list[Segment] = []
    for source in sources:
        path = Path(source)
        if not path.exists():
            raise SourceError(f"{path}: no such file or directory")
        if not os.access(path, os.R_OK):
            raise SourceError(f"{path}: permission denied")
        if path.is_dir():
            found.extend(_directory_segments(path, topics))
        else:
            found.append(segment_of(path, topics))
    seen: set[Path] = set()
    unique: list[Segment] = []
    for segment in found:
        key = segment.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(segment)
    return unique
