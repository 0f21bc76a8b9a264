"""Planning a live read: offset ranges per topic-partition, from the brokers' watermarks.

`plan_read` asks the cluster (an admin client: it belongs to no group) for each partition's
low and high watermark — with `read_committed` the high one is the last stable offset — and
resolves `startingOffsets`/`endingOffsets` against them. A requested start before the low
watermark (records already deleted) or an end past the high one is an error, never a silent
clamp; a topic the cluster does not have yet is read as empty (`KafkaPlan.absent_topics`).
`KafkaPlan.splits` cuts the ranges into pieces of at most `maxOffsetsPerSplit`
offsets, one Spark partition each. A pipeline plans on the driver, passes
`plan.offsets_options()` to the Spark source so it reads exactly those ranges, and stores
`plan.metadata()` with its commit.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined,unused-ignore]

from sharestate.cluster.kafka_options import FORCED, KafkaOptionError, KafkaReadOptions

EARLIEST = -2
LATEST = -1
CONSUMER_VISIBILITY = (
    "read through the Kafka consumer API: control batches (transaction COMMIT/ABORT markers) "
    "and record batch headers (producer id/epoch, sequence, batch offsets, compression, CRC) "
    "are invisible; offsets taken by control records are gaps")
"""What the live source cannot see, stated in every plan's metadata."""
FIRST_OFFSET = OffsetSpec.earliest()  # type: ignore[no-untyped-call,unused-ignore]
NEXT_OFFSET = OffsetSpec.latest()  # type: ignore[no-untyped-call,unused-ignore]
T = TypeVar("T")


class KafkaSourceError(RuntimeError):
    """The cluster could not be read; the message never holds credentials."""


class ClusterNotReady(KafkaSourceError):
    """A retriable error (`RETRIABLE`): a partition without a leader yet, a coordinator
    loading, a broker down or restarting. `serve` waits these out; a run stops (exit 75: run
    it again later)."""


class ClusterUnreachable(ClusterNotReady):
    """No broker answered in time."""


class ClusterRefused(KafkaSourceError):
    """A broker refused the client's credentials or its TLS handshake (`REFUSED`): a
    setting to fix, which no retry mends."""


RETRIABLE = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE, KafkaError._RESOLVE, KafkaError._WAIT_COORD,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.BROKER_NOT_AVAILABLE, KafkaError.REPLICA_NOT_AVAILABLE,
    KafkaError.KAFKA_STORAGE_ERROR, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_ENOUGH_REPLICAS})
"""Errors that pass by themselves (those librdkafka calls retriable too)."""
REFUSED = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
"""Errors a client reports while it goes on retrying, though only a setting mends them: a
SASL authentication that failed, a TLS handshake that failed (an unknown CA, a name that
does not match)."""
_AFTER = re.compile(
    r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)$")
"""The time and connection state librdkafka appends to a broker's error (and how many
errors like it it left out since the last it logged)."""
REACH_SLICE_S = 0.5
"""How often `check_reachable` looks whether the client was refused while it waits."""


def retriable(error: object) -> bool:
    """Whether `error` is a KafkaError that passes by itself (`RETRIABLE`, or so marked)."""
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in RETRIABLE)


def source_error(options: KafkaReadOptions, text: str, exc: KafkaException,
                 heard: str | None = None) -> KafkaSourceError:
    """`text: exc` (redacted), then the client's last error line `heard` if any, as
    ClusterNotReady when the error is retriable."""
    kind = ClusterNotReady if retriable(exc.args[0] if exc.args else None) \
        else KafkaSourceError
    return kind(options.redact(f"{text}: {exc}" + (f" ({heard})" if heard else "")))


def admin_client(options: KafkaReadOptions, **kwargs: Any) -> AdminClient:
    """An admin client of the cluster. It belongs to no group, so it never looks up a group
    coordinator: a consumer's lookup (FindCoordinator) makes the broker create
    `__consumer_offsets` on a cluster where no group was ever used."""
    consumer_only = {"group.id", "isolation.level", *FORCED}
    try:
        return AdminClient({key: value for key, value in options.client_config("").items()
                            if key not in consumer_only}, **kwargs)
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot create a Kafka client: {exc}")) from None


