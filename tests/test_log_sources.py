"""Segment discovery from files, gzipped files, partition directories and log.dirs roots."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from sharestate.log import Segment, SourceError, build_batch, discover, read_batches
from sharestate.log.batch import Batch, RawRecord


def _segment(path: Path, offset: int, gz: bool = False) -> bytes:
    data = build_batch([RawRecord(offset, 0, -1, b"k", b"v%d" % offset, ())])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data) if gz else data)
    return data


def _name(offset: int, suffix: str = ".log") -> str:
    return f"{offset:020d}{suffix}"


@pytest.fixture()
def log_dirs(tmp_path: Path) -> Path:
    for partition, offsets in ((7, (300, 0, 120)), (2, (0,))):
        for offset in offsets:
            _segment(tmp_path / f"__share_group_state-{partition}" / _name(offset), offset)
    _segment(tmp_path / "__consumer_offsets-0" / _name(5, ".log.gz"), 5, gz=True)
    _segment(tmp_path / "orders-0" / _name(0), 0)
    (tmp_path / "__share_group_state-7" / _name(0, ".index")).write_bytes(b"")
    (tmp_path / "__share_group_state-7" / (_name(0) + ".deleted")).write_bytes(b"")
    (tmp_path / "__share_group_state-3.abc-delete").mkdir()
    return tmp_path


def test_partition_directory_in_base_offset_order(log_dirs: Path) -> None:
    segments = discover([log_dirs / "__share_group_state-7"])
    assert [(s.topic, s.partition, s.base_offset, s.gzipped) for s in segments] == [
        ("__share_group_state", 7, 0, False), ("__share_group_state", 7, 120, False),
        ("__share_group_state", 7, 300, False)]


def test_log_dirs_root_lists_internal_topics_only(log_dirs: Path) -> None:
    segments = discover([log_dirs])
    assert [(s.topic, s.partition, s.base_offset) for s in segments] == [
        ("__consumer_offsets", 0, 5), ("__share_group_state", 2, 0),
        ("__share_group_state", 7, 0), ("__share_group_state", 7, 120),
        ("__share_group_state", 7, 300)]
    assert discover([log_dirs], topics=["orders"])[0].topic == "orders"


def test_single_files_plain_and_gzipped(log_dirs: Path, tmp_path: Path) -> None:
    gz = log_dirs / "__consumer_offsets-0" / _name(5, ".log.gz")
    loose = tmp_path / "copy.log"
    data = _segment(loose, 9)
    first, second = discover([gz, str(loose), gz])
    assert (first.topic, first.partition, first.base_offset, first.gzipped) == (
        "__consumer_offsets", 0, 5, True)
    assert (second.topic, second.partition, second.base_offset, second.gzipped) == (
        None, None, None, False)
    with first.open() as stream:
        [batch] = list(read_batches(stream))
    assert isinstance(batch, Batch) and batch.records[0].offset == 5
    with second.open() as stream:
        assert stream.read() == data


@pytest.mark.parametrize("bad", ["missing.log", "notes.txt", "plain-dir"])
def test_bad_sources_raise_source_error(tmp_path: Path, bad: str) -> None:
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "plain-dir").mkdir()
    with pytest.raises(SourceError) as caught:
        discover([tmp_path / bad])
    assert bad in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / _name(0)
    _segment(path, 0)
    path.chmod(0)
    with pytest.raises(SourceError):
        discover([path])


def test_open_failure_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(SourceError):
        Segment(tmp_path / "gone.log", None, None, None, False).open()


def test_only_internal_topic_folders_name_a_partition(tmp_path: Path) -> None:
    """`backups-2026-11-23/` looks like `<topic>-<partition>` but names neither internal
    topic: nothing is taken from it (it was partition 23 of a topic "backups-2026-11")."""
    for folder in ("backups-2026-11-23", "orders-0"):
        _segment(tmp_path / folder / _name(40), 40)
        [segment] = discover([tmp_path / folder])
        assert (segment.topic, segment.partition, segment.base_offset) == (None, None, 40)
        assert segment.note is not None and repr(folder) in segment.note
    _segment(tmp_path / "__consumer_offsets-3" / _name(0), 0)
    [named] = discover([tmp_path / "__consumer_offsets-3" / _name(0)])
    assert (named.topic, named.partition, named.note) == ("__consumer_offsets", 3, None)
    _segment(tmp_path / "loose" / "x.log", 0)
    [loose] = discover([tmp_path / "loose" / "x.log"])
    assert (loose.topic, loose.partition, loose.base_offset, loose.note) == (None,) * 4
