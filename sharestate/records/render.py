"""Decoded tuples <-> JSON-ready dicts, printed the way Kafka's JsonConverter prints them.

Fields that do not exist at the record's version are left out, and so are tagged fields
holding their default (Kafka writes and prints them only when they differ). Unknown tagged
fields are kept under `_unknown_tagged_fields` as `[{"tag": n, "data": base64}]`.
Uuids are already strings (Kafka's base64url form); bytes become standard base64.
"""

from __future__ import annotations

import base64
from typing import Any

from sharestate.records.spec import Kind, Slot, StructLayout

UNKNOWN_TAGGED = "_unknown_tagged_fields"


def to_json(layout: StructLayout, values: tuple[Any, ...]) -> dict[str, Any]:
    """Render a decoded struct."""
    out: dict[str, Any] = {}
    for index, name in enumerate(layout.names):
        if not layout.present[index]:
            continue
        value = values[index]
        if index in layout.tagged_indexes and value == layout.defaults[index]:
            continue
        slot = layout.slots[index]
        assert slot is not None
        out[name] = _value_json(slot, value)
    unknown = values[layout.width]
    if unknown:
        out[UNKNOWN_TAGGED] = [{"tag": tag, "data": base64.b64encode(data).decode("ascii")}
                               for tag, data in unknown]
    return out


def _value_json(slot: Slot, value: Any) -> Any:
    if value is None:
        return None
    kind = slot.kind
    if kind == Kind.BYTES:
        return base64.b64encode(value).decode("ascii")
    if kind == Kind.STRUCT:
        assert slot.struct is not None
        return to_json(slot.struct, value)
    if kind == Kind.ARRAY:
        element = slot.element
        assert element is not None
        return [_value_json(element, item) for item in value]
    return value


def from_json(layout: StructLayout, obj: dict[str, Any]) -> tuple[Any, ...]:
    """The inverse of `to_json`: missing fields take their defaults."""
    values = list(layout.defaults)
    for slot in (*layout.regular, *(s for _, s in layout.tagged)):
        if slot.name in obj:
            values[slot.index] = _value_from_json(slot, obj[slot.name])
    unknown = obj.get(UNKNOWN_TAGGED)
    values.append(tuple((u["tag"], base64.b64decode(u["data"])) for u in unknown)
                  if unknown else None)
    return tuple(values)


def _value_from_json(slot: Slot, value: Any) -> Any:
    if value is None:
        return None
    kind = slot.kind
    if kind == Kind.BYTES:
        return base64.b64decode(value)
    if kind == Kind.STRUCT:
        assert slot.struct is not None
        return from_json(slot.struct, value)
    if kind == Kind.ARRAY:
        element = slot.element
        assert element is not None
        return tuple(_value_from_json(element, item) for item in value)
    return value
