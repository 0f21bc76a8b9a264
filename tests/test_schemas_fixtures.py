"""The record schemas against Kafka-produced conformance fixtures, byte for byte.

For every data record in every `*.records.jsonl` of each fixture set, the key and value bytes
are decoded with the dialect's schemas, rendered with `to_json` and compared with the JSON that
Kafka's own generated JsonConverter printed; then they are written back with `write_struct`
and must give the original bytes. Records Kafka's serde refused (`deserializeException`,
an unknown record type) must have no record kind in the dialect either.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir, conformance_root

from sharestate.records import catalog
from sharestate.records.codec import DecodeError, read_struct, write_struct
from sharestate.records.render import UNKNOWN_TAGGED, to_json
from sharestate.records.spec import StructLayout, snake_case

# fixture set -> dialect whose schemas must decode it
FIXTURE_SETS = {"kafka-4.4-dev": "4.1", "kafka-4.0-dev": "4.0"}

MAX_REPORTED = 20


def _topic_for(file_name: str) -> str:
    if file_name.startswith("share_"):
        return catalog.SHARE_STATE_TOPIC
    if file_name.startswith("consumer_offsets_"):
        return catalog.CONSUMER_OFFSETS_TOPIC
    raise ValueError(f"cannot tell the topic of fixture file {file_name}")


def _cases() -> list[Any]:
    root = conformance_root()
    cases: list[Any] = []
    for folder, dialect_name in FIXTURE_SETS.items():
        files = sorted((root / folder).glob("*.records.jsonl")) if (root / folder).is_dir() else []
        if not files:
            # Collected anyway so the test reports a clear skip instead of vanishing.
            cases.append(pytest.param(folder, dialect_name, None, id=f"{folder}/missing"))
            continue
        cases.extend(pytest.param(folder, dialect_name, path.name, id=f"{folder}/{path.name}")
                     for path in files)
    return cases


def _snake_keys(obj: Any) -> Any:
    """The fixture's camelCase JSON with keys converted the way our renderer names fields."""
    if isinstance(obj, dict):
        return {snake_case(k): _snake_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_snake_keys(item) for item in obj]
    return obj


def _prefix(data: bytes) -> int:
    if len(data) < 2:
        raise DecodeError(f"{len(data)} bytes, too short for the int16 prefix", 0)
    value: int = struct.unpack_from(">h", data, 0)[0]
    return value


@dataclass
class _Checker:
    """Collects readable failure lines for one fixture file."""

    file_name: str
    failures: list[str]

    def fail(self, offset: Any, what: str) -> None:
        self.failures.append(f"{self.file_name} offset {offset}: {what}")

    def body(self, offset: Any, part: str, layout: StructLayout, data: bytes,
             expected: Any) -> None:
        """Decode data[2:] with layout, compare with `expected` JSON, then write it back."""
        try:
            decoded, end = read_struct(layout, data, 2, len(data))
        except DecodeError as exc:
            self.fail(offset, f"{part} {layout.name}: decode error at byte {exc.position}: {exc}")
            return
        if end != len(data):
            self.fail(offset, f"{part} {layout.name}: decoding stopped at byte {end} "
                              f"of {len(data)} ({data[end:].hex()} left over)")
        rendered = to_json(layout, decoded)
        rendered.pop(UNKNOWN_TAGGED, None)
        want = _snake_keys(expected)
        if rendered != want:
            self.fail(offset, f"{part} {layout.name}: rendered JSON differs\n"
                              f"      got:      {json.dumps(rendered, ensure_ascii=False)}\n"
                              f"      expected: {json.dumps(want, ensure_ascii=False)}")
        try:
            written = write_struct(layout, decoded)
        except (ValueError, TypeError, struct.error) as exc:
            self.fail(offset, f"{part} {layout.name}: write_struct failed: {exc!r}")
            return
        if data[:2] + written != data:
            self.fail(offset, f"{part} {layout.name}: round trip changed the bytes\n"
                              f"      original: {data.hex()}\n"
                              f"      written:  {(data[:2] + written).hex()}")


def _check_record(check: _Checker, dialect: catalog.Dialect, topic: str,
                  record: dict[str, Any]) -> bool:
    """Check one data record; returns False for control records (nothing to check)."""
    if record.get("control") or record.get("keyHex") is None:
        return False
    offset = record.get("offset")
    key_bytes = bytes.fromhex(record["keyHex"])
    try:
        type_id = _prefix(key_bytes)
    except DecodeError as exc:
        check.fail(offset, f"key: {exc}")
        return True
    kind = dialect.kind(topic, type_id)
    if "deserializeException" in record:
        if kind is not None:
            check.fail(offset, f"Kafka refused record type {type_id} "
                               f"({record['deserializeException']!r}) but dialect "
                               f"{dialect.name} maps it to {kind.name}")
        return True
    if kind is None:
        check.fail(offset, f"record type {type_id} is unknown in dialect {dialect.name}, "
                           f"Kafka decoded it as {record.get('keySchema')}")
        return True
    if record.get("recordType") not in (None, type_id):
        check.fail(offset, f"fixture recordType {record['recordType']} != key prefix {type_id}")
    if record.get("keySchema") not in (None, kind.key.name):
        check.fail(offset, f"key schema {kind.key.name}, Kafka used {record['keySchema']}")
    check.body(offset, "key", kind.key_layout(), key_bytes, record.get("key"))

    if record.get("valueHex") is None:  # tombstone
        if record.get("value") is not None:
            check.fail(offset, "no value bytes but the fixture has a value")
        return True
    value_bytes = bytes.fromhex(record["valueHex"])
    try:
        version = _prefix(value_bytes)
    except DecodeError as exc:
        check.fail(offset, f"value: {exc}")
        return True
    if record.get("valueVersion") not in (None, version):
        check.fail(offset, f"fixture valueVersion {record['valueVersion']} != prefix {version}")
    if record.get("valueSchema") not in (None, kind.value.name):
        check.fail(offset, f"value schema {kind.value.name}, Kafka used {record['valueSchema']}")
    layout = kind.value_layout(version)
    if layout is None:
        check.fail(offset, f"{kind.value.name} has no version {version} in dialect {dialect.name}")
        return True
    check.body(offset, "value", layout, value_bytes, record.get("value"))
    return True


@pytest.mark.parametrize(("folder", "dialect_name", "file_name"), _cases())
def test_records_decode_like_kafka(folder: str, dialect_name: str, file_name: str | None) -> None:
    directory = conformance_dir(folder)
    if file_name is None:
        pytest.skip(f"no *.records.jsonl files in {directory}")
    path: Path = directory / file_name
    topic = _topic_for(file_name)
    dialect = catalog.dialect(dialect_name)
    check = _Checker(file_name=f"{folder}/{file_name}", failures=[])
    checked = 0
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            try:
                checked += _check_record(check, dialect, topic, record)
            except Exception as exc:  # report the record, not just a traceback
                check.fail(record.get("offset"), f"line {number}: unexpected {exc!r}")
    assert checked > 0, f"{path} holds no data records"
    if check.failures:
        shown = "\n".join(check.failures[:MAX_REPORTED])
        more = len(check.failures) - MAX_REPORTED
        tail = f"\n... and {more} more" if more > 0 else ""
        pytest.fail(f"{len(check.failures)} mismatches in {path} "
                    f"(dialect {dialect_name}, topic {topic}):\n{shown}{tail}", pytrace=False)
