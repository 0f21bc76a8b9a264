"""A `__consumer_offsets` replay's state as snapshot tables and back (see
`sharestate.replay.snapshot` for the tables; `GroupReplay.snapshot` / `restore` call these).

Every group's, member's and assignment's fields are columns of their own (a column other
group types lack is null); dicts become lists of entries in their order and sets sorted
lists, so the tables say everything the coordinator holds and give it back exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

from sharestate.coordinator.group_metadata import Anomaly, SharePartitionMetadata, ShareTopic
from sharestate.coordinator.group_offsets import CommittedOffset, OffsetListener
from sharestate.coordinator.groups import (
    ClassicGroup,
    ClassicMember,
    ConsumerGroup,
    ConsumerMember,
    Group,
    GroupType,
    ResolvedRegex,
    ShareGroup,
    ShareMember,
    StreamsGroup,
    StreamsMember,
    StreamsTasks,
    StreamsTopology,
    Subtopology,
)
from sharestate.records.keyvalue import RecordError
from sharestate.replay.group_log import GroupLogResult, group_state
from sharestate.replay.share_snapshot import log_findings, log_findings_table
from sharestate.replay.snapshot import Snapshot, schema, table_of

Convert = tuple[Callable[[Any], Any], Callable[[Any], Any]]
"""(to a column value, back from it)."""

_KEEP: Convert = (lambda value: value, lambda value: value)
_TUPLE: Convert = (lambda value: value, tuple)
_SET: Convert = (lambda value: None if value is None else sorted(value),
                 lambda value: None if value is None else frozenset(value))


def _entries(key: str, value: str, back: Callable[[Any], Any]) -> Convert:
    """A dict as a list of {key, value} entries, in its order."""
    return ((lambda held: [{key: k, value: v} for k, v in held.items()]),
            (lambda rows: {row[key]: back(row[value]) for row in rows or ()}))


_PARTITIONS = _entries("topic_id", "partitions", tuple)
_TASKS = _entries("subtopology_id", "partitions", tuple)
_PAIRS = _entries("key", "value", _KEEP[1])
_ENDPOINT: Convert = (lambda value: None if value is None else {"host": value[0],
                                                                 "port": value[1]},
                      lambda row: None if row is None else (row["host"], row["port"]))
_REGEXES = ((lambda held: [{"regex": regex, "topics": sorted(resolved.topics),
                            "version": resolved.version, "timestamp": resolved.timestamp}
                           for regex, resolved in held.items()]),
            (lambda rows: {row["regex"]: ResolvedRegex(frozenset(row["topics"]), row["version"],
                                                       row["timestamp"]) for row in rows or ()}))

COLUMNS: dict[str, Convert] = {
    "subscribed_topics": _SET, "resolved_regexes": _REGEXES,
    "last_assignment_configs": _PAIRS, "subscribed_topic_names": _TUPLE,
    "assigned_partitions": _PARTITIONS, "partitions_pending_revocation": _PARTITIONS,
    "user_endpoint": _ENDPOINT, "client_tags": _PAIRS,
    **dict.fromkeys(("active_tasks", "standby_tasks", "warmup_tasks",
                     "active_tasks_pending_revocation", "standby_tasks_pending_revocation",
                     "warmup_tasks_pending_revocation"), _TASKS)}
"""How a group's or member's field becomes its column, where it is not kept as it is."""

GROUP_TYPES: dict[str, type[Group]] = {
    GroupType.CLASSIC: ClassicGroup, GroupType.CONSUMER: ConsumerGroup,
    GroupType.SHARE: ShareGroup, GroupType.STREAMS: StreamsGroup}
MEMBER_TYPES: dict[str, type[Any]] = {
    GroupType.CLASSIC: ClassicMember, GroupType.CONSUMER: ConsumerMember,
    GroupType.SHARE: ShareMember, GroupType.STREAMS: StreamsMember}
_SUBTOPOLOGY = tuple(field.name for field in fields(Subtopology))[1:]
"""A subtopology's topic lists (after its id)."""
_HELD = ("members", "target_assignment", "topology")
"""Group fields with tables (or columns) of their own."""


