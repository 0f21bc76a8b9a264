"""Each C twin in `sharestate._native` gives exactly what its pure-Python twin gives (results
and exceptions), on Kafka's fixtures, random input and damaged input."""

from __future__ import annotations

import ast
import io
import json
import os
import random
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow as pa
import pytest
from conftest import conformance_dir, under_ci
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_analytics_lag_history import _random_ends, _random_history

from sharestate import native
from sharestate.analytics.audit import _Seen
from sharestate.analytics.end_offsets import timelines
from sharestate.analytics.lag_history import GroupState, HistoryRow
from sharestate.analytics.lag_state import state_row
from sharestate.analytics.lag_walk import walk_batches, walk_batches_py
from sharestate.cluster.consumed import ConsumedRun
from sharestate.coordinator.combiner import combine, combine_py
from sharestate.coordinator.shard import NativeContext
from sharestate.coordinator.share_state import (
    ShareKey,
    SharePartitionState,
    StateBatch,
    ValueSlots,
)
from sharestate.log import Batch, BatchHeader, RawRecord, discover, read_batches
from sharestate.log.checksums import crc_shift_py
from sharestate.log.records_v2 import parse_records, parse_records_py
from sharestate.log.resync import check_at, next_candidate, next_candidate_py
from sharestate.records import catalog
from sharestate.records.codec import (
    DecodeError,
    SlotProgram,
    StructProgram,
    read_struct,
    read_struct_py,
)
from sharestate.records.keyvalue import (
    KeyValue,
    KindPrograms,
    _native_table,
    decode_key_value,
    decode_key_values,
    encode_key_value,
)
from sharestate.records.spec import Kind, StructLayout
from sharestate.tables.arrow_log import records_of
from sharestate.tables.columns import (
    BATCHES,
    RowColumns,
    columns_of,
    transpose,
    transpose_py,
    tuples_of,
    tuples_of_py,
)
from sharestate.tables.spec import table


@pytest.fixture(autouse=True, scope="module")
def _extension() -> None:
    """Without the extension there is nothing to compare: an error, unless pure Python was
    asked for (SHARESTATE_PURE_PYTHON=1) outside CI."""
    if native.enabled():
        return
    if os.environ.get(native.PURE_PYTHON_ENV) != "1":
        pytest.fail("sharestate._native is not built (make install builds it; see setup.py)",
                    pytrace=False)
    if under_ci():
        pytest.fail(f"{native.PURE_PYTHON_ENV}=1 under CI: these tests need the C extension",
                    pytrace=False)
    pytest.skip(f"{native.PURE_PYTHON_ENV}=1: the C extension is off")


def test_c_reads_every_tuple_in_its_named_tuple_field_order() -> None:
    """The index constants of csrc/native.h (exported as FIELDS and KINDS) are the field
    orders of the NamedTuples C reads and builds, and the numbers of the wire kinds."""
    classes = (NativeContext, ValueSlots, StructProgram, SlotProgram, KindPrograms, KeyValue,
               RawRecord, BatchHeader, ConsumedRun, ShareKey, StateBatch,
               SharePartitionState, _Seen)
    assert {cls.__name__: cls._fields for cls in classes} == native.module.FIELDS
    assert tuple(kind.name for kind in Kind) == native.module.KINDS
    assert [int(kind) for kind in Kind] == list(range(len(Kind)))


def _layouts() -> list[StructLayout]:
    found: list[StructLayout] = []
    for name in catalog.dialect_names():
        for kinds in catalog.dialect(name).topics.values():
            for kind in kinds.values():
                found.append(kind.key_layout())
                lo, hi = kind.value.valid.lo, kind.value.valid.hi or kind.value.valid.lo
                found.extend(layout for v in range(lo, hi + 1)
                             if (layout := kind.value_layout(v)) is not None)
    return found


LAYOUTS = _layouts()


def _outcome(reader: Any, layout: StructLayout, data: bytes) -> tuple[Any, ...]:
    try:
        values, pos = reader(layout, data, 0, len(data))
    except DecodeError as exc:
        return ("error", str(exc), exc.position)
    return ("ok", values, pos)


def _fixture_payloads() -> Iterator[bytes]:
    root = conformance_dir()
    for path in sorted(root.glob("*/*.records.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for field in ("keyHex", "valueHex"):
                if row.get(field):
                    yield bytes.fromhex(row[field])[2:]


def test_native_matches_python_on_every_fixture_payload_under_every_layout() -> None:
    payloads = list(_fixture_payloads())
    assert payloads
    for data in payloads:
        for layout in LAYOUTS:
            assert _outcome(read_struct, layout, data) == _outcome(read_struct_py, layout, data)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(LAYOUTS) - 1), data=st.binary(max_size=200))
def test_native_matches_python_on_random_bytes(index: int, data: bytes) -> None:
    layout = LAYOUTS[index]
    assert _outcome(read_struct, layout, data) == _outcome(read_struct_py, layout, data)


def _record_outcome(parser: Any, buf: bytes, count: int, last_delta: int) -> Any:
    return parser(buf, 0, len(buf), count, 1000, 1_760_000_000_000, 0, last_delta)


