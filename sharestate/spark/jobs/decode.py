"""The decode job: bronze `log_records` -> silver `share_state_records` + `group_records`
(the segments one ingest run wrote, or all of bronze), replacing the partitions it writes."""

from __future__ import annotations

import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sharestate.lake import Target, open_lake
from sharestate.spark.jobs.warehouse import SILVER, RunReport, Warehouse, table_rows
from sharestate.tables import tasks


def decode(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
           only_run: str | None = None) -> RunReport:
    """Bronze -> `share_state_records`, `group_records` (segments of `only_run`, or all),
    in one pass over bronze."""
    started = time.monotonic()
    lake = open_lake(spark)
    bronze = lake.read(warehouse.path("log_records"))
    if only_run is not None:
        bronze = bronze.where(F.col("ingest_run") == only_run)
    lake.overwrite_many(bronze, tasks.silver_tables,
                        {name: Target(warehouse.path(name)) for name in SILVER},
                        metadata={"run": run_id, "job": "decode"})
    report = RunReport("decode", run_id,
                       rows={name: table_rows(warehouse.path(name)) for name in SILVER})
    report.seconds = time.monotonic() - started
    return report


# -- replay ------------------------------------------------------------------------------
