"""The live service (`sharestate serve`): how fast it catches up, how soon a write shows, and
its memory against the log's length.

The broker is, by default, a real Apache Kafka broker (`--broker kafka`: single-node KRaft on
loopback, started from the jars `make jars` caches, as the tests start it), or librdkafka's
mock cluster (`--broker mock`: an in-memory broker held by this process; it keeps only about
5 MB of each partition and holds every fetch for `fetch.wait.max.ms`). The service is a
`sharestate serve` process of its own, so its writer has one core while the broker and the
load run on the other.

- catch-up: a simulated log (`bench/.cache/`, as `bench/replay.py` makes it, 4 state
  partitions) is written to a fresh cluster's internal topics (a real broker takes such
  writes from a producer whose client.id is `__admin_client`; the topics are created
  beforehand, never deleting or compacting), the service started, and timed from
  "listening" to `/readyz` 200; records/s is the internal-topic records applied over that
  time (all the cluster holds), and over the CPU time the service's process used in it
  (what a loaded machine leaves it shows in the first, not in the second); meanwhile
  `/readyz` and `/v1/share-partitions` are asked in a loop, each answer timed. Each log
  length runs in a fresh cluster and service; the service's resident memory is read from
  /proc once it is ready (and its peak).
- write-to-visible: after catch-up, share-state records are produced at `--rate` records/s
  (the simulated log's records again, spread over its partitions); among them, every
  50 ms, a ShareSnapshot of a probe share-partition whose start offset counts up. Polling
  `/v1/share-partitions?group=probe` every 5 ms gives when each probe value became
  visible; latency is visible time minus produce time (so it includes up to 5 ms of
  polling).

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import ROOT
from replay import simulated

PROBE_GROUP = "probe"
PROBE_EVERY_S = 0.05
POLL_S = 0.005
STATE_PARTITIONS = 4
"""The mock cluster creates topics with 4 partitions."""


@dataclass
class Cluster:
    """A cluster (alive until `close`) and a producer that may write its internal topics."""

    bootstrap: str
    producer: Any
    close: Callable[[], None]


def mock_cluster() -> Cluster:
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)

    def close() -> None:
        """The cluster lives as long as `holder`, which this keeps."""
        holder.flush(0)

    return Cluster(bootstrap, producer(bootstrap), close)


def kafka_cluster(workdir: Path) -> Cluster:
    """A real broker (the tests' `kafka_broker`, Kafka 4.3.1) with both internal topics
    created: `STATE_PARTITIONS` and 3 partitions, kept whole (no retention, no compaction:
    the simulated records are years old)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    sys.path.insert(0, str(ROOT / "tests"))
    kafka_broker: Any = importlib.import_module("kafka_broker")

    context = kafka_broker.running_broker(
        kafka_broker.RELEASES["4.3"], workdir,
        {"share.coordinator.state.topic.num.partitions": str(STATE_PARTITIONS),
         "offsets.retention.minutes": str(7 * 24 * 60)})
    broker = context.__enter__()
    try:
        kept = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                "segment.bytes": str(64 << 20)}
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([
                NewTopic("__share_group_state", STATE_PARTITIONS, 1, config=kept),
                NewTopic("__consumer_offsets", 3, 1, config=kept)]).values():
            future.result()
    except BaseException:
        context.__exit__(None, None, None)
        raise
    return Cluster(broker.bootstrap, producer(broker.bootstrap),
                   lambda: context.__exit__(None, None, None))


def producer(bootstrap: str) -> Any:
    """A producer the broker lets write internal topics (Kafka allows that to client id
    `__admin_client` only)."""
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "client.id": "__admin_client",
                     "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})


Row = tuple[bytes | None, bytes | None, int]
"""A record's key, value and timestamp."""
Rows = dict[tuple[str, int], list[Row]]


def log_records(root: Path) -> Rows:
    """(key, value, timestamp) of every data record of each internal-topic partition."""
    from sharestate.log import Batch, read_batches

    found: Rows = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        topic, _, partition = folder.name.rpartition("-")
        rows = found.setdefault((topic, int(partition)), [])
        for segment in sorted(folder.glob("*.log")):
            with segment.open("rb") as stream:
                for batch in read_batches(stream):
                    if isinstance(batch, Batch) and not batch.header.is_control:
                        rows.extend((r.key, r.value, r.timestamp) for r in batch.records)
    return found


def produce(cluster: Cluster, topic: str, partition: int, rows: list[Row]) -> None:
    producer = cluster.producer
    for index, (key, value, timestamp) in enumerate(rows):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition,
                                 timestamp=timestamp)
                break
            except BufferError:
                producer.poll(0.05)
        if index % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