def _fixture_record_sections() -> list[tuple[bytes, int, int]]:
    """(uncompressed record bytes, record count, last offset delta) of every uncompressed
    fixture batch."""
    sections: list[tuple[bytes, int, int]] = []
    for path in sorted(conformance_dir().glob("*/*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            size = int.from_bytes(data[pos + 8:pos + 12], "big") + 12
            attributes = int.from_bytes(data[pos + 21:pos + 23], "big")
            count = int.from_bytes(data[pos + 57:pos + 61], "big", signed=True)
            last_delta = int.from_bytes(data[pos + 23:pos + 27], "big", signed=True)
            if attributes & 7 == 0:
                sections.append((data[pos + 61:pos + size], count, last_delta))
            pos += size
    return sections


def test_native_record_parser_matches_python_on_fixture_batches() -> None:
    sections = _fixture_record_sections()
    assert sections
    for buf, count, last_delta in sections:
        native_result = _record_outcome(parse_records, buf, count, last_delta)
        assert native_result == _record_outcome(parse_records_py, buf, count, last_delta)
        assert native_result[1] is None


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_native_record_parser_matches_python_on_mutations(data: st.DataObject) -> None:
    sections = _SECTIONS or _fixture_record_sections()
    _SECTIONS[:] = sections
    buf, count, last_delta = sections[data.draw(st.integers(0, len(sections) - 1))]
    mutated = bytearray(buf[:data.draw(st.integers(0, len(buf)))])
    for _ in range(data.draw(st.integers(0, 4))):
        if mutated:
            mutated[data.draw(st.integers(0, len(mutated) - 1))] = data.draw(st.integers(0, 255))
    count = data.draw(st.sampled_from([count, count - 1, count + 1, -1, 0]))
    last_delta = data.draw(st.sampled_from([last_delta, last_delta - 1, 0, -1, 1 << 31]))
    assert (_record_outcome(parse_records, bytes(mutated), count, last_delta)
            == _record_outcome(parse_records_py, bytes(mutated), count, last_delta))


_SECTIONS: list[tuple[bytes, int, int]] = []


def _read_all(data: bytes) -> list[Any]:
    return list(read_batches(io.BytesIO(data), chunk_bytes=4096))


def test_native_batch_walk_matches_python_on_fixtures_and_damage(
        monkeypatch: pytest.MonkeyPatch) -> None:
    segments = [p.read_bytes() for p in sorted(conformance_dir().glob("*/*.log"))]
    damaged = []
    for data in segments:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x40
        covering = bytearray(data)  # the first batch's length runs into the next one
        covering[8:12] = (int.from_bytes(data[8:12], "big") + 100).to_bytes(4, "big")
        damaged += [bytes(flipped), data[: len(data) - 7], data[:100] + b"garbage" + data[100:],
                    bytes(covering), data[:61] + bytes(70_000) + data[61:],
                    data[:40] + b"\x01" * 70_000 + data[40:]]
    inputs = segments + damaged
    fast = [_read_all(data) for data in inputs]
    monkeypatch.setattr(native, "module", None)
    slow = [_read_all(data) for data in inputs]
    assert fast == slow


def _scans(buf: bytes, max_batch: int) -> list[tuple[bool, int]]:
    """Every answer of the candidate scan over `buf`, from each start, both at and before
    the end of the stream."""
    answers = []
    for eof in (True, False):
        off = 0
        while off <= len(buf):
            found, at = next_candidate(buf, off, len(buf), eof, max_batch)
            answers.append((found, at))
            if not found:
                break
            off = at + 1
    return answers


def _scan_inputs() -> list[bytes]:
    segments = [p.read_bytes()[:6000] for p in sorted(conformance_dir().glob("*/*.log"))]
    return [*segments, bytes(5000), b"\x01" * 5000, b"\x02" * 5000, b"\xff" * 300,
            random.Random(5).randbytes(60_000)]


def test_native_candidate_scan_matches_python(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _scan_inputs()
    fast = [_scans(buf, limit) for buf in inputs for limit in (64 << 20, 1000)]
    assert any(found for answers in fast for found, _ in answers)
    monkeypatch.setattr(native, "module", None)
    assert fast == [_scans(buf, limit) for buf in inputs for limit in (64 << 20, 1000)]


@settings(max_examples=2000, deadline=None)
@given(data=st.binary(min_size=0, max_size=300), off=st.integers(0, 300),
       stop=st.integers(0, 300), eof=st.booleans(), max_batch=st.sampled_from([61, 200, 1 << 30]))
def test_native_candidate_scan_matches_python_on_random_bytes(
        data: bytes, off: int, stop: int, eof: bool, max_batch: int) -> None:
    got = native.module.next_candidate(data, off, stop, eof, max_batch)
    assert ((True, got) if got >= 0 else (False, -1 - got)) == \
        next_candidate_py(data, off, stop, eof, max_batch)


def test_vectorised_checks_agree_with_the_byte_by_byte_check() -> None:
    for buf in _scan_inputs():
        for eof in (True, False):
            want = [i for i in range(len(buf)) if check_at(buf, i, eof, 1 << 26) == 1]
            got, off = [], 0
            while True:
                found, at = next_candidate_py(buf, off, len(buf), eof, 1 << 26)
                if not found:
                    break
                got.append(at)
                off = at + 1
            assert got == want[:len(got)] and (got == want or not eof)


@settings(max_examples=3000, deadline=None)
@given(crc=st.integers(0, (1 << 32) - 1),
       length=st.one_of(st.integers(0, 300), st.integers(0, 1 << 40),
                       st.integers(0, (1 << 64) - 1)),
       castagnoli=st.booleans())
def test_native_crc_shift_matches_python(crc: int, length: int, castagnoli: bool) -> None:
    assert native.module.crc_shift(crc, length, castagnoli) == crc_shift_py(crc, length,
                                                                            castagnoli)


def test_native_key_value_decoding_matches_python(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = []
    for path in sorted(conformance_dir().glob("*/*.log")):
        data = path.read_bytes()
        for item in read_batches(io.BytesIO(data)):
            if not isinstance(item, Batch) or item.header.is_control:
                continue
            damaged = [r._replace(value=r.value[:-1]) if r.value else r for r in item.records]
            for name in catalog.dialect_names():
                for topic in catalog.TOPICS:
                    cases.append((catalog.dialect(name), topic, item.records))
                    cases.append((catalog.dialect(name), topic, damaged))
    fast = [decode_key_values(d, t, records) for d, t, records in cases]
    monkeypatch.setattr(native, "module", None)
    assert fast == [decode_key_values(d, t, records) for d, t, records in cases]


def test_native_key_value_decoding_asks_the_python_decoder_once_for_null_keys() -> None:
    """A null key's KeyValue depends on nothing else: a batch of 100,000 null-key records
    (a crafted segment has 60) asks the Python decoder once, where it asked per record."""
    records = [RawRecord(i, 0, -1, None, None if i % 2 else b"\x00\x01", ())
               for i in range(100_000)]
    records[5] = RawRecord(5, 0, -1, b"\x00", None, ())
    asked: list[tuple[Any, Any]] = []
    schemas = catalog.dialect("4.1")

    def fallback(key: bytes | None, value: bytes | None) -> KeyValue:
        asked.append((key, value))
        return decode_key_value(schemas, catalog.SHARE_STATE_TOPIC, key, value)

    decoded = native.module.decode_key_values(
        records, _native_table(schemas, catalog.SHARE_STATE_TOPIC), fallback)
    assert asked == [(None, b"\x00\x01"), (b"\x00", None)]
    assert decoded == [decode_key_value(schemas, catalog.SHARE_STATE_TOPIC, r.key, r.value)
                       for r in records]


def test_native_key_value_decoding_shares_the_key_of_the_record_before() -> None:
    """Records with the key bytes of the record before share its decoded key (a share-
    partition's records mostly follow one another: decoding each key again was a tenth of a
    replay task's decoding); a record of another key, or after one that did not decode, gets
    its own, and every KeyValue equals the Python decoder's."""
    schemas = catalog.dialect("4.1")
    kind = schemas.topics[catalog.SHARE_STATE_TOPIC][1]
    value = (0, 0, 6025, 1, ((6027, 6027, 2, 1, None),), None)
    keys = [encode_key_value(kind, ("g", _TOPIC_ID, p, None), 0, value)[0] for p in (1, 2)]
    _, value_bytes = encode_key_value(kind, ("g", _TOPIC_ID, 1, None), 0, value)
    order = [0, 0, 0, 1, 1, 0]
    records = [RawRecord(i, 0, -1, keys[k], value_bytes, ()) for i, k in enumerate(order)]
    records.insert(3, RawRecord(3, 0, -1, keys[1], b"\x00", ()))  # its value does not decode
    decoded = native.module.decode_key_values(
        records, _native_table(schemas, catalog.SHARE_STATE_TOPIC),
        partial(decode_key_value, schemas, catalog.SHARE_STATE_TOPIC))
    assert decoded == [decode_key_value(schemas, catalog.SHARE_STATE_TOPIC, r.key, r.value)
                       for r in records]
    same = [decoded[i].key is decoded[i - 1].key for i in range(1, len(decoded))]
    assert same == [True, True, False, False, True, False]


_BATCH = st.builds(StateBatch, st.integers(90, 140), st.integers(90, 140), st.integers(0, 4),
                   st.integers(0, 4))


@settings(max_examples=3000, deadline=None)
@given(so_far=st.lists(_BATCH, max_size=8), new=st.lists(_BATCH, max_size=6),
       start=st.sampled_from([-1, 95, 100, 120, 150]), normalize=st.booleans())
def test_native_combine_matches_python(so_far: list[StateBatch], new: list[StateBatch],
                                       start: int, normalize: bool) -> None:
    base: Any = combine_py(so_far, [], -1) if normalize else tuple(so_far)
    assert combine(base, new, start) == combine_py(base, new, start)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_EDGE_OFFSETS = st.sampled_from([INT64_MIN, INT64_MIN + 1, INT64_MIN + 2, -1, 0, 1, 2,
                                 INT64_MAX - 2, INT64_MAX - 1, INT64_MAX])
_EDGE_BATCH = st.builds(StateBatch, _EDGE_OFFSETS, _EDGE_OFFSETS, st.integers(0, 4),
                        st.integers(0, 4))


def test_native_combine_at_int64s_end() -> None:
    """A batch ending at int64's largest offset: the one after it is past int64."""
    so_far, new = (StateBatch(5, INT64_MAX, 0, 1),), (StateBatch(10, 20, 2, 2),)
    assert combine(so_far, new, -1) == combine_py(so_far, new, -1) == (
        StateBatch(5, 9, 0, 1), StateBatch(10, 20, 2, 2), StateBatch(21, INT64_MAX, 0, 1))


@settings(max_examples=2000, deadline=None)
@given(so_far=st.lists(_EDGE_BATCH, max_size=6), new=st.lists(_EDGE_BATCH, max_size=4),
       start=st.sampled_from([-1, 0, 2, INT64_MAX - 1, INT64_MAX]), normalize=st.booleans())
def test_native_combine_matches_python_at_int64s_ends(so_far: list[StateBatch],
                                                      new: list[StateBatch], start: int,
                                                      normalize: bool) -> None:
    base: Any = combine_py(so_far, [], -1) if normalize else tuple(so_far)
    assert combine(base, new, start) == combine_py(base, new, start)


def test_native_replay_with_history_matches_python(monkeypatch: pytest.MonkeyPatch) -> None:
    from sharestate.replay.logs import partition_logs
    from sharestate.replay.share_log import replay_share_log

    paths = sorted(conformance_dir().glob("*/share_*.log"))
    logs = [log for path in paths for log in partition_logs(discover([path]))[0]]

    def run() -> list[Any]:
        out = []
        for log in logs:
            entries: list[Any] = []
            result = replay_share_log(log, history_sink=entries.extend)
            out.append((entries, {k: result.shard.state(k) for k in result.shard},
                        result.shard.last_redundant_offset(), result.findings))
        return out

    fast = run()
    monkeypatch.setattr(native, "module", None)
    assert fast == run()


def test_native_replay_history_rows_match_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The history table's rows of every share fixture, appended by share_apply as it
    applies (the pipeline's way) and by the Python path, and made from the entries a
    replay returns."""
    from sharestate.replay.logs import partition_logs
    from sharestate.replay.share_log import ShareReplay, share_state
    from sharestate.tables.gold import history_batch, history_columns

    paths = sorted(conformance_dir().glob("*/share_*.log"))
    logs = [log for path in paths for log in partition_logs(discover([path]))[0]]

    def run(into_rows: bool) -> list[Any]:
        out = []
        for log in logs:
            dialect = log.dialects[0]
            history = history_columns(dialect)
            replay = ShareReplay(share_state(log.topic, log.partition, log.dialects),
                                 collect_history=not into_rows,
                                 history=history.rows if into_rows else None)
            for item in log.items():
                entries = replay.apply(item)
                assert not (entries and into_rows)
                history.extend(entries)
            out.append(history_batch(history, log.topic, 0, dialect).to_pylist())
        return out

    fast = run(True)
    assert fast == run(False)
    assert sum(map(len, fast)) > 1000
    monkeypatch.setattr(native, "module", None)
    assert fast == run(True) == run(False)


def _audit(batches: list[Any], dialects: tuple[str, ...] | None) -> tuple[Any, ...]:
    from sharestate.analytics.audit import ShareAuditor

    auditor = ShareAuditor(3, dialects=dialects)
    errors = []
    for batch in batches:
        try:
            auditor.batch(batch)
        except ValueError as exc:  # a snapshot without a state epoch stops both paths alike
            errors.append(str(exc))
            break
    return auditor.drain(), auditor._seen, auditor._deleted, errors


def test_native_audit_matches_python_on_fixtures() -> None:
    from sharestate.replay.logs import partition_logs

    paths = sorted(conformance_dir().glob("*/share_*.log"))
    for log in (log for path in paths for log in partition_logs(discover([path]))[0]):
        batches = list(log.batches())
        assert _audit(batches, log.dialects) == _audit(batches, None), log.name


_SNAPSHOT = catalog.dialect("4.1").topics["__share_group_state"][0]
_UPDATE = catalog.dialect("4.1").topics["__share_group_state"][1]
_EPOCH = st.integers(-1, 3)


@st.composite
def _share_records(draw: st.DrawFn) -> tuple[Any, ...]:
    """A share-state record's (KeyValue, transactional) with small, colliding epochs."""
    from sharestate.records.keyvalue import KeyValue

    key = ("g", "t", draw(st.integers(0, 1)))
    batches = ((5, 9, 0, 1),)
    kind, value = draw(st.sampled_from([
        (_SNAPSHOT, lambda: (draw(_EPOCH), draw(st.one_of(st.none(), _EPOCH)), draw(_EPOCH),
                             draw(st.integers(-1, 12)), -1, 0, 0, batches)),
        (_UPDATE, lambda: (draw(_EPOCH), draw(_EPOCH), draw(st.integers(-1, 12)), -1,
                           batches)),
        (_SNAPSHOT, lambda: None),
        (_UPDATE, lambda: None),
    ]))
    fields = value()
    if fields is not None and kind is _SNAPSHOT and fields[1] is None:
        return KeyValue(0, kind, key, None, None, None), False  # a tombstone
    return (KeyValue(kind.type_id, kind, key, None if fields is None else 0, fields, None),
            draw(st.booleans()) and draw(st.booleans()))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(_share_records(), max_size=40))
def test_native_audit_matches_python_on_generated_histories(records: list[Any]) -> None:
    from sharestate.log import BatchHeader, RawRecord
    from sharestate.records.segment import DecodedBatch

    batches = []
    for offset, (decoded, transactional) in enumerate(records):
        header = BatchHeader(0, offset, offset, 0, 0, 2, 0, True, "none", "CreateTime", 0, 0,
                             7, 0, -1, transactional, False, 1, False)
        raw = RawRecord(offset, 1000 + offset, -1, b"", b"", ())
        batches.append(DecodedBatch(header, [raw], [decoded], []))
    assert _audit(batches, ("4.1",)) == _audit(batches, None)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 2**62), st.integers(-1, 2**41),
                          st.one_of(st.none(), st.binary(max_size=12)),
                          st.one_of(st.none(), st.binary(max_size=30))), min_size=1, max_size=30),
       st.integers(0, 5))
