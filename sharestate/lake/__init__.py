"""Delta tables for the pipelines: one small interface, two backends chosen at run time.

- `rs` (embedded default): delta-rs. Spark executors write the Parquet data files, the
  driver commits them as one Delta transaction; reads go through the table's active file
  list. See `sharestate.lake.rs`.
- `jvm`: Spark's own Delta (delta-spark), where Delta's jars are on the classpath (MERGE,
  time travel and Delta SQL then work on the same tables). See `sharestate.lake.jvm`.

`open_lake(spark)` picks one: the `backend` argument, else the session setting
`spark.sharestate.lake.backend`, else `auto` — `jvm` when the session's JVM has Delta's
classes, `rs` otherwise. Both write the same tables (schema, rows, partitioning).

Tables are addressed by path. Every write is one commit and returns its version;
`metadata=` (any JSON value — e.g. the input offsets the run covered) is stored as the
commit's `userMetadata` and comes back in `history()`. Re-running the same interval with
`overwrite(..., partitions=[...])` yields the same table content.

    from sharestate.lake import open_lake, register_views

    lake = open_lake(spark)
    lake.create(path, "topic string not null, partition int not null, offset bigint, ...",
                partition_by=["topic", "partition"], properties={"sharestate.layer": "bronze"})
    lake.overwrite(df, path, partitions=[{"topic": "__share_group_state", "partition": 0}],
                   metadata={"run": run_id, "inputs": [{"topic": ..., "partition": 0,
                                                        "start": 1000, "end": 1060}]})
    lake.read(path).where("offset >= 1000")
    lake.history(path)[0].metadata          # what the last run recorded
    register_views(spark, "warehouse")      # every table as a temp view, for SQL

Partition columns may be strings, integers, booleans or dates. This package imports
pyspark only inside functions; it needs Spark only when a backend is used.
"""

from sharestate.lake.base import ActiveFile, Commit, Inputs, Lake, Produce, TablePath, Target
from sharestate.lake.partitions import PARTITION_TYPES, PartitionSpec
from sharestate.lake.select import (
    BACKEND_CONF,
    BACKENDS,
    BackendError,
    delta_classes_loaded,
    open_lake,
)
from sharestate.lake.sql_views import find_tables, register_views

__all__ = [
    "BACKENDS",
    "BACKEND_CONF",
    "PARTITION_TYPES",
    "ActiveFile",
    "BackendError",
    "Commit",
    "Inputs",
    "Lake",
    "PartitionSpec",
    "Produce",
    "TablePath",
    "Target",
    "delta_classes_loaded",
    "find_tables",
    "open_lake",
    "register_views",
]