def group_snapshot(result: GroupLogResult, stopped: bool) -> Snapshot:
    """The snapshot of a group replay's state (`stopped`: it reached its stop point)."""
    coordinator = result.coordinator
    offsets, metadata = coordinator.offsets, coordinator.groups
    groups = list(metadata.groups.values())
    replay = {"topic": result.topic, "partition": result.partition, "name": result.name,
              "dialect": coordinator.dialect.name, "stopped": stopped,
              "last_applied_offset": result.last_applied_offset,
              "last_applied_timestamp": result.last_applied_timestamp,
              "records": result.records}
    pending = [{"producer_id": producer_id, **_commit_row(okey, commit)}
               for producer_id, commits in offsets.pending().items()
               for okey, commit in (commits.items() or [(None, None)])]
    tables = {
        "group_replay": table_of("group_replay", [replay]),
        "committed_offsets": table_of("committed_offsets", [
            _commit_row(okey, commit) for okey, commit in offsets.committed()]),
        "pending_offsets": table_of("pending_offsets", pending),
        "groups": table_of("groups", [_group_row(group) for group in groups]),
        "group_members": table_of("group_members", [
            {**_row("group_members", member), "group_id": group.group_id}
            for group in groups for member in group.members.values()]),
        "target_assignments": table_of("target_assignments", list(_targets(groups))),
        "share_group_metadata": table_of("share_group_metadata", [
            _share_metadata_row(held) for held in metadata.share_partitions.values()]),
        "group_anomalies": table_of("group_anomalies", [
            {"offset": a.offset, "group_id": a.group_id, "message": a.message}
            for a in metadata.anomalies]),
        "skipped_records": table_of("skipped_records", [
            {"offset": offset, "kind": error.kind, "message": error.message}
            for offset, error in coordinator.skipped]),
        "log_findings": log_findings_table(result.findings),
    }
    return Snapshot(result.topic, result.partition, tables)


def restore_group(snapshot: Snapshot, listener: OffsetListener | None = None
                  ) -> tuple[GroupLogResult, bool]:
    """The state a group snapshot holds (its offset events going to `listener` from now on),
    and whether its replay had stopped."""
    [replay] = snapshot.table("group_replay").to_pylist()
    result = group_state(replay["topic"], replay["partition"], replay["dialect"],
                         name=replay["name"], listener=listener)
    result.last_applied_offset = replay["last_applied_offset"]
    result.last_applied_timestamp = replay["last_applied_timestamp"]
    result.records = replay["records"]
    result.findings = log_findings(snapshot)
    coordinator = result.coordinator
    pending: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
    for row in snapshot.table("pending_offsets").to_pylist():
        commits = pending.setdefault(row["producer_id"], {})
        if row["group_id"] is not None:
            commits[(row["group_id"], row["topic"], row["partition"])] = _commit(row)
    coordinator.offsets.load(
        (((row["group_id"], row["topic"], row["partition"]), _commit(row))
         for row in snapshot.table("committed_offsets").to_pylist()), pending)
    metadata = coordinator.groups
    members: dict[str, list[dict[str, Any]]] = {}
    for row in snapshot.table("group_members").to_pylist():
        members.setdefault(row["group_id"], []).append(row)
    targets: dict[str, list[dict[str, Any]]] = {}
    for row in snapshot.table("target_assignments").to_pylist():
        targets.setdefault(row["group_id"], []).append(row)
    for row in snapshot.table("groups").to_pylist():
        group = _group(row, members.get(row["group_id"], []), targets.get(row["group_id"], []))
        metadata.groups[group.group_id] = group
    for row in snapshot.table("share_group_metadata").to_pylist():
        metadata.share_partitions[row["group_id"]] = _share_metadata(row)
    metadata.anomalies.extend(Anomaly(**row)
                              for row in snapshot.table("group_anomalies").to_pylist())
    coordinator.skipped.extend((row["offset"], RecordError(row["kind"], row["message"]))
                               for row in snapshot.table("skipped_records").to_pylist())
    return result, replay["stopped"]


# -- offsets -------------------------------------------------------------------------------

_COMMIT = tuple(field.name for field in fields(CommittedOffset))


def _commit_row(okey: tuple[str, str, int] | None, commit: CommittedOffset | None
                ) -> dict[str, Any]:
    group, topic, partition = okey or (None, None, None)
    return {"group_id": group, "topic": topic, "partition": partition,
            **{name: getattr(commit, name, None) for name in _COMMIT}}


