"""Kafka message-spec schemas: load the JSON files and compile them per version.

A schema file is in Kafka's message-spec format (name, validVersions, flexibleVersions,
fields with versions / nullableVersions / taggedVersions / tag / default, commonStructs).
`compile_struct` turns one schema at one version into a `StructLayout`: a flat, ordered
description of exactly the bytes that version reads and writes. Both codecs (the pure-Python
one in `codec.py` and the native one) interpret these layouts, so they agree by construction.

Decoded structs are tuples with one slot per field of the schema (all versions, in file
order) plus a final slot holding unknown tagged fields (`None` or a tuple of (tag, bytes)).
Fields absent at a version hold their default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

PRIMITIVES = ("bool", "int8", "int16", "uint16", "int32", "int64", "float64", "uuid", "string",
              "bytes")

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"


class Kind(IntEnum):
    """Wire kinds; the numbers are shared with the native codec."""

    BOOL = 0
    INT8 = 1
    INT16 = 2
    UINT16 = 3
    INT32 = 4
    INT64 = 5
    FLOAT64 = 6
    UUID = 7
    STRING = 8
    BYTES = 9
    STRUCT = 10
    ARRAY = 11


_KIND_OF = {name: Kind[name.upper()] for name in PRIMITIVES}


class SchemaError(ValueError):
    """A schema file that does not follow the message-spec format."""


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `hi` is None for an open range ("3+")."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(text: str | None) -> Versions | None:
        if text is None or text == "none":
            return None
        text = text.strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return Versions(int(lo), int(hi))
        return Versions(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version and (
            self.hi is None or version <= self.hi)


def _contains(rng: Versions | None, version: int) -> bool:
    return rng is not None and version in rng


@dataclass(frozen=True)
class FieldSpec:
    """One field of a schema, as written in the file."""

    name: str
    type: str
    versions: Versions | None
    nullable: Versions | None
    tagged: Versions | None
    tag: int | None
    default: Any
    fields: tuple[FieldSpec, ...] = ()
    flexible_override: Versions | None = None

    @property
    def element_type(self) -> str | None:
        return self.type[2:] if self.type.startswith("[]") else None

    @property
    def snake(self) -> str:
        return snake_case(self.name)


@dataclass(frozen=True, eq=False)
class Schema:
    """A whole schema file."""

    name: str
    type: str
    api_key: int | None
    valid: Versions
    flexible: Versions | None
    fields: tuple[FieldSpec, ...]
    common: dict[str, tuple[FieldSpec, ...]] = field(default_factory=dict)

    def supports(self, version: int) -> bool:
        return version in self.valid

    def is_flexible(self, version: int) -> bool:
        return _contains(self.flexible, version)


@dataclass(frozen=True, eq=False)
class Slot:
    """How one field is read and written at one version.

    `kind` is the wire kind; for ARRAY, `element` describes the elements (a Slot whose
    `struct` is set for arrays of structs); for STRUCT, `struct` is the nested layout.
    """

    index: int
    name: str
    kind: Kind
    nullable: bool
    default: Any
    struct: StructLayout | None = None
    element: Slot | None = None
    flexible: bool = False


@dataclass(frozen=True, eq=False)
class StructLayout:
    """A struct at one version: the regular slots in wire order and the tagged ones."""

    name: str
    flexible: bool
    width: int
    names: tuple[str, ...]
    regular: tuple[Slot, ...]
    tagged: tuple[tuple[int, Slot], ...]
    defaults: tuple[Any, ...]
    present: tuple[bool, ...]
    tagged_indexes: frozenset[int]
    slots: tuple[Slot | None, ...]

    def index(self, name: str) -> int:
        return self.names.index(name)


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """`GroupId` -> `group_id`, `currentStateTimestamp` -> `current_state_timestamp`."""
    return _CAMEL.sub(r"_\1", name).lower()


def _parse_field(raw: dict[str, Any]) -> FieldSpec:
    try:
        name = raw["name"]
        ftype = raw["type"]
    except KeyError as exc:
        raise SchemaError(f"field without {exc.args[0]}: {raw}") from None
    tag = raw.get("tag")
    return FieldSpec(
        name=name,
        type=ftype,
        versions=Versions.parse(raw.get("versions")),
        nullable=Versions.parse(raw.get("nullableVersions")),
        tagged=Versions.parse(raw.get("taggedVersions")),
        tag=int(tag) if tag is not None else None,
        default=raw.get("default"),
        fields=tuple(_parse_field(f) for f in raw.get("fields", ())),
        flexible_override=Versions.parse(raw.get("flexibleVersions")),
    )


def parse_schema(text: str) -> Schema:
    """Parse a message-spec JSON document (`//` comment lines are allowed)."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("//")]
    raw = json.loads("\n".join(lines))
    valid = Versions.parse(raw.get("validVersions"))
    if valid is None:
        raise SchemaError(f"{raw.get('name')}: validVersions missing")
    common = {c["name"]: tuple(_parse_field(f) for f in c.get("fields", ()))
              for c in raw.get("commonStructs", ())}
    return Schema(
        name=raw["name"],
        type=raw.get("type", "data"),
        api_key=raw.get("apiKey"),
        valid=valid,
        flexible=Versions.parse(raw.get("flexibleVersions")),
        fields=tuple(_parse_field(f) for f in raw["fields"]),
        common=common,
    )