def test_native_records_of_arrow_columns_equal_raw_records(
        rows: list[tuple[int, int, bytes | None, bytes | None]], cut: int) -> None:
    """Records built in C over Arrow buffers (sliced columns, null keys and values) equal
    the RawRecords of the same columns."""
    offsets, stamps, keys, values = zip(*rows, strict=True)
    columns = [pa.array(offsets, pa.int64()), pa.array(stamps, pa.int64()),
               pa.array(keys, pa.binary()), pa.array(values, pa.binary())]
    start = min(cut, len(rows) - 1)
    sliced = [c.slice(start) for c in columns]
    built = records_of(*sliced)
    assert all(type(r) is native.module.Record for r in built)
    assert built == [RawRecord(o, t, -1, k, v, ()) for o, t, k, v in rows[start:]]


# -- share_apply: the shard's replay in C against `_Applier.apply_all` ----------------------

_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
_OFFSET = st.integers(0, 40)
_SMALL_EPOCH = st.integers(-1, 3)


@st.composite
def _share_value(draw: st.DrawFn, snapshot: bool) -> Any:
    from sharestate.coordinator.share_state import ShareValue

    first = draw(st.lists(_OFFSET, max_size=4))
    batches = [StateBatch(f, f + draw(st.integers(-1, 8)), draw(st.integers(0, 4)),
                          draw(st.integers(0, 5))) for f in first]  # now and then invalid
    return ShareValue(snapshot, draw(st.integers(0, 4)),
                      draw(_SMALL_EPOCH) if snapshot else None, draw(_SMALL_EPOCH),
                      draw(st.integers(-1, 40)), draw(st.integers(-1, 5)),
                      draw(st.integers(0, 9)) if snapshot else None,
                      draw(st.integers(0, 9)) if snapshot else None, tuple(batches))


