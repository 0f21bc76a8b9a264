"""A live source that does not answer, or stops answering, is exit 75 (run again later),
told apart from one that refuses the client or a bad argument (exit 2): the Airflow DAG
retries the one and not the other. No Spark: the cluster is a closed port, librdkafka's
mock cluster or a small HTTP server."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import closed_port

from sharestate import exit_codes
from sharestate.analytics.end_offset_sources import (
    EndOffsetSourceError,
    EndOffsetsUnavailable,
    observe,
)
from sharestate.app.cli import main as cli
from sharestate.cluster import OffsetRange, parse_options, read_range
from sharestate.cluster.kafka_plan import ClusterNotReady, ClusterRefused
from sharestate.log import SourceError, SourceUnavailable
from sharestate.spark.run import _reader_failure_named
from sharestate.spark.run import main as run_all


@pytest.mark.parametrize("entry", ["sharestate run", "pipelines/run_all.py"])
def test_an_unreachable_cluster_is_exit_75_in_one_line_within_the_timeout(
        entry: str, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    started = time.monotonic()
    arguments = ["--source", f"kafka://127.0.0.1:{closed_port()}", "--warehouse",
                 str(tmp_path / "wh"), "--connect-timeout", "2"]
    status = cli(["run", *arguments]) if entry == "sharestate run" else run_all(arguments)
    assert status == exit_codes.UNAVAILABLE == 75
    assert time.monotonic() - started < 30  # 2 s to answer, plus the client's set-up
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("sharestate: unavailable: cannot reach the cluster at 127.0.0.1:")
    assert "within 2 s" in err[0] and "Connection refused" in err[0]
    assert err[0].endswith("; run again later")
    assert not (tmp_path / "wh").exists()


SPARK_FAILURE = """org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in
stage 3.0 failed 1 times: org.apache.spark.api.python.PythonException: Traceback (most
recent call last):
  File "/work/sharestate/cluster/kafka_read.py", line 130, in read_range
    raise {kind}(options.redact(
sharestate.cluster.kafka_plan.{kind}: {message}
"""


@pytest.mark.parametrize(("kind", "unavailable"), [
    ("ClusterNotReady", True), ("ClusterUnreachable", True),
    ("KafkaSourceError", False), ("ClusterRefused", False)])
def test_a_reader_failing_in_an_executor_is_named_by_whether_it_may_pass(
        kind: str, unavailable: bool) -> None:
    message = "no records from __share_group_state-0 for 1000 ms at offset 5"
    with pytest.raises(SourceError) as raised, _reader_failure_named():
        raise RuntimeError(SPARK_FAILURE.format(kind=kind, message=message))
    assert str(raised.value) == message
    assert isinstance(raised.value, SourceUnavailable) == unavailable


def test_an_error_not_the_readers_stays_what_it_is() -> None:
    with pytest.raises(ZeroDivisionError), _reader_failure_named():
        raise ZeroDivisionError("division by zero")


def test_a_reader_whose_cluster_went_away_may_pass() -> None:
    """The executors' reader of a cluster that does not answer: ClusterNotReady, what the
    run reports as exit 75."""
    options = parse_options({"bootstrap.servers": f"127.0.0.1:{closed_port()}",
                             "timeoutMs": "1000"})
    with pytest.raises(ClusterNotReady, match="__share_group_state-0"):
        list(read_range(options, OffsetRange("__share_group_state", 0, 0, 10)))


def test_end_offsets_from_a_cluster_not_answering_may_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`offsets_at_times` of a cluster that refuses connections raises ClusterNotReady
    (test_edge_arguments); `observe` passes it on as EndOffsetsUnavailable, a refusal of the
    client as the error it is."""
    import sharestate.analytics.end_offset_sources as sources

    def failing(error: Exception) -> Callable[..., object]:
        def offsets_at_times(*args: object) -> object:
            raise error
        return offsets_at_times

    wanted = {("topic-id", 0): [0]}
    monkeypatch.setattr(sources, "offsets_at_times", failing(ClusterNotReady("not yet")))
    with pytest.raises(EndOffsetsUnavailable, match="not yet"):
        observe("kafka://b1:9092", wanted)
    monkeypatch.setattr(sources, "offsets_at_times", failing(ClusterRefused("refused")))
    with pytest.raises(EndOffsetSourceError, match="refused") as raised:
        observe("kafka://b1:9092", wanted)
    assert not isinstance(raised.value, EndOffsetsUnavailable)


class _Serve(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the status and body the server was given."""

    def do_GET(self) -> None:
        status, body = self.server.answer  # type: ignore[attr-defined]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("status", "body", "unavailable"), [
    (503, b"starting", True),  # a serve not ready: it may answer later
    (404, b"no such path", False),  # not sharestate serve's end offsets: a setting to fix
    (200, b"not json", False)])
def test_end_offsets_from_serve_may_pass_only_when_it_could_not_answer(
        serve: http.server.HTTPServer, status: int, body: bytes, unavailable: bool) -> None:
    serve.answer = (status, body)  # type: ignore[attr-defined]
    source = f"http://127.0.0.1:{serve.server_address[1]}"
    with pytest.raises(EndOffsetSourceError) as raised:
        observe(source, {("topic-id", 0): [0]})
    assert isinstance(raised.value, EndOffsetsUnavailable) == unavailable


def test_end_offsets_from_a_serve_not_running_may_pass() -> None:
    with pytest.raises(EndOffsetsUnavailable, match="refused"):
        observe(f"http://127.0.0.1:{closed_port()}", {("topic-id", 0): [0]})



@pytest.mark.parametrize("suffix", [
    " (after 0ms in state CONNECT)",
    " (after 12ms in state CONNECT, 3 identical error(s) suppressed)"])
def test_a_client_line_loses_its_thread_broker_and_connection_state(suffix: str) -> None:
    """What the unavailable and serve's status lines quote of librdkafka: the broker and
    what happened, however many errors like it librdkafka suppressed (`client_line`; the
    status line read `... Connection refused (after 0ms in state CONNECT, 1 identical
    error(s) suppressed); trying again`)."""
    from sharestate.cluster.kafka_plan import client_line

    said = "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused"
    assert client_line(said + suffix) == said  # an error callback's
    assert client_line(f"[thrd:127.0.0.1:9092/bootstrap]: {said}{suffix}") == said  # a log's