def _default_for(spec: FieldSpec, kind: Kind) -> Any:
    raw = spec.default
    if kind in (Kind.ARRAY, Kind.STRUCT):
        if raw is None and spec.nullable is not None:
            return None
        if raw == "null":
            return None
        return () if kind == Kind.ARRAY else None
    if raw == "null":
        return None
    if kind == Kind.BOOL:
        return raw in (True, "true")
    if kind in (Kind.INT8, Kind.INT16, Kind.UINT16, Kind.INT32, Kind.INT64):
        if raw is None or raw == "":
            return 0
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if kind == Kind.FLOAT64:
        return float(raw) if raw is not None else 0.0
    if kind == Kind.UUID:
        return ZERO_UUID
    if kind == Kind.STRING:
        return "" if raw is None else str(raw)
    if kind == Kind.BYTES:
        return b""
    raise SchemaError(f"no default for kind {kind}")


def compile_struct(schema: Schema, version: int) -> StructLayout:
    """Compile `schema` at `version` into a layout both codecs interpret."""
    if not schema.supports(version):
        raise SchemaError(f"{schema.name} has no version {version}")
    return _compile_fields(schema.name, schema.fields, schema, version,
                           schema.is_flexible(version))


def _compile_fields(name: str, specs: tuple[FieldSpec, ...], schema: Schema, version: int,
                    flexible: bool) -> StructLayout:
    regular: list[Slot] = []
    tagged: list[tuple[int, Slot]] = []
    defaults: list[Any] = []
    present: list[bool] = []
    slots: list[Slot | None] = []
    for index, spec in enumerate(specs):
        slot = _compile_slot(index, spec, schema, version, flexible)
        defaults.append(slot.default)
        in_version = _contains(spec.versions, version)
        present.append(in_version)
        slots.append(slot if in_version else None)
        if not in_version:
            continue
        if _contains(spec.tagged, version):
            if not flexible or spec.tag is None:
                raise SchemaError(f"{name}.{spec.name}: tagged field outside a flexible version")
            tagged.append((spec.tag, slot))
        else:
            regular.append(slot)
    tagged.sort(key=lambda item: item[0])
    return StructLayout(
        name=name,
        flexible=flexible,
        width=len(specs),
        names=tuple(spec.snake for spec in specs),
        regular=tuple(regular),
        tagged=tuple(tagged),
        defaults=tuple(defaults),
        present=tuple(present),
        tagged_indexes=frozenset(slot.index for _, slot in tagged),
        slots=tuple(slots),
    )


def _compile_slot(index: int, spec: FieldSpec, schema: Schema, version: int,
                  flexible: bool) -> Slot:
    nullable = _contains(spec.nullable, version)
    slot_flexible = flexible
    if spec.flexible_override is not None:
        slot_flexible = version in spec.flexible_override
    element_type = spec.element_type
    if element_type is not None:
        element = _compile_element(spec, element_type, schema, version, flexible)
        kind = Kind.ARRAY
        return Slot(index, spec.snake, kind, nullable, _default_for(spec, kind),
                    element=element, flexible=slot_flexible)
    if spec.type in _KIND_OF:
        kind = _KIND_OF[spec.type]
        return Slot(index, spec.snake, kind, nullable, _default_for(spec, kind),
                    flexible=slot_flexible)
    nested = _struct_fields(spec, spec.type, schema)
    layout = _compile_fields(spec.type, nested, schema, version, flexible)
    default = _default_for(spec, Kind.STRUCT)
    if _contains(spec.tagged, version):
        # Kafka's generated code reads an absent tagged struct as an empty struct, whatever
        # the schema's default, and writes the tag whenever the value differs from that
        # (so a null is written, and printed, explicitly).
        default = (*layout.defaults, None)
    return Slot(index, spec.snake, Kind.STRUCT, nullable, default, struct=layout,
                flexible=slot_flexible)


def _compile_element(spec: FieldSpec, element_type: str, schema: Schema, version: int,
                     flexible: bool) -> Slot:
    if element_type in _KIND_OF:
        kind = _KIND_OF[element_type]
        return Slot(0, spec.snake, kind, False, None, flexible=flexible)
    nested = _struct_fields(spec, element_type, schema)
    layout = _compile_fields(element_type, nested, schema, version, flexible)
    return Slot(0, spec.snake, Kind.STRUCT, False, None, struct=layout, flexible=flexible)


def _struct_fields(spec: FieldSpec, type_name: str, schema: Schema) -> tuple[FieldSpec, ...]:
    if spec.fields:
        return spec.fields
    if type_name in schema.common:
        return schema.common[type_name]
    raise SchemaError(f"{schema.name}.{spec.name}: unknown type {type_name}")
