"""The HTTP side: one event loop holds the connections and reads each request's head (within
a deadline), the probes are answered on it, the other endpoints on a few worker threads,
each answer computed from the one view the writer last published (`view`).

Each connection carries one request (HTTP/1.0: the answer ends it). What a connection may
cost is bounded, so that clients cannot take what the service needs to go on:
- a request's head must arrive within `HEAD_TIMEOUT_S` of the connection and fit in
  `MAX_HEAD_BYTES`; an answer must be taken within `WRITE_TIMEOUT_S`;
- at most `connection_limit()` connections are open at once (half the descriptors the
  process may still open at start, so the Kafka client keeps its share), taken one at a
  time; one more is taken by closing the connection that has waited longest (`IDLE_S` at
  least) without a whole request;
- at most `limit - PROBE_ROOM` requests are answered or queued for the workers at once;
  another gets 503 with `Retry-After` at once. The probes (`/healthz`, `/readyz`) are
  answered on the loop itself: they answer while every worker is busy and connections are
  at their limit.
A client that goes away early costs at most one debug line, never a traceback.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sharestate.app.serve import view as views
from sharestate.app.serve.checkpoint import Checkpointer
from sharestate.app.serve.end_offset_log import DataTopicEnds
from sharestate.app.serve.metrics import registry
from sharestate.app.serve.openapi import document
from sharestate.app.serve.view import View

LOG = logging.getLogger("sharestate.serve")
ALLOWED = "GET, HEAD, OPTIONS"
GROUPED = {"/v1/share-partitions", "/v1/lag", "/v1/redelivery", "/v1/consumer-group-offsets"}
PROBES = {"/healthz", "/readyz"}
"""Answered on the event loop: they read a few figures of the view."""

BACKLOG = 512
"""Connections the kernel queues before they are accepted."""
HEAD_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 30.0
LINGER_S = 1.0
"""After its answer, what a client still sends (a body nobody asked for) is read and dropped
this long, so that closing does not reset the connection before the client read it."""
MAX_HEAD_BYTES = 64 * 1024
MAX_HEAD_LINES = 101
"""The request line and 100 header lines (the standard library's own limit)."""
MAX_CONNECTIONS = 1024
MIN_CONNECTIONS = 16
PROBE_ROOM = 8
"""Connections kept for probes and new requests: never taken by requests in progress."""
WORKERS = 4
ACCEPT_WARNING_S = 60.0
"""At most one warning this often when the process cannot accept for lack of descriptors."""
ACCEPT_RETRY_S = 0.1
ROOM_WAIT_S = 0.01
IDLE_S = 1.0
"""How long a connection must have waited without a whole request before it is closed to
make room for another (a client of a burst has sent its request, only not yet been read)."""


class BadRequest(ValueError):
    """A query the endpoint does not take (400)."""


def _group(path: str, query: dict[str, list[str]]) -> str | None:
    allowed = {"group"} if path in GROUPED else set()
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}")
    values = query.get("group")
    if values is not None and len(values) != 1:
        raise BadRequest("give group once")
    return values[0] if values else None


