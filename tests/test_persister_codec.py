"""The persister's record codec: same bytes as the generic encoder, tuples that decode back."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sharestate.coordinator.share_state import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareKey,
    ShareValue,
    StateBatch,
    share_value,
)
from sharestate.persister import EmittedRecord, ShareRecordCodec
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect
from sharestate.records.keyvalue import decode_key_value, encode_key_value

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
BATCHES = st.lists(st.builds(StateBatch, INT64, INT64, st.integers(-128, 127),
                             st.integers(-(1 << 15), (1 << 15) - 1)), max_size=200)
TOPIC_IDS = st.binary(min_size=16, max_size=16).map(
    lambda raw: base64.urlsafe_b64encode(raw)[:22].decode("ascii"))
KEYS = st.builds(ShareKey, st.text(max_size=40), TOPIC_IDS, st.integers(0, (1 << 31) - 1))
CODECS = {"4.1": ShareRecordCodec("4.1"), "4.0": ShareRecordCodec("4.0", 1)}


def _value(is_snapshot: bool, dialect_name: str, draw: Any) -> ShareValue:
    epoch = draw(st.integers(0, 65535) if dialect_name == "4.0" else INT32)
    modern = dialect_name != "4.0"
    stamped = modern and is_snapshot
    return ShareValue(is_snapshot, epoch, draw(INT32) if is_snapshot else None, draw(INT32),
                      draw(INT64), draw(INT32) if modern else -1,
                      draw(INT64) if stamped else None, draw(INT64) if stamped else None,
                      tuple(draw(BATCHES)))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), dialect_name=st.sampled_from(sorted(CODECS)), snapshot=st.booleans(),
       key=KEYS)
def test_fast_bytes_equal_generic_bytes(data: st.DataObject, dialect_name: str,
                                        snapshot: bool, key: ShareKey) -> None:
    codec = CODECS[dialect_name]
    type_id = SNAPSHOT_TYPE if snapshot else UPDATE_TYPE
    value = _value(snapshot, dialect_name, data.draw)
    values = codec.value_tuple(type_id, value)
    record = EmittedRecord(0, 0, type_id, key, values, value)
    kind = dialect(dialect_name).kind(SHARE_STATE_TOPIC, type_id)
    assert kind is not None
    expected = encode_key_value(kind, (*key, None), codec.value_versions[type_id], values)
    assert codec.encode(record) == expected
    assert (codec.key_bytes(type_id, key), codec.value_bytes(type_id, values)) == expected
    decoded = decode_key_value(dialect(dialect_name), SHARE_STATE_TOPIC, *expected)
    assert decoded.error is None and decoded.value == values
    assert share_value(values, codec.value_layout(type_id)) == value


@pytest.mark.parametrize("dialect_name", sorted(CODECS))
def test_unknown_tagged_fields_take_the_generic_path(dialect_name: str) -> None:
    codec = CODECS[dialect_name]
    value = ShareValue(False, 1, None, 2, 3, -1, None, None, (StateBatch(3, 9, 0, 1),))
    values = codec.value_tuple(UPDATE_TYPE, value)
    values = (*values[:-1], ((5, b"abc"),))
    kind = dialect(dialect_name).kind(SHARE_STATE_TOPIC, UPDATE_TYPE)
    assert kind is not None
    key = ShareKey("g", "AAAAAAAAAAAAAAAAAAAAAA", 0)
    record = EmittedRecord(0, 0, UPDATE_TYPE, key, values, None)
    assert codec.encode(record) == encode_key_value(kind, (*key, None),
                                                    codec.value_versions[UPDATE_TYPE], values)


def test_storable_drops_what_the_layout_cannot_hold() -> None:
    codec = CODECS["4.0"]
    value = ShareValue(True, 1, 1, 1, 1, 42, 7, 8, ())
    assert codec.lossy(SNAPSHOT_TYPE) and not CODECS["4.1"].lossy(SNAPSHOT_TYPE)
    stored = codec.storable(SNAPSHOT_TYPE, value)
    assert (stored.delivery_complete_count, stored.create_timestamp, stored.write_timestamp) == \
        (-1, None, None)
    assert CODECS["4.1"].storable(SNAPSHOT_TYPE, value) is value
