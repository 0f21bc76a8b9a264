"""Both Delta backends write the same tables: same schema, same rows, same run metadata.

Needs Delta's jars on the Spark classpath (`spark.jars`, `$SPARK_HOME/jars`), or Maven access
with `SHARESTATE_DELTA_PIP=1` (`build_session(delta="pip")`). Without them the module skips.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from pipelines.session import build_session, delta_jars_present, resolve_conf
from sharestate.lake import Lake, delta_classes_loaded, open_lake

USE_PIP = os.environ.get("SHARESTATE_DELTA_PIP") == "1"

pytestmark = pytest.mark.skipif(
    not USE_PIP and not delta_jars_present(resolve_conf()),
    reason="Delta's jars are not on the Spark classpath here (delta-spark_*.jar is not in "
           "spark.jars, $SPARK_HOME/jars or pyspark/jars, and Maven is unreachable for "
           "configure_spark_with_delta_pip; set SHARESTATE_DELTA_PIP=1 where it is), so "
           "the jvm backend cannot run")

SCHEMA = ("topic string not null, partition int not null, offset bigint not null, "
          "day date, key binary, value binary")


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = build_session("test-lake-parity", ui=False, delta="pip" if USE_PIP else "auto")
    if not delta_classes_loaded(session):
        session.stop()
        pytest.skip("the session started without Delta's classes")
    yield session
    session.stop()


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


def test_rs_and_jvm_write_the_same_tables(spark: SparkSession, tmp_path: Path) -> None:
    rs, jvm = open_lake(spark, "rs"), open_lake(spark, "jvm")
    rs_path, jvm_path = tmp_path / "rs", tmp_path / "jvm"
    assert run_scenario(spark, rs, rs_path) == run_scenario(spark, jvm, jvm_path)
    for reader in (rs, jvm):  # each backend reads both tables alike
        assert reader.read(rs_path).schema == reader.read(jvm_path).schema
        assert content(reader.read(rs_path)) == content(reader.read(jvm_path))
    assert content(rs.read(rs_path)) == content(jvm.read(jvm_path))
    assert rs.partition_columns(jvm_path) == jvm.partition_columns(rs_path)
    assert rs.properties(jvm_path)["sharestate.layer"] \
        == jvm.properties(rs_path)["sharestate.layer"]
    assert content(rs.read(rs_path, version=1)) == content(jvm.read(jvm_path, version=1))
