"""How jobs hand their tasks to Spark: one partition per planned row, in order, and Python
workers that import the installed pyspark on a local master."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark import cloudpickle
from pyspark.sql import SparkSession

from sharestate.spark.jobs.warehouse import TaskRows
from sharestate.spark.worker_daemon import installed_first

# the tasks' functions below travel by value: the workers cannot import the tests
cloudpickle.register_pickle_by_value(sys.modules[__name__])

WORK = pa.schema([("name", pa.string()), ("files", pa.list_(pa.struct([
    ("uri", pa.string()), ("first_offset", pa.int64())]))), ("state", pa.binary())])


def _seen(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each task: its partition id, with the rows it was given."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    rows = [row for batch in batches for row in batch.to_pylist()]
    yield pa.RecordBatch.from_pylist(
        [{"task": context.partitionId(), "rows": len(rows),
          "name": rows[0]["name"] if rows else None,
          "files": repr(rows[0]["files"]) if rows else None,
          "state": rows[0]["state"] if rows else None}],
        schema=pa.schema([("task", pa.int32()), ("rows", pa.int32()), ("name", pa.string()),
                          ("files", pa.string()), ("state", pa.binary())]))


def test_task_rows_give_each_row_its_own_task_in_order(spark: SparkSession) -> None:
    rows = [(f"w{i}", [{"uri": f"file:///s/{i}/{j}", "first_offset": i * 10 + j}
                       for j in range(i % 3)], None if i % 2 else bytes([i, 0, 255]))
            for i in range(7)]
    df = TaskRows.of(spark, rows, WORK).mapInArrow(
        _seen, "task int, rows int, name string, files string, state binary")
    assert df.rdd.getNumPartitions() == 7
    seen = sorted((r.asDict() for r in df.collect()), key=lambda r: r["task"])
    assert [(r["task"], r["rows"], r["name"]) for r in seen] == [
        (i, 1, f"w{i}") for i in range(7)]
    assert [r["files"] for r in seen] == [repr(files) for _, files, _ in rows]
    assert [r["state"] for r in seen] == [None if s is None else bytearray(s)
                                          for _, _, s in rows]


def test_task_rows_of_nothing_are_one_task_of_no_row(spark: SparkSession) -> None:
    df = TaskRows.of(spark, [], WORK).mapInArrow(
        _seen, "task int, rows int, name string, files string, state binary")
    assert df.rdd.getNumPartitions() == 1
    assert [(r["task"], r["rows"]) for r in df.collect()] == [(0, 0)]


def _pyspark_of_worker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import pyspark

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"module": [pyspark.__file__],
                                      "parent": [Path(f"/proc/{os.getppid()}/cmdline")
                                                 .read_text().replace("\0", " ")]})


def test_local_workers_import_the_installed_pyspark_not_sparks_zip(spark: SparkSession) -> None:
    import pyspark

    found = spark.range(0, 2, 1, 2).mapInArrow(_pyspark_of_worker,
                                               "module string, parent string").collect()
    assert {row["module"] for row in found} == {pyspark.__file__}
    assert all("-m sharestate.spark.worker_daemon " in row["parent"] for row in found)


def test_installed_first_moves_the_zips_of_the_package_beside_them(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = [*zips, "/elsewhere", str(site)]
    assert installed_first(path) == ["/elsewhere", str(site), *zips]


def test_installed_first_keeps_a_clusters_zips_first(tmp_path: Path) -> None:
    """The zips of a Spark installed elsewhere (a cluster's `$SPARK_HOME`) may be another
    release than the package on the path: they stay first."""
    site = tmp_path / "site-packages"
    (site / "pyspark").mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    zips = [str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip")]
    path = [*zips, str(site)]
    assert installed_first(path) == path
    without_package = [*zips, str(tmp_path / "empty")]
    assert installed_first(without_package) == without_package
    assert installed_first(sys.path[:1]) == sys.path[:1]
