"""One internal-topic partition replayed as its records arrive, by the service's one writer.

`PartitionReplay` holds the core's replay of one partition (`ShareReplay` for
`__share_group_state`, `GroupReplay` for `__consumer_offsets`), started by its first records
(which tell its dialect) or restored from a checkpoint, and how far it was read
(`Progress`). Only the tailer's thread calls it: records are applied on that thread as they
are consumed (`sharestate.cluster.consumed`: the batches the Spark replay task makes of the
bronze rows of a live read, with the same record decoder). Its findings, the log's and
those of the share shard's replay, are listed as a segment's are (`FindingCap`, one per
partition): the first `--max-findings` in full, held by the replay, the rest counted per
kind, so a partition of records that do not decode or apply holds no more than that.
What readers see of it is a view the writer makes and publishes
(`sharestate.app.serve.view`), never the replay itself.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

from sharestate.cluster.consumed import consumed_items
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import DEFAULT_MAX_FINDINGS, BatchHeader, RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.records.catalog import dialect as dialect_schemas
from sharestate.records.detect import detect
from sharestate.records.keyvalue import KeyValue
from sharestate.records.segment import DecodedBatch, FindingCap, QuietRun
from sharestate.replay.group_log import GroupReplay, group_state
from sharestate.replay.share_log import ShareReplay, share_state
from sharestate.replay.snapshot import Snapshot

LOG = logging.getLogger("sharestate.serve")
DETECT_SAMPLE = 64
"""Records of a partition's first run its dialect is detected from."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a partition has been read: the next offset to consume, records applied, the
    last applied record's timestamp, and whether every record up to an end the consumer saw
    is applied (so also every one up to the end seen at start, unless the log went back
    since and this is its new replay)."""

    position: int = 0
    records: int = 0
    last_timestamp: int | None = None
    at_end: bool = False


Omitted = dict[str, tuple[int, int, int | None]]
"""The findings a partition counted, not listed: kind -> (count, the first one's position
and offset), as `FindingCap.omitted` holds them."""


@dataclass
class PartitionCheckpoint:
    """What a checkpoint keeps of one partition: how far it was read and, once its replay
    started, the dialect it was read with, the replay's snapshot (its listed findings with
    it) and the findings counted past them."""

    progress: Progress
    dialect: str | None = None
    snapshot: Snapshot | None = None
    omitted: Omitted = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayOptions:
    """How the replays run: a pinned dialect (None: detect), semantics, Kafka's config,
    and how many findings of a partition are listed one by one (`--max-findings`)."""

    dialect: str | None = None
    semantics: str = KAFKA
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
    max_findings: int = DEFAULT_MAX_FINDINGS


class PartitionReplay:
    """The replay of one internal-topic partition (see the module docstring). `failure` is
    set once its replay raised (a bug: records that do not decode are findings); it then
    takes no more records. `touched` holds the groups whose records it applied since the
    writer last took them (`__consumer_offsets`: every record's key starts with its group),
    `changed` whether anything changed since then. `cap` counts the findings past those the
    replay lists."""

    def __init__(self, topic: str, partition: int, options: ReplayOptions,
                 start_end: int | None = None, saved: PartitionCheckpoint | None = None
                 ) -> None:
        self.topic = topic
        self.partition = partition
        self.options = options
        self.start_end = start_end
        """The partition's end when the service started (None: it appeared later)."""
        self.progress = Progress()
        self.dialect: str | None = None
        self.share: ShareReplay | None = None
        self.group: GroupReplay | None = None
        self.failure: str | None = None
        self.cap = self._cap()
        self.fed = 0
        """The offset after the last record applied."""
        self.changed = True
        self.touched: set[str] = set()
        self.every_group = True
        """Every group may have changed since the writer last took `touched` (at the start,
        and when the log went back)."""
        if saved is not None:
            self.progress = saved.progress
            self.fed = saved.progress.position
            if saved.dialect is not None and saved.snapshot is not None:
                replay = self._start(saved.dialect, saved.snapshot)
                if replay is not None:
                    self.cap.left -= len(replay.result.findings) + (
                        len(replay.result.shard.findings)
                        if isinstance(replay, ShareReplay) else 0)
                    self.cap.omitted = {kind: list(counted)
                                        for kind, counted in saved.omitted.items()}

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def apply(self, records: list[RawRecord], headers: list[BatchHeader]) -> None:
        """Apply consumed `records` (in offset order, each a batch of its own: `headers`).
        Records that go back behind what was applied mean the log itself went back (the
        topic was deleted and created again, or its log truncated; the consumer then reads
        it again from its log start): the partition's replay starts over from them."""
        if self.failure is not None or not records:
            return
        if records[0].offset < self.fed:
            self._start_over(records[0].offset)
        replay = self.share or self.group
        if replay is None:
            sample = [(r.key, r.value) for r in records[:DETECT_SAMPLE]]
            replay = self._start(detect(sample, topic=self.topic,
                                        dialect_name=self.options.dialect).dialect)
            if replay is None:  # its failure says why
                return
        assert self.dialect is not None
        self.fed = records[-1].offset + 1
        self.changed = True
        try:
            for item in consumed_items(self.topic, dialect_schemas(self.dialect), self.name,
                                       records, headers, self.cap):
                if self.group is not None:
                    self.touched.update(_groups(item))
                replay.apply(item)
        except Exception as exc:  # a bug: surfaced by /healthz and the service's exit
            self.failure = f"replay of {self.name} failed: {exc!r}"
            LOG.debug("replay of %s failed", self.name, exc_info=True)
            return
        progress = self.progress
        self.progress = Progress(max(progress.position, self.fed),
                                 progress.records + len(records), records[-1].timestamp,
                                 progress.at_end)

    def reached(self, end: int) -> None:
        """The consumer saw the partition's end at `end` (past trailing control records);
        not once the replay failed (what it applied does not reach there)."""
        if self.failure is not None:
            return
        self.changed = True
        self.progress = replace(self.progress, position=max(self.progress.position, end),
                                at_end=True)

    def checkpoint(self) -> PartitionCheckpoint:
        """This partition as a checkpoint keeps it (the replay's snapshot, Arrow tables that
        stay as taken: another thread may encode and write them)."""
        replay = self.share or self.group
        if replay is None:
            return PartitionCheckpoint(self.progress)
        return PartitionCheckpoint(self.progress, self.dialect, replay.snapshot(), {
            kind: (count, position, offset)
            for kind, (count, position, offset) in self.cap.omitted.items()})

    def take_touched(self) -> set[str] | None:
        """The groups touched since the last call (None: every group may have changed);
        cleared, and `changed` with them."""
        touched = None if self.every_group else self.touched
        self.touched, self.every_group, self.changed = set(), False, False
        return touched

    def out_of_range(self, position: int | None) -> None:
        """The consumer's position (None: not known) lies outside the log: below its log
        start (Kafka's share coordinator pruned records this replay never read, such as a
        deleted group's tombstones) or past its end (the log truncated). A coordinator loads
        the log from its log start: the partition is replayed from there, from scratch."""
        LOG.warning("%s: position %s is outside the log (records deleted before they were "
                    "read, or the log truncated): replaying the partition from its log start",
                    self.name, "unknown" if position is None or position < 0 else position)
        self._forget()
        self.fed = 0

    def _start_over(self, first: int) -> None:
        """Drop what was replayed: the log it described is gone. Views show no state for
        the partition until the new log's records apply."""
        LOG.warning("%s: offset %d comes after %d (the topic was created again or its log "
                    "truncated): replaying the partition from there", self.name, first,
                    self.fed - 1)
        self._forget()

    def _forget(self) -> None:
        """Drop the replay and how far it read."""
        self.progress = Progress()
        self.dialect = self.share = self.group = None
        self.cap = self._cap()
        self.every_group, self.touched = True, set()

    def _cap(self) -> FindingCap:
        return FindingCap(self.options.max_findings, self.name, "partition")

    def _start(self, dialect: str, resume: Snapshot | None = None
               ) -> ShareReplay | GroupReplay | None:
        """The partition's replay, fresh or restored (None, and `failure` set, when a
        restored state is one the replay cannot go on from)."""
        self.dialect = dialect
        try:
            if self.topic == SHARE_STATE_TOPIC:
                self.share = ShareReplay.restore(resume) if resume else ShareReplay(
                    share_state(self.topic, self.partition, (dialect,),
                                semantics=self.options.semantics,
                                snapshot_update_records_per_snapshot=(
                                    self.options.snapshot_update_records_per_snapshot)))
                self.share.result.shard.cap = self.cap
                return self.share
            self.group = GroupReplay.restore(resume) if resume else GroupReplay(
                group_state(self.topic, self.partition, dialect))
            return self.group
        except Exception as exc:  # a restored state the replay cannot go on from
            self.failure = f"replay of {self.name} failed: {exc!r}"
            return None


def _groups(item: Any) -> set[str]:
    """The groups the records of an item of `__consumer_offsets` belong to (a key that did
    not decode names none: its record changes nothing but the findings)."""
    decoded = item.decoded if isinstance(item, QuietRun | DecodedBatch) else ()
    return {kv.key[0] for kv in decoded
            if isinstance(kv, KeyValue) and kv.key is not None and kv.key}
