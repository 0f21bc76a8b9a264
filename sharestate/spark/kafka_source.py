"""`sharestate_kafka`: a Spark 4 Python data source reading a live cluster with confluent-kafka.

    from sharestate.spark.kafka_source import register
    from sharestate.cluster import parse_options, plan_read

    register(spark)
    options = {"bootstrap.servers": "broker:9092", "kafka.security.protocol": "SASL_SSL",
               "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.username": "reader"}
    plan = plan_read(parse_options(options))          # driver: fixes the offset ranges
    df = (spark.read.format("sharestate_kafka").options(**options)
          .options(**plan.offsets_options()).load())
    ...                                                # commit with metadata=plan.metadata()

The password comes from `$SHARESTATE_KAFKA_SASL_PASSWORD` here (or the option
`kafka.sasl.password`). Options are described in `sharestate.cluster.kafka_options`, the
schema (`RAW_DDL`) in `sharestate.cluster.kafka_read`. Planning runs where Spark plans the
query and makes one Spark partition per piece of at most `maxOffsetsPerSplit` offsets;
executors read their piece with their own consumer and never commit offsets. The source
sees what a consumer sees: no control batches, no batch headers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from sharestate.cluster import (
    RAW_DDL,
    RAW_SCHEMA,
    KafkaOptionError,
    KafkaReadOptions,
    OffsetRange,
    parse_options,
    plan_read,
    read_range,
)

NAME = "sharestate_kafka"
RAW_STRUCT: StructType = from_arrow_schema(RAW_SCHEMA)
"""`RAW_DDL` as a Spark schema."""


class OffsetRangePartition(InputPartition):
    """One Spark partition: an offset range, or nothing when the read is empty."""

    def __init__(self, offsets: OffsetRange | None) -> None:
        super().__init__(offsets)

    @property
    def offsets(self) -> OffsetRange | None:
        """The range to read; None for the single partition of an empty read."""
        offsets: OffsetRange | None = self.value
        return offsets


class KafkaReader(DataSourceReader):
    """Plans offset ranges on the driver, reads each on an executor."""

    def __init__(self, options: KafkaReadOptions) -> None:
        self.options = options

    def __repr__(self) -> str:
        return f"KafkaReader({self.options!r})"

    def partitions(self) -> Sequence[InputPartition]:
        splits = plan_read(self.options).splits
        return [OffsetRangePartition(s) for s in splits] or [OffsetRangePartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRangePartition):
            raise TypeError(f"not a partition of {NAME}: {partition!r}")
        if partition.offsets is not None:
            yield from read_range(self.options, partition.offsets)


class KafkaSource(DataSource):
    """`spark.read.format("sharestate_kafka")`: raw records of a live cluster."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def schema(self) -> str:
        return RAW_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        if schema.simpleString() != RAW_STRUCT.simpleString():
            raise KafkaOptionError(f"{NAME} has a fixed schema: {RAW_DDL}")
        return KafkaReader(parse_options(self.options))


def register(spark: SparkSession) -> None:
    """Make `spark.read.format("sharestate_kafka")` available in `spark`."""
    spark.dataSource.register(KafkaSource)


__all__ = ["NAME", "RAW_STRUCT", "KafkaReader", "KafkaSource", "OffsetRangePartition", "register"]
