"""Redelivered and poison ranges per share-partition (`redelivery` rows) and the per-group
delivery-count distribution the report plots.

A `redelivery` row is an in-flight state batch (at or above the SPSO, clipped to it) that was
delivered at least twice or is archived. `poison` marks archived ranges that were given up
on: delivered `delivery_limit` times or more when the group's limit
(`share.delivery.count.limit`, Kafka's default 5) is given, otherwise delivered at least
twice. An archived range below that (typically rejected by the consumer) is listed with
`poison` false.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from sharestate.analytics.context import StateContext, in_flight
from sharestate.analytics.lag import ARCHIVED
from sharestate.coordinator.share_state import ShareKey, SharePartitionState

REDELIVERED = 2
"""Delivery count from which a range counts as redelivered."""


class DeliveryBucket(NamedTuple):
    """Records of one group in flight with one delivery count."""

    group_id: str
    delivery_count: int
    records: int


def redelivery_rows(states: Iterable[tuple[ShareKey, SharePartitionState]],
                    context: StateContext, *, delivery_limit: int | None = None
                    ) -> Iterator[dict[str, Any]]:
    """One `redelivery` row per redelivered or archived in-flight range, in offset order."""
    poison_from = REDELIVERED if delivery_limit is None else delivery_limit
    for key, state in states:
        for first, last, delivery_state, count in in_flight(state):
            archived = delivery_state == ARCHIVED
            if count < REDELIVERED and not archived:
                continue
            yield {
                "group_id": key.group_id,
                "topic_id": key.topic_id,
                "partition": key.partition,
                "first_offset": first,
                "last_offset": last,
                "records": last - first + 1,
                "delivery_state": delivery_state,
                "delivery_count": count,
                "poison": archived and count >= poison_from,
                "as_of_offset": context.as_of_offset,
                "state_partition": context.state_partition,
            }


def delivery_histogram(states: Iterable[tuple[ShareKey, SharePartitionState]]
                       ) -> list[DeliveryBucket]:
    """In-flight records per (group, delivery count), every state included, sorted."""
    counts: dict[tuple[str, int], int] = {}
    for key, state in states:
        for first, last, _, count in in_flight(state):
            bucket = (key.group_id, count)
            counts[bucket] = counts.get(bucket, 0) + last - first + 1
    return [DeliveryBucket(group, count, records)
            for (group, count), records in sorted(counts.items())]
