"""JSON-ready rows of replayed state: the stable shapes of `state`, `prune` and `offsets`."""

from __future__ import annotations

from functools import cache
from typing import Any

from sharestate.coordinator.expiry import forecast_offset
from sharestate.coordinator.group_offsets import CommittedOffset
from sharestate.coordinator.group_replay import GroupCoordinatorReplay
from sharestate.coordinator.share_state import SNAPSHOT_TYPE, SharePartitionState
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect
from sharestate.replay.logs import UNKNOWN_PARTITION
from sharestate.replay.share_log import ShareLogResult


def batches_json(state: SharePartitionState) -> list[dict[str, int]]:
    return [{"first_offset": b[0], "last_offset": b[1], "delivery_state": b[2],
             "delivery_count": b[3]} for b in state.batches]


def state_rows(result: ShareLogResult, group: str | None = None) -> list[dict[str, Any]]:
    """The `share_partition_state` rows of a replayed partition (of `group` alone, when
    given), in the table's columns: every live share-partition as of the last record
    applied, by key. The one builder of these rows: `sharestate state`, the live service's
    `/v1/share-partitions`, the API and the Delta table all take them from here."""
    shard = result.shard
    has_dcc = has_delivery_complete_count(shard.rules.dialect)
    partition = UNKNOWN_PARTITION if result.partition is None else result.partition
    rows = []
    for key in sorted(shard):
        if group is not None and key.group_id != group:
            continue
        state = shard.state(key)
        assert state is not None  # the shard iterates its live keys
        rows.append({
            "state_topic": result.topic,
            "state_partition": partition,
            "group_id": key.group_id,
            "topic_id": key.topic_id,
            "partition": key.partition,
            "state_epoch": state.state_epoch,
            "snapshot_epoch": state.snapshot_epoch,
            "leader_epoch": state.leader_epoch,
            "start_offset": state.start_offset,
            "state_batches": batches_json(state),
            "delivery_complete_count": state.delivery_complete_count if has_dcc else None,
            "create_timestamp": state.create_timestamp,
            "write_timestamp": state.write_timestamp,
            "last_snapshot_offset": shard.last_snapshot_offset(key),
            "max_leader_epoch": shard.leader_epoch(key),
            "max_state_epoch": shard.state_epoch(key),
            "snapshot_update_count": shard.snapshot_update_count(key),
            "as_of_offset": result.last_applied_offset,
            "as_of_timestamp": result.last_applied_timestamp,
            "dialect": shard.rules.dialect,
        })
    return rows


@cache
def has_delivery_complete_count(dialect_name: str) -> bool:
    """Whether share-state values of the dialect carry a delivery-complete count."""
    kind = dialect(dialect_name).kind(SHARE_STATE_TOPIC, SNAPSHOT_TYPE)
    return kind is not None and any(f.name == "DeliveryCompleteCount" for f in kind.value.fields)


def offset_row(group: str, topic: str, partition: int, commit: CommittedOffset,
               *, state: str = "committed") -> dict[str, Any]:
    """One committed (or pending) consumer-group offset as `sharestate offsets` prints it."""
    return {
        "group_id": group,
        "topic": topic,
        "partition": partition,
        "topic_id": commit.topic_id,
        "committed_offset": commit.committed_offset,
        "leader_epoch": commit.leader_epoch,
        "metadata": commit.metadata,
        "commit_timestamp": commit.commit_timestamp,
        "expire_timestamp": commit.expire_timestamp,
        "record_offset": commit.record_offset,
        "producer_id": commit.producer_id,
        "state": state,
    }


def offset_rows(coordinator: GroupCoordinatorReplay, retention_minutes: int, *,
                group: str | None = None, pending: bool = False) -> list[dict[str, Any]]:
    """`sharestate offsets` rows of one replayed offsets partition: each committed offset
    with its expiry forecast, by group (`pending`: then each open transactional commit)."""
    offsets = coordinator.offsets
    groups = sorted({key[0] for key, _ in offsets.committed()}) if group is None else [group]
    rows = [row for name in groups
            for row in group_offset_rows(coordinator, name, retention_minutes)]
    if pending:
        for producer_id, open_commits in sorted(offsets.pending().items()):
            for (group_id, topic, partition), commit in sorted(open_commits.items()):
                if group is None or group_id == group:
                    rows.append(offset_row(group_id, topic, partition, commit,
                                           state=f"pending:{producer_id}"))
    return rows


def group_offset_rows(coordinator: GroupCoordinatorReplay, group: str,
                      retention_minutes: int) -> list[dict[str, Any]]:
    """The `offset_rows` of one group's committed offsets, by topic and partition: each
    offset's forecast depends on its group alone (`forecast_offset`)."""
    offsets = coordinator.offsets
    found = coordinator.groups.groups.get(group)
    retention_ms = retention_minutes * 60_000
    rows: list[dict[str, Any]] = []
    for (topic, partition), commit in sorted(offsets.group_offsets(group).items()):
        expires_at, reason, _, _ = forecast_offset(
            found, topic, commit, offsets.has_pending(group, topic, partition), retention_ms)
        row = offset_row(group, topic, partition, commit)
        row["expires_at"] = expires_at
        row["expiry_reason"] = str(reason)
        rows.append(row)
    return rows
