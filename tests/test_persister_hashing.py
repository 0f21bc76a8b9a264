"""Java hash codes, Kafka's partition choice and Java hash-table iteration orders."""

from __future__ import annotations

from sharestate.coordinator.share_state import ShareKey
from sharestate.persister.hash_order import TimelineOrder, hash_set_order, timeline_slot
from sharestate.persister.java_hash import (
    coordinator_key,
    int32,
    offsets_partition,
    share_key_hash,
    state_partition,
    string_hash,
    utils_abs,
    uuid_hash,
)
from sharestate.records.codec import uuid_to_str


def test_string_hash_is_javas() -> None:
    assert string_hash("") == 0
    assert string_hash("ab") == 97 * 31 + 98
    assert string_hash("hello") == 99162322
    # UTF-16 code units: U+1F680 is the surrogate pair D83D DE80.
    assert string_hash("🚀") == 0xD83D * 31 + 0xDE80
    assert string_hash("ü✓") == 0xFC * 31 + 0x2713
    assert string_hash("polygenelubricants") == -(1 << 31)


def test_utils_abs_maps_int_min_to_zero() -> None:
    assert utils_abs(-(1 << 31)) == 0
    assert utils_abs(-5) == 5
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("ab", 50) == 3105 % 50


def test_uuid_and_share_key_hashes() -> None:
    assert uuid_hash(uuid_to_str(bytes(16))) == 0
    one = uuid_to_str((1).to_bytes(8, "big") + bytes(8))
    assert uuid_hash(one) == 1
    high = uuid_to_str((1 << 32).to_bytes(8, "big") + bytes(8))
    assert uuid_hash(high) == 1
    key = ShareKey("ab", one, 2)
    topic_partition = 31 * (31 + 2)
    assert share_key_hash(key) == int32(31 * (31 + 3105) + 31 * (31 + 1) + topic_partition)


def test_state_partition_hashes_the_coordinator_key() -> None:
    key = ShareKey("g", uuid_to_str(bytes(16)), 7)
    assert coordinator_key(key) == "g:AAAAAAAAAAAAAAAAAAAAAA:7"
    assert state_partition(key, 50) == utils_abs(string_hash(coordinator_key(key))) % 50


def _identity(value: int) -> int:
    return value


def test_hash_set_order_buckets_then_insertion() -> None:
    assert hash_set_order([100, 3, 17], _identity) == [17, 3, 100]
    assert hash_set_order([33, 1, 17, 65536], _identity) == [33, 1, 17, 65536]
    assert hash_set_order(list(range(12, -1, -1)), _identity) == list(range(13))


def test_hash_set_order_resizes_small_tables_for_long_bins() -> None:
    # Nine keys in bucket 0 of 16: Java resizes to 32 buckets instead of building a tree.
    keys = [16 * i for i in range(9)]
    assert hash_set_order(keys, _identity) == [0, 32, 64, 96, 128, 16, 48, 80, 112]


def test_timeline_order_slots_and_growth() -> None:
    assert timeline_slot(0, 2) == 0
    assert timeline_slot(1, 2) == ((-7046029254386353131) % (1 << 64)) >> 63
    order: TimelineOrder[int] = TimelineOrder(_identity)
    for key in (1, 2):
        order.put(key)
    before = order.ordered()
    order.put(1)  # a replacement keeps its place but may still grow the table (2 -> 4)
    assert sorted(order.ordered()) == sorted(before)
    assert order.ordered() == sorted((1, 2), key=lambda k: (timeline_slot(k, 4), k))


def test_timeline_order_reinsertion_goes_last_in_its_slot() -> None:
    order: TimelineOrder[int] = TimelineOrder(lambda k: 0)  # one slot for every key
    for key in (5, 6, 7):
        order.put(key)
    order.remove(5)
    order.put(5)
    order.put(6)
    assert order.ordered() == [6, 7, 5]
    assert len(order) == 3
