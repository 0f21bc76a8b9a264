"""Consumer-group offset history rows (`sharestate.analytics.offsets`)."""

from __future__ import annotations

import json
from typing import Any

from conftest import conformance_dir

from sharestate.analytics.offsets import OffsetHistory
from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES
from sharestate.coordinator.group_offsets import NO_PRODUCER_ID, GroupOffsets
from sharestate.coordinator.groups import ClassicGroup
from sharestate.log import discover
from sharestate.records import catalog
from sharestate.records.spec import ZERO_UUID
from sharestate.replay.group_log import replay_group_log
from sharestate.replay.logs import partition_logs
from sharestate.tables.spec import table

COMMIT_TYPE = 1
P0, P1 = ("g", "t", 0, None), ("g", "t", 1, None)
RETENTION_MS = DEFAULT_RETENTION_MINUTES * 60_000


def _value(offset: int, ts: int) -> tuple[Any, ...]:
    """An OffsetCommitValue tuple (all versions share this slot order)."""
    return (offset, -1, "", ts, -1, ZERO_UUID, None)


class _Log:
    """GroupOffsets at consecutive log offsets, feeding an OffsetHistory."""

    def __init__(self) -> None:
        self.history = OffsetHistory(offsets_partition=3)
        self.offsets = GroupOffsets(catalog.dialect("4.1"), self.history)
        self.next = 0

    def _at(self) -> int:
        self.next += 1
        return self.next - 1

    def commit(self, key: tuple[Any, ...], offset: int, producer_id: int = NO_PRODUCER_ID,
               ts: int = 1_000) -> None:
        self.offsets.replay(self._at(), producer_id, COMMIT_TYPE, key, _value(offset, ts), 3)

    def tombstone(self, key: tuple[Any, ...]) -> None:
        self.offsets.replay(self._at(), NO_PRODUCER_ID, COMMIT_TYPE, key, None, None)

    def marker(self, producer_id: int, committed: bool, *, tell: bool = False) -> None:
        self.offsets.end_transaction(producer_id, committed, self._at())
        if tell:
            self.history.marker(producer_id, committed)

    def rows(self) -> list[tuple[Any, ...]]:
        rows = self.history.finish(self.offsets, {"g": ClassicGroup("g")})
        assert all(list(r) == table("consumer_group_offsets").names for r in rows)
        return sorted((r["event_offset"], r["record_offset"], r["event"], r["txn_outcome"],
                       r["is_current"], r["expires_at"], r["expiry_reason"]) for r in rows)


def test_plain_commits_current_one_with_forecast() -> None:
    log = _Log()
    log.commit(P0, 10, ts=1_000)
    log.commit(P0, 11, ts=2_000)
    log.commit(P1, 12, ts=3_000)
    log.tombstone(P1)
    assert log.rows() == [
        (0, 0, "applied", None, False, None, None),
        (1, 1, "applied", None, True, 2_000 + RETENTION_MS, "commit_timestamp"),
        (2, 2, "applied", None, False, None, None),
        (3, 2, "deleted", None, False, None, None),
    ]


def test_transaction_outcomes() -> None:
    log = _Log()
    log.commit(P0, 10, producer_id=7)   # 0: committed at 2
    log.commit(P1, 20, producer_id=8)   # 1: aborted at 3
    log.marker(7, True)                 # 2
    log.marker(8, False)                # 3
    log.commit(P1, 21, producer_id=8)   # 4: still open at the end
    log.commit(P0, 9)                   # 5: replaces the commit installed at 2
    log.commit(P0, 11, producer_id=9)   # 6: written later than 5, so installed at 7
    log.marker(9, True)                 # 7
    assert log.rows() == [
        (0, 0, "pending", "COMMIT", False, None, None),
        (1, 1, "pending", "ABORT", False, None, None),
        (2, 0, "committed", "COMMIT", False, None, None),
        (3, 1, "aborted", "ABORT", False, None, None),
        (4, 4, "pending", "open", False, None, None),
        (5, 5, "applied", None, False, None, None),
        (6, 6, "pending", "COMMIT", False, None, None),
        (7, 6, "committed", "COMMIT", True, 1_000 + RETENTION_MS, "commit_timestamp"),
    ]


def test_stale_commit_and_tombstone_dropping_a_pending_commit() -> None:
    log = _Log()
    log.commit(P0, 10, producer_id=7)   # 0
    log.commit(P0, 12)                  # 1: written later, so the COMMIT at 3 leaves it
    log.commit(P1, 20, producer_id=8)   # 2
    log.marker(7, True)                 # 3: stale
    log.tombstone(P1)                   # 4: drops 8's only pending commit
    log.marker(8, False, tell=True)     # 5: no event; the outcome comes from the marker
    rows = log.rows()
    assert rows == [
        (0, 0, "pending", "COMMIT", False, None, None),
        (1, 1, "applied", None, True, 1_000 + RETENTION_MS, "commit_timestamp"),
        (2, 2, "pending", "ABORT", False, None, None),
        (3, 0, "stale", "COMMIT", False, None, None),
        (4, 2, "pending_deleted", "ABORT", False, None, None),
    ]


def test_fixture_offsets_follow_kafkas_final_state() -> None:
    folder = conformance_dir("kafka-4.4-dev")
    (log,) = partition_logs(discover([folder / "consumer_offsets_txn.log"]))[0]
    history = OffsetHistory(offsets_partition=0)
    result = replay_group_log(log, listener=history)
    coordinator = result.coordinator
    rows = history.finish(coordinator.offsets, coordinator.groups.groups)
    kafka = json.loads((folder / "consumer_offsets_txn.final_state.json").read_text("utf-8"))
    current = {(r["group_id"], r["topic"], r["partition"]): r for r in rows if r["is_current"]}
    assert {k: (r["committed_offset"], r["record_offset"]) for k, r in current.items()} == {
        (c["group"], c["topic"], c["partition"]): (c["committedOffset"], c["recordOffset"])
        for c in kafka["committedOffsets"]}
    assert all(r["expires_at"] == r["commit_timestamp"] + RETENTION_MS
               for r in current.values())
    outcomes = {(r["producer_id"], r["record_offset"]): r["txn_outcome"] for r in rows
                if r["event"] == "pending"}
    assert outcomes == {(7000, 503): "COMMIT", (7000, 504): "COMMIT", (7000, 505): "COMMIT",
                        (7001, 506): "ABORT", (7001, 507): "ABORT", (7001, 508): "ABORT",
                        (7000, 511): "ABORT", (7000, 512): "ABORT", (7000, 513): "ABORT",
                        (7000, 515): "COMMIT", (7000, 516): "COMMIT"}
    assert not kafka["pendingTransactionalProducerIds"]
    assert [(r["event"], r["record_offset"], r["txn_outcome"]) for r in rows
            if r["event_offset"] == 517] == [("deleted", 505, "COMMIT")]
    assert sorted(r["event_offset"] for r in rows if r["event"] == "aborted") == \
        [510, 510, 510, 514, 514, 514]


def test_unseen_marker_of_a_fully_dropped_transaction_leaves_no_outcome() -> None:
    log = _Log()
    log.commit(P1, 20, producer_id=8)   # 0
    log.tombstone(P1)                   # 1
    log.marker(8, True)                 # 2: no event, and the history is not told
    log.commit(P0, 5, producer_id=9)    # 3: still open at the end
    assert log.rows() == [
        (0, 0, "pending", None, False, None, None),
        (1, 0, "pending_deleted", None, False, None, None),
        (3, 3, "pending", "open", False, None, None),
    ]
