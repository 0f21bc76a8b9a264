"""The encoder: byte-exact with Kafka for uncompressed batches, round trips for the rest."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir, conformance_root

from sharestate.log import (
    Batch,
    BatchHeader,
    RawRecord,
    SegmentWriter,
    build_batch,
    build_control_batch,
    discover,
    read_batches,
)

FOLDERS = ("kafka-4.4-dev", "kafka-4.0-dev")


def _fixture_logs() -> list[str]:
    root = conformance_root()
    if not root.is_dir():
        return ["(fixtures missing)"]
    return sorted(str(p.relative_to(root)) for folder in FOLDERS
                  for p in (root / folder).glob("*.log"))


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def _options(header: dict[str, Any]) -> dict[str, Any]:
    return {"base_offset": header["baseOffset"],
            "partition_leader_epoch": header["partitionLeaderEpoch"],
            "compression": header["compression"], "timestamp_type": header["timestampType"],
            "producer_id": header["producerId"], "producer_epoch": header["producerEpoch"],
            "base_sequence": header["baseSequence"],
            "is_transactional": header["isTransactional"], "is_control": header["isControl"]}


def _options_of(header: BatchHeader) -> dict[str, Any]:
    return {"base_offset": header.base_offset,
            "partition_leader_epoch": header.partition_leader_epoch,
            "compression": header.compression, "timestamp_type": header.timestamp_type,
            "producer_id": header.producer_id, "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence,
            "is_transactional": header.is_transactional, "is_control": header.is_control}


def read(data: bytes) -> list[Batch]:
    items = list(read_batches(io.BytesIO(data)))
    assert all(isinstance(i, Batch) and not i.findings for i in items), items
    return [i for i in items if isinstance(i, Batch)]


@pytest.mark.parametrize("name", _fixture_logs())
def test_rebuild_fixture_batches(name: str) -> None:
    log = conformance_dir() / name
    data = log.read_bytes()
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for line in log.with_suffix(".records.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        grouped[row["batch"]["position"]].append(row)
    for position, rows in grouped.items():
        header = rows[0]["batch"]
        records = [RawRecord(r["offset"], r["timestamp"], r["sequence"], _bytes(r["keyHex"]),
                             _bytes(r["valueHex"]), ()) for r in rows]
        built = build_batch(records, **_options(header))
        original = data[position:position + header["sizeInBytes"]]
        if header["compression"] == "none":
            assert built == original, (name, position)
            continue
        [ours], [theirs] = read(built), read(original)
        assert ours.records == theirs.records
        for field in ("base_offset", "last_offset", "base_timestamp", "max_timestamp",
                      "compression", "record_count", "producer_id", "producer_epoch",
                      "base_sequence", "is_transactional", "is_control"):
            assert getattr(ours.header, field) == getattr(theirs.header, field), field


def test_rebuild_large_segment_byte_for_byte() -> None:
    path = conformance_dir("kafka-4.4-dev") / "share_replay_large.log.gz"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    segment = discover([path])[0]
    with segment.open() as stream:
        data = stream.read()
    rebuilt = [build_batch(b.records, **_options_of(b.header)) for b in read(data)]
    assert b"".join(rebuilt) == data


def test_control_batch_matches_kafka() -> None:
    log = conformance_dir("kafka-4.4-dev") / "share_txn.log"
    data = log.read_bytes()
    markers = [b for b in read(data) if b.header.is_control]
    assert len(markers) == 4
    for batch in markers:
        header = batch.header
        [record] = batch.records
        assert record.key is not None and record.value is not None
        marker = "COMMIT" if record.key[3] == 1 else "ABORT"
        built = build_control_batch(
            marker, offset=record.offset, timestamp=record.timestamp,
            coordinator_epoch=int.from_bytes(record.value[2:], "big"),
            producer_id=header.producer_id, producer_epoch=header.producer_epoch,
            partition_leader_epoch=header.partition_leader_epoch)
        assert built == data[header.position:header.position + header.size_in_bytes]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_headers_tombstones_and_flags(codec: str) -> None:
    records = [RawRecord(1000, 5_000, 7, b"k", b"v", (("h", b"1"), ("\u00fc\u2713", None))),
               RawRecord(1001, 4_000, 8, None, None, ()),
               RawRecord(1003, 9_000, 10, b"", b"x" * 70_000, (("", b""),))]
    batch = build_batch(records, compression=codec, producer_id=12, producer_epoch=3,
                        base_sequence=7, is_transactional=True, partition_leader_epoch=9)
    [got] = read(batch)
    assert got.records == records
    header = got.header
    assert (header.base_offset, header.last_offset, header.base_timestamp,
            header.max_timestamp, header.compression, header.record_count,
            header.partition_leader_epoch, header.is_transactional) == (
        1000, 1003, 5_000, 9_000, codec, 3, 9, True)


def test_log_append_time_and_delete_horizon() -> None:
    records = [RawRecord(0, 10, -1, b"a", b"1", ()), RawRecord(1, 20, -1, b"b", None, ())]
    [appended] = read(build_batch(records, timestamp_type="LogAppendTime", max_timestamp=99))
    assert [r.timestamp for r in appended.records] == [99, 99]
    assert appended.header.timestamp_type == "LogAppendTime"
    [cleaned] = read(build_batch(records, delete_horizon_ms=5))
    assert cleaned.header.has_delete_horizon and cleaned.header.base_timestamp == 5
    assert [r.timestamp for r in cleaned.records] == [10, 20]


def test_empty_batch() -> None:
    [empty] = read(build_batch([], base_offset=42, last_offset_delta=3))
    assert empty.records == []
    assert (empty.header.base_offset, empty.header.last_offset,
            empty.header.record_count) == (42, 45, 0)
    with pytest.raises(ValueError):
        build_batch([])


def test_segment_writer_rolls_and_reads_back(tmp_path: Path) -> None:
    data = (conformance_dir("kafka-4.4-dev") / "share_replay_small.log").read_bytes()
    originals = read(data)
    limit = 20_000
    with SegmentWriter(tmp_path, "__share_group_state", 7, segment_bytes=limit) as writer:
        for batch in originals:
            h = batch.header
            writer.append(data[h.position:h.position + h.size_in_bytes])
    assert len(writer.paths) > 3
    segments = discover([tmp_path / "__share_group_state-7"])
    assert [s.path for s in segments] == writer.paths
    assert {(s.topic, s.partition) for s in segments} == {("__share_group_state", 7)}
    records: list[RawRecord] = []
    for segment in segments:
        assert segment.path.stat().st_size <= limit
        with segment.open() as stream:
            batches = read(stream.read())
        assert segment.base_offset == batches[0].header.base_offset
        records.extend(r for b in batches for r in b.records)
    assert records == [r for b in originals for r in b.records]
    assert discover([tmp_path]) == segments


def test_segment_writer_refuses_going_backwards(tmp_path: Path) -> None:
    first = build_batch([RawRecord(10, 0, -1, None, b"v", ())])
    with SegmentWriter(tmp_path, "t", 0) as writer:
        writer.append(first)
        with pytest.raises(ValueError):
            writer.append(first)
        with pytest.raises(ValueError):
            writer.append(first[:-1])
    with SegmentWriter(tmp_path, "t", 0) as writer, pytest.raises(FileExistsError):
        writer.append(first)
