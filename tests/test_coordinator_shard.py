"""ShareShard replay rules, findings and the two transaction semantics, on hand-made records."""

from __future__ import annotations

import pytest

from sharestate.coordinator.combiner import TREESET
from sharestate.coordinator.shard import KAFKA, TRANSACTIONAL_ACKS, ShareShard
from sharestate.coordinator.share_findings import (
    INVALID_STATE_BATCH,
    PENDING_DISCARDED,
    SNAPSHOT_TOMBSTONE_FAILED,
    UNKNOWN_RECORD_TYPE,
    UPDATE_TOMBSTONE,
)
from sharestate.coordinator.share_rules import RULES_4_0, RULES_4_1, ShareRules, rules_for
from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    SharePartitionState,
    ShareValue,
    StateBatch,
    share_value,
)
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, dialect

B = StateBatch
K1 = ShareKey("g", "AAAAAAAAAAAAAAAAAAAAAQ", 0)
K2 = ShareKey("g", "AAAAAAAAAAAAAAAAAAAAAQ", 1)


def snapshot(start: int, *batches: StateBatch, snapshot_epoch: int = 0, state_epoch: int = 0,
             leader_epoch: int = 0, dcc: int = -1, stamps: tuple[int, int] = (7, 8)) -> ShareValue:
    return ShareValue(True, snapshot_epoch, state_epoch, leader_epoch, start, dcc, stamps[0],
                      stamps[1], batches)


def update(start: int, *batches: StateBatch, snapshot_epoch: int = 0, leader_epoch: int = 0,
           dcc: int = -1) -> ShareValue:
    return ShareValue(False, snapshot_epoch, None, leader_epoch, start, dcc, None, None, batches)


def test_snapshot_replaces_state_and_maxes_epochs() -> None:
    shard = ShareShard()
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(10, B(10, 20, 0, 1), leader_epoch=5,
                                                state_epoch=3, dcc=4))
    shard.replay(1, SNAPSHOT_TYPE, K1, snapshot(30, B(35, 30, 0, 1), snapshot_epoch=1,
                                                leader_epoch=2, state_epoch=1))
    assert shard.state(K1) == SharePartitionState(1, 1, 2, 30, -1, 7, 8, (B(35, 30, 0, 1),))
    assert (shard.leader_epoch(K1), shard.state_epoch(K1)) == (5, 3)
    assert shard.snapshot_update_count(K1) is None
    assert shard.last_snapshot_offset(K1) == 1
    assert [f[:2] for f in shard.findings] == [(1, INVALID_STATE_BATCH)]


def test_update_merges_into_the_state() -> None:
    shard = ShareShard()
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(100, B(100, 109, 1, 1), B(110, 119, 1, 2),
                                                B(120, 129, 1, 0), leader_epoch=3, dcc=9))
    shard.replay(1, UPDATE_TYPE, K1, update(-1, B(100, 109, 2, 1), snapshot_epoch=4,
                                            leader_epoch=-1))
    state = shard.state(K1)
    assert state is not None
    assert (state.start_offset, state.leader_epoch, state.snapshot_epoch) == (100, 3, 0)
    assert state.delivery_complete_count == -1  # taken from the update as it is
    # Kafka's ShareCoordinatorShardTest.testNonSequentialBatchUpdates: old batches survive
    # unless pruned
    shard.replay(2, UPDATE_TYPE, K1, update(110, B(120, 129, 2, 1), leader_epoch=4, dcc=2))
    assert shard.state(K1) == SharePartitionState(0, 0, 4, 110, 2, 7, 8,
                                                  (B(110, 119, 1, 2), B(120, 129, 2, 1)))
    assert shard.leader_epoch(K1) == 4
    assert shard.snapshot_update_count(K1) == 2
    assert shard.last_snapshot_offset(K1) == 0


@pytest.mark.parametrize(("rules", "state_epoch", "stamp", "first_count"),
                         [(RULES_4_1, 0, 0, 1), (RULES_4_0, -1, None, 0)])
def test_update_without_state(rules: ShareRules, state_epoch: int, stamp: int | None,
                              first_count: int) -> None:
    shard = ShareShard(rules)
    batches = (B(9, 12, 0, 1), B(5, 6, 2, 1))  # taken as they are, not combined
    shard.replay(0, UPDATE_TYPE, K1, update(5, *batches, snapshot_epoch=2, leader_epoch=-1))
    assert shard.state(K1) == SharePartitionState(2, state_epoch, -1, 5, -1, stamp, stamp,
                                                  batches)
    assert shard.leader_epoch(K1) == -1
    assert shard.state_epoch(K1) is None
    assert shard.snapshot_update_count(K1) == first_count
    assert shard.last_snapshot_offset(K1) is None
    assert shard.last_redundant_offset() is None


