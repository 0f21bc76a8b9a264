"""Persister behaviour per request type, mirroring Kafka's `ShareCoordinatorShardTest`."""

from __future__ import annotations

import pytest

from sharestate.coordinator.share_state import SNAPSHOT_TYPE, UPDATE_TYPE, ShareKey, StateBatch
from sharestate.persister import MetadataImage, Persister, PersisterConfig, Summary, errors
from sharestate.persister.responses import ReadData

TOPIC = "Uj5wn_FqTXirEASvVZRY1w"
OTHER = "AAAAAAAAAAEAAAAAAAAAAA"
KEY = ShareKey("gs1", TOPIC, 0)
T0 = 1_760_000_000_000


def _persister(limit: int = 500, cold: int = 300_000, dialect: str = "4.1",
               **kwargs: object) -> Persister:
    image = MetadataImage({TOPIC: 3, OTHER: 1})
    return Persister(dialect, config=PersisterConfig(limit, cold), metadata=image,
                     clock=lambda: T0, **kwargs)  # type: ignore[arg-type]


def _batch(first: int, last: int, state: int = 0, count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


def test_write_needs_initialized_state() -> None:
    p = _persister()
    result = p.write(KEY, 0, 0, 0, [_batch(0, 4)])
    assert (result.error_code, result.error_message, result.records) == \
        (errors.INVALID_REQUEST, errors.WRITE_UNINITIALIZED, ())
    assert p.next_offset == 0


def test_initialize_writes_a_fresh_snapshot() -> None:
    p = _persister()
    first = p.initialize(KEY, 2, 100)
    (record,) = first.records
    assert (record.offset, record.type_id, record.timestamp) == (0, SNAPSHOT_TYPE, T0)
    v = record.share_value
    assert v is not None
    assert (v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
            v.delivery_complete_count, v.create_timestamp, v.write_timestamp, v.batches) == \
        (0, 2, 0, 100, 0, T0, T0, ())
    again = p.initialize(KEY, 3, -1, now=T0 + 5)
    v = again.records[0].share_value
    assert v is not None
    assert (v.snapshot_epoch, v.state_epoch, v.start_offset, v.delivery_complete_count) == \
        (1, 3, -1, -1)
    assert p.initialize(KEY, 2, 0).error_code == errors.FENCED_STATE_EPOCH
    assert p.initialize(KEY, -1, 0).error_message == errors.NEGATIVE_STATE_EPOCH
    assert p.initialize(ShareKey("gs1", TOPIC, 3), 0, 0).error_code == \
        errors.UNKNOWN_TOPIC_OR_PARTITION


def test_snapshot_after_limit_updates() -> None:
    p = _persister(limit=2)
    p.initialize(KEY, 0, 0)
    types = [p.write(KEY, 0, 0, -1, [_batch(i, i)], i).records[0].type_id for i in range(6)]
    assert types == [UPDATE_TYPE, UPDATE_TYPE, SNAPSHOT_TYPE, UPDATE_TYPE, UPDATE_TYPE,
                     SNAPSHOT_TYPE]
    state = p.shard.state(KEY)
    assert state is not None
    assert state.batches == (_batch(0, 5),)
    assert state.delivery_complete_count == 5


def test_non_sequential_batch_updates_keep_higher_counts() -> None:
    p = _persister(limit=0)  # every write is a snapshot
    p.initialize(KEY, 0, 0)
    p.write(KEY, 0, 0, 0, [_batch(0, 9)])
    p.write(KEY, 0, 0, 100, [_batch(100, 109, 1, 1), _batch(110, 119, 1, 2),
                             _batch(120, 129, 1, 0)])
    p.write(KEY, 0, 0, -1, [_batch(100, 109, 2, 1)])
    p.write(KEY, 0, 0, 110, [_batch(120, 129, 2, 1)])
    state = p.shard.state(KEY)
    assert state is not None
    assert state.snapshot_epoch == 4
    assert state.start_offset == 110
    assert state.batches == (_batch(110, 119, 1, 2), _batch(120, 129, 2, 1))


def test_start_offset_never_regresses() -> None:
    p = _persister()
    p.initialize(KEY, 0, 500)
    record = p.write(KEY, 0, 0, 200, [_batch(400, 600, 2)], 3).records[0]
    assert record.type_id == UPDATE_TYPE
    v = record.share_value
    assert v is not None
    assert (v.start_offset, v.batches, v.leader_epoch) == (500, (_batch(500, 600, 2),), 0)


def test_write_checks_in_order() -> None:
    p = _persister()
    p.initialize(KEY, 1, 0)
    assert p.read(KEY, 3).records  # the leader epoch becomes 3
    cases = [
        (ShareKey("gs1", TOPIC, -1), 3, 1, errors.INVALID_REQUEST,
         errors.NEGATIVE_PARTITION_ID),
        (ShareKey("gs1", "", 0), 3, 1, errors.INVALID_REQUEST, errors.NULL_TOPIC_ID),
        (KEY, -1, 1, errors.INVALID_REQUEST, errors.NEGATIVE_LEADER_EPOCH),
        (KEY, 3, -1, errors.INVALID_REQUEST, errors.NEGATIVE_STATE_EPOCH),
        (KEY, 2, 0, errors.FENCED_LEADER_EPOCH, errors.DEFAULT_MESSAGES[74]),
        (KEY, 3, 0, errors.FENCED_STATE_EPOCH, errors.DEFAULT_MESSAGES[124]),
        (ShareKey("gs1", OTHER, 0), 3, 1, errors.INVALID_REQUEST, errors.WRITE_UNINITIALIZED),
    ]
    for key, leader_epoch, state_epoch, code, message in cases:
        result = p.write(key, leader_epoch, state_epoch, 0, [])
        assert (result.error_code, result.error_message, result.records) == (code, message, ())
    p.metadata.remove_topic(TOPIC)
    assert p.write(KEY, 3, 1, 0, []).error_code == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_read_persists_only_a_newer_leader_epoch() -> None:
    p = _persister()
    assert p.read(KEY, 0).error_message == errors.READ_UNINITIALIZED
    p.initialize(KEY, 1, 10)
    p.write(KEY, 0, 1, 10, [_batch(10, 19, 2)], 10)
    same = p.read(KEY, 0)
    assert same.ok and same.records == ()
    assert same.data == ReadData(1, 10, (_batch(10, 19, 2),))
    newer = p.read(KEY, 4, now=T0 + 1)
    (record,) = newer.records
    v = record.share_value
    assert v is not None
    assert (record.type_id, v.leader_epoch, v.start_offset, v.delivery_complete_count,
            v.batches) == (UPDATE_TYPE, 4, 10, 10, ())
    assert p.shard.leader_epoch(KEY) == 4
    assert p.read(KEY, 3).error_code == errors.FENCED_LEADER_EPOCH
    assert p.read(KEY, -1).error_message == errors.NEGATIVE_LEADER_EPOCH


def test_read_summary() -> None:
    p = _persister()
    assert p.read_summary(KEY).data == Summary(-1, 0, 0, -1)
    p.initialize(KEY, 2, 7)
    assert p.read_summary(KEY).data == Summary(7, 0, 2, 0)
    assert p.read_summary(ShareKey("gs1", "Xhkjw_T31P0e3YbfhaN94w", 0)).error_code == \
        errors.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_writes_a_tombstone_only_for_live_state() -> None:
    p = _persister()
    assert p.delete(KEY).records == ()
    p.initialize(KEY, 0, 0)
    (record,) = p.delete(KEY).records
    assert (record.type_id, record.value, record.is_tombstone) == (SNAPSHOT_TYPE, None, True)
    assert KEY not in p.shard
    assert p.delete(ShareKey("gs1", TOPIC, 5)).error_code == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_cold_partition_snapshots() -> None:
    p = _persister(cold=1000)
    assert p.snapshot_cold_partitions(T0).records == ()
    cold, hot = KEY, ShareKey("gs1", TOPIC, 1)
    p.initialize(cold, 0, 0, now=T0)
    p.initialize(hot, 0, 0, now=T0 + 600)
    assert p.snapshot_cold_partitions(T0 + 999).records == ()
    (record,) = p.snapshot_cold_partitions(T0 + 1000).records
    v = record.share_value
    assert v is not None
    assert (record.key, v.snapshot_epoch, v.create_timestamp, v.write_timestamp) == \
        (cold, 1, T0, T0 + 1000)
    # An update does not move the snapshot's write time.
    p.write(hot, 0, 0, 0, [_batch(0, 3)])
    assert [r.key for r in p.snapshot_cold_partitions(T0 + 1700).records] == [hot]
    # Every key is cold-snapshotted now (create != write): the job stops.
    assert p.snapshot_cold_partitions(T0 + 99_000).records == ()


def test_topic_cleanup_tombstones_every_key_of_the_topic() -> None:
    p = _persister()
    keys = [ShareKey(g, TOPIC, n) for g in ("a", "b") for n in range(3)]
    for key in keys:
        p.initialize(key, 0, 0)
    p.initialize(ShareKey("a", OTHER, 0), 0, 0)
    assert p.on_topics_deleted([]).records == ()
    result = p.on_topics_deleted([TOPIC])
    assert sorted(r.key for r in result.records) == sorted(keys)
    assert all(r.is_tombstone for r in result.records)
    assert list(p.shard) == [ShareKey("a", OTHER, 0)]
    assert p.keys_in_map_order() == [ShareKey("a", OTHER, 0)]


def test_offsets_and_the_clock() -> None:
    now = [T0]
    p = Persister(next_offset=41, clock=lambda: now[0])
    now[0] += 7
    (record,) = p.initialize(KEY, 0, 0).records
    assert (record.offset, record.timestamp) == (41, T0 + 7)
    assert p.shard.last_snapshot_offset(KEY) == 41
    assert p.last_redundant_offset() == 41


def test_dialect_4_0_writer() -> None:
    p = _persister(limit=1, dialect="4.0")
    assert p.initialize(KEY, 0, 0).error_code == errors.UNSUPPORTED_VERSION
    assert p.delete(KEY).error_code == errors.UNSUPPORTED_VERSION
    assert p.read(KEY, 0).data == ReadData(0, -1, ())
    first = p.write(KEY, 2, 1, 50, [_batch(50, 59, 2)], 10).records[0]
    assert first.type_id == SNAPSHOT_TYPE and first.value == (0, 1, 2, 50,
                                                               ((50, 59, 2, 1, None),), None)
    update = p.write(KEY, 3, 1, -1, [_batch(60, 61, 4)]).records[0]
    assert update.type_id == UPDATE_TYPE
    assert update.value == (0, 3, -1, ((60, 61, 4, 1, None),), None)
    value_bytes = p.codec.encode(update)[1]
    assert value_bytes is not None and value_bytes[:2] == b"\x00\x01"  # value version 1
    # The first update sets the counter to 0 (4.0), so the third write is still an update.
    assert p.write(KEY, 3, 1, -1, []).records[0].type_id == UPDATE_TYPE
    snapshot = p.write(KEY, 3, 1, -1, []).records[0]  # start offset -1 keeps the current one
    assert snapshot.type_id == SNAPSHOT_TYPE
    assert snapshot.value is not None and snapshot.value[:4] == (1, 1, 3, 50)
    # No sentinel: a leader epoch of -1 is older than the recorded one.
    assert p.write(KEY, -1, 1, 0, []).error_code == errors.FENCED_LEADER_EPOCH
    assert p.write(KEY, 2, 1, 0, []).error_code == errors.FENCED_LEADER_EPOCH
    assert p.write(KEY, 3, 0, 0, []).error_code == errors.FENCED_STATE_EPOCH
    assert p.read(KEY, 3).records == ()
    assert p.snapshot_cold_partitions(T0 + 10**9).records == ()
    assert p.on_topics_deleted([TOPIC]).records == ()
    state = p.shard.state(KEY)
    assert state is not None
    assert (state.delivery_complete_count, state.create_timestamp) == (-1, None)


@pytest.mark.parametrize("dialect", ["4.1", "4.0"])
def test_permissive_metadata_by_default(dialect: str) -> None:
    p = Persister(dialect)
    key = ShareKey("g", OTHER, 12345)
    if dialect == "4.1":
        assert p.initialize(key, 0, 0).ok
    assert p.write(key, 0, 0, 0, []).ok
