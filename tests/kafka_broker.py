"""A real Apache Kafka broker for the tests: single-node KRaft on loopback, share groups on.

The broker runs from the jars `make jars` put in the cache (`sharestate.jars`), one JVM
per broker: combined broker and controller on 127.0.0.1 with ephemeral ports, its own
`log.dirs` under the test's tmp, storage formatted with share groups enabled, and settings
that make a short workload exercise everything (small, quickly rolled segments, several
share-state partitions, frequent snapshots, short record locks, a low delivery limit,
quick pruning and offset expiry). Kafka's own tools run from the same cache.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from sharestate import jars

LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""

TOOLS_LOG4J = """\
status = error
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %p %m%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


@dataclass(frozen=True)
class Release:
    """A Kafka release the tests can run: its broker jar set and its tools jar set."""

    version: str
    broker_set: str
    tools_set: str
    dump_class: str | None
    share_version: int | None = None
    early_access: bool = False
    librdkafka_shares: bool = True
    """Whether librdkafka's share consumer can fetch from it (4.0: only the early-access
    protocol; 4.1: a ShareFetch's member id must be URL-safe base64, librdkafka's is not)."""


# 4.3.1 is the judge: the newest release whose broker and tools (kafka-dump-log moved into
# kafka-tools in 4.3) Maven Central serves together. 4.4.0's broker is there without its
# tools: 4.3.1's admin tools talk to it over the protocol. 4.0 wrote the early-access
# share-state layout and needs its early-access switches. 4.1 (share groups in preview:
# share.version defaults to 0 there) and 4.2 (share.version 1 by default) carry
# kafka-dump-log in the broker's jar. Each release is formatted with share groups at the
# level it ships (4.1: the level that enables its preview).
RELEASES = {
    "4.3": Release("4.3.1", "kafka-4.3", "kafka-4.3", "org.apache.kafka.tools.DumpLogSegments",
                   share_version=1),
    "4.4": Release("4.4.0", "kafka-4.4", "kafka-4.3", None, share_version=2),
    "4.0": Release("4.0.2", "kafka-4.0", "kafka-4.0", "kafka.tools.DumpLogSegments",
                   early_access=True, librdkafka_shares=False),
    "4.1": Release("4.1.2", "kafka-4.1", "kafka-4.1", "kafka.tools.DumpLogSegments",
                   share_version=1, librdkafka_shares=False),
    "4.2": Release("4.2.2", "kafka-4.2", "kafka-4.2", "kafka.tools.DumpLogSegments",
                   share_version=1),
}

SHARE_STATE_PARTITIONS = 3
OFFSETS_PARTITIONS = 3
LOCK_DURATION_MS = 2000
DELIVERY_COUNT_LIMIT = 3
SNAPSHOT_EVERY = 4
PRUNE_INTERVAL_MS = 3000
SEGMENT_ROLL_MS = 4000


def free_port() -> int:
    """A port the kernel just handed out on loopback (free unless raced)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def broker_settings(release: Release, log_dirs: Path, broker_port: int,
                    controller_port: int) -> dict[str, str]:
    """server.properties for a single combined node with the tests' share-group settings."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(log_dirs),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        # Segments roll by time too, so the internal topics get several small segments.
        "log.roll.ms": str(SEGMENT_ROLL_MS),
        # The log start offsets the share coordinator's prune runs set are checkpointed
        # (log-start-offset-checkpoint) within a second, so a copy of log.dirs tells them.
        "log.flush.start.offset.checkpoint.interval.ms": "1000",
        "log.segment.bytes": str(1 << 20),
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "offsets.topic.segment.bytes": str(1 << 20),
        "offsets.retention.minutes": "1",
        "offsets.retention.check.interval.ms": "5000",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": str(SHARE_STATE_PARTITIONS),
        "share.coordinator.state.topic.segment.bytes": str(1 << 20),
        "share.coordinator.snapshot.update.records.per.snapshot": str(SNAPSHOT_EVERY),
        "share.coordinator.state.topic.prune.interval.ms": str(PRUNE_INTERVAL_MS),
        # No cold-partition snapshots during a session: the prune comparison reads the log
        # start offset after the logs were copied.
        "share.coordinator.cold.partition.snapshot.interval.ms": "3600000",
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.record.lock.duration.ms": str(LOCK_DURATION_MS),
        "group.share.delivery.count.limit": str(DELIVERY_COUNT_LIMIT),
        "group.share.min.session.timeout.ms": "6000",
        "group.share.session.timeout.ms": "6000",
        "group.share.min.heartbeat.interval.ms": "1000",
        "group.share.heartbeat.interval.ms": "1000",
    }
    if release.early_access:
        settings.update({
            "unstable.api.versions.enable": "true",
            "group.coordinator.rebalance.protocols": "classic,consumer,share",
            "group.share.enable": "true",
        })
    return settings