def test_update_counter_resets_only_at_the_limit() -> None:
    shard = ShareShard(RULES_4_1.with_limit(2))
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(0))
    shard.replay(1, UPDATE_TYPE, K1, update(-1))
    shard.replay(2, SNAPSHOT_TYPE, K1, snapshot(0))
    assert shard.snapshot_update_count(K1) == 1
    shard.replay(3, UPDATE_TYPE, K1, update(-1))
    assert shard.snapshot_update_count(K1) == 2
    shard.replay(4, SNAPSHOT_TYPE, K1, snapshot(0))
    assert shard.snapshot_update_count(K1) == 0


def test_tombstone_deletes_and_moves_the_prune_point() -> None:
    shard = ShareShard()
    shard.replay(10, SNAPSHOT_TYPE, K1, snapshot(0))
    shard.replay(11, UPDATE_TYPE, K1, update(-1))
    shard.replay(15, SNAPSHOT_TYPE, K2, snapshot(0))
    assert shard.last_redundant_offset() == 10
    shard.replay(25, SNAPSHOT_TYPE, K1, None)
    assert K1 not in shard and list(shard) == [K2] and len(shard) == 1
    assert (shard.leader_epoch(K1), shard.state_epoch(K1), shard.snapshot_update_count(K1),
            shard.last_snapshot_offset(K1)) == (None, None, None, None)
    assert shard.last_redundant_offset() == 15
    assert shard.last_redundant_offset_raw == 15
    assert not shard.findings


def test_4_0_tombstone_is_reported_as_a_divergence() -> None:
    shard = ShareShard(RULES_4_0)
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(0))
    shard.replay(1, SNAPSHOT_TYPE, K1, None)
    assert K1 not in shard
    assert [f[:2] for f in shard.findings] == [(1, SNAPSHOT_TOMBSTONE_FAILED)]


def test_update_tombstone_and_unknown_type_change_nothing() -> None:
    shard = ShareShard()
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(3, B(3, 4, 0, 1)))
    before = shard.state(K1)
    shard.replay(1, UPDATE_TYPE, K1, None)
    shard.replay(2, 7, K1, update(-1))
    shard.replay(3, 99, None, None)  # no schema, so no key either
    assert shard.state(K1) == before and shard.snapshot_update_count(K1) is None
    assert [(f.offset, f.code, f.key) for f in shard.findings] == [
        (1, UPDATE_TOMBSTONE, K1), (2, UNKNOWN_RECORD_TYPE, K1), (3, UNKNOWN_RECORD_TYPE, None)]


def test_value_kind_must_match_the_type() -> None:
    shard = ShareShard()
    with pytest.raises(ValueError):
        shard.replay(0, SNAPSHOT_TYPE, None, snapshot(0))
    with pytest.raises(ValueError):
        shard.replay(0, SNAPSHOT_TYPE, K1, update(0))
    with pytest.raises(ValueError):
        shard.replay(0, UPDATE_TYPE, K1, snapshot(0))


def test_rules_select_the_combiner() -> None:
    so_far = (B(98, 103, 4, 5), B(104, 105, 0, 1))
    for rules, expected in ((RULES_4_1, (B(98, 109, 4, 5),)),
                            (ShareRules("4.1", combiner=TREESET),
                             (B(98, 103, 4, 5), B(104, 109, 4, 5)))):
        shard = ShareShard(rules)
        shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(98, *so_far))
        shard.replay(1, UPDATE_TYPE, K1, update(-1, B(104, 109, 4, 5)))
        state = shard.state(K1)
        assert state is not None and state.batches == expected


def test_rules_for() -> None:
    assert rules_for("4.0", 5) == RULES_4_0.with_limit(5)
    assert rules_for("4.1").snapshot_update_records_per_snapshot == 500
    with pytest.raises(KeyError):
        rules_for("3.9")
    with pytest.raises(ValueError):
        ShareShard(semantics="eventual")


def test_share_value_needs_a_share_layout() -> None:
    kind = dialect("4.1").kind(CONSUMER_OFFSETS_TOPIC, 1)
    assert kind is not None
    layout = kind.value_layout(3)
    assert layout is not None
    with pytest.raises(ValueError):
        share_value(layout.defaults, layout)


# ---------------------------------------------------------------------------------------
# transaction semantics