def _damage(data: bytes | None, draw: st.DrawFn) -> bytes | None:
    """The bytes as they are, or cut, flipped or extended (a version or type id included)."""
    if data is None or draw(st.integers(0, 5)) != 0:
        return data
    mutated = bytearray(data[:draw(st.integers(0, len(data)))])
    for _ in range(draw(st.integers(0, 2))):
        if mutated:
            mutated[draw(st.integers(0, len(mutated) - 1))] = draw(st.integers(0, 255))
    return bytes(mutated + draw(st.binary(max_size=2)))


@st.composite
def _share_batches(draw: st.DrawFn) -> list[Any]:
    """Batches of share-state records in the 4.0 and 4.1 layouts (one dialect per batch, as
    per segment), decoded: snapshots, updates (4.0 ones at value versions 0 and 1), both
    tombstones, damaged bytes, null keys, control records; transactional or not; timestamps out of
    order now and then."""
    from sharestate.log import BatchHeader, ControlRecord
    from sharestate.persister.record_codec import EmittedRecord, ShareRecordCodec
    from sharestate.records.catalog import SHARE_STATE_TOPIC

    batches = []
    offset, timestamp = 0, 1000
    for _ in range(draw(st.integers(1, 6))):
        name = draw(st.sampled_from(("4.0", "4.1")))
        codec = ShareRecordCodec(name, draw(st.sampled_from((0, 1))) if name == "4.0" else 0)
        records, decoded = [], []
        control = draw(st.integers(0, 7)) == 0
        for _ in range(1 if control else draw(st.integers(1, 8))):
            timestamp += draw(st.integers(-2, 3))
            if control:
                records.append(RawRecord(offset, timestamp, -1, b"", b"", ()))
                decoded.append(ControlRecord(draw(st.sampled_from(("COMMIT", "ABORT"))),
                                             draw(st.integers(0, 1)), 0, 0, 0))
                offset += 1
                continue
            type_id = draw(st.integers(0, 1))
            key = ShareKey(draw(st.sampled_from(("g", "h"))), _TOPIC_ID, draw(st.integers(0, 1)))
            value = None if draw(st.integers(0, 9)) == 0 else draw(_share_value(type_id == 0))
            key_bytes, value_bytes = codec.encode(EmittedRecord(
                offset, timestamp, type_id, key, None,
                None if value is None else codec.storable(type_id, value)))
            records.append(RawRecord(offset, timestamp, -1,
                                     None if draw(st.integers(0, 19)) == 0
                                     else _damage(key_bytes, draw),
                                     _damage(value_bytes, draw), ()))
            offset += 1
        if not control:
            decoded = decode_key_values(catalog.dialect(name), SHARE_STATE_TOPIC, records)
        transactional = control or draw(st.integers(0, 4)) == 0
        header = BatchHeader(0, records[0].offset, records[-1].offset, 0, 0, 2, 0, True, "none",
                             "CreateTime", 0, 0, 7 if transactional else -1, 0, -1,
                             transactional, control, len(records), False)
        batches.append((header, records, decoded))
    return batches


