"""Records the persister emits, and their bytes in one dialect's share-state layouts.

An `EmittedRecord` carries its log offset and timestamp, the record type id (0 ShareSnapshot,
1 ShareUpdate), the `ShareKey`, the value as a decoded-struct tuple of the dialect's layout
(one slot per schema field plus the unknown-tagged-fields slot; None for a tombstone) and the
same value as a `ShareValue`, which is what the shard replays.

`ShareRecordCodec` builds those tuples and serialises them. Its value encoder is compiled
from the layout (fixed-width fields, the state-batch array, then the tagged fields written
when they differ from their default) and falls back to the generic `write_struct` when a
tuple carries unknown tagged fields; both give the bytes `encode_key_value` gives.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace
from operator import itemgetter
from typing import Any, NamedTuple

from sharestate.coordinator.share_state import SNAPSHOT_TYPE, UPDATE_TYPE, ShareKey, ShareValue
from sharestate.records.catalog import SHARE_STATE_TOPIC, RecordKind, dialect
from sharestate.records.codec import write_struct
from sharestate.records.keyvalue import encode_key_value
from sharestate.records.spec import Kind, StructLayout


class EmittedRecord(NamedTuple):
    """One record written by the persister, at its log offset."""

    offset: int
    timestamp: int
    type_id: int
    key: ShareKey
    value: tuple[Any, ...] | None
    """The value in the dialect's layout, or None for a tombstone."""
    share_value: ShareValue | None
    """The same value in dialect-independent form (what the shard replays); when set, the
    codec encodes from it."""

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


_CANONICAL = ("snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
              "delivery_complete_count", "create_timestamp", "write_timestamp", "state_batches")
"""Field order of the source tuple a value tuple is picked from (then the unknown-tags slot)."""
_BATCH_FIELDS = ("first_offset", "last_offset", "delivery_state", "delivery_count")
_CODES = {Kind.INT8: "b", Kind.INT16: "h", Kind.UINT16: "H", Kind.INT32: "i", Kind.INT64: "q"}


_SMALL = tuple(bytes((i,)) for i in range(128))


