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


def _said(sources: list[Path], **kwargs: object) -> tuple[list[Segment], list[str]]:
    lines: list[str] = []
    return discover(sources, say=lines.append, **kwargs), lines  # type: ignore[arg-type]


def test_a_backup_folder_is_read_whatever_its_name(tmp_path: Path) -> None:
    """A folder named `<name>-<digits>` that names no internal topic is a folder of segments
    of any name (it was taken for a partition directory, its files then not Kafka-named, and
    read as empty); a folder of any other name holding Kafka-named segments too (it was
    refused as neither a partition directory nor a log.dirs root)."""
    for folder, name in (("backups-2026-11-23", "share.log"), ("backups", _name(0)),
                         ("orders-0", "x.log.gz"), ("backups-7", _name(3, ".log.gz"))):
        _segment(tmp_path / folder / name, 3, gz=name.endswith(".gz"))
        segments, said = _said([tmp_path / folder])
        assert [s.path.name for s in segments] == [name] and said == []
        assert (segments[0].topic, segments[0].partition) == (None, None)


def test_nested_folders_are_walked(tmp_path: Path) -> None:
    tree = tmp_path / "backups"
    _segment(tree / "2026-11-23" / "__share_group_state-4" / _name(0), 0)
    _segment(tree / "2026-11-23" / "__share_group_state-4" / _name(9), 9)
    _segment(tree / "2026-11-24" / "old" / "copy.log.gz", 1, gz=True)
    _segment(tree / "loose.log", 2)
    (tree / "2026-11-24" / "notes.txt").write_text("not a segment")
    (tree / "2026-11-24" / "old" / "up").symlink_to(tree)  # a loop is walked once
    segments, said = _said([tree])
    assert [(s.path.relative_to(tree).as_posix(), s.topic, s.partition) for s in segments] == [
        ("2026-11-23/__share_group_state-4/" + _name(0), "__share_group_state", 4),
        ("2026-11-23/__share_group_state-4/" + _name(9), "__share_group_state", 4),
        ("2026-11-24/old/copy.log.gz", None, None), ("loose.log", None, None)]
    assert said == []


def test_what_a_log_dirs_root_holds_unread_is_said(log_dirs: Path) -> None:
    (log_dirs / "__share_group_state-3.abc-delete" / _name(0)).write_bytes(b"")
    for partition in (1, 2, 3, 4):
        _segment(log_dirs / f"orders-{partition}" / _name(0), 0)
    segments, said = _said([log_dirs])
    assert {s.path.parent.name for s in segments} == {
        "__share_group_state-7", "__share_group_state-2", "__consumer_offsets-0"}
    assert said == [
        f"{log_dirs}: not read: __share_group_state-3.abc-delete (Kafka's folders of deleted, "
        "moving or stray partitions)",
        f"{log_dirs}: not read: orders-0, orders-1, orders-2 and 2 more (partition directories "
        "of other topics in a log.dirs root; name one as a source to read it)"]


def test_a_partition_directory_reads_its_kafka_named_segments(tmp_path: Path) -> None:
    folder = tmp_path / "__share_group_state-5"
    _segment(folder / _name(0), 0)
    _segment(folder / "copy.log", 0)
    segments, said = _said([folder])
    assert [s.path.name for s in segments] == [_name(0)]
    assert said == [f"{folder}: not read: copy.log (in a partition directory, not named "
                    "<base offset>.log; name the file as a source to read it)"]
    [named] = discover([folder / "copy.log"])
    assert (named.topic, named.partition) == ("__share_group_state", 5)


@pytest.mark.parametrize("shape", ["empty", "only-other-files", "partition-without-segments",
                                   "root-of-other-topics"])
def test_a_source_holding_no_segment_is_an_error(tmp_path: Path, shape: str) -> None:
    """Never an empty read: one line saying what the folder held."""
    source = tmp_path / shape
    source.mkdir()
    expected = "no log segments (*.log, *.log.gz) in it or under it"
    if shape == "only-other-files":
        (source / "notes.txt").write_text("x")
        (source / "sub").mkdir()
    elif shape == "partition-without-segments":
        source = tmp_path / "__consumer_offsets-1"
        _segment(source / "old.log", 0)
        expected += ("; not read: old.log (in a partition directory, not named <base "
                     "offset>.log; name the file as a source to read it)")
    elif shape == "root-of-other-topics":
        _segment(source / "__share_group_state-0.x-delete" / _name(0), 0)
        _segment(source / "__share_group_state-1" / "a.log", 0)
        _segment(source / "orders-0" / _name(0), 0)
        expected += ("; not read: __share_group_state-1/a.log (in a partition directory, not "
                     "named <base offset>.log; name the file as a source to read it); not read: "
                     "__share_group_state-0.x-delete (Kafka's folders of deleted, moving or "
                     "stray partitions); not read: orders-0 (partition directories of other "
                     "topics in a log.dirs root; name one as a source to read it)")
    with pytest.raises(SourceError) as caught:
        discover([source])
    assert str(caught.value) == f"{source}: {expected}"


def test_partition_numbers_past_int32_name_no_partition(tmp_path: Path) -> None:
    """Kafka's partitions are int32: `__share_group_state-2147483648` is no partition
    directory (its number ended up in the int32 `partition` column: exit 70); its segments
    are read as a loose log, and each says why."""
    for number in (2**31, 10**20):
        folder = tmp_path / f"__share_group_state-{number}"
        _segment(folder / _name(0), 0)
        for source in (folder, tmp_path):
            [segment] = [s for s in discover([source]) if s.path.parent == folder]
            assert (segment.topic, segment.partition, segment.base_offset) == (None, None, 0)
            assert segment.note == (f"folder '{folder.name}' names partition {number}, past "
                                    "Kafka's largest (2147483647), so it is no partition "
                                    "directory")
    _segment(tmp_path / f"__share_group_state-{2**31 - 1}" / _name(0), 0)
    assert discover([tmp_path / f"__share_group_state-{2**31 - 1}"])[0].partition == 2**31 - 1
