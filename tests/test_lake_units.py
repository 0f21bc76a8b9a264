"""The lake's Spark-free parts: partition strings and folders, stats, executor-side writer."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharestate.lake import data_files, find_tables
from sharestate.lake.data_files import DataFile, write_data_files
from sharestate.lake.partitions import (
    escape_path_name,
    matches,
    normalize_specs,
    partition_folder,
    partition_string,
    replace_where,
)
from sharestate.lake.stats import FileStats


def test_partition_strings_follow_delta() -> None:
    assert partition_string(None) is None
    assert partition_string("") is None
    assert partition_string("__share_group_state") == "__share_group_state"
    assert partition_string(7) == "7"
    assert partition_string(True) == "true"
    assert partition_string(datetime.date(2025, 1, 2)) == "2025-01-02"
    with pytest.raises(TypeError, match="unsupported partition value"):
        partition_string(1.5)


def test_partition_folders_escape_like_spark() -> None:
    assert escape_path_name("a b:c/d=e%") == "a b%3Ac%2Fd%3De%25"
    assert partition_folder({"topic": "t:1", "partition": None}) \
        == "topic=t%3A1/partition=__HIVE_DEFAULT_PARTITION__"
    assert partition_folder({}) == ""


def test_specs_match_partition_values() -> None:
    specs = normalize_specs([{"topic": "t", "partition": 3}, {"topic": "u"}],
                            ["topic", "partition"])
    assert specs == [{"topic": "t", "partition": "3"}, {"topic": "u"}]
    assert matches(specs, {"topic": "t", "partition": "3"})
    assert matches(specs, {"topic": "u", "partition": "9"})
    assert not matches(specs, {"topic": "t", "partition": "4"})
    assert matches([{}], {"topic": "x", "partition": "1"})
    with pytest.raises(ValueError, match="not partition columns: offset"):
        normalize_specs([{"offset": 1}], ["topic", "partition"])


def test_replace_where_predicate() -> None:
    types = {"topic": "string", "partition": "integer", "day": "date"}
    specs: list[dict[str, str | None]] = [{"topic": "it's", "partition": "3"},
                                          {"day": "2025-01-02"}, {"topic": None}]
    assert replace_where(specs, types) == (
        "(`topic` = 'it\\'s' AND `partition` = 3) OR (`day` = DATE'2025-01-02') "
        "OR (`topic` IS NULL)")
    assert replace_where([{}], types) == "true"
    assert replace_where([], types) == "false"


def test_file_stats_json() -> None:
    long_text = "x" * 40
    batch = pa.RecordBatch.from_pydict({
        "offset": pa.array([5, 2, None], pa.int64()),
        "name": pa.array(["b", long_text, "a"]),
        "ts": pa.array([1_000_001, None, 2_000_000], pa.timestamp("us", tz="UTC")),
        "raw": pa.array([b"x", None, None], pa.binary()),
    })
    stats = FileStats(batch.schema)
    stats.add(batch)
    stats.add(batch.slice(0, 1))
    parsed = json.loads(stats.to_json())
    assert parsed == {
        "numRecords": 4,
        "minValues": {"offset": 2, "name": "a", "ts": "1970-01-01T00:00:01.000001Z"},
        "maxValues": {"offset": 5, "ts": "1970-01-01T00:00:02.000000Z"},
        "nullCount": {"offset": 1, "name": 0, "ts": 1, "raw": 2},
    }


def _batch(topics: list[str | None], offsets: list[int | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"topic": pa.array(topics, pa.string()),
                                       "offset": pa.array(offsets, pa.int64())})


def test_writer_writes_one_file_per_partition_value(tmp_path: Path) -> None:
    batches = [_batch(["a:b", None, "a:b"], [1, 2, 3]), _batch(["c"], [4])]
    out = list(write_data_files(iter(batches), root=str(tmp_path), partition_by=["topic"],
                                not_null=["offset"]))
    files = sorted((DataFile.from_row(row) for row in pa.Table.from_batches(out).to_pylist()),
                   key=lambda f: f.path)
    assert [f.partition_values for f in files] == [{"topic": None}, {"topic": "a:b"},
                                                   {"topic": "c"}]
    assert files[1].path.startswith("topic=a%3Ab/part-")
    assert files[0].path.startswith("topic=__HIVE_DEFAULT_PARTITION__/")
    content = pq.read_table(tmp_path / files[1].path)
    assert content.column_names == ["offset"]
    assert content.column("offset").to_pylist() == [1, 3]
    assert json.loads(files[1].stats)["numRecords"] == 2
    assert files[1].size == (tmp_path / files[1].path).stat().st_size


def test_writer_gathers_small_batches_into_row_groups(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_files, "ROW_GROUP_ROWS", 10)
    batches = [_batch(["a"] * 3, [3 * i, 3 * i + 1, 3 * i + 2]) for i in range(9)]
    (row,) = pa.Table.from_batches(list(write_data_files(
        iter(batches), root=str(tmp_path), partition_by=["topic"], not_null=["offset"]))
    ).to_pylist()
    parquet = pq.ParquetFile(tmp_path / DataFile.from_row(row).path)
    assert [parquet.metadata.row_group(i).num_rows
            for i in range(parquet.metadata.num_row_groups)] == [12, 12, 3]
    assert parquet.read().column("offset").to_pylist() == list(range(27))
    assert json.loads(DataFile.from_row(row).stats)["numRecords"] == 27


def test_writer_dictionary_encodes_strings_only(tmp_path: Path) -> None:
    """Strings (names, ids) repeat and are dictionary-encoded; numbers and bytes are not."""
    batch = pa.RecordBatch.from_pydict({
        "name": ["g1", "g2", "g1"] * 100, "offset": list(range(300)),
        "raw": [bytes([i % 256, i // 256]) for i in range(300)]})
    (row,) = pa.Table.from_batches(list(write_data_files(
        iter([batch]), root=str(tmp_path), partition_by=[], not_null=[]))).to_pylist()
    meta = pq.ParquetFile(tmp_path / DataFile.from_row(row).path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings
                 for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in encodings["name"]
    assert "RLE_DICTIONARY" not in encodings["offset"]
    assert "RLE_DICTIONARY" not in encodings["raw"]


def test_written_file_stats_come_from_its_row_groups(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A written file's integer and string bounds are its Parquet statistics' over its row
    groups, a row group holding a string past Parquet's limit read back; bytes and nested
    columns get no Parquet statistics."""
    monkeypatch.setattr(data_files, "ROW_GROUP_ROWS", 2)
    long_text = "c" * 5000  # Parquet keeps no bounds of its row group's strings
    batches = [pa.RecordBatch.from_pydict({
        "name": pa.array(names), "n": pa.array(numbers, pa.int32()),
        "offset": pa.array(offsets, pa.int64()), "raw": pa.array([b"\xff"] * 2),
        "batches": pa.array([[1], None], pa.list_(pa.int64())),
    }) for names, numbers, offsets in ((["m", "é"], [7, None], [None, None]),
                                       ([long_text, "n"], [-3, 2], [None, None]),
                                       ([None, "zz"], [None, 9], [None, None]))]
    (row,) = pa.Table.from_batches(list(write_data_files(
        iter(batches), root=str(tmp_path), partition_by=[], not_null=[]))).to_pylist()
    assert json.loads(DataFile.from_row(row).stats) == {
        "numRecords": 6,
        "minValues": {"name": long_text[:32], "n": -3},
        "maxValues": {"name": "é", "n": 9},
        "nullCount": {"name": 1, "n": 2, "offset": 6, "raw": 0, "batches": 3},
    }
    meta = pq.ParquetFile(tmp_path / DataFile.from_row(row).path).metadata
    assert meta.num_row_groups == 3
    kept = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).statistics
            for i in range(meta.row_group(0).num_columns)}
    assert kept["n"] is not None and kept["raw"] is None and kept["batches.list.element"] is None


