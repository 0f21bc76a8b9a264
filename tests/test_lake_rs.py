"""The `rs` backend with real local Spark and real Delta tables on disk."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sharestate.lake import Lake, delta_classes_loaded, open_lake, register_views
from sharestate.lake.base import as_frame

pytestmark = pytest.mark.slow

SCHEMA = ("topic string not null, partition int not null, offset bigint not null, "
          "timestamp bigint, day date, key binary, value binary")
Row = tuple[str, int, int, int | None, datetime.date, bytes | None, bytes | None]


@pytest.fixture(scope="module")
def lake(spark: SparkSession) -> Lake:
    return open_lake(spark, "rs")


def rows(topic: str, partition: int, offsets: range, tag: bytes = b"v") -> list[Row]:
    day = datetime.date(2025, 1, 1 + partition)
    return [(topic, partition, o, 1_700_000_000_000 + o, day, b"k%d" % o,
             None if o % 7 == 0 else tag + b"%d" % o) for o in offsets]


def frame(spark: SparkSession, data: list[Row]) -> DataFrame:
    return spark.createDataFrame(data, SCHEMA)


def content(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def new_table(lake: Lake, path: Path) -> Path:
    lake.create(path, SCHEMA, partition_by=["topic", "partition"],
                properties={"sharestate.layer": "bronze", "delta.appendOnly": "false"})
    return path


def parquet_files(path: Path) -> set[Path]:
    return set(path.rglob("*.parquet"))


def test_auto_is_rs_without_delta_jars(spark: SparkSession) -> None:
    assert not delta_classes_loaded(spark)
    assert open_lake(spark).backend == "rs"
    with pytest.raises(ValueError, match="unknown lake backend"):
        open_lake(spark, "duckdb")


def test_create_makes_a_valid_delta_table(lake: Lake, tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    table = DeltaTable(str(path))
    assert table.version() == 0
    assert table.metadata().partition_columns == ["topic", "partition"]
    assert table.metadata().configuration["sharestate.layer"] == "bronze"
    fields = {f.name: (f.type.type, f.nullable) for f in table.schema().fields}
    assert fields["offset"] == ("long", False) and fields["day"] == ("date", True)
    assert lake.create(path, SCHEMA, partition_by=["topic", "partition"]) == 0  # idempotent
    with pytest.raises(ValueError, match="a different table already exists"):
        lake.create(path, SCHEMA, partition_by=["topic"])
    with pytest.raises(ValueError, match="partition column 'key' has type binary"):
        lake.create(tmp_path / "u", SCHEMA, partition_by=["key"])
    assert lake.read(path).count() == 0
    assert lake.schema(path).simpleString().startswith("struct<topic:string,partition:int")


def test_append_reads_back_through_spark_and_delta_rs(spark: SparkSession, lake: Lake,
                                                      tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    data = rows("a", 0, range(0, 50)) + rows("b:c d", 1, range(0, 30))
    assert lake.append(frame(spark, data), path) == 1
    assert lake.append(frame(spark, rows("a", 0, range(50, 60))), path) == 2
    expected = sorted(data + rows("a", 0, range(50, 60)))
    assert content(lake.read(path)) == expected
    table = DeltaTable(str(path))
    assert table.version() == 2
    via_rs = table.to_pyarrow_table().select(lake.read(path).columns).to_pylist()
    assert sorted(tuple(r.values()) for r in via_rs) == expected
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert sum(a["num_records"] for a in actions) == 90
    assert {a["partition.topic"] for a in actions} == {"a", "b:c d"}
    assert all(a["min.offset"] is not None and a["max.offset"] is not None for a in actions)
    # the driver-side read (no Spark job) holds the same rows, partition columns included
    arrow = lake.read_arrow(path)
    assert arrow.column_names == lake.read(path).columns
    assert sorted(tuple(r.values()) for r in arrow.to_pylist()) == expected
    assert sorted(lake.read_arrow(path, ["offset", "topic"]).to_pylist(),
                  key=lambda r: (r["topic"], r["offset"]))[:2] == [
        {"offset": 0, "topic": "a"}, {"offset": 1, "topic": "a"}]


def test_a_table_under_a_symbolic_link_reads_through_it(spark: SparkSession, lake: Lake,
                                                       tmp_path: Path) -> None:
    """delta-rs lists a table's files by their resolved paths: Spark's basePath must be
    the resolved folder too, or Spark refuses the read ("Wrong basePath")."""
    path = new_table(lake, tmp_path / "real" / "t")
    data = rows("a", 0, range(0, 20))
    lake.append(frame(spark, data), path)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert content(lake.read(tmp_path / "link" / "t")) == sorted(data)


def test_partition_overwrite_is_idempotent(spark: SparkSession, lake: Lake,
                                           tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    lake.append(frame(spark, rows("a", 0, range(40)) + rows("a", 1, range(40))
                      + rows("a", 2, range(40))), path)
    replacement = rows("a", 1, range(10, 25), tag=b"new")
    results = []
    for expected_version in (2, 3):
        version = lake.overwrite(frame(spark, replacement), path,
                                 partitions=[{"topic": "a", "partition": 1}])
        assert version == expected_version
        results.append(content(lake.read(path)))
    assert results[0] == results[1]
    assert results[0] == sorted(rows("a", 0, range(40)) + replacement + rows("a", 2, range(40)))
    table = DeltaTable(str(path))
    assert table.version() == 3 and len(table.file_uris()) == len(DeltaTable(
        str(path), version=2).file_uris())
    # removed files stay on disk: a bare Parquet read would resurrect them, the lake does not
    assert len(parquet_files(path)) > len(table.file_uris())
    bare = spark.read.parquet(str(path)).count()
    assert bare > lake.read(path).count() == 95
    assert content(lake.read(path, version=1)) == sorted(
        rows("a", 0, range(40)) + rows("a", 1, range(40)) + rows("a", 2, range(40)))


def test_overwrite_commit_has_removes_adds_and_run_metadata(spark: SparkSession, lake: Lake,
                                                            tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    lake.append(frame(spark, rows("a", 0, range(10))), path,
                metadata={"run": "r1", "inputs": [{"partition": 0, "start": 0, "end": 10}]})
    run = {"run": "r2", "inputs": [{"topic": "a", "partition": 0, "start": 0, "end": 5}]}
    lake.overwrite(frame(spark, rows("a", 0, range(5))), path,
                   partitions=[{"topic": "a", "partition": 0}], metadata=run)
    history = lake.history(path)
    assert [c.version for c in history] == [2, 1, 0]
    assert history[0].metadata == run and history[1].metadata["run"] == "r1"
    assert history[0].parameters["predicate"] == "(`topic` = 'a' AND `partition` = 0)"
    assert history[2].operation == "CREATE TABLE" and history[2].metadata is None
    log = [json.loads(line) for line in
           (path / "_delta_log" / "00000000000000000002.json").read_text().splitlines()]
    kinds = [next(iter(action)) for action in log]
    assert kinds.count("add") >= 1 and kinds.count("remove") >= 1 and "commitInfo" in kinds
    info = next(a["commitInfo"] for a in log if "commitInfo" in a)
    assert json.loads(info["userMetadata"]) == run
    assert lake.version(path) == 2


def test_dynamic_overwrite_replaces_only_partitions_with_rows(spark: SparkSession, lake: Lake,
                                                              tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    lake.append(frame(spark, rows("a", 0, range(10)) + rows("a", 1, range(10))), path)
    lake.overwrite(frame(spark, rows("a", 1, range(3))), path)
    assert content(lake.read(path)) == sorted(rows("a", 0, range(10)) + rows("a", 1, range(3)))
    lake.overwrite(frame(spark, []), path, partitions=[{"partition": 0}])  # drops partition 0
    assert content(lake.read(path)) == sorted(rows("a", 1, range(3)))


def test_overwrite_refuses_rows_outside_the_partitions(spark: SparkSession, lake: Lake,
                                                       tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    lake.append(frame(spark, rows("a", 0, range(10))), path)
    before = parquet_files(path)
    with pytest.raises(ValueError, match="rows outside the partitions being replaced"):
        lake.overwrite(frame(spark, rows("a", 0, range(3)) + rows("a", 5, range(3))), path,
                       partitions=[{"topic": "a", "partition": 0}])
    assert lake.version(path) == 1 and parquet_files(path) == before


def test_writes_enforce_schema_and_not_null(spark: SparkSession, lake: Lake,
                                            tmp_path: Path) -> None:
    path = new_table(lake, tmp_path / "t")
    with pytest.raises(ValueError, match=r"missing columns \['day'\]"):
        lake.append(frame(spark, rows("a", 0, range(3))).drop("day"), path)
    with pytest.raises(ValueError, match="offset is int, table has bigint"):
        lake.append(frame(spark, rows("a", 0, range(3))).withColumn(
            "offset", F.col("offset").cast("int")), path)
    nullable = spark.createDataFrame([("a", 0, None, None, None, None, None)],
                                     SCHEMA.replace("offset bigint not null", "offset bigint"))
    with pytest.raises(Exception, match="'offset' is NOT NULL"):
        lake.append(nullable, path)
    assert lake.version(path) == 0 and not parquet_files(path)


def test_unpartitioned_overwrite_replaces_everything(spark: SparkSession, lake: Lake,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "t"
    lake.create(path, SCHEMA)
    lake.append(frame(spark, rows("a", 0, range(10))), path)
    lake.overwrite(frame(spark, rows("b", 1, range(2))), path)
    assert content(lake.read(path)) == sorted(rows("b", 1, range(2)))
    assert lake.partition_columns(path) == []


def test_null_and_odd_partition_values_round_trip(spark: SparkSession, lake: Lake,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "t"
    lake.create(path, "topic string, n int, day date", partition_by=["topic", "day"])
    data = [("a/b:c%d=e f", 1, datetime.date(2025, 1, 1)), (None, 2, None),
            ("007", 3, datetime.date(2025, 1, 2))]
    lake.append(spark.createDataFrame(data, "topic string, n int, day date"), path)
    expected = sorted(data, key=lambda r: r[1])
    assert sorted((tuple(r) for r in lake.read(path).collect()), key=lambda r: r[1]) == expected
    via_rs = DeltaTable(str(path)).to_pyarrow_table().select(["topic", "n", "day"]).to_pylist()
    assert sorted((tuple(r.values()) for r in via_rs), key=lambda r: r[1]) == expected
    lake.overwrite(spark.createDataFrame([(None, 9, None)], "topic string, n int, day date"),
                   path, partitions=[{"topic": None}])
    assert sorted(r.n for r in lake.read(path).collect()) == [1, 3, 9]


def test_register_views_exposes_every_table(spark: SparkSession, lake: Lake,
                                            tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    first = new_table(lake, warehouse / "log_records")
    second = new_table(lake, warehouse / "gold" / "redelivery")
    lake.append(frame(spark, rows("a", 0, range(4))), first)
    lake.append(frame(spark, rows("a", 1, range(6))), second)
    lake.overwrite(frame(spark, rows("a", 1, range(2))), second)
    assert register_views(spark, warehouse, backend="rs") == ["gold_redelivery", "log_records"]
    counts = spark.sql("SELECT (SELECT count(*) FROM log_records), "
                       "(SELECT count(*) FROM gold_redelivery)").collect()[0]
    assert tuple(counts) == (4, 2)


def test_arrow_rows_are_written_on_the_driver_like_a_frame(spark: SparkSession, lake: Lake,
                                                           tmp_path: Path) -> None:
    """Bookkeeping rows held on the driver (an Arrow table) write the same table as a
    DataFrame of them, without a Spark job; the jvm backend converts them (`as_frame`)."""
    data = rows("a", 0, range(0, 20)) + rows("b", 1, range(5, 9))
    arrow = frame(spark, data).toArrow()
    shuffled = arrow.select(list(reversed(arrow.column_names)))  # columns go by name
    by_frame, by_arrow = new_table(lake, tmp_path / "f"), new_table(lake, tmp_path / "a")
    lake.append(frame(spark, data), by_frame)
    jobs = spark.sparkContext.statusTracker().getJobIdsForGroup()
    lake.append(shuffled, by_arrow)
    lake.overwrite(shuffled.filter(pc.equal(shuffled["topic"], "b")), by_arrow,
                   partitions=[{"topic": "b"}])
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs
    assert content(lake.read(by_arrow)) == content(lake.read(by_frame)) == sorted(data)
    assert {f.partition_values["topic"] for f in lake.active_files(by_arrow) or []} == \
        {f.partition_values["topic"] for f in lake.active_files(by_frame) or []} == {"a", "b"}
    with pytest.raises(ValueError, match=r"missing columns \['day'\]"):
        lake.append(arrow.drop_columns(["day"]), by_arrow)
    with pytest.raises(ValueError, match="does not match the table"):
        lake.append(arrow.set_column(2, "offset", pa.array(["x"] * len(arrow))), by_arrow)
    with pytest.raises(ValueError, match=r"does not match the table: .*'offset' with null"):
        lake.append(arrow.set_column(2, "offset", pa.nulls(len(arrow), pa.int64())), by_arrow)
    assert lake.version(by_arrow) == 2
    converted = as_frame(spark, shuffled, lake.schema(by_arrow))
    assert converted.columns == lake.read(by_arrow).columns
    assert content(converted) == sorted(data)
