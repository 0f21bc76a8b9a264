"""Decode one record's key and value bytes with a dialect's schemas.

Errors are values: a record that cannot be decoded gets a `RecordError` naming what went
wrong, and whatever could be decoded (usually the key) is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any, NamedTuple

from sharestate import native
from sharestate.log import RawRecord
from sharestate.records.catalog import Dialect, RecordKind
from sharestate.records.codec import DecodeError, native_program, read_struct, write_struct

if TYPE_CHECKING:
    from typing_extensions import CapsuleType


@dataclass(frozen=True, slots=True)
class RecordError:
    """Why a record (or part of one) could not be decoded."""

    kind: str
    message: str


class KeyValue(NamedTuple):
    """The decoded key and value of one data record (value None: tombstone or error)."""

    type_id: int | None
    kind: RecordKind | None
    key: tuple[Any, ...] | None
    value_version: int | None
    value: tuple[Any, ...] | None
    error: RecordError | None

    @property
    def record_type(self) -> str | None:
        return self.kind.name if self.kind else None

    @property
    def is_tombstone(self) -> bool:
        return self.kind is not None and self.error is None and self.value_version is None


def _prefix(data: bytes) -> int:
    return int.from_bytes(data[:2], "big", signed=True)


def decode_key_value(dialect: Dialect, topic: str, key: bytes | None,
                     value: bytes | None) -> KeyValue:
    """Decode `key`/`value` of a `topic` record; never raises for bad bytes."""
    if key is None:
        return KeyValue(None, None, None, None, None,
                        RecordError("null_key", "coordinator records always have a key"))
    if len(key) < 2:
        return KeyValue(None, None, None, None, None,
                        RecordError("bad_key", f"key of {len(key)} bytes has no record type"))
    type_id = _prefix(key)
    kind = dialect.kind(topic, type_id)
    if kind is None:
        return KeyValue(type_id, None, None, None, None, RecordError(
            "unknown_record_type",
            f"record type {type_id} is unknown to {topic} in dialect {dialect.name}"))
    layout = kind.key_layout()
    try:
        key_values, end = read_struct(layout, key, 2, len(key))
    except DecodeError as exc:
        return KeyValue(type_id, kind, None, None, None,
                        RecordError("bad_key", f"{kind.key.name} at byte {exc.position}: {exc}"))
    if end != len(key):
        return KeyValue(type_id, kind, key_values, None, None, RecordError(
            "trailing_bytes", f"{kind.key.name} leaves {len(key) - end} bytes unread"))
    if value is None:
        return KeyValue(type_id, kind, key_values, None, None, None)
    if len(value) < 2:
        return KeyValue(type_id, kind, key_values, None, None, RecordError(
            "bad_value", f"value of {len(value)} bytes has no version"))
    version = _prefix(value)
    value_layout = kind.value_layout(version)
    if value_layout is None:
        return KeyValue(type_id, kind, key_values, version, None, RecordError(
            "unknown_value_version",
            f"{kind.value.name} has no version {version} in dialect {dialect.name}"))
    try:
        decoded, end = read_struct(value_layout, value, 2, len(value))
    except DecodeError as exc:
        return KeyValue(type_id, kind, key_values, version, None, RecordError(
            "bad_value", f"{kind.value.name} v{version} at byte {exc.position}: {exc}"))
    if end != len(value):
        return KeyValue(type_id, kind, key_values, version, decoded, RecordError(
            "trailing_bytes",
            f"{kind.value.name} v{version} leaves {len(value) - end} bytes unread"))
    return KeyValue(type_id, kind, key_values, version, decoded, None)


def decode_key_values(dialect: Dialect, topic: str, records: list[RawRecord]) -> list[KeyValue]:
    """`decode_key_value` for every record of a batch (in C when the extension is built)."""
    if not native.enabled():
        return [decode_key_value(dialect, topic, r.key, r.value) for r in records]
    return native.module.decode_key_values(
        records, _native_table(dialect, topic), partial(decode_key_value, dialect, topic))


class KindPrograms(NamedTuple):
    """A record kind with its compiled key and value layouts, as
    `sharestate._native.decode_key_values` reads it (the `KIND_PROGRAMS_*` constants of
    csrc/native.h)."""

    kind: RecordKind
    key: CapsuleType
    values: dict[int, CapsuleType]
    """By value version."""


@cache
def _native_table(dialect: Dialect, topic: str) -> dict[int, KindPrograms]:
    table: dict[int, KindPrograms] = {}
    for type_id, kind in dialect.topics.get(topic, {}).items():
        valid = kind.value.valid
        versions = range(valid.lo, (valid.hi if valid.hi is not None else valid.lo) + 1)
        table[type_id] = KindPrograms(kind, native_program(kind.key_layout()),
                                      {v: native_program(layout) for v in versions
                                       if (layout := kind.value_layout(v)) is not None})
    return table


def encode_key_value(kind: RecordKind, key: tuple[Any, ...], value_version: int | None,
                     value: tuple[Any, ...] | None) -> tuple[bytes, bytes | None]:
    """The record key and value bytes for decoded tuples (value None: a tombstone)."""
    key_bytes = kind.type_id.to_bytes(2, "big", signed=True) + write_struct(kind.key_layout(), key)
    if value is None:
        return key_bytes, None
    if value_version is None:
        raise ValueError(f"{kind.value.name}: a value needs a version")
    layout = kind.value_layout(value_version)
    if layout is None:
        raise ValueError(f"{kind.value.name} has no version {value_version}")
    return key_bytes, value_version.to_bytes(2, "big", signed=True) + write_struct(layout, value)
