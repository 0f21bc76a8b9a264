"""One `__consumer_offsets` partition replayed as Kafka's loader feeds `GroupCoordinatorShard`.

Data records go to `GroupOffsets` (offset commits) or `GroupMetadata` (everything else) with
the batch's producer id, exactly as Kafka passes it (-1 when the batch has none). COMMIT and
ABORT markers go to the offsets only. Records that did not decode are skipped and listed, as
Kafka's loader skips record types it does not know.
"""

from __future__ import annotations

from sharestate.coordinator.group_metadata import GroupMetadata
from sharestate.coordinator.group_offsets import OFFSET_COMMIT_KINDS, GroupOffsets, OffsetListener
from sharestate.records.catalog import Dialect
from sharestate.records.keyvalue import KeyValue, RecordError


class GroupCoordinatorReplay:
    """Committed offsets and groups of one `__consumer_offsets` partition."""

    def __init__(self, dialect: Dialect, listener: OffsetListener | None = None) -> None:
        self.dialect = dialect
        self.offsets = GroupOffsets(dialect, listener)
        self.groups = GroupMetadata(dialect)
        self.skipped: list[tuple[int, RecordError]] = []

    def replay(self, offset: int, producer_id: int, record: KeyValue,
               timestamp: int | None = None) -> bool:
        """Apply one decoded data record; False when it was skipped (it did not decode)."""
        if record.error is not None or record.kind is None or record.key is None \
                or record.type_id is None:
            self.skipped.append((offset, record.error or RecordError("undecoded", "no key")))
            return False
        if record.kind.name in OFFSET_COMMIT_KINDS:
            if record.value is not None:
                self.groups.ensure_group(record.key[0])
            self.offsets.replay(offset, producer_id, record.type_id, record.key, record.value,
                                record.value_version)
        else:
            self.groups.replay(offset, record.type_id, record.key, record.value,
                               record.value_version, timestamp)
        return True

    def end_transaction(self, producer_id: int, committed: bool, offset: int) -> bool:
        """Apply a COMMIT or ABORT marker; False when the producer had nothing pending."""
        return self.offsets.end_transaction(producer_id, committed, offset)
