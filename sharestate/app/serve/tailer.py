"""The consumer loop: every partition of both internal topics, from the start or a
checkpoint, handed chunk by chunk to each partition's replay."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from itertools import compress, count, repeat
from operator import is_not, ne
from typing import NamedTuple, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from sharestate.app.serve.live_log import Consumed, PartitionReplay
from sharestate.cluster import KafkaReadOptions, KafkaSourceError
from sharestate.cluster.kafka_plan import admin_client
from sharestate.cluster.kafka_read import TIMESTAMP_TYPES
from sharestate.log.batch import NO_TIMESTAMP_TYPE
from sharestate.log.discovery import INTERNAL_TOPICS

CONSUME_MESSAGES = 10_000
CONSUMER_DEFAULTS = {"fetch.queue.backoff.ms": "10", "statistics.interval.ms": "5000"}
"""librdkafka settings a `--kafka-option` may override. While catching up the consumer's
queue fills faster than the replays drain it; by default librdkafka then postpones the
partition's next fetch by a whole second, here by 10 ms. Every 5 s the consumer's
statistics tell when each partition's leader last answered and the partition's end
(`Fetched`)."""
POLL_TIMEOUT_S = 0.1
NEW_PARTITIONS_S = 5.0
"""How often the tailer asks the cluster for internal-topic partitions that appeared since
it started (a topic created, e.g. `__share_group_state` when a share group is first used,
or partitions added)."""
LOG = logging.getLogger("sharestate.serve")

Partitions = Mapping[tuple[str, int], PartitionReplay]
AddPartitions = Callable[[list[tuple[str, int]]], Partitions]
UNKNOWN_OFFSET = -1001
"""librdkafka's offset for "not known yet" in its statistics."""


class Fetched(NamedTuple):
    """What the consumer last heard of a partition: when its leader last answered it
    (epoch seconds: a fetch returns at least every `fetch.wait.max.ms`, 0.5 s, on a quiet
    log) and the partition's end then (the offset a read can reach: the high watermark, or
    the last stable offset with read_committed)."""

    at: float
    end: int