def ask_quietly(options: KafkaReadOptions, ask: Callable[[AdminClient], T],
                failed: Callable[[KafkaException, str | None], KafkaSourceError]) -> T:
    """`ask` of an `admin_client` whose own log lines (a broker refusing connections, ...)
    stay off stderr; a KafkaException raises `failed(exc, the client's last error line)`,
    and a broker refusing the client (`REFUSED`, seen whenever the client serves its
    callbacks) ClusterRefused, once the client is gone: an exception that led back to it
    (kept by a caller, a test) would keep its threads retrying the cluster and logging."""
    log, heard = quiet_log()
    admin = admin_client(options, logger=log, error_cb=_raise_refused)
    try:
        try:
            return ask(admin)
        except KafkaException as exc:
            admin.poll(0)  # serves the client's queued log lines and errors
            failure = failed(exc, heard.last)
    except _Refused as refused:
        failure = ClusterRefused(options.redact(
            f"the cluster at {options.bootstrap_servers} refused the client: {refused}"))
    del admin
    raise failure


class _Refused(Exception):
    """What `_raise_refused` raises out of the client call that served it."""


def _raise_refused(error: KafkaError) -> None:
    """A client's error callback: a `REFUSED` error ends the call that served it."""
    if error.code() in REFUSED:
        raise _Refused(_AFTER.sub("", error.str()))


def cluster_watermarks(options: KafkaReadOptions, topics: tuple[str, ...]
                       ) -> tuple[str, dict[tuple[str, int], tuple[int, int]]]:
    """The cluster's id and the (low, high) watermarks of every partition of those of
    `topics` the cluster has (with `read_committed` the high one is the last stable
    offset), read with `ask_quietly`. A topic the cluster lists with an error (no leader
    yet) raises, as a `source_error`."""
    timeout = options.timeout_ms / 1000
    level = (IsolationLevel.READ_COMMITTED if options.isolation_level == "read_committed"
             else IsolationLevel.READ_UNCOMMITTED)

    def read(admin: AdminClient) -> tuple[str, dict[tuple[str, int], tuple[int, int]]]:
        metadata = admin.list_topics(timeout=timeout)
        for topic in topics:
            if (found := metadata.topics.get(topic)) is not None and found.error is not None:
                raise KafkaException(found.error)
        partitions = [TopicPartition(topic, partition) for topic in topics
                      if (found := metadata.topics.get(topic)) is not None
                      for partition in sorted(found.partitions)]
        offsets = {}
        for name, spec in (("low", FIRST_OFFSET), ("high", NEXT_OFFSET)):
            if partitions:
                asked = admin.list_offsets({where: spec for where in partitions},
                                           isolation_level=level, request_timeout=timeout)
                offsets[name] = {(where.topic, where.partition): future.result().offset
                                 for where, future in asked.items()}
        return str(metadata.cluster_id), {
            (where.topic, where.partition): (offsets["low"][(where.topic, where.partition)],
                                             offsets["high"][(where.topic, where.partition)])
            for where in partitions}

    return ask_quietly(options, read, lambda exc, heard: source_error(
        options, f"cannot read watermarks of {', '.join(topics)} from "
                 f"{options.bootstrap_servers}", exc, heard))


def check_reachable(options: KafkaReadOptions, timeout_s: float) -> None:
    """Raise ClusterUnreachable unless a broker answers a metadata request within
    `timeout_s` seconds (a bounded check before any work), asked with `ask_quietly`: the
    client's last error line names the cause (refused, not resolved, ...); a broker that
    refuses the client's credentials or TLS raises ClusterRefused as soon as it does."""
    def unreachable(exc: KafkaException, heard: str | None) -> KafkaSourceError:
        error = exc.args[0] if exc.args else exc
        reason = heard or (error.str() if hasattr(error, "str") else str(error))
        return ClusterUnreachable(options.redact(
            f"cannot reach the cluster at {options.bootstrap_servers} within {timeout_s:g} s: "
            f"{reason}"))

    def ask(admin: AdminClient) -> object:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return admin.list_topics(timeout=min(REACH_SLICE_S, timeout_s))
            except KafkaException:
                admin.poll(0)  # a refusal among the errors served raises here
                if time.monotonic() >= deadline:
                    raise

    ask_quietly(replace(options, client={
        **options.client, "socket.connection.setup.timeout.ms":
            str(max(int(timeout_s * 1000), 1000))}), ask, unreachable)


