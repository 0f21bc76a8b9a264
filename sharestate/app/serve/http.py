"""The HTTP side: a threading stdlib server answering JSON from `LiveState`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from sharestate.app.serve.checkpoint import Checkpointer
from sharestate.app.serve.metrics import registry
from sharestate.app.serve.openapi import document
from sharestate.app.serve.state import LiveState

LOG = logging.getLogger("sharestate.serve")
ALLOWED = "GET, HEAD, OPTIONS"
GROUPED = {"/v1/share-partitions", "/v1/lag", "/v1/redelivery", "/v1/consumer-group-offsets"}


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


def make_server(listen: tuple[str, int], state: LiveState, version: str,
                reader_failure: Callable[[], str | None],
                checkpointer: Checkpointer | None = None) -> ThreadingHTTPServer:
    """A server (not yet serving) for `state` on `listen`."""
    metrics = registry(state, checkpointer)
    spec = json.dumps(document(version)).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "sharestate"
        head_only = False

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
            routes: dict[str, Callable[[], Any]] = {
                "/v1/share-partitions": lambda: state.share_partitions(group),
                "/v1/lag": lambda: state.lag(group),
                "/v1/redelivery": lambda: state.redelivery(group),
                "/v1/prune": state.prune,
                "/v1/consumer-group-offsets": lambda: state.consumer_group_offsets(group),
                "/v1/findings": state.findings,
            }
            if path == "/healthz":
                failure = state.failure() or reader_failure()
                self._json(HTTPStatus.SERVICE_UNAVAILABLE if failure else HTTPStatus.OK,
                           {"status": "failed", "reason": failure} if failure
                           else {"status": "up"})
            elif path == "/readyz":
                ready = state.readiness()
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

    server = ThreadingHTTPServer(listen, Handler)
    server.daemon_threads = True
    return server
