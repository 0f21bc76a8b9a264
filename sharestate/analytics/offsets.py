"""Consumer-group offset history: the `consumer_group_offsets` rows.

`OffsetHistory` is an `OffsetListener` (pass it to `GroupCoordinatorReplay` /
`replay_group_log`): one row per offset event, in the event's terms (Kafka's
`OffsetMetadataManager`).

- `txn_outcome` is the outcome of the transaction a transactional commit belongs to: COMMIT
  or ABORT once its producer's marker is seen, `open` when the input ends first, null for a
  non-transactional commit. The marker's events give it; a transaction whose every commit a
  tombstone dropped produces no event at its marker, so feed markers with `marker()` where
  they are visible (the replay's listener does not see them). Without that such rows keep a
  null outcome unless the producer is still pending at the end (`open`).
- `is_current` is true on the row of the event that installed the committed offset held at
  the end (an `applied` or `committed` row); only those rows get the KIP-211 forecast
  (`expires_at`, `expiry_reason`, from `forecast_expiry`).

Rows are emitted once final, so memory holds one row per partition (its latest install)
plus the rows of open transactions; `drain()` hands out the finished rows in the order they
became final (not log order), `finish()` the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES, forecast_expiry
from sharestate.coordinator.group_offsets import (
    GroupOffsets,
    OffsetEvent,
    OffsetEventType,
    OffsetKey,
)
from sharestate.coordinator.groups import Group

COMMIT, ABORT, OPEN = "COMMIT", "ABORT", "open"

_INSTALLS = (OffsetEventType.APPLIED, OffsetEventType.COMMITTED)
_OUTCOMES = {OffsetEventType.COMMITTED: COMMIT, OffsetEventType.STALE: COMMIT,
             OffsetEventType.ABORTED: ABORT}


class OffsetHistory:
    """Collects `consumer_group_offsets` rows of one `__consumer_offsets` partition."""

    def __init__(self, offsets_partition: int) -> None:
        self.offsets_partition = offsets_partition
        self._ready: list[dict[str, Any]] = []
        self._open: dict[int, list[dict[str, Any]]] = {}
        self._installed: dict[OffsetKey, dict[str, Any]] = {}

    def __call__(self, event: OffsetEvent) -> None:
        """Record one offset event (the `OffsetListener` interface)."""
        commit = event.commit
        okey = (event.group, event.topic, event.partition)
        row = {
            "offsets_partition": self.offsets_partition,
            "group_id": event.group,
            "topic": event.topic,
            "partition": event.partition,
            "record_offset": commit.record_offset,
            "event": event.type.value,
            "event_offset": event.offset,
            "committed_offset": commit.committed_offset,
            "leader_epoch": commit.leader_epoch,
            "metadata": commit.metadata,
            "commit_timestamp": commit.commit_timestamp,
            "expire_timestamp": commit.expire_timestamp,
            "topic_id": commit.topic_id,
            "producer_id": commit.producer_id,
            "txn_outcome": None,
            "is_current": False,
            "expires_at": None,
            "expiry_reason": None,
        }
        producer_id = commit.producer_id
        if producer_id is not None:
            outcome = _OUTCOMES.get(event.type)
            if outcome is not None:
                self._resolve(producer_id, outcome)
                row["txn_outcome"] = outcome
            elif event.type == OffsetEventType.DELETED:
                row["txn_outcome"] = COMMIT  # only a committed transaction installs a commit
            else:  # pending, pending_deleted: the marker decides
                self._open.setdefault(producer_id, []).append(row)
                return
        if event.type in _INSTALLS or event.type == OffsetEventType.DELETED:
            superseded = self._installed.pop(okey, None)
            if superseded is not None:
                self._ready.append(superseded)
        if event.type in _INSTALLS:
            self._installed[okey] = row
        else:
            self._ready.append(row)

    def marker(self, producer_id: int, committed: bool) -> None:
        """A COMMIT (`committed`) or ABORT marker of `producer_id`, where markers are seen."""
        self._resolve(producer_id, COMMIT if committed else ABORT)

    def _resolve(self, producer_id: int, outcome: str) -> None:
        rows = self._open.pop(producer_id, None)
        if rows:
            for row in rows:
                row["txn_outcome"] = outcome
            self._ready.extend(rows)

    def drain(self) -> list[dict[str, Any]]:
        """The rows that became final since the last call."""
        ready, self._ready = self._ready, []
        return ready

    def finish(self, offsets: GroupOffsets, groups: Mapping[str, Group],
               retention_minutes: int = DEFAULT_RETENTION_MINUTES) -> list[dict[str, Any]]:
        """Every row not drained yet, current commits with their expiry forecast.

        `offsets` and `groups` are the replay's end state (`coordinator.offsets`,
        `coordinator.groups.groups`).
        """
        pending = set(offsets.pending_producer_ids())
        for producer_id, rows in self._open.items():
            if producer_id in pending:
                for row in rows:
                    row["txn_outcome"] = OPEN
            self._ready.extend(rows)
        self._open = {}
        for forecast in forecast_expiry(offsets, groups, retention_minutes):
            okey = (forecast.group, forecast.topic, forecast.partition)
            installed = self._installed.get(okey)
            current = offsets.get(*okey)
            if installed is None or current is None \
                    or installed["record_offset"] != current.record_offset:
                continue
            installed["is_current"] = True
            installed["expires_at"] = forecast.expires_at
            installed["expiry_reason"] = forecast.reason.value
        self._ready.extend(self._installed.values())
        self._installed = {}
        return self.drain()
