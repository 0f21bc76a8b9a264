"""Cross-topic checks between share groups' metadata and `__share_group_state`.

A share group's ShareGroupStatePartitionMetadata lists the share-partitions whose state the
share coordinator holds (initialized), is creating (initializing) or must delete (deleting
topics). These pure functions compare it with the set of share-partition keys that have
state in `__share_group_state`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum

from sharestate.coordinator.group_metadata import SharePartitionMetadata

SharePartitionKey = tuple[str, str, int]
"""(group id, topic id, partition) of a share-partition; `share_state.ShareKey` fits."""


class OrphanReason(StrEnum):
    """Why state in `__share_group_state` has no place in the group's metadata."""

    NO_METADATA = "no_share_partition_metadata"
    TOPIC_DELETING = "topic_deleting"
    NOT_INITIALIZED = "not_initialized"


@dataclass(frozen=True, slots=True)
class OrphanedState:
    """A share-partition with state that its group's metadata neither initialized nor is
    initializing."""

    key: SharePartitionKey
    reason: OrphanReason


@dataclass(frozen=True, slots=True)
class DeletingTopic:
    """A topic still in a share group's deleting list, with the state partitions left."""

    group_id: str
    topic_id: str
    topic_name: str
    since_offset: int
    since_timestamp: int | None
    state_partitions: tuple[int, ...]


def orphaned_state(metadata: Mapping[str, SharePartitionMetadata],
                   state_keys: Collection[SharePartitionKey]) -> list[OrphanedState]:
    """State keys not initialized or initializing in their group's metadata, sorted."""
    orphans = []
    for key in sorted(state_keys):
        group_id, topic_id, partition = key
        info = metadata.get(group_id)
        if info is None:
            orphans.append(OrphanedState(key, OrphanReason.NO_METADATA))
            continue
        known = (info.initialized.get(topic_id), info.initializing.get(topic_id))
        if any(topic is not None and partition in topic.partitions for topic in known):
            continue
        reason = (OrphanReason.TOPIC_DELETING if topic_id in info.deleting
                  else OrphanReason.NOT_INITIALIZED)
        orphans.append(OrphanedState(key, reason))
    return orphans


def initialized_without_state(metadata: Mapping[str, SharePartitionMetadata],
                              state_keys: Collection[SharePartitionKey]
                              ) -> list[SharePartitionKey]:
    """Share-partitions the metadata calls initialized that have no state, sorted."""
    missing = [(group_id, topic_id, partition)
               for group_id, info in metadata.items()
               for topic_id, topic in info.initialized.items()
               for partition in topic.partitions
               if (group_id, topic_id, partition) not in state_keys]
    return sorted(missing)


def stuck_deleting(metadata: Mapping[str, SharePartitionMetadata],
                   state_keys: Collection[SharePartitionKey]) -> list[DeletingTopic]:
    """Every topic still being deleted when the replay ended, longest-deleting first."""
    deleting = {(group_id, topic_id): topic for group_id, info in metadata.items()
                for topic_id, topic in info.deleting.items()}
    left: dict[tuple[str, str], list[int]] = {}
    for group_id, topic_id, partition in state_keys:
        if (group_id, topic_id) in deleting:
            left.setdefault((group_id, topic_id), []).append(partition)
    topics = [DeletingTopic(group_id, topic_id, topic.topic_name, topic.since_offset,
                            topic.since_timestamp,
                            tuple(sorted(left.get((group_id, topic_id), ()))))
              for (group_id, topic_id), topic in deleting.items()]
    topics.sort(key=lambda t: (t.since_offset, t.group_id, t.topic_id))
    return topics
