"""Segments in a folder whose name only looks like `<topic>-<partition>`: every command reads
them, taking the topic from the records and saying what it assumed (they crashed with
`tuple.index(x): x not in tuple`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir
from damage import layout

from sharestate import exit_codes
from sharestate.app.cli import main

BACKUP = "backups-2026-11-23"
SEGMENT = f"{0:020d}.log"


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


def _records(lines: list[str]) -> list[str]:
    """Decoded rows as text without the partition (which only a partition directory names)."""
    return sorted(json.dumps({k: v for k, v in json.loads(line).items() if k != "partition"},
                             sort_keys=True) for line in lines)


def _copy(fixture: str, to: Path) -> Path:
    import gzip

    to.parent.mkdir(parents=True, exist_ok=True)
    data = (conformance_dir("kafka-4.4-dev") / fixture).read_bytes()
    to.write_bytes(gzip.compress(data) if to.name.endswith(".gz") else data)
    return to


SHAPES = {  # source (under tmp_path) -> fixture copied to each path under it
    "backups-2026-11-23": {"share_txn.log": "share_txn.log",
                           "share_tombstones.log": "share_tombstones.log"},
    "backups": {f"{0:020d}.log": "share_txn.log"},
    "backups-7": {f"{0:020d}.log.gz": "share_tombstones.log"},
    "__share_group_state-3": {f"{0:020d}.log": "share_tombstones.log"},
    "log-dirs": {f"__share_group_state-0/{0:020d}.log": "share_txn.log",
                 f"__consumer_offsets-9/{0:020d}.log": "consumer_offsets_txn.log"},
    "nested": {f"2026-11-23/__share_group_state-0/{0:020d}.log": "share_tombstones.log",
               "2026-11-24/old/offsets.log.gz": "consumer_offsets_txn.log",
               "2026-11-24/old/share_txn.log": "share_txn.log"},
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_folder_shape_reads_every_segment(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                shape: str) -> None:
    """A folder is read to the same records as its files named one by one, whatever its
    name and theirs (a backup folder named `<name>-<digits>` was read as empty, exit 0; one
    with Kafka-named files and no such suffix was refused)."""
    files = [_copy(fixture, tmp_path / shape / path) for path, fixture in SHAPES[shape].items()]
    status, rows, err = _run(capsys, "decode", str(tmp_path / shape))
    expected_status, expected, _ = _run(capsys, "decode", *map(str, files))
    assert (status, _records(rows)) == (expected_status, _records(expected)), err
    assert len(rows) >= 84 * len(files) // 2
    for command in ("state", "offsets"):
        status, rows, err = _run(capsys, command, str(tmp_path / shape))
        expected_status, expected, _ = _run(capsys, command, *map(str, files))
        assert (status, sorted(rows)) == (expected_status, sorted(expected)), err


def test_the_backup_folder_of_the_report(tmp_path: Path) -> None:
    """The report's steps, as a user runs them: 129 records, and stderr says how the folder
    was read."""
    import subprocess
    import sys

    folder = tmp_path / BACKUP
    for name in ("share_txn.log", "share_tombstones.log"):
        _copy(name, folder / name)
    done = subprocess.run([sys.executable, "-m", "sharestate.app.cli", "decode", str(folder)],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, len(done.stdout.splitlines())) == (0, 129), done.stderr
    assert done.stderr.count(f"folder '{BACKUP}' is not <topic>-<partition>") == 2


@pytest.mark.parametrize("command", ["decode", "state", "prune", "offsets"])
def test_a_folder_without_segments_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              command: str) -> None:
    """Never an empty answer with exit 0: one line, exit 2."""
    folder = tmp_path / BACKUP
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("no segment here")
    status, rows, err = _run(capsys, command, str(folder))
    assert (status, rows) == (exit_codes.USAGE, [])
    assert err == (f"sharestate: error: {folder}: no log segments (*.log, *.log.gz) in it or "
                   "under it\n")


def test_a_log_dirs_root_says_what_it_does_not_read(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    _copy("share_txn.log", tmp_path / "root" / "__share_group_state-0" / f"{0:020d}.log")
    _copy("share_txn.log", tmp_path / "root" / "orders-0" / f"{0:020d}.log")
    status, rows, err = _run(capsys, "decode", str(tmp_path / "root"))
    assert (status, len(rows)) == (exit_codes.OK, 84)
    assert (f"{tmp_path / 'root'}: not read: orders-0 (partition directories of other topics "
            "in a log.dirs root; name one as a source to read it)\n") in err


@pytest.mark.slow
def test_the_pipeline_reads_every_folder_shape(spark: object, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`run --source` lists sources with the same function as the commands: every record of
    a backup folder, a Kafka-named folder, nested folders, a `.log.gz` and a folder past
    int32 (which stopped the run with exit 70) is in bronze, and stderr says how each
    ambiguous folder was read; of a partition's copies on two brokers, the leader's only.
    Each log that names no partition is replayed apart (they were one partition -1: their
    states mixed, and a run that read one again dropped the others' rows from bronze).
    A run lists and ranks the copies once (ingest listed them again)."""
    from sharestate.lake import open_lake
    from sharestate.log import replicas
    from sharestate.spark.run import parser, run

    rankings: list[int] = []
    rank = replicas.one_replica

    def counted(*args: Any, **kwargs: Any) -> list[Any]:
        rankings.append(1)
        return rank(*args, **kwargs)

    tree = tmp_path / "tree"
    past = f"__share_group_state-{2**31}"
    files = [_copy(fixture, tree / path) for path, fixture in (
        (f"{BACKUP}/share_txn.log", "share_txn.log"),
        (f"{BACKUP}/share_tombstones.log", "share_tombstones.log"),
        (f"backups/{0:020d}.log", "share_replay_small.log"),
        (f"nested/2026-11-24/{past}/{0:020d}.log", "share_update_tombstone.log"),
        ("nested/old/offsets.log.gz", "consumer_offsets_txn.log"))]
    leader = _copy("share_replay_small.log", tree / f"cluster/b2/__share_group_state-5/{SEGMENT}")
    follower = tree / f"cluster/b1/__share_group_state-5/{SEGMENT}"
    follower.parent.mkdir(parents=True)
    follower.write_bytes(leader.read_bytes()[:layout(leader.read_bytes())[9].position])
    # each log that names no partition is a partition of its own, numbered down from -1
    # per topic in the order of their paths; the copies of partition 5 are one log
    numbers = {files[2]: -1, files[1]: -2, files[0]: -3, files[3]: -4, files[4]: -1,
               leader: 5}
    expected, states = {}, {}
    for path, partition in numbers.items():
        _, rows, _ = _run(capsys, "decode", str(path))
        expected[str(path)] = (partition, len(rows))
        if path != files[4]:
            _, rows, _ = _run(capsys, "state", str(path))
            states[partition] = len(rows)
    lake = open_lake(spark)
    warehouse = tmp_path / "wh"
    for touched in (None, files[0]):  # a loose log read again loses no other log's rows
        if touched is not None:
            os.utime(touched, (touched.stat().st_atime, touched.stat().st_mtime + 60))
        rankings.clear()
        with monkeypatch.context() as patched:
            patched.setattr(replicas, "one_replica", counted)
            status = run(parser().parse_args(["--source", str(tree),
                                              "--warehouse", str(warehouse)]))
        err = capsys.readouterr().err
        assert status in (exit_codes.OK, exit_codes.FINDINGS), err
        assert len(rankings) == 1
        bronze = lake.read(warehouse / "log_records").groupBy("source", "partition") \
            .count().collect()  # type: ignore[attr-defined]
        assert {r["source"]: (r["partition"], r["count"]) for r in bronze} == expected
        state = lake.read(warehouse / "share_partition_state").groupBy("state_partition") \
            .count().collect()  # type: ignore[attr-defined]
        assert {r["state_partition"]: r["count"] for r in state} == states
        assert ("__share_group_state: 4 logs name no partition; the tables know them as "
                f"partition -1 ({files[2]}), partition -2 ({files[1]}), partition -3 "
                f"({files[0]}), partition -4 ({files[3]})") in err
    assert f"__share_group_state-5: 2 copies (replicas of several brokers?); read {leader.parent}" \
        in err  # the follower's copy is not read: its records are the leader's
    assert f"{tree / BACKUP}: folder '{BACKUP}' is not <topic>-<partition>" in err
    assert f"folder '{past}' names partition {2**31}, past Kafka's largest" in err