def fetched(statistics: str, *, committed: bool, now: float
            ) -> dict[tuple[str, int], Fetched]:
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
    """Reads the partitions of `replays` from `starts` (default: the beginning) and feeds
    them; a partition's end, once reached, is fed as an end mark. Every `NEW_PARTITIONS_S`
    it looks for internal-topic partitions that appeared, has `add` make their replays
    and reads them from their log start.

    A consumer belongs to a group, and looking up its coordinator makes the broker create
    `__consumer_offsets`: on a cluster where no group was ever used (neither internal topic
    exists: a share group's records are kept in `__consumer_offsets` too) the tailer makes
    no consumer, only watches for the topics with an admin client, until a group creates
    them."""

    def __init__(self, options: KafkaReadOptions, replays: Partitions,
                 starts: Mapping[tuple[str, int], int] | None = None,
                 add: AddPartitions | None = None) -> None:
        super().__init__(name="tailer", daemon=True)
        self.options = options
        self.replays = dict(replays)
        self.starts = dict(starts or {})
        self.add = add
        self.stopping = threading.Event()
        self.failure: str | None = None
        self.consumer: Consumer | None = None
        self.fetched: dict[tuple[str, int], Fetched] = {}
        """Replaced whole by each statistics report (readers take it without a lock)."""

    def run(self) -> None:
        try:
            if self.add is not None and not self.replays:
                self._await_internal_topics()
                if self.stopping.is_set():
                    return
            # earliest: a position the log start has passed (records deleted below Kafka's
            # prune point) resumes at the log start, never at its end
            consumer = self.consumer = Consumer({
                **CONSUMER_DEFAULTS, **self.options.client_config("sharestate-serve"),
                "enable.partition.eof": "true", "auto.offset.reset": "earliest",
                "stats_cb": self._statistics})
            # the partitions' leaders known before they are assigned: an assigned partition
            # without one waits librdkafka's 500 ms offset-query retry (only a head start:
            # a cluster that does not answer now is read once it does)
            try:
                for topic in sorted({topic for topic, _ in self.replays}):
                    consumer.list_topics(topic, timeout=self.options.timeout_ms / 1000)
            except KafkaException as exc:
                LOG.warning("%s", self.options.redact(f"reading the cluster's metadata: {exc}"))
            consumer.assign([TopicPartition(t, p, self.starts.get((t, p), OFFSET_BEGINNING))
                             for t, p in sorted(self.replays)])
            look = time.monotonic() + NEW_PARTITIONS_S
            while not self.stopping.is_set():
                self._feed(self._next(consumer))
                if self.add is not None and time.monotonic() >= look:
                    self._pick_up_new_partitions(consumer)
                    look = time.monotonic() + NEW_PARTITIONS_S
        except (KafkaException, KafkaSourceError) as exc:
            self.failure = self.options.redact(f"reading the cluster: {exc}")
            LOG.error("%s", self.failure)
        except Exception as exc:  # a bug: the service stops (command.supervise)
            self.failure = self.options.redact(f"internal error: {exc!r}")
            LOG.exception("the cluster reader failed")
        finally:
            if self.consumer is not None:
                self.consumer.close()

    def _statistics(self, report: str) -> None:
        try:
            self.fetched = fetched(report, now=time.time(),
                                   committed=self.options.isolation_level == "read_committed")
        except (ValueError, TypeError, AttributeError) as exc:  # a report we cannot read
            LOG.debug("the consumer's statistics: %r", exc)

    def _await_internal_topics(self) -> None:
        """Every `NEW_PARTITIONS_S`, look for the internal topics' partitions, until some
        appeared (their replays added) or the tailer stops."""
        admin = admin_client(self.options)
        while not self.stopping.wait(NEW_PARTITIONS_S):
            if self._add_new_partitions(admin):
                return

    def _pick_up_new_partitions(self, consumer: Consumer) -> None:
        """Read the internal topics' partitions the cluster has and the tailer does not,
        from their log start."""
        added = self._add_new_partitions(consumer)
        if added:
            consumer.incremental_assign([TopicPartition(t, p, OFFSET_BEGINNING)
                                              for t, p in added])

    def _add_new_partitions(self, client: Consumer | AdminClient) -> list[tuple[str, int]]:
        """The internal topics' partitions the cluster has and the tailer did not, their
        replays added (none when the cluster does not answer now: it is asked again later)."""
        assert self.add is not None
        try:
            topics = client.list_topics(timeout=self.options.timeout_ms / 1000).topics
        except KafkaException as exc:
            LOG.warning("%s", self.options.redact(f"looking for new partitions: {exc}"))
            return []
        found = sorted((topic, partition) for topic in INTERNAL_TOPICS
                       if (described := topics.get(topic)) is not None
                       and described.error is None for partition in described.partitions
                       if (topic, partition) not in self.replays)
        if not found:
            return []
        new = self.add(found)
        self.replays.update(new)
        added = sorted(new)
        LOG.info("reading %d new partitions from their log start: %s", len(added),
                 ", ".join(f"{t}-{p}" for t, p in added))
        return added

    @staticmethod
    def _next(consumer: Consumer) -> list[Message]:
        """What the consumer holds now (up to `CONSUME_MESSAGES`: big chunks while catching
        up); when it holds nothing, the first message to arrive within `POLL_TIMEOUT_S` and
        what came with it (a live record is applied as soon as it is fetched)."""
        messages = consumer.consume(CONSUME_MESSAGES, 0)
        if not messages:
            messages = consumer.consume(1, POLL_TIMEOUT_S)
            if messages:
                messages += consumer.consume(CONSUME_MESSAGES - 1, 0)
        return messages

    def _feed(self, messages: list[Message]) -> None:
        """Hand each partition its messages, by column; an error message (an end of
        partition) ends a run of its partition. The messages are read method by method over
        the whole list (a consumed chunk is mostly long runs of one partition)."""
        if not messages:
            return
        errors = list(map(Message.error, messages))
        wheres = list(zip(map(Message.topic, messages), map(Message.partition, messages),
                          strict=True))
        pending: dict[tuple[str, int], list[Message]] = {}
        start = 0
        for end in [*_run_ends(wheres, errors), len(messages)]:
            where = (str(wheres[start][0]), int(wheres[start][1] or 0))
            error = errors[start]
            if error is None:
                pending.setdefault(where, []).extend(messages[start:end])
            elif error.code() == KafkaError._PARTITION_EOF:
                self._flush(where, pending.pop(where, []))
                self.replays[where].feed(int(messages[start].offset() or 0))
            elif error.fatal():
                raise KafkaSourceError(str(error))
            else:
                LOG.warning("%s", self.options.redact(f"reading {where[0]}-{where[1]}: "
                                                      f"{error.str()}"))
            start = end
        for where, rows in pending.items():
            self._flush(where, rows)

    def _flush(self, where: tuple[str, int], rows: list[Message]) -> None:
        if rows:
            stamps = list(map(Message.timestamp, rows))
            offsets = cast(list[int], list(map(Message.offset, rows)))  # set: not errors
            self.replays[where].feed(Consumed(
                offsets, [stamp for _, stamp in stamps],
                [TIMESTAMP_TYPES.get(kind, NO_TIMESTAMP_TYPE) for kind, _ in stamps],
                list(map(Message.key, rows)), list(map(Message.value, rows))))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)


def _run_ends(wheres: list[tuple[str | None, int | None]],
              errors: list[KafkaError | None]) -> list[int]:
    """Where runs of messages end: the partition changes, or an error message stands
    alone."""
    ends = compress(count(1), map(ne, wheres[1:], wheres))
    if not any(map(is_not, errors, repeat(None))):
        return list(ends)
    alone = (i for i, error in enumerate(errors) if error is not None for i in (i, i + 1))
    return sorted({*ends, *(i for i in alone if 0 < i < len(errors))})
