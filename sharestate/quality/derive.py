"""Derived frames for what expectations cannot see directly: nested batches, key order.

Each function takes a table as a Spark DataFrame and returns a flat frame whose columns a
plain Great Expectations expectation can check row by row:

- `state_batches`: one row per in-flight state batch, with the previous batch's last
  offset in the same state (`prev_last_offset`), so ordering is a column-pair check;
- `spso_steps`: the history with each row's previous SPSO for the same key, incarnation
  (tombstones start a new one) and state epoch (`prev_start_offset`);
- `acknowledged_errors`: `decode_errors` without the raw bytes, with the acknowledgement
  that accepts each row (`acknowledged_by`, null when none does).

Everything stays distributed; pyspark is imported inside the functions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sharestate.quality.config import Acknowledgement, acknowledged_by

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SHARE_KEY = ("group_id", "topic_id", "partition")
ERROR_COLUMNS = ("source", "topic", "partition", "segment", "offset", "position", "kind",
                 "message")


def state_batches(states: DataFrame, keys: Sequence[str] = SHARE_KEY) -> DataFrame:
    """One row per element of `state_batches`: `keys`, dialect, the batch and its neighbour."""
    from pyspark.sql import functions as F

    exploded = states.select(*keys, "dialect", "state_batches",
                             F.posexplode("state_batches").alias("batch_index", "batch"))
    # element_at is 1-based: position `batch_index` is the batch before this one.
    previous = F.when(F.col("batch_index") > 0,
                      F.element_at("state_batches", F.col("batch_index"))["last_offset"])
    return exploded.select(
        *keys, "dialect", "batch_index",
        *(F.col("batch")[name].alias(name) for name in
          ("first_offset", "last_offset", "delivery_state", "delivery_count")),
        previous.alias("prev_last_offset"))


def spso_steps(history: DataFrame) -> DataFrame:
    """The history with `incarnation` and `prev_start_offset` (same key, life, state epoch)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy(*SHARE_KEY).orderBy("record_offset")
    tombstones_before = F.coalesce(F.sum(F.col("deleted").cast("int")).over(
        by_key.rowsBetween(Window.unboundedPreceding, -1)), F.lit(0))
    lives = history.select(*SHARE_KEY, "state_partition", "record_offset", "record_type",
                           "deleted", "state_epoch", "start_offset",
                           tombstones_before.alias("incarnation"))
    by_epoch = Window.partitionBy(*SHARE_KEY, "incarnation", "state_epoch") \
        .orderBy("record_offset")
    return lives.withColumn(
        "prev_start_offset",
        F.when(~F.col("deleted"), F.lag("start_offset").over(by_epoch)))


def acknowledged_errors(errors: DataFrame, acks: tuple[Acknowledgement, ...],
                        today: dt.date) -> DataFrame:
    """`decode_errors` (minus raw bytes) with `acknowledged_by`: the entry accepting the row."""
    from pyspark.sql.types import StringType, StructField, StructType

    rows = errors.select(*ERROR_COLUMNS)
    schema = StructType([*rows.schema.fields, StructField("acknowledged_by", StringType())])
    return rows.mapInPandas(partial(_acknowledge, acks=acks, today=today), schema)


def _acknowledge(frames: Iterator[Any], acks: tuple[Acknowledgement, ...],
                 today: dt.date) -> Iterator[Any]:
    """mapInPandas: each pandas frame with its `acknowledged_by` column."""
    for frame in frames:
        records = frame.astype(object).where(frame.notna(), None).to_dict("records")
        frame["acknowledged_by"] = [acknowledged_by(row, acks, today) for row in records]
        yield frame
