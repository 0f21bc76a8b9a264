"""Planning a live read: offset ranges per topic-partition, from the brokers' watermarks.

`plan_read` asks the cluster (one consumer, no group membership) for each partition's low
and high watermark — with `read_committed` the high one is the last stable offset — and
resolves `startingOffsets`/`endingOffsets` against them. A requested start before the low
watermark (records already deleted) or an end past the high one is an error, never a silent
clamp. `KafkaPlan.splits` cuts the ranges into pieces of at most `maxOffsetsPerSplit`
offsets, one Spark partition each. A pipeline plans on the driver, passes
`plan.offsets_options()` to the Spark source so it reads exactly those ranges, and stores
`plan.metadata()` with its commit.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from sharestate.cluster.kafka_options import FORCED, KafkaOptionError, KafkaReadOptions

EARLIEST = -2
LATEST = -1
CONSUMER_VISIBILITY = (
    "read through the Kafka consumer API: control batches (transaction COMMIT/ABORT markers) "
    "and record batch headers (producer id/epoch, sequence, batch offsets, compression, CRC) "
    "are invisible; offsets taken by control records are gaps")
"""What the live source cannot see, stated in every plan's metadata."""


class KafkaSourceError(RuntimeError):
    """The cluster could not be read; the message never holds credentials."""


class ClusterUnreachable(KafkaSourceError):
    """No broker answered in time: an environment that cannot run (exit 2)."""


def check_reachable(options: KafkaReadOptions, timeout_s: float) -> None:
    """Raise ClusterUnreachable unless a broker answers a metadata request within
    `timeout_s` seconds (a bounded check before any work). The client's own log lines are
    kept out of sight; the last one names the cause (refused, not resolved, ...)."""
    heard = _Heard()
    log = logging.getLogger("sharestate.cluster.probe")
    log.propagate = False
    log.handlers[:] = [heard]
    try:
        consumer = Consumer(
            {**options.client_config("sharestate-probe"),
             "socket.connection.setup.timeout.ms": max(int(timeout_s * 1000), 1000)},
            logger=log)
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot create a Kafka client: {exc}")) from None
    try:
        consumer.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        consumer.poll(0)  # serves the client's queued log lines to `heard`
        reason = heard.last or (error.str() if hasattr(error, "str") else str(error))
        raise ClusterUnreachable(options.redact(
            f"cannot reach the cluster at {options.bootstrap_servers} within {timeout_s:g} s: "
            f"{reason}")) from None
    finally:
        consumer.close()


class _Heard(logging.Handler):
    """Keeps the client's last error line, without its thread and broker prefix."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage().rsplit("]: ", 1)[-1]
        self.last = re.sub(r"\s*\(after \d+ms in state \w+\)$", "", line)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets `[start, end)` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    def split(self, size: int) -> Iterator[OffsetRange]:
        """Consecutive pieces of at most `size` offsets."""
        for start in range(self.start, self.end, size):
            yield OffsetRange(self.topic, self.partition, start, min(start + size, self.end))


@dataclass(frozen=True)
class KafkaPlan:
    """The ranges of one read, every partition of the topics included (empty ones too)."""

    options: KafkaReadOptions
    ranges: tuple[OffsetRange, ...]

    @property
    def splits(self) -> list[OffsetRange]:
        """Non-empty pieces of at most `maxOffsetsPerSplit` offsets."""
        size = self.options.max_offsets_per_split
        return [piece for r in self.ranges for piece in r.split(size)]

    def offsets_options(self) -> dict[str, str]:
        """`startingOffsets`/`endingOffsets` options that make the source read these ranges."""
        def spec(attribute: str) -> str:
            nested: dict[str, dict[str, int]] = {}
            for r in self.ranges:
                nested.setdefault(r.topic, {})[str(r.partition)] = getattr(r, attribute)
            return json.dumps(nested, sort_keys=True)

        return {"startingOffsets": spec("start"), "endingOffsets": spec("end")}

    def metadata(self) -> dict[str, Any]:
        """What the run covered, for the commit's metadata (credentials redacted)."""
        return {"source": "kafka", "options": self.options.describe(),
                "isolation.level": self.options.isolation_level,
                "visibility": CONSUMER_VISIBILITY,
                "ranges": [{"topic": r.topic, "partition": r.partition, "start": r.start,
                            "end": r.end} for r in self.ranges]}


