"""Which schema decodes which record: dialects, record types and compiled layouts.

A dialect is a set of schemas, named after the Kafka release line whose on-disk format it
describes. Each lives in `schemas/records/<dir>/`: a `dialect.json` manifest (record type id
-> record name, per topic) and the schema files `<Name>Key.json` / `<Name>Value.json`.
A dialect may extend another: files and type ids it does not define come from its parent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from sharestate.records.spec import Schema, StructLayout, compile_struct, parse_schema

SHARE_STATE_TOPIC = "__share_group_state"
CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TOPICS = (SHARE_STATE_TOPIC, CONSUMER_OFFSETS_TOPIC)

DEFAULT_DIALECT = "4.1"


@dataclass(frozen=True)
class RecordKind:
    """One record type of one topic in one dialect."""

    type_id: int
    name: str
    key: Schema
    value: Schema

    def key_layout(self) -> StructLayout:
        return _layout(self.key, 0)

    def value_layout(self, version: int) -> StructLayout | None:
        """The value layout at `version`, or None when the schema has no such version."""
        if not self.value.supports(version):
            return None
        return _layout(self.value, version)


@dataclass(frozen=True, eq=False)
class Dialect:
    """A named schema set."""

    name: str
    directory: str
    description: str
    parent: Dialect | None
    topics: dict[str, dict[int, RecordKind]]

    def kind(self, topic: str, type_id: int) -> RecordKind | None:
        return self.topics.get(topic, {}).get(type_id)


@cache
def _layout(schema: Schema, version: int) -> StructLayout:
    return compile_struct(schema, version)


def _root() -> Any:
    return resources.files("sharestate.schemas").joinpath("records")


def _read_manifest(directory: str) -> dict[str, Any]:
    text = _root().joinpath(directory, "dialect.json").read_text(encoding="utf-8")
    manifest: dict[str, Any] = json.loads(text)
    return manifest


@cache
def _schema_file(directory: str, file_name: str) -> Schema:
    """Find `file_name` in `directory` or, failing that, in its ancestors."""
    here = _root().joinpath(directory, file_name)
    if here.is_file():
        return parse_schema(here.read_text(encoding="utf-8"))
    parent = _read_manifest(directory).get("extends")
    if parent is None:
        raise FileNotFoundError(f"schema {file_name} not found for dialect directory {directory}")
    return _schema_file(_directory_of(parent), file_name)


@cache
def _directories() -> dict[str, str]:
    found: dict[str, str] = {}
    for entry in _root().iterdir():
        if entry.is_dir() and entry.joinpath("dialect.json").is_file():
            found[_read_manifest(entry.name)["name"]] = entry.name
    return found


def _directory_of(name: str) -> str:
    try:
        return _directories()[name]
    except KeyError:
        raise KeyError(f"unknown dialect {name!r}; known: {', '.join(dialect_names())}") from None


def dialect_names() -> list[str]:
    """Every dialect, newest first."""
    return sorted(_directories(), key=lambda n: tuple(int(p) for p in n.split(".")), reverse=True)


@cache
def dialect(name: str = DEFAULT_DIALECT) -> Dialect:
    """Load a dialect by name (e.g. "4.1" or "4.0")."""
    directory = _directory_of(name)
    manifest = _read_manifest(directory)
    parent = dialect(manifest["extends"]) if manifest.get("extends") else None
    names: dict[str, dict[int, str]] = {
        topic: {k.type_id: k.name for k in parent.topics.get(topic, {}).values()} if parent else {}
        for topic in TOPICS}
    for topic, entries in manifest.get("topics", {}).items():
        for type_id, record_name in entries.items():
            if record_name is None:
                names[topic].pop(int(type_id), None)
            else:
                names[topic][int(type_id)] = record_name
    topics = {
        topic: {type_id: RecordKind(type_id=type_id, name=record_name,
                                    key=_schema_file(directory, f"{record_name}Key.json"),
                                    value=_schema_file(directory, f"{record_name}Value.json"))
                for type_id, record_name in sorted(entries.items())}
        for topic, entries in names.items()}
    return Dialect(name=name, directory=directory, description=manifest.get("description", ""),
                   parent=parent, topics=topics)
