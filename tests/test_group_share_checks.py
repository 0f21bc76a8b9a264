"""Cross-topic checks between share-group metadata and `__share_group_state` keys."""

from __future__ import annotations

from sharestate.coordinator.group_metadata import SharePartitionMetadata, ShareTopic
from sharestate.coordinator.share_checks import (
    DeletingTopic,
    OrphanedState,
    OrphanReason,
    initialized_without_state,
    orphaned_state,
    stuck_deleting,
)

ORDERS, NEW, OLD, GONE = "orders-id", "new-id", "old-id", "gone-id"


def _topic(topic_id: str, name: str, partitions: set[int], since: int) -> ShareTopic:
    return ShareTopic(topic_id, name, frozenset(partitions), since, 1_000 + since)


METADATA = {
    "sg": SharePartitionMetadata(
        group_id="sg",
        initializing={NEW: _topic(NEW, "new", {3}, 5)},
        initialized={ORDERS: _topic(ORDERS, "orders", {0, 1, 2}, 2)},
        deleting={OLD: _topic(OLD, "old", set(), 4)},
        record_offset=9),
    "sg2": SharePartitionMetadata(
        group_id="sg2", initializing={}, initialized={},
        deleting={GONE: _topic(GONE, "gone", set(), 1)}, record_offset=7),
}

STATE = {
    ("sg", ORDERS, 0), ("sg", ORDERS, 2),   # partition 1 has no state
    ("sg", ORDERS, 7),                      # not initialized
    ("sg", NEW, 3),                         # initializing: fine
    ("sg", OLD, 0), ("sg", OLD, 1),         # topic being deleted
    ("other", ORDERS, 0),                   # group without metadata
}


def test_orphaned_state() -> None:
    assert orphaned_state(METADATA, STATE) == [
        OrphanedState(("other", ORDERS, 0), OrphanReason.NO_METADATA),
        OrphanedState(("sg", OLD, 0), OrphanReason.TOPIC_DELETING),
        OrphanedState(("sg", OLD, 1), OrphanReason.TOPIC_DELETING),
        OrphanedState(("sg", ORDERS, 7), OrphanReason.NOT_INITIALIZED),
    ]


def test_initialized_without_state() -> None:
    assert initialized_without_state(METADATA, STATE) == [("sg", ORDERS, 1)]
    assert initialized_without_state(METADATA, set()) == [
        ("sg", ORDERS, 0), ("sg", ORDERS, 1), ("sg", ORDERS, 2)]


def test_stuck_deleting() -> None:
    assert stuck_deleting(METADATA, STATE) == [
        DeletingTopic("sg2", GONE, "gone", 1, 1_001, ()),
        DeletingTopic("sg", OLD, "old", 4, 1_004, (0, 1)),
    ]


def test_no_metadata_no_findings() -> None:
    assert orphaned_state({}, set()) == []
    assert initialized_without_state({}, STATE) == []
    assert stuck_deleting({}, STATE) == []