def parse_offsets(spec: str, name: str) -> dict[str, dict[int, int]] | int:
    """`earliest`/`latest` as EARLIEST/LATEST, or a JSON {topic: {partition: offset}}."""
    word = spec.strip().lower()
    if word in ("earliest", "latest"):
        return EARLIEST if word == "earliest" else LATEST
    try:
        parsed = json.loads(spec)
        return {str(topic): {int(p): int(o) for p, o in partitions.items()}
                for topic, partitions in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        raise KafkaOptionError(f"option {name} must be earliest, latest or JSON like "
                               f'{{"topic": {{"0": 1000}}}}; got {spec!r}') from None


def resolve_ranges(watermarks: Mapping[tuple[str, int], tuple[int, int]],
                   starting: dict[str, dict[int, int]] | int,
                   ending: dict[str, dict[int, int]] | int) -> list[OffsetRange]:
    """Ranges for each `(topic, partition)` of `watermarks`, checked against them."""
    topics = {topic for topic, _ in watermarks}
    for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
        if isinstance(spec, dict) and (unknown := sorted(set(spec) - topics)):
            raise KafkaOptionError(f"{name} names topics that are not read: {unknown}")

    def pick(spec: dict[str, dict[int, int]] | int, topic: str, partition: int,
             default: int, low: int, high: int) -> int:
        wanted = spec.get(topic, {}).get(partition, default) if isinstance(spec, dict) \
            else spec
        return low if wanted == EARLIEST else high if wanted == LATEST else wanted

    ranges = []
    for (topic, partition), (low, high) in sorted(watermarks.items()):
        start = pick(starting, topic, partition, EARLIEST, low, high)
        end = pick(ending, topic, partition, LATEST, low, high)
        where = f"{topic}-{partition}"
        if start < low:
            raise KafkaOptionError(f"start offset {start} of {where} is before its log start "
                                   f"offset {low}: those records are gone")
        if end > high:
            raise KafkaOptionError(f"end offset {end} of {where} is past its end offset {high}")
        if end < start:
            raise KafkaOptionError(f"end offset {end} of {where} is before its start {start}")
        ranges.append(OffsetRange(topic, partition, start, end))
    return ranges


def fetch_watermarks(options: KafkaReadOptions) -> dict[tuple[str, int], tuple[int, int]]:
    """(low, high) watermarks of every partition of the topics read."""
    try:
        consumer = Consumer(options.client_config("sharestate-planner"))
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot create a Kafka client: {exc}")) from None
    timeout = options.timeout_ms / 1000
    try:
        watermarks = {}
        for topic in options.topics:
            metadata = consumer.list_topics(topic, timeout=timeout).topics[topic]
            if metadata.error is not None:
                raise KafkaSourceError(options.redact(f"topic {topic}: {metadata.error}"))
            for partition in sorted(metadata.partitions):
                watermarks[(topic, partition)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=timeout, cached=False)
        return watermarks
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(
            f"cannot read watermarks from {options.bootstrap_servers}: {exc}")) from None
    finally:
        consumer.close()


def fetch_topic_ends(options: KafkaReadOptions) -> dict[tuple[str, int], int]:
    """End offset (high watermark: the next offset to be produced, as Kafka's share-group
    lag takes it) of every partition of every user topic of the cluster, keyed by (name,
    partition) and by (topic id, partition); the internal topics (`__*`) are left out."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    consumer_only = {"group.id", "isolation.level", *FORCED}
    try:
        # read_uncommitted: the high watermark, not a read_committed reader's stable offset
        consumer = Consumer({**options.client_config("sharestate-planner"),
                             "isolation.level": "read_uncommitted"})
        admin = AdminClient({key: value for key, value in
                             options.client_config("sharestate-planner").items()
                             if key not in consumer_only})
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot create a Kafka client: {exc}")) from None
    timeout = options.timeout_ms / 1000
    try:
        topics = {name: metadata for name, metadata in
                  consumer.list_topics(timeout=timeout).topics.items()
                  if not name.startswith("__") and metadata.error is None}
        ids: dict[str, str] = {}
        if topics:
            described = admin.describe_topics(TopicCollection(sorted(topics)),
                                              request_timeout=timeout)
            # The client prints ids in standard base64; Kafka's records use URL-safe.
            ids = {name: str(future.result().topic_id).replace("+", "-").replace("/", "_")
                   for name, future in described.items()}
        ends = {}
        for name, metadata in topics.items():
            for partition in sorted(metadata.partitions):
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(name, partition), timeout=timeout, cached=False)
                ends[(name, partition)] = high
                if name in ids:
                    ends[(ids[name], partition)] = high
        return ends
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(
            f"cannot read end offsets from {options.bootstrap_servers}: {exc}")) from None
    finally:
        consumer.close()


def plan_read(options: KafkaReadOptions) -> KafkaPlan:
    """Plan the ranges `options` ask for, against the cluster's current watermarks."""
    starting = parse_offsets(options.starting_offsets, "startingOffsets")
    ending = parse_offsets(options.ending_offsets, "endingOffsets")
    return KafkaPlan(options, tuple(resolve_ranges(fetch_watermarks(options), starting,
                                                   ending)))
