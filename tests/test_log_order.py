"""Offset order (`sharestate.log.order`): a batch whose offsets go back or overlap what was
read is refused with an `offset_order` finding, a record outside its batch's range is a
`bad_record`, and one bad base offset costs its own batch only; every reader of a log (the
commands, the ingest task) says the same."""

from __future__ import annotations

import io
import json
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_dir

from sharestate import native
from sharestate.app.cli import main
from sharestate.log import (
    Batch,
    BatchRun,
    ControlRecord,
    LogFinding,
    RawRecord,
    build_batch,
    build_control_batch,
    discover,
    parse_control,
    read_batches,
)
from sharestate.log.order import OffsetOrder, Verdict
from sharestate.records.segment import QuietRun, detect_segment, quiet_runs
from sharestate.replay.logs import partition_logs
from sharestate.replay.share_log import ShareReplay
from sharestate.tables import bronze
from sharestate.tables.tasks import bronze_tables

SHARE = "__share_group_state"


def _read(data: bytes) -> list[Batch | LogFinding]:
    return list(read_batches(io.BytesIO(data)))


def _kafka_log(name: str = "share_txn.log") -> tuple[bytes, list[damage.Span]]:
    data = (conformance_dir("kafka-4.4-dev") / name).read_bytes()
    return data, damage.layout(data)


def _outcome(items: list[Batch | LogFinding]) -> tuple[list[int], list[tuple[str, int | None]]]:
    """The offsets of the records read, and (kind, position) of every finding."""
    offsets = [r.offset for i in items if isinstance(i, Batch) for r in i.records]
    found = [(f.kind, f.position) for i in items
             for f in ([i] if isinstance(i, LogFinding) else i.findings)]
    return offsets, found


def test_verdicts() -> None:
    order = OffsetOrder()
    assert order.verdict(0, 4) is Verdict.AHEAD
    order.advance(0, 4)
    assert [order.verdict(*r) for r in ((5, 9), (0, 4), (2, 3), (4, 6), (-1, 2))] == [
        Verdict.AHEAD, Verdict.BEHIND, Verdict.BEHIND, Verdict.OVERLAPS, Verdict.NEGATIVE]
    assert order.verdict(1 << 31, 1 << 31) is Verdict.BEYOND_SEGMENT
    order.new_segment()
    assert order.verdict(1 << 31, 1 << 31) is Verdict.AHEAD
    resumed = OffsetOrder(after=99)  # an earlier run applied up to 99
    assert (resumed.verdict(50, 99), resumed.verdict(100, 120)) == (Verdict.BEHIND,
                                                                     Verdict.AHEAD)


@pytest.fixture(params=["native", "pure"])
def twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(native, "module", None)
    return str(request.param)


def test_a_batch_copied_twice_is_read_once(twin: str) -> None:
    data, spans = _kafka_log()
    for span in spans:
        copied = damage.splice(data, span, data[span.position:span.position + span.size])
        offsets, found = _outcome(_read(copied))
        assert offsets == _outcome(_read(data))[0]
        assert found == [("offset_order", span.position + span.size)]


def test_swapped_batches_are_read_in_order(twin: str) -> None:
    data, spans = _kafka_log()
    for first, second in pairwise(spans):
        offsets, found = _outcome(_read(damage.swap(data, first, second)))
        assert offsets == sorted(set(offsets))
        [(kind, _)] = found
        assert kind == "offset_order"
        lost = {first.base_offset, second.base_offset} - set(offsets)
        assert len(lost) <= 1  # one of the two is refused (an empty one may lose nothing)


