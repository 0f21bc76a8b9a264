"""The hostile-input suite: a mutation corpus over every fixture segment, through every
command and the pipeline's ingest task.

Each fixture is damaged in many ways (seeded, so every run reads the same corpus), laid out
as a partition directory and read by `decode`, `state`, `prune`, `offsets` and the ingest
task the Spark job runs on its executors (`tables.tasks.bronze_tables`). For every damaged
segment:

- nothing raises and the status is 0 without findings, 1 with them;
- every command, whichever topic it answers for, and the ingest task's `decode_errors`,
  report the same findings (segment, position, offset, kind, message);
- every batch the damage did not touch is read, before and after the damage, exactly as
  `decode` prints it from the intact segment.

The large (250,000-record) fixtures are also damaged and read in processes of their own,
whose memory is measured. Hangs fail through the time limits.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import subprocess
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharestate.app.cli import main
from sharestate.log import Batch, discover, read_batches
from sharestate.log.builder import SegmentWriter, build_batch
from sharestate.records.segment import detect_segment
from sharestate.tables import bronze
from sharestate.tables.tasks import bronze_tables

pytestmark = pytest.mark.timeout(900)

SHARE = "__share_group_state"
OFFSETS = "__consumer_offsets"
READERS = ("state", "prune", "offsets")
"""Every command reads every segment it is given and reports its findings, whichever topic
it answers for (state and prune replay `__share_group_state`, offsets `__consumer_offsets`,
and each reads the other topic's segments for their findings only)."""


def _fixtures(large: bool) -> list[Path]:
    root = conformance_root()
    if not root.is_dir():
        return []
    found = sorted([*root.glob("*/*.log"), *root.glob("*/*.log.gz")])
    return [p for p in found if ("share_replay_large" in p.name) == large]


def _topic(path: Path) -> str:
    return OFFSETS if path.name.startswith("consumer_offsets") else SHARE


def _dialect(path: Path) -> str:
    """The fixture's dialect, pinned: a damaged sample may not tell it as the whole did."""
    return "4.0" if path.parent.name == "kafka-4.0-dev" else "4.1"


@dataclass(frozen=True)
class Edit:
    """Original bytes [start, end) replaced by `data`."""

    start: int
    end: int
    data: bytes


def apply(original: bytes, edits: list[Edit]) -> bytes:
    out = bytearray(original)
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        out[edit.start:edit.end] = edit.data
    return bytes(out)


def touched(span: damage.Span, edits: list[Edit]) -> bool:
    """Whether an edit changes the batch (an insertion at its edge does not)."""
    first, end = span.position, span.position + span.size
    return any(e.start < end and first < e.end if e.end > e.start
               else first < e.start < end for e in edits)


Mutation = Callable[[bytes, list[damage.Span], random.Random], list[Edit]]


def _flips(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    return [Edit(at, at + 1, bytes([data[at] ^ rng.randrange(1, 256)]))
            for at in rng.sample(range(len(data)), min(3, len(data)))]


def _truncate(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    at = rng.randrange(1, len(data))
    return [Edit(at, len(data), b"")]


def _garbage(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    at = rng.choice([rng.randrange(len(data)), rng.choice(spans).position])
    return [Edit(at, at, rng.randbytes(rng.randrange(1, 300)))]


def _delete(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    at = rng.randrange(len(data))
    return [Edit(at, min(len(data), at + rng.randrange(1, 200)), b"")]


def _zeros(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    at = rng.randrange(len(data))
    size = rng.choice([100, 5000, 70_000])
    return [Edit(at, min(len(data), at + size), bytes(size))]


def _ones(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    at = rng.choice(spans).position
    return [Edit(at, at, b"\x01" * rng.choice([17, 3000, 70_000]))]


def _length(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    i = rng.randrange(len(spans))
    span = spans[i]
    choices = [-1, 0, 13, 48, span.size - 13, span.size - 11, 1 << 30, rng.randrange(1 << 31)]
    if i + 1 < len(spans):  # run over the next batch, to its end or into the one after
        choices += [span.size + spans[i + 1].size - 12, span.size + spans[i + 1].size]
    return [Edit(span.position + 8, span.position + 12,
                 rng.choice(choices).to_bytes(4, "big", signed=True))]


def _count(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    span = rng.choice(spans)
    count = rng.choice([0, -1, -(1 << 31), 1 << 20, span.records + 1, max(0, span.records - 1)])
    changed = damage.set_count(data, span.position, count, crc=rng.random() < 0.5)
    return [Edit(span.position + 17, span.position + 61, changed[span.position + 17:
                                                                 span.position + 61])]


def _codec(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    span = rng.choice(spans)
    changed = damage.set_codec(data, span.position, rng.choice([1, 2, 3, 4, 5, 6, 7]))
    return [Edit(span.position + 17, span.position + 23, changed[span.position + 17:
                                                                 span.position + 23])]


def _payload(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    span = rng.choice([s for s in spans if s.size > 70] or spans)
    changed = damage.corrupt_payload(data, span)
    return [Edit(span.position, span.position + span.size,
                 changed[span.position:span.position + span.size])]


def _magic(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    span = rng.choice(spans)
    return [Edit(span.position + 16, span.position + 17, bytes([rng.choice([0, 1, 3, 0xFF])]))]


def _duplicate(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    span = rng.choice(spans)
    end = span.position + span.size
    return [Edit(end, end, data[span.position:end])]


def _many_records(data: bytes, spans: list[damage.Span], rng: random.Random) -> list[Edit]:
    return [Edit(len(data), len(data), damage.null_record_batch(spans[-1].last_offset + 1,
                                                                300_000))]


MUTATIONS: dict[str, tuple[Mutation, int]] = {
    "flips": (_flips, 4), "truncate": (_truncate, 2), "garbage": (_garbage, 3),
    "delete": (_delete, 2), "zeros": (_zeros, 2), "ones": (_ones, 1), "length": (_length, 4),
    "count": (_count, 3), "codec": (_codec, 2), "payload": (_payload, 1),
    "magic": (_magic, 2), "duplicate": (_duplicate, 1), "many_records": (_many_records, 1),
}
"""Each mutation, and how many seeded variants of it each fixture gets."""


# --- running the commands ---------------------------------------------------------------

Key = tuple[Any, ...]


def _key(source: Any, position: Any, offset: Any, kind: Any, message: Any) -> Key:
    return (source, position, offset, kind, message)


@dataclass
class Reading:
    """What the commands made of one segment."""

    status: dict[str, int]
    findings: dict[str, Counter[Key]]
    rows: list[dict[str, Any]]


def _command(command: str, path: Path, work: Path, dialect: str
             ) -> tuple[int, Counter[Key], list[dict[str, Any]]]:
    out, found = work / f"{command}.out", work / f"{command}.findings"
    status = main([command, str(path), "-o", str(out), "--findings", str(found), "--dialect",
                   dialect])
    findings = Counter(_key(f["source"], f["position"], f["offset"], f["kind"], f["message"])
                       for f in map(json.loads, found.read_text("utf-8").splitlines())
                       if f["position"] != -1)  # -1: the replay's own, not the bytes'
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    return status, findings, rows


def _ingest(path: Path, dialect: str) -> tuple[Counter[Key], int]:
    """The ingest task's decode_errors (as findings) and its log_records count."""
    [segment] = discover([path])
    errors: Counter[Key] = Counter()
    records = 0
    split = bronze.read_split(bronze.Split(segment), "hostile",
                              detection=detect_segment(segment, dialect_name=dialect))
    for table, rows in bronze_tables(split):
        if table == "decode_errors":
            errors.update(_key(r["source"], r["position"], r["offset"], r["kind"],
                               r["message"]) for r in rows.to_pylist())
        elif table == "log_records":
            records += rows.num_rows
    return errors, records


def read_everywhere(path: Path, topic: str, work: Path, dialect: str) -> Reading:
    status: dict[str, int] = {}
    findings: dict[str, Counter[Key]] = {}
    status["decode"], findings["decode"], rows = _command("decode", path, work, dialect)
    for command in READERS:
        status[command], findings[command], _ = _command(command, path, work, dialect)
    findings["ingest"], records = _ingest(path, dialect)
    assert records == sum(1 for r in rows if r["timestamp"] is not None)  # record rows
    return Reading(status, findings, rows)


def check(path: Path, topic: str, work: Path, dialect: str, intact_rows: Counter[str]
          ) -> Reading:
    """Every claim of the suite about one damaged segment."""
    reading = read_everywhere(path, topic, work, dialect)
    decode = reading.findings["decode"]
    for command, found in reading.findings.items():
        assert found == decode, (command, path)
    assert reading.status["decode"] == (1 if decode else 0), path
    for command, status in reading.status.items():  # replay may find more (epochs, ...)
        assert status == 1 if decode else status in (0, 1), (command, status, path)
    assert all(k[0] == str(path) for k in decode)
    read = Counter(json.dumps(r, sort_keys=True) for r in reading.rows if r["error"] is None)
    missing = intact_rows - read
    assert not missing, (path, list(missing)[:3])
    return reading


def _rows_by_batch(path: Path, work: Path, dialect: str) -> dict[tuple[int, int], list[str]]:
    """`decode`'s rows of the records of an intact segment that decode (some fixtures hold
    records of unknown types on purpose), by (base offset, last offset) of their batch."""
    _, _, rows = _command("decode", path, work, dialect)
    grouped: dict[tuple[int, int], list[str]] = {}
    for row in rows:
        if row["error"] is not None:
            continue
        batch = row["batch"]
        grouped.setdefault((batch["base_offset"], batch["last_offset"]), []).append(
            json.dumps(row, sort_keys=True))
    return grouped


def _layout_dir(work: Path, topic: str, name: str) -> Path:
    folder = work / name / f"{topic}-0"
    folder.mkdir(parents=True)
    return folder / "00000000000000000000.log"


def _corpus(fixture: Path) -> Iterator[tuple[str, list[Edit]]]:
    original = _plain(fixture)
    spans = damage.layout(original)
    for name, (mutate, variants) in MUTATIONS.items():
        for seed in range(variants):
            rng = random.Random(f"{fixture.parent.name}/{fixture.name}/{name}/{seed}")
            yield f"{name}{seed}", mutate(original, spans, rng)


def _plain(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


# --- the corpus over the small fixtures --------------------------------------------------


@pytest.mark.parametrize("fixture", _fixtures(large=False),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_mutation_corpus(fixture: Path, tmp_path: Path) -> None:
    topic = _topic(fixture)
    original = _plain(fixture)
    spans = damage.layout(original)
    intact = _layout_dir(tmp_path, topic, "intact")
    intact.write_bytes(original)
    by_batch = _rows_by_batch(intact, tmp_path, _dialect(fixture))
    seen_findings = 0
    for label, edits in _corpus(fixture):
        path = _layout_dir(tmp_path, topic, label)
        path.write_bytes(apply(original, edits))
        untouched = Counter(row for span in spans if not touched(span, edits)
                            for row in by_batch.get((span.base_offset, span.last_offset), []))
        reading = check(path, topic, tmp_path, _dialect(fixture), untouched)
        seen_findings += bool(reading.findings["decode"])
    assert seen_findings >= len(list(_corpus(fixture))) * 3 // 4


def test_a_gzipped_segment_damaged_inside_reads_like_the_plain_one(tmp_path: Path) -> None:
    """Damage in the inflated bytes of a `.log.gz` is found as in a plain segment."""
    fixture = conformance_root() / "kafka-4.4-dev" / "share_txn.log"
    if not fixture.is_file():
        pytest.skip(f"{fixture} not found")
    original = fixture.read_bytes()
    for label, edits in list(_corpus(fixture))[::3]:
        data = apply(original, edits)
        plain = _layout_dir(tmp_path, SHARE, f"plain-{label}")
        plain.write_bytes(data)
        packed = _layout_dir(tmp_path, SHARE, f"packed-{label}").with_suffix(".log.gz")
        packed.write_bytes(gzip.compress(data, mtime=0))
        plain_rows = read_everywhere(plain, SHARE, tmp_path, "4.1").rows
        untouched = Counter(json.dumps(r, sort_keys=True) for r in plain_rows
                            if r["error"] is None)
        reading = check(packed, SHARE, tmp_path, "4.1", untouched)
        assert reading.rows == plain_rows


def test_a_log_of_update_tombstones_lists_max_findings_of_the_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The share shard's own findings (here ShareUpdate-key tombstones, on which Kafka's
    replay throws) are listed as a segment's are: `state` and `prune` print the first
    `--max-findings` of a partition log, then one line per code saying how many more, and
    count every one (it printed a line per record, 300,000 for a 10 MB segment)."""
    fixture = conformance_root() / "kafka-4.4-dev" / "share_update_tombstone.log"
    if not fixture.is_file():
        pytest.skip(f"{fixture} not found")
    with fixture.open("rb") as segment:
        records = [r for batch in read_batches(segment) if isinstance(batch, Batch)
                   for r in batch.records]
    (tombstone, *_) = [r for r in records if r.value is None]
    with SegmentWriter(tmp_path, SHARE, 0) as writer:
        writer.append(build_batch(records))
        writer.append(build_batch([tombstone._replace(offset=len(records) + i)
                                   for i in range(50)]))
    for command in ("state", "prune"):
        assert main([command, str(writer.directory), "--max-findings", "10", "-o", os.devnull]) == 1
        lines = capsys.readouterr().err.splitlines()
        listed = [line for line in lines if ": update-tombstone: " in line]
        assert [line.split()[2] for line in listed] == [
            "12:", "13:", *(f"{len(records) + i}:" for i in range(8))]
        (omitted,) = [line for line in lines if ": omitted_findings: " in line]
        assert omitted.split(": ", 2)[2].startswith(
            f"42 more update-tombstone findings in this partition, from offset "
            f"{len(records) + 8} on"), omitted
        assert lines[-1] == "52 findings"


def test_a_record_with_an_empty_value_holds_its_key_as_bytes(tmp_path: Path) -> None:
    """A value of no bytes has no version (a bad_value): its finding holds the record's key,
    in `decode` and the ingest task's decode_errors (it held no byte)."""
    fixture = conformance_root() / "kafka-4.4-dev" / "share_codec_none.log"
    if not fixture.is_file():
        pytest.skip(f"{fixture} not found")
    with fixture.open("rb") as segment:
        first = next(b for b in read_batches(segment) if isinstance(b, Batch)).records[0]
    with SegmentWriter(tmp_path, SHARE, 0) as writer:
        writer.append(build_batch([first, first._replace(offset=first.offset + 1, value=b"")]))
    [path] = writer.directory.iterdir()
    found = tmp_path / "findings"
    assert main(["decode", str(path), "-o", os.devnull, "--findings", str(found)]) == 1
    [finding] = [json.loads(line) for line in found.read_text("utf-8").splitlines()]
    assert (finding["kind"], finding["offset"]) == ("bad_value", first.offset + 1)
    assert base64.b64decode(finding["raw"]) == first.key
    [segment] = discover([path])
    split = bronze.read_split(bronze.Split(segment), "hostile", detection=detect_segment(segment))
    [row] = [row for table, rows in bronze_tables(split) if table == "decode_errors"
             for row in rows.to_pylist()]
    assert (row["kind"], row["raw"]) == ("bad_value", first.key)


@pytest.mark.parametrize("how", ["cut", "trailing", "flip"])
def test_a_damaged_gzip_stream_gives_everything_it_inflates(how: str, tmp_path: Path) -> None:
    fixture = conformance_root() / "kafka-4.4-dev" / "share_replay_small.log"
    if not fixture.is_file():
        pytest.skip(f"{fixture} not found")
    packed = gzip.compress(fixture.read_bytes(), mtime=0)
    for seed in range(5):
        rng = random.Random(f"{how}/{seed}")
        at = rng.randrange(20, len(packed))
        if how == "cut":
            damaged = packed[:at]
        elif how == "trailing":
            damaged = packed + rng.randbytes(rng.randrange(1, 100))
        else:
            damaged = apply(packed, [Edit(at, at + 1, bytes([packed[at] ^ 0x10]))])
        inflated = _inflatable(damaged)
        path = _layout_dir(tmp_path, SHARE, f"{how}{seed}").with_suffix(".log.gz")
        path.write_bytes(damaged)
        prefix = _layout_dir(tmp_path, SHARE, f"{how}{seed}-prefix")
        prefix.write_bytes(inflated)
        want = Counter(json.dumps(r, sort_keys=True)
                       for r in read_everywhere(prefix, SHARE, tmp_path, "4.1").rows
                       if r["error"] is None)
        reading = check(path, SHARE, tmp_path, "4.1", want)
        assert reading.status["decode"] == 1


def _inflatable(data: bytes) -> bytes:
    """What zlib inflates of a (single-member) gzip stream before it fails or ends, fed a
    byte at a time so that nothing before the fault is lost."""
    inflater = zlib.decompressobj(31)
    out = []
    for i in range(len(data)):
        try:
            out.append(inflater.decompress(data[i:i + 1]))
        except zlib.error:
            break
        if inflater.eof:
            break
    return b"".join(out)


_SMALL = [p for p in _fixtures(large=False) if p.suffix == ".log" and p.stat().st_size < 20_000]


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(index=st.integers(0, max(0, len(_SMALL) - 1)),
       mutations=st.lists(st.tuples(st.sampled_from(sorted(MUTATIONS)), st.integers(0, 1 << 30)),
                          min_size=1, max_size=3))
def test_random_mutation_chains(index: int, mutations: list[tuple[str, int]],
                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """Chains of mutations drawn by hypothesis, applied one after the other; each later
    one sees the earlier damage (so batches are judged intact on the last layout)."""
    if not _SMALL:
        pytest.skip("conformance fixtures not found")
    fixture = _SMALL[index]
    topic = _topic(fixture)
    work = tmp_path_factory.mktemp("chain")
    data = fixture.read_bytes()
    spans = damage.layout(data)
    edits: list[Edit] = []
    for name, seed in mutations:
        if name in ("many_records", "payload", "count", "codec") and edits:
            continue  # they need the intact layout
        edits += MUTATIONS[name][0](data, spans, random.Random(seed))
    edits = _disjoint(edits)
    intact = _layout_dir(work, topic, "intact")
    intact.write_bytes(data)
    by_batch = _rows_by_batch(intact, work, _dialect(fixture))
    path = _layout_dir(work, topic, "damaged")
    path.write_bytes(apply(data, edits))
    untouched = Counter(row for span in spans if not touched(span, edits)
                        for row in by_batch.get((span.base_offset, span.last_offset), []))
    check(path, topic, work, _dialect(fixture), untouched)


def _disjoint(edits: list[Edit]) -> list[Edit]:
    """The edits without those overlapping an earlier one (edits apply to the original)."""
    kept: list[Edit] = []
    for edit in edits:
        if all(edit.end <= k.start or k.end <= edit.start if edit.end > edit.start
               and k.end > k.start else edit.start != k.start for k in kept):
            kept.append(edit)
    return kept


# --- the large fixtures, in processes of their own ----------------------------------------

_PROBE = """
import sys
from pathlib import Path
from sharestate.app.cli import main
from sharestate.log.builder import SegmentWriter, build_batch
status = main(sys.argv[1:])
peak = [line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM")][0]
print(status, peak)
"""


@pytest.mark.slow
@pytest.mark.parametrize("fixture", _fixtures(large=True), ids=lambda p: p.parent.name)
def test_large_segments_damaged_keep_memory_flat(fixture: Path, tmp_path: Path) -> None:
    """Kafka's 250,000-record segments, damaged in the compressed stream and inside: decode
    and state finish, report the same findings and stay under 300 MB."""
    packed = fixture.read_bytes()
    rng = random.Random(16)
    plain = gzip.decompress(packed)
    spans = damage.layout(plain)
    cases = {
        "flipped_gz": apply(packed, [Edit(at, at + 1, bytes([packed[at] ^ 0x04]))
                                     for at in sorted(rng.sample(range(64, len(packed)), 3))]),
        "cut_gz": packed[: len(packed) * 3 // 5],
        "inside": gzip.compress(apply(plain, _disjoint(
            _length(plain, spans, rng) + _zeros(plain, spans, rng)
            + _garbage(plain, spans, rng))), compresslevel=1, mtime=0),
    }
    for label, data in cases.items():
        path = _layout_dir(tmp_path, SHARE, label).with_suffix(".log.gz")
        path.write_bytes(data)
        found: dict[str, list[str]] = {}
        for command in ("decode", "state"):  # prune replays as state does
            target = tmp_path / f"{label}.{command}.findings"
            done = subprocess.run([sys.executable, "-c", _PROBE, command, str(path), "-o",
                                   os.devnull, "--findings", str(target)],
                                  capture_output=True, text=True, timeout=600, check=False)
            assert not done.stderr.count("Traceback"), done.stderr
            status, peak_kib = map(int, done.stdout.split())
            assert status == 1, (label, command, done.stderr[-2000:])
            assert peak_kib < 300 << 10, (label, command, peak_kib)
            found[command] = sorted(target.read_text("utf-8").splitlines())
        assert found["decode"] == found["state"], label
