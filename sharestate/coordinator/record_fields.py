"""Named access to decoded record structs.

Decoded structs are positional tuples (see `sharestate.records.spec`). `Fields` pairs one
with its layout so replay code can read fields by their snake_case name, and can ask for a
field a schema does not have at all (older dialects) and get a default instead.
"""

from __future__ import annotations

from typing import Any

from sharestate.records.spec import ZERO_UUID, StructLayout


class Fields:
    """One decoded struct with its layout."""

    __slots__ = ("layout", "values")

    def __init__(self, layout: StructLayout, values: tuple[Any, ...]) -> None:
        self.layout = layout
        self.values = values

    def __getitem__(self, name: str) -> Any:
        return self.values[self.layout.index(name)]

    def get(self, name: str, default: Any = None) -> Any:
        """The field's value, or `default` when the schema has no such field."""
        if name not in self.layout.names:
            return default
        return self.values[self.layout.index(name)]

    def struct(self, name: str) -> Fields | None:
        """A nested struct field (None when null, absent or not in the schema)."""
        if name not in self.layout.names:
            return None
        index = self.layout.index(name)
        slot = self.layout.slots[index]
        value = self.values[index]
        if slot is None or slot.struct is None or value is None:
            return None
        return Fields(slot.struct, value)

    def items(self, name: str) -> list[Fields]:
        """The elements of an array-of-structs field (empty when null or absent)."""
        if name not in self.layout.names:
            return []
        index = self.layout.index(name)
        slot = self.layout.slots[index]
        value = self.values[index]
        if slot is None or slot.element is None or slot.element.struct is None or not value:
            return []
        element = slot.element.struct
        return [Fields(element, item) for item in value]


def optional_int(value: int) -> int | None:
    """Kafka's sentinel rule: -1 means "absent"."""
    return None if value == -1 else value


def optional_uuid(value: str) -> str | None:
    """The zero uuid means "not set"."""
    return None if value == ZERO_UUID else value