@dataclass(frozen=True)
class Tls:
    """A self-signed certificate (for 127.0.0.1) in a PKCS12 keystore a broker serves, and
    the same certificate as PEM, the CA a client trusts."""

    keystore: Path
    password: str
    certificate: Path


def self_signed(folder: Path, name: str) -> Tls:
    """A new `Tls` in `folder`, made by the JDK's keytool."""
    folder.mkdir(parents=True, exist_ok=True)
    tls = Tls(folder / f"{name}.p12", "keystore-pass", folder / f"{name}.pem")
    store = ["-keystore", str(tls.keystore), "-storetype", "PKCS12",
             "-storepass", tls.password]
    subprocess.run(["keytool", "-genkeypair", "-alias", name, "-keyalg", "EC",
                    "-groupname", "secp256r1", "-validity", "30", "-dname", "CN=localhost",
                    "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-keypass", tls.password,
                    *store], check=True, capture_output=True)
    subprocess.run(["keytool", "-exportcert", "-rfc", "-alias", name, "-file",
                    str(tls.certificate), *store], check=True, capture_output=True)
    return tls


def sasl_listener(settings: Mapping[str, str], port: int, users: Mapping[str, str],
                  tls: Tls | None) -> dict[str, str]:
    """The settings that add a listener on `port` to `settings` where the SASL mechanism
    PLAIN knows `users` (name: password): SASL_SSL serving `tls`, else SASL_PLAINTEXT."""
    protocol = "SASL_PLAINTEXT" if tls is None else "SASL_SSL"
    where = f"{protocol}://127.0.0.1:{port}"
    known = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    listener = f"listener.name.{protocol.lower()}"
    return {
        "listeners": f"{settings['listeners']},{where}",
        "advertised.listeners": f"{settings['advertised.listeners']},{where}",
        "listener.security.protocol.map":
            f"{settings['listener.security.protocol.map']},{protocol}:{protocol}",
        "sasl.enabled.mechanisms": "PLAIN",
        f"{listener}.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {known};",
        **({} if tls is None else {
            f"{listener}.ssl.keystore.type": "PKCS12",
            f"{listener}.ssl.keystore.location": str(tls.keystore),
            f"{listener}.ssl.keystore.password": tls.password,
            f"{listener}.ssl.key.password": tls.password}),
    }


IN_FLIGHT = ("*.cleaned", "*.swap", "*.deleted")
"""Files of a partition folder that the log cleaner is writing or swapping in, or that wait
for deletion: a running broker's, never part of what a copy of its log reads."""


def copy_log_folders(folders: Iterable[Path], target: Path, *, keep_times: bool = True,
                     tries: int = 5) -> None:
    """Copy partition folders of a running broker's log.dirs into `target`, leaving out
    the files in flight (`IN_FLIGHT`). A file can still vanish while it is copied (the
    cleaner swapped a segment in, the retention task deleted one): the copy is then made
    again, up to `tries` times."""
    folders = list(folders)
    copy = shutil.copy2 if keep_times else shutil.copy
    for attempt in range(tries):
        try:
            for folder in folders:
                shutil.copytree(folder, target / folder.name, copy_function=copy,
                                ignore=shutil.ignore_patterns(*IN_FLIGHT))
            return
        except (shutil.Error, FileNotFoundError):
            if attempt == tries - 1:
                raise
            for folder in folders:
                shutil.rmtree(target / folder.name, ignore_errors=True)
            time.sleep(0.2)


class BrokerFailed(RuntimeError):
    """The broker did not start (the message ends with its log tail)."""


