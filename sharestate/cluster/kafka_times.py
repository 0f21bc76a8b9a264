"""The data topics' end offsets at past times, from a live cluster's ListOffsets by timestamp.

Kafka answers ListOffsets for a timestamp t with the first offset whose record is stamped at
or after t (its time index, then the batches), which is the partition's end offset at t by
the broker's clock when the topic's `message.timestamp.type` is LogAppendTime (see
`sharestate.log.end_offsets` for CreateTime). Per partition:

1. Its log start offset (EARLIEST) and end offset (LATEST, read uncommitted: the high
   watermark Kafka's share-group lag takes) are read first, at client time `q`.
2. Each sampled time t up to `q` is asked for: an offset above the log start offset (or
   any, when nothing was ever deleted) is the answer; the log start offset itself, records
   having been deleted, says only that the end offset at t was at most that (outside
   retention): no answer. No offset at all (no record stamped at or after t) means no record
   was appended between t and `q`: the end offset at `q`.

The times are asked for in rounds, the i-th sampled time of every partition in one request,
so a run sends as many requests as the most sampled partition has times. Clocks: `q` is the
client's; a client clock ahead of the broker's by more than the time since the last append
would date the end offset too late.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # not re-exported in its stubs
    AdminClient,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from sharestate.cluster.kafka_options import KafkaReadOptions
from sharestate.cluster.kafka_plan import ask_quietly, source_error

LOG_APPEND_TIME = "LogAppendTime"
CREATE_TIME = "CreateTime"


@dataclass(frozen=True)
class TimedOffset:
    """The end offset of a partition at a time, and the timestamp type it was found by."""

    topic: str
    topic_id: str
    partition: int
    time: int
    end_offset: int
    timestamp_type: str


def topic_ids(admin: AdminClient, timeout: float) -> dict[str, str]:
    """Topic id -> name of every user topic (the internal `__*` ones left out), ids in
    Kafka's URL-safe base64 (the client prints standard base64)."""
    names = sorted(name for name, meta in admin.list_topics(timeout=timeout).topics.items()
                   if not name.startswith("__") and meta.error is None)
    if not names:
        return {}
    described = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    ids = {}
    for name, future in described.items():
        try:
            ids[str(future.result().topic_id).replace("+", "-").replace("/", "_")] = name
        except KafkaException:  # deleted since it was listed
            continue
    return ids


def _timestamp_types(admin: AdminClient, names: Sequence[str], timeout: float
                     ) -> dict[str, str]:
    """The `message.timestamp.type` of each topic of `names` whose configuration the
    client may read (DescribeConfigs on the topic); the others are left out, taken for
    CreateTime: end offsets found by their timestamps are not exact."""
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    if not resources:
        return {}
    types = {}
    for resource, future in admin.describe_configs(resources,
                                                   request_timeout=timeout).items():
        try:
            entry = future.result().get("message.timestamp.type")
        except KafkaException:  # not allowed to read it, or deleted since it was listed
            continue
        types[resource.name] = LOG_APPEND_TIME if entry is not None and \
            entry.value == LOG_APPEND_TIME else CREATE_TIME
    return types


def _offsets(admin: AdminClient, request: Mapping[TopicPartition, Any], timeout: float
             ) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (offset, timestamp) of each partition that answered."""
    answers = {}
    for tp, future in admin.list_offsets(dict(request), request_timeout=timeout).items():
        try:
            found = future.result()
        except KafkaException:  # the partition is gone, or has no leader now: no answer
            continue
        answers[(tp.topic, tp.partition)] = (found.offset, found.timestamp)
    return answers


def offsets_at_times(options: KafkaReadOptions, wanted: Mapping[tuple[str, int], Sequence[int]]
                     ) -> list[TimedOffset]:
    """The end offset at each wanted time of each (topic id, partition) the cluster has
    (see the module docstring), asked with `ask_quietly`; times it cannot answer are left
    out."""
    timeout = options.timeout_ms / 1000

    def read(admin: AdminClient) -> list[TimedOffset]:
        names = topic_ids(admin, timeout)
        where = {(topic_id, p): TopicPartition(names[topic_id], p)
                 for topic_id, p in wanted if topic_id in names}
        types = _timestamp_types(admin, sorted({tp.topic for tp in where.values()}), timeout)
        asked_at = int(time.time() * 1000)
        latest = _offsets(admin, {tp: OffsetSpec.latest()  # type: ignore[no-untyped-call]
                                  for tp in where.values()}, timeout)
        earliest = _offsets(admin, {tp: OffsetSpec.earliest()  # type: ignore[no-untyped-call]
                                    for tp in where.values()}, timeout)
        times = {key: sorted(t for t in set(wanted[key]) if t <= asked_at) for key in where}
        found: list[TimedOffset] = []
        for rank in range(max((len(t) for t in times.values()), default=0)):
            request = {where[key]: OffsetSpec.for_timestamp(ts[rank])
                       for key, ts in times.items() if rank < len(ts)}
            answers = _offsets(admin, request, timeout)
            for key, ts in times.items():
                tp = where[key]
                at = (tp.topic, tp.partition)
                if rank >= len(ts) or at not in answers or at not in latest \
                        or at not in earliest:
                    continue
                offset, start, end = answers[at][0], earliest[at][0], latest[at][0]
                if offset < 0:
                    offset = end
                elif offset <= start and start > 0:
                    continue
                found.append(TimedOffset(tp.topic, key[0], tp.partition, ts[rank], offset,
                                         types.get(tp.topic, CREATE_TIME)))
        return found

    return ask_quietly(options, read, lambda exc, heard: source_error(
        options, f"cannot read end offsets from {options.bootstrap_servers}", exc, heard))