def quiet_log() -> tuple[logging.Logger, Heard]:
    """A logger for a client's own lines (its `logger`), that nothing else hears, and what
    keeps the last error among them."""
    heard = Heard()
    log = logging.Logger("sharestate.cluster.client")
    log.addHandler(heard)
    return log, heard


class Heard(logging.Handler):
    """Keeps the client's last error line, without its thread and broker prefix."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.last = client_line(record.getMessage())


def client_line(line: str) -> str:
    """A librdkafka log or error line without its thread prefix and its connection state
    suffix: `127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection
    refused` (the broker it is about, then what happened)."""
    return _AFTER.sub("", line.rsplit("]: ", 1)[-1])


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
    log_starts: Mapping[tuple[str, int], int] = field(default_factory=dict)
    """Each partition's low watermark when planned: Kafka's log start offset (ListOffsets
    earliest)."""
    absent_topics: tuple[str, ...] = ()
    """Topics read that the cluster does not have: nothing to read. Kafka creates
    `__share_group_state` when a share group is first used and `__consumer_offsets` when a
    group first looks up its coordinator; until then a cluster has neither."""

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
                            "end": r.end} for r in self.ranges],
                "absent_topics": list(self.absent_topics)}


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


def fetch_topic_ends(options: KafkaReadOptions) -> dict[tuple[str, int], int]:
    """End offset (high watermark: the next offset to be produced, as Kafka's share-group
    lag takes it) of every partition of every user topic of the cluster, keyed by (name,
    partition) and by (topic id, partition); the internal topics (`__*`) are left out.
    Read with `ask_quietly`."""
    from confluent_kafka import TopicCollection

    timeout = options.timeout_ms / 1000

    def read(admin: AdminClient) -> dict[tuple[str, int], int]:
        topics = {name: metadata for name, metadata in
                  admin.list_topics(timeout=timeout).topics.items()
                  if not name.startswith("__") and metadata.error is None}
        if not topics:
            return {}
        described = admin.describe_topics(TopicCollection(sorted(topics)),
                                          request_timeout=timeout)
        # The client prints ids in standard base64; Kafka's records use URL-safe.
        ids = {name: str(future.result().topic_id).replace("+", "-").replace("/", "_")
               for name, future in described.items()}
        # read_uncommitted: the high watermark, not a read_committed reader's stable offset
        asked = admin.list_offsets(
            {TopicPartition(name, partition): NEXT_OFFSET
             for name, metadata in topics.items() for partition in metadata.partitions},
            isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout)
        ends = {}
        for where, future in asked.items():
            high = future.result().offset
            ends[(where.topic, where.partition)] = high
            if where.topic in ids:
                ends[(ids[where.topic], where.partition)] = high
        return ends

    return ask_quietly(options, read, lambda exc, heard: source_error(
        options, f"cannot read end offsets from {options.bootstrap_servers}", exc, heard))


def plan_read(options: KafkaReadOptions) -> KafkaPlan:
    """Plan the ranges `options` ask for, against the cluster's current watermarks."""
    starting = parse_offsets(options.starting_offsets, "startingOffsets")
    ending = parse_offsets(options.ending_offsets, "endingOffsets")
    _, watermarks = cluster_watermarks(options, options.topics)
    absent = tuple(topic for topic in options.topics
                   if not any(name == topic for name, _ in watermarks))
    return KafkaPlan(options, tuple(resolve_ranges(watermarks, starting, ending)),
                     {where: low for where, (low, _) in watermarks.items()}, absent)
