"""The service's one writer: a thread that reads every partition of both internal topics
with one consumer, from the start or a checkpoint, applies each partition's records as they
arrive, and publishes what readers see.

Nothing else changes a replay, and readers share nothing with the writer but the view it
publishes (`view`, swapped whole: one reference assignment), so no lock is held while
records apply. A view is published after a chunk is applied, at most as often as keeps the
writer's time spent on views under `1 / PUBLISH_RATIO` of its time (a view of a larger state
costs more), and at once when nothing more is read. Checkpoints are taken by the writer from
its own state when the checkpoint writer says one is due (after so many records, or
seconds when anything was read) and handed to it (`sharestate.app.serve.checkpoint`), which
encodes and writes them off this thread.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from sharestate.app.serve.checkpoint import Checkpointer, Taken
from sharestate.app.serve.cluster_status import ClusterStatus
from sharestate.app.serve.partition import PartitionReplay, ReplayOptions
from sharestate.app.serve.view import Fetched, PartitionView, View, partition_view
from sharestate.cluster import KafkaReadOptions, KafkaSourceError
from sharestate.cluster.consumed import ConsumedRun, consumed_runs
from sharestate.cluster.kafka_plan import admin_client
from sharestate.cluster.kafka_read import UNUSED_GROUP_ERRORS
from sharestate.log.discovery import INTERNAL_TOPICS

CONSUME_MESSAGES = 1_000
"""Messages taken from the consumer at a time, each chunk applied before the next is taken:
small enough that a chunk's C calls (the client's messages made, their records and headers
built, decoded and applied) hold the interpreter lock for about a millisecond, so the HTTP
side (`/readyz` on its event loop) is not held up behind them, and that a chunk's objects
stay in cache and die young (catching up is faster than with 10,000: docs/benchmarks.md)."""
CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": "10", "statistics.interval.ms": "5000"}
"""librdkafka settings a `--kafka-option` may override. While catching up the consumer's
queue fills faster than the writer drains it; by default librdkafka then postpones the
partition's next fetch by a whole second, here by 10 ms. Every 5 s the consumer's
statistics tell when each partition's leader last answered and the partition's end
(`Fetched`)."""
POLL_TIMEOUT_S = 0.1
PUBLISH_RATIO = 10.0
"""A view is published at most once per `PUBLISH_RATIO` times what making the last one
took, so views cost the writer at most about a tenth of its time."""
NEW_PARTITIONS_S = 5.0
"""How often the tailer asks the cluster for internal-topic partitions that appeared since
it started (a topic created, e.g. `__share_group_state` when a share group is first used,
or partitions added)."""
LOG = logging.getLogger("sharestate.serve")

Where = tuple[str, int]
UNKNOWN_OFFSET = -1001
"""librdkafka's offset for "not known yet" in its statistics."""


def fetched(statistics: str, *, committed: bool, now: float) -> dict[Where, Fetched]:
    """`Fetched` of each partition the consumer's statistics (librdkafka's JSON) know an
    end and an answering leader of."""
    stats = json.loads(statistics)
    idle = {broker.get("nodeid"): broker.get("rxidle", -1)
            for broker in stats.get("brokers", {}).values()}
    found = {}
    for topic, described in stats.get("topics", {}).items():
        for number, partition in described.get("partitions", {}).items():
            end = partition.get("ls_offset" if committed else "hi_offset", UNKNOWN_OFFSET)
            quiet = idle.get(partition.get("leader"), -1)
            if int(number) >= 0 and end >= 0 and quiet >= 0:
                found[(topic, int(number))] = Fetched(now - quiet / 1e6, end)
    return found


