"""The consumer loop: every partition of both internal topics, from the start or a
checkpoint, handed chunk by chunk to each partition's replay."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sharestate.app.serve.live_log import PartitionReplay
from sharestate.cluster import KafkaReadOptions, KafkaSourceError
from sharestate.cluster.kafka_read import messages_batch

CONSUME_MESSAGES = 10_000
POLL_TIMEOUT_S = 0.1
LOG = logging.getLogger("sharestate.serve")

Partitions = Mapping[tuple[str, int], PartitionReplay]


def watermarks(consumer: Consumer, topics: tuple[str, ...], timeout_s: float
               ) -> tuple[str, dict[tuple[str, int], tuple[int, int]]]:
    """The cluster's id and the (low, high) watermarks of every partition of `topics`
    (absent topics have none)."""
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    metadata = consumer.list_topics(timeout=timeout_s)
    for topic in topics:
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            continue
        for partition in sorted(metadata.topics[topic].partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=timeout_s, cached=False)
            ranges[(topic, partition)] = (low, high)
    return str(metadata.cluster_id), ranges


class Tailer(threading.Thread):
    """Reads the partitions of `replays` from `starts` (default: the beginning) and feeds
    them; a partition's end, once reached, is fed as an end mark."""

    def __init__(self, options: KafkaReadOptions, replays: Partitions,
                 starts: Mapping[tuple[str, int], int] | None = None) -> None:
        super().__init__(name="tailer", daemon=True)
        self.options = options
        self.replays = replays
        self.starts = dict(starts or {})
        self.stopping = threading.Event()
        self.failure: str | None = None
        # earliest: a position the log start has passed (records deleted below Kafka's
        # prune point) resumes at the log start, never at its end
        self.consumer = Consumer({**options.client_config("sharestate-serve"),
                                  "enable.partition.eof": "true",
                                  "auto.offset.reset": "earliest"})

    def run(self) -> None:
        try:
            self.consumer.assign([TopicPartition(t, p, self.starts.get((t, p), OFFSET_BEGINNING))
                                  for t, p in sorted(self.replays)])
            while not self.stopping.is_set():
                self._feed(self._next())
        except (KafkaException, KafkaSourceError) as exc:
            self.failure = self.options.redact(f"reading the cluster: {exc}")
            LOG.error("%s", self.failure)
        finally:
            self.consumer.close()

    def _next(self) -> list[Message]:
        """What the consumer holds now (up to `CONSUME_MESSAGES`: big chunks while catching
        up); when it holds nothing, the first message to arrive within `POLL_TIMEOUT_S` and
        what came with it (a live record is applied as soon as it is fetched)."""
        messages = self.consumer.consume(CONSUME_MESSAGES, 0)
        if not messages:
            messages = self.consumer.consume(1, POLL_TIMEOUT_S)
            if messages:
                messages += self.consumer.consume(CONSUME_MESSAGES - 1, 0)
        return messages

    def _feed(self, messages: list[Message]) -> None:
        pending: dict[tuple[str, int], list[Message]] = {}
        for message in messages:
            error = message.error()
            where = (str(message.topic()), int(message.partition() or 0))
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._flush(where, pending.pop(where, []))
                    self.replays[where].feed(int(message.offset() or 0))
                    continue
                if error.fatal():
                    raise KafkaSourceError(str(error))
                LOG.warning("%s", self.options.redact(f"reading {where[0]}-{where[1]}: "
                                                      f"{error.str()}"))
                continue
            pending.setdefault(where, []).append(message)
        for where, rows in pending.items():
            self._flush(where, rows)

    def _flush(self, where: tuple[str, int], rows: list[Message]) -> None:
        if rows:
            self.replays[where].feed(messages_batch(rows))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=10)
