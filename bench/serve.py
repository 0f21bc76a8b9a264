"""The live service (`sharestate serve`): how fast it catches up, how soon a write shows, and
its memory against the log's length.

The broker is librdkafka's mock cluster, held by this process (an in-memory broker on
loopback: the consumer's fetches are real Kafka protocol, the storage is not a disk). The
service is a `sharestate serve` process of its own, so its replays have one core while the
cluster and the load run on the other.

- catch-up: a simulated log (`bench/.cache/`, as `bench/replay.py` makes it, 4 state
  partitions) is produced to a fresh cluster, the service started, and timed from
  "listening" to `/readyz` 200; records/s is the internal-topic records applied over that
  time (all the cluster holds: the mock keeps about 5 MB of each partition, some 60,000
  share-state records, and trims the oldest beyond). Each log length runs in
  a fresh cluster and service; the service's resident memory is read from /proc once it is
  ready (and its peak).
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
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
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
    """A mock cluster (alive while `holder` is) and a producer to it."""

    bootstrap: str
    producer: Any
    holder: Any


def mock_cluster() -> Cluster:
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
    brokers = holder.list_topics(timeout=10).brokers.values()
    bootstrap = ",".join(f"{b.host}:{b.port}" for b in brokers)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000})
    return Cluster(bootstrap, producer, holder)


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

    def wait_ready(self) -> float:
        """Seconds from "listening" to /readyz 200."""
        while self.get("/readyz")[0] != 200:
            if self.process.poll() is not None:
                raise SystemExit(f"sharestate serve exited {self.process.returncode}")
            time.sleep(0.02)
        return time.perf_counter() - self.listening

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


def catch_up(records: int, options: list[str]
             ) -> tuple[dict[str, float], Service, Cluster, Rows]:
    """Produce a simulated log of `records` share-state records, start the service, time
    its catch-up. Returns the figures and the running service, cluster and records."""
    rows = log_records(simulated(records, STATE_PARTITIONS))
    cluster = mock_cluster()
    for (topic, partition), written in rows.items():
        produce(cluster, topic, partition, written)
    total = held(cluster, rows)
    service = Service(cluster.bootstrap, options)
    try:
        seconds = service.wait_ready()
        applied = service.applied()
        assert applied == total, (applied, total)
        rss, peak = service.memory_mb()
    except BaseException:
        service.stop()
        raise
    figures = {"simulated": records, "records": total, "seconds": round(seconds, 2),
               "records_per_s": round(total / seconds), "rss_mb": round(rss, 1),
               "peak_rss_mb": round(peak, 1)}
    print(f"catch-up {total:>9,} records ({records:,} simulated): {seconds:6.2f} s, "
          f"{total / seconds:9,.0f} records/s, RSS {rss:6.1f} MB (peak {peak:6.1f} MB)",
          flush=True)
    return figures, service, cluster, rows


def held(cluster: Cluster, rows: Rows) -> int:
    """Records the cluster holds of `rows` (the mock keeps about 5 MB a partition: it
    trims the oldest beyond that, and the service reads from the log start, as Kafka's
    coordinator does)."""
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
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
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
    parser.add_argument("--records", type=int, nargs="+",
                        default=[60_000, 120_000, 240_000],
                        help="share-state records of each catch-up run (default %(default)s)")
    parser.add_argument("--rate", type=int, default=10_000,
                        help="live traffic, records/s (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="how long the live traffic runs (default %(default)s)")
    parser.add_argument("--fetch-wait-ms", type=int,
                        help="the service consumer's fetch.wait.max.ms (default: librdkafka's "
                             "500; the mock cluster holds every fetch that long)")
    args = parser.parse_args()
    options = [] if args.fetch_wait_ms is None else [
        "--kafka-option", f"fetch.wait.max.ms={args.fetch_wait_ms}"]
    results: dict[str, Any] = {"broker": "librdkafka mock cluster",
                               "fetch_wait_ms": args.fetch_wait_ms or 500, "catch_up": []}
    for index, records in enumerate(args.records):
        figures, service, cluster, rows = catch_up(records, options)
        results["catch_up"].append(figures)
        try:
            if index == len(args.records) - 1:
                results["live"] = live_latency(service, cluster, rows, args.rate, args.seconds)
        finally:
            service.stop()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
