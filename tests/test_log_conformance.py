"""The log reader against segments written by Kafka (fixtures/*/*.log and the large .log.gz)."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir, conformance_root

from sharestate.log import (
    Batch,
    ControlRecord,
    LogFinding,
    RawRecord,
    discover,
    parse_control,
    read_batches,
)

FOLDERS = ("kafka-4.4-dev", "kafka-4.0-dev")


def _fixture_logs() -> list[str]:
    root = conformance_root()
    if not root.is_dir():
        return ["(fixtures missing)"]
    return sorted(str(p.relative_to(root)) for folder in FOLDERS
                  for p in (root / folder).glob("*.log"))


def read_all(data: bytes, **options: Any) -> list[Batch | LogFinding]:
    return list(read_batches(io.BytesIO(data), **options))


def expected_records(log: Path) -> list[dict[str, Any]]:
    lines = log.with_suffix(".records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


HEADER_FIELDS = {
    "position": "position", "baseOffset": "base_offset", "lastOffset": "last_offset",
    "sizeInBytes": "size_in_bytes", "partitionLeaderEpoch": "partition_leader_epoch",
    "magic": "magic", "crc": "crc", "compression": "compression",
    "timestampType": "timestamp_type", "baseTimestamp": "base_timestamp",
    "maxTimestamp": "max_timestamp", "producerId": "producer_id",
    "producerEpoch": "producer_epoch", "baseSequence": "base_sequence",
    "isTransactional": "is_transactional", "isControl": "is_control",
    "recordCount": "record_count",
}


@pytest.mark.parametrize("name", _fixture_logs())
def test_segment_matches_kafka(name: str) -> None:
    log = conformance_dir() / name
    items = read_all(log.read_bytes())
    assert all(isinstance(item, Batch) for item in items), items
    batches = [item for item in items if isinstance(item, Batch)]
    got = [(batch, record) for batch in batches for record in batch.records]
    expected = expected_records(log)
    assert len(got) == len(expected)
    for (batch, record), want in zip(got, expected, strict=True):
        header = batch.header
        assert batch.findings == []
        assert header.crc_valid
        assert not header.has_delete_horizon
        for kafka_name, our_name in HEADER_FIELDS.items():
            assert getattr(header, our_name) == want["batch"][kafka_name], (kafka_name, want)
        assert record.offset == want["offset"]
        assert record.timestamp == want["timestamp"]
        assert record.sequence == want["sequence"]
        assert len(record.headers) == want["headerCount"]
        assert _hex(record.key) == want["keyHex"]
        assert _hex(record.value) == want["valueHex"]
        if header.is_control:
            control = parse_control(record, header)
            assert isinstance(control, ControlRecord)
            want_control = want["control"]
            assert (control.type, control.type_id, control.coordinator_epoch,
                    control.key_version, control.value_version) == (
                want_control["type"], want_control["typeId"], want_control["coordinatorEpoch"],
                want_control["keyVersion"], want_control["valueVersion"])
        else:
            assert "control" not in want
    assert sum(b.header.size_in_bytes for b in batches) == log.stat().st_size


@pytest.mark.parametrize("name", _fixture_logs()[:1] + [
    n for n in _fixture_logs() if "mixed" in n or "txn" in n])
@pytest.mark.parametrize("chunk", [1, 7, 61, 4096])
def test_chunk_size_does_not_change_results(name: str, chunk: int) -> None:
    data = (conformance_dir() / name).read_bytes()
    assert read_all(data, chunk_bytes=chunk) == read_all(data)


def test_start_position_resumes_at_a_batch() -> None:
    data = (conformance_dir("kafka-4.4-dev") / "share_codecs_mixed.log").read_bytes()
    everything = read_all(data)
    third = everything[2]
    assert isinstance(third, Batch)
    assert read_all(data, start_position=third.header.position) == everything[2:]
    assert read_all(data, start_position=len(data)) == []


def _large(folder: str) -> Path:
    path = conformance_dir(folder) / "share_replay_large.log.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.mark.parametrize("folder", FOLDERS)
def test_large_segment_reads_completely(folder: str) -> None:
    path = _large(folder)
    segment = discover([path])[0]
    assert segment.gzipped
    records = batches = size = 0
    with segment.open() as stream:
        for item in read_batches(stream):
            assert isinstance(item, Batch)
            assert item.header.crc_valid and not item.findings
            batches += 1
            records += len(item.records)
            size += item.header.size_in_bytes
    summary = json.loads(path.with_name("share_replay_large.summary.json").read_text())
    assert (records, batches, size) == (250_000, summary["batches"], summary["bytes"])


def test_large_segment_streams_in_bounded_memory() -> None:
    """Memory stays flat while a third of the large segment (12 MB) streams through."""
    segment = discover([_large("kafka-4.4-dev")])[0]
    consumed = 0
    tracemalloc.start()
    try:
        with segment.open() as stream:
            for item in read_batches(stream, chunk_bytes=256 << 10):
                assert isinstance(item, Batch)
                consumed += item.header.size_in_bytes
                if consumed > 12 << 20:
                    break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert consumed > 12 << 20
    assert peak < 2 << 20, peak


def test_records_behave_as_raw_records() -> None:
    """A record is a RawRecord, or (read in C) a native record that behaves as one."""
    data = (conformance_dir("kafka-4.4-dev") / "share_txn.log").read_bytes()
    batch = read_all(data)[0]
    assert isinstance(batch, Batch)
    record = batch.records[0]
    fields = (record.offset, record.timestamp, record.sequence, record.key, record.value,
              record.headers)
    assert record == fields and tuple(record) == fields and len(record) == 6
    assert record == RawRecord(*fields) and RawRecord(*fields) == record
    assert record._replace(timestamp=1) == RawRecord(*fields)._replace(timestamp=1)
    assert isinstance(record, RawRecord) or type(record).__name__ == "Record"
