"""`sharestate serve` against a live broker (librdkafka's mock cluster, in this process).

Kafka-written records of both internal topics are produced to the cluster (offsets from 0),
and the same records are written as segment files; the service's answers must equal the
offline commands' (`sharestate state`, `sharestate offsets`) field by field — also for
records produced while it runs. A record that does not decode becomes a finding and a
metric while the rest still applies, and a credential never shows in any answer or log.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_support import Cluster, eventually, fixture_records, mock_cluster, offline
from serve_support import get as get_from

from sharestate.app.cli import main
from sharestate.app.serve import view as views
from sharestate.app.serve.partition import ReplayOptions
from sharestate.app.serve.service import Service, start
from sharestate.app.serve.tailer import fetched
from sharestate.app.serve.view import Fetched
from sharestate.cluster import parse_options
from sharestate.log import RawRecord
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC

PASSWORD = "s3cret-serve-password"
FIXTURES = {SHARE_STATE_TOPIC: "share_codec_none.log",
            CONSUMER_OFFSETS_TOPIC: "consumer_offsets_records.log"}
GARBAGE = (b"\x00\x63garbage-key", b"\x00\x01not-a-value")  # record type 99: unknown


@pytest.fixture(scope="module")
def records() -> dict[str, list[RawRecord]]:
    return {topic: fixture_records(name) for topic, name in FIXTURES.items()}


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return mock_cluster()


@pytest.fixture(scope="module")
def service(cluster: Cluster, records: dict[str, list[RawRecord]]) -> Iterator[Service]:
    """Serving after two thirds of each topic's records were written (the rest come later)."""
    for topic, written in records.items():
        cluster.produce(topic, written[:len(written) * 2 // 3])
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "10000"},
                            env={"SHARESTATE_KAFKA_SASL_PASSWORD": PASSWORD})
    running = start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                    version="test")
    yield running
    running.close()


def get(service: Service, path: str) -> tuple[int, Any]:
    return get_from(service.address, path)