class Tailer(threading.Thread):
    """Reads `partitions` (each from its position: the beginning, or a checkpoint's) and
    applies them; a partition's end, once reached, marks it as at its end. With `watch`,
    every `NEW_PARTITIONS_S` it looks for internal-topic partitions that appeared and reads
    them from their log start.

    A consumer belongs to a group, and looking up its coordinator makes the broker create
    `__consumer_offsets`: on a cluster where no group was ever used (neither internal topic
    exists: a share group's records are kept in `__consumer_offsets` too) the tailer makes
    no consumer, only watches for the topics with an admin client, until a group creates
    them."""

    def __init__(self, options: KafkaReadOptions, partitions: Mapping[Where, PartitionReplay],
                 replay: ReplayOptions, *, retention_minutes: int,
                 starts: Mapping[Where, int] | None = None, watch: bool = True,
                 checkpointer: Checkpointer | None = None) -> None:
        super().__init__(name="tailer", daemon=True)
        self.options = options
        self.partitions = dict(sorted(partitions.items()))
        self.starts = dict(starts or {})
        """Where partitions resumed from (a checkpoint's positions; the others are read
        from their log start)."""
        self.replay = replay
        self.retention_minutes = retention_minutes
        self.watch = watch
        self.checkpointer = checkpointer
        self.stopping = threading.Event()
        self.failure: str | None = None
        self.consumer: Consumer | None = None
        self._fetched: dict[Where, Fetched] = {}
        self._views: dict[Where, PartitionView] = {}
        self._dirty = True
        self._next_publish = 0.0
        self.view = View()
        """What readers see: replaced whole, never changed in place."""
        self.status = ClusterStatus(options.redact(options.bootstrap_servers))
        """Whether the cluster answers, said on the log in place of the clients' lines."""
        self._publish()

    def run(self) -> None:
        try:
            if self.watch and not self.partitions:
                self._await_internal_topics()
                if self.stopping.is_set():
                    return
            # error: a position outside the log (the log start passed it: records deleted
            # below Kafka's prune point; or the log truncated) is an error message, and the
            # partition is replayed from its log start (`_error`)
            consumer = self.consumer = Consumer({
                **CONSUMER_DEFAULTS, **self.options.client_config("sharestate-serve"),
                "enable.partition.eof": "true", "auto.offset.reset": "error",
                "stats_cb": self._statistics, "error_cb": self.status.error,
                "logger": self.status.client_log})
            # the partitions' leaders known before they are assigned: an assigned partition
            # without one waits librdkafka's 500 ms offset-query retry (only a head start:
            # a cluster that does not answer now is read once it does)
            try:
                for topic in sorted({topic for topic, _ in self.partitions}):
                    consumer.list_topics(topic, timeout=self.options.timeout_ms / 1000)
            except KafkaException as exc:
                LOG.warning("%s", self.options.redact(f"reading the cluster's metadata: {exc}"))
            consumer.assign([TopicPartition(t, p, self.starts.get((t, p), OFFSET_BEGINNING))
                             for t, p in self.partitions])
            look = time.monotonic() + NEW_PARTITIONS_S
            while not self.stopping.is_set():
                self._apply(self._next(consumer))
                self.status.tick()
                now = time.monotonic()
                # not while the cluster does not answer: the lookup would hold the writer
                # (and the status line) for the whole timeout
                if self.watch and now >= look and self.status.down_since is None:
                    self._pick_up_new_partitions(consumer)
                    look = time.monotonic() + NEW_PARTITIONS_S
                if self._dirty and now >= self._next_publish:
                    self._publish()
                self._maybe_checkpoint(now)
        except (KafkaException, KafkaSourceError) as exc:
            self.failure = self.options.redact(f"reading the cluster: {exc}")
            LOG.error("%s", self.failure)
        except Exception as exc:  # a bug: the service stops (command.supervise)
            self.failure = self.options.redact(f"internal error: {exc!r}")
            LOG.exception("the cluster reader failed")
        finally:
            self._publish()
            if self.consumer is not None:
                self.consumer.close()

    def _next(self, consumer: Consumer) -> list[Message]:
        """What the consumer holds now (up to `CONSUME_MESSAGES`); when it holds nothing,
        a view of what was applied is published and then the first message to arrive
        within `POLL_TIMEOUT_S` is taken with what came with it (a live record is applied
        as soon as it is fetched)."""
        messages = consumer.consume(CONSUME_MESSAGES, 0)
        if not messages:
            if self._dirty:  # nothing more to read now: show what was applied
                self._publish()
            messages = consumer.consume(1, POLL_TIMEOUT_S)
            if messages:
                messages += consumer.consume(CONSUME_MESSAGES - 1, 0)
        return messages

    def _apply(self, messages: list[Message]) -> None:
        """Apply each partition's messages, gathered over `messages` (a consumed chunk is
        mostly long runs of one partition); an error message (an end of partition) ends its
        partition's records."""
        if not messages:
            return
        runs = consumed_runs(messages)
        del messages
        pending: dict[Where, list[ConsumedRun]] = {}
        for run in runs:
            if run.error is None:
                pending.setdefault((str(run.topic), int(run.partition or 0)), []).append(run)
            else:
                self._error(run, pending)
        for where, gathered in pending.items():
            self._feed(where, gathered)

    def _error(self, run: ConsumedRun, pending: dict[Where, list[ConsumedRun]]) -> None:
        error = run.error
        assert error is not None
        where = (str(run.topic), int(run.partition or 0))
        if error.code() == KafkaError._PARTITION_EOF:
            self._feed(where, pending.pop(where, []))
            if (replay := self.partitions.get(where)) is not None:
                replay.reached(int(run.offset or 0))
                self._dirty = True
        elif error.code() == KafkaError._AUTO_OFFSET_RESET:
            self._feed(where, pending.pop(where, []))
            if (replay := self.partitions.get(where)) is not None:
                replay.out_of_range(run.offset)
                self._dirty = True
            consumer = self.consumer
            assert consumer is not None  # it gave the error
            consumer.incremental_unassign([TopicPartition(*where)])
            consumer.incremental_assign([TopicPartition(*where, OFFSET_BEGINNING)])
        elif error.code() in UNUSED_GROUP_ERRORS:
            return
        elif error.fatal():
            raise KafkaSourceError(str(error))
        else:
            LOG.warning("%s", self.options.redact(f"reading {where[0]}-{where[1]}: "
                                                  f"{error.str()}"))

    def _feed(self, where: Where, runs: list[ConsumedRun]) -> None:
        replay = self.partitions.get(where)
        if not runs or replay is None:
            return
        if len(runs) == 1:
            records, headers = runs[0].records, runs[0].headers
        else:
            records = [record for run in runs for record in run.records]
            headers = [header for run in runs for header in run.headers]
        replay.apply(records, headers)
        self._dirty = True
        if replay.failure is not None:
            self._publish()  # at once: the service stops (command.supervise)

    def _publish(self) -> None:
        """Make the view of every partition that changed and publish the whole."""
        started = time.monotonic()
        views = {}
        for where, replay in self.partitions.items():
            before = self._views.get(where)
            views[where] = (before if before is not None and not replay.changed
                            else partition_view(replay, before, self.retention_minutes))
        self._views = views
        self.view = View(views, self._fetched, self.failure)
        self._dirty = False
        self._next_publish = started + PUBLISH_RATIO * (time.monotonic() - started)

    def _statistics(self, report: str) -> None:
        """librdkafka's statistics (called in `consume`, on this thread)."""
        try:
            self._fetched = fetched(report, now=time.time(), committed=(
                self.options.isolation_level == "read_committed"))
            self._dirty = True
            self.status.statistics(report)
        except (ValueError, TypeError, AttributeError) as exc:  # a report we cannot read
            LOG.debug("the consumer's statistics: %r", exc)

    def checkpoint(self) -> Taken | None:
        """Every partition as a checkpoint keeps it; None once a replay failed (a failed
        replay may have applied part of a chunk: its state is not one to resume from).
        Call on this thread, or once it ended."""
        if any(p.failure is not None for p in self.partitions.values()):
            return None
        return Taken({where: p.checkpoint() for where, p in self.partitions.items()})

    def _maybe_checkpoint(self, now: float) -> None:
        """Hand a checkpoint to the checkpoint writer when one is due."""
        writer = self.checkpointer
        if writer is not None and writer.due(
                sum(p.progress.records for p in self.partitions.values()),
                {where: p.progress.position for where, p in self.partitions.items()}, now):
            taken = self.checkpoint()
            if taken is not None:
                writer.submit(taken)

    def _await_internal_topics(self) -> None:
        """Every `NEW_PARTITIONS_S`, look for the internal topics' partitions, until some
        appeared (their replays added) or the tailer stops."""
        admin = admin_client(self.options, logger=self.status.client_log,
                             error_cb=self.status.error, stats_cb=self.status.statistics,
                             **{"statistics.interval.ms": CONSUMER_DEFAULTS[
                                 "statistics.interval.ms"]})
        while not self.stopping.wait(NEW_PARTITIONS_S):
            admin.poll(0)  # its log lines and errors, to `status`
            self.status.tick()
            if self._add_new_partitions(admin):
                return

    def _pick_up_new_partitions(self, consumer: Consumer) -> None:
        """Read the internal topics' partitions the cluster has and the tailer does not,
        from their log start."""
        added = self._add_new_partitions(consumer)
        if added:
            consumer.incremental_assign([TopicPartition(t, p, OFFSET_BEGINNING)
                                         for t, p in added])

    def _add_new_partitions(self, client: Consumer | AdminClient) -> list[Where]:
        """The internal topics' partitions the cluster has and the tailer did not, their
        replays added (none when the cluster does not answer now: it is asked again later)."""
        try:
            topics = client.list_topics(timeout=self.options.timeout_ms / 1000).topics
        except KafkaException as exc:  # the cluster not answering: `status` says so
            LOG.log(logging.DEBUG if self.status.down_since is not None else logging.WARNING,
                    "%s", self.options.redact(f"looking for new partitions: {exc}"))
            return []
        found = sorted((topic, partition) for topic in INTERNAL_TOPICS
                       if (described := topics.get(topic)) is not None
                       and described.error is None for partition in described.partitions
                       if (topic, partition) not in self.partitions)
        if not found:
            return []
        self.partitions = dict(sorted({**self.partitions, **{
            where: PartitionReplay(*where, self.replay) for where in found}}.items()))
        self._dirty = True
        LOG.info("reading %d new partitions from their log start: %s", len(found),
                 ", ".join(f"{t}-{p}" for t, p in found))
        return found

    def stop(self) -> None:
        self.stopping.set()
        if self.ident is not None:
            self.join(timeout=10)