@pytest.mark.parametrize("bit", [0, 3, 17, 30, 31, 45, 62, 63])
def test_a_flipped_bit_of_a_base_offset_costs_one_batch(twin: str, bit: int) -> None:
    """Past the log's first two batches the flipped one is the one refused (or read, where
    its offsets still fit); at the start a small jump cannot be told from the next batches
    going back: those it jumps over may be the ones refused."""
    data, spans = _kafka_log()
    intact = [b for b in _read(data) if isinstance(b, Batch)]
    for i in (0, 1, 2, len(spans) // 2, len(spans) - 1):
        span = spans[i]
        flipped = damage.set_base_offset(data, span.position, span.base_offset ^ (1 << bit))
        items = [b for b in _read(flipped) if isinstance(b, Batch)]
        changed = [j for j, (got, want) in enumerate(zip(items, intact, strict=True))
                   if got != want]
        refused = [j for j in changed if items[j].records == []
                   and items[j].findings[-1].kind == "offset_order"]
        if i >= 2:
            assert changed in ([], [i]), (i, bit, changed)
            if changed and not refused:  # undetectable: it still fits between its neighbours
                shift = (span.base_offset ^ (1 << bit)) - span.base_offset
                assert [r.offset - shift for r in items[i].records] == [
                    r.offset for r in intact[i].records]
        else:
            reach = span.last_offset + (1 << bit)
            assert all(intact[j].header.base_offset <= reach for j in changed), (i, bit)
            assert refused or not changed, (i, bit, changed)


def test_a_batch_right_after_the_one_before_past_its_segments_span_is_refused(
        twin: str) -> None:
    """A batch starting right after the one before (the reader's usual case) whose last
    offset lies more than 2^31 - 1 past the segment's first is refused all the same."""
    before = b"".join(build_batch([RawRecord(o, 1000, -1, b"k", b"v", ())]) for o in (0, 1))
    far = build_batch([RawRecord(2, 1000, -1, b"k", b"v", ())], last_offset_delta=(1 << 31) - 1)
    after = build_batch([RawRecord(3, 1000, -1, b"k", b"v", ())])
    offsets, found = _outcome(_read(before + far + after))
    assert offsets == [0, 1, 3]
    assert found == [("offset_order", len(before))]


def _damaged_logs() -> list[bytes]:
    """Kafka's transactional log (control batches among data ones) and, past the native
    scanner's 64 batches a call, logs of one-record batches broken in each way the order
    checks: a gap at the start and in the middle, a batch going back, a copied batch, one
    past its segment's span, one failing its CRC."""
    kafka, spans = _kafka_log()
    small = [build_batch([RawRecord(o, 1000 + o, -1, b"k", b"v%d" % o, ())]) for o in
             range(5, 205)]
    far = build_batch([RawRecord(205, 1000, -1, b"k", b"v", ())],
                      last_offset_delta=(1 << 31) - 1)
    bad_crc = bytearray(small[120])
    bad_crc[-1] ^= 0xFF
    return [kafka, damage.swap(kafka, spans[3], spans[4]),
            b"".join(small), b"".join(small[:70] + small[71:]),
            b"".join([*small[:100], small[90], *small[100:]]),
            b"".join(small[:130] + small[129:]), b"".join([*small, far, *small[:3]]),
            b"".join([*small[:120], bytes(bad_crc), *small[121:]])]


def test_runs_of_batches_are_the_batches_one_by_one(twin: str) -> None:
    """A reader asking for runs gets the same batches and findings in the same order, the
    clean in-order ones gathered into `BatchRun`s (by the native scanner only)."""
    found_runs = 0
    for data in _damaged_logs():
        items = list(read_batches(io.BytesIO(data), runs=True))
        runs = [i for i in items if isinstance(i, BatchRun)]
        found_runs += len(runs)
        for run in runs:
            assert run.records == [r for b in run.batches for r in b.records]
            assert not any(b.findings or b.header.is_control for b in run.batches)
        flat = [b for i in items for b in (i.batches if isinstance(i, BatchRun) else [i])]
        assert flat == _read(data)
    assert (found_runs > 0) == (twin == "native")


def _aborted(data: bytes, spans: list[damage.Span]) -> bytes:
    """`data` with its first transaction marker an abort."""
    marker = next(s for s in spans if s.is_control)
    [batch] = _read(data[marker.position:marker.position + marker.size])
    assert isinstance(batch, Batch)
    h, [record] = batch.header, batch.records
    control = parse_control(record, h)
    assert isinstance(control, ControlRecord) and control.type == "COMMIT"
    abort = build_control_batch("ABORT", offset=h.base_offset, timestamp=record.timestamp,
                                coordinator_epoch=control.coordinator_epoch,
                                producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                                partition_leader_epoch=h.partition_leader_epoch)
    return data[:marker.position] + abort + data[marker.position + marker.size:]


def _share_logs() -> list[bytes]:
    """Kafka's share-state logs (uncompressed, compressed, with transactions, tombstones),
    its transactional one with the first transaction aborted, and damaged copies of its
    longest one: two batches swapped, one copied, a record that does not decode."""
    logs = [path.read_bytes() for path in sorted(conformance_dir("kafka-4.4-dev").glob(
        "share_*.log"))]
    data, spans = _kafka_log("share_replay_small.log")
    [batch] = _read(data[spans[20].position:spans[20].position + spans[20].size])
    assert isinstance(batch, Batch) and batch.records[0].value
    at = data.index(batch.records[0].value, spans[20].position)
    undecodable = bytearray(data)
    undecodable[at:at + 2] = b"\x7f\x7f"  # a value version no schema has
    damage.fix_crc(undecodable, spans[20].position)
    return [*logs, _aborted(*_kafka_log("share_txn.log")),
            damage.swap(data, spans[5], spans[6]),
            damage.splice(data, spans[9], data[spans[9].position:spans[9].position
                                               + spans[9].size]), bytes(undecodable)]


def test_a_replay_reads_runs_as_it_reads_batches(twin: str, tmp_path: Path) -> None:
    """A share replay's items (`PartitionLog.items`, runs of quiet batches decoded in one
    call) are its batches gathered, and replay to the same state, history and findings as
    the batches gathered one by one."""
    for n, data in enumerate(_share_logs()):
        folder = tmp_path / str(n) / f"{SHARE}-0"
        folder.mkdir(parents=True)
        (folder / "00000000000000000000.log").write_bytes(data)
        [log], _ = partition_logs(discover([folder]))
        items = list(log.items())
        assert [b for i in items for b in (i.batches() if isinstance(i, QuietRun) else [i])
                ] == list(log.batches())
        for run in (i for i in items if isinstance(i, QuietRun)):  # what makes it quiet
            assert not any(h.is_transactional or h.is_control for h in run.headers)
            assert all(end > start for start, end in pairwise([0, *run.ends]))
        replays, histories = [], []
        for read in (log.items(), quiet_runs(log.batches())):
            replay = ShareReplay.of_log(log, collect_history=True)
            history: list[Any] = []
            replay.run(read, history.extend)
            replays.append(replay.snapshot())
            histories.append(history)
        assert histories[0] == histories[1] and len(histories[0]) > 0
        assert replays[0].tables == replays[1].tables


@pytest.mark.parametrize(("offsets", "last_delta", "message"), [
    ((9,), 0, "offset delta -1 is outside 0 to 0"),
    ((10, 15), 3, "record 1: offset delta 5 is outside 1 to 3"),
    ((10, 12, 11), 2, "record 2: offset delta 1 is outside 3 to 2"),
    ((10, 10), 1, "record 1: offset delta 0 is outside 1 to 1")])
def test_a_record_outside_its_batch_is_a_finding(twin: str, offsets: tuple[int, ...],
                                                 last_delta: int, message: str) -> None:
    records = [RawRecord(o, 1000, -1, b"k", b"v%d" % o, ()) for o in offsets]
    batch = build_batch(records, base_offset=10, last_offset_delta=last_delta)
    [item] = _read(batch)
    assert isinstance(item, Batch) and item.header.crc_valid
    [finding] = item.findings
    assert finding.kind == "bad_record" and message in finding.message, finding.message
    assert all(10 <= r.offset <= 10 + last_delta for r in item.records)
    assert [r.offset for r in item.records] == sorted({r.offset for r in item.records})


# -- every reader says the same ------------------------------------------------------------


def _command(command: str, source: Path, work: Path, *extra: str
             ) -> tuple[int, list[dict[str, Any]], list[str]]:
    out, found = work / f"{command}.out", work / f"{command}.findings"
    status = main([command, str(source), "-o", str(out), "--findings", str(found), *extra])
    findings = [json.loads(line) for line in found.read_text("utf-8").splitlines()]
    return status, findings, out.read_text("utf-8").splitlines()


def _keys(findings: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter((f["source"], f["position"], f["offset"], f["kind"], f["message"])
                   for f in findings)


def test_commands_refuse_what_goes_back_and_agree(tmp_path: Path) -> None:
    """A copied batch, two swapped ones and a flipped bit in one log: decode, state, prune
    and the ingest task report the same offset_order findings; state equals the state of
    the intact log without the refused batches, never a batch applied twice."""
    data, spans = _kafka_log()
    damaged = damage.set_base_offset(data, spans[5].position, spans[5].base_offset ^ 1 << 62)
    damaged = damage.splice(damaged, spans[2], data[spans[2].position:spans[2].position +
                                                    spans[2].size])
    folder = tmp_path / f"{SHARE}-0"
    folder.mkdir()
    segment = folder / "00000000000000000000.log"
    segment.write_bytes(damaged)
    reference = tmp_path / "reference" / f"{SHARE}-0"
    reference.mkdir(parents=True)
    (reference / "00000000000000000000.log").write_bytes(damage.without(data, spans[5]))
    found = {}
    for command in ("decode", "state", "prune"):
        status, found[command], _ = _command(command, segment, tmp_path)
        assert status == 1, command
    assert _keys(found["decode"]) == _keys(found["state"]) == _keys(found["prune"])
    assert Counter(f["kind"] for f in found["decode"]) == Counter({"offset_order": 2})
    [read] = discover([segment])
    split = bronze.read_split(bronze.Split(read), "order", detection=detect_segment(read))
    errors = [row for table, rows in bronze_tables(split) if table == "decode_errors"
              for row in rows.to_pylist()]
    assert _keys(errors) == _keys(found["decode"])
    _, _, state = _command("state", segment, tmp_path)
    _, _, want = _command("state", reference / "00000000000000000000.log", tmp_path)
    assert state == want


def test_a_segment_repeating_the_one_before_is_refused_by_every_command(
        tmp_path: Path) -> None:
    """Two segments of one partition, the second starting with the first's last batch
    again: each command reads the partition's segments in order through one offset order."""
    data, spans = _kafka_log()
    folder = tmp_path / f"{SHARE}-0"
    folder.mkdir()
    cut = spans[4]
    (folder / "00000000000000000000.log").write_bytes(data[:cut.position + cut.size])
    later = folder / f"{cut.base_offset:020d}.log"
    later.write_bytes(data[cut.position:])
    found = {}
    for command in ("decode", "state"):
        status, found[command], _ = _command(command, folder, tmp_path)
        assert status == 1
        assert [(f["source"], f["position"], f["kind"]) for f in found[command]] == [
            (str(later), 0, "offset_order")]
    _, _, decoded = _command("decode", folder, tmp_path)
    offsets = [json.loads(line)["offset"] for line in decoded
               if json.loads(line)["error"] is None]
    assert len(offsets) == len(set(offsets))


@pytest.mark.parametrize("renamed", ["past_its_first_offset", "swapped"])
def test_a_segment_named_past_its_first_offset_is_a_finding_of_every_reader(
        renamed: str, tmp_path: Path) -> None:
    """Kafka names a segment after its first offset: a segment whose first batch lies below
    its file name's base offset is misnamed, a `segment_name` finding of decode, state and
    the ingest task alike, which still read its batches (a name below the first offset,
    as compaction leaves it, is no finding)."""
    data, spans = _kafka_log()
    first, second = spans[4], spans[9]
    parts = [data[:first.position], data[first.position:second.position],
             data[second.position:]]
    names = {"past_its_first_offset": [0, first.base_offset + 1, second.base_offset],
             "swapped": [0, second.base_offset, first.base_offset]}[renamed]
    folder = tmp_path / f"{SHARE}-0"
    folder.mkdir()
    for base, part in zip(names, parts, strict=True):
        (folder / f"{base:020d}.log").write_bytes(part)
    misnamed = str(folder / f"{names[1]:020d}.log")
    want = (misnamed, 0, first.base_offset, "segment_name")
    for command in ("decode", "state"):
        status, found, _ = _command(command, folder, tmp_path)
        assert status == 1
        assert want in [(f["source"], f["position"], f["offset"], f["kind"]) for f in found]
    [read] = [s for s in discover([folder]) if str(s.path) == misnamed]
    split = bronze.read_split(bronze.Split(read), "order", detection=detect_segment(read))
    errors = [row for table, rows in bronze_tables(split) if table == "decode_errors"
              for row in rows.to_pylist()]
    assert [(e["position"], e["offset"], e["kind"]) for e in errors] == [want[1:]]
    if renamed == "past_its_first_offset":
        _, _, decoded = _command("decode", folder, tmp_path)
        assert len([line for line in decoded if json.loads(line)["error"] is None]) == sum(
            span.records for span in spans)