def connection_limit() -> int:
    """Half the descriptors the process may still open (the rest is left to the Kafka
    client, checkpoints and the like), within [MIN_CONNECTIONS, MAX_CONNECTIONS]."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 64
    free = MAX_CONNECTIONS * 2 if soft == resource.RLIM_INFINITY else soft - used
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, free // 2))


def _plain(status: HTTPStatus, message: str, *headers: tuple[str, str]) -> bytes:
    """A whole JSON answer `{"error": message}` (for what the loop refuses itself)."""
    body = json.dumps({"error": message}).encode()
    lines = [f"HTTP/1.0 {status.value} {status.phrase}", "Server: sharestate",
             "Content-Type: application/json", f"Content-Length: {len(body)}",
             *(f"{name}: {value}" for name, value in headers)]
    return "\r\n".join(lines).encode() + b"\r\n\r\n" + body


def make_answer(current: Callable[[], View], ends: DataTopicEnds, version: str,
                failure: Callable[[View], str | None],
                checkpointer: Checkpointer | None = None
                ) -> Callable[[bytes, tuple[str, int]], bytes]:
    """The whole answer (status line, headers, body) to a request's head from a client:
    from the view `current()` returns when it is asked (`failure`: why the service cannot go
    on, given that view), the data topics' end offsets `ends`."""
    metrics = registry(current, ends, checkpointer)
    spec = json.dumps(document(version)).encode()

    class Handler(BaseHTTPRequestHandler):
        """The standard library's request parsing over a head already read (`request`),
        the answer written to a buffer."""

        server_version = "sharestate"
        head_only = False

        answer: io.BytesIO

        def setup(self) -> None:
            self.rfile = io.BytesIO(self.request)
            self.wfile = self.answer = io.BytesIO()

        def finish(self) -> None:
            """The answer stays in `wfile`."""

        def do_HEAD(self) -> None:
            self.head_only = True
            self.do_GET()

        def do_OPTIONS(self) -> None:
            self.send_response(HTTPStatus.NO_CONTENT)
            self.send_header("Allow", ALLOWED)
            self.end_headers()

        def __getattr__(self, name: str) -> Callable[[], None]:
            """`do_<METHOD>` of every other method: 405 (the standard library's is 501)."""
            if name.startswith("do_"):
                return self._refuse_method
            raise AttributeError(name)

        def _refuse_method(self) -> None:
            self._json(HTTPStatus.METHOD_NOT_ALLOWED,
                       {"error": f"{self.command} not allowed: the service only answers GET"},
                       ("Allow", ALLOWED))

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            try:
                query = parse_qs(url.query, keep_blank_values=True, strict_parsing=False)
                group = _group(url.path, query)
                self._answer(url.path, group)
            except BadRequest as exc:
                self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})

        def _answer(self, path: str, group: str | None) -> None:
            view = current()
            routes: dict[str, Callable[[], Any]] = {
                "/v1/share-partitions": lambda: views.share_partitions(view, group),
                "/v1/lag": lambda: views.lag(view, ends(), group),
                "/v1/redelivery": lambda: views.redelivery(view, group),
                "/v1/prune": lambda: views.prune(view),
                "/v1/consumer-group-offsets": lambda: views.consumer_group_offsets(view, group),
                "/v1/findings": lambda: views.findings(view),
                "/v1/end-offsets": lambda: ends.rows(view.names()),
            }
            if path == "/healthz":
                reason = failure(view)
                self._json(HTTPStatus.SERVICE_UNAVAILABLE if reason else HTTPStatus.OK,
                           {"status": "failed", "reason": reason} if reason
                           else {"status": "up"})
            elif path == "/readyz":
                ready = view.readiness()
                self._json(HTTPStatus.OK if ready.ready else HTTPStatus.SERVICE_UNAVAILABLE,
                           ready.json())
            elif path == "/metrics":
                self._send(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(metrics))
            elif path == "/openapi.json":
                self._send(HTTPStatus.OK, "application/json", spec)
            elif path in routes:
                self._json(HTTPStatus.OK, routes[path]())
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no such path: {path}"})

        def _json(self, status: HTTPStatus, body: object,
                  *headers: tuple[str, str]) -> None:
            self._send(status, "application/json", json.dumps(body).encode(), *headers)

        def _send(self, status: HTTPStatus, content_type: str, body: bytes,
                  *headers: tuple[str, str]) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            if not self.head_only:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            LOG.debug("%s %s", self.address_string(), format % args)

    def answer(head: bytes, client: tuple[str, int]) -> bytes:
        handler = Handler(head, client, None)  # type: ignore[arg-type]  # no server needed
        return handler.answer.getvalue()

    return answer


class ListenError(Exception):
    """The address cannot be listened on (one line: exit 2)."""


def listening(listen: tuple[str, int]) -> socket.socket:
    """A socket listening on `listen` (port 0: any free port); ListenError naming the
    address when it cannot (in use, not this host's, not allowed)."""
    host, port = listen
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=BACKLOG)
    except OSError as exc:
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise ListenError(f"cannot listen on {shown}: {reason}") from None


class _TooLarge(Exception):
    """A request head over `MAX_HEAD_BYTES` or `MAX_HEAD_LINES`."""