def test_kafka_semantics_apply_transactional_records_at_once() -> None:
    shard = ShareShard(semantics=KAFKA)
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(0), producer_id=7, transactional=True)
    assert shard.end_transaction(7, False, 1) == 0
    assert K1 in shard and shard.pending_producers() == ()


def test_transactional_acks_wait_for_the_marker() -> None:
    shard = ShareShard(semantics=TRANSACTIONAL_ACKS)
    shard.replay(5, SNAPSHOT_TYPE, K1, snapshot(0, B(0, 9, 0, 1)))
    shard.replay(6, UPDATE_TYPE, K1, update(-1, B(0, 4, 2, 1)), producer_id=7,
                 transactional=True)
    shard.replay(7, SNAPSHOT_TYPE, K2, snapshot(0), producer_id=8, transactional=True)
    shard.replay(8, UPDATE_TYPE, K1, update(-1, B(5, 9, 4, 1)), producer_id=7,
                 transactional=True)
    shard.replay(9, SNAPSHOT_TYPE, K1, snapshot(0, B(0, 9, 0, 1)))
    assert shard.pending_producers() == (7, 8)
    assert shard.last_redundant_offset() == 6  # held back by the first pending record
    assert shard.end_transaction(8, False, 10) == 1  # ABORT drops
    assert K2 not in shard
    assert shard.end_transaction(7, True, 11) == 2  # COMMIT applies in log order
    state = shard.state(K1)
    assert state is not None and state.batches == (B(0, 4, 2, 1), B(5, 9, 4, 1))
    assert shard.snapshot_update_count(K1) == 2
    assert shard.last_redundant_offset() == 9
    assert shard.end_transaction(7, True, 12) == 0
    shard.replay(13, UPDATE_TYPE, K1, update(-1), producer_id=9, transactional=True)
    with pytest.raises(ValueError):
        shard.end_transaction(9, True, 12)  # a marker cannot precede its records


def test_tombstone_discards_pending_records_of_its_key() -> None:
    shard = ShareShard(semantics=TRANSACTIONAL_ACKS)
    shard.replay(0, SNAPSHOT_TYPE, K1, snapshot(0))
    shard.replay(1, UPDATE_TYPE, K1, update(-1, B(0, 4, 2, 1)), producer_id=7,
                 transactional=True)
    shard.replay(2, UPDATE_TYPE, K2, update(-1), producer_id=7, transactional=True)
    shard.replay(3, SNAPSHOT_TYPE, K1, None)
    assert [f[:2] for f in shard.findings] == [(3, PENDING_DISCARDED)]
    assert shard.end_transaction(7, True, 4) == 1
    assert K1 not in shard and K2 in shard


def _held(shard: ShareShard) -> tuple[object, ...]:
    """Everything a shard holds (what a snapshot of it keeps)."""
    return (list(shard.entries()), list(shard.pending_records()),
            shard.last_redundant_offset_raw, list(shard.findings))


def test_a_copy_holds_what_the_shard_held_and_replays_on_apart_from_it() -> None:
    """`copy()` (the live service's published views hold copies): a copy taken midway
    holds what the shard held then and keeps it while the shard replays on, and replays
    the same records on to the shard's state, without changing the shard."""
    steps = [
        lambda s: s.replay(0, SNAPSHOT_TYPE, K1, snapshot(0, B(0, 9, 0, 1))),
        lambda s: s.replay(1, UPDATE_TYPE, K1, update(-1, B(0, 4, 2, 1)), producer_id=7,
                           transactional=True),
        lambda s: s.replay(2, SNAPSHOT_TYPE, K2, snapshot(5, B(5, 6, 0, 1))),
        lambda s: s.replay(3, UPDATE_TYPE, K2, update(-1, B(5, 5, 2, 1))),
        lambda s: s.end_transaction(7, True, 4),
        lambda s: s.replay(5, SNAPSHOT_TYPE, K2, None),
        lambda s: s.replay(6, UPDATE_TYPE, K1, update(-1, B(5, 9, 4, 1)), producer_id=8,
                           transactional=True),
    ]
    shard = ShareShard(semantics=TRANSACTIONAL_ACKS)
    for step in steps[:4]:
        step(shard)
    then = _held(shard)
    copy = shard.copy()
    assert _held(copy) == then
    for step in steps[4:]:
        step(shard)
    assert _held(copy) == then
    now = _held(shard)
    assert now != then
    for step in steps[4:]:
        step(copy)
    assert _held(copy) == now == _held(shard)
