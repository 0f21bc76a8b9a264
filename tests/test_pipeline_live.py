"""The pipeline reading a live cluster: a real broker process on loopback (librdkafka's mock
cluster), fed with the records of a Kafka-written segment, read back through Spark."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from conftest import client_threads, conformance_dir

from sharestate.cluster import parse_options, plan_read
from sharestate.lake import open_lake
from sharestate.log import Batch, read_batches
from sharestate.records.spec import snake_case
from sharestate.spark.run import main as run_all
from sharestate.spark.session import build_session

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    cluster = Producer({"test.mock.num.brokers": 1})
    brokers = cluster.list_topics(timeout=10).brokers.values()
    address = ",".join(f"{b.host}:{b.port}" for b in brokers)
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
    segment = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    with segment.open("rb") as stream:
        for batch in read_batches(stream):
            assert isinstance(batch, Batch)
            for record in batch.records:
                producer.produce("__share_group_state", key=record.key, value=record.value,
                                 partition=0, timestamp=record.timestamp)
    producer.produce("__consumer_offsets", key=b"\x00\x63", value=None, partition=0)
    assert producer.flush(30) == 0
    producer.close()  # before the mock cluster goes: it would log connection failures
    yield address
    del cluster


def test_live_source_replays_like_the_segment(bootstrap: str, tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    status = run_all(["--source", f"kafka://{bootstrap}", "--warehouse", str(warehouse),
                      "--snapshot-update-records", "5", "--conf", "spark.ui.enabled=false"])
    assert status == 1  # the unknown record type on __consumer_offsets is a finding
    spark = build_session("test-live", ui=False)
    lake = open_lake(spark)
    rows = {(r["group_id"], r["topic_id"], r["partition"]): r.asDict(recursive=True) for r in
            lake.read(str(warehouse / "share_partition_state")).collect()}
    final = json.loads((conformance_dir("kafka-4.4-dev") / "share_replay_small.final_state.json")
                       .read_text("utf-8"))
    want: dict[Any, Any] = {}
    for p in final["partitions"]:
        state = p["state"]
        want[(p["groupId"], p["topicId"], p["partition"])] = (
            state["startOffset"], state["stateEpoch"],
            [{snake_case(k): v for k, v in b.items()} for b in state["stateBatches"]])
    assert {k: (r["start_offset"], r["state_epoch"], r["state_batches"])
            for k, r in rows.items()} == want
    # each partition's earliest offset (ListOffsets), where the replay begins
    starts = {(r["source"], r["topic"], r["partition"]): r["log_start_offset"]
              for r in lake.read(str(warehouse / "log_start_offsets")).collect()}
    assert starts and set(starts.values()) == {0}
    assert (f"kafka://{bootstrap}", "__share_group_state", 0) in starts
    runs = lake.read(str(warehouse / "ingest_runs")).collect()
    assert {r["source_kind"] for r in runs} == {"kafka"}
    assert all("control batches" in (r["note"] or "") for r in runs)
    errors = lake.read(str(warehouse / "decode_errors")).collect()
    assert [e["kind"] for e in errors] == ["unknown_record_type"]
    again = run_all(["--source", f"kafka://{bootstrap}", "--warehouse", str(warehouse),
                     "--snapshot-update-records", "5", "--conf", "spark.ui.enabled=false"])
    assert again == 1
    assert lake.read(str(warehouse / "log_records")).count() == 601


@pytest.fixture(scope="module")
def groups_only() -> Iterator[str]:
    """A cluster where groups were used and share groups never: it has `__consumer_offsets`
    (one record) and no `__share_group_state` (Kafka creates it on first use)."""
    cluster = Producer({"test.mock.num.brokers": 1})
    brokers = cluster.list_topics(timeout=10).brokers.values()
    address = ",".join(f"{b.host}:{b.port}" for b in brokers)
    producer = Producer({"bootstrap.servers": address})
    producer.produce("__consumer_offsets", key=b"\x00\x63", value=None, partition=0)
    assert producer.flush(30) == 0
    producer.close()
    yield address
    del cluster


def test_a_topic_the_cluster_does_not_have_is_read_as_empty(groups_only: str) -> None:
    plan = plan_read(parse_options({"bootstrap.servers": groups_only}))
    assert plan.absent_topics == ("__share_group_state",)
    assert {r.topic for r in plan.ranges} == {"__consumer_offsets"}
    assert [(r.partition, r.start, r.end) for r in plan.ranges if r.end] == [(0, 0, 1)]


def test_run_reads_a_cluster_without_share_state(groups_only: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Kafka 4.1's default (share groups off) and any cluster before its first share group:
    the run reads `__consumer_offsets` and says there was no share state (it stopped with
    an internal error, exit 70)."""
    args = ["--source", f"kafka://{groups_only}", "--warehouse", str(tmp_path / "wh"),
            "--conf", "spark.ui.enabled=false"]
    assert run_all(args) == 1  # the unknown record type is a finding
    assert (f"kafka://{groups_only}: topic __share_group_state is not in the cluster"
            in capsys.readouterr().err)
    lake = open_lake(build_session("test-live", ui=False))
    assert lake.read(str(tmp_path / "wh" / "log_records")).count() == 1


def test_a_cluster_gone_after_the_check_stops_the_run_with_one_line(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The cluster answered the check, then stopped answering before ingest planned its
    read: a one-line error, exit 75 (run again later), within `--connect-timeout` (it was
    exit 2, and before that exit 70 with a traceback, "a bug in sharestate", after the
    reader's 60 s). The planning's client prints none of its own connection failures and
    is gone with the run (the exception kept here held it: it went on retrying and logging
    into later tests)."""
    from sharestate.log import SourceUnavailable
    from sharestate.spark.run import parser, run

    gc.collect()  # a client an earlier test left, gone now rather than during the run
    threads = client_threads()
    holder = [Producer({"test.mock.num.brokers": 1})]
    address = ",".join(f"{b.host}:{b.port}"
                       for b in holder[0].list_topics(timeout=10).brokers.values())

    def session_then_gone(*args: Any, **kwargs: Any) -> Any:
        session = build_session(*args, **kwargs)
        holder.clear()  # the mock cluster goes with the client that holds it
        gc.collect()
        return session

    args = parser().parse_args(["--source", f"kafka://{address}", "--warehouse",
                                str(tmp_path / "wh"), "--connect-timeout", "2",
                                "--conf", "spark.ui.enabled=false"])
    with pytest.raises(SourceUnavailable, match=f"cannot read watermarks .* from {address}: "
                                                f".*Connection refused") as failed:
        run(args, spark_factory=session_then_gone)  # `main` says it in one line, exit 75
    gc.collect()
    assert client_threads() <= threads, failed.value  # `failed` holds the exception
    # errors and warnings about this cluster (a client another test left may log its own)
    assert not [line for line in re.findall(r"^%[0-4]\|.*", capfd.readouterr().err, re.M)
                if address in line]
