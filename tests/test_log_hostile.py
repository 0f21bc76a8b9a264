"""Bad bytes: each case is built from a real Kafka segment and must not lose good batches."""

from __future__ import annotations

import gzip
import io
import os
import random
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir
from crc32c import crc32c
from damage import fake_header, fix_crc, null_record_batch, set_count
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharestate import native
from sharestate.log import (
    Batch,
    LogFinding,
    RawRecord,
    build_batch,
    discover,
    encode_record,
    parse_control,
    parse_records,
    read_batches,
)
from sharestate.log.batch import COMPRESSION_NAMES
from sharestate.log.compression import compress
from sharestate.log.framing import LOG_OVERHEAD, V2_HEADER_SIZE


def read_all(data: bytes, **options: Any) -> list[Batch | LogFinding]:
    return list(read_batches(io.BytesIO(data), **options))


def fixture(name: str = "share_codec_none.log") -> bytes:
    return (conformance_dir("kafka-4.4-dev") / name).read_bytes()


def spans(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of every batch of a clean segment."""
    items = read_all(data)
    assert all(isinstance(i, Batch) and i.header.crc_valid for i in items)
    return [(i.header.position, i.header.size_in_bytes) for i in items if isinstance(i, Batch)]


def batches(items: list[Batch | LogFinding]) -> list[Batch]:
    return [i for i in items if isinstance(i, Batch)]


def findings(items: list[Batch | LogFinding]) -> list[LogFinding]:
    return [i for i in items if isinstance(i, LogFinding)]


def records(items: list[Batch | LogFinding]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in batches(items) for r in b.records]


def test_truncated_final_batch() -> None:
    data = fixture()
    last_position, _ = spans(data)[-1]
    items = read_all(data[:-100])
    good = read_all(data)
    assert batches(items) == batches(good)[:-1]
    [finding] = findings(items)
    assert finding.kind == "truncated_batch"
    assert finding.position == last_position
    assert finding.offset == batches(good)[-1].header.base_offset
    assert finding.raw_length == len(data) - 100 - last_position
    assert "declares" in finding.message


def test_batch_length_past_end_of_file() -> None:
    data = bytearray(fixture())
    layout = spans(bytes(data))
    position, _ = layout[1]
    struct.pack_into(">i", data, position + 8, 10 << 20)
    items = read_all(bytes(data))
    good = batches(read_all(fixture()))
    [finding] = findings(items)
    assert finding.kind == "truncated_batch"
    assert finding.position == position
    assert finding.raw_length == layout[1][1]
    assert f"resuming at {layout[2][0]}" in finding.message
    assert batches(items) == [good[0], *good[2:]]


def test_overlong_length_with_bad_crc_resumes_at_the_next_batch() -> None:
    data = bytearray(fixture())
    layout = spans(bytes(data))
    (first, _), (second, _), (third, _) = layout[1:4]
    struct.pack_into(">i", data, first + 8, third - first - LOG_OVERHEAD + 40)
    items = read_all(bytes(data))
    good = batches(read_all(fixture()))
    [finding] = findings(items)
    assert (finding.kind, finding.position, finding.raw_length) == (
        "bad_length", first, second - first)
    assert f"an intact batch starts at {second}" in finding.message
    assert batches(items) == [good[0], *good[2:]]


def test_garbage_between_batches() -> None:
    data = fixture()
    position, size = spans(data)[1]
    cut = position + size
    garbage = random.Random(7).randbytes(1000)
    items = read_all(data[:cut] + garbage + data[cut:])
    [finding] = findings(items)
    assert finding.position == cut
    assert finding.raw == garbage and finding.raw_length == len(garbage)
    assert finding.offset is None
    assert records(items) == records(read_all(data))
    assert [b.header.position for b in batches(items)][2] == cut + len(garbage)


def test_raw_bytes_are_capped() -> None:
    data = fixture()
    size = spans(data)[0][1]
    garbage = b"\xff" * 10_000
    items = read_all(data[:size] + garbage + data[size:], max_raw_bytes=64)
    [finding] = findings(items)
    assert finding.raw == b"\xff" * 64 and finding.raw_length == 10_000


def test_unknown_magic() -> None:
    data = bytearray(fixture())
    position, _ = spans(bytes(data))[2]
    data[position + 16] = 7
    items = read_all(bytes(data))
    good = batches(read_all(fixture()))
    [finding] = findings(items)
    assert finding.kind == "unknown_magic"
    assert finding.position == position
    assert "7" in finding.message
    assert batches(items) == good[:2] + good[3:]


def test_negative_length_and_trailing_bytes() -> None:
    data = fixture()
    size = spans(data)[0][1]
    bogus = struct.pack(">qi", 5, -20) + b"\x02" * 30
    items = read_all(data[:size] + bogus + data[size:] + b"\x00" * 9)
    first, second = findings(items)
    assert (first.kind, first.position, first.raw_length) == ("bad_length", size, len(bogus))
    assert second.kind == "trailing_bytes" and second.raw == b"\x00" * 9
    assert second.position == len(data) + len(bogus)
    assert records(items) == records(read_all(data))


def test_too_large_batch_is_skipped() -> None:
    data = bytearray(fixture())
    size = spans(bytes(data))[0][1]
    items = read_all(bytes(data), max_batch_bytes=size - 1)
    kinds = {f.kind for f in findings(items)}
    assert "batch_too_large" in kinds


def _bomb(codec: str, offset: int) -> bytes:
    record = RawRecord(offset, 1_700_000_000_000, -1, b"k", bytes(20 << 20), ())
    return build_batch([record], compression=codec)


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_decompression_bomb(codec: str) -> None:
    data = fixture()
    first, second = batches(read_all(data))[:2]
    size = first.header.size_in_bytes
    data = data[:size] + data[size + second.header.size_in_bytes:]  # room for the bomb
    bomb = _bomb(codec, second.header.base_offset)
    assert len(bomb) < 1 << 20
    stream = data[:size] + bomb + data[size:]
    tracemalloc.start()
    try:
        items = read_all(stream, max_inflated_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, peak
    assert findings(items) == []
    bombed = batches(items)[1]
    assert bombed.records == []
    [finding] = bombed.findings
    assert finding.kind == "decompression_limit"
    assert (finding.position, finding.offset) == (size, second.header.base_offset)
    assert records(items) == records(read_all(data))


def test_corrupt_compressed_payload() -> None:
    batch = bytearray(build_batch([RawRecord(0, 0, -1, b"k", b"v" * 100, ())],
                                  compression="gzip"))
    batch[V2_HEADER_SIZE + 12] ^= 0xFF
    [item] = read_all(bytes(batch))
    assert isinstance(item, Batch) and item.records == []
    assert [f.kind for f in item.findings] == ["crc_mismatch"]  # refused: not inflated


def test_bad_record_in_valid_batch_keeps_earlier_records() -> None:
    good = [RawRecord(10 + i, 1000 + i, -1, b"key", b"value%d" % i, ()) for i in range(3)]
    batch = bytearray(build_batch(good))
    # Make the last record's value length claim more bytes than the record holds, then
    # rebuild the CRC so that the batch itself is valid.
    last = V2_HEADER_SIZE + sum(len(encode_record(r, 10, 1000)) for r in good[:2])
    batch[batch.index(b"value2", last) - 1] = 40
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    [item] = read_all(bytes(batch))
    assert isinstance(item, Batch) and item.header.crc_valid
    assert item.records == good[:2]
    [finding] = item.findings
    assert finding.kind == "bad_record"
    assert "record 2" in finding.message
    assert finding.position == last


def _with_payload(batch: bytes, payload: bytes, codec: str) -> bytes:
    """`batch` holding `payload` (the records' bytes) under `codec`, its CRC valid."""
    return _with_packed(batch, payload if codec == "none" else compress(codec, payload), codec)


def _with_packed(batch: bytes, packed: bytes, codec: str) -> bytes:
    """`batch` holding the payload `packed` (compressed with `codec`), its CRC valid."""
    out = bytearray(batch[:V2_HEADER_SIZE] + packed)
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    out[22] = (out[22] & ~7) | COMPRESSION_NAMES.index(codec)
    fix_crc(out, 0)
    return bytes(out)


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_bad_record_in_a_valid_batch_spoils_only_itself(
        pure: bool, codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose key length, offset delta or length is wrong in a batch whose CRC
    holds is a finding; the records after it, which its length or its fields still frame,
    are read (they were lost). Where they do not all parse to the batch's end, or go back
    in offset order, only those before it are kept, as before."""
    if pure:
        monkeypatch.setattr(native, "module", None)
    good = [RawRecord(10 + i, 1000 + i, -1, b"k%d" % i, b"value%d" % i, ()) for i in range(5)]
    batch = build_batch(good)
    encoded = [encode_record(r, 10, 1000) for r in good]
    at = sum(map(len, encoded[:2]))  # record 2 in the payload
    cases = {  # the payload's bytes changed, and the records kept
        "key length": ({at + 4: 0x7E}, good[:2] + good[3:]),  # 63 bytes: past the record
        "offset delta": ({at + 3: 2 * 9}, good[:2] + good[3:]),  # 9: past the last delta
        "record length": ({at: encoded[2][0] + 2}, good[:2] + good[3:]),  # one byte more
        "length's size": ({at: encoded[2][0] | 0x80}, good[:2] + good[3:]),  # a byte more
        "two bad": ({at + 4: 0x7E, at + len(encoded[2]) + len(encoded[3]) + 4: 0x7E},
                    good[:2]),  # records 2 and 4: the rest does not parse
        "order": ({at + 3: 2 * 1, at + len(encoded[2]) + 3: 2 * 1}, good[:2]),  # 3 is at 1
    }
    for label, (changes, kept) in cases.items():
        payload = bytearray(b"".join(encoded))
        for where, byte in changes.items():
            payload[where] = byte
        [item] = read_all(_with_payload(batch, bytes(payload), codec))
        assert isinstance(item, Batch) and item.header.crc_valid, label
        assert item.records == kept, label
        [finding] = item.findings
        assert finding.kind == "bad_record" and finding.message.startswith("record 2: "), label
        assert ("the 2 records after it are read" in finding.message) == (len(kept) == 4)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "zstd"])
def test_bytes_after_whole_frames_of_a_payload_spoil_no_record(codec: str) -> None:
    """A payload (CRC valid) whose frames (gzip members, xerial snappy blocks, zstd frames)
    end whole but are followed by bytes that do not inflate keeps the records of those
    frames, with a decompression_failed finding saying so (every record was lost); bytes
    that fail inside the only frame still give none."""
    good = [RawRecord(10 + i, 1000 + i, -1, b"k%d" % i, b"value%d" % i, ()) for i in range(5)]
    batch = build_batch(good)
    plain = b"".join(encode_record(r, 10, 1000) for r in good)
    two = encode_record(good[0], 10, 1000) + encode_record(good[1], 10, 1000)
    first = compress(codec, two)  # one whole frame of two records, then bytes that are not
    junk = b"\x1f\x8b\x08" + bytes(5) if codec == "gzip" else b"\x00\x00\x00\x05junk!"
    for payload, kept in ((first + junk, good[:2]), (compress(codec, plain) + junk, good),
                          (compress(codec, plain)[:-2], [])):
        [item] = read_all(_with_packed(batch, payload, codec))
        assert isinstance(item, Batch) and item.header.crc_valid
        assert item.records == kept
        [finding] = item.findings
        assert finding.kind == "decompression_failed", finding
        assert (f"the {len(kept)} records of the whole frames before it are read"
                in finding.message) == bool(kept), finding.message


def test_parse_records_rejects_overlong_varint() -> None:
    buf = b"\xff\xff\xff\xff\xff\x01" + b"\x00" * 20
    parsed, error = parse_records(buf, 0, len(buf), 1, 0, 0, 0, 0)
    assert parsed == [] and error is not None and "longer than 5 bytes" in error[0]
    parsed, error = parse_records(b"", 0, 0, -1, 0, 0, 0, 0)
    assert parsed == [] and error == ("negative record count -1", 0)


def test_parse_records_reports_leftover_bytes() -> None:
    batch = build_batch([RawRecord(0, 0, 0, None, b"v", ())], base_sequence=0)
    buf = batch + b"\x00\x00"
    parsed, error = parse_records(buf, V2_HEADER_SIZE, len(buf), 1, 0, 0, 0, 0)
    assert len(parsed) == 1 and error == ("2 bytes left after the last of 1 records", len(batch))


def test_sequence_wraps_like_kafka() -> None:
    batch = build_batch([RawRecord(i, 0, 0, None, b"", ()) for i in range(3)],
                        base_sequence=0x7FFFFFFF)
    [item] = read_all(batch)
    assert isinstance(item, Batch)
    assert [r.sequence for r in item.records] == [0x7FFFFFFF, 0, 1]


def test_bad_control_records_are_findings() -> None:
    batch = build_batch([RawRecord(5, 0, -1, b"\x00\x00\x00\x09", b"\x00\x00\x00\x00\x00\x01",
                                   ()),
                         RawRecord(6, 0, -1, b"\x00", None, ()),
                         RawRecord(7, 0, -1, b"\x00\x00\x00\x01", b"\x00", ()),
                         RawRecord(8, 0, -1, b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01",
                                   ())],
                        is_control=True, is_transactional=True, producer_id=9)
    [item] = read_all(batch)
    assert isinstance(item, Batch)
    results = [parse_control(r, item.header) for r in item.records]
    assert all(isinstance(r, LogFinding) for r in results)
    assert [r.kind for r in results if isinstance(r, LogFinding)] == [
        "unknown_control_type", "bad_control_record", "bad_control_record",
        "bad_control_record"]
    assert [r.offset for r in results if isinstance(r, LogFinding)] == [5, 6, 7, 8]


# --- property tests ----------------------------------------------------------------------

SEGMENTS = ("share_codecs_mixed.log", "share_txn.log", "consumer_offsets_records.log")


def _check_stream(data: bytes, **options: Any) -> list[Batch | LogFinding]:
    items = read_all(data, **options)
    positions = [i.header.position if isinstance(i, Batch) else i.position for i in items]
    assert positions == sorted(set(positions))
    for item in items:
        for finding in [item] if isinstance(item, LogFinding) else item.findings:
            assert len(finding.raw) <= min(finding.raw_length, 4096)
            assert finding.kind and finding.message
    return items


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=80)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20), st.integers(1, 200)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.just(0)),
)


def _mutate(data: bytes, ops: list[tuple[str, int, Any]]) -> bytes:
    out = bytearray(data)
    for op, where, arg in ops:
        at = where % (len(out) + 1)
        if op == "flip" and at < len(out):
            out[at] ^= arg
        elif op == "insert":
            out[at:at] = arg
        elif op == "delete":
            del out[at:at + arg]
        elif op == "truncate":
            del out[at:]
    return bytes(out)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEGMENTS), st.lists(mutation, min_size=1, max_size=6),
       st.sampled_from([1 << 20, 97]))
def test_mutations_never_raise(name: str, ops: list[tuple[str, int, Any]], chunk: int) -> None:
    _check_stream(_mutate(fixture(name), ops), chunk_bytes=chunk,
                  max_inflated_bytes=1 << 16)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(SEGMENTS), st.integers(0, 1 << 20), st.integers(1, 255))
def test_one_changed_byte_spoils_only_its_batch(name: str, where: int, xor: int) -> None:
    data = fixture(name)
    at = where % len(data)
    changed = bytearray(data)
    changed[at] ^= xor
    items = _check_stream(bytes(changed))
    hit = next(p for p, size in spans(data) if p <= at < p + size)
    expected = [b for b in batches(read_all(data)) if b.header.position != hit]
    survivors = [b for b in batches(items) if b.header.position != hit]
    if at < 8:  # the first batch's base offset: at a log's start, a jump ahead cannot be
        # told from the batches it jumps over going back (sharestate.log.order)
        first = batches(read_all(data))[0].header
        reach = struct.unpack_from(">q", changed)[0] + first.last_offset - first.base_offset
        expected = [b for b in expected if b.header.base_offset > reach]
        survivors = [b for b in survivors if b.header.base_offset > reach]
    assert survivors == expected


def test_worst_case_garbage_terminates() -> None:
    # Every byte a plausible magic and every length plausible: the scan must still end.
    blob = b"\xff" * 9 + (struct.pack(">qi", 0, 49) + b"\x00" * 4 + b"\x02") * 5000
    items = _check_stream(blob + fixture()[:LOG_OVERHEAD + 5])
    [finding] = items
    assert isinstance(finding, LogFinding) and finding.raw_length == len(blob) + 17


def test_cut_gzip_stream_ends_with_a_read_error(tmp_path: Path) -> None:
    data = fixture()
    packed = gzip.compress(data)
    path = tmp_path / "00000000000000000000.log.gz"
    path.write_bytes(packed[: len(packed) * 2 // 3])
    [segment] = discover([path])
    with segment.open() as stream:
        items = list(read_batches(stream, chunk_bytes=512))
    assert isinstance(items[-1], LogFinding) and items[-1].kind == "read_error"
    assert "the gzip stream is cut" in items[-1].message
    got = batches(items)
    assert got and got == batches(read_all(data))[:len(got)]


def test_unknown_codec_id_is_a_finding() -> None:
    batch = bytearray(build_batch([RawRecord(0, 0, -1, b"k", b"v", ())]))
    batch[22] |= 5
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    [item] = read_all(bytes(batch))
    assert isinstance(item, Batch) and item.header.crc_valid
    assert item.header.compression == "unknown" and item.records == []
    assert [f.kind for f in item.findings] == ["unknown_compression"]


# --- refused batches, covered batches, cut streams, record-count bound -------------------


def test_crc_mismatch_refuses_the_batch() -> None:
    data = bytearray(fixture())
    position, size = spans(bytes(data))[1]
    data[position + size - 10] ^= 0x01  # inside the last record's value
    items = read_all(bytes(data))
    good = batches(read_all(fixture()))
    bad = batches(items)[1]
    assert not bad.header.crc_valid and bad.records == []
    [finding] = bad.findings
    assert (finding.kind, finding.position, finding.offset) == (
        "crc_mismatch", position, bad.header.base_offset)
    assert finding.raw_length == size
    assert f"its {len(good[1].records)} records" in finding.message
    assert "not read" in finding.message
    assert [b for i, b in enumerate(batches(items)) if i != 1] == good[:1] + good[2:]


@pytest.mark.parametrize("name", ["share_txn.log", "consumer_offsets_txn.log"])
def test_a_length_ending_on_a_batch_start_hides_no_batch(name: str) -> None:
    """The declared length runs over the next batch and ends where the one after starts."""
    data = bytearray(fixture(name))
    layout = spans(bytes(data))
    (first, first_size), (_, covered_size) = layout[1:3]
    struct.pack_into(">i", data, first + 8, first_size + covered_size - LOG_OVERHEAD)
    items = read_all(bytes(data))
    good = batches(read_all(fixture(name)))
    assert batches(items) == [good[0], *good[2:]]
    [finding] = findings(items)
    assert (finding.kind, finding.position, finding.raw_length) == (
        "bad_length", first, first_size)
    assert finding.offset == good[1].header.base_offset


def _cut_gzip(tmp_path: Path, packed: bytes) -> list[Batch | LogFinding]:
    path = tmp_path / "00000000000000000000.log.gz"
    path.write_bytes(packed)
    [segment] = discover([path])
    with segment.open() as stream:
        return list(read_batches(stream))


def test_cut_gzip_reads_every_batch_that_decompresses(tmp_path: Path) -> None:
    data = fixture("share_replay_small.log")
    packed = gzip.compress(data)
    cut = packed[: len(packed) * 2 // 3]
    readable = zlib.decompressobj(31).decompress(cut)
    items = _cut_gzip(tmp_path, cut)
    expected = read_all(readable)
    assert batches(items) == batches(expected) and len(batches(expected)) > 50
    assert [f.kind for f in findings(items)] == ["truncated_batch", "read_error"]
    error = findings(items)[-1]
    assert error.position == len(readable)
    assert f"after {len(readable)} bytes" in error.message
    assert f"{len(cut)} compressed bytes" in error.message


def test_gzip_with_trailing_garbage_reads_everything(tmp_path: Path) -> None:
    data = fixture("share_replay_small.log")
    items = _cut_gzip(tmp_path, gzip.compress(data) + b"not gzip" * 8)
    assert batches(items) == batches(read_all(data))
    [error] = findings(items)
    assert error.kind == "read_error" and error.position == len(data)
    assert "64 bytes after the gzip stream" in error.message


def test_two_gzip_members_are_one_stream(tmp_path: Path) -> None:
    data = fixture("share_replay_small.log")
    half = len(data) // 2
    items = _cut_gzip(tmp_path, gzip.compress(data[:half]) + gzip.compress(data[half:]))
    assert items == read_all(data)


def test_a_batch_of_more_records_than_the_limit_is_refused() -> None:
    data = fixture()
    big = null_record_batch(10_000, 5000)
    items = read_all(data + big, max_batch_records=1000)
    assert batches(items)[:-1] == batches(read_all(data))
    last = batches(items)[-1]
    assert last.records == [] and last.header.record_count == 5000
    [finding] = last.findings
    assert (finding.kind, finding.position) == ("too_many_records", len(data))
    assert "5000 records" in finding.message and "1000" in finding.message
    [whole] = batches(read_all(big, max_batch_records=5000))
    assert len(whole.records) == 5000 and not whole.findings


def test_six_million_null_records_keep_memory_flat(tmp_path: Path) -> None:
    path = tmp_path / "bomb.log"
    path.write_bytes(fixture() + null_record_batch(10_000, 6_000_000))
    probe = ("import sys\nfrom pathlib import Path\nfrom sharestate.app.cli import main\n"
             "status = main(sys.argv[1:])\n"  # VmHWM: this process's peak (ru_maxrss is not:
             "peak = [line.split()[1] for line in Path('/proc/self/status').read_text()"
             ".splitlines() if line.startswith('VmHWM')][0]\n"  # it outlives exec on Linux)
             "print(status, peak)\n")
    for command in ("decode", "state"):
        done = subprocess.run([sys.executable, "-c", probe, command, str(path), "-o",
                               os.devnull], capture_output=True, text=True, timeout=120,
                              check=False)
        status, peak_kib = map(int, done.stdout.split())
        assert status == 1, done.stderr
        assert peak_kib < 200 << 10, (command, peak_kib)
    assert "too_many_records" in done.stderr  # state lists its findings


@pytest.mark.timeout(120)
def test_resync_crosses_20_mib_of_0x01() -> None:
    data = fixture()
    size = spans(data)[0][1]
    items = read_all(data[:size] + b"\x01" * (20 << 20) + data[size:])
    assert records(items) == records(read_all(data))
    [finding] = findings(items)
    assert finding.raw_length == 20 << 20


@pytest.mark.timeout(120)
def test_zeros_then_a_stray_byte_at_the_end_are_one_finding() -> None:
    """(Zeros alone to the end are a preallocated segment's unwritten tail, no finding:
    tests/test_log_preallocated.py.)"""
    data = fixture()
    items = read_all(data + bytes(4 << 20) + b"\x01")
    assert batches(items) == batches(read_all(data))
    [finding] = findings(items)
    assert (finding.position, finding.raw_length) == (len(data), (4 << 20) + 1)
    assert "no valid batch follows" in finding.message


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("pure", "mib"), [(False, 16), (True, 4)], ids=["native", "pure"])
def test_repeated_fake_headers_cost_linear_work(pure: bool, mib: int,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """One fake header repeated over `mib` MiB, twice: every copy passes the cheap checks
    and declares `mib` MiB, so checking each copy's CRC over its length would cost
    `mib` MiB times a copy every 63 bytes. The CRCs come from running checkpoints
    instead, and an intact batch among the copies is still found."""
    if pure:
        monkeypatch.setattr(native, "module", None)
    fakes = fake_header(mib << 20) * ((mib << 20) // 63)
    intact = build_batch([RawRecord(7, 1_700_000_000_000, -1, b"k", b"v", ())])
    data = fakes + intact + fakes
    started = time.process_time()
    items = read_all(data)
    assert time.process_time() - started < 20
    assert records(items) == [(7, b"k", b"v")]
    assert batches(items)[-1].header.position == len(fakes)
    covered = sum(i.raw_length if isinstance(i, LogFinding) else i.header.size_in_bytes
                  for i in items)
    assert covered == len(data)  # every byte is a batch or in a finding


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_count_that_disagrees_with_the_payload_is_a_finding(
        pure: bool, codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's iterator fails on a batch whose records end before its count does or go on
    after it; a batch declaring none it does not read at all. Each is a finding here, with
    a valid CRC too, and the records read before the mismatch are kept. Its bytes are those
    after the records read, or the batch (whose header declares the count) when none are
    left (they were empty)."""
    if pure:
        monkeypatch.setattr(native, "module", None)
    three = [RawRecord(10 + i, 1000, -1, b"k%d" % i, b"v", ()) for i in range(3)]
    batch = build_batch(three, compression=codec)
    cases = {0: ([], "batch declares 0 records but holds"),
             1: (three[:1], "bytes left after the last of 1 records"),
             5: (three, "batch ends after 3 of 5 records")}
    for count, (kept, message) in cases.items():
        [item] = read_all(set_count(batch, 0, count, crc=True))
        assert isinstance(item, Batch) and item.header.crc_valid
        assert item.records == kept
        [finding] = item.findings
        assert finding.kind == "bad_record" and message in finding.message, finding
        assert finding.raw and finding.raw_length == len(finding.raw), finding
        if count == 5:
            assert (finding.position, finding.raw) == (0, set_count(batch, 0, count, crc=True))
    [whole] = read_all(set_count(batch, 0, 3, crc=True))
    assert isinstance(whole, Batch) and whole.records == three and not whole.findings


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_a_marker_declaring_no_records_is_a_finding(pure: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An ABORT marker whose count says 0 (CRC valid) is not read, and says so."""
    if pure:
        monkeypatch.setattr(native, "module", None)
    data = fixture("share_txn.log")
    marker = next(i for i in batches(read_all(data)) if i.header.is_control)
    position = marker.header.position
    size = marker.header.size_in_bytes
    changed = set_count(data, position, 0, crc=True)
    items = read_all(changed)
    refused = next(b for b in batches(items) if b.header.position == position)
    assert refused.records == []
    [finding] = refused.findings
    assert (finding.kind, finding.position, finding.offset) == (
        "bad_record", position + V2_HEADER_SIZE, marker.header.base_offset)
    assert finding.raw == data[position + V2_HEADER_SIZE:position + size]
    assert [b for b in batches(items) if b.header.position != position] == \
        [b for b in batches(read_all(data)) if b.header.position != position]
