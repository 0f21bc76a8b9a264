"""Whether the cluster answers the service's clients, said on the service's log in a line
of its own, never in librdkafka's.

The tailer's consumer (and the admin client that waits for the internal topics) log through
`ClusterStatus.client_log`, a logger of their own that nothing else hears: each of their
lines goes to the service's log at DEBUG. Every broker down (their `error_cb`) is the
cluster not answering: once it lasted `FIRST_S` (a broker restarting is not worth a
line), a warning naming the cause (the clients' latest error: a broker refusing
connections, not resolved, ...), again every `STATUS_S` while it lasts, and one line when
a broker answers again (the consumer's statistics see one up).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Final

from confluent_kafka import KafkaError

from sharestate.cluster.kafka_plan import client_line

LOG = logging.getLogger("sharestate.serve")
FIRST_S: Final = 5.0
"""How long the cluster does not answer before the status line says so."""
STATUS_S: Final = 30.0
"""How often the status line is repeated while the cluster does not answer."""


class ClusterStatus(logging.Handler):
    """Hears the clients' log lines and errors (see the module); call `tick` now and then
    on the thread that polls the clients."""

    def __init__(self, cluster: str) -> None:
        super().__init__(logging.DEBUG)
        self.cluster = cluster
        self.client_log = logging.Logger("sharestate.serve.client")
        """The clients' logger (`logger` in their configuration): its own, so that nothing
        else hears it."""
        self.client_log.addHandler(self)
        self.down_since: float | None = None
        self.cause: str | None = None
        self._next_status = 0.0
        self._said = False

    def emit(self, record: logging.LogRecord) -> None:
        LOG.debug("client: %s", client_line(record.getMessage()))

    def error(self, error: KafkaError) -> None:
        """A client's `error_cb`: an error it retries (a fatal one also ends the reads).
        Every broker down is the cluster not answering; the error before it says why (a
        broker refusing connections, not resolved, ...)."""
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            self.cause = client_line(error.str())
            return
        if self.down_since is None:
            self.down_since = time.monotonic()
            self._next_status = self.down_since + FIRST_S
            self.cause = self.cause or client_line(error.str())
        self.tick()

    def tick(self) -> None:
        """Say the cluster does not answer, when a status line is due."""
        now = time.monotonic()
        if self.down_since is not None and now >= self._next_status:
            LOG.warning("the cluster at %s has not answered for %.0f s: %s; trying again",
                        self.cluster, now - self.down_since, self.cause)
            self._next_status = now + STATUS_S
            self._said = True

    def statistics(self, report: str) -> None:
        """A client's statistics (librdkafka's JSON): a broker up since the cluster stopped
        answering is the cluster answering again (a report made before, served after the
        error, shows one up for longer)."""
        if self.down_since is None:
            return
        down_for = time.monotonic() - self.down_since
        brokers = json.loads(report).get("brokers", {}).values()
        if any(b.get("nodeid", -1) >= 0 and b.get("state") == "UP"
               and b.get("stateage", 0) / 1e6 < down_for for b in brokers):
            self.answered()

    def answered(self) -> None:
        """The cluster answered a client."""
        if self.down_since is not None and self._said:
            LOG.info("the cluster at %s answers again, after %.0f s", self.cluster,
                     time.monotonic() - self.down_since)
        self.down_since = self.cause = None
        self._said = False
