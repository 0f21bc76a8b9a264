"""Replay one `__consumer_offsets` partition log as Kafka's loader does, as of any point."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sharestate.coordinator.group_offsets import OffsetListener
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.log import ControlRecord, LogFinding
from sharestate.records.catalog import dialect
from sharestate.records.segment import DecodedBatch
from sharestate.replay.logs import END, AsOf, LogSource


@dataclass
class GroupLogResult:
    """A replayed offsets partition: the coordinator state and the log's findings."""

    log: LogSource
    coordinator: GroupCoordinatorReplay
    last_applied_offset: int | None = None
    last_applied_timestamp: int | None = None
    records: int = 0
    findings: list[LogFinding] = field(default_factory=list)
    """Every finding of the log read (up to the stop point), as `ShareLogResult`'s."""


def replay_group_log(log: LogSource, *, as_of: AsOf = END,
                     listener: OffsetListener | None = None,
                     observe: Callable[[DecodedBatch | LogFinding], None] | None = None
                     ) -> GroupLogResult:
    """Replay `log` up to `as_of` (default: its end); `observe` sees each batch before its
    records apply (not one whose first record is past the stop point)."""
    replay = GroupReplay(log, as_of=as_of, listener=listener, observe=observe)
    for _ in replay.steps():
        pass
    return replay.result


class GroupReplay:
    """`replay_group_log` as steps (one per batch read): `result` is current between steps
    and complete when the iteration ends (what a replay that follows a live log reads).
    `resume` continues an earlier replay of the same log from the result it left between
    two steps (a checkpoint), over `log`, which starts where that one stopped."""

    def __init__(self, log: LogSource, *, as_of: AsOf = END,
                 listener: OffsetListener | None = None,
                 observe: Callable[[DecodedBatch | LogFinding], None] | None = None,
                 resume: GroupLogResult | None = None) -> None:
        if resume is None:
            names = list(log.dialects)
            self.result = GroupLogResult(log, GroupCoordinatorReplay(dialect(names[-1]),
                                                                     listener))
        else:  # the same log, continued from where an earlier replay of it stopped
            resume.log = log
            self.result = resume
        self.as_of = as_of
        self.observe = observe

    def steps(self) -> Iterator[None]:
        result, as_of, observe = self.result, self.as_of, self.observe
        coordinator = result.coordinator
        for item in result.log.batches():
            if observe is not None and (isinstance(item, LogFinding) or not item.records or not
                                        as_of.passed(item.records[0].offset,
                                                     item.records[0].timestamp)):
                observe(item)
            if isinstance(item, LogFinding):
                result.findings.append(item)
                yield None
                continue
            header = item.header
            if item.records and as_of.passed(item.records[0].offset, item.records[0].timestamp):
                return
            result.findings.extend(item.findings)
            result.findings.extend(item.failed)
            for record, decoded in zip(item.records, item.decoded, strict=True):
                if as_of.passed(record.offset, record.timestamp):
                    return
                if isinstance(decoded, ControlRecord):
                    if decoded.type in ("COMMIT", "ABORT"):
                        coordinator.end_transaction(header.producer_id,
                                                    decoded.type == "COMMIT", record.offset)
                elif not isinstance(decoded, LogFinding):  # a bad one is in `item.failed`
                    coordinator.replay(record.offset, header.producer_id, decoded,
                                       record.timestamp)
                result.records += 1
                result.last_applied_offset = record.offset
                result.last_applied_timestamp = record.timestamp
            yield None
