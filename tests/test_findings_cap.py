"""A segment's findings are bounded (`sharestate.records.segment.FindingCap`): the first
`--max-findings` in full, the rest counted per kind into one `omitted_findings` finding
each; every reader (the four commands, the ingest task's `decode_errors`) lists the same,
and none holds more than the cap, however many records fail."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_dir
from hypothesis import given, settings
from hypothesis import strategies as st

from sharestate.log import (
    DEFAULT_LIMITS,
    Batch,
    RawRecord,
    ReadLimits,
    build_batch,
    discover,
    read_batches,
)
from sharestate.records.segment import (
    DecodedBatch,
    FindingCap,
    decode_batches,
    decode_segment,
    detect_segment,
)
from sharestate.tables import bronze
from sharestate.tables.tasks import bronze_tables

SHARE = "__share_group_state"
COMMANDS = ("decode", "state", "prune", "offsets")


def _segment(tmp_path: Path, batches: int, records: int) -> Path:
    """A partition of `batches` zstd batches of `records` records with null key and value:
    every record is a `null_key` finding."""
    folder = tmp_path / f"{SHARE}-0"
    folder.mkdir(exist_ok=True)
    path = folder / "00000000000000000000.log"
    path.write_bytes(b"".join(damage.null_record_batch(i * records, records)
                              for i in range(batches)))
    return path


def _key(f: Any) -> tuple[Any, ...]:
    get = f.get if isinstance(f, dict) else lambda name: getattr(f, name)
    return (get("source"), get("position"), get("offset"), get("kind"), get("message"))


def test_past_the_cap_findings_are_counted_per_kind(tmp_path: Path) -> None:
    path = _segment(tmp_path, 3, 1000)
    [segment] = discover([path])
    detection = detect_segment(segment, dialect_name="4.1")
    items = list(decode_batches(segment, detection, limits=ReadLimits(max_findings=10)))
    batches = [i for i in items if isinstance(i, DecodedBatch)]
    assert sum(len(b.records) for b in batches) == 3000  # every record is still read
    listed = [f for b in batches for f in b.failed]
    assert [f.offset for f in listed] == list(range(10))
    assert sum(b.omitted for b in batches) == 2990
    [summary] = [i for i in items if not isinstance(i, DecodedBatch)]
    assert (summary.kind, summary.offset, summary.source) == ("omitted_findings", 10,
                                                              str(path))
    assert summary.message.startswith("2990 more null_key findings in this segment")
    assert "--max-findings" in summary.message
    rows = list(decode_segment(segment, detection, limits=ReadLimits(max_findings=10)))
    assert sum(r.finding is not None for r in rows) == 3001  # each record row says why
    assert [r.offset for r in rows if r.finding is not None and r.listed] == [
        *range(10), 10]


def test_every_reader_lists_the_same_bounded_findings(tmp_path: Path) -> None:
    path = _segment(tmp_path, 2, 5000)
    found = {}
    for command in COMMANDS:
        target = tmp_path / f"{command}.findings"
        done = subprocess.run([sys.executable, "-m", "sharestate", command, str(path.parent),
                               "-o", os.devnull, "--findings", str(target),
                               "--max-findings", "100"],
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 1, (command, done.stderr[-2000:])
        found[command] = Counter(_key(json.loads(line))
                                 for line in target.read_text("utf-8").splitlines())
    [segment] = discover([path])
    split = bronze.read_split(bronze.Split(segment), "cap", detection=detect_segment(segment),
                              limits=ReadLimits(max_findings=100))
    errors = [row for table, rows in bronze_tables(split) if table == "decode_errors"
              for row in rows.to_pylist()]
    found["ingest"] = Counter(_key(row) for row in errors)
    assert all(kinds == found["decode"] for kinds in found.values()), {
        command: sum(kinds.values()) for command, kinds in found.items()}
    assert sum(found["decode"].values()) == 101
    assert Counter(k[3] for k in found["decode"]) == Counter(null_key=100, omitted_findings=1)


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(st.lists(st.sampled_from(("null_key", "bad_key", "bad_value")),
                              max_size=12), max_size=5), limit=st.integers(0, 20))
def test_admitting_findings_at_once_equals_one_by_one(runs: list[list[str]], limit: int
                                                      ) -> None:
    one, many = FindingCap(limit, "s"), FindingCap(limit, "s")
    listed, counted = [], []
    for run, kinds in enumerate(runs):
        listed.append([one.admit(kind, run, i) for i, kind in enumerate(kinds)].count(True))
        counted.append(many.admit_many(kinds, lambda i, run=run: (run, i)))
    assert (counted, many.omitted, many.summary()) == (listed, one.omitted, one.summary())


def test_ingest_lists_and_marks_the_same_findings_as_decode(tmp_path: Path) -> None:
    """Batches whose records fail in several ways, interleaved with good ones, past the
    cap: ingest's decode_errors are decode's findings, and each log_records row's status
    is its record's (the rows past the cap are marked by index, not one by one)."""
    fixture = (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes()
    good = next(item.records[0] for item in read_batches(io.BytesIO(fixture))
                if isinstance(item, Batch) and not item.header.is_control)
    records = [RawRecord(i, 1_700_000_000_000, -1, good.key, good.value, ()) if i % 5 == 4
               else RawRecord(i, 1_700_000_000_000, -1, (None, b"\x00", b"\x7f\x7f")[i % 3],
                              None, ()) for i in range(3000)]
    path = _segment(tmp_path, 0, 0)
    path.write_bytes(b"".join(build_batch(records[i:i + 700]) for i in range(0, 3000, 700)))
    [segment] = discover([path])
    detection = detect_segment(segment, dialect_name="4.1")
    limits = ReadLimits(max_findings=50)
    rows = list(decode_segment(segment, detection, limits=limits))
    split = bronze.read_split(bronze.Split(segment), "cap", detection=detection, limits=limits)
    tables: dict[str, list[dict[str, Any]]] = {}
    for table, batch in bronze_tables(split):
        tables.setdefault(table, []).extend(batch.to_pylist())
    assert Counter(map(_key, tables["decode_errors"])) == Counter(
        _key(r.finding) for r in rows if r.finding is not None and r.listed)
    assert Counter(r["kind"] for r in tables["decode_errors"]) == Counter(  # one summary a kind
        null_key=17, bad_key=17, unknown_record_type=16, omitted_findings=3)
    assert [(r["offset"], r["decode_status"]) for r in tables["log_records"]] == [
        (r.offset, r.finding.kind if r.finding else "ok") for r in rows
        if r.offset is not None and (r.finding is None or r.finding.kind != "omitted_findings")]


_PROBE = """
import sys
from pathlib import Path
from sharestate.app.cli import main
status = main(sys.argv[1:])
peak = [line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM")][0]  # this process's peak (ru_maxrss outlives exec)
print(status, peak)
"""


@pytest.mark.timeout(600)
def test_a_segment_of_two_million_failing_records_stays_small(tmp_path: Path) -> None:
    """20 batches of 100,000 null-key records (1.2 MB): state held 2 M findings (60 such
    batches took 1.3 GB), and decode's --findings and a warehouse's decode_errors as many
    lines. Each command lists the cap's findings and one summary, in bounded memory."""
    path = _segment(tmp_path, 20, 100_000)
    for command in ("state", "offsets"):
        target = tmp_path / f"{command}.findings"
        done = subprocess.run([sys.executable, "-c", _PROBE, command, str(path.parent), "-o",
                               os.devnull, "--findings", str(target)],
                              capture_output=True, text=True, timeout=300, check=False)
        assert "Traceback" not in done.stderr, done.stderr[-2000:]
        status, peak_kib = done.stdout.split()
        assert int(status) == 1 and int(peak_kib) < 300 << 10, (command, done.stdout)
        lines = target.read_text("utf-8").splitlines()
        assert len(lines) == DEFAULT_LIMITS.max_findings + 1
        assert json.loads(lines[-1])["message"].startswith("1999000 more null_key findings")