class Service:
    """`sharestate serve` in a process of its own."""

    def __init__(self, bootstrap: str, options: list[str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sharestate", "serve", "--source", f"kafka://{bootstrap}",
             "--listen", "127.0.0.1:0", *options], stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.process.stderr is not None
        for line in self.process.stderr:
            found = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if found:
                self.listening = time.perf_counter()
                self.cpu_at_listening = self.cpu_seconds()
                self.url = f"http://{found[1]}:{found[2]}"
                break
        else:
            raise SystemExit(f"sharestate serve did not start ({self.process.wait()})")
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def wait_ready(self) -> tuple[float, dict[str, list[float]]]:
        """Seconds from "listening" to /readyz 200, and how long each answer of /readyz and
        of /v1/share-partitions (asked in a loop meanwhile) took."""
        took: dict[str, list[float]] = {"/readyz": [], "/v1/share-partitions": []}
        ready = threading.Event()

        def timed(path: str) -> int:
            asked = time.perf_counter()
            status = self.get(path)[0]
            took[path].append(time.perf_counter() - asked)
            return status

        def read_state() -> None:
            while not ready.is_set():
                timed("/v1/share-partitions")
                time.sleep(0.02)

        reader = threading.Thread(target=read_state)
        reader.start()
        try:
            while timed("/readyz") != 200:
                if self.process.poll() is not None:
                    raise SystemExit(f"sharestate serve exited {self.process.returncode}")
                time.sleep(0.02)
            return time.perf_counter() - self.listening, took
        finally:
            ready.set()
            reader.join()

    def cpu_seconds(self) -> float:
        """CPU time the service process used so far (all its threads: the writer, the HTTP
        side, librdkafka's)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def applied(self) -> int:
        text = self.get("/metrics")[1].decode()
        return sum(int(float(value)) for value in re.findall(
            r"^sharestate_serve_records_applied_total\{[^}]*\} (\S+)$", text, re.M))

    def memory_mb(self) -> tuple[float, float]:
        """(resident, peak resident) MB of the service process."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        rss, peak = (int(re.search(rf"^{name}:\s+(\d+) kB", status, re.M)[1])  # type: ignore[index]
                     for name in ("VmRSS", "VmHWM"))
        return rss / 1024, peak / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def catch_up(records: int, options: list[str], open_cluster: Callable[[], Cluster]
             ) -> tuple[dict[str, float], Service, Cluster, Rows]:
    """Produce a simulated log of `records` share-state records, start the service, time
    its catch-up. Returns the figures and the running service, cluster and records."""
    rows = log_records(simulated(records, STATE_PARTITIONS))
    cluster = open_cluster()
    try:
        for (topic, partition), written in rows.items():
            produce(cluster, topic, partition, written)
        total = held(cluster, rows)
    except BaseException:
        cluster.close()
        raise
    service = Service(cluster.bootstrap, options)
    try:
        seconds, took = service.wait_ready()
        cpu = service.cpu_seconds() - service.cpu_at_listening
        applied = service.applied()
        # a real broker's coordinators may append a few records of their own meanwhile
        assert applied >= total, (applied, total)
        rss, peak = service.memory_mb()
    except BaseException:
        service.stop()
        cluster.close()
        raise
    figures = {"simulated": records, "records": applied, "seconds": round(seconds, 2),
               "records_per_s": round(applied / seconds), "cpu_s": round(cpu, 2),
               "records_per_cpu_s": round(applied / cpu), "rss_mb": round(rss, 1),
               "peak_rss_mb": round(peak, 1)}
    for path, name in (("/readyz", "readyz"), ("/v1/share-partitions", "share_partitions")):
        figures[f"{name}_p50_ms"] = round(statistics.median(took[path]) * 1000, 1)
        figures[f"{name}_p99_ms"] = round(_p99(took[path]) * 1000, 1)
        figures[f"{name}_max_ms"] = round(max(took[path]) * 1000, 1)
    print(f"catch-up {applied:>9,} records ({records:,} simulated): {seconds:6.2f} s, "
          f"{applied / seconds:9,.0f} records/s ({applied / cpu:9,.0f} per CPU second of the "
          f"service), RSS {rss:6.1f} MB (peak {peak:6.1f} MB); answers meanwhile: /readyz "
          f"p50 {figures['readyz_p50_ms']:g} ms, p99 {figures['readyz_p99_ms']:g} ms, max "
          f"{figures['readyz_max_ms']:g} ms, /v1/share-partitions p50 "
          f"{figures['share_partitions_p50_ms']:g} ms, max "
          f"{figures['share_partitions_max_ms']:g} ms", flush=True)
    return figures, service, cluster, rows


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def held(cluster: Cluster, rows: Rows) -> int:
    """Records the cluster holds of `rows` (all of them on a real broker; the mock keeps
    about 5 MB a partition, trimming the oldest beyond that, and the service reads from the
    log start, as Kafka's coordinator does)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "bench"})
    try:
        ranges = [consumer.get_watermark_offsets(TopicPartition(*where), timeout=10,
                                                 cached=False) for where in rows]
    finally:
        consumer.close()
    return sum(high - low for low, high in ranges)


def probe_record(start_offset: int) -> tuple[bytes, bytes | None]:
    """A ShareSnapshot of the probe share-partition with `start_offset`."""
    from sharestate.coordinator.share_state import SNAPSHOT_TYPE, ShareKey, ShareValue
    from sharestate.persister.record_codec import ShareRecordCodec

    codec = ShareRecordCodec("4.1")
    now = int(time.time() * 1000)
    value = ShareValue(True, 0, 0, 0, start_offset, 0, now, now, ())
    key = ShareKey(PROBE_GROUP, "AAAAAAAAAAAAAAAAAAAAAQ", 0)
    return codec.key_bytes(SNAPSHOT_TYPE, key), codec.value_bytes(
        SNAPSHOT_TYPE, codec.value_tuple(SNAPSHOT_TYPE, value))


def live_latency(service: Service, cluster: Cluster, rows: Rows, rate: int,
                 seconds: float) -> dict[str, float]:
    """Write-to-visible latency of probe records among `rate` records/s of traffic."""
    traffic = [(partition, key, value) for (topic, partition), written in sorted(rows.items())
               if topic == "__share_group_state" for key, value, _ in written]
    sent: dict[int, float] = {}
    seen: dict[int, float] = {}
    done = threading.Event()

    def write() -> None:
        producer = cluster.producer
        tick, per_tick = 0.01, max(1, rate // 100)
        start = time.perf_counter()
        next_probe, probe, index, ticks = start, 0, 0, 0
        while time.perf_counter() - start < seconds:
            for _ in range(per_tick):
                partition, key, value = traffic[index % len(traffic)]
                producer.produce("__share_group_state", key=key, value=value,
                                 partition=partition)
                index += 1
            if time.perf_counter() >= next_probe:
                probe += 1
                key, value = probe_record(probe)
                producer.produce("__share_group_state", key=key, value=value, partition=0)
                sent[probe] = time.perf_counter()
                next_probe += PROBE_EVERY_S
            producer.poll(0)
            ticks += 1
            time.sleep(max(0.0, start + ticks * tick - time.perf_counter()))
        producer.flush(30)
        sent_rate.append(index / (time.perf_counter() - start))
        done.set()

    def watch() -> None:
        last = 0
        while not done.is_set() or last < len(sent):
            status, body = service.get(f"/v1/share-partitions?group={PROBE_GROUP}")
            now = time.perf_counter()
            rows_ = json.loads(body) if status == 200 else []
            value = rows_[0]["start_offset"] if rows_ else 0
            for probe in range(last + 1, value + 1):
                seen[probe] = now
            last = max(last, value)
            time.sleep(POLL_S)
            if done.is_set() and time.perf_counter() - max(sent.values()) > 10:
                break

    sent_rate: list[float] = []
    writer = threading.Thread(target=write)
    watcher = threading.Thread(target=watch)
    writer.start()
    watcher.start()
    writer.join()
    watcher.join()
    latencies = sorted(seen[p] - sent[p] for p in sent if p in seen)
    missing = len(sent) - len(latencies)
    p50 = statistics.median(latencies)
    p99 = _p99(latencies)
    rss, peak = service.memory_mb()
    print(f"live traffic {sent_rate[0]:,.0f} records/s for {seconds:g} s: {len(latencies)} "
          f"probes, write-to-visible p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max "
          f"{latencies[-1] * 1000:.0f} ms ({missing} never seen); RSS {rss:.1f} MB (peak "
          f"{peak:.1f} MB)", flush=True)
    return {"rate": round(sent_rate[0]), "probes": len(latencies), "missing": missing,
            "p50_ms": round(p50 * 1000, 1), "p99_ms": round(p99 * 1000, 1),
            "max_ms": round(latencies[-1] * 1000, 1), "rss_mb": round(rss, 1),
            "peak_rss_mb": round(peak, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", choices=("kafka", "mock"), default="kafka",
                        help="a real Kafka broker (default) or librdkafka's mock cluster")
    parser.add_argument("--records", type=int, nargs="+",
                        default=[250_000, 1_000_000, 2_000_000],
                        help="share-state records of each catch-up run (default %(default)s)")
    parser.add_argument("--rate", type=int, default=10_000,
                        help="live traffic, records/s (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="how long the live traffic runs (default %(default)s)")
    parser.add_argument("--fetch-wait-ms", type=int,
                        help="the service consumer's fetch.wait.max.ms (default: librdkafka's "
                             "500; the mock cluster holds every fetch that long, a real "
                             "broker only while it has nothing to send)")
    args = parser.parse_args()
    options = [] if args.fetch_wait_ms is None else [
        "--kafka-option", f"fetch.wait.max.ms={args.fetch_wait_ms}"]
    results: dict[str, Any] = {
        "broker": "Apache Kafka 4.3.1" if args.broker == "kafka" else "librdkafka mock cluster",
        "fetch_wait_ms": args.fetch_wait_ms or 500, "catch_up": []}
    with tempfile.TemporaryDirectory(prefix="sharestate-bench-") as tmp:
        for index, records in enumerate(args.records):
            def open_cluster(index: int = index) -> Cluster:
                if args.broker == "mock":
                    return mock_cluster()
                return kafka_cluster(Path(tmp) / f"broker-{index}")

            figures, service, cluster, rows = catch_up(records, options, open_cluster)
            results["catch_up"].append(figures)
            try:
                if index == len(args.records) - 1:
                    results["live"] = live_latency(service, cluster, rows, args.rate,
                                                   args.seconds)
            finally:
                service.stop()
                cluster.close()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
