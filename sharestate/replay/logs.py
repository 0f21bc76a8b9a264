"""Partition logs: the segments of one topic-partition, in order, with their detected dialect.

A source argument may hold many segments of many partitions (a `log.dirs` root). Replay
works per topic-partition, so segments are grouped by (topic, partition) and ordered by
base offset. Segments whose path names no partition are one log per folder when they bear
Kafka's segment names (`<20-digit base offset>.log`: consecutive segments of one partition),
else (loose files) a log each. Each segment's topic and dialect are detected from its records
(or pinned by the caller); a segment whose topic cannot be told belongs to no log and is a
finding of its own.

A partition directory in a log.dirs root whose `log-start-offset-checkpoint` gives the
partition a log start (`sharestate.log.log_starts`) is read from there, as Kafka's
coordinators load it: from the batch holding that offset, the batches wholly below it
(deleted records the segment files still hold) left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path
from typing import Protocol, TypeVar

from sharestate.log import DEFAULT_LIMITS, LogFinding, ReadLimits, Segment
from sharestate.log.files import holds_only_zeros
from sharestate.log.log_starts import log_starts
from sharestate.log.order import OffsetOrder
from sharestate.records.detect import Detection
from sharestate.records.segment import (
    DecodedBatch,
    FindingCap,
    LogItem,
    QuietRun,
    decode_batches,
    detect_segment,
    quiet_runs,
    segment_batches,
)
from sharestate.replay.loose_partitions import loose_partitions


@dataclass(frozen=True)
class AsOf:
    """A replay stop point: after every record with offset <= `offset`, or, with `time`
    (epoch ms), after every record up to the first whose timestamp is later than it."""

    offset: int | None = None
    time: int | None = None

    def passed(self, offset: int, timestamp: int) -> bool:
        """Whether a record at (`offset`, `timestamp`) lies beyond the stop point."""
        return ((self.offset is not None and offset > self.offset)
                or (self.time is not None and timestamp > self.time))

    @property
    def unbounded(self) -> bool:
        return self.offset is None and self.time is None

    def describe(self) -> str:
        """`offset N`, `time <ISO 8601>` or `the end of the log`."""
        if self.time is not None:
            return f"time {iso_time(self.time)}"
        if self.offset is not None:
            return f"offset {self.offset}"
        return "the end of the log"

    def beyond(self, offset: int, timestamp: int | None) -> bool:
        """Whether the stop point lies beyond a log's end whose every record was applied,
        the last (or latest) at (`offset`, `timestamp`)."""
        return ((self.offset is not None and self.offset > offset)
                or (self.time is not None and timestamp is not None and self.time > timestamp))


END = AsOf()

AS_OF_BEFORE_LOG = "as_of_before_log"
"""The finding of a stop point before the first record a log read holds, past offset 0."""


def before_log_finding(name: str, as_of: AsOf, offset: int, timestamp: int) -> LogFinding | None:
    """The finding of a replay whose stop point passed the first record it read, at
    (`offset`, `timestamp`), before applying any: when that record is not the log's very
    first (offset 0), the records before the stop point were deleted (Kafka's log start, a
    compaction, segments gone), so the state then is not known and none is given."""
    if offset <= 0:
        return None
    return LogFinding(
        AS_OF_BEFORE_LOG, f"{as_of.describe()} lies before the first record the log holds "
        f"(offset {offset}, {iso_time(timestamp)}): the state then rests on records deleted "
        f"below it (Kafka's log start), so none is given", -1, offset, b"", 0, name)


def iso_time(millis: int) -> str:
    """Epoch ms as ISO 8601 (`2025-10-09T08:53:20.029Z`; whole seconds without fraction)."""
    moment = datetime.fromtimestamp(millis / 1000, UTC)
    text = moment.isoformat(timespec="milliseconds" if millis % 1000 else "seconds")
    return text.replace("+00:00", "Z")


def past_end_line(as_of: AsOf, ended: Sequence[tuple[str, int, int | None]],
                  most: int = 3) -> str | None:
    """One line on the logs that end before `as_of` — (name, last offset, its time) each —
    naming `most` at most: their answers are as of their end (None when there are none)."""
    def where(offset: int, timestamp: int | None) -> str:
        shown = f" ({iso_time(timestamp)})" if as_of.time is not None and timestamp is not None \
            else ""
        return f"offset {offset}{shown}"

    if len(ended) == 1:
        name, offset, timestamp = ended[0]
        return (f"{name}: the log ends at {where(offset, timestamp)}, before "
                f"{as_of.describe()}: the answer is as of its end")
    if not ended:
        return None
    more = f" and {len(ended) - most} more" if len(ended) > most else ""
    return (f"the logs end before {as_of.describe()} (the answers are as of their ends): "
            + ", ".join(f"{name} at {where(offset, timestamp)}"
                        for name, offset, timestamp in ended[:most]) + more)


def parse_time(text: str) -> int:
    """ISO 8601 (`2026-11-21T10:00:00Z`, offset or naive = UTC) or epoch ms -> epoch ms."""
    if text.lstrip("-").isdigit():
        millis = int(text)
        if not -(2**63) <= millis < 2**63:
            raise ValueError(f"epoch milliseconds out of range (64-bit): {text}")
        return millis
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


Item = TypeVar("Item", DecodedBatch | LogFinding, LogItem)
"""What a partition log yields: its batches (and findings), or those with quiet runs."""

UNKNOWN_PARTITION = -1
"""`state_partition` of a log whose path does not name its partition (a loose file)."""


class LogSource(Protocol):
    """What replay needs of one topic-partition's log: where it is and its batches in order."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int | None: ...

    @property
    def name(self) -> str: ...

    @property
    def dialects(self) -> tuple[str, ...]:
        """The dialect of each part of the log, in log order."""
        ...

    @property
    def log_start_offset(self) -> int:
        """Kafka's log start offset where known (else 0): no batch wholly below it is read."""
        ...

    @property
    def empty_span(self) -> tuple[int, int] | None:
        """Kafka's log start and end offsets of a log known to hold no batch (else None)."""
        ...

    def batches(self) -> Iterator[DecodedBatch | LogFinding]: ...

    def items(self) -> Iterator[LogItem]:
        """`batches()` with stretches of quiet batches gathered into `QuietRun`s."""
        ...