class HttpServer:
    """Serves `answer` on a `listening` socket (see the module docstring): `start()`, then
    `close()`."""

    def __init__(self, listener: socket.socket,
                 answer: Callable[[bytes, tuple[str, int]], bytes], limit: int | None = None,
                 head_timeout: float = HEAD_TIMEOUT_S) -> None:
        self.socket = listener
        self.socket.setblocking(False)
        self.address: tuple[str, int] = self.socket.getsockname()[:2]
        self.answer = answer
        self.limit = limit or connection_limit()
        self.head_timeout = head_timeout
        self.loop = asyncio.new_event_loop()
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="http")
        self.connections: set[asyncio.Task[None]] = set()
        self.waiting: dict[asyncio.Task[None], tuple[float, asyncio.StreamWriter]] = {}
        """Connections whose request head is not yet read: since when (monotonic), and
        their writer."""
        self.dropped: set[asyncio.Task[None]] = set()
        """Connections closed to make room for another."""
        self.busy = 0
        self._warned = -ACCEPT_WARNING_S
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._run, name="http", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self._started.wait()

    def close(self) -> None:
        """Stop accepting, end the open connections, stop the workers."""
        if self._stop is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
            self.thread.join(10)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.socket.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        accepting = asyncio.create_task(self._accept())
        self._started.set()
        await self._stop.wait()
        for task in (accepting, *self.connections):
            task.cancel()
        await asyncio.gather(accepting, *self.connections, return_exceptions=True)

    async def _accept(self) -> None:
        """Take connections one at a time, each only once there is room for it (the
        connection waiting longest for its request is closed to make it)."""
        while True:
            try:
                connection, peer = await self.loop.sock_accept(self.socket)
            except OSError as exc:  # out of descriptors: the queued ones wait a moment
                if time.monotonic() - self._warned >= ACCEPT_WARNING_S:
                    self._warned = time.monotonic()
                    LOG.warning("HTTP: cannot accept connections: %s (%d open)",
                                exc.strerror, len(self.connections))
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            task = asyncio.create_task(self._connection(connection, peer))
            self.connections.add(task)
            task.add_done_callback(self._ended)
            await self._room()

    async def _room(self) -> None:
        """Return once there is room for another connection: close the one that has waited
        longest without a whole request, if it has waited `IDLE_S`, or else wait for one to
        end or to have waited that long (requests in progress are bounded below the limit,
        so some connection always does)."""
        while len(self.connections) - len(self.dropped) >= self.limit:
            oldest = min(self.waiting, key=lambda task: self.waiting[task][0], default=None)
            if oldest is None or time.monotonic() - self.waiting[oldest][0] < IDLE_S:
                await asyncio.sleep(ROOM_WAIT_S)
                continue
            _, writer = self.waiting.pop(oldest)
            writer.transport.abort()  # its descriptor is free at the next step
            self.dropped.add(oldest)
            oldest.cancel()
            await asyncio.sleep(0)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self.connections.discard(task)
        self.dropped.discard(task)
        self.waiting.pop(task, None)

    async def _connection(self, connection: socket.socket, peer: tuple[str, int]) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            reader, writer = await asyncio.open_connection(sock=connection,
                                                           limit=MAX_HEAD_BYTES)
        except OSError:  # gone already
            connection.close()
            return
        writer.transport.set_write_buffer_limits(high=0)  # drained: all in the kernel's hands
        self.waiting[task] = (time.monotonic(), writer)
        queued = False
        try:
            try:
                async with asyncio.timeout(self.head_timeout):
                    head = await self._head(reader)
            except _TooLarge:
                answer = _plain(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                                f"a request head is at most {MAX_HEAD_BYTES} bytes in "
                                f"{MAX_HEAD_LINES} lines")
            else:
                del self.waiting[task]
                if _path(head) in PROBES:
                    answer = self.answer(head, peer)
                elif self.busy >= self.limit - PROBE_ROOM:
                    answer = _plain(HTTPStatus.SERVICE_UNAVAILABLE,
                                    f"busy: {self.busy} requests in progress; try again",
                                    ("Retry-After", "1"))
                else:
                    self.busy += 1
                    queued = True
                    answer = await self.loop.run_in_executor(self.pool, self.answer, head,
                                                             peer)
            writer.write(answer)
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await writer.drain()
            await self._linger(reader, writer)
            writer.close()
        except TimeoutError:
            late = (f"no whole request within {self.head_timeout:g} s" if task in self.waiting
                    else f"its answer not taken within {WRITE_TIMEOUT_S:g} s")
            LOG.debug("HTTP %s:%s: dropped: %s", *peer[:2], late)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            LOG.debug("HTTP %s:%s: went away (%s)", *peer[:2], type(exc).__name__)
        except asyncio.CancelledError:
            if task not in self.dropped:  # the loop stopping
                raise
            LOG.debug("HTTP %s:%s: dropped: %d connections open, this one waited longest "
                      "without a request", *peer[:2], len(self.connections))
        except Exception:  # a bug answering: the connection ends, the service goes on
            LOG.exception("HTTP %s:%s: answering failed", *peer[:2])
        finally:
            self.waiting.pop(task, None)
            if queued:
                self.busy -= 1
            if not writer.transport.is_closing():
                writer.transport.abort()

    @staticmethod
    async def _head(reader: asyncio.StreamReader) -> bytes:
        """The request line and header lines up to the empty line; _TooLarge past the
        limits; IncompleteReadError when the client stops sending first."""
        lines: list[bytes] = []
        size = 0
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line over the reader's limit
                raise _TooLarge() from None
            if not line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(line, None)
            lines.append(line)
            size += len(line)
            if size > MAX_HEAD_BYTES or len(lines) > MAX_HEAD_LINES:
                raise _TooLarge()
            if line in (b"\r\n", b"\n"):
                return b"".join(lines)

    @staticmethod
    async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Half-close, then read what the client still sends until it closes (at most
        `LINGER_S`): a request body it sent is not answered with a reset."""
        if not writer.can_write_eof():
            return
        writer.write_eof()
        try:
            async with asyncio.timeout(LINGER_S):
                while await reader.read(MAX_HEAD_BYTES):
                    pass
        except (TimeoutError, ConnectionError):
            pass


def _path(head: bytes) -> str:
    """The path a request head asks for ('' when its request line is not one)."""
    words = head.split(b"\n", 1)[0].split()
    return urlsplit(words[1].decode("latin-1")).path if len(words) >= 2 else ""


def make_server(listener: socket.socket, current: Callable[[], View], ends: DataTopicEnds,
                version: str, failure: Callable[[View], str | None],
                checkpointer: Checkpointer | None = None) -> HttpServer:
    """A server (not yet serving) of the views `current()` returns on `listener`."""
    return HttpServer(listener, make_answer(current, ends, version, failure, checkpointer))
