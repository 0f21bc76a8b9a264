"""Share-group lag rows (`sharestate.analytics.lag`) on hand-built states and a fixture."""

from __future__ import annotations

import json

import pytest
from conftest import conformance_dir

from sharestate.analytics.context import StateContext, in_flight, live_states
from sharestate.analytics.lag import FILE, LIVE, STATE, lag_rows, share_lag, topic_names
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.group_metadata import SharePartitionMetadata, ShareTopic
from sharestate.coordinator.share_state import ShareKey, SharePartitionState, StateBatch
from sharestate.log import discover
from sharestate.replay.logs import partition_logs
from sharestate.replay.share_log import replay_share_log
from sharestate.tables.gold_pass import rows_of
from sharestate.tables.spec import table

KEY = ShareKey("g", "tid", 0)
CONTEXT = StateContext("__share_group_state", 3, 77, 1_000)


def _state(start: int, *batches: tuple[int, int, int, int], dcc: int = -1) -> SharePartitionState:
    return SharePartitionState(0, 1, 2, start, dcc, 0, 0,
                               tuple(StateBatch(*b) for b in batches))


# SPSO 100: 100-104 acknowledged, 105-109 available (delivered 3x), 110 archived (5x).
EXAMPLE = _state(100, (100, 104, 2, 1), (105, 109, 0, 3), (110, 110, 4, 5))


def test_lag_from_a_given_end_offset_uses_the_batches_when_kafka_count_unknown() -> None:
    lag = share_lag(EXAMPLE, 120, FILE)
    assert (lag.lag, lag.terminal_in_state, lag.delivery_complete_count) == (14, 6, -1)
    assert (lag.records(0), lag.records(2), lag.records(4)) == (5, 5, 1)
    assert (lag.in_flight_batches, lag.max_delivery_count) == (3, 5)
    assert not lag.lag_is_lower_bound and lag.end_offset_source == FILE


def test_lag_uses_kafkas_delivery_complete_count_when_known() -> None:
    lag = share_lag(EXAMPLE._replace(delivery_complete_count=4), 120, LIVE)
    assert (lag.lag, lag.terminal_in_state) == (120 - 100 - 4, 6)


def test_end_offset_derived_from_the_state_is_a_lower_bound() -> None:
    lag = share_lag(EXAMPLE)
    assert (lag.end_offset, lag.end_offset_source, lag.lag_is_lower_bound) == (111, STATE, True)
    assert lag.lag == 111 - 100 - 6
    empty = share_lag(_state(42))
    assert (empty.end_offset, empty.lag, empty.max_delivery_count) == (42, 0, None)


def test_no_lag_when_spso_is_unknown() -> None:
    lag = share_lag(_state(-1, (5, 9, 0, 1)), 120)
    assert lag.lag is None and lag.records(0) == 5
    assert share_lag(_state(-1)).end_offset is None


def test_only_records_at_or_above_the_spso_count() -> None:
    state = _state(103, (98, 99, 2, 1), (100, 104, 2, 1), (105, 106, 3, 2), (107, 107, 1, 1))
    assert list(in_flight(state)) == [StateBatch(103, 104, 2, 1), StateBatch(105, 106, 3, 2),
                                      StateBatch(107, 107, 1, 1)]
    lag = share_lag(state, 110)
    assert lag.terminal_in_state == 2  # archiving (3) and acquired (1) are not terminal
    assert (lag.records(1), lag.records(3), lag.lag) == (1, 2, 110 - 103 - 2)


def test_damaged_offsets_give_rows_that_fit_the_table() -> None:
    """Offsets at int64's ends (CRC-valid records of a damaged writer) made lag figures no
    int64 holds, and the pipeline's share_group_lag and redelivery rows raised OverflowError
    (sharestate run exited 70): a start near int64's low end has no lag, a batch is counted
    only over the offsets a record can have (0 to 2^63 - 2), overlapping counts stop at
    int64's largest value."""
    top = (1 << 63) - 1
    states = [_state(-top - 1, (5, 9, 0, 1)), _state(100, (100, top, 4, 5)),
              _state(-1, (-top - 1, 9, 2, 2), (0, top, 2, 3), (0, top, 4, 3))]
    assert share_lag(states[0], 120).lag is None
    assert list(in_flight(states[1])) == [StateBatch(100, top - 1, 4, 5)]
    assert share_lag(states[1]).end_offset == top
    assert share_lag(states[2]).terminal_in_state == top
    context = StateContext("__share_group_state", 0, None, None)
    for state in states:
        rows_of("share_group_lag", list(lag_rows([(KEY, state)], context, end_offsets={
            ("tid", 0): top})))
        rows_of("redelivery", list(redelivery_rows([(KEY, state)], context)))


