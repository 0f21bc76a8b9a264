"""One internal-topic partition that keeps growing, replayed as its records arrive.

`LiveLog` is a `LogSource` whose batches never end: the tailer puts chunks of consumed
records (their columns) or end-of-partition marks on its queue, and each chunk is decoded
by `arrow_log.consumed_chunk`, into the batches the Spark replay task makes of the bronze
rows of a live read (each record a batch of its own), with the same record decoder.
`PartitionReplay` runs the core's replay over it in a thread; the shared lock is held
while a chunk's records apply, so a reader under the lock sees the state between chunks,
never inside one.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import NamedTuple, TypeAlias, cast

from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import LogFinding
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.records.catalog import dialect as dialect_schemas
from sharestate.records.detect import detect
from sharestate.records.keyvalue import KeyValue
from sharestate.records.segment import LogItem, QuietRun, record_finding
from sharestate.replay.group_log import GroupLogResult, GroupReplay, group_state
from sharestate.replay.share_log import ShareLogResult, ShareReplay, share_state
from sharestate.replay.snapshot import Snapshot
from sharestate.tables.arrow_log import consumed_chunk

LOG = logging.getLogger("sharestate.serve")
DETECT_SAMPLE = 64
"""Records of a partition's first chunk its dialect is detected from."""
BACKLOG_CHUNKS = 8
"""Chunks a partition's queue holds before the tailer waits for its replay: while catching
up the consumer reads faster than the replays apply, and an unbounded queue would hold the
difference, growing with the log's length. A waiting tailer leaves librdkafka's own
(bounded) fetch queue to fill, then it stops fetching."""
HANDOVER_WAIT_S = 0.1
"""How often a wait on a full queue checks that its replay still runs."""
_ERROR = itemgetter(5)  # KeyValue.error


class Consumed(NamedTuple):
    """Consumed records of one partition in offset order, by column (a consumer sees
    neither batch boundaries nor batch headers)."""

    offsets: list[int]
    timestamps: list[int]
    timestamp_types: list[str]
    """CreateTime, LogAppendTime or NoTimestampType."""
    keys: list[bytes | None]
    values: list[bytes | None]


Chunk: TypeAlias = Consumed | int
"""Consumed records of one partition, or the offset its end was seen at."""


class LiveLog:
    """A partition log fed by the tailer (see the module docstring)."""

    def __init__(self, topic: str, partition: int, dialect: str, lock: threading.Lock,
                 progress: Progress) -> None:
        self.topic = topic
        self.partition = partition
        self.dialect = dialect
        self.schemas = dialect_schemas(dialect)
        self.lock = lock
        self.progress = progress
        self.chunks: queue.Queue[Chunk | None] = queue.Queue(BACKLOG_CHUNKS)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dialects(self) -> tuple[str, ...]:
        return (self.dialect,)

    def items(self) -> Iterator[LogItem]:
        """Each chunk's batches (quiet ones in runs) until `None` is put; the lock is held
        from a chunk's first batch until its last has applied."""
        while (chunk := self.chunks.get()) is not None:
            with self.lock:
                if isinstance(chunk, int):
                    self.progress.reached(chunk)
                    continue
                batches = consumed_chunk(self.topic, self.schemas, *chunk)
                # consumed records are all data records: their decodings are KeyValues
                errors = list(map(_ERROR, cast(list[KeyValue], batches.decoded)))
                if errors.count(None) == len(errors):  # every record decoded
                    yield from batches.items()
                else:
                    for item in batches.items():
                        yield from self._with_failures(item)
                self.progress.consumed(chunk)

    def _with_failures(self, item: LogItem) -> Iterator[LogItem]:
        """`item`, each record that did not decode a finding of its batch (`failed`), as
        the segment reader gives them; a quiet run holding one is given batch by batch."""
        if isinstance(item, QuietRun):
            if not any(isinstance(d, KeyValue) and d.error is not None for d in item.decoded):
                yield item
                return
            for batch in item.batches():
                yield from self._with_failures(batch)
            return
        if isinstance(item, LogFinding):
            yield item
            return
        failed = tuple(f for r, d in zip(item.records, item.decoded, strict=True)
                       if (f := record_finding(item.header, r, d, self.name)) is not None)
        yield item._replace(failed=failed) if failed else item


@dataclass
class Progress:
    """How far a partition has been read: the next offset to consume, records applied and
    the last applied record's timestamp (all read under the shared lock)."""

    position: int = 0
    records: int = 0
    last_timestamp: int | None = None
    at_end: bool = False
    """Every record up to an end the consumer saw is applied (so also every one up to the
    end seen at start, unless the log went back since and this is its new replay)."""

    def consumed(self, chunk: Consumed) -> None:
        self.position = max(self.position, chunk.offsets[-1] + 1)
        self.records += len(chunk.offsets)
        self.last_timestamp = chunk.timestamps[-1]

    def reached(self, end: int) -> None:
        """The consumer saw the partition's end at `end` (past trailing control records)."""
        self.position = max(self.position, end)
        self.at_end = True


