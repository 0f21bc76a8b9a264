"""Share-group metadata <-> `share_group_partitions` rows.

The gold pass over `__consumer_offsets` keeps each share group's
ShareGroupStatePartitionMetadata as rows (one per topic, status and partition); the
analytics job turns them back into `SharePartitionMetadata` for the cross-topic audits and
the topic names of the lag table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sharestate.coordinator.group_metadata import SharePartitionMetadata, ShareTopic

STATUSES = ("initializing", "initialized", "deleting")


def metadata_rows(metadata: Mapping[str, SharePartitionMetadata],
                  offsets_partition: int) -> list[dict[str, Any]]:
    """The `share_group_partitions` rows of one offsets partition's share groups."""
    rows = []
    for group_id, info in sorted(metadata.items()):
        for status in STATUSES:
            for topic_id, topic in sorted(getattr(info, status).items()):
                for partition in sorted(topic.partitions) or [None]:
                    rows.append({"offsets_partition": offsets_partition, "group_id": group_id,
                                 "status": status, "topic_id": topic_id,
                                 "topic_name": topic.topic_name, "partition": partition,
                                 "since_offset": topic.since_offset,
                                 "since_timestamp": topic.since_timestamp,
                                 "record_offset": info.record_offset})
    return rows


def metadata_from_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, SharePartitionMetadata]:
    """The inverse of `metadata_rows` (over every offsets partition)."""
    topics: dict[tuple[str, str, str], dict[str, Any]] = {}
    partitions: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    record_offsets: dict[str, int] = {}
    for row in rows:
        ident = (row["group_id"], row["status"], row["topic_id"])
        topics[ident] = dict(row)
        if row["partition"] is not None:
            partitions[ident].add(row["partition"])
        record_offsets[row["group_id"]] = row["record_offset"]
    by_group: dict[str, dict[str, dict[str, ShareTopic]]] = defaultdict(
        lambda: {status: {} for status in STATUSES})
    for (group_id, status, topic_id), row in topics.items():
        by_group[group_id][status][topic_id] = ShareTopic(
            topic_id, row["topic_name"], frozenset(partitions[(group_id, status, topic_id)]),
            row["since_offset"], row["since_timestamp"])
    return {group_id: SharePartitionMetadata(group_id, lists["initializing"],
                                             lists["initialized"], lists["deleting"],
                                             record_offsets[group_id])
            for group_id, lists in by_group.items()}
