"""Committed offsets with Kafka's transactional replay rules (`GroupOffsets`)."""

from __future__ import annotations

from typing import Any

import pytest

from sharestate.coordinator.group_offsets import (
    NO_PRODUCER_ID,
    CommittedOffset,
    GroupOffsets,
    OffsetEvent,
)
from sharestate.records import catalog
from sharestate.records.spec import ZERO_UUID

DIALECT = catalog.dialect("4.1")
LEGACY, COMMIT, GROUP_METADATA = 0, 1, 2
KEY_P0 = ("g", "t", 0, None)
KEY_P1 = ("g", "t", 1, None)


def _value(offset: int, *, epoch: int = -1, metadata: str = "", ts: int = 1000,
           expire: int = -1, topic_id: str = ZERO_UUID) -> tuple[Any, ...]:
    """An OffsetCommitValue tuple (all versions share this slot order)."""
    return (offset, epoch, metadata, ts, expire, topic_id, None)


class _Log:
    """A GroupOffsets fed with consecutive log offsets, recording events."""

    def __init__(self) -> None:
        self.events: list[OffsetEvent] = []
        self.offsets = GroupOffsets(DIALECT, self.events.append)
        self.next = 0

    def commit(self, key: tuple[Any, ...], offset: int, producer_id: int = NO_PRODUCER_ID,
               version: int = 3, **fields: Any) -> int:
        at = self.next
        self.offsets.replay(at, producer_id, COMMIT, key, _value(offset, **fields), version)
        self.next += 1
        return at

    def tombstone(self, key: tuple[Any, ...]) -> int:
        at = self.next
        self.offsets.replay(at, NO_PRODUCER_ID, COMMIT, key, None, None)
        self.next += 1
        return at

    def marker(self, producer_id: int, committed: bool) -> bool:
        at = self.next
        self.next += 1
        return self.offsets.end_transaction(producer_id, committed, at)

    def kinds(self) -> list[tuple[str, int, int]]:
        return [(str(e.type), e.offset, e.commit.record_offset) for e in self.events]


def test_plain_commit_is_installed_with_sentinels_mapped() -> None:
    log = _Log()
    log.commit(KEY_P0, 42, version=4, epoch=7, metadata="m", topic_id="q5xWKzzkQ4eA4hoB1xQpEg")
    log.commit(KEY_P1, 43, version=1, expire=5000)
    assert log.offsets.get("g", "t", 0) == CommittedOffset(42, 7, "m", 1000, None, 0,
                                                           "q5xWKzzkQ4eA4hoB1xQpEg", None)
    assert log.offsets.get("g", "t", 1) == CommittedOffset(43, None, "", 1000, 5000, 1, None,
                                                           None)
    assert log.kinds() == [("applied", 0, 0), ("applied", 1, 1)]
    assert dict(log.offsets.group_offsets("g")) == {
        ("t", 0): log.offsets.get("g", "t", 0), ("t", 1): log.offsets.get("g", "t", 1)}


def test_legacy_offset_commit_replays_as_a_commit() -> None:
    offsets = GroupOffsets(DIALECT)
    offsets.replay(3, NO_PRODUCER_ID, LEGACY, KEY_P0, (7, "legacy", 99, None), 0)
    assert offsets.get("g", "t", 0) == CommittedOffset(7, None, "legacy", 99, None, 3, None, None)


def test_commit_older_than_a_plain_commit_does_not_overwrite() -> None:
    log = _Log()
    log.commit(KEY_P0, 100, producer_id=5)          # offset 0, pending
    log.commit(KEY_P0, 200)                         # offset 1, written later
    assert log.marker(5, committed=True)            # offset 2
    commit = log.offsets.get("g", "t", 0)
    assert commit is not None and commit.committed_offset == 200 and commit.producer_id is None
    assert log.kinds() == [("pending", 0, 0), ("applied", 1, 1), ("stale", 2, 0)]