def test_serves_what_the_offline_commands_answer_also_for_records_arriving_later(
        cluster: Cluster, records: dict[str, list[RawRecord]], service: Service,
        tmp_path: Path) -> None:
    eventually(lambda: get(service, "/readyz")[0] == 200)
    assert get(service, "/healthz") == (200, {"status": "up"})
    early = {topic: written[:len(written) * 2 // 3] for topic, written in records.items()}
    assert get(service, "/v1/share-partitions")[1] == offline(tmp_path / "early", "state", early)
    for topic, written in records.items():
        cluster.produce(topic, written[len(written) * 2 // 3:])
    expected = offline(tmp_path, "state", records)
    assert expected
    eventually(lambda: get(service, "/v1/share-partitions")[1] == expected)
    group = expected[0]["group_id"]
    assert get(service, f"/v1/share-partitions?group={group}")[1] == [
        row for row in expected if row["group_id"] == group]
    offsets = offline(tmp_path, "offsets", records)
    assert offsets
    eventually(lambda: get(service, "/v1/consumer-group-offsets")[1] == offsets)
    unknown = [(f["topic"], f["offset"], f["kind"]) for f in get(service, "/v1/findings")[1]]
    assert [f for f in unknown if f[0] == CONSUMER_OFFSETS_TOPIC] == [
        (CONSUMER_OFFSETS_TOPIC, offset, "unknown_record_type") for offset in (46, 47, 48)]


def test_analytics_endpoints_and_metrics_cover_every_share_partition(
        records: dict[str, list[RawRecord]], service: Service, tmp_path: Path) -> None:
    eventually(lambda: get(service, "/readyz")[0] == 200)
    states = get(service, "/v1/share-partitions")[1]
    keys = {(s["group_id"], s["topic_id"], s["partition"]) for s in states}
    lag = get(service, "/v1/lag")[1]
    assert {(r["group_id"], r["topic_id"], r["partition"]) for r in lag} == keys
    assert {r["start_offset"] for r in lag} == {s["start_offset"] for s in states}
    prune = get(service, "/v1/prune")[1]
    expected = offline(tmp_path, "prune", records)
    assert [(r["state_partition"], r["prune_offset"], r["log_start_offset"],
             [h["last_snapshot_offset"] for h in r["holding"]]) for r in prune] == [
        (e["partition"], e["prune_offset"], e["log_start_offset"],
         [h["last_snapshot_offset"] for h in e["holding"]]) for e in expected]
    assert get(service, "/v1/redelivery")[0] == 200
    families = {f.name: f for f in text_string_to_metric_families(get(service, "/metrics")[1])}
    starts = {(s.labels["group"], s.labels["topic"], s.labels["partition"]): s.value
              for s in families["sharestate_share_partition_start_offset"].samples}
    assert len(starts) == len(states)
    assert starts == {(r["group_id"], r["topic"] or r["topic_id"], str(r["partition"])):
                      r["start_offset"] for r in lag}
    applied = families["sharestate_serve_records_applied"].samples
    assert sum(s.value for s in applied if s.name.endswith("_total")) > 0
    assert get(service, "/v1/nothing")[0] == 404
    assert get(service, "/v1/prune?group=x")[0] == 400
    assert get(service, "/openapi.json")[1]["paths"]["/v1/share-partitions"]


def service_gauges(service: Service, name: str) -> dict[tuple[str, str], float]:
    families = text_string_to_metric_families(get(service, "/metrics")[1])
    return {(s.labels["state_topic"], s.labels["state_partition"]): s.value
            for f in families if f.name == name for s in f.samples}


def test_on_a_quiet_cluster_the_fetch_signal_stays_fresh_and_nothing_is_left_to_apply(
        service: Service) -> None:
    """The dashboard's signal that the service reads: when each partition's leader last
    answered (it replaced the age of the newest applied record, which grows on any quiet
    cluster), and the records not yet applied against each partition's end at the last
    fetch."""
    eventually(lambda: get(service, "/readyz")[0] == 200)
    partitions = set(service_gauges(service, "sharestate_serve_records_applied"))
    eventually(lambda: set(service_gauges(
        service, "sharestate_serve_last_fetch_timestamp_seconds")) == partitions, timeout=15)
    first = service_gauges(service, "sharestate_serve_last_fetch_timestamp_seconds")
    applied = service_gauges(service, "sharestate_serve_records_applied")
    assert all(time.time() - at < 10 for at in first.values()), first
    time.sleep(6)  # nothing produced meanwhile: a statistics report later
    later = service_gauges(service, "sharestate_serve_last_fetch_timestamp_seconds")
    assert all(later[where] - first[where] >= 3 for where in partitions), (first, later)
    assert service_gauges(service, "sharestate_serve_records_applied") == applied  # quiet
    assert service_gauges(service, "sharestate_serve_records_lag") == dict.fromkeys(
        partitions, 0)


def test_the_fetch_signal_is_read_from_librdkafkas_statistics() -> None:
    """Fields as librdkafka's STATISTICS.md documents them: a broker's `rxidle` (µs since it
    last received), a partition's `leader`, `hi_offset` and `ls_offset` (-1001: unknown)."""
    report = json.dumps({
        "time": 1700000000,
        "brokers": {"b1:9092/1": {"nodeid": 1, "rxidle": 250_000},
                    "b2:9092/2": {"nodeid": 2, "rxidle": -1},
                    "GroupCoordinator": {"nodeid": -1, "rxidle": 10}},
        "topics": {"__consumer_offsets": {"partitions": {
            "0": {"leader": 1, "hi_offset": 120, "ls_offset": 100},
            "1": {"leader": 2, "hi_offset": 7, "ls_offset": 7},
            "2": {"leader": 1, "hi_offset": -1001, "ls_offset": -1001},
            "-1": {"leader": -1, "hi_offset": -1001, "ls_offset": -1001}}}}})
    assert fetched(report, committed=True, now=1000.0) == {
        ("__consumer_offsets", 0): Fetched(999.75, 100)}
    assert fetched(report, committed=False, now=1000.0) == {
        ("__consumer_offsets", 0): Fetched(999.75, 120)}


def test_a_record_that_does_not_decode_is_a_finding_and_the_rest_applies(
        cluster: Cluster, records: dict[str, list[RawRecord]], service: Service) -> None:
    eventually(lambda: get(service, "/readyz")[0] == 200)
    good = records[SHARE_STATE_TOPIC][0]
    bad = RawRecord(0, good.timestamp, -1, GARBAGE[0], GARBAGE[1], ())
    cluster.produce(SHARE_STATE_TOPIC, [good, bad, good], partition=1)

    def applied_in_partition_1() -> float:
        families = text_string_to_metric_families(get(service, "/metrics")[1])
        return sum(s.value for f in families if f.name == "sharestate_serve_records_applied"
                   for s in f.samples if s.labels["state_partition"] == "1"
                   and s.labels["state_topic"] == SHARE_STATE_TOPIC)

    eventually(lambda: applied_in_partition_1() == 3)
    findings = [(f["topic"], f["partition"], f["offset"], f["kind"])
                for f in get(service, "/v1/findings")[1]]
    assert [f for f in findings if f[:2] == (SHARE_STATE_TOPIC, 1)] == [
        (SHARE_STATE_TOPIC, 1, 1, "unknown_record_type")]
    families = text_string_to_metric_families(get(service, "/metrics")[1])
    errors = {s.labels["state_partition"]: s.value for f in families
              if f.name == "sharestate_serve_decode_errors" for s in f.samples
              if s.name.endswith("_total") and s.labels["state_topic"] == SHARE_STATE_TOPIC}
    assert errors["1"] == 1
    partition_1 = [s for s in get(service, "/v1/share-partitions")[1]
                   if s["state_partition"] == 1]
    assert partition_1 and partition_1[0]["as_of_offset"] == 2


def test_the_credential_shows_in_no_answer_and_no_log(
        service: Service, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    eventually(lambda: get(service, "/readyz")[0] == 200)
    for path in ("/healthz", "/readyz", "/v1/share-partitions", "/v1/lag", "/v1/redelivery",
                 "/v1/prune", "/v1/consumer-group-offsets", "/v1/findings",
                 "/v1/end-offsets", "/metrics", "/openapi.json"):
        status, body = get(service, path)
        assert status == 200, path
        assert PASSWORD not in json.dumps(body), path
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(service.tailer.options)


def test_a_published_view_stays_as_it_was_while_the_writer_applies_more(
        records: dict[str, list[RawRecord]], tmp_path: Path) -> None:
    """Readers compute from the view they took, which the writer never changes: one taken
    when half the records were applied still answers as half the log does after the rest
    applied (the writer publishes new views; the shards and offset rows it holds are its
    own)."""
    cluster = mock_cluster()
    half = {topic: written[:len(written) // 2] for topic, written in records.items()}
    for topic, written in half.items():
        cluster.produce(topic, written)
    running = start(parse_options({"bootstrap.servers": cluster.bootstrap}),
                    ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080, version="test")
    try:
        eventually(lambda: running.tailer.view.readiness().ready)
        taken = running.tailer.view
        answers = (views.share_partitions(taken), views.consumer_group_offsets(taken))
        assert answers == (offline(tmp_path / "half", "state", half),
                           offline(tmp_path / "half", "offsets", half))
        for topic, written in records.items():
            cluster.produce(topic, written[len(written) // 2:])
        expected = offline(tmp_path, "state", records)
        eventually(lambda: views.share_partitions(running.tailer.view) == expected)
        eventually(lambda: views.consumer_group_offsets(running.tailer.view)
                   == offline(tmp_path, "offsets", records))
        assert (views.share_partitions(taken), views.consumer_group_offsets(taken)) == answers
    finally:
        running.close()


def test_bad_arguments_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--source", "http://x:1"]) == 2
    assert main(["serve", "--source", "kafka://127.0.0.1:1", "--listen", "nowhere"]) == 2
    capsys.readouterr()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # the address is taken before the cluster is asked (this one answers nothing)
        assert main(["serve", "--source", "kafka://127.0.0.1:1", "--listen",
                     f"127.0.0.1:{port}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"sharestate: error: cannot listen on 127.0.0.1:{port}: Address already in use"]


def test_methods_other_than_get_are_405_with_allow_head_has_no_body(service: Service) -> None:
    host, port = service.address
    for method in ("POST", "PUT", "DELETE", "PATCH", "TRACE", "QUERY", "BREW"):
        request = urllib.request.Request(f"http://{host}:{port}/v1/lag", method=method)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 405, method
        assert refused.value.headers["Allow"] == "GET, HEAD, OPTIONS"
    request = urllib.request.Request(f"http://{host}:{port}/healthz", method="HEAD")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
        assert int(answer.headers["Content-Length"]) == len(b'{"status": "up"}')
        assert answer.read() == b""
    request = urllib.request.Request(f"http://{host}:{port}/readyz", method="OPTIONS")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert (answer.status, answer.headers["Allow"]) == (204, "GET, HEAD, OPTIONS")


def test_lag_without_end_offsets_from_the_cluster_is_a_lower_bound_said_so(
        records: dict[str, list[RawRecord]], caplog: pytest.LogCaptureFixture) -> None:
    """The mock cluster answers no DescribeTopics (no controller) once a data topic
    exists: /v1/lag and /metrics still answer, from the state's lower bound."""
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    cluster = mock_cluster()
    cluster.produce(SHARE_STATE_TOPIC, records[SHARE_STATE_TOPIC])
    cluster.produce("orders", records[SHARE_STATE_TOPIC][:3])
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "1000"})
    running = start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                    version="test")
    try:
        eventually(lambda: get(running, "/readyz")[0] == 200)
        status, lag = get(running, "/v1/lag")
        assert status == 200 and lag
        assert {(row["end_offset_source"], row["lag_is_lower_bound"]) for row in lag} == {
            ("state", True)}
        assert get(running, "/metrics")[0] == 200
    finally:
        running.close()
    assert any(r.getMessage().startswith("cannot read end offsets from ")
               and r.getMessage().endswith(": lag is a lower bound from the state")
               for r in caplog.records)
