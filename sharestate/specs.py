"""Specifications of the documented schemas: `schemas/tables/*.json` (the Delta tables) and
`schemas/state/*.json` (the tables of a replay's snapshot), as Arrow schemas.

Each file documents one table: its layer, grain, partition and clustering columns, and
every column with its type (Spark SQL type syntax: string, int, bigint, boolean, binary,
double, array<...>, struct<name:type,...>), nullability and meaning. Pure pyarrow, so the
core reads them too (`sharestate.tables.spec` adds the Spark forms).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import pyarrow as pa

_SCALARS = {
    "string": pa.string(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "double": pa.float64(),
}


@dataclass(frozen=True)
class Column:
    """One documented column."""

    name: str
    type: str
    nullable: bool
    description: str


@dataclass(frozen=True)
class Spec:
    """One documented table."""

    name: str
    layer: str
    description: str
    grain: str
    partition_by: tuple[str, ...]
    cluster_by: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable)
                          for c in self.columns])


def arrow_type(text: str) -> pa.DataType:
    """Spark SQL type syntax -> Arrow type."""
    parsed, rest = _parse(text.replace(" ", ""))
    if rest:
        raise ValueError(f"unexpected {rest!r} in type {text!r}")
    return parsed


def _parse(text: str) -> tuple[pa.DataType, str]:
    for name, arrow in _SCALARS.items():
        if text.startswith(name) and not text[len(name):len(name) + 1].isalnum():
            return arrow, text[len(name):]
    if text.startswith("array<"):
        element, rest = _parse(text[len("array<"):])
        return pa.list_(element), _expect(rest, ">")
    if text.startswith("struct<"):
        rest = text[len("struct<"):]
        fields = []
        while True:
            name, _, rest = rest.partition(":")
            field_type, rest = _parse(rest)
            fields.append(pa.field(name, field_type))
            if rest.startswith(","):
                rest = rest[1:]
                continue
            return pa.struct(fields), _expect(rest, ">")
    raise ValueError(f"unknown type at {text!r}")


def _expect(text: str, token: str) -> str:
    if not text.startswith(token):
        raise ValueError(f"expected {token!r} at {text!r}")
    return text[len(token):]


def load(folder: str, name: str) -> Spec:
    """The spec in `schemas/<folder>/<name>.json`."""
    path = resources.files("sharestate.schemas").joinpath(folder, f"{name}.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    return Spec(
        name=raw["name"], layer=raw["layer"], description=raw["description"], grain=raw["grain"],
        partition_by=tuple(raw["partition_by"]), cluster_by=tuple(raw["cluster_by"]),
        columns=tuple(Column(c["name"], c["type"], c["nullable"], c["description"])
                      for c in raw["columns"]))


def names(folder: str) -> tuple[str, ...]:
    """Every spec in `schemas/<folder>/`."""
    directory = resources.files("sharestate.schemas").joinpath(folder)
    return tuple(sorted(p.name.removesuffix(".json") for p in directory.iterdir()
                        if p.name.endswith(".json")))
