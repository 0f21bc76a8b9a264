"""What the serve tests share: a live broker (librdkafka's mock cluster, held by this
process), records to feed it, `sharestate serve` in a process of its own, and asking a
running service over HTTP."""

from __future__ import annotations

import json
import logging
import re
import resource
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from conftest import conformance_dir

from sharestate.app.cli import main
from sharestate.log import RawRecord, read_batches
from sharestate.log.builder import SegmentWriter, build_batch
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.simulate.simulation import SimulationConfig
from sharestate.simulate.simulator import END_OFFSETS_FILE, simulate

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


CLIENT_LOG = logging.getLogger("tests.mock-cluster")
"""Where the test's own clients log: a producer a finished test left to the garbage
collector, outliving its cluster, logs connection failures; on stderr they would read as a
later test's command's output."""


def mock_cluster() -> Cluster:
    holder = Producer({"test.mock.num.brokers": 1, "logger": CLIENT_LOG})
    brokers = holder.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": CLIENT_LOG})
    return Cluster(bootstrap, producer, holder)


def data_records(path: Path) -> list[RawRecord]:
    """The data records of a segment, in log order (a consumer sees no control records)."""
    with path.open("rb") as segment:
        return [r for batch in read_batches(segment)
                if hasattr(batch, "records") and not batch.header.is_control
                for r in batch.records]


def fixture_records(name: str) -> list[RawRecord]:
    """A conformance fixture's data records, offsets renumbered from 0 (as a fresh topic
    holds them)."""
    records = data_records(conformance_dir("kafka-4.4-dev") / name)
    return [r._replace(offset=i, sequence=-1) for i, r in enumerate(records)]


def offline(tmp_path: Path, command: str, records: dict[str, list[RawRecord]]
            ) -> list[dict[str, Any]]:
    """`sharestate <command>` over segment files of `records` (one batch per 40 records;
    partition 0 of the topic the command reads)."""
    topic = CONSUMER_OFFSETS_TOPIC if command == "offsets" else SHARE_STATE_TOPIC
    logs = tmp_path / command
    with SegmentWriter(logs, topic, 0) as writer:
        for start_at in range(0, len(records[topic]), 40):
            writer.append(build_batch(records[topic][start_at:start_at + 40]))
    out = tmp_path / f"{command}.jsonl"
    assert main([command, str(logs), "--output", str(out)]) in (0, 1)  # 1: findings
    return [json.loads(line) for line in out.read_text().splitlines()]


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


def produce_data_topics(cluster: Cluster, out: Path) -> None:
    """Give the cluster the simulated data topics, as many records in each partition as
    the simulation's end offsets say (so lag is taken against real end offsets)."""
    for end in json.loads((out / END_OFFSETS_FILE).read_text()):
        for index in range(end["end_offset"]):
            cluster.producer.produce(end["topic"], value=b"%d" % index,
                                     partition=end["partition"])
            if index % 1000 == 0:
                cluster.producer.poll(0)
    assert cluster.producer.flush(60) == 0


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


class ServeProcess:
    """`sharestate serve` in a process of its own; its stderr collected line by line."""

    def __init__(self, *args: str, limits: dict[int, int] | None = None,
                 wait: bool = True) -> None:
        """`limits`: resource limits of the process (`resource.RLIMIT_*`: soft and hard);
        `wait`: until it listens (or exits)."""

        def limited() -> None:
            for which, limit in (limits or {}).items():
                resource.setrlimit(which, (limit, limit))

        self.process = subprocess.Popen(
            [sys.executable, "-m", "sharestate", "serve", "--listen", "127.0.0.1:0", *args],
            stderr=subprocess.PIPE, text=True, preexec_fn=limited if limits else None)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if wait:
            eventually(lambda: self.address is not None or self.process.poll() is not None)
            assert self.address is not None, self.stderr

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    @property
    def address(self) -> tuple[str, int] | None:
        found = re.search(r"listening on http://([\d.]+):(\d+)", self.stderr)
        return (found[1], int(found[2])) if found else None

    def stop(self, signum: int) -> int:
        """Send `signum`; the exit status."""
        self.process.send_signal(signum)
        status = self.process.wait(30)
        self.reader.join(10)
        return status

    def kill(self) -> None:
        """Kill it if it still runs (a test's cleanup)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
