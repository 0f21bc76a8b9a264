"""Pure-Python reader and writer for compiled message layouts.

This is the reference codec: `sharestate._native` implements the same reading rules in C
and must give identical tuples (a property test holds them together).
"""

from __future__ import annotations

import base64
import struct
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from sharestate import native
from sharestate.records.spec import Kind, Slot, StructLayout

if TYPE_CHECKING:
    from typing_extensions import CapsuleType

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")
_FIXED = {Kind.INT8: _I8, Kind.INT16: _I16, Kind.UINT16: _U16, Kind.INT32: _I32,
          Kind.INT64: _I64, Kind.FLOAT64: _F64}


class DecodeError(ValueError):
    """Bytes that do not match the layout; `position` is where reading failed."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


def uuid_to_str(raw: bytes) -> str:
    """16 bytes -> Kafka's `Uuid.toString()` (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(raw)[:22].decode("ascii")


def uuid_from_str(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {text!r}")
    return raw


class _Reader:
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int, end: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end

    def need(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise DecodeError(f"needs {n} bytes, {self.end - pos} left", pos)
        self.pos = pos + n
        return pos

    def fixed(self, codec: struct.Struct) -> Any:
        return codec.unpack_from(self.data, self.need(codec.size))[0]

    def uvarint(self) -> int:
        value = 0
        shift = 0
        start = self.pos
        while True:
            if self.pos >= self.end:
                raise DecodeError("truncated varint", start)
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise DecodeError("varint longer than 5 bytes", start)

    def length(self, flexible: bool, wide: bool) -> int:
        """A string/bytes/array length; -1 means null."""
        if flexible:
            return self.uvarint() - 1
        return int(self.fixed(_I32 if wide else _I16))


class SlotProgram(NamedTuple):
    """A `Slot` as `sharestate._native.compile` reads it (by position: the `SLOT_PROGRAM_*`
    constants of csrc/native.h); `sub` is the struct of a STRUCT, the element of an ARRAY."""

    position: int
    """Where the field's value goes in the decoded tuple (`Slot.index`)."""
    kind: int
    nullable: bool
    flexible: bool
    sub: StructProgram | SlotProgram | None
    name: str


class StructProgram(NamedTuple):
    """A `StructLayout` as `sharestate._native.compile` reads it (the `STRUCT_PROGRAM_*`
    constants of csrc/native.h); `tagged` is ((tag, slot), ...) sorted by tag."""

    flexible: bool
    width: int
    defaults: tuple[Any, ...]
    regular: tuple[SlotProgram, ...]
    tagged: tuple[tuple[int, SlotProgram], ...]
    names: tuple[str, ...]


def _slot_program(slot: Slot) -> SlotProgram:
    sub: StructProgram | SlotProgram | None = None
    if slot.struct is not None:
        sub = _struct_program(slot.struct)
    elif slot.element is not None:
        sub = _slot_program(slot.element)
    return SlotProgram(slot.index, int(slot.kind), slot.nullable, slot.flexible, sub,
                       slot.name)


def _struct_program(layout: StructLayout) -> StructProgram:
    """`layout` as the C extension compiles it."""
    return StructProgram(layout.flexible, layout.width, layout.defaults,
                         tuple(_slot_program(s) for s in layout.regular),
                         tuple((tag, _slot_program(s)) for tag, s in layout.tagged),
                         layout.names)


@cache
def native_program(layout: StructLayout) -> CapsuleType:
    """The compiled native form of `layout` (cached; layouts live for the process)."""
    return native.module.compile(_struct_program(layout))


def read_struct(layout: StructLayout, data: bytes, pos: int,
                end: int) -> tuple[tuple[Any, ...], int]:
    """Read one struct of `layout` from `data[pos:end]`; returns (values, new position).

    Runs in C when `sharestate._native` is available, else in `read_struct_py`.
    """
    if not native.enabled():
        return read_struct_py(layout, data, pos, end)
    return native.module.read_struct(native_program(layout), data, pos, end)


def read_struct_py(layout: StructLayout, data: bytes, pos: int,
                   end: int) -> tuple[tuple[Any, ...], int]:
    """The pure-Python reader (the reference the native one is tested against)."""
    reader = _Reader(data, pos, end)
    values = _read_struct(layout, reader)
    return values, reader.pos


def _read_struct(layout: StructLayout, reader: _Reader) -> tuple[Any, ...]:
    values = list(layout.defaults)
    values.append(None)
    for slot in layout.regular:
        values[slot.index] = _read_slot(slot, reader)
    if layout.flexible:
        unknown: list[tuple[int, bytes]] = []
        known = dict(layout.tagged)
        count = reader.uvarint()
        last_tag = -1
        for _ in range(count):
            tag_pos = reader.pos
            tag = reader.uvarint()
            if tag <= last_tag:
                raise DecodeError(f"tagged field {tag} out of order", tag_pos)
            last_tag = tag
            size = reader.uvarint()
            start = reader.need(size)
            tagged_slot = known.get(tag)
            if tagged_slot is None:
                unknown.append((tag, bytes(reader.data[start:start + size])))
                continue
            sub = _Reader(reader.data, start, start + size)
            values[tagged_slot.index] = _read_tagged(tagged_slot, sub)
            if sub.pos != start + size:
                raise DecodeError(f"tagged field {tag} has {start + size - sub.pos} extra bytes",
                                  sub.pos)
        if unknown:
            values[layout.width] = tuple(unknown)
    return tuple(values)


def _read_tagged(slot: Slot, reader: _Reader) -> Any:
    """A tagged field's data: encoded as the field is elsewhere, except that a nullable
    struct starts with an unsigned-varint presence marker (0: null) instead of an int8.
    Kafka writes such a null explicitly (e.g. ConsumerGroupMemberMetadataValue's
    ClassicMemberMetadata of a member that never spoke the classic protocol)."""
    if slot.kind == Kind.STRUCT and slot.nullable:
        assert slot.struct is not None
        return None if reader.uvarint() == 0 else _read_struct(slot.struct, reader)
    return _read_slot(slot, reader)


def _read_slot(slot: Slot, reader: _Reader) -> Any:
    kind = slot.kind
    codec = _FIXED.get(kind)
    if codec is not None:
        return codec.unpack_from(reader.data, reader.need(codec.size))[0]
    if kind == Kind.STRING:
        n = reader.length(slot.flexible, wide=False)
        if n < 0:
            return _null(slot, reader)
        start = reader.need(n)
        return bytes(reader.data[start:start + n]).decode("utf-8", "replace")
    if kind == Kind.UUID:
        start = reader.need(16)
        return uuid_to_str(bytes(reader.data[start:start + 16]))
    if kind == Kind.BYTES:
        n = reader.length(slot.flexible, wide=True)
        if n < 0:
            return _null(slot, reader)
        start = reader.need(n)
        return bytes(reader.data[start:start + n])
    if kind == Kind.BOOL:
        return reader.data[reader.need(1)] != 0
    if kind == Kind.ARRAY:
        n = reader.length(slot.flexible, wide=True)
        if n < 0:
            return _null(slot, reader)
        if n > reader.end - reader.pos:
            raise DecodeError(f"array of {n} elements in {reader.end - reader.pos} bytes",
                              reader.pos)
        element = slot.element
        assert element is not None
        return tuple(_read_slot(element, reader) for _ in range(n))
    if kind == Kind.STRUCT:
        assert slot.struct is not None
        if slot.nullable and reader.fixed(_I8) < 0:
            return None
        return _read_struct(slot.struct, reader)
    raise DecodeError(f"unsupported kind {kind}", reader.pos)


def _null(slot: Slot, reader: _Reader) -> None:
    if not slot.nullable:
        raise DecodeError(f"null in non-nullable field {slot.name}", reader.pos)
    return None


# ---------------------------------------------------------------------------------------
# writing


def _uvarint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_struct(layout: StructLayout, values: tuple[Any, ...]) -> bytes:
    """Serialise `values` (a tuple as produced by `read_struct`) with `layout`."""
    out = bytearray()
    _write_struct(layout, values, out)
    return bytes(out)


def _write_struct(layout: StructLayout, values: tuple[Any, ...], out: bytearray) -> None:
    for slot in layout.regular:
        _write_slot(slot, values[slot.index], out)
    if not layout.flexible:
        return
    entries: list[tuple[int, bytes]] = []
    for tag, slot in layout.tagged:
        value = values[slot.index]
        if value == slot.default:
            continue
        buf = bytearray()
        if slot.kind == Kind.STRUCT and slot.nullable:
            _uvarint(0 if value is None else 1, buf)
            if value is not None:
                assert slot.struct is not None
                _write_struct(slot.struct, value, buf)
        else:
            _write_slot(slot, value, buf)
        entries.append((tag, bytes(buf)))
    unknown = values[layout.width] if len(values) > layout.width else None
    if unknown:
        entries.extend(unknown)
    entries.sort(key=lambda item: item[0])
    _uvarint(len(entries), out)
    for tag, payload in entries:
        _uvarint(tag, out)
        _uvarint(len(payload), out)
        out += payload


def _write_length(slot: Slot, n: int, wide: bool, out: bytearray) -> None:
    if slot.flexible:
        _uvarint(n + 1, out)
    else:
        out += (_I32 if wide else _I16).pack(n)


def _write_slot(slot: Slot, value: Any, out: bytearray) -> None:
    kind = slot.kind
    codec = _FIXED.get(kind)
    if codec is not None:
        out += codec.pack(value)
    elif kind == Kind.STRING:
        if value is None:
            _write_length(slot, -1, False, out)
        else:
            raw = value.encode("utf-8")
            _write_length(slot, len(raw), False, out)
            out += raw
    elif kind == Kind.UUID:
        out += uuid_from_str(value)
    elif kind == Kind.BYTES:
        if value is None:
            _write_length(slot, -1, True, out)
        else:
            _write_length(slot, len(value), True, out)
            out += value
    elif kind == Kind.BOOL:
        out.append(1 if value else 0)
    elif kind == Kind.ARRAY:
        if value is None:
            _write_length(slot, -1, True, out)
        else:
            _write_length(slot, len(value), True, out)
            element = slot.element
            assert element is not None
            for item in value:
                _write_slot(element, item, out)
    elif kind == Kind.STRUCT:
        assert slot.struct is not None
        if slot.nullable:
            if value is None:
                out += _I8.pack(-1)
                return
            out += _I8.pack(1)
        _write_struct(slot.struct, value, out)
    else:
        raise ValueError(f"unsupported kind {kind}")
