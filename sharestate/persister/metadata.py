"""The broker's view of user topics that the share coordinator checks requests against."""

from __future__ import annotations

from collections.abc import Mapping


class MetadataImage:
    """Known topic ids and their partition counts.

    A request for a topic id the image does not hold, or for a partition at or above the
    topic's count, is answered with UNKNOWN_TOPIC_OR_PARTITION. `permissive()` builds an
    image that knows every topic (for offline use without topic metadata).
    """

    __slots__ = ("_permissive", "_topics")

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self._topics: dict[str, int] = dict(topics or {})
        self._permissive = False

    @classmethod
    def permissive(cls) -> MetadataImage:
        """An image in which every topic exists with any number of partitions."""
        image = cls()
        image._permissive = True
        return image

    def add_topic(self, topic_id: str, partitions: int) -> None:
        """Create (or resize) a topic."""
        if partitions < 1:
            raise ValueError(f"topic {topic_id} needs at least one partition")
        self._topics[topic_id] = partitions

    def remove_topic(self, topic_id: str) -> None:
        """Delete a topic (absent ids are ignored)."""
        self._topics.pop(topic_id, None)

    def has_partition(self, topic_id: str, partition: int) -> bool:
        """Whether the topic exists and has the partition."""
        if self._permissive:
            return True
        count = self._topics.get(topic_id)
        return count is not None and 0 <= partition < count

    def partitions(self, topic_id: str) -> int | None:
        """The topic's partition count, or None when it is unknown."""
        return self._topics.get(topic_id)
