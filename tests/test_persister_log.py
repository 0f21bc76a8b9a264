"""Batching records into segment files as the coordinator runtime does, per partition."""

from __future__ import annotations

from pathlib import Path

import pytest

from sharestate.coordinator.share_state import ShareKey
from sharestate.log import Batch, ControlRecord, RawRecord, discover, parse_control, read_batches
from sharestate.persister import LogDirs, PartitionLog, ShareStateTopic
from sharestate.persister.java_hash import state_partition

T0 = 1_760_000_000_000


def _records(start: int, count: int, timestamp: int) -> list[RawRecord]:
    return [RawRecord(start + i, timestamp, -1, b"\x00\x00k%d" % i, b"\x00\x00v", ())
            for i in range(count)]


def _batches(path: Path) -> list[Batch]:
    with path.open("rb") as stream:
        items = list(read_batches(stream))
    assert all(isinstance(item, Batch) for item in items)
    return [item for item in items if isinstance(item, Batch)]


def test_operations_share_a_batch_up_to_the_limit(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, "__share_group_state", 4, records_per_batch=6,
                       linger_ms=1000, compression="zstd", partition_leader_epoch=3)
    log.append(_records(0, 3, T0))
    log.append(_records(3, 3, T0 + 1))  # fills the batch to 6: written at once
    log.append(_records(6, 2, T0 + 2))
    log.append(_records(8, 5, T0 + 3))  # would pass 6: the open batch is closed first
    log.append(_records(13, 9, T0 + 4))  # bigger than a batch: one batch of its own
    log.close()
    (segment,) = log.segments
    assert segment == tmp_path / "__share_group_state-4" / "00000000000000000000.log"
    batches = _batches(segment)
    assert [(b.header.base_offset, b.header.record_count) for b in batches] == \
        [(0, 6), (6, 2), (8, 5), (13, 9)]
    header = batches[0].header
    assert (header.compression, header.partition_leader_epoch, header.producer_id,
            header.producer_epoch, header.base_sequence, header.is_transactional) == \
        ("zstd", 3, -1, -1, 0, False)
    assert [r.timestamp for r in batches[0].records] == [T0] * 3 + [T0 + 1] * 3
    assert (log.records, log.batches, log.next_offset) == (22, 4, 22)


def test_linger_closes_a_batch(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, "__share_group_state", 0, records_per_batch=100, linger_ms=5)
    for offset, at in enumerate((0, 4, 5, 9, 10)):
        log.append(_records(offset, 1, T0 + at))
    log.close()
    assert [b.header.record_count for b in _batches(log.segments[0])] == [2, 2, 1]


def test_offsets_must_continue_the_log(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, "__share_group_state", 0)
    log.append(_records(0, 2, T0))
    with pytest.raises(ValueError, match="log end offset 2"):
        log.append(_records(3, 1, T0))


def test_transactions_and_markers_follow_pending_records(tmp_path: Path) -> None:
    logs = LogDirs(tmp_path, records_per_batch=10, linger_ms=1000)
    log = logs.log("__consumer_offsets", 1)
    log.append(_records(0, 2, T0))
    log.append_transactional(_records(2, 3, T0 + 1), producer_id=7000, producer_epoch=2)
    assert log.append_marker("COMMIT", timestamp=T0 + 2, producer_id=7000, producer_epoch=2,
                             coordinator_epoch=11) == 5
    log.append(_records(6, 1, T0 + 3))
    logs.close()
    batches = _batches(log.segments[0])
    assert [(b.header.base_offset, b.header.is_transactional, b.header.is_control,
             b.header.producer_id, b.header.base_sequence) for b in batches] == \
        [(0, False, False, -1, 0), (2, True, False, 7000, 0), (5, True, True, 7000, -1),
         (6, False, False, -1, 0)]
    marker = parse_control(batches[2].records[0], batches[2].header)
    assert isinstance(marker, ControlRecord)
    assert (marker.type, marker.coordinator_epoch) == ("COMMIT", 11)


def test_segments_roll(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, "__share_group_state", 2, records_per_batch=1,
                       segment_bytes=200)
    for offset in range(6):
        log.append(_records(offset, 1, T0))
    log.close()
    assert len(log.segments) > 1
    next_base = _batches(log.segments[0])[-1].header.last_offset + 1
    assert log.segments[1].name == f"{next_base:020d}.log"


def test_unknown_codec_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown compression"):
        LogDirs(tmp_path, compression="brotli")


def test_state_topic_routes_keys_with_kafkas_hashing(tmp_path: Path) -> None:
    topic = ShareStateTopic(LogDirs(tmp_path, records_per_batch=1), 5, clock=lambda: T0)
    keys = [ShareKey(f"group-{i}", "AAAAAAAAAAAAAAAAAAAAAA", i % 3) for i in range(12)]
    for key in keys:
        persister, partition = topic.route(key)
        assert partition == state_partition(key, 5)
        assert persister is topic.persister(partition)
        assert topic.append(partition, persister.initialize(key, 0, 0).records) == 1
        if key == keys[5]:
            topic.set_leader_epoch(4)
    topic.logs.close()
    epochs = {}
    for segment in discover([tmp_path]):
        assert segment.partition is not None and segment.topic == "__share_group_state"
        for batch in _batches(segment.path):
            for record in batch.records:
                epochs[record.offset, segment.partition] = batch.header.partition_leader_epoch
    assert sorted(topic.persisters) == sorted({state_partition(k, 5) for k in keys})
    assert len(epochs) == len(keys) and set(epochs.values()) == {0, 4}