@dataclass
class PartitionLog:
    """The ordered segments of one topic-partition and how each was read."""

    topic: str
    partition: int | None
    """None until `partition_logs` numbers a log whose path names no partition (below 0)."""
    segments: list[Segment] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    limits: ReadLimits = DEFAULT_LIMITS
    log_start_offset: int = 0
    """Kafka's log start offset as its log.dirs root checkpointed it (0: none known)."""

    @property
    def name(self) -> str:
        if self.partition is not None and self.partition >= 0:
            return f"{self.topic}-{self.partition}"
        return f"{self.topic}:{self.segments[0].path}"

    @property
    def dialects(self) -> tuple[str, ...]:
        return tuple(d.dialect for d in self.detections)

    @property
    def empty_span(self) -> tuple[int, int] | None:
        """When every segment is an empty Kafka-named file (or one preallocated and not
        written yet: zeros only): Kafka's log start (the first segment's base offset, or the
        checkpointed start if later and not past the end) and end (the last one's base
        offset, the offset its first batch would take)."""
        try:
            if not self.segments or any(s.base_offset is None or s.gzipped
                                        or not holds_only_zeros(s.path)
                                        for s in self.segments):
                return None
        except OSError:
            return None
        bases = [s.base_offset or 0 for s in self.segments]
        start = max(bases[0], self.log_start_offset)
        return (start if start <= bases[-1] else bases[0]), bases[-1]

    def batches(self) -> Iterator[DecodedBatch | LogFinding]:
        """Every batch (or framing finding) of every segment, in log order: one offset
        order through them all (`sharestate.log.order`)."""
        def read() -> Iterator[DecodedBatch | LogFinding]:
            order = OffsetOrder()
            return chain.from_iterable(
                decode_batches(segment, detection, limits=self.limits, order=order)
                for segment, detection in zip(self.segments, self.detections, strict=True))

        return self._from_log_start(read)

    def items(self) -> Iterator[LogItem]:
        """`batches()` with stretches of quiet batches gathered into `QuietRun`s, those the
        reader found in a row decoded as one."""
        def read() -> Iterator[LogItem]:
            order = OffsetOrder()
            return quiet_runs(chain.from_iterable(
                decode_batches(segment, detection, limits=self.limits, order=order, runs=True)
                for segment, detection in zip(self.segments, self.detections, strict=True)))

        return self._from_log_start(read)

    def _from_log_start(self, read: Callable[[], Iterable[Item]]) -> Iterator[Item]:
        """`read()` from the log start (`from_log_start`). A start past the end of the
        segments' last batch is no log Kafka keeps (it may start at its end: every record
        deleted), but a damaged or mismatched checkpoint: a `log_start_past_end` finding,
        and the segments read from their start."""
        start = self.log_start_offset
        end = _End()
        kept = False
        for item in from_log_start(start, end.track(read())):
            kept = kept or not isinstance(item, LogFinding)
            yield item
        if end.offset is None and (span := self.empty_span) is not None:
            end.offset = span[1]
        if kept or end.offset is None or start <= end.offset:
            return
        yield LogFinding.of(
            LOG_START_PAST_END, f"{self.name}: the log start offset {start} a "
            f"log-start-offset-checkpoint gives lies past the end of its segments (offset "
            f"{end.offset}): the checkpoint is damaged or not of these segments; they are "
            f"read from their start", 0, start, f"{self.topic} {self.partition} {start}".encode(),
            source=str(self.segments[0].path.parent))
        yield from (item for item in read() if not isinstance(item, LogFinding))