def _apply(batches: list[Any], limit: int, as_of: Any, collect: bool, in_c: bool) -> Any:
    """Replay the batches into a fresh 4.1 shard in C (`share_apply`) or in Python
    (`_Applier.apply_all`); everything either leaves behind, or the exception raised."""
    from sharestate.coordinator.shard import ShareShard
    from sharestate.coordinator.share_rules import rules_for
    from sharestate.replay.share_log import _Applier, native_slots

    shard = ShareShard(rules_for("4.1", limit))
    applier = _Applier(shard)
    context = shard.native_context()
    assert context is not None
    slots = native_slots(("4.0", "4.1"))
    steps: list[Any] = []
    for header, records, decoded in batches:
        entries: list[Any] = []
        applier.header = header
        applier.entries = entries if collect else None
        try:
            if in_c:
                step = native.module.share_apply(context, records, decoded, as_of.offset,
                                                 as_of.time, slots, applier.apply,
                                                 applier.entries)
            else:
                step = applier.apply_all(records, decoded, as_of)
        except Exception as exc:  # the same exception from both, or the test fails
            steps.append(("raised", type(exc), str(exc)))
            break
        steps.append((step, entries))
        if step[1]:
            break
    offsets = shard._offsets
    return (steps, shard.findings, list(shard._states.items()),
            list(shard._leader_epochs.items()), list(shard._state_epochs.items()),
            list(shard._counts.items()), list(offsets.tracked().items()), offsets.raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=_share_batches(), limit=st.sampled_from((1, 2, 3, 500)),
       bound=st.sampled_from(("none", "offset", "time")), at=st.integers(0, 30),
       collect=st.booleans())
