"""Control records: the key (int16 version, int16 type) and the EndTxnMarker value.

Kafka parses keys with a newer version the same way and EndTxnMarker values with a newer
version as the highest known one (version 0: int16 version, int32 coordinatorEpoch); a
negative version or a short key/value is corrupt. Transaction markers take their producer
id and epoch from the batch header.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sharestate.log.batch import BatchHeader, LogFinding, RawRecord

ABORT = 0
COMMIT = 1
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
"""Control record type ids and the names Kafka gives them."""

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A parsed control record; `coordinator_epoch`/`value_version` only for COMMIT/ABORT."""

    type: str
    type_id: int
    coordinator_epoch: int | None
    key_version: int
    value_version: int | None


def control_key(type_id: int, version: int = 0) -> bytes:
    """The key bytes of a control record."""
    return _KEY.pack(version, type_id)


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    """The value bytes of a COMMIT/ABORT marker."""
    return _MARKER.pack(version, coordinator_epoch)


def parse_control(record: RawRecord, header: BatchHeader) -> ControlRecord | LogFinding:
    """Interpret a record of a control batch; problems come back as a `LogFinding`."""
    key = record.key

    def bad(kind: str, message: str, raw: bytes | None) -> LogFinding:
        return LogFinding.of(kind, f"control record at offset {record.offset}: {message}",
                          header.position, record.offset, raw or b"")

    if key is None or len(key) < _KEY.size:
        return bad("bad_control_record",
                   f"key must have at least 4 bytes, found {0 if key is None else len(key)}",
                   key)
    key_version, type_id = _KEY.unpack_from(key)
    if key_version < 0:
        return bad("bad_control_record", f"negative key version {key_version}", key)
    name = CONTROL_TYPES.get(type_id)
    if name is None:
        return bad("unknown_control_type", f"unknown control type {type_id}", key)
    if type_id not in (ABORT, COMMIT):
        return ControlRecord(name, type_id, None, key_version, None)
    value = record.value
    if value is None or len(value) < _MARKER.size:
        return bad("bad_control_record",
                   f"{name} marker value must have at least 6 bytes, found "
                   f"{'null' if value is None else len(value)}", value)
    value_version, coordinator_epoch = _MARKER.unpack_from(value)
    if value_version < 0:
        return bad("bad_control_record", f"negative marker value version {value_version}",
                   value)
    return ControlRecord(name, type_id, coordinator_epoch, key_version, value_version)
