"""Both Delta backends write the same tables: same schema, same rows, same run metadata.

The `jvm` backend runs Spark's own Delta from the pinned jars `make jars` keeps in the cache
(a JVM started for `jvm` gets them; `make test` fetches them, so under CI a missing set is a
failure, not a skip).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_ROOT, under_ci
from pyspark.sql import DataFrame, SparkSession

from sharestate.jars import delta_jars
from sharestate.lake import Lake, delta_classes_loaded, open_lake
from sharestate.spark.session import build_session

pytestmark = pytest.mark.slow

SCHEMA = ("topic string not null, partition int not null, offset bigint not null, "
          "day date, key binary, value binary")


def batch(spark: SparkSession, partition: int, offsets: range, tag: bytes) -> DataFrame:
    day = datetime.date(2025, 1, 1 + partition)
    return spark.createDataFrame(
        [("t", partition, o, day, b"k%d" % o, None if o % 5 == 0 else tag + b"%d" % o)
         for o in offsets], SCHEMA)


def run_scenario(spark: SparkSession, lake: Lake, path: Path) -> list[Any]:
    """The same writes on either backend; returns the metadata each commit recorded."""
    lake.create(path, SCHEMA, partition_by=["topic", "partition"],
                properties={"sharestate.layer": "bronze"})
    lake.append(batch(spark, 0, range(20), b"a").unionByName(batch(spark, 1, range(20), b"a")),
                path, metadata={"run": 1})
    for run in (2, 3):  # the same interval twice: idempotent
        lake.overwrite(batch(spark, 1, range(5, 12), b"b"), path,
                       partitions=[{"topic": "t", "partition": 1}], metadata={"run": run})
    lake.overwrite(batch(spark, 2, range(3), b"c"), path, metadata={"run": 4})
    return [commit.metadata for commit in lake.history(path)]


def content(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def jobs_to_read(spark: SparkSession, lake: Lake, path: Path) -> int:
    """The Spark jobs reading the table's current rows to the driver takes."""
    group = f"read {lake.backend} {path}"
    spark.sparkContext.setJobGroup(group, "a table read")
    try:
        lake.read(path).collect()
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def tables_written(tmp: Path) -> dict[str, Any]:
    """In a JVM started for the jvm backend: the scenario on each backend, each table read
    back by each backend (history, schema, partitioning, properties, rows, version 1)."""
    session = build_session("test-lake-parity", ui=False,
                            conf={"spark.sharestate.lake.backend": "jvm"})
    assert delta_classes_loaded(session), "a session for the jvm backend lacks Delta's classes"
    lakes = {name: open_lake(session, name) for name in ("rs", "jvm")}
    seen: dict[str, Any] = {}
    # A table with a CHECK constraint (writer protocol 3) is written by Delta's own writer,
    # which enforces it, not committed from files the executors wrote (which would not).
    checked = tmp / "jvm_checked"
    lakes["jvm"].create(checked, SCHEMA, partition_by=["topic", "partition"],
                        properties={"sharestate.layer": "bronze"})
    session.sql(f"ALTER TABLE delta.`{checked}` ADD CONSTRAINT counted CHECK (offset >= 0)")
    try:
        lakes["jvm"].append(batch(session, 0, range(-1, 0), b"x"), checked)
        seen["constraint"] = "not enforced"
    except Exception as exc:  # Delta's error, whatever class it has
        seen["constraint"] = "enforced" if "DELTA_VIOLATE_CONSTRAINT" in str(exc) else str(exc)
    for writer, path in (("rs", tmp / "rs"), ("jvm", tmp / "jvm"), ("jvm_checked", checked)):
        lake = lakes[writer.removesuffix("_checked")]
        seen[writer] = {"history": run_scenario(session, lake, path)}
        for name, reader in lakes.items():
            seen[writer][name] = {
                "frame_schema": reader.read(path).schema.jsonValue(),
                "table_schema": reader.schema(path).jsonValue(), "rows": content(reader.read(path)),
                "partition_by": reader.partition_columns(path),
                "layer": reader.properties(path)["sharestate.layer"],
                "version_1": content(reader.read(path, version=1)),
                "jobs_to_read": jobs_to_read(session, reader, path)}
    return seen


def test_rs_and_jvm_write_the_same_tables(tmp_path: Path) -> None:
    """Run in a process of its own: Delta's classes must be on the classpath of the JVM
    when it starts, and this test process may already run one without them."""
    if not delta_jars().present:
        message = "Delta's pinned jars are not in the jar cache: run `make jars`"
        if under_ci():
            pytest.fail(message)
        pytest.skip(message)
    script = ("import json, sys; sys.path.insert(0, 'tests'); from pathlib import Path; "
              "import test_lake_parity as t; "
              "print(json.dumps(t.tables_written(Path(sys.argv[1])), default=str))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["rs"]["history"] == seen["jvm"]["history"]
    for reader in ("rs", "jvm"):  # each backend sees the two tables alike
        assert seen["rs"][reader] == seen["jvm"][reader], reader
    # the constrained table: one more commit (the constraint) before the same writes
    assert seen["constraint"] == "enforced"
    assert seen["jvm_checked"]["history"][:-1] == seen["rs"]["history"]
    for reader in ("rs", "jvm"):
        assert {**seen["jvm_checked"][reader], "version_1": None} == {
            **seen["rs"][reader], "version_1": None}, reader
    # and both backends see the same table (the frames' nullability is the reader's own:
    # delta-rs reads through Arrow, which marks every column nullable)
    views = [{k: v for k, v in seen[writer][reader].items() if k != "frame_schema"}
             for writer in ("rs", "jvm") for reader in ("rs", "jvm")]
    assert all(view == views[0] for view in views[1:]), views
    assert views[0]["rows"] and views[0]["partition_by"] == ["topic", "partition"]
    # one job: the files come from the log as delta-rs reads it, where Delta's reader first
    # rebuilds the table's state in jobs of its own (4-10 s a read on a small cluster)
    assert views[0]["jobs_to_read"] == 1
