"""A segment Kafka preallocated (`log.preallocate=true`) is a file of the segment's full size
whose bytes past the last write are zeros until the segment rolls (Kafka trims it then, or
when the broker stops): a copy of a running broker's log has such a tail on every active
segment. It is where the log ends, not damage; zeros followed by a batch, or a batch cut
short, still are."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from conftest import conformance_dir

from sharestate import exit_codes, native
from sharestate.app.cli import main
from sharestate.log import Batch, LogFinding, read_batches

TAIL = 1 << 20


def _fixture(name: str) -> bytes:
    return (conformance_dir("kafka-4.4-dev") / name).read_bytes()


def _read(data: bytes, **options: object) -> list[Batch | LogFinding]:
    return list(read_batches(io.BytesIO(data), **options))  # type: ignore[arg-type]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
@pytest.mark.parametrize("tail", [17, 4096, TAIL])
def test_a_zero_tail_ends_the_log_without_a_finding(
        pure: bool, tail: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setattr(native, "module", None)
    log = _fixture("share_codec_none.log")
    clean = _read(log)
    assert _read(log + bytes(tail), chunk_bytes=4096) == clean
    assert not any(isinstance(item, LogFinding) for item in clean)


def test_fewer_zeros_than_a_batch_prefix_are_trailing_bytes() -> None:
    """Up to 16 bytes could be the start of a batch cut short (its base offset's high bytes
    are zeros): still a finding."""
    log = _fixture("share_codec_none.log")
    [finding] = [item for item in _read(log + bytes(16)) if isinstance(item, LogFinding)]
    assert (finding.kind, finding.position) == ("trailing_bytes", len(log))


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_zeros_before_a_batch_or_after_a_cut_batch_are_still_findings(
        pure: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setattr(native, "module", None)
    log = _fixture("share_codec_none.log")
    first = next(item for item in _read(log) if isinstance(item, Batch))
    size = first.header.size_in_bytes
    gap = _read(log[:size] + bytes(4096) + log[size:])
    assert [item.kind for item in gap if isinstance(item, LogFinding)] == ["bad_length"]
    cut = _read(log[:size // 2] + bytes(TAIL))
    assert [finding.kind for item in cut if isinstance(item, Batch)
            for finding in item.findings] == ["crc_mismatch"]


@pytest.mark.parametrize("command", ["decode", "state", "prune", "offsets"])
def test_commands_read_a_preallocated_active_segment_as_the_rolled_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    name = "consumer_offsets_txn.log" if command == "offsets" else "share_replay_small.log"
    topic = "__consumer_offsets" if command == "offsets" else "__share_group_state"
    log = _fixture(name)
    outputs = []
    for kind, data in (("trimmed", log), ("preallocated", log + bytes(TAIL)),
                       ("gzipped", gzip.compress(log + bytes(TAIL), mtime=0))):
        folder = tmp_path / kind / f"{topic}-0"
        folder.mkdir(parents=True)
        suffix = ".log.gz" if kind == "gzipped" else ".log"
        (folder / f"{0:020d}{suffix}").write_bytes(data)
        status, out, err = _run(capsys, command, str(folder))
        assert status == exit_codes.OK, err
        outputs.append(out.replace(kind, "?").replace(".log.gz", ".log"))
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[0]


def test_an_unwritten_preallocated_segment_is_an_empty_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After a prune moved the log start to a new segment nothing was written to yet, the
    log starts and ends at its base offset, as for an empty (trimmed) file."""
    answers = []
    for kind, size in (("trimmed", 0), ("preallocated", TAIL)):
        root = tmp_path / kind
        folder = root / "__share_group_state-0"
        folder.mkdir(parents=True)
        (folder / f"{24:020d}.log").write_bytes(bytes(size))
        (root / "log-start-offset-checkpoint").write_text("0\n1\n__share_group_state 0 24\n")
        status, out, err = _run(capsys, "prune", str(root))
        assert status == exit_codes.OK, err
        answers.append(out)
    assert answers[0] == answers[1]
    assert '"log_start_offset":24,"log_end_offset":24' in answers[1]