@dataclass
class PartitionCheckpoint:
    """What a checkpoint keeps of one partition: how far it was read and, once its replay
    started, the dialect it was read with and the replay's snapshot."""

    progress: Progress
    dialect: str | None = None
    snapshot: Snapshot | None = None


@dataclass
class ReplayOptions:
    """How the replays run: a pinned dialect (None: detect), semantics, Kafka's config."""

    dialect: str | None = None
    semantics: str = KAFKA
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT


@dataclass
class PartitionReplay:
    """The replay of one internal-topic partition: started by its first chunk (which
    tells its dialect) or restored from a checkpoint, then fed until `stop`."""

    topic: str
    partition: int
    lock: threading.Lock
    options: ReplayOptions
    progress: Progress = field(default_factory=Progress)
    log: LiveLog | None = None
    share: ShareReplay | None = None
    group: GroupReplay | None = None
    thread: threading.Thread | None = None
    failure: BaseException | None = None
    fed: int = 0
    """The offset after the last record handed to the replay thread."""

    def feed(self, chunk: Chunk) -> None:
        """Queue consumed records (or an end mark) for the replay thread. Records that go
        back behind what was fed mean the log itself went back (the topic was deleted and
        created again, or its log truncated; the consumer then reads it again from its log
        start): the partition's replay starts over from them."""
        if self.failure is not None:  # the service is stopping: nothing more applies
            return
        if isinstance(chunk, Consumed):
            if chunk.offsets[0] < self.fed:
                self._start_over(chunk.offsets[0])
            self.fed = chunk.offsets[-1] + 1
        if self.log is None:
            if isinstance(chunk, int):
                with self.lock:
                    self.progress.reached(chunk)
                return
            sample = zip(chunk.keys[:DETECT_SAMPLE], chunk.values[:DETECT_SAMPLE], strict=True)
            self._start(detect(sample, topic=self.topic,
                               dialect_name=self.options.dialect).dialect)
        self._hand_over(chunk)

    def checkpoint(self) -> PartitionCheckpoint:
        """This partition as a checkpoint keeps it (call under the lock, between chunks)."""
        replay = self.share or self.group
        if self.log is None or replay is None:
            return PartitionCheckpoint(replace(self.progress))
        return PartitionCheckpoint(replace(self.progress), self.log.dialect, replay.snapshot())

    def restore(self, saved: PartitionCheckpoint) -> None:
        """Continue from `saved` (before anything is fed): the next chunk is the record at
        its position."""
        self.progress = saved.progress
        self.fed = saved.progress.position
        if saved.dialect is not None and saved.snapshot is not None:
            self._start(saved.dialect, saved.snapshot)

    def _start_over(self, first: int) -> None:
        """Drop what was replayed (after the replay thread applied what it was given): the
        log it described is gone. Readers see no state for the partition until the new
        log's records apply."""
        LOG.warning("%s-%d: offset %d comes after %d (the topic was created again or its "
                    "log truncated): replaying the partition from there", self.topic,
                    self.partition, first, self.fed - 1)
        self.stop()
        with self.lock:
            self.progress = Progress()
            self.log = self.share = self.group = self.thread = None

    def _start(self, dialect: str, resume: Snapshot | None = None) -> None:
        self.log = LiveLog(self.topic, self.partition, dialect, self.lock, self.progress)
        replay: ShareReplay | GroupReplay
        try:
            if self.topic == SHARE_STATE_TOPIC:
                replay = self.share = ShareReplay.restore(resume) if resume else ShareReplay(
                    share_state(self.topic, self.partition, (dialect,),
                                semantics=self.options.semantics,
                                snapshot_update_records_per_snapshot=(
                                    self.options.snapshot_update_records_per_snapshot)))
            else:
                replay = self.group = GroupReplay.restore(resume) if resume else GroupReplay(
                    group_state(self.topic, self.partition, dialect))
        except Exception as exc:  # a restored state the replay cannot go on from
            self.failure = exc
            return
        self.thread = threading.Thread(target=self._run, args=(self.log, replay),
                                       name=f"replay-{self.log.name}", daemon=True)
        self.thread.start()

    def _run(self, log: LiveLog, replay: ShareReplay | GroupReplay) -> None:
        try:
            for item in log.items():
                replay.apply(item)
        except BaseException as exc:  # surfaced by /healthz and the service's exit
            self.failure = exc

    @property
    def share_result(self) -> ShareLogResult | None:
        return self.share.result if self.share is not None else None

    @property
    def group_result(self) -> GroupLogResult | None:
        return self.group.result if self.group is not None else None

    def _hand_over(self, chunk: Chunk | None) -> None:
        """Put `chunk` on the replay's queue once it has room; dropped if the replay thread
        has ended (its failure is reported, and nothing would read it)."""
        assert self.log is not None and self.thread is not None
        while self.thread.is_alive():
            try:
                self.log.chunks.put(chunk, timeout=HANDOVER_WAIT_S)
                return
            except queue.Full:
                continue

    def stop(self) -> None:
        if self.log is not None and self.thread is not None:
            self._hand_over(None)
            self.thread.join(timeout=10)
