"""Wiring: the cluster's partitions, their replays, the tailer and the HTTP server."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from http.server import ThreadingHTTPServer

from confluent_kafka import Consumer, KafkaException

from sharestate.app.serve.http import make_server
from sharestate.app.serve.live_log import ReplayOptions
from sharestate.app.serve.state import LiveState
from sharestate.app.serve.tailer import Tailer, watermarks
from sharestate.cluster import KafkaReadOptions, KafkaSourceError, fetch_topic_ends
from sharestate.log.discovery import INTERNAL_TOPICS

LOG = logging.getLogger("sharestate.serve")


@dataclass
class Service:
    """A running service: `close()` stops the server, the tailer and the replays."""

    state: LiveState
    tailer: Tailer
    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.tailer.stop()
        self.state.stop()


def start(options: KafkaReadOptions, listen: tuple[str, int], replay: ReplayOptions,
          *, retention_minutes: int, version: str) -> Service:
    """Plan the partitions from the cluster, start reading them and serve on `listen`."""
    timeout = options.timeout_ms / 1000
    try:
        probe = Consumer(options.client_config("sharestate-serve-planner"))
        try:
            ends = watermarks(probe, INTERNAL_TOPICS, timeout)
        finally:
            probe.close()
    except KafkaException as exc:
        raise KafkaSourceError(options.redact(f"cannot read the internal topics' end offsets "
                                              f"from {options.bootstrap_servers}: {exc}")
                               ) from None
    state = LiveState(sorted(ends), ends, replay, lambda: fetch_topic_ends(options),
                      retention_minutes)
    tailer = Tailer(options, state.replays)
    server = make_server(listen, state, version, lambda: tailer.failure)
    tailer.start()
    thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    thread.start()
    LOG.info("reading %d partitions of %s from %s", len(ends), ", ".join(INTERNAL_TOPICS),
             options.redact(options.bootstrap_servers))
    return Service(state, tailer, server, thread)
