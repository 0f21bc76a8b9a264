"""Redelivered and poison ranges, and the delivery-count histogram (analytics.redelivery)."""

from __future__ import annotations

from conftest import conformance_dir

from sharestate.analytics.context import StateContext, live_states
from sharestate.analytics.redelivery import DeliveryBucket, delivery_histogram, redelivery_rows
from sharestate.coordinator.share_state import ShareKey, SharePartitionState, StateBatch
from sharestate.log import discover
from sharestate.replay.logs import partition_logs
from sharestate.replay.share_log import replay_share_log
from sharestate.tables.spec import table

CONTEXT = StateContext("__share_group_state", 7, 500, None)


def _state(start: int, *batches: tuple[int, int, int, int]) -> SharePartitionState:
    return SharePartitionState(0, 1, 2, start, -1, 0, 0, tuple(StateBatch(*b) for b in batches))


G0 = ShareKey("g", "tid", 0)
G1 = ShareKey("g", "tid", 1)
H0 = ShareKey("h", "tid", 0)
EXAMPLE = _state(100, (100, 104, 2, 1), (105, 109, 0, 3), (110, 110, 4, 5))
STATES = [
    (G0, EXAMPLE),
    (G1, _state(20, (10, 22, 4, 2), (23, 24, 4, 1), (25, 30, 2, 1))),
    (H0, _state(0, (0, 9, 2, 6))),
]


def test_ranges_delivered_twice_or_archived() -> None:
    rows = list(redelivery_rows(STATES, CONTEXT))
    assert [(r["group_id"], r["partition"], r["first_offset"], r["last_offset"], r["records"],
             r["delivery_state"], r["delivery_count"], r["poison"]) for r in rows] == [
        ("g", 0, 105, 109, 5, 0, 3, False),
        ("g", 0, 110, 110, 1, 4, 5, True),
        ("g", 1, 20, 22, 3, 4, 2, True),    # clipped to the SPSO
        ("g", 1, 23, 24, 2, 4, 1, False),   # archived once: rejected, not poison
        ("h", 0, 0, 9, 10, 2, 6, False),    # redelivered, then acknowledged
    ]
    assert all(list(r) == table("redelivery").names for r in rows)
    assert {(r["as_of_offset"], r["state_partition"]) for r in rows} == {(500, 7)}


def test_poison_follows_the_delivery_limit_when_given() -> None:
    rows = list(redelivery_rows(STATES, CONTEXT, delivery_limit=5))
    assert [(r["first_offset"], r["poison"]) for r in rows if r["delivery_state"] == 4] == [
        (110, True), (20, False), (23, False)]


def test_histogram_by_group_weighted_by_records() -> None:
    assert delivery_histogram(STATES) == [
        DeliveryBucket("g", 1, 5 + 2 + 6), DeliveryBucket("g", 2, 3),
        DeliveryBucket("g", 3, 5), DeliveryBucket("g", 5, 1), DeliveryBucket("h", 6, 10)]


def test_fixture_histogram_accounts_for_every_in_flight_record() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "share_replay_small.log"]))[0]
    result = replay_share_log(log, snapshot_update_records_per_snapshot=5)
    states = list(live_states(result.shard))
    rows = list(redelivery_rows(states, StateContext.of(result)))
    assert rows and all(r["delivery_count"] >= 2 or r["delivery_state"] == 4 for r in rows)
    histogram = delivery_histogram(states)
    in_flight = sum(b.last_offset - max(b.first_offset, s.start_offset) + 1
                    for _, s in states for b in s.batches if b.last_offset >= s.start_offset)
    assert sum(b.records for b in histogram) == in_flight
    redelivered = sum(b.records for b in histogram if b.delivery_count >= 2)
    assert redelivered == sum(r["records"] for r in rows if r["delivery_count"] >= 2)