def test_native_share_apply_matches_python(batches: list[Any], limit: int, bound: str, at: int,
                                           collect: bool) -> None:
    """Random and damaged share-state histories, mixed 4.0 / 4.1 layouts, bounded by offset
    or time or not: the shard, its offsets manager, its findings, the history entries and
    each call's result are the same in C and in Python."""
    from sharestate.replay.logs import AsOf

    as_of = AsOf(at if bound == "offset" else None, 1000 + at if bound == "time" else None)
    in_c = _apply(batches, limit, as_of, collect, in_c=True)
    assert in_c == _apply(batches, limit, as_of, collect, in_c=False)


def test_native_share_apply_skips_records_that_did_not_decode() -> None:
    """Records that did not decode change nothing (their findings came with their batch):
    C skips them, where it handed each to the Python fallback (100,000 null-key records in
    a batch of a crafted segment made 100,000 Python calls)."""
    from sharestate.coordinator.shard import ShareShard
    from sharestate.coordinator.share_rules import rules_for
    from sharestate.replay.share_log import native_slots

    schemas = catalog.dialect("4.1")
    records = [RawRecord(i, 1000 + i, -1, key, None, ())
               for i, key in enumerate((None, b"\x00", b"\x7f\x7f", b"\x00\x00\x01"))]
    decoded = decode_key_values(schemas, catalog.SHARE_STATE_TOPIC, records)
    assert all(kv.error is not None for kv in decoded)
    shard = ShareShard(rules_for("4.1", 5))
    context = shard.native_context()
    assert context is not None
    asked: list[Any] = []
    history: list[Any] = []
    result = native.module.share_apply(context, records, decoded, None, None,
                                       native_slots(("4.1",)),
                                       lambda record, item: asked.append(record), history)
    assert (result, asked, history, list(shard)) == ((4, False, 3, 1003), [], [], [])


def test_native_share_apply_takes_one_key_object_per_share_partition() -> None:
    """A share-partition's records, in separate calls and between another's, take one
    ShareKey object (the one the shard's dicts hold: a lookup matches it by identity), where
    each record built and hashed its own; all else equals the Python path's."""
    from sharestate.log import BatchHeader
    from sharestate.replay.logs import END

    schemas = catalog.dialect("4.1")
    kind = schemas.topics[catalog.SHARE_STATE_TOPIC][1]

    def batch(*records: tuple[int, int]) -> tuple[Any, list[RawRecord], list[Any]]:
        raw = []
        for offset, partition in records:
            value = (0, 0, offset, 1, ((offset, offset, 2, 1, None),), None)
            key, data = encode_key_value(kind, ("g", _TOPIC_ID, partition, None), 0, value)
            raw.append(RawRecord(offset, 1000 + offset, -1, key, data, ()))
        header = BatchHeader(0, raw[0].offset, raw[-1].offset, 0, 0, 2, 0, True, "none",
                             "CreateTime", 0, 0, -1, 0, -1, False, False, len(raw), False)
        return header, raw, decode_key_values(schemas, catalog.SHARE_STATE_TOPIC, raw)

    batches = [batch((0, 1), (1, 1), (2, 2)), batch((3, 1), (4, 2))]
    in_c = _apply(batches, 5, END, True, in_c=True)
    assert in_c == _apply(batches, 5, END, True, in_c=False)
    keys = [entry[2] for _, entries in in_c[0] for entry in entries]
    assert keys[0] is keys[1] is keys[3] and keys[2] is keys[4] and keys[0] != keys[2]
    assert all(any(key is k for k in dict(in_c[2])) for key in keys)


