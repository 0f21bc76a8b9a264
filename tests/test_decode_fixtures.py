"""`sharestate decode` against every Kafka fixture: the JSON-lines contract, field by field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_root

from sharestate.app.cli import main
from sharestate.records.spec import snake_case

CONTRACT_FIELDS = ["topic", "partition", "offset", "timestamp", "timestamp_type", "batch",
                   "record_type", "record_type_id", "key", "value_version", "value", "control",
                   "error"]
BATCH_FIELDS = {"base_offset": "baseOffset", "last_offset": "lastOffset",
                "partition_leader_epoch": "partitionLeaderEpoch", "magic": "magic",
                "crc": "crc", "compression": "compression",
                "is_transactional": "isTransactional", "is_control": "isControl",
                "producer_id": "producerId", "producer_epoch": "producerEpoch",
                "base_sequence": "baseSequence"}


def _segments() -> list[Path]:
    root = conformance_root()
    return sorted(root.glob("*/*.log")) if root.is_dir() else []


def _snake(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {snake_case(k): _snake(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_snake(v) for v in obj]
    return obj


def _decode(path: Path, tmp_path: Path, *extra: str) -> tuple[int, list[dict[str, Any]]]:
    out = tmp_path / "out.jsonl"
    status = main(["decode", str(path), "--output", str(out), *extra])
    return status, [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("segment", _segments(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_decode_matches_kafka(segment: Path, tmp_path: Path) -> None:
    expected = [json.loads(line) for line in
                segment.with_suffix(".records.jsonl").read_text(encoding="utf-8").splitlines()]
    status, rows = _decode(segment, tmp_path)
    assert len(rows) == len(expected)
    topic = "__consumer_offsets" if segment.name.startswith("consumer_offsets") \
        else "__share_group_state"
    refused = 0
    for row, want in zip(rows, expected, strict=True):
        where = f"{segment.name} offset {want['offset']}"
        assert list(row) == CONTRACT_FIELDS, where
        assert row["topic"] == topic, where
        assert row["offset"] == want["offset"], where
        assert row["timestamp"] == want["timestamp"], where
        assert row["timestamp_type"] == want["batch"]["timestampType"], where
        assert {k: row["batch"][k] for k in BATCH_FIELDS} == \
            {k: want["batch"][v] for k, v in BATCH_FIELDS.items()}, where
        assert row["batch"]["crc_valid"] is True, where
        if "control" in want:
            assert row["control"] == {"type": want["control"]["type"],
                                      "coordinator_epoch": want["control"]["coordinatorEpoch"]}
            assert row["error"] is None and row["key"] is None, where
            continue
        assert row["record_type_id"] == want["recordType"], where
        if "deserializeException" in want:
            refused += 1
            assert row["error"]["kind"] == "unknown_record_type", where
            assert row["key"] is None and row["value"] is None, where
            continue
        assert row["error"] is None, where
        assert row["record_type"] == want["keySchema"].removesuffix("Key"), where
        assert row["key"] == _snake(want["key"]), where
        assert row["value_version"] == want["valueVersion"], where
        value = row["value"]
        if isinstance(value, dict):
            value.pop("_unknown_tagged_fields", None)
        assert value == _snake(want["value"]), where
    assert status == (1 if refused else 0)


def test_unknown_tagged_fields_are_kept(tmp_path: Path) -> None:
    segment = conformance_root() / "kafka-4.4-dev" / "share_interleaved.log"
    if not segment.is_file():
        pytest.skip(f"{segment} not found")
    _, rows = _decode(segment, tmp_path)
    row = next(r for r in rows if r["offset"] == 7)
    assert row["value"]["_unknown_tagged_fields"] == [{"tag": 5, "data": "AQID"}]
    assert row["value"]["delivery_complete_count"] == 1


def test_explicit_dialect_is_honoured(tmp_path: Path) -> None:
    segment = conformance_root() / "kafka-4.4-dev" / "share_codec_none.log"
    if not segment.is_file():
        pytest.skip(f"{segment} not found")
    status, rows = _decode(segment, tmp_path, "--dialect", "4.0")
    assert status == 1
    assert all(r["error"] is not None for r in rows if r["control"] is None)