LOG_START_PAST_END = "log_start_past_end"
"""The finding of a checkpointed log start past the end of a partition's segments."""


class _End:
    """The end offset (last offset + 1) of the batches an iteration passed, if any."""

    def __init__(self) -> None:
        self.offset: int | None = None

    def track(self, items: Iterable[Item]) -> Iterator[Item]:
        for item in items:
            if isinstance(item, DecodedBatch):
                self.offset = item.header.last_offset + 1
            elif isinstance(item, QuietRun):
                self.offset = item.headers[-1].last_offset + 1
            yield item


def from_log_start(start: int, items: Iterable[Item]) -> Iterator[Item]:
    """`items` without the batches wholly below the log start offset `start` (a quiet run
    reaching past it keeps its batches from the one holding it); findings pass."""
    if start <= 0:
        yield from items
        return
    for item in items:
        if isinstance(item, DecodedBatch):
            if item.header.last_offset >= start:
                yield item
        elif isinstance(item, QuietRun):
            if item.headers[0].last_offset >= start:
                yield item
            elif item.headers[-1].last_offset >= start:
                yield from (batch for batch in item.batches()
                            if batch.header.last_offset >= start)
        else:
            yield item


def _log_start(segment: Segment, roots: dict[Path, dict[tuple[str, int], int]]) -> int:
    """The checkpointed log start of the partition whose directory holds `segment` (0 when
    its folder is no partition directory or its root checkpoints none), or the later one
    another broker's copy of it checkpointed (`Segment.log_start`)."""
    topic, partition, folder = segment.topic, segment.partition, segment.path.parent
    if topic is None or partition is None or folder.name != f"{topic}-{partition}":
        return 0
    root = folder.parent
    if root not in roots:
        roots[root] = log_starts(root)
    return max(roots[root].get((topic, partition), 0), segment.log_start or 0, 0)


