"""Every command reports the same findings for the same bytes, and a batch it cannot read
changes the state exactly as if it were not there (Kafka's loader refuses it)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import damage
import pytest
from conftest import conformance_dir

from sharestate.app.cli import main
from sharestate.log import build_control_batch
from sharestate.log.framing import LOG_OVERHEAD

SHARE = "__share_group_state"
OFFSETS = "__consumer_offsets"
COMMANDS = {SHARE: ("decode", "state", "prune"), OFFSETS: ("decode", "offsets")}


def fixture(name: str) -> bytes:
    return (conformance_dir("kafka-4.4-dev") / f"{name}.log").read_bytes()


def run(command: str, path: Path, tmp_path: Path, *extra: str, findings: bool = True
        ) -> tuple[int, list[dict[str, Any]], list[dict[str, Any]]]:
    """(status, output rows, findings) of one command."""
    out, found = tmp_path / f"{command}.out", tmp_path / f"{command}.findings"
    status = main([command, str(path), "-o", str(out),
                   *(("--findings", str(found)) if findings else ()), *extra])
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    if not findings:
        return status, rows, []
    return status, rows, [json.loads(line) for line in found.read_text("utf-8").splitlines()]


def key(finding: dict[str, Any]) -> tuple[Any, ...]:
    return (finding["source"], finding["position"], finding["offset"], finding["kind"],
            finding["message"])


def segment(tmp_path: Path, topic: str, data: bytes, name: str = "damaged") -> Path:
    folder = tmp_path / name / f"{topic}-0"
    folder.mkdir(parents=True)
    path = folder / "00000000000000000000.log"
    path.write_bytes(data)
    return path


def _unknown_codec() -> tuple[str, bytes, bytes, str, int]:
    data = fixture("share_codec_none")
    span = damage.layout(data)[3]
    return SHARE, damage.set_codec(data, span.position, 5), damage.without(data, span), \
        "unknown_compression", span.position


def _negative_count() -> tuple[str, bytes, bytes, str, int]:
    data = fixture("share_codec_none")
    span = damage.layout(data)[2]
    return SHARE, damage.set_count(data, span.position, -3, crc=True), \
        damage.without(data, span), "bad_record", span.position + 61  # where records start


def _corrupt_lz4() -> tuple[str, bytes, bytes, str, int]:
    data = fixture("share_codec_lz4")
    span = damage.layout(data)[1]
    return SHARE, damage.corrupt_payload(data, span), damage.without(data, span), \
        "decompression_failed", span.position


def _bomb() -> tuple[str, bytes, bytes, str, int]:
    data = fixture("share_codec_none")
    last = damage.layout(data)[-1]
    return SHARE, data + damage.bomb(last.last_offset + 1), data, "decompression_limit", \
        len(data)


def _crc_bad_data() -> tuple[str, bytes, bytes, str, int]:
    data = fixture("share_tombstones")
    span = damage.layout(data)[1]
    return SHARE, damage.flip(data, span.position + span.size - 5), \
        damage.without(data, span), "crc_mismatch", span.position


def _zero_record_commit(name: str, topic: str) -> Callable[[], tuple[str, bytes, bytes, str,
                                                                      int]]:
    def build() -> tuple[str, bytes, bytes, str, int]:
        data = fixture(name)
        span = [s for s in damage.layout(data) if s.is_control][-1]
        return topic, damage.set_count(data, span.position, 0, crc=False), \
            damage.without(data, span), "crc_mismatch", span.position
    return build


def _length_covers_next(name: str, topic: str) -> Callable[[], tuple[str, bytes, bytes, str,
                                                                      int]]:
    """A batch whose length runs exactly to the start of the batch after next: the intact
    batch it covers (a transaction marker) must still be read."""
    def build() -> tuple[str, bytes, bytes, str, int]:
        data = fixture(name)
        spans = damage.layout(data)
        i = next(i for i, s in enumerate(spans) if i and spans[i + 1].is_control
                 and i + 2 < len(spans))
        here, covered = spans[i], spans[i + 1]
        damaged = damage.set_length(data, here.position,
                                    here.size + covered.size - LOG_OVERHEAD)
        return topic, damaged, damage.without(data, here), "bad_length", here.position
    return build


CASES = {
    "unknown_codec": _unknown_codec,
    "negative_count": _negative_count,
    "corrupt_lz4": _corrupt_lz4,
    "decompression_bomb": _bomb,
    "crc_mismatch_data": _crc_bad_data,
    "zero_record_commit_share": _zero_record_commit("share_txn", SHARE),
    "zero_record_commit_offsets": _zero_record_commit("consumer_offsets_txn", OFFSETS),
    "length_covers_marker_share": _length_covers_next("share_txn", SHARE),
    "length_covers_marker_offsets": _length_covers_next("consumer_offsets_txn", OFFSETS),
}


@pytest.mark.parametrize("case", CASES)
def test_every_command_reports_the_damage(case: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    topic, damaged, _, kind, position = CASES[case]()
    path = segment(tmp_path, topic, damaged)
    for command in COMMANDS[topic]:  # the summary every command prints
        status = main([command, str(path), "-o", str(tmp_path / "plain.out")])
        err = capsys.readouterr().err
        assert status == 1, (command, err)
        assert "findings" in err, (command, err)
    reports = {command: run(command, path, tmp_path) for command in COMMANDS[topic]}
    capsys.readouterr()
    found = {command: Counter(map(key, findings))
             for command, (_, _, findings) in reports.items()}
    first = found["decode"]
    assert (str(path), position, kind) in {(k[0], k[1], k[3]) for k in first}, first
    for command, findings in found.items():
        assert findings == first, command
    decode_errors = Counter((str(path), r["error"]["position"], r["offset"], r["error"]["kind"],
                             r["error"]["message"])
                            for r in reports["decode"][1] if r["error"] is not None)
    assert decode_errors == first


@pytest.mark.parametrize("case", CASES)
def test_a_refused_batch_changes_nothing(case: str, tmp_path: Path) -> None:
    """The state (or the committed offsets) equals the state without the damaged batch."""
    topic, damaged, intact, _, _ = CASES[case]()
    got = segment(tmp_path, topic, damaged, "damaged")
    want = segment(tmp_path, topic, intact, "intact")
    if topic == SHARE:
        _, rows, _ = run("state", got, tmp_path, findings=False)
        _, expected, _ = run("state", want, tmp_path, findings=False)
        assert [dict(r, as_of_offset=None) for r in rows] == \
            [dict(r, as_of_offset=None) for r in expected]
        _, (prune,), _ = run("prune", got, tmp_path, findings=False)
        _, (expected_prune,), _ = run("prune", want, tmp_path, findings=False)
        assert prune["prune_offset"] == expected_prune["prune_offset"]
    else:
        _, rows, _ = run("offsets", got, tmp_path, "--pending", findings=False)
        _, expected, _ = run("offsets", want, tmp_path, "--pending", findings=False)
        assert rows == expected


def test_a_refused_batch_is_not_decoded_either(tmp_path: Path) -> None:
    """`decode` prints the refused batch as one finding (with its bytes), not its records."""
    data = fixture("share_tombstones")
    span = damage.layout(data)[1]
    path = segment(tmp_path, SHARE, damage.flip(data, span.position + span.size - 5))
    status, rows, findings = run("decode", path, tmp_path)
    assert status == 1
    assert not [r for r in rows if r["error"] is None
                and span.base_offset <= r["offset"] <= span.last_offset]
    [row] = [r for r in rows if r["error"] is not None]
    assert row["error"]["kind"] == "crc_mismatch" and row["error"]["position"] == span.position
    assert row["offset"] == span.base_offset and "not read" in row["error"]["message"]
    [finding] = findings
    assert finding["raw_length"] == span.size


def test_jpeg_renamed_log_is_an_unknown_topic_for_every_command(tmp_path: Path) -> None:
    jpeg = tmp_path / "photo.log"
    jpeg.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01" + bytes(range(256)) * 40)
    for command in ("decode", "state", "prune", "offsets"):
        status, _, findings = run(command, jpeg, tmp_path)
        assert status == 1, command
        assert [f["kind"] for f in findings] == ["unknown_topic", "unknown_magic"], command


@pytest.mark.parametrize("cut", [1, 16, 61, "first"])
def test_a_segment_cut_before_its_first_record_still_says_where_and_why(
        cut: int | str, tmp_path: Path) -> None:
    """A segment whose topic no record tells (here cut inside its first batch, its name
    telling nothing) is not decoded, and its bytes' findings still come, with position,
    offset and bytes (only `unknown_topic`, without bytes, came)."""
    data = fixture("consumer_offsets_txn")
    first = damage.layout(data)[0]
    at = first.size - 1 if cut == "first" else int(cut)
    path = tmp_path / "cut.log"
    path.write_bytes(data[:at])
    kind = "trailing_bytes" if at < 17 else "truncated_batch"
    for command in ("decode", "state", "prune", "offsets"):
        status, _, findings = run(command, path, tmp_path)
        assert status == 1, command
        assert [f["kind"] for f in findings] == ["unknown_topic", kind], command
        cut_finding = findings[1]
        assert cut_finding["position"] == 0 and cut_finding["raw_length"] == at
        assert base64.b64decode(cut_finding["raw"]) == data[:at]
        assert cut_finding["offset"] == (None if at < 17 else first.base_offset)


def test_a_segment_of_unknown_topic_lists_max_findings_of_its_bytes(tmp_path: Path) -> None:
    """Its bytes' findings are capped as any segment's are, for every command."""
    data = fixture("share_codec_none")
    span = damage.layout(data)[0]
    refused = damage.flip(data[span.position:span.position + span.size], span.size - 5)
    path = tmp_path / "refused.log"
    path.write_bytes(refused * 5)  # every batch a CRC mismatch: no record to tell the topic
    for command in ("decode", "state", "prune", "offsets"):
        status, _, findings = run(command, path, tmp_path, "--max-findings", "2")
        assert status == 1, command
        assert [f["kind"] for f in findings] == ["unknown_topic", "crc_mismatch",
                                                 "omitted_findings"], command
        assert findings[2]["message"].startswith("4 more crc_mismatch findings"), command


def test_offsets_segment_with_nothing_readable_is_not_taken_for_share_state(
        tmp_path: Path) -> None:
    data = bytearray(fixture("consumer_offsets_txn"))
    for span in damage.layout(bytes(data)):
        data[span.position + 16] = 7  # no batch has a known magic any more
    path = tmp_path / "offsets.log"
    path.write_bytes(bytes(data))
    for command in ("offsets", "state"):
        status, rows, findings = run(command, path, tmp_path)
        assert status == 1 and rows == [], command
        assert "unknown_topic" in {f["kind"] for f in findings}, command


def test_a_commit_marker_covered_by_a_bad_length_still_commits(tmp_path: Path) -> None:
    data = fixture("consumer_offsets_txn")
    spans = damage.layout(data)
    i = next(i for i, s in enumerate(spans) if i + 2 < len(spans) and spans[i + 1].is_control)
    damaged = damage.set_length(data, spans[i].position,
                                spans[i].size + spans[i + 1].size - LOG_OVERHEAD)
    _, rows, _ = run("offsets", segment(tmp_path, OFFSETS, damaged), tmp_path, "--pending",
                     findings=False)
    assert not [r for r in rows if r["state"].startswith("pending")
                and r["record_offset"] < spans[i + 1].base_offset]


def test_an_appended_marker_is_read_after_damage(tmp_path: Path) -> None:
    """Garbage then a COMMIT marker: the marker is read (resync finds it)."""
    data = fixture("consumer_offsets_txn")
    last = damage.layout(data)[-1]
    marker = build_control_batch("COMMIT", offset=last.last_offset + 1, timestamp=1,
                                 coordinator_epoch=0, producer_id=1, producer_epoch=0)
    status, rows, findings = run("decode", segment(tmp_path, OFFSETS, data + b"\x01" * 5000
                                                   + marker), tmp_path)
    assert status == 1
    assert rows[-1]["control"] == {"type": "COMMIT", "coordinator_epoch": 0}
    assert [f["raw_length"] for f in findings] == [5000]


# --- files that are not segments -------------------------------------------------------

def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A command in its own process, so that a hang fails the test instead of the run."""
    return subprocess.run([sys.executable, "-m", "sharestate", *argv], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _partition_with(tmp_path: Path, make: Callable[[Path], None]) -> tuple[Path, int]:
    """A partition directory holding an intact segment and, after it, a bad entry."""
    folder = tmp_path / f"{SHARE}-0"
    folder.mkdir()
    data = fixture("share_codec_none")
    (folder / "00000000000000000000.log").write_bytes(data)
    make(folder / "00000000000000099999.log")
    return folder, sum(span.records for span in damage.layout(data))


@pytest.mark.parametrize("entry", ["fifo", "symlink_loop", "dangling_symlink", "dev_zero",
                                   "directory"])
def test_an_entry_that_is_not_a_regular_file_is_a_finding(entry: str, tmp_path: Path) -> None:
    def make(path: Path) -> None:
        if entry == "fifo":
            os.mkfifo(path)
        elif entry == "symlink_loop":
            path.symlink_to(path.name)
        elif entry == "dangling_symlink":
            path.symlink_to(tmp_path / "gone.log")
        elif entry == "dev_zero":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()

    folder, records = _partition_with(tmp_path, make)
    for command in ("decode", "state", "prune"):
        done = _cli(command, str(folder), "--findings", str(tmp_path / "f.jsonl"))
        assert done.returncode == 1, (command, done.stderr)
        findings = [json.loads(line) for line in
                    (tmp_path / "f.jsonl").read_text("utf-8").splitlines()]
        assert [f["source"] for f in findings] == [str(folder / "00000000000000099999.log")]
        assert findings[0]["kind"] == "unreadable_segment", findings
        if command == "decode":
            assert sum(1 for line in done.stdout.splitlines()
                       if json.loads(line)["error"] is None) == records


def test_a_named_fifo_or_device_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        done = _cli("decode", str(path), timeout=60)
        assert done.returncode == 1, done.stderr
        assert "not a regular file" in done.stdout


@pytest.mark.slow
def test_a_huge_sparse_file_is_read_only_as_far_as_a_segment_can_reach(tmp_path: Path) -> None:
    """50 GiB of holes after an intact segment: read up to Kafka's largest segment size."""
    data = fixture("share_codec_none")
    path = tmp_path / "sparse.log"
    with path.open("wb") as out:
        out.write(data)
        out.truncate(50 << 30)
    done = _cli("decode", str(path), "--findings", str(tmp_path / "f.jsonl"), timeout=600)
    assert done.returncode == 1, done.stderr
    kinds = [json.loads(line)["kind"] for line in
             (tmp_path / "f.jsonl").read_text("utf-8").splitlines()]
    assert kinds == ["bad_length", "segment_too_large"]


@pytest.mark.parametrize("command", ["state", "prune"])
def test_the_replays_own_findings_are_listed_in_the_findings_file_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A finding of the replay (not of the bytes: here ShareUpdate-key tombstones, which
    Kafka's replay throws on) goes to `--findings` as it goes to stderr: the first
    `--max-findings` of the partition one by one, then one omitted_findings per code."""
    path = segment(tmp_path, SHARE, damage.update_tombstone_batch(0, 5))
    capsys.readouterr()
    status, _, found = run(command, path, tmp_path, "--max-findings", "2")
    printed = [line.split(": ", 2) for line in capsys.readouterr().err.splitlines()
               if line.startswith(f"{SHARE}-0 offset ")]
    assert status == 1
    assert [(f"{f['source']} offset {f['offset']}", f["kind"], f["message"]) for f in found] \
        == [tuple(line) for line in printed]
    assert [(f["kind"], f["offset"], f["topic"], f["partition"], f["position"]) for f in found] \
        == [("update-tombstone", 0, SHARE, 0, -1), ("update-tombstone", 1, SHARE, 0, -1),
            ("omitted_findings", 2, SHARE, 0, -1)]
    assert found[2]["message"].startswith("3 more update-tombstone findings")
