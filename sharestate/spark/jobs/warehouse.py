"""What every job shares: the warehouse, a job's report, driver-side rows, task planning."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from sharestate.lake import Lake
from sharestate.tables.spec import table, table_names

if TYPE_CHECKING:
    from pyspark.sql.pandas._typing import ArrowMapIterFunction
    from pyspark.sql.types import StructType

SILVER = ("share_state_records", "group_records")
"""The decode job's tables (ingest writes them too when it runs with decode)."""


@dataclass
class Warehouse:
    """Where the tables live: one Delta table per folder under `root`."""

    root: Path

    def path(self, name: str) -> str:
        return str(self.root / name)

    def create(self, lake: Lake, name: str) -> None:
        """Create the documented table `name` unless it exists (then check its schema)."""
        spec = table(name)
        lake.create(self.path(name), spec.spark_schema(), partition_by=list(spec.partition_by),
                    properties={"sharestate.layer": spec.layer,
                                "sharestate.grain": spec.grain,
                                "sharestate.cluster_by": ",".join(spec.cluster_by)})

    def create_all(self, lake: Lake) -> None:
        """Create every documented table that does not exist yet."""
        for name in table_names():
            self.create(lake, name)


@dataclass
class RunReport:
    """What a job did, for the run summary and the exit status."""

    job: str
    run_id: str
    rows: dict[str, int] = field(default_factory=dict)
    findings: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    """What the job says on stderr after its line (e.g. a stop point past the logs' end)."""


def table_rows(path: str) -> int:
    """Rows of a Delta table from its log's file statistics (no data read)."""
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    return int(pc.sum(actions.column("num_records")).as_py() or 0)


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


# -- ingest ------------------------------------------------------------------------------


def rows_table(rows: list[dict[str, Any]], name: str) -> pa.Table:
    """Driver-side rows as an Arrow table of table `name`'s schema."""
    return pa.Table.from_pylist(rows, schema=table(name).arrow_schema())



@dataclass(frozen=True)
class TaskRows:
    """Rows of work, one Spark task each, scheduled in list order (give the largest work
    first: the last tasks to start are then the short ones). The rows travel inside the
    tasks' function, so each task's Python worker gets its row with the function it runs:
    no Python pass of their own, no broadcast."""

    spark: SparkSession
    rows: pa.Table

    @classmethod
    def of(cls, spark: SparkSession, rows: list[tuple[Any, ...]], schema: pa.Schema
           ) -> TaskRows:
        """`rows` (tuples in `schema`'s column order) as tasks."""
        return cls(spark, pa.Table.from_pylist(
            [dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema))

    def mapInArrow(self, func: ArrowMapIterFunction, schema: StructType | str) -> DataFrame:
        """`func` over each task's row (a batch of the rows' schema), as a DataFrame; no
        rows are one task of none (`func` runs once over no batch)."""
        tasks = max(1, self.rows.num_rows)
        return self.spark.range(0, tasks, 1, tasks).mapInArrow(
            partial(_rows_at, rows=self.rows, func=func), schema)


def _rows_at(ids: Iterator[pa.RecordBatch], rows: pa.Table,
             func: ArrowMapIterFunction) -> Iterator[pa.RecordBatch]:
    """`func` over the rows of `rows` at the indexes `ids` holds (a task's `spark.range`)."""
    indexes = [i for batch in ids for i in batch.column(0).to_pylist() if i < rows.num_rows]
    return func(iter(rows.take(indexes).to_batches()) if indexes else iter(()))