def _uvarint(value: int) -> bytes:
    if value < 128:
        return _SMALL[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class _ValuePlan:
    """A share-state value layout compiled for fast tuple building and encoding.

    The fixed-width fields, the array length and up to 126 state batches are written with
    one `struct` format per batch count; the tagged fields follow when they differ from
    their default.
    """

    __slots__ = ("_formats", "batches", "element", "has_count", "has_timestamps", "head",
                 "head_slots", "head_source", "layout", "pick", "prefix", "source_tags",
                 "tagged", "version", "width")

    def __init__(self, layout: StructLayout, version: int) -> None:
        *fixed, batches = layout.regular
        element = batches.element.struct if batches.element is not None else None
        if (not layout.flexible or batches.kind != Kind.ARRAY or element is None
                or element.tagged or element.names != _BATCH_FIELDS
                or [s.index for s in element.regular] != [0, 1, 2, 3]
                or any(s.kind not in _CODES for s in (*fixed, *element.regular))
                or any(s.kind not in _CODES for _, s in layout.tagged)):
            raise ValueError(f"{layout.name} is not a share-state value layout")
        self.layout = layout
        self.width = layout.width
        self.version = version
        self.pick = itemgetter(*(_CANONICAL.index(name) for name in layout.names),
                               len(_CANONICAL))
        self.has_count = "delivery_complete_count" in layout.names
        self.has_timestamps = "create_timestamp" in layout.names
        self.head = "".join(_CODES[s.kind] for s in fixed)
        self.head_slots = itemgetter(*(s.index for s in fixed))
        self.head_source = itemgetter(*(_CANONICAL.index(s.name) for s in fixed))
        self.prefix = struct.Struct(">h" + self.head + "B")
        self.batches = batches.index
        self.element = "".join(_CODES[s.kind] for s in element.regular) + "B"
        self.tagged = tuple((_uvarint(tag) + _uvarint(struct.calcsize(">" + _CODES[slot.kind])),
                             slot.index, slot.default, struct.Struct(">" + _CODES[slot.kind]))
                            for tag, slot in layout.tagged)
        self.source_tags = tuple((prefix, _CANONICAL.index(slot.name), default, fmt)
                                 for (_, slot), (prefix, _, default, fmt)
                                 in zip(layout.tagged, self.tagged, strict=True))
        self._formats: dict[int, struct.Struct] = {}

    def tuple_of(self, value: ShareValue) -> tuple[Any, ...]:
        picked: tuple[Any, ...] = self.pick((
            value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
            value.delivery_complete_count, value.create_timestamp, value.write_timestamp,
            tuple([(*b, None) for b in value.batches]), None))
        return picked

    def encode_value(self, value: ShareValue) -> bytes:
        """The bytes of `value` (same as `encode(tuple_of(value))`)."""
        source = (value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                  value.start_offset, value.delivery_complete_count, value.create_timestamp,
                  value.write_timestamp)
        tags = [prefix + fmt.pack(source[index]) for prefix, index, default, fmt
                in self.source_tags if source[index] != default]
        return self._body(self.head_source(source), value.batches) + _SMALL[len(tags)] + \
            b"".join(tags)

    def encode(self, values: tuple[Any, ...]) -> bytes:
        """The bytes of a value tuple (the generic writer when it has unknown tags)."""
        batches = values[self.batches]
        if values[self.width] is not None or any(b[4] is not None for b in batches):
            return self.version.to_bytes(2, "big", signed=True) + write_struct(self.layout,
                                                                               values)
        tags = [prefix + fmt.pack(values[index]) for prefix, index, default, fmt
                in self.tagged if values[index] != default]
        return self._body(self.head_slots(values), batches) + _SMALL[len(tags)] + \
            b"".join(tags)

    def _body(self, head: tuple[Any, ...], batches: Sequence[Sequence[Any]]) -> bytes:
        """Version, fixed-width fields and the state-batch array."""
        n = len(batches)
        if n >= 127:  # the array length needs a multi-byte varint
            element = struct.Struct(">" + self.element)
            return (struct.Struct(">h" + self.head).pack(self.version, *head) + _uvarint(n + 1)
                    + b"".join([element.pack(b[0], b[1], b[2], b[3], 0) for b in batches]))
        fmt = self._formats.get(n)
        if fmt is None:
            fmt = self._formats[n] = struct.Struct(self.prefix.format + self.element * n)
        args = [self.version, *head, n + 1]
        for b in batches:
            args += (b[0], b[1], b[2], b[3], 0)
        return fmt.pack(*args)


class ShareRecordCodec:
    """Value tuples and record bytes of the share-state records of one dialect."""

    __slots__ = ("_keys", "_kinds", "_plans", "dialect", "value_versions")

    def __init__(self, dialect_name: str, update_value_version: int = 0) -> None:
        schemas = dialect(dialect_name)
        self.dialect = dialect_name
        self._kinds: dict[int, RecordKind] = {}
        self._plans: dict[int, _ValuePlan] = {}
        self.value_versions = {SNAPSHOT_TYPE: 0, UPDATE_TYPE: update_value_version}
        """The value version each record type is written with."""
        for type_id, version in self.value_versions.items():
            kind = schemas.kind(SHARE_STATE_TOPIC, type_id)
            layout = kind.value_layout(version) if kind is not None else None
            if kind is None or layout is None:
                raise ValueError(f"dialect {dialect_name} cannot write share-state record "
                                 f"type {type_id} at value version {version}")
            self._kinds[type_id] = kind
            self._plans[type_id] = _ValuePlan(layout, version)
        self._keys: dict[tuple[int, ShareKey], bytes] = {}

    def value_layout(self, type_id: int) -> StructLayout:
        """The layout value tuples of `type_id` follow."""
        return self._plans[type_id].layout

    def lossy(self, type_id: int) -> bool:
        """Whether the layout of `type_id` lacks fields a `ShareValue` can carry."""
        plan = self._plans[type_id]
        return not (plan.has_count and plan.has_timestamps)

    def storable(self, type_id: int, value: ShareValue) -> ShareValue:
        """`value` without the fields the layout cannot hold (what a loader decodes)."""
        plan = self._plans[type_id]
        if (plan.has_count or value.delivery_complete_count == -1) and (
                plan.has_timestamps or value.create_timestamp is None):
            return value
        return replace(value,
                       delivery_complete_count=value.delivery_complete_count
                       if plan.has_count else -1,
                       create_timestamp=value.create_timestamp if plan.has_timestamps else None,
                       write_timestamp=value.write_timestamp if plan.has_timestamps else None)

    def value_tuple(self, type_id: int, value: ShareValue) -> tuple[Any, ...]:
        """`value` as a decoded-struct tuple of the record type's value layout."""
        return self._plans[type_id].tuple_of(value)

    def key_bytes(self, type_id: int, key: ShareKey) -> bytes:
        """The record key bytes (type prefix and key struct)."""
        cached = self._keys.get((type_id, key))
        if cached is None:
            cached = encode_key_value(self._kinds[type_id], (*key, None), None, None)[0]
            self._keys[(type_id, key)] = cached
        return cached

    def value_bytes(self, type_id: int, value: tuple[Any, ...] | None) -> bytes | None:
        """The record value bytes (version prefix and value struct); None for a tombstone."""
        return None if value is None else self._plans[type_id].encode(value)

    def encode(self, record: EmittedRecord) -> tuple[bytes, bytes | None]:
        """The key and value bytes of an emitted record."""
        key = self._keys.get((record.type_id, record.key)) or self.key_bytes(record.type_id,
                                                                             record.key)
        value = record.share_value
        if value is None:
            return key, self.value_bytes(record.type_id, record.value)
        return key, self._plans[record.type_id].encode_value(value)
