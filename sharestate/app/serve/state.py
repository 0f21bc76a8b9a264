"""What the service answers: the live replays read under the shared lock, in the shapes of
the offline commands (`sharestate state`, `offsets`) and of the Delta tables (lag,
redelivery, prune recommendations)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from sharestate.analytics.context import StateContext, live_states
from sharestate.analytics.lag import LIVE, EndOffsets, lag_rows, topic_names
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.app.serve.end_offset_log import EndOffsetLog
from sharestate.app.serve.live_log import PartitionCheckpoint, PartitionReplay, ReplayOptions
from sharestate.cluster import KafkaSourceError
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.segment import finding_json
from sharestate.replay.prune import prune_recommendation
from sharestate.replay.rows import offset_rows, state_rows
from sharestate.replay.share_log import ShareLogResult

LOG = logging.getLogger("sharestate.serve")
END_OFFSETS_TTL_S = 2.0
"""How long fetched data-topic end offsets are reused (lag, metrics)."""


@dataclass
class Readiness:
    """Applied every record up to the end offsets seen at start?"""

    ready: bool
    behind: int
    partitions: int

    def json(self) -> dict[str, Any]:
        return {"ready": self.ready, "records_behind_start_end": self.behind,
                "partitions": self.partitions}


class LiveState:
    """Every internal-topic partition's replay, and the views over them."""

    def __init__(self, partitions: list[tuple[str, int]], start_ends: dict[tuple[str, int], int],
                 options: ReplayOptions, end_offsets: Callable[[], EndOffsets],
                 retention_minutes: int,
                 restored: Mapping[tuple[str, int], PartitionCheckpoint] | None = None) -> None:
        self.lock = threading.Lock()
        self.options = options
        self.replays = {where: PartitionReplay(*where, self.lock, options)
                        for where in sorted(partitions)}
        for where, saved in (restored or {}).items():
            self.replays[where].restore(saved)
        self.start_ends = start_ends
        self.fetch_end_offsets = end_offsets
        self.retention_minutes = retention_minutes
        self._ends: tuple[float, EndOffsets] | None = None
        self.end_offset_log = EndOffsetLog()

    def _share(self) -> Iterator[ShareLogResult]:
        for (topic, _), replay in self.replays.items():
            if topic == SHARE_STATE_TOPIC and (result := replay.share_result) is not None:
                yield result

    def add(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], PartitionReplay]:
        """Replays of partitions that appeared after the start (not yet fed). `replays` is
        replaced by a new dict, never changed in place: a reader without the lock iterates
        the old one or the new one, whole."""
        new = {where: PartitionReplay(*where, self.lock, self.options)
               for where in partitions if where not in self.replays}
        with self.lock:
            self.replays = dict(sorted({**self.replays, **new}.items()))
        return new

    def readiness(self) -> Readiness:
        """How far from the end seen at start, read without the lock (a readiness probe
        must not wait behind replays applying chunk after chunk): each partition's position
        is one int attribute, replaced whole and only ever growing, so the sum is of values
        the positions really had, and `replays` is never changed in place (`add`). A
        partition replayed again because its log went back counts once it reached the new
        log's end."""
        replays = self.replays
        behind = sum(0 if (progress := replays[where].progress).at_end
                     else max(end - progress.position, 0)
                     for where, end in self.start_ends.items())
        return Readiness(behind == 0, behind, len(replays))

    def positions(self) -> dict[tuple[str, int], int]:
        """The next offset to read of each partition (call under the lock)."""
        return {where: replay.progress.position for where, replay in self.replays.items()}

    def records_applied(self) -> int:
        """Records applied over all partitions (call under the lock)."""
        return sum(replay.progress.records for replay in self.replays.values())

    def checkpoint(self) -> dict[tuple[str, int], PartitionCheckpoint]:
        """Every partition as a checkpoint keeps it (call under the lock)."""
        return {where: replay.checkpoint() for where, replay in self.replays.items()}

    def failure(self) -> str | None:
        """Why a replay thread died (an internal error), if one did; without the lock
        (`failure` is set once, `replays` never changed in place)."""
        for replay in self.replays.values():
            if replay.failure is not None:
                return f"replay of {replay.topic}-{replay.partition} failed: {replay.failure!r}"
        return None

    def share_partitions(self, group: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [row for result in self._share() for row in state_rows(result, group)]

    def end_offsets(self) -> EndOffsets:
        """The data topics' end offsets from the cluster (reused for `END_OFFSETS_TTL_S`);
        none when the cluster does not answer (lag is then the state's lower bound, and
        says so), with a warning."""
        now = time.monotonic()
        if self._ends is None or now - self._ends[0] > END_OFFSETS_TTL_S:
            asked = int(time.time() * 1000)
            try:
                ends = self.fetch_end_offsets()
            except KafkaSourceError as exc:
                LOG.warning("%s: lag is a lower bound from the state", exc)
                ends = {}
            self.end_offset_log.add(asked, int(time.time() * 1000), ends)
            self._ends = (now, ends)
        return self._ends[1]

    def end_offset_rows(self) -> list[dict[str, Any]]:
        """The end offsets read so far, as `EndOffsetLog.rows` (a read now included)."""
        self.end_offsets()
        with self.lock:
            names = self.names()
        return self.end_offset_log.rows(names)

    def names(self) -> dict[str, str]:
        """Topic id -> name from the share groups' metadata (call under the lock)."""
        names: dict[str, str] = {}
        for (topic, _), replay in self.replays.items():
            if topic == CONSUMER_OFFSETS_TOPIC and (result := replay.group_result) is not None:
                names.update(topic_names(result.coordinator.groups.share_partitions))
        return names

    def lag(self, group: str | None = None) -> list[dict[str, Any]]:
        ends = self.end_offsets()
        with self.lock:
            names = self.names()
            return [row for result in self._share() for row in lag_rows(
                _states(result, group), StateContext.of(result), end_offsets=ends,
                end_offset_source=LIVE, names=names)]

    def redelivery(self, group: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [row for result in self._share() for row in redelivery_rows(
                _states(result, group), StateContext.of(result))]

    def prune(self) -> list[dict[str, Any]]:
        with self.lock:
            return [prune_recommendation(result) for result in self._share()]

    def consumer_group_offsets(self, group: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [row for (topic, _), replay in self.replays.items()
                    if topic == CONSUMER_OFFSETS_TOPIC
                    and (result := replay.group_result) is not None
                    for row in offset_rows(result.coordinator, self.retention_minutes,
                                           group=group)]

    def findings(self) -> list[dict[str, Any]]:
        with self.lock:
            rows: list[dict[str, Any]] = []
            for (topic, partition), replay in self.replays.items():
                result = replay.share_result or replay.group_result
                if result is not None:
                    rows.extend(finding_json(f, topic, partition) for f in result.findings)
            return rows

    def stop(self) -> None:
        for replay in self.replays.values():
            replay.stop()


def _states(result: ShareLogResult, group: str | None) -> list[tuple[Any, Any]]:
    return [(key, state) for key, state in sorted(live_states(result.shard))
            if group is None or key.group_id == group]
