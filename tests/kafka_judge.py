"""Kafka's own answers, parsed, and sharestate's put in the same shape for comparison.

`kafka-dump-log` (DumpLogSegments) prints each batch header and each record with its key
and value as Kafka's generated JSON converters write them (camelCase names, the record
type and version as strings, `<DELETE>` for a tombstone, `endTxnMarker` for control
records). `dump_records` reads that text; `decoded_records` reads `sharestate decode`'s
JSON lines; both become {(partition folder, offset): flat record} with the same keys.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conftest import PROJECT_ROOT

SHARESTATE = str(PROJECT_ROOT / ".venv" / "bin" / "sharestate")

_BATCH = re.compile(
    r"baseOffset: (?P<base_offset>-?\d+) lastOffset: (?P<last_offset>-?\d+) count: \d+ "
    r"baseSequence: (?P<base_sequence>-?\d+) lastSequence: -?\d+ producerId: "
    r"(?P<producer_id>-?\d+) producerEpoch: (?P<producer_epoch>-?\d+) partitionLeaderEpoch: "
    r"(?P<partition_leader_epoch>-?\d+) isTransactional: (?P<is_transactional>\w+) "
    r"isControl: (?P<is_control>\w+) .*? magic: (?P<magic>\d+) compresscodec: "
    r"(?P<compression>\w+) crc: (?P<crc>\d+) isvalid: (?P<crc_valid>\w+)")
_RECORD = re.compile(
    r"\| offset: (?P<offset>\d+) (?P<timestamp_type>CreateTime|LogAppendTime|NoTimestampType): "
    r"(?P<timestamp>-?\d+) keySize: -?\d+ valueSize: -?\d+ sequence: -?\d+ "
    r"headerKeys: \[(?P<headers>[^\]]*)\](?P<rest>.*)")
_MARKER = re.compile(r" endTxnMarker: (?P<type>\w+) coordinatorEpoch: (?P<epoch>-?\d+)")
_BATCH_INTS = ("base_offset", "last_offset", "base_sequence", "producer_id", "producer_epoch",
               "partition_leader_epoch", "magic", "crc")
Key = tuple[str, int]


def snake(name: str) -> str:
    """Kafka's camelCase JSON name as sharestate's snake_case one."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def snake_all(value: Any) -> Any:
    """Every object key of a JSON value in snake_case."""
    if isinstance(value, dict):
        return {snake(key): snake_all(item) for key, item in value.items()}
    if isinstance(value, list):
        return [snake_all(item) for item in value]
    return value


def _batch(match: re.Match[str]) -> dict[str, Any]:
    batch: dict[str, Any] = {name: int(match[name]) for name in _BATCH_INTS}
    for flag in ("is_transactional", "is_control", "crc_valid"):
        batch[flag] = match[flag] == "true"
    batch["compression"] = match["compression"]
    return batch


def _record(match: re.Match[str], batch: dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = {
        "offset": int(match["offset"]), "timestamp": int(match["timestamp"]),
        "timestamp_type": match["timestamp_type"], "headers": match["headers"],
        "batch": batch, "record_type_id": None, "key": None, "value_version": None,
        "value": None, "control": None}
    rest = match["rest"]
    if marker := _MARKER.fullmatch(rest):
        record["control"] = {"type": marker["type"], "coordinator_epoch": int(marker["epoch"])}
        return record
    if not rest.startswith(" key: "):
        raise ValueError(f"unexpected dump line tail {rest!r}")
    decoder = json.JSONDecoder()
    key, end = decoder.raw_decode(rest, len(" key: "))
    record["record_type_id"] = int(key["type"])
    record["key"] = snake_all(key["data"])
    payload = rest[end:]
    if not payload.startswith(" payload: "):
        raise ValueError(f"no payload after the key in {rest!r}")
    payload = payload[len(" payload: "):]
    if payload != "<DELETE>":
        value = json.loads(payload)
        # Kafka 4.0's share-state formatter labels the value's version "type".
        record["value_version"] = int(value["version"] if "version" in value else value["type"])
        record["value"] = snake_all(value["data"])
    return record


def dump_records(text: str) -> dict[Key, dict[str, Any]]:
    """DumpLogSegments' output (one or more files) as records keyed by (folder, offset)."""
    records: dict[Key, dict[str, Any]] = {}
    folder, batch = "", None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            folder = Path(line[len("Dumping "):]).parent.name
        elif line.startswith("| offset: "):
            match = _RECORD.fullmatch(line)
            if match is None or batch is None:
                raise ValueError(f"unparsed record line {line!r}")
            record = _record(match, batch)
            records[(folder, record["offset"])] = record
        elif line.startswith("baseOffset: "):
            found = _BATCH.match(line)
            if found is None:
                raise ValueError(f"unparsed batch line {line!r}")
            batch = _batch(found)
    return records


def sharestate_json(*args: str) -> list[dict[str, Any]]:
    """A sharestate command's JSON lines (exit 0 or 1: findings are allowed, not errors)."""
    done = subprocess.run([SHARESTATE, *args], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def decoded_records(files: Iterable[Path]) -> dict[Key, dict[str, Any]]:
    """`sharestate decode` of the files, in the shape of `dump_records`."""
    records: dict[Key, dict[str, Any]] = {}
    for file in files:
        done = subprocess.run([SHARESTATE, "decode", str(file)], capture_output=True,
                              text=True, check=False)
        assert done.returncode in (0, 1), done.stderr
        for line in done.stdout.splitlines():
            row = json.loads(line)
            assert row["error"] is None, row
            batch = {name: row["batch"][name] for name in (*_BATCH_INTS, "is_transactional",
                                                             "is_control", "crc_valid",
                                                             "compression")}
            records[(file.parent.name, row["offset"])] = {
                "offset": row["offset"], "timestamp": row["timestamp"],
                "timestamp_type": row["timestamp_type"], "headers": "",
                "batch": batch, "record_type_id": row["record_type_id"], "key": row["key"],
                "value_version": row["value_version"], "value": row["value"],
                "control": row["control"]}
    return records


def differences(ours: dict[Key, dict[str, Any]], kafkas: dict[Key, dict[str, Any]]
                ) -> list[str]:
    """Every field where the two disagree, as readable lines (empty when they agree)."""
    lines = [f"{key}: only in Kafka's dump" for key in sorted(kafkas.keys() - ours.keys())]
    lines += [f"{key}: only in sharestate's" for key in sorted(ours.keys() - kafkas.keys())]
    for key in sorted(ours.keys() & kafkas.keys()):
        mine, theirs = ours[key], kafkas[key]
        for name in theirs:
            if mine.get(name) != theirs[name]:
                lines.append(f"{key} {name}: sharestate {mine.get(name)!r} "
                             f"!= Kafka {theirs[name]!r}")
    return lines