def test_a_folder_past_int32_names_no_partition(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """`__share_group_state-99999999999999999999/` is no partition directory (state printed
    that number as `state_partition`): its segment is read as a loose log, and stderr says
    why, whether the folder or the folder holding it is named."""
    original = conformance_dir("kafka-4.4-dev") / "share_tombstones.log"
    folder = tmp_path / f"__share_group_state-{10**20 - 1}"
    _copy(original.name, folder / f"{0:020d}.log")
    _, expected, _ = _run(capsys, "state", str(original))
    for source in (folder, tmp_path):
        status, rows, err = _run(capsys, "state", str(source))
        assert status == exit_codes.OK and rows == expected, err
        assert {json.loads(row)["state_partition"] for row in rows} == {-1}  # unknown
        assert (f"folder '{folder.name}' names partition {10**20 - 1}, past Kafka's largest "
                "(2147483647), so it is no partition directory: partition unknown") in err


def test_logs_that_name_no_partition_are_listed_per_topic(tmp_path: Path) -> None:
    """The logs a Spark run numbers itself: a topic's logs that name no partition, a file
    alone or a folder of Kafka-named segments each (a partition folder is not one)."""
    from sharestate.log import discover
    from sharestate.replay.logs import loose_logs

    loose = [_copy("share_txn.log", tmp_path / "a" / "share_txn.log"),
             _copy("share_tombstones.log", tmp_path / "a" / "share_tombstones.log")]
    kept = [_copy("share_replay_small.log", tmp_path / "a" / "kept" / f"{0:020d}.log"),
            _copy("share_update_tombstone.log", tmp_path / "a" / "kept" / f"{900:020d}.log")]
    offsets = _copy("consumer_offsets_txn.log", tmp_path / "a" / "offsets.log")
    _copy("share_txn.log", tmp_path / "a" / "__share_group_state-3" / f"{0:020d}.log")
    found = {topic: [[s.path for s in log] for log in logs]
             for topic, logs in loose_logs(discover([str(tmp_path / "a")])).items()}
    assert found == {"__share_group_state": [kept, [loose[1]], [loose[0]]],
                     "__consumer_offsets": [[offsets]]}
