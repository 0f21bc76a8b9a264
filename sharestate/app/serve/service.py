"""Wiring: the cluster's partitions, their replays (fresh or from a checkpoint), the tailer
(the one writer), the checkpoints and the HTTP server (which reads what the tailer
publishes)."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sharestate.app.serve.checkpoint import (
    Checkpointer,
    CheckpointStore,
    CheckpointUnusable,
    Restored,
    Settings,
)
from sharestate.app.serve.end_offset_log import DataTopicEnds
from sharestate.app.serve.http import HttpServer, listening, make_server
from sharestate.app.serve.partition import PartitionCheckpoint, PartitionReplay, ReplayOptions
from sharestate.app.serve.tailer import Tailer
from sharestate.app.serve.view import View
from sharestate.cluster import KafkaReadOptions, check_reachable, fetch_topic_ends
from sharestate.cluster.kafka_plan import ClusterNotReady, cluster_watermarks
from sharestate.log.discovery import INTERNAL_TOPICS

LOG = logging.getLogger("sharestate.serve")

Where = tuple[str, int]
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


@dataclass(frozen=True)
class CheckpointOptions:
    """Where checkpoints go and how often: every `records` records or `seconds` seconds."""

    directory: Path
    records: int
    seconds: float


@dataclass
class Service:
    """A running service: `close()` stops the server and the tailer, then writes a last
    checkpoint."""

    tailer: Tailer
    server: HttpServer
    checkpointer: Checkpointer | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def failure(self) -> str | None:
        """Why the service cannot go on, if it cannot: a partition's replay failed, or the
        cluster reader did (or stopped) before `close`."""
        return failure(self.tailer, self.tailer.view)

    def close(self, *, checkpoint: bool = True) -> None:
        """Stop everything; write a last checkpoint unless `checkpoint` is false (after a
        failure: a restart then resumes from the last good one)."""
        self.server.close()
        self.tailer.stop()
        if self.checkpointer is not None:
            last = self.tailer.checkpoint() if checkpoint and not self.tailer.is_alive() else None
            self.checkpointer.close(last)


def failure(tailer: Tailer, view: View) -> str | None:
    """Why the service cannot go on, as `view` and the tailer's thread say: a replay or the
    reader failed, or the reader stopped (it stops only at `close`)."""
    found = view.failure()
    if found is not None or tailer.stopping.is_set() or tailer.is_alive() \
            or tailer.ident is None:
        return found
    return "the cluster reader stopped"


class Stopped(Exception):
    """The service was asked to stop while it waited for the cluster."""


def start(options: KafkaReadOptions, listen: tuple[str, int], replay: ReplayOptions,
          *, retention_minutes: int, version: str,
          checkpoints: CheckpointOptions | None = None, connect_timeout: float = 10.0,
          stop: threading.Event | None = None) -> Service:
    """Listen on `listen`, plan the partitions from the cluster (`wait_for_cluster`), resume
    from the checkpoint if there is one, start reading and serve. Raises ListenError when
    the address cannot be listened on, KafkaSourceError when the cluster cannot be read
    (not for errors that pass: those are waited out), CheckpointRefused when the checkpoint
    directory cannot be used, Stopped when `stop` is set while it waits."""
    listener = listening(listen)
    store: CheckpointStore | None = None
    try:
        cluster_id, ranges = wait_for_cluster(options, connect_timeout,
                                              stop or threading.Event())
        restored: dict[Where, PartitionCheckpoint] = {}
        if checkpoints is not None:
            store = CheckpointStore(checkpoints.directory, Settings(
                cluster_id, replay.semantics, replay.dialect,
                replay.snapshot_update_records_per_snapshot))
            store.lock()
            try:
                restored = _resumable(store.load(), ranges)
            except CheckpointUnusable as exc:
                LOG.warning("%s: replaying from the log start", exc)
        return _serve(options, listener, replay, ranges, restored, store, checkpoints,
                      retention_minutes=retention_minutes, version=version)
    except BaseException:
        listener.close()
        if store is not None:
            store.close()
        raise


def wait_for_cluster(options: KafkaReadOptions, timeout_s: float, stop: threading.Event
                     ) -> tuple[str, dict[Where, tuple[int, int]]]:
    """The cluster's id and the internal topics' watermarks, once the cluster answers them.
    Errors that pass (`ClusterNotReady`: no broker answering within `timeout_s`, a partition
    without a leader yet, a coordinator loading) are logged and waited out, trying again
    after 1 s, then twice as long each time up to `RETRY_MAX_S`; Stopped when `stop` is
    set meanwhile."""
    delay = RETRY_FIRST_S
    while True:
        try:
            check_reachable(options, timeout_s)
            return cluster_watermarks(options, INTERNAL_TOPICS)
        except ClusterNotReady as exc:
            LOG.warning("%s; trying again in %g s", exc, delay)
        if stop.wait(delay):
            raise Stopped()
        delay = min(delay * 2, RETRY_MAX_S)


def _serve(options: KafkaReadOptions, listener: socket.socket, replay: ReplayOptions,
           ranges: Mapping[Where, tuple[int, int]], restored: dict[Where, PartitionCheckpoint],
           store: CheckpointStore | None, checkpoints: CheckpointOptions | None, *,
           retention_minutes: int, version: str) -> Service:
    partitions = {where: PartitionReplay(*where, replay, high, restored.get(where))
                  for where, (_, high) in sorted(ranges.items())}
    checkpointer = None if store is None or checkpoints is None else Checkpointer(
        store, records=checkpoints.records, seconds=checkpoints.seconds, version=version,
        applied=sum(p.progress.records for p in partitions.values()),
        positions={where: p.progress.position for where, p in partitions.items()})
    tailer = Tailer(options, partitions, replay, retention_minutes=retention_minutes,
                    starts={where: saved.progress.position
                            for where, saved in restored.items()},
                    checkpointer=checkpointer)
    server = make_server(listener, lambda: tailer.view,
                         DataTopicEnds(lambda: fetch_topic_ends(options)), version,
                         lambda view: failure(tailer, view), checkpointer)
    tailer.start()
    if checkpointer is not None:
        checkpointer.start()
    server.start()
    LOG.info("reading %d partitions of %s from %s", len(ranges), ", ".join(INTERNAL_TOPICS),
             options.redact(options.bootstrap_servers))
    return Service(tailer, server, checkpointer)


def _resumable(loaded: Restored | None, ranges: Mapping[Where, tuple[int, int]]
               ) -> dict[Where, PartitionCheckpoint]:
    """The partitions of a checkpoint that can go on from their position: one the cluster
    no longer has, whose log now ends before the position (the topic was recreated) or
    starts after it (records were deleted since) is replayed from its log start."""
    if loaded is None:
        return {}
    resumed: dict[Where, PartitionCheckpoint] = {}
    for where, saved in sorted(loaded.partitions.items()):
        name, position = f"{where[0]}-{where[1]}", saved.progress.position
        if where not in ranges:
            LOG.warning("checkpoint: %s is not in the cluster any more", name)
            continue
        low, high = ranges[where]
        if position > high:
            LOG.warning("checkpoint: %s was read up to offset %d but its log ends at %d "
                        "(recreated?): replaying it from the log start", name, position, high)
        elif position < low:
            LOG.warning("checkpoint: %s was read up to offset %d but its log now starts at "
                        "%d: replaying it from the log start", name, position, low)
        else:
            resumed[where] = saved
    LOG.info("resuming from checkpoint written %s: %d records applied; %d of %d partitions "
             "go on from their position", loaded.header.get("written"),
             sum(saved.progress.records for saved in resumed.values()), len(resumed),
             len(loaded.partitions))
    return resumed
