"""Inputs other than segment files: the live Kafka source's planning and reading.

Pure Python over confluent-kafka (no Spark): `parse_options` turns reader options into
`KafkaReadOptions` (credentials held as `Secret`s), `plan_read` resolves them into offset
ranges per topic-partition from the cluster's watermarks (`fetch_topic_ends`: the user
topics' end offsets, for the lag), and `read_range` reads one range
into Arrow batches of the raw schema `RAW_SCHEMA`. `sharestate.spark.kafka_source` wraps these as
the Spark data source `sharestate_kafka`.
"""

from sharestate.cluster.kafka_options import (
    ENV_PREFIX,
    SENSITIVE,
    KafkaOptionError,
    KafkaReadOptions,
    Secret,
    env_name,
    parse_options,
)
from sharestate.cluster.kafka_plan import (
    CONSUMER_VISIBILITY,
    EARLIEST,
    LATEST,
    ClusterUnreachable,
    KafkaPlan,
    KafkaSourceError,
    OffsetRange,
    check_reachable,
    fetch_topic_ends,
    plan_read,
    resolve_ranges,
)
from sharestate.cluster.kafka_read import RAW_DDL, RAW_SCHEMA, read_range

__all__ = [
    "CONSUMER_VISIBILITY",
    "EARLIEST",
    "ENV_PREFIX",
    "LATEST",
    "RAW_DDL",
    "RAW_SCHEMA",
    "SENSITIVE",
    "ClusterUnreachable",
    "KafkaOptionError",
    "KafkaPlan",
    "KafkaReadOptions",
    "KafkaSourceError",
    "OffsetRange",
    "Secret",
    "check_reachable",
    "env_name",
    "fetch_topic_ends",
    "parse_options",
    "plan_read",
    "read_range",
    "resolve_ranges",
]