def _commit(row: dict[str, Any]) -> CommittedOffset:
    return CommittedOffset(**{name: row[name] for name in _COMMIT})


# -- groups, members, assignments ----------------------------------------------------------

def _row(table: str, held: Any) -> dict[str, Any]:
    """A group's or member's columns of `table` (those of other types null)."""
    row: dict[str, Any] = dict.fromkeys(schema(table).names)
    for field in fields(held):
        if field.name in _HELD:
            continue
        if field.name not in row:
            raise ValueError(f"snapshot table {table} has no column for {field.name}")
        row[field.name] = COLUMNS.get(field.name, _KEEP)[0](getattr(held, field.name))
    return row


def _build(cls: type[Any], row: dict[str, Any], **held: Any) -> Any:
    """An instance of `cls` from its columns (and the fields in `held`)."""
    return cls(**{field.name: COLUMNS.get(field.name, _KEEP)[1](row[field.name])
                  for field in fields(cls) if field.name not in held}, **held)


def _group_row(group: Group) -> dict[str, Any]:
    row = _row("groups", group)
    row["type"] = str(group.type)
    if isinstance(group, StreamsGroup) and group.topology is not None:
        row["topology_epoch"] = group.topology.epoch
        row["subtopologies"] = [
            {field.name: getattr(sub, field.name) for field in fields(Subtopology)}
            for sub in group.topology.subtopologies]
    return row


def _group(row: dict[str, Any], members: list[dict[str, Any]], targets: list[dict[str, Any]]
           ) -> Group:
    kind = row["type"]
    member_type = MEMBER_TYPES[kind]
    held: dict[str, Any] = {"members": {
        member["member_id"]: _build(member_type, member) for member in members}}
    if kind == GroupType.STREAMS:
        held["topology"] = None if row["topology_epoch"] is None else StreamsTopology(
            row["topology_epoch"], tuple(Subtopology(
                sub["subtopology_id"], *(tuple(sub[name]) for name in _SUBTOPOLOGY))
                for sub in row["subtopologies"]))
        held["target_assignment"] = {target["member_id"]: StreamsTasks(
            *(_TASKS[1](target[name]) for name in ("active_tasks", "standby_tasks",
                                                   "warmup_tasks"))) for target in targets}
    elif kind != GroupType.CLASSIC:
        held["target_assignment"] = {target["member_id"]: _PARTITIONS[1](target["partitions"])
                                     for target in targets}
    group: Group = _build(GROUP_TYPES[kind], row, **held)
    return group


def _targets(groups: list[Group]) -> Iterator[dict[str, Any]]:
    names = schema("target_assignments").names
    for group in groups:
        if isinstance(group, ClassicGroup):
            continue
        for member_id, target in group.target_assignment.items():
            row: dict[str, Any] = {**dict.fromkeys(names), "group_id": group.group_id,
                                   "member_id": member_id}
            if isinstance(target, StreamsTasks):
                row.update(active_tasks=_TASKS[0](target.active),
                           standby_tasks=_TASKS[0](target.standby),
                           warmup_tasks=_TASKS[0](target.warmup))
            else:
                row["partitions"] = _PARTITIONS[0](target)
            yield row


# -- share groups' state-partition metadata ------------------------------------------------

_LISTS = ("initializing", "initialized", "deleting")


def _share_metadata_row(held: SharePartitionMetadata) -> dict[str, Any]:
    return {"group_id": held.group_id, "record_offset": held.record_offset,
            **{name: [{"topic_id": topic.topic_id, "topic_name": topic.topic_name,
                       "partitions": sorted(topic.partitions),
                       "since_offset": topic.since_offset,
                       "since_timestamp": topic.since_timestamp}
                      for topic in getattr(held, name).values()] for name in _LISTS}}


def _share_metadata(row: dict[str, Any]) -> SharePartitionMetadata:
    lists = {name: {topic["topic_id"]: ShareTopic(
        topic["topic_id"], topic["topic_name"], frozenset(topic["partitions"]),
        topic["since_offset"], topic["since_timestamp"]) for topic in row[name]}
        for name in _LISTS}
    return SharePartitionMetadata(group_id=row["group_id"], record_offset=row["record_offset"],
                                  **lists)