def test_writer_refuses_nulls_and_cleans_up(tmp_path: Path) -> None:
    batches = [_batch(["a"], [1]), _batch(["a"], [None])]
    with pytest.raises(ValueError, match="'offset' is NOT NULL"):
        list(write_data_files(iter(batches), root=str(tmp_path), partition_by=["topic"],
                              not_null=["offset"]))
    assert not list(tmp_path.rglob("*.parquet"))


def test_find_tables_names_views_by_relative_path(tmp_path: Path) -> None:
    for table in ("log_records", "gold/redelivery", "gold/share-state"):
        (tmp_path / table / "_delta_log").mkdir(parents=True)
        (tmp_path / table / "_delta_log" / f"{0:020}.json").write_text("{}\n")
        (tmp_path / table / "topic=x" / "_delta_log").mkdir(parents=True)  # never searched
    (tmp_path / "not_a_table").mkdir()
    (tmp_path / "no_commit_yet" / "_delta_log").mkdir(parents=True)  # no version 0
    assert find_tables(tmp_path) == {
        "gold_redelivery": tmp_path / "gold/redelivery",
        "gold_share_state": tmp_path / "gold/share-state",
        "log_records": tmp_path / "log_records",
    }


def test_staged_rows_come_back_per_table_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """`stage` holds each table's rows as Arrow streams of up to STAGE_ROWS rows (columns
    in the table's order); `unstage` gives back exactly those rows."""
    from sharestate.lake import staged

    monkeypatch.setattr(staged, "STAGE_ROWS", 4)

    def produce(batches: Any) -> Any:
        for batch in batches:
            n = batch.num_rows
            yield "a", pa.RecordBatch.from_pydict({"y": [str(v) for v in range(n)],
                                                   "x": list(range(n))})
            yield "b", pa.RecordBatch.from_pydict({"z": [1.5] * (n % 2)})

    inputs = [pa.RecordBatch.from_pydict({"i": list(range(n))}) for n in (3, 2, 5)]
    chunks = list(staged.stage(iter(inputs), produce=produce,
                               columns={"a": ["x", "y"], "b": ["z"]}))
    tables = [c.column("table")[0].as_py() for c in chunks]
    assert tables == ["a", "a", "b"]  # a: 3+2 rows reach 4, then 5; b: what is left
    schema = pa.schema([("x", pa.int32()), ("y", pa.string())])
    rows = pa.Table.from_batches(staged.unstage(
        iter(c for c in chunks if c.column("table")[0].as_py() == "a"), schema=schema))
    assert rows.schema == schema
    assert rows.column("x").to_pylist() == [0, 1, 2, 0, 1, 0, 1, 2, 3, 4]
    assert rows.column("y").to_pylist() == [str(v) for v in rows.column("x").to_pylist()]
    assert sum(len(list(staged.unstage(iter([c]), schema=pa.schema([("z", pa.float64())]))))
               for c in chunks if c.column("table")[0].as_py() == "b") == 2
