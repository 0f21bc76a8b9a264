"""Share-coordinator values: keys, state batches, normalized record values, partition state.

Decoded record structs (see `sharestate.records.codec`) are read by field name, so the same
code serves every dialect: fields a dialect lacks get the neutral value (`state_epoch` None for
updates, `delivery_complete_count` -1, timestamps None).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from sharestate.records.spec import StructLayout

SNAPSHOT_TYPE = 0
"""Record type id of ShareSnapshot (key + value); tombstones use this key."""
UPDATE_TYPE = 1
"""Record type id of ShareUpdate."""


class ShareKey(NamedTuple):
    """A share-partition: (group id, topic id in Kafka's base64 form, partition)."""

    group_id: str
    topic_id: str
    partition: int


class StateBatch(NamedTuple):
    """An inclusive offset range with one delivery state and delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


Batches = tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class ShareValue:
    """A ShareSnapshot or ShareUpdate value in dialect-independent form."""

    is_snapshot: bool
    snapshot_epoch: int
    state_epoch: int | None
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int | None
    write_timestamp: int | None
    batches: Batches


class SharePartitionState(NamedTuple):
    """What Kafka's shard holds for one key (its `ShareGroupOffset`)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int | None
    write_timestamp: int | None
    batches: Batches


class ValueSlots(NamedTuple):
    """Where each field of a share-state value layout sits in its decoded tuple (-1: the
    dialect has no such field); the last four are positions inside each state batch struct.

    `share_value` reads it, and so do `sharestate._native.share_apply` and `share_audit`, by
    position (the `SLOT_*` constants of csrc/native.h, checked by tests/test_native.py).
    """

    is_snapshot: bool
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: int
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


ABSENT_SLOTS = ValueSlots(False, *(-1,) * (len(ValueSlots._fields) - 1))
"""The slots of no layout (every field absent)."""

_SLOTS: dict[int, tuple[StructLayout, ValueSlots]] = {}
_KEY_SLOTS: dict[int, tuple[StructLayout, tuple[int, int, int]]] = {}
_VALUE_NAMES = {"ShareSnapshotValue": True, "ShareUpdateValue": False}


def _optional(layout: StructLayout, name: str) -> int:
    return layout.index(name) if name in layout.names else -1


def value_slots(layout: StructLayout) -> ValueSlots:
    """The slots of a ShareSnapshotValue / ShareUpdateValue layout (cached per layout)."""
    cached = _SLOTS.get(id(layout))
    if cached is not None and cached[0] is layout:
        return cached[1]
    if layout.name not in _VALUE_NAMES:
        raise ValueError(f"{layout.name} is not a share-state value layout")
    batches = layout.index("state_batches")
    slot = layout.slots[batches]
    element = slot.element.struct if slot is not None and slot.element is not None else None
    if element is None:
        raise ValueError(f"{layout.name}.state_batches is not an array of structs")
    slots = ValueSlots(
        is_snapshot=_VALUE_NAMES[layout.name],
        snapshot_epoch=layout.index("snapshot_epoch"),
        state_epoch=_optional(layout, "state_epoch"),
        leader_epoch=layout.index("leader_epoch"),
        start_offset=layout.index("start_offset"),
        delivery_complete_count=_optional(layout, "delivery_complete_count"),
        create_timestamp=_optional(layout, "create_timestamp"),
        write_timestamp=_optional(layout, "write_timestamp"),
        batches=batches,
        first_offset=element.index("first_offset"),
        last_offset=element.index("last_offset"),
        delivery_state=element.index("delivery_state"),
        delivery_count=element.index("delivery_count"),
    )
    _SLOTS[id(layout)] = (layout, slots)
    return slots


def share_key(values: tuple[Any, ...], layout: StructLayout) -> ShareKey:
    """A ShareKey from a decoded ShareSnapshotKey / ShareUpdateKey struct."""
    cached = _KEY_SLOTS.get(id(layout))
    if cached is None or cached[0] is not layout:
        cached = (layout, (layout.index("group_id"), layout.index("topic_id"),
                           layout.index("partition")))
        _KEY_SLOTS[id(layout)] = cached
    g, t, p = cached[1]
    return ShareKey(values[g], values[t], values[p])


def share_value(values: tuple[Any, ...], layout: StructLayout) -> ShareValue:
    """A ShareValue from a decoded ShareSnapshotValue / ShareUpdateValue struct."""
    s = value_slots(layout)
    f, la, st, c = s.first_offset, s.last_offset, s.delivery_state, s.delivery_count
    return ShareValue(
        s.is_snapshot,
        values[s.snapshot_epoch],
        None if s.state_epoch < 0 else values[s.state_epoch],
        values[s.leader_epoch],
        values[s.start_offset],
        -1 if s.delivery_complete_count < 0 else values[s.delivery_complete_count],
        None if s.create_timestamp < 0 else values[s.create_timestamp],
        None if s.write_timestamp < 0 else values[s.write_timestamp],
        tuple([StateBatch(b[f], b[la], b[st], b[c]) for b in values[s.batches]]),
    )