# -- Columns: rows to Arrow buffers against `ColumnsPy` -------------------------------------

_INT64 = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from((2**63, -(2**63) - 1)))
_INT32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from((2**31, -(2**31) - 1)))
_BATCH_ROW = st.one_of(
    st.builds(StateBatch, _INT64, _INT64, _INT32, _INT32),
    st.tuples(_INT64, _INT64, _INT32, _INT32, st.none()),  # a decoded batch struct
    st.tuples(_INT64, _INT64, st.one_of(_INT32, st.just("7")), st.one_of(_INT32, st.none())),
    st.tuples(_INT64, _INT64, _INT32),  # too short
    st.lists(_INT32, min_size=4, max_size=4),  # not a tuple
)
_CELL = st.one_of(
    st.none(), _INT32, _INT64, st.booleans(), st.text(max_size=4), st.just("\ud800"),
    st.binary(max_size=6), st.just(1.5), st.lists(_BATCH_ROW, max_size=3).map(tuple),
    st.lists(_BATCH_ROW, max_size=2))
_COLUMNS_ROW = st.one_of(st.none(), st.tuples(_CELL, _CELL, st.one_of(
    st.none(), st.tuples(_CELL, _CELL)), _CELL))
_COLUMN_SPEC = st.tuples(st.sampled_from([(0,), (1,), (2, 0), (2, 1), (3,), (), (4,), (2, 5)]),
                         st.sampled_from([pa.int32(), pa.int64(), pa.bool_(), pa.string(),
                                          pa.binary(), BATCHES]))


def _built(specs: list[Any], rows: list[Any], *, pure: bool) -> tuple[Any, ...]:
    """What RowColumns makes of `rows` added one by one (each row's error, if any), taken
    twice (the second time empty)."""
    with pytest.MonkeyPatch.context() as patch:
        if pure:
            patch.setattr(native, "module", None)
        built = RowColumns(specs)
    outcomes: list[Any] = []
    for row in rows:
        try:
            built.rows.append(row)
            outcomes.append("added")
        except Exception as exc:  # the same exception from both, or the test fails
            outcomes.append((type(exc), str(exc)))
    count = len(built)
    taken = [(array.type, array.to_pylist(), array.null_count) for array in built.take()]
    return outcomes, count, taken, [array.to_pylist() for array in built.take()]


@settings(max_examples=1500, deadline=None)
@given(specs=st.lists(_COLUMN_SPEC, max_size=5), rows=st.lists(_COLUMNS_ROW, max_size=8))
def test_native_columns_match_python(specs: list[Any], rows: list[Any]) -> None:
    """Rows of every kind of value (nulls on the way, values at and beyond the int32 / int64
    bounds, strings that are not UTF-8, batches of every shape) into every kind of column:
    the same columns, and the same rows refused with the same errors, none of a refused
    row's values kept."""
    assert _built(specs, rows, pure=False) == _built(specs, rows, pure=True)


@settings(deadline=None)
@given(rows=st.lists(_COLUMNS_ROW, max_size=8))
def test_native_transpose_matches_python(rows: list[Any]) -> None:
    paths = ((0,), (1,), (2, 0), (2, 1), (3,))
    assert transpose(rows, paths) == transpose_py(rows, paths)


_TUPLE_COLUMN = st.one_of(
    st.tuples(st.just(pa.int32()), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just(pa.int64()), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(pa.bool_()), st.booleans()),
    st.tuples(st.just(pa.string()), st.sampled_from(["", "none", "gzip", "CreateTime", "é"])),
    st.tuples(st.none(), st.one_of(st.none(), st.integers(-1, 1), st.text(max_size=2))))


@settings(max_examples=500, deadline=None)
@given(columns=st.lists(st.tuples(_TUPLE_COLUMN, st.integers(0, 3)), max_size=6),
       n=st.integers(0, 20), data=st.data())
def test_native_tuples_match_python(columns: list[Any], n: int, data: st.DataObject) -> None:
    """Rows from Arrow arrays of every kind (sliced, runs of equal strings, non-ASCII) and
    constants: the same rows of the same values, in C and in Python."""
    arrays: list[Any] = []
    for (data_type, example), cut in columns:
        if data_type is None:
            arrays.append(example)  # a constant
            continue
        values = data.draw(st.lists(st.sampled_from([example, example, *(
            [0, 1] if pa.types.is_integer(data_type) else [True] if data_type == pa.bool_()
            else ["none"])]), min_size=n + cut, max_size=n + cut))
        arrays.append(pa.array(values, data_type).slice(cut))
    rows = tuples_of(tuple, n, arrays)
    assert rows == tuples_of_py(tuple, n, arrays)
    assert [tuple(map(type, row)) for row in rows] == [
        tuple(map(type, row)) for row in tuples_of_py(tuple, n, arrays)]
    if len(arrays) == len(StateBatch._fields):
        assert tuples_of(StateBatch, n, arrays) == rows
        assert {type(row) for row in tuples_of(StateBatch, n, arrays)} <= {StateBatch}