def test_unknown_end_offset_source_is_rejected() -> None:
    with pytest.raises(ValueError, match="source"):
        share_lag(EXAMPLE, 120, "guess")


def test_rows_look_up_end_offsets_by_topic_id_then_name() -> None:
    other = ShareKey("g", "tid2", 1)
    missing = ShareKey("h", "tid3", 0)
    states = [(KEY, EXAMPLE), (other, EXAMPLE), (missing, EXAMPLE)]
    ends = {("tid", 0): 120, ("orders", 1): 130}
    rows = list(lag_rows(states, CONTEXT, end_offsets=ends, end_offset_source=LIVE,
                         names={"tid2": "orders"}))
    assert [r["end_offset"] for r in rows] == [120, 130, 111]
    assert [r["end_offset_source"] for r in rows] == [LIVE, LIVE, STATE]
    assert [r["lag"] for r in rows] == [14, 24, 5]
    assert [r["topic"] for r in rows] == [None, "orders", None]
    assert all(list(r) == table("share_group_lag").names for r in rows)
    assert rows[0] == {
        "group_id": "g", "topic_id": "tid", "partition": 0, "topic": None,
        "start_offset": 100, "end_offset": 120, "end_offset_source": LIVE,
        "lag_is_lower_bound": False, "delivery_complete_count": -1, "terminal_in_state": 6,
        "lag": 14, "available": 5, "acknowledged": 5, "archived": 1, "in_flight_batches": 3,
        "max_delivery_count": 5, "as_of_offset": 77, "as_of_timestamp": 1_000,
        "state_topic": "__share_group_state", "state_partition": 3}


def test_topic_names_from_share_group_metadata() -> None:
    def topic(topic_id: str, name: str) -> dict[str, ShareTopic]:
        return {topic_id: ShareTopic(topic_id, name, frozenset({0}), 1, None)}

    metadata = {"g": SharePartitionMetadata("g", topic("a", "alpha"), topic("b", "beta"),
                                            topic("c", "gamma"), 5)}
    assert topic_names(metadata) == {"a": "alpha", "b": "beta", "c": "gamma"}


def test_fixture_lag_matches_kafkas_final_state() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "share_replay_small.log"]))[0]
    result = replay_share_log(log, snapshot_update_records_per_snapshot=5)
    rows = {(r["group_id"], r["topic_id"], r["partition"]): r
            for r in lag_rows(live_states(result.shard), StateContext.of(result))}
    kafka = json.loads((folder / "share_replay_small.final_state.json").read_text("utf-8"))
    assert set(rows) == {(p["groupId"], p["topicId"], p["partition"])
                         for p in kafka["partitions"]}
    for p in kafka["partitions"]:
        row = rows[(p["groupId"], p["topicId"], p["partition"])]
        state = p["state"]
        spso, dcc = state["startOffset"], state.get("deliveryCompleteCount", -1)
        live = [b for b in state["stateBatches"] if b["lastOffset"] >= spso]
        end = max([spso] + [b["lastOffset"] + 1 for b in live]) if live or spso != -1 \
            else None
        terminal = sum(b["lastOffset"] - max(b["firstOffset"], spso) + 1
                       for b in live if b["deliveryState"] in (2, 4))
        assert (row["start_offset"], row["delivery_complete_count"]) == (spso, dcc)
        assert (row["end_offset"], row["terminal_in_state"]) == (end, terminal)
        assert row["lag"] == (None if spso == -1 or end is None
                              else end - spso - (dcc if dcc >= 0 else terminal))
        assert row["lag_is_lower_bound"] and row["as_of_offset"] == kafka["afterOffset"]
