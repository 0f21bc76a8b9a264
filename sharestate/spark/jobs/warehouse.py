"""What every job shares: the warehouse, a job's report, driver-side rows, task planning."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from sharestate.lake import Lake
from sharestate.tables.spec import table, table_names

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



def one_task_each(spark: SparkSession, rows: list[tuple[Any, ...]],
                  schema: pa.Schema) -> DataFrame:
    """`rows` as a DataFrame of one partition per row, scheduled in list order (give the
    largest work first: the last tasks to start are then the short ones)."""
    return spark.createDataFrame(spark.sparkContext.parallelize(rows, max(1, len(rows))),
                                 from_arrow_schema(schema))