def test_native_tuples_refuse_nulls_and_other_lengths() -> None:
    for columns in ([pa.array([1, None])], [pa.array([1, 2, 3])]):
        with pytest.raises(ValueError):
            tuples_of(tuple, 2, columns)
    with pytest.raises(ValueError):  # a NamedTuple's every field
        tuples_of(StateBatch, 2, [pa.array([1, 2])])


def test_native_columns_read_records_as_their_tuples() -> None:
    """A segment's records read in C give the columns of the same RawRecord tuples (their
    keys and values taken from the segment's bytes in place)."""
    path = conformance_dir("kafka-4.4-dev") / "share_tombstones.log"
    with open(path, "rb") as stream:
        records = [r for item in read_batches(stream) if isinstance(item, Batch)
                   for r in item.records]
    assert records and not isinstance(records[0], tuple)
    specs = [((0,), pa.int64()), ((1,), pa.int64()), ((3,), pa.binary()), ((4,), pa.binary())]
    assert columns_of(records, specs) == columns_of([RawRecord(*r) for r in records], specs)


# -- lag_walk: the lag-history walk against `walk_batches_py` -------------------------------

_HISTORY = pa.schema([("group_id", pa.string()), ("topic_id", pa.string()),
                      ("partition", pa.int32()), ("state_partition", pa.int32()),
                      ("record_offset", pa.int64()), ("time", pa.int64()),
                      ("deleted", pa.bool_()), ("start_offset", pa.int64()),
                      ("complete", pa.int64()), ("state_end", pa.int64()),
                      ("resume", pa.string())])


_LAG = table("share_group_lag_history").arrow_schema()


def _history_batches(rows: list[HistoryRow], saved: dict[str, str],
                     size: int) -> list[pa.RecordBatch]:
    """Each group's saved walk (JSON) first, then its rows, in batches of `size` rows (so
    groups and moments span batches)."""
    items: list[dict[str, Any]] = []
    for group in sorted({r.group_id for r in rows} | set(saved)):
        if group in saved:
            items.append({"group_id": group, "resume": saved[group]})
        items += [r._asdict() for r in rows if r.group_id == group]
    return pa.Table.from_pylist(items, schema=_HISTORY).to_batches(max_chunksize=size)


def _walked(items: Iterator[pa.RecordBatch | GroupState]) -> tuple[list[str], list[GroupState]]:
    rows: list[str] = []
    states: list[GroupState] = []
    for item in items:
        if isinstance(item, GroupState):
            states.append(item)
        else:
            assert item.schema == _LAG
            rows += map(repr, item.to_pylist())
    return sorted(rows), sorted(states)


def test_native_lag_walk_matches_python_from_the_start_and_going_on() -> None:
    """Random histories (clocks stepping back, tombstones, SPSO -1, rows in one millisecond)
    against end offsets of every source, in batches of 1 to 1,000 rows: the same rows and
    saved walks from the start with a horizon, and going on from those saved walks."""
    for seed in range(200):
        rng = random.Random(seed)
        history, lines = _random_history(rng), timelines(_random_ends(rng))
        horizon, size = rng.randrange(50, 1_000), rng.choice((1, 3, 7, 1_000))
        names = {"T": "orders"}
        first = [r for r in history if r.time < rng.randrange(horizon, 1_100)]
        walked = _walked(walk_batches(_history_batches(first, {}, size), lines, names, horizon,
                                      _LAG))
        assert walked == _walked(walk_batches_py(_history_batches(first, {}, size), lines,
                                                 names, horizon, _LAG)), seed
        saved = {s.group_id: json.dumps(state_row(s, names, "run", 0, horizon))
                 for s in walked[1]}
        later = [r for r in history if r.time >= horizon]
        assert (_walked(walk_batches(_history_batches(later, saved, size), lines, names, None,
                                     _LAG))
                == _walked(walk_batches_py(_history_batches(later, saved, size), lines, names,
                                           None, _LAG))), seed


def test_native_lag_walk_gives_an_unknown_group_lag_outside_int64() -> None:
    """Share-partitions of damaged states lagging near 2^63 each: the group's sum is no
    int64. The C walk summed in int64 and wrapped (a lag of -2 for two of 2^63 - 1); the
    row's lag is unknown, as Python's is, and known again once the sum fits."""
    top = (1 << 63) - 1
    rows = [HistoryRow("g", "T", p, 0, p, 10 + p, False, 0, 0, top) for p in (0, 1)]
    rows.append(HistoryRow("g", "T", 1, 0, 2, 12, False, top, 0, top))  # lag 0 again
    lines = timelines([])
    walked = _walked(walk_batches(_history_batches(rows, {}, 2), lines, {}, None, _LAG))
    assert walked == _walked(walk_batches_py(_history_batches(rows, {}, 2), lines, {}, None,
                                             _LAG))
    groups = sorted((row["time"], row["lag"]) for row in map(ast.literal_eval, walked[0])
                    if row["scope"] == "group")
    assert groups == [(10, top), (11, None), (12, top)]