def checkpointed_starts(segments: Iterable[Segment]) -> dict[tuple[str, int], tuple[Path, int]]:
    """The checkpointed log start of each partition whose directory holds some of
    `segments` (the one the commands read from: `_log_start`), with the log.dirs root of
    that directory."""
    roots: dict[Path, dict[tuple[str, int], int]] = {}
    starts = {}
    for segment in segments:
        start = _log_start(segment, roots)
        if start and segment.topic is not None and segment.partition is not None:
            starts[(segment.topic, segment.partition)] = (segment.path.parent.parent, start)
    return starts


def log_key(segment: Segment, topic: str) -> tuple[str, object]:
    """Which partition log a segment of `topic` belongs to: its partition when its path
    names one, else its folder when it bears Kafka's segment name, else itself."""
    ident: object = segment.partition if segment.partition is not None else (
        segment.path.resolve().parent if segment.base_offset is not None else segment.path)
    return topic, ident


def loose_logs(segments: Iterable[Segment]) -> dict[str, list[list[Segment]]]:
    """Each topic's logs whose path names no partition (`log_key`: a file alone, or a folder
    of Kafka-named segments), each its segments in the order given, the logs in the order
    of their first path; segments whose topic cannot be detected are left out."""
    logs: dict[str, dict[object, list[Segment]]] = {}
    for segment in segments:
        if segment.partition is None:
            topic = detect_segment(segment).topic
            if topic is not None:
                _, ident = log_key(segment, topic)
                logs.setdefault(topic, {}).setdefault(ident, []).append(segment)
    return {topic: sorted(found.values(), key=lambda log: log[0].path)
            for topic, found in logs.items()}


def segment_rank(segment: Segment) -> tuple[int, str]:
    """Where a segment comes in its partition log: by base offset (then path)."""
    return segment.base_offset or 0, str(segment.path)


def partition_logs(segments: list[Segment], *, dialect: str | None = None,
                   topic: str | None = None, limits: ReadLimits = DEFAULT_LIMITS
                   ) -> tuple[list[PartitionLog], list[LogFinding]]:
    """Group `segments` into partition logs; detect each segment's topic and dialect. Also
    the findings of the segments whose topic is unknown (they belong to no log). A log whose
    path names no partition is numbered below 0: a topic's first by path -1, the next -2."""
    logs: dict[tuple[str, object], PartitionLog] = {}
    unknown: list[LogFinding] = []
    roots: dict[Path, dict[tuple[str, int], int]] = {}
    for segment in segments:
        detection = detect_segment(segment, dialect_name=dialect, topic=topic, limits=limits)
        if detection.topic is None:
            cap = FindingCap(limits.max_findings, str(segment.path))
            unknown.extend(item for item in segment_batches(segment, detection, limits=limits)
                           if isinstance(item, LogFinding)
                           and cap.admit(item.kind, item.position, item.offset))
            unknown.extend(cap.summary())
            continue
        key = log_key(segment, detection.topic)
        log = logs.get(key)
        if log is None:
            log = logs[key] = PartitionLog(detection.topic, segment.partition, limits=limits)
        log.segments.append(segment)
        log.detections.append(detection)
        log.log_start_offset = max(log.log_start_offset, _log_start(segment, roots))
    for log in logs.values():
        order = sorted(range(len(log.segments)), key=lambda i: segment_rank(log.segments[i]))
        log.segments = [log.segments[i] for i in order]
        log.detections = [log.detections[i] for i in order]
    loose: dict[str, list[PartitionLog]] = {}
    for unplaced in sorted(logs.values(), key=lambda lg: lg.segments[0].path):
        if unplaced.partition is None:
            loose.setdefault(unplaced.topic, []).append(unplaced)
    numbers = loose_partitions({t: [lg.segments for lg in found] for t, found in loose.items()},
                               {})  # as a fresh Spark run numbers them
    for unplaced in chain.from_iterable(loose.values()):
        unplaced.partition = numbers[str(unplaced.segments[0].path)][1]
    return sorted(logs.values(), key=lambda lg: (lg.topic, (lg.partition or 0) < 0,
                                                 abs(lg.partition or 0), lg.name)), unknown
