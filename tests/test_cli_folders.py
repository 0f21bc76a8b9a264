"""Segments in a folder whose name only looks like `<topic>-<partition>`: every command reads
them, taking the topic from the records and saying what it assumed (they crashed with
`tuple.index(x): x not in tuple`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import conformance_dir

from sharestate import exit_codes
from sharestate.app.cli import main

BACKUP = "backups-2026-11-23"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


@pytest.mark.parametrize(("fixture", "command", "topic"), [
    ("share_replay_small.log", "state", "__share_group_state"),
    ("share_tombstones.log", "prune", "__share_group_state"),
    ("consumer_offsets_txn.log", "offsets", "__consumer_offsets"),
    ("share_txn.log", "decode", "__share_group_state"),
])
def test_a_backup_folder_is_not_a_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        fixture: str, command: str, topic: str) -> None:
    original = conformance_dir("kafka-4.4-dev") / fixture
    folder = tmp_path / BACKUP
    folder.mkdir()
    copy = folder / f"{0:020d}.log"
    shutil.copyfile(original, copy)
    expected_status, expected, _ = _run(capsys, command, str(original))
    for source in (copy, folder):
        status, rows, err = _run(capsys, command, str(source))
        assert status == expected_status in (exit_codes.OK, exit_codes.FINDINGS), err
        assert rows, err
        assert f"folder '{BACKUP}' is not <topic>-<partition>" in err and "partition unknown" in err
        assert f"{topic}, dialect" in err and "topic detected from the records" in err
        if command == "decode":
            assert [json.loads(r)["partition"] for r in rows] == [None] * len(rows)
        else:  # the same answer as for the file where it came from (the log's name aside)
            def plain(lines: list[str]) -> list[dict[str, object]]:
                return [{k: v for k, v in json.loads(line).items() if k != "log"}
                        for line in lines]
            assert plain(rows) == plain(expected)


def test_segments_of_one_unnamed_folder_are_one_log(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka's segment names (`<base offset>.log`) in one folder are consecutive segments of
    one partition: replayed as one log, not each on its own."""
    from sharestate.log import read_batches
    from sharestate.log.batch import Batch

    original = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    data = original.read_bytes()
    with original.open("rb") as stream:
        headers = [item.header for item in read_batches(stream) if isinstance(item, Batch)]
    middle = headers[len(headers) // 2]
    folder = tmp_path / BACKUP
    folder.mkdir()
    (folder / f"{headers[0].base_offset:020d}.log").write_bytes(data[:middle.position])
    (folder / f"{middle.base_offset:020d}.log").write_bytes(data[middle.position:])
    _, expected, _ = _run(capsys, "state", str(original))
    _, rows, err = _run(capsys, "state", str(folder))
    assert rows == expected and len(rows) > 1, err
    _, late, _ = _run(capsys, "state", str(folder / f"{middle.base_offset:020d}.log"))
    assert late != expected  # the second segment alone is another log (not a vacuous test)
