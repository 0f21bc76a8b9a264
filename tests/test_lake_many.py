"""`overwrite_many`: one pass over the input writes several tables, fused (rs) or cached
(the generic path every backend has) — and both give the same tables."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark import cloudpickle

from sharestate.lake import Lake, Target, open_lake

pytestmark = pytest.mark.slow

EVENS = "n bigint not null, half bigint, part int not null"
ODDS = "n bigint not null, tag string"


def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[str, pa.RecordBatch]]:
    for batch in batches:
        numbers = batch.column("id").to_pylist()
        evens = [n for n in numbers if n % 2 == 0]
        odds = [n for n in numbers if n % 2]
        yield "evens", pa.RecordBatch.from_pydict(
            {"n": evens, "half": [n // 2 for n in evens], "part": [n % 3 for n in evens]})
        yield "odds", pa.RecordBatch.from_pydict({"n": odds, "tag": [f"o{n}" for n in odds]})


@pytest.fixture(scope="module")
def spark(spark: Any) -> Any:
    # Spark's workers cannot import this test module: ship its functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return spark


def tables(lake: Lake, root: Path) -> dict[str, Target]:
    lake.create(str(root / "evens"), EVENS, partition_by=["part"])
    lake.create(str(root / "odds"), ODDS)
    return {"evens": Target(str(root / "evens")), "odds": Target(str(root / "odds"), [{}])}


def contents(lake: Lake, root: Path) -> dict[str, list[tuple[Any, ...]]]:
    return {name: sorted(tuple(r) for r in lake.read(str(root / name)).collect())
            for name in ("evens", "odds")}


def test_fused_and_generic_paths_write_the_same_tables(spark: Any, tmp_path: Path) -> None:
    lake = open_lake(spark, "rs")
    source = spark.range(0, 1000, numPartitions=4)
    fused = tables(lake, tmp_path / "fused")
    versions = lake.overwrite_many(source, produce, fused, metadata={"run": 1})
    assert versions == {"evens": 1, "odds": 1}
    generic = tables(lake, tmp_path / "generic")
    Lake.overwrite_many(lake, source, produce, generic, metadata={"run": 1})
    assert contents(lake, tmp_path / "fused") == contents(lake, tmp_path / "generic")
    assert len(contents(lake, tmp_path / "fused")["evens"]) == 500
    assert lake.history(str(tmp_path / "fused" / "odds"))[0].metadata == {"run": 1}


def test_overwriting_again_replaces_what_was_written(spark: Any, tmp_path: Path) -> None:
    lake = open_lake(spark, "rs")
    targets = tables(lake, tmp_path)
    lake.overwrite_many(spark.range(0, 100), produce, targets)
    lake.overwrite_many(spark.range(0, 10), produce, targets)
    got = contents(lake, tmp_path)
    assert [r[0] for r in got["odds"]] == [1, 3, 5, 7, 9]
    # dynamic partitions: parts 0, 1, 2 all rewritten by the second run
    assert sorted(r[0] for r in got["evens"]) == [0, 2, 4, 6, 8]
