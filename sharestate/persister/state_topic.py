"""A whole `__share_group_state` topic: one persister per partition, writing real segments.

A share-partition's records go to partition `Utils.abs("group:topicId:partition".hashCode())
% partitions`, as Kafka's share coordinator chooses it. Each partition has its own
`Persister` (created on first use, all sharing one metadata image, config and clock) and its
own `PartitionLog` under the `log.dirs` root; `append` encodes an operation's records and
adds them to the partition's log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sharestate.coordinator.share_state import ShareKey
from sharestate.log import RawRecord
from sharestate.persister.java_hash import state_partition
from sharestate.persister.log_writer import LogDirs, PartitionLog
from sharestate.persister.metadata import MetadataImage
from sharestate.persister.persister import Persister, PersisterConfig, wall_clock_ms
from sharestate.persister.record_codec import EmittedRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC


class ShareStateTopic:
    """The partitions of `__share_group_state`, their writers and their logs."""

    def __init__(self, logs: LogDirs, partitions: int, dialect: str = "4.1", *,
                 config: PersisterConfig | None = None, metadata: MetadataImage | None = None,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        if partitions < 1:
            raise ValueError("the topic needs at least one partition")
        self.logs = logs
        self.partitions = partitions
        self.dialect = dialect
        self.config = config or PersisterConfig()
        self.metadata = metadata if metadata is not None else MetadataImage.permissive()
        self.clock = clock
        self.persisters: dict[int, Persister] = {}
        """The writer of every partition used so far."""
        self.partition_leader_epoch = 0
        """The partition leader epoch stamped on batches from now on (see `set_leader_epoch`)."""
        self._routes: dict[ShareKey, tuple[Persister, int]] = {}

    def route(self, key: ShareKey) -> tuple[Persister, int]:
        """The writer of the partition holding `key`, and that partition."""
        route = self._routes.get(key)
        if route is None:
            partition = state_partition(key, self.partitions)
            route = self._routes[key] = (self.persister(partition), partition)
        return route

    def persister(self, partition: int) -> Persister:
        """The writer of one partition."""
        persister = self.persisters.get(partition)
        if persister is None:
            persister = self.persisters[partition] = Persister(
                self.dialect, config=self.config, metadata=self.metadata, clock=self.clock)
        return persister

    def log(self, partition: int) -> PartitionLog:
        """The log of one partition."""
        log = self.logs.logs.get((SHARE_STATE_TOPIC, partition))
        if log is None:
            log = self.logs.log(SHARE_STATE_TOPIC, partition)
            log.partition_leader_epoch = self.partition_leader_epoch
        return log

    def append(self, partition: int, records: Sequence[EmittedRecord]) -> int:
        """Write one operation's records (from that partition's writer); returns how many."""
        if not records:
            return 0
        encode = self.persister(partition).codec.encode
        self.log(partition).append([RawRecord(r.offset, r.timestamp, -1, *encode(r), ())
                                    for r in records])
        return len(records)

    def set_leader_epoch(self, epoch: int) -> None:
        """A new partition leader epoch (a coordinator move) for every partition."""
        self.partition_leader_epoch = epoch
        for (topic, _), log in self.logs.logs.items():
            if topic == SHARE_STATE_TOPIC:
                log.partition_leader_epoch = epoch
