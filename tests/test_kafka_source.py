"""The live Kafka source against a real broker process on loopback.

The broker is librdkafka's mock cluster: a confluent-kafka client configured with
`test.mock.num.brokers` starts it in this process, listening on 127.0.0.1; every other
client — the planner and Spark's Python workers included — connects to it over TCP like to
any broker. It accepts the internal topic name `__share_group_state` (auto-created with its
default partition count), so no renaming is needed.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from conftest import conformance_dir
from pyspark.sql import SparkSession

from sharestate.cluster import (
    CONSUMER_VISIBILITY,
    KafkaOptionError,
    KafkaSourceError,
    OffsetRange,
    Secret,
    parse_options,
    plan_read,
    read_range,
    resolve_ranges,
)
from sharestate.log import RawRecord, read_batches
from sharestate.spark.kafka_source import RAW_STRUCT, register

pytestmark = pytest.mark.slow

TOPIC = "__share_group_state"
PADDING = 1000  # the fixture's records start at offset 1000: pad so offsets match
PASSWORD = "hunter2-Sesame-4711"


@dataclass(frozen=True)
class Broker:
    bootstrap: str
    records: list[RawRecord]
    cluster: Producer  # holds the mock cluster: it lives as long as this client


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    with (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").open("rb") as segment:
        records = [r for batch in read_batches(segment) if hasattr(batch, "records")
                   for r in batch.records]
    assert records[0].offset == PADDING
    cluster = Producer({"test.mock.num.brokers": 1})
    brokers = cluster.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    assert bootstrap.startswith("127.0.0.1:")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(PADDING):
        producer.produce(TOPIC, key=b"padding", value=b"padding", partition=0)
    for record in records:
        producer.produce(TOPIC, key=record.key, value=record.value, partition=0,
                         timestamp=record.timestamp, headers=list(record.headers) or None)
    producer.produce("headers", key=b"k", value=None, partition=0,
                     headers=[("h1", b"x"), ("h2", None)])
    assert producer.flush(30) == 0
    producer.close()  # before the mock cluster goes: it would log connection failures
    yield Broker(bootstrap, records, cluster)


@pytest.fixture(scope="module")
def spark(spark: SparkSession) -> SparkSession:
    """The session, with the live-cluster data source registered."""
    register(spark)
    return spark


def fixture_options(broker: Broker, **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.bootstrap, "topics": TOPIC,
            "startingOffsets": f'{{"{TOPIC}": {{"0": {PADDING}}}}}', **extra}


def test_options_parse_and_keep_credentials_out_of_sight() -> None:
    options = parse_options(
        {"bootstrap.servers": "b:9092", "kafka.security.protocol": "SASL_SSL",
         "kafka.SASL.username": "reader", "kafka.sasl.password": PASSWORD},
        env={"SHARESTATE_KAFKA_SSL_KEY_PASSWORD": "key-" + PASSWORD})
    assert options.topics == ("__share_group_state", "__consumer_offsets")
    assert options.isolation_level == "read_committed"  # Kafka's committed view
    config = options.client_config("g")
    assert config["sasl.password"] == PASSWORD and config["ssl.key.password"] == "key-" + PASSWORD
    assert config["sasl.username"] == "reader" and config["enable.auto.commit"] == "false"
    for text in (repr(options), str(options.describe()), repr(options.secrets),
                 f"{options.secrets['sasl.password']}"):
        assert PASSWORD not in text
    assert options.redact(f"failed with {PASSWORD}") == "failed with ***"
    assert pickle.loads(pickle.dumps(options)).client_config("g") == config
    assert Secret("x") == Secret("x") and repr(Secret("x")) == "***"
    with pytest.raises(KafkaOptionError, match="never commits offsets"):
        parse_options({"bootstrap.servers": "b", "kafka.enable.auto.commit": "true"})
    with pytest.raises(KafkaOptionError, match=r"bootstrap\.servers is required"):
        parse_options({"topics": "t"})
    with pytest.raises(KafkaOptionError, match=r"isolation\.level"):
        parse_options({"bootstrap.servers": "b", "kafka.isolation.level": "dirty"})


def test_ranges_resolve_against_watermarks_and_split() -> None:
    marks = {("t", 0): (10, 100), ("t", 1): (0, 0)}
    assert resolve_ranges(marks, -2, -1) == [OffsetRange("t", 0, 10, 100),
                                             OffsetRange("t", 1, 0, 0)]
    assert resolve_ranges(marks, {"t": {0: 50}}, {"t": {0: 60}})[0] == OffsetRange("t", 0, 50,
                                                                                   60)
    with pytest.raises(KafkaOptionError, match="before its log start offset 10"):
        resolve_ranges(marks, {"t": {0: 5}}, -1)
    with pytest.raises(KafkaOptionError, match="past its end offset 100"):
        resolve_ranges(marks, -2, {"t": {0: 101}})
    with pytest.raises(KafkaOptionError, match="not read"):
        resolve_ranges(marks, {"u": {0: 1}}, -1)
    assert list(OffsetRange("t", 0, 10, 35).split(10)) == [
        OffsetRange("t", 0, 10, 20), OffsetRange("t", 0, 20, 30), OffsetRange("t", 0, 30, 35)]


def test_plan_covers_every_partition_and_states_what_it_cannot_see(broker: Broker) -> None:
    plan = plan_read(parse_options(fixture_options(broker, maxOffsetsPerSplit="25")))
    partitions = sorted(broker.cluster.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions)
    assert [r.partition for r in plan.ranges] == partitions
    assert plan.ranges[0] == OffsetRange(TOPIC, 0, PADDING, PADDING + len(broker.records))
    assert all(r.start == r.end == 0 for r in plan.ranges[1:])
    assert [(s.start, s.end) for s in plan.splits] == [(1000, 1025), (1025, 1050), (1050, 1060)]
    metadata = plan.metadata()
    assert metadata["visibility"] == CONSUMER_VISIBILITY
    assert "control batches" in CONSUMER_VISIBILITY and "batch headers" in CONSUMER_VISIBILITY
    assert metadata["ranges"][0] == {"topic": TOPIC, "partition": 0, "start": 1000, "end": 1060}
    assert parse_options({**fixture_options(broker), **plan.offsets_options()}) \
        .starting_offsets == plan.offsets_options()["startingOffsets"]


def test_read_range_returns_records_and_headers(broker: Broker) -> None:
    options = parse_options({"bootstrap.servers": broker.bootstrap, "topics": "headers"})
    rows = [row for batch in read_range(options, OffsetRange("headers", 0, 0, 1))
            for row in batch.to_pylist()]
    assert rows == [{"topic": "headers", "partition": 0, "offset": 0, "timestamp": rows[0][
        "timestamp"], "timestamp_type": "CreateTime", "key": b"k", "value": None,
        "headers": [{"key": "h1", "value": b"x"}, {"key": "h2", "value": None}]}]


def test_spark_reads_the_fixture_back(spark: SparkSession, broker: Broker) -> None:
    df = spark.read.format("sharestate_kafka").options(
        **fixture_options(broker, maxOffsetsPerSplit="25")).load()
    assert df.schema.simpleString() == RAW_STRUCT.simpleString()
    assert df.rdd.getNumPartitions() == 3
    rows = df.orderBy("offset").collect()
    assert [(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp, r.timestamp_type)
            for r in rows] == [(TOPIC, 0, r.offset, r.key, r.value, r.timestamp, "CreateTime")
                               for r in broker.records]
    assert all(r.headers == [] for r in rows)


def test_spark_reads_exactly_a_driver_plan(spark: SparkSession, broker: Broker) -> None:
    options = {"bootstrap.servers": broker.bootstrap, "topics": TOPIC}
    plan = plan_read(parse_options({**options, "startingOffsets": f'{{"{TOPIC}": {{"0": 990}}}}',
                                    "endingOffsets": f'{{"{TOPIC}": {{"0": 1010}}}}'}))
    df = spark.read.format("sharestate_kafka").options(**options) \
        .options(**plan.offsets_options()).load()
    assert [r.offset for r in df.orderBy("offset").collect()] == list(range(990, 1010))
    nothing = spark.read.format("sharestate_kafka").options(**options,
                                                            startingOffsets="latest").load()
    assert nothing.count() == 0


def test_password_stays_out_of_plans_errors_and_logs(
        spark: SparkSession, broker: Broker, capfd: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    readable = spark.read.format("sharestate_kafka").options(
        **fixture_options(broker, **{"kafka.sasl.password": PASSWORD})).load()
    plans = [readable._jdf.queryExecution().toString()]
    for mode in ("simple", "extended", "codegen", "cost", "formatted"):
        readable.explain(mode)
    assert readable.count() == len(broker.records)
    # SASL against a broker that does not speak it: authentication fails, twice over
    failing = {"bootstrap.servers": broker.bootstrap, "topics": TOPIC, "timeoutMs": "3000",
               "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
               "kafka.sasl.username": "reader", "kafka.sasl.password": PASSWORD}
    with pytest.raises(KafkaSourceError) as planned:
        plan_read(parse_options(failing))
    with pytest.raises(Exception) as in_spark:
        spark.read.format("sharestate_kafka").options(**failing).load().collect()
    captured = capfd.readouterr()
    assert "refused the client" in str(planned.value)
    assert "refused the client" in str(in_spark.value)
    for text in (*plans, str(planned.value), repr(planned.value), str(in_spark.value),
                 captured.out, captured.err, caplog.text):
        assert PASSWORD not in text


def test_a_cluster_gone_under_the_reader_is_named_not_printed(
        capfd: pytest.CaptureFixture[str]) -> None:
    """The cluster gone while an executor reads a range: its consumer printed librdkafka's
    own lines (`%3|...|FAIL|rdkafka#consumer-1| ... Connection refused`) into the
    executor's stderr at every retry; they stay off it, and the error that ends the read
    names the cause."""
    import gc
    import re

    holder = [Producer({"test.mock.num.brokers": 1,
                        "logger": logging.getLogger("tests.mock-cluster")})]
    address = ",".join(f"{b.host}:{b.port}"
                       for b in holder[0].list_topics(timeout=10).brokers.values())
    holder.clear()  # the mock cluster goes with the client that holds it
    gc.collect()
    options = parse_options({"bootstrap.servers": address, "topics": "orders",
                             "timeoutMs": "2000"})
    with pytest.raises(KafkaSourceError, match=r"no records from orders-0 .*: .*"
                                               r"Connection refused"):
        list(read_range(options, OffsetRange("orders", 0, 0, 5)))
    assert not [line for line in re.findall(r"^%\d\|.*", capfd.readouterr().err, re.M)
                if address in line]
