"""The simulated data topics as a broker would leave them on disk: one partition folder per
topic partition, `partition.metadata` naming the topic id, and each produce request's
records as one batch stamped with the broker's append time (LogAppendTime), so the
segments alone tell each partition's end offset at any simulated time
(`sharestate.log.end_offsets`). Values are empty: only offsets and times matter here.
A deleted topic's folders are renamed `<topic>-<partition>.<id>-delete`, as Kafka renames
them before it deletes them a minute later (the simulated copy is taken within that
minute); its replacement starts at offset 0.
"""

from __future__ import annotations

import base64
from pathlib import Path

from sharestate.log import LOG_APPEND_TIME, RawRecord, SegmentWriter, build_batch
from sharestate.log.end_offsets import METADATA_FILE


class DataTopics:
    """The data topics' logs under a `log.dirs` root."""

    def __init__(self, root: Path, segment_bytes: int) -> None:
        self.root = root
        self.segment_bytes = segment_bytes
        self.writers: dict[tuple[str, int], SegmentWriter] = {}
        self.ids: dict[str, str] = {}
        self.ends: dict[tuple[str, int], list[tuple[int, int]]] = {}
        """(topic id, partition) -> (append time, end offset after it), in time order."""

    def create(self, topic: str, topic_id: str, partitions: int) -> None:
        """A topic's partition folders, each with its `partition.metadata`."""
        for p in range(partitions):
            writer = SegmentWriter(self.root, topic, p, segment_bytes=self.segment_bytes)
            (writer.directory / METADATA_FILE).write_text(
                f"version: 0\ntopic_id: {topic_id}\n", encoding="utf-8")
            self.writers[(topic, p)] = writer
            self.ends[(topic_id, p)] = []
        self.ids[topic] = topic_id

    def produce(self, topic: str, partition: int, first: int, count: int, now: int) -> None:
        """`count` records appended at offsets `first`.. at time `now`, as one batch."""
        if count < 1:
            return
        records = [RawRecord(offset, now, -1, None, b"", ())
                   for offset in range(first, first + count)]
        self.writers[(topic, partition)].append(build_batch(
            records, timestamp_type=LOG_APPEND_TIME, max_timestamp=now))
        self.ends[(self.ids[topic], partition)].append((now, first + count))

    def delete(self, topic: str, partitions: int) -> None:
        """A topic's folders renamed aside, as Kafka marks them for deletion."""
        unique = base64.urlsafe_b64decode(self.ids[topic] + "==").hex()
        for p in range(partitions):
            writer = self.writers.pop((topic, p))
            writer.close()
            writer.directory.rename(writer.directory.with_name(
                f"{writer.directory.name}.{unique}-delete"))

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()
