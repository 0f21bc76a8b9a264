"""Replay one `__consumer_offsets` partition log as Kafka's loader does, as of any point.

`GroupReplay` is pushed the log's items in log order, as Kafka's loader feeds
`GroupCoordinatorShard.replay`; `replay_group_log` is the loop that feeds it a whole log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sharestate.coordinator.group_offsets import OffsetListener
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.log import ControlRecord, LogFinding
from sharestate.records.catalog import dialect
from sharestate.records.segment import DecodedBatch, LogItem, QuietRun
from sharestate.replay.logs import END, AsOf, LogSource, before_log_finding

if TYPE_CHECKING:
    from sharestate.replay.snapshot import Snapshot

Observer = Callable[[DecodedBatch | LogFinding], None]
"""Sees each batch (or batch-level finding) before its records apply; not a batch whose
first record is past the stop point."""


@dataclass
class GroupLogResult:
    """The state of one replayed offsets partition: the coordinator state and what the log
    looked like up to the last record applied."""

    topic: str
    partition: int | None
    name: str
    coordinator: GroupCoordinatorReplay
    last_applied_offset: int | None = None
    last_applied_timestamp: int | None = None
    records: int = 0
    findings: list[LogFinding] = field(default_factory=list)
    """Every finding of the log read (up to the stop point), as `ShareLogResult`'s."""


def replay_group_log(log: LogSource, *, as_of: AsOf = END,
                     listener: OffsetListener | None = None,
                     observe: Observer | None = None) -> GroupLogResult:
    """Replay `log` up to `as_of` (default: its end): its batches applied one by one."""
    replay = GroupReplay.of_log(log, as_of=as_of, listener=listener, observe=observe)
    replay.run(log.batches())
    return replay.result


def group_state(topic: str, partition: int | None, dialect_name: str, *,
                name: str | None = None, listener: OffsetListener | None = None
                ) -> GroupLogResult:
    """The empty state of an offsets partition whose records are of `dialect_name`."""
    return GroupLogResult(topic, partition, name or f"{topic}-{partition}",
                          GroupCoordinatorReplay(dialect(dialect_name), listener))


class GroupReplay:
    """One `__consumer_offsets` partition replayed as its log items arrive.

    `apply` takes a decoded batch (a `QuietRun` batch by batch) or a batch-level finding,
    in log order, and updates `result`, the whole state. Records past the stop point
    `as_of` are not applied: `stopped` turns true and later items change nothing.
    `observe` sees each batch before its records apply (not one whose first record is past
    the stop point).
    """

    def __init__(self, result: GroupLogResult, *, as_of: AsOf = END,
                 observe: Observer | None = None) -> None:
        self.result = result
        self.as_of = as_of
        self.observe = observe
        self.stopped = False

    @classmethod
    def of_log(cls, log: LogSource, *, as_of: AsOf = END,
               listener: OffsetListener | None = None, observe: Observer | None = None
               ) -> GroupReplay:
        """A replay of `log` from its start (feed it `log.batches()`); its records are
        decoded under the log's last dialect."""
        return cls(group_state(log.topic, log.partition, log.dialects[-1], name=log.name,
                               listener=listener), as_of=as_of, observe=observe)

    def snapshot(self) -> Snapshot:
        """The whole state as versioned Arrow tables (`sharestate.replay.snapshot`)."""
        from sharestate.replay.group_snapshot import group_snapshot  # pyarrow: only here

        return group_snapshot(self.result, self.stopped)

    @classmethod
    def restore(cls, snapshot: Snapshot, *, as_of: AsOf = END,
                listener: OffsetListener | None = None, observe: Observer | None = None
                ) -> GroupReplay:
        """The replay a snapshot was taken of, to be fed the log's items after it (its offset
        events from then on going to `listener`): it goes on to exactly the state of a
        replay never interrupted."""
        from sharestate.replay.group_snapshot import restore_group

        result, stopped = restore_group(snapshot, listener)
        replay = cls(result, as_of=as_of, observe=observe)
        replay.stopped = stopped
        return replay

    def run(self, items: Iterable[LogItem]) -> None:
        """Apply `items` in turn until they end or the stop point is reached."""
        for item in items:
            self.apply(item)
            if self.stopped:
                return

    def apply(self, item: LogItem) -> None:
        """Apply the next item of the log."""
        if isinstance(item, QuietRun):
            for batch in item.batches():
                self.apply(batch)
            return
        if self.stopped:
            return
        result, as_of = self.result, self.as_of
        if isinstance(item, LogFinding):
            if self.observe is not None:
                self.observe(item)
            result.findings.append(item)
            return
        records = item.records
        if records and as_of.passed(records[0].offset, records[0].timestamp):
            if result.last_applied_offset is None and (found := before_log_finding(
                    result.name, as_of, records[0].offset, records[0].timestamp)):
                result.findings.append(found)
            self.stopped = True
            return
        if self.observe is not None:
            self.observe(item)
        result.findings.extend(item.findings)
        result.findings.extend(item.failed)
        coordinator = result.coordinator
        producer_id = item.header.producer_id
        for record, decoded in zip(records, item.decoded, strict=True):
            if as_of.passed(record.offset, record.timestamp):
                self.stopped = True
                return
            if isinstance(decoded, ControlRecord):
                if decoded.type in ("COMMIT", "ABORT"):
                    coordinator.end_transaction(producer_id, decoded.type == "COMMIT",
                                                record.offset)
            elif not isinstance(decoded, LogFinding):  # a bad one is in `item.failed`
                coordinator.replay(record.offset, producer_id, decoded, record.timestamp)
            result.records += 1
            result.last_applied_offset = record.offset
            result.last_applied_timestamp = record.timestamp
