"""Crafted inputs of a few megabytes that once cost minutes or gigabytes, through every
command in a process of its own: each finishes within 30 s of CPU and 600 MB of memory,
without a traceback or exit 70, exits 1, and reports the same findings as the others.

- `fake_headers`: a 50 KB `.log.gz` of one fake batch header repeated, each copy passing
  resynchronisation's cheap checks and declaring 16 or 32 MiB (a CRC over each declared
  range made it quadratic: prune and offsets did not finish in 150 s);
- `null_records`: 60 batches of 100,000 records with null key and value, 3.5 MB, every record
  a finding (state held 6 M findings, 1.35 GB; decode took 112 s);
- `crc_bad`: a 2 MB `.log.gz` of 4 KiB batches failing their CRC, about 350 MB inflated,
  each a finding with its bytes (state passed 4.5 GB);
- `count_and_order`: Kafka's segment with a marker declaring 0 records (CRC valid), a batch
  copied, two batches swapped and a flipped bit of a base offset (all read with exit 0);
- `update_tombstones`: 300,000 ShareUpdate-key tombstones, 9.9 MB, every record a finding
  of the replay (on which Kafka's throws), through `run` (a Python worker of its replay
  held each one, 755 MB).

decode writes a line per record, about 11 µs each here: on the 6 M records of
`null_records` that is over a minute, so its share of that case is 10 of the batches. Time
is measured as the command's CPU time (the machine is shared; wall time only guards against
a hang).
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_dir
from deltalake import DeltaTable

from sharestate.app.cli import main
from sharestate.log import RawRecord, SegmentWriter, build_batch

SHARE = "__share_group_state"
COMMANDS = ("decode", "state", "prune", "offsets")
CPU_SECONDS = 30
PEAK_KIB = 600 << 10

_PROBE = """
import sys
from pathlib import Path
from sharestate.app.cli import main
status = main(sys.argv[1:])
peak = [line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM")][0]  # this process's peak (ru_maxrss outlives exec)
print(status, peak)
"""


def _folder(root: Path, name: str) -> Path:
    folder = root / name / f"{SHARE}-0"
    folder.mkdir(parents=True)
    return folder


def fake_headers(root: Path) -> Path:
    fakes = b"".join(damage.fake_header(length) * 4000 for length in (16 << 20, 32 << 20))
    path = _folder(root, "fake_headers") / "00000000000000000000.log.gz"
    path.write_bytes(gzip.compress(fakes * 180, 9, mtime=0))
    return path


def null_records(root: Path, batches: int = 60) -> Path:
    path = _folder(root, f"null_records_{batches}") / "00000000000000000000.log"
    with path.open("wb") as out:
        for i in range(batches):
            out.write(damage.null_record_batch(i * 100_000, 100_000))
    return path


def crc_bad(root: Path) -> Path:
    records = [RawRecord(i, 1_700_000_000_000, -1, b"k%d" % i, bytes(40), ()) for i in range(80)]
    batch = bytearray(build_batch(records))
    batch[-1] ^= 1
    path = _folder(root, "crc_bad") / "00000000000000000000.log.gz"
    path.write_bytes(gzip.compress(bytes(batch) * ((350 << 20) // len(batch)), 9, mtime=0))
    return path


def count_and_order(root: Path) -> Path:
    data = (conformance_dir("kafka-4.4-dev") / "share_txn.log").read_bytes()
    spans = damage.layout(data)
    marker = next(s for s in spans if s.is_control)
    out = damage.set_count(data, marker.position, 0, crc=True)
    out = damage.set_base_offset(out, spans[6].position, spans[6].base_offset ^ 1 << 40)
    out = damage.swap(out, spans[3], spans[4])
    out = damage.splice(out, spans[1], data[spans[1].position:spans[1].position +
                                            spans[1].size])
    path = _folder(root, "count_and_order") / "00000000000000000000.log"
    path.write_bytes(out)
    return path


def update_tombstones(root: Path, records: int = 300_000, first: int = 0) -> Path:
    """A segment of `records` ShareUpdate-key tombstones from offset `first`, 1,000 a batch,
    in `root`'s `update_tombstones` log."""
    with SegmentWriter(root / "update_tombstones", SHARE, 0) as writer:
        for base in range(first, first + records, 1000):
            writer.append(damage.update_tombstone_batch(base, min(1000, first + records - base)))
    (path,) = writer.paths
    return path


CASES: dict[str, Callable[[Path], Path]] = {
    "fake_headers": fake_headers, "null_records": null_records, "crc_bad": crc_bad,
    "count_and_order": count_and_order}


def _run(command: str, source: Path, findings: Path) -> tuple[int, float, int]:
    """`sharestate command source` in a process of its own: status, CPU seconds, peak KiB."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PROBE, command, str(source), "-o",
                           os.devnull, "--findings", str(findings)],
                          capture_output=True, text=True, timeout=300, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert "Traceback" not in done.stderr, (command, source, done.stderr[-3000:])
    status, peak = map(int, done.stdout.split())
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert time.monotonic() - started < 240, (command, source)
    return status, cpu, peak


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):  # gone since it was listed
                continue
            children.setdefault(int(parent), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def _peak_kib(pid: int) -> int:
    try:
        return next(int(line.split()[1]) for line in
                    Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("VmHWM"))
    except (OSError, StopIteration):  # gone, or a zombie
        return 0


def _findings(path: Path) -> Counter[tuple[Any, ...]]:
    return Counter((f["source"], f["position"], f["offset"], f["kind"], f["message"])
                   for f in map(json.loads, path.read_text("utf-8").splitlines()))


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("case", CASES)
def test_crafted_inputs_cost_little_through_every_command(case: str, tmp_path: Path) -> None:
    path = CASES[case](tmp_path)
    assert path.stat().st_size < 10 << 20
    found = {}
    for command in COMMANDS:
        source = path
        if case == "null_records" and command == "decode":
            source = null_records(tmp_path, 10)  # a line per record: see the module
        target = tmp_path / f"{command}.findings"
        status, cpu, peak = _run(command, source, target)
        assert status == 1, (case, command)
        print(case, command, round(cpu, 1), peak >> 10)
        assert cpu < CPU_SECONDS and peak < PEAK_KIB, (case, command, cpu, peak)
        if source == path:
            found[command] = _findings(target)
    reference = next(iter(found.values()))
    assert reference and all(kinds == reference for kinds in found.values()), {
        command: sum(kinds.values()) for command, kinds in found.items()}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_pipeline_on_many_failing_records_stays_within_bounds(tmp_path: Path) -> None:
    """`sharestate run` (local Spark, every job) on `null_records`, where one process of a
    run reached 10.2 GB: exit 1, every record in bronze and the cap's findings in
    decode_errors, no traceback, and no process of the run (the driver, its JVM, the Python
    workers) above 600 MB. The other crafted inputs through `run` are timed in
    docs/benchmarks.md (about 10-20 s each here)."""
    out = _pipeline(null_records(tmp_path).parent, tmp_path / "warehouse")
    assert "log_records 6000000, decode_errors 1001," in out, out


def _pipeline(source: Path, warehouse: Path) -> str:
    """`sharestate run` of `source` into `warehouse` in a process of its own, checked to exit
    1 without a traceback and with no process of the run (the driver, its JVM, the Python
    workers) above 600 MB: its stdout."""
    run = subprocess.Popen([sys.executable, "-m", "sharestate", "run", "--source", str(source),
                            "--warehouse", str(warehouse)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}

    def watch() -> None:  # VmHWM is each process's own peak: read until it is gone
        while run.poll() is None:
            for pid in _tree(run.pid):
                peaks[pid] = max(peaks.get(pid, 0), _peak_kib(pid))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, err = run.communicate(timeout=500)
    watcher.join()
    assert "Traceback" not in err and run.returncode == 1, (run.returncode, err[-3000:])
    print(source.name, "run", sorted(peak >> 10 for peak in peaks.values()))
    assert len(peaks) >= 3 and max(peaks.values()) < PEAK_KIB, sorted(peaks.values())
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_pipeline_lists_the_replays_findings_as_state_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run` on `update_tombstones` stays within bounds, and its audit_findings are the
    findings `state` prints: the partition's first 1,000 in full, then one omitted_findings
    per code saying how many more (it wrote a row per record). A second run, over one more
    segment, goes on from the first one's replay_state (the rows it listed stay in their
    files) and counts on, as one run over both segments would."""
    path = update_tombstones(tmp_path)
    assert path.stat().st_size < 10 << 20
    warehouse = tmp_path / "warehouse"
    listed_in = []
    for more in (0, 500):
        if more:
            update_tombstones(tmp_path, more, first=300_000)
        _pipeline(path.parent.parent, warehouse)
        audit = DeltaTable(str(warehouse / "audit_findings"))
        rows = Counter((f"{r['topic']}-{r['partition']}", r["offset"], r["rule"], r["message"])
                       for r in audit.to_pyarrow_table().to_pylist())
        assert main(["state", str(path.parent), "-o", os.devnull]) == 1
        printed: Counter[tuple[Any, ...]] = Counter()
        for line in capsys.readouterr().err.splitlines():
            if line.startswith(f"{SHARE}-0 offset "):  # the replay's: `log offset N: code: ...`
                where, code, message = line.split(": ", 2)
                name, _, offset = where.split()
                printed[(name, int(offset), code.replace("-", "_"), message)] += 1
        assert rows == printed and sum(rows.values()) == 1001, rows.most_common(3)
        listed_in.append({uri for uri in audit.file_uris() if "rule=update_tombstone" in uri})
    assert listed_in[0] == listed_in[1]