@dataclass
class KafkaBroker:
    """One broker process and the tools that talk to it."""

    release: Release
    workdir: Path
    overrides: Mapping[str, str] = field(default_factory=dict)
    sasl_users: Mapping[str, str] = field(default_factory=dict)
    """Users and passwords of a SASL listener (mechanism PLAIN), if any."""
    tls: Tls | None = None
    """What the SASL listener serves, making it SASL_SSL (else SASL_PLAINTEXT)."""
    broker_port: int = 0
    sasl_port: int = 0
    controller_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def log_dirs(self) -> Path:
        return self.workdir / "log.dirs"

    @property
    def server_log(self) -> Path:
        return self.workdir / "logs" / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL listener (`sasl_users`); the tools and the inter-broker traffic use
        the PLAINTEXT one."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def lock_duration_s(self) -> float:
        return int(self.settings["group.share.record.lock.duration.ms"]) / 1000

    @property
    def prune_interval_s(self) -> float:
        return int(self.settings["share.coordinator.state.topic.prune.interval.ms"]) / 1000

    def java(self, jar_set: str, main: str, *args: str, log4j: Path | None = None,
             heap: str = "256m") -> list[str]:
        """A java command line running `main` from a cached jar set."""
        log4j = log4j or self.workdir / "tools-log4j2.properties"
        return ["java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Xshare:auto", f"-Dlog4j2.configurationFile={log4j}",
                "-cp", jars.jar_set(jar_set).classpath(), main, *args]

    def run(self, jar_set: str, main: str, *args: str, timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run one of Kafka's command-line classes to completion; its output as text."""
        done = subprocess.run(self.java(jar_set, main, *args), capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)} exited {done.returncode}:\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done

    def tool(self, main: str, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        """A class of Kafka's tools (kafka-tools) against this broker."""
        return self.run(self.release.tools_set, main, *args, **kwargs)  # type: ignore[arg-type]

    def dump_log(self, files: Sequence[Path], decoder: str) -> str:
        """`kafka-dump-log.sh --files ... --<decoder>` from the broker's own release."""
        if self.release.dump_class is None:
            raise RuntimeError(f"Kafka {self.release.version} has no kafka-dump-log here")
        names = ",".join(str(path) for path in files)
        return self.run(self.release.tools_set, self.release.dump_class,
                        "--files", names, f"--{decoder}", timeout=300).stdout

    def start(self, timeout: float = 90) -> None:
        """Format storage, start the broker and wait until it serves metadata."""
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.log_dirs.mkdir(parents=True, exist_ok=True)
        self.broker_port, self.controller_port = free_port(), free_port()
        self.settings = broker_settings(self.release, self.log_dirs, self.broker_port,
                                        self.controller_port) | dict(self.overrides)
        if self.sasl_users:
            self.sasl_port = free_port()
            self.settings |= sasl_listener(self.settings, self.sasl_port, self.sasl_users,
                                           self.tls)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self.settings.items()))
        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J.format(log=self.server_log))
        (self.workdir / "tools-log4j2.properties").write_text(TOOLS_LOG4J)
        # A random id may begin with "-": passed as --cluster-id=ID, not as an option.
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        version = self.release.share_version
        features = ["--feature", f"share.version={version}"] if version else []
        formatted = self.run(self.release.broker_set, "kafka.tools.StorageTool", "format",
                             f"--cluster-id={cluster_id}", "-c", str(config), *features,
                             check=False)
        if formatted.returncode != 0:
            raise BrokerFailed(f"kafka-storage format failed:\n{formatted.stdout}"
                               f"{formatted.stderr}")
        self.launch(timeout)

    def launch(self, timeout: float = 90) -> None:
        """Start the formatted broker (again, after `stop`: same ports, same storage) and
        wait until it serves metadata."""
        stdout = (self.workdir / "logs" / "stdout.log").open("ab")
        self.process = subprocess.Popen(
            self.java(self.release.broker_set, "kafka.Kafka",
                      str(self.workdir / "server.properties"),
                      log4j=self.workdir / "log4j2.properties", heap="768m"),
            stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
        stdout.close()
        self._wait_ready(time.monotonic() + timeout)

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = self.process.returncode if self.process else None
                raise BrokerFailed(f"the broker exited ({code})\n{self.log_tail()}")
            try:
                if admin is None:
                    socket.create_connection(("127.0.0.1", self.broker_port), 1).close()
                    admin = AdminClient({"bootstrap.servers": self.bootstrap})
                if admin.list_topics(timeout=5).brokers:
                    return
            except Exception:  # not up yet; the deadline decides
                time.sleep(0.3)
        self.stop()
        raise BrokerFailed(f"the broker was not ready in time\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        """The last lines of the broker's log and its console output."""
        parts = []
        for path in (self.server_log, self.workdir / "logs" / "stdout.log"):
            if path.is_file():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(parts) or "(no broker log)"

    def stop(self, timeout: float = 60) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after `timeout`)."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


@contextmanager
def running_broker(release: Release, workdir: Path,
                   overrides: Mapping[str, str] | None = None,
                   sasl_users: Mapping[str, str] | None = None,
                   tls: Tls | None = None) -> Iterator[KafkaBroker]:
    """A started broker, stopped on exit; fails (never skips) when its jars are missing."""
    for name in {release.broker_set, release.tools_set}:
        found = jars.jar_set(name)
        if not found.present:
            raise jars.JarsMissing(f"Kafka {release.version} needs jar set {name}, "
                                   f"{len(found.missing)} files missing: run `make jars`")
    broker = KafkaBroker(release, workdir, dict(overrides or {}), dict(sasl_users or {}),
                         tls)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