def test_commit_newer_than_a_plain_commit_is_installed() -> None:
    log = _Log()
    log.commit(KEY_P0, 100)
    log.commit(KEY_P0, 200, producer_id=5)
    assert log.offsets.has_pending("g", "t", 0)
    assert log.marker(5, committed=True)
    commit = log.offsets.get("g", "t", 0)
    assert commit is not None and (commit.committed_offset, commit.producer_id) == (200, 5)
    assert not log.offsets.has_pending("g", "t", 0)
    assert log.offsets.pending_producer_ids() == []


def test_abort_discards_pending_offsets() -> None:
    log = _Log()
    log.commit(KEY_P0, 100)
    log.commit(KEY_P0, 200, producer_id=5)
    log.commit(KEY_P1, 201, producer_id=5)
    assert log.offsets.pending() == {5: {
        ("g", "t", 0): CommittedOffset(200, None, "", 1000, None, 1, None, 5),
        ("g", "t", 1): CommittedOffset(201, None, "", 1000, None, 2, None, 5)}}
    assert log.marker(5, committed=False)
    commit = log.offsets.get("g", "t", 0)
    assert commit is not None and commit.committed_offset == 100
    assert log.offsets.get("g", "t", 1) is None
    assert log.offsets.pending() == {}
    assert log.kinds()[-2:] == [("aborted", 3, 1), ("aborted", 3, 2)]


def test_tombstone_clears_committed_and_pending_of_the_partition() -> None:
    log = _Log()
    log.commit(KEY_P0, 100)                       # 0
    log.commit(KEY_P0, 200, producer_id=5)        # 1
    log.commit(KEY_P1, 201, producer_id=5)        # 2
    log.commit(KEY_P0, 300, producer_id=6)        # 3
    log.tombstone(KEY_P0)                         # 4
    assert log.offsets.get("g", "t", 0) is None
    assert not log.offsets.has_pending("g", "t", 0)
    assert log.kinds()[-3:] == [("deleted", 4, 0), ("pending_deleted", 4, 1),
                                ("pending_deleted", 4, 3)]
    # Producer 6 has nothing left but its transaction is still open, as in Kafka.
    assert log.offsets.pending_producer_ids() == [5, 6]
    assert log.marker(5, committed=True)          # 5: only partition 1 remains
    assert log.offsets.get("g", "t", 0) is None
    commit = log.offsets.get("g", "t", 1)
    assert commit is not None and commit.committed_offset == 201
    assert log.marker(6, committed=True)
    assert log.offsets.get("g", "t", 0) is None
    assert list(log.offsets.committed()) == [(("g", "t", 1), commit)]


def test_marker_for_unknown_producer_is_ignored() -> None:
    log = _Log()
    log.commit(KEY_P0, 100)
    log.commit(KEY_P1, 200, producer_id=5)
    before = list(log.offsets.committed())
    assert not log.marker(9, committed=True)
    assert not log.marker(9, committed=False)
    assert list(log.offsets.committed()) == before
    assert log.offsets.pending_producer_ids() == [5]
    assert len(log.events) == 2


def test_two_producers_on_one_partition_follow_log_order() -> None:
    log = _Log()
    log.commit(KEY_P0, 100, producer_id=5)   # 0
    log.commit(KEY_P0, 200, producer_id=6)   # 1
    assert log.marker(6, committed=True)     # installs record offset 1
    assert log.offsets.has_pending("g", "t", 0)
    assert log.marker(5, committed=True)     # record offset 0 < 1: skipped
    commit = log.offsets.get("g", "t", 0)
    assert commit is not None and (commit.committed_offset, commit.producer_id) == (200, 6)
    assert not log.offsets.has_pending("g", "t", 0)


def test_bad_input_is_refused() -> None:
    offsets = GroupOffsets(DIALECT)
    with pytest.raises(ValueError, match="not an offset commit"):
        offsets.replay(0, NO_PRODUCER_ID, GROUP_METADATA, ("g", None), ("x",), 3)
    with pytest.raises(ValueError, match="no version None"):
        offsets.replay(0, NO_PRODUCER_ID, COMMIT, KEY_P0, _value(1), None)
    with pytest.raises(ValueError, match="no version 9"):
        offsets.replay(0, NO_PRODUCER_ID, COMMIT, KEY_P0, _value(1), 9)
