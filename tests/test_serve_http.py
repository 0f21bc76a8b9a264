"""The live service's HTTP side under hostile load, on loopback, bounded in count and time:
idle connections past the process's descriptor limit leave the probes answering and the
Kafka client reading; clients that go away early leave no traceback; an idle connection is
closed after the head timeout; a burst of clients is answered whole.

`sharestate serve` runs in a process of its own (its descriptor limit lowered) over
librdkafka's mock cluster in this process, holding a simulated workload.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_support import Cluster, ServeProcess, eventually, get, mock_cluster, simulated

from sharestate.app.serve.http import HttpServer, listening
from sharestate.log import RawRecord

FILES = 200
"""The service's descriptor limit (soft and hard) in these tests."""
IDLE = 300


def no_content(head: bytes, client: tuple[str, int]) -> bytes:
    return b"HTTP/1.0 204 No Content\r\n\r\n"


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], list[RawRecord]]:
    return simulated(tmp_path_factory.mktemp("simulated"), 1500, seed=5)


@pytest.fixture(scope="module")
def cluster(workload: dict[tuple[str, int], list[RawRecord]]) -> Cluster:
    cluster = mock_cluster()
    for (topic, partition), written in workload.items():
        cluster.produce(topic, written[:len(written) // 2], partition)
    return cluster


@pytest.fixture(scope="module")
def service(cluster: Cluster) -> Iterator[ServeProcess]:
    process = ServeProcess("--source", f"kafka://{cluster.bootstrap}",
                           limits={resource.RLIMIT_NOFILE: FILES})
    try:
        eventually(lambda: get(process.address, "/readyz")[0] == 200)  # type: ignore[arg-type]
        yield process
    finally:
        assert process.stop(signal.SIGTERM) == 0, process.stderr


def applied(address: tuple[str, int]) -> float:
    families = text_string_to_metric_families(get(address, "/metrics")[1])
    return sum(s.value for f in families if f.name == "sharestate_serve_records_applied"
               for s in f.samples if s.name.endswith("_total"))


@contextlib.contextmanager
def idle_connections(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    """`count` connections that send nothing (each connect waits at most 2 s)."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            connection = socket.socket()
            connection.settimeout(2)
            try:
                connection.connect(address)
            except OSError:
                connection.close()
                continue
            opened.append(connection)
        yield opened
    finally:
        for connection in opened:
            connection.close()


def test_idle_connections_past_the_descriptor_limit_leave_probes_and_the_reader_working(
        service: ServeProcess, cluster: Cluster,
        workload: dict[tuple[str, int], list[RawRecord]]) -> None:
    address = service.address
    assert address is not None
    before = applied(address)
    with idle_connections(address, IDLE) as opened:
        assert len(opened) == IDLE
        started = time.monotonic()
        assert get(address, "/healthz") == (200, {"status": "up"})
        assert get(address, "/readyz")[0] == 200
        assert time.monotonic() - started < 5
        for (topic, partition), written in workload.items():  # the Kafka client still reads
            cluster.produce(topic, written[len(written) // 2:], partition)
        eventually(lambda: applied(address) == sum(map(len, workload.values())))
    assert applied(address) > before
    assert "Too many open files" not in service.stderr
    assert "Traceback" not in service.stderr


def test_clients_that_go_away_early_leave_no_traceback(service: ServeProcess) -> None:
    address = service.address
    assert address is not None
    lines = len(service.lines)

    def hang_up(path: str) -> None:
        with socket.create_connection(address, timeout=10) as connection:
            connection.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            # closed at once, with a reset: the answer meets a connection that is gone
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with ThreadPoolExecutor(20) as pool:
        list(pool.map(hang_up, ["/metrics", "/v1/share-partitions", "/openapi.json",
                                "/healthz"] * 50))
    assert get(address, "/healthz")[0] == 200
    time.sleep(0.5)  # what the service would say about them is said by now
    assert service.lines[lines:] == []


def test_a_burst_of_clients_is_answered_whole(cluster: Cluster) -> None:
    """200 clients at once, 5 requests each, to a service with the usual descriptor limit
    (the listen backlog was 5: a burst overflowed it and clients waited for their connection
    to be retried, some past their timeout)."""
    service = ServeProcess("--source", f"kafka://{cluster.bootstrap}")
    address = service.address
    assert address is not None
    eventually(lambda: get(address, "/readyz")[0] == 200)
    start = threading.Barrier(200)

    def client(index: int) -> list[int]:
        start.wait()
        return [get(address, path)[0] for path in ("/readyz", "/v1/prune", "/healthz",
                                                   "/metrics", "/v1/findings")]

    try:
        with ThreadPoolExecutor(200) as pool:
            statuses = [status for answers in pool.map(client, range(200)) for status in answers]
    finally:
        assert service.stop(signal.SIGTERM) == 0
    assert statuses == [200] * 1000
    assert "Traceback" not in service.stderr


def test_an_idle_connection_is_closed_after_the_head_timeout(tmp_path: Path) -> None:
    server = HttpServer(listening(("127.0.0.1", 0)), no_content, head_timeout=0.5)
    server.start()
    try:
        with socket.create_connection(server.address, timeout=5) as idle, \
                socket.create_connection(server.address, timeout=5) as partial:
            partial.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never ends its head
            started = time.monotonic()
            assert idle.recv(100) == b""
            assert partial.recv(100) == b""
            assert 0.4 < time.monotonic() - started < 3
    finally:
        server.close()


def test_connections_over_the_limit_close_the_one_idle_longest() -> None:
    server = HttpServer(listening(("127.0.0.1", 0)), no_content, limit=20)
    server.start()
    try:
        connections = [socket.create_connection(server.address, timeout=5) for _ in range(20)]
        time.sleep(0.2)  # all accepted
        with socket.create_connection(server.address, timeout=5) as probe:
            probe.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert probe.recv(100).startswith(b"HTTP/1.0 204")
        assert connections[0].recv(100) == b""  # the oldest, closed to make room
        for connection in connections:
            connection.close()
    finally:
        server.close()
