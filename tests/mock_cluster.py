"""A live broker for the serve tests (librdkafka's mock cluster, held by this process) and
what the tests do with a running service: ask it over HTTP, wait for it, compare answers."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from sharestate.log import RawRecord, read_batches
from sharestate.simulate.simulation import SimulationConfig
from sharestate.simulate.simulator import simulate

ENDPOINTS = ("/v1/share-partitions", "/v1/lag", "/v1/redelivery", "/v1/prune",
             "/v1/consumer-group-offsets", "/v1/findings")
"""The JSON answers that hold the replayed state."""


@dataclass
class Cluster:
    """A mock cluster (alive as long as `holder`) and a producer to it."""

    bootstrap: str
    producer: Producer
    holder: Producer

    def produce(self, topic: str, records: Iterable[RawRecord], partition: int = 0) -> None:
        for record in records:
            self.producer.produce(topic, key=record.key, value=record.value,
                                  partition=partition, timestamp=record.timestamp)
            self.producer.poll(0)
        assert self.producer.flush(30) == 0


def mock_cluster() -> Cluster:
    holder = Producer({"test.mock.num.brokers": 1})
    brokers = holder.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    return Cluster(bootstrap, Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}), holder)


def data_records(path: Path) -> list[RawRecord]:
    """The data records of a segment, in log order (a consumer sees no control records)."""
    with path.open("rb") as segment:
        return [r for batch in read_batches(segment)
                if hasattr(batch, "records") and not batch.header.is_control
                for r in batch.records]


def simulated(out: Path, records: int, seed: int = 0) -> dict[tuple[str, int], list[RawRecord]]:
    """A simulated cluster's internal-topic records per (topic, partition)."""
    simulate(SimulationConfig(records=records, seed=seed, poison_rate=0.01, snapshot_limit=50),
             out)
    found: dict[tuple[str, int], list[RawRecord]] = {}
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        topic, _, partition = folder.name.rpartition("-")
        found[(topic, int(partition))] = [r for segment in sorted(folder.glob("*.log"))
                                          for r in data_records(segment)]
    return found


def get(address: tuple[str, int], path: str) -> tuple[int, Any]:
    """(status, JSON body, or the text of /metrics) of GET `path`."""
    host, port = address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as answer:
            body = answer.read().decode()
            status = answer.status
    except urllib.error.HTTPError as error:
        body, status = error.read().decode(), error.code
    return status, body if path == "/metrics" else json.loads(body)


def eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
