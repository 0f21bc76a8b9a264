"""sharestate against a secured cluster: a real Kafka 4.3.1 broker whose second listener
speaks SASL_SSL (mechanism PLAIN, a self-signed certificate the client trusts with
`ssl.ca.location`), with an authorizer that lets a principal do only what its ACLs allow;
the user given as `--kafka-option sasl.username`, the password in
`SHARESTATE_KAFKA_SASL_PASSWORD`.

- `run --source kafka://` with `--end-offsets-from kafka://`, as a principal with the least
  the docs ask for (Read and Describe on the internal topics, Describe on the data topics):
  every client (the driver's admin clients, the executors' readers) authenticates and is
  allowed; the tables are those of a run over the broker's plain listener, and the password
  is in no file of the warehouse. Before, the executors' readers failed (exit 70, "a bug")
  on the coordinator lookup of a consumer group they never use (Describe on the group), and
  the end offsets stopped the run on the data topics' configuration (DescribeConfigs).
- `serve`: its consumer authenticates and answers the state the run wrote.
- a principal that may not describe the data topics: the run says their end offsets are
  missing and why (the cluster hides such topics: before, the lag silently stayed a lower
  bound); one that may not describe `__consumer_offsets` reads the share state and says why
  it read no offsets; one that may describe it but not read it: one line naming it, exit 2.
- a wrong password, or a certificate the client does not trust: `run` and `serve` exit 2
  within seconds with one line saying the cluster refused the client (librdkafka retries a
  failed authentication or handshake for ever: `run` waited out its connect timeout and
  said it could not reach the cluster, `serve` retried for ever).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from deltalake import DeltaTable
from kafka_broker import RELEASES, KafkaBroker, Tls, running_broker, self_signed
from kafka_judge import SHARESTATE
from kafka_workload import (
    Workload,
    consume,
    create_topics,
    mixed,
    produce,
    share_consumer,
    share_groups_start_earliest,
)
from serve_support import ServeProcess, eventually, get

from sharestate.spark.run import main as run_all

pytestmark = pytest.mark.kafka_broker

SECRET = "pl41n-s3cret"
PASSWORD_VARIABLE = "SHARESTATE_KAFKA_SASL_PASSWORD"
INTERNAL = ("__share_group_state", "__consumer_offsets")
DATA = ("orders", "events", "payments")
ALLOWED = {
    "reader": [*((topic, op) for topic in INTERNAL for op in ("READ", "DESCRIBE")),
               *((topic, "DESCRIBE") for topic in DATA)],
    "narrow": [(topic, op) for topic in INTERNAL for op in ("READ", "DESCRIBE")],
    "blind": [("__share_group_state", "READ"), *((topic, "DESCRIBE") for topic in INTERNAL)],
    "hidden": [("__share_group_state", op) for op in ("READ", "DESCRIBE")],
}
"""Each principal's ACLs (topic, operation): `reader` what docs/kafka-cluster.md asks for."""
SETTINGS = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS", "allow.everyone.if.no.acl.found": "false",
            "log.roll.ms": "3600000",
            "share.coordinator.state.topic.prune.interval.ms": "3600000"}
"""Only ACLs allow; the plain listener's clients (the workload, Kafka's tools, the broker
itself) are super users. The runs compared read the same log: no segment rolls (the log
cleaner compacted `__consumer_offsets` between them) and no prune moves a log start."""
SASL = ("--kafka-option", "security.protocol=SASL_SSL", "--kafka-option", "sasl.mechanism=PLAIN")
GROUP = "sg-sasl"
PER_RUN = {"ingest_run", "run_id", "source", "finished_at", "committed_at"}
"""Columns that name the run or the address it read: the two listeners' runs differ there."""


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return self_signed(tmp_path_factory.mktemp("tls"), "broker")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, tls: Tls) -> Iterator[KafkaBroker]:
    """A broker with share state: one share group that read all three topics, accepting,
    releasing and rejecting."""
    with running_broker(RELEASES["4.3"], tmp_path_factory.mktemp("kafka-sasl"), SETTINGS,
                        sasl_users=dict.fromkeys(ALLOWED, SECRET), tls=tls) as running:
        workload = Workload(running)
        for made in workload.admin().create_acls([
                AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                           f"User:{user}", "*", getattr(AclOperation, operation),
                           AclPermissionType.ALLOW)
                for user, allowed in ALLOWED.items() for topic, operation in allowed]).values():
            made.result()
        create_topics(workload)
        produce(workload)
        share_groups_start_earliest(workload, [GROUP])
        member = share_consumer(workload, GROUP, ["orders", "events", "payments"])
        assert consume(workload, member, GROUP, mixed) > 0
        member.close()
        yield running


def _arguments(warehouse: Path, bootstrap: str) -> list[str]:
    source = f"kafka://{bootstrap}"
    return ["--source", source, "--end-offsets-from", source, "--warehouse", str(warehouse)]


def _tables(warehouse: Path) -> dict[str, list[str]]:
    tables = {}
    for folder in sorted(p for p in warehouse.iterdir() if (p / "_delta_log").is_dir()):
        rows = DeltaTable(str(folder)).to_pyarrow_table().to_pylist()
        tables[folder.name] = sorted(repr({k: v for k, v in row.items() if k not in PER_RUN})
                                     for row in rows)
    return tables


def _as(user: str, tls: Tls) -> tuple[str, ...]:
    return (*SASL, "--kafka-option", f"sasl.username={user}",
            "--kafka-option", f"ssl.ca.location={tls.certificate}")


def _run_as(user: str, tls: Tls, broker: KafkaBroker, warehouse: Path
            ) -> subprocess.CompletedProcess[str]:
    """`sharestate run` as a user runs it: the password in the environment Spark's
    processes start with."""
    return subprocess.run([SHARESTATE, "run", *_arguments(warehouse, broker.sasl_bootstrap),
                           *_as(user, tls)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, PASSWORD_VARIABLE: SECRET}, check=False)


def test_run_and_serve_authenticate(spark: Any, broker: KafkaBroker, tls: Tls, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    plain, sasl = tmp_path / "plain", tmp_path / "sasl"
    assert run_all([*_arguments(plain, broker.bootstrap), "--conf",
                    "spark.ui.enabled=false"]) == 0
    done = _run_as("reader", tls, broker, sasl)
    assert done.returncode == 0, done.stderr
    assert "--end-offsets-from" not in done.stderr  # every topic's end offsets were read
    assert SECRET not in done.stdout + done.stderr
    tables = _tables(sasl)
    assert tables["share_partition_state"], "the share group's state was not read"
    assert tables == _tables(plain)
    for path in sasl.rglob("*"):
        assert not path.is_file() or SECRET.encode() not in path.read_bytes(), path

    monkeypatch.setenv(PASSWORD_VARIABLE, SECRET)
    service = ServeProcess("--source", f"kafka://{broker.sasl_bootstrap}", *_as("reader", tls))
    try:
        assert service.address is not None
        eventually(lambda: get(service.address, "/readyz")[0] == 200, timeout=60)
        served = {(s["group_id"], s["topic_id"], s["partition"]): s["start_offset"]
                  for s in get(service.address, "/v1/share-partitions")[1]}
    finally:
        service.stop(signal.SIGTERM)
    written = {(r["group_id"], r["topic_id"], r["partition"]): r["start_offset"]
               for r in DeltaTable(str(sasl / "share_partition_state")).to_pyarrow_table()
               .to_pylist()}
    assert served == written
    assert SECRET not in service.stderr
    assert "authorization" not in service.stderr.lower()


def test_what_a_principal_may_not_see_is_named(broker: KafkaBroker, tls: Tls,
                                               tmp_path: Path) -> None:
    narrow = _run_as("narrow", tls, broker, tmp_path / "narrow")
    assert narrow.returncode == 0, narrow.stderr
    (note,) = [line for line in narrow.stderr.splitlines() if "--end-offsets-from" in line]
    assert note.startswith(f"--end-offsets-from kafka://{broker.sasl_bootstrap}: no end "
                           f"offsets of events, orders, payments: "), note
    assert "Describe on the topic" in note
    hidden = _run_as("hidden", tls, broker, tmp_path / "hidden")
    assert hidden.returncode in (0, 1), hidden.stderr
    assert (f"kafka://{broker.sasl_bootstrap}: topic __consumer_offsets is not in the cluster "
            f"(Kafka creates it when first used), or the client may not see it (a principal "
            f"needs Describe on it): nothing to read") in hidden.stderr
    assert DeltaTable(str(tmp_path / "hidden" / "share_partition_state")).to_pyarrow_table(
        ).num_rows > 0
    blind = _run_as("blind", tls, broker, tmp_path / "blind")
    assert blind.returncode == 2, blind.stderr
    line = blind.stderr.strip().splitlines()[-1]
    assert line.startswith("sharestate: error: reading __consumer_offsets-"), line
    assert "Topic authorization failed" in line
    assert "internal error" not in blind.stderr


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize(("wrong", "said"), [
    ("password", "SASL authentication error: Authentication failed"),
    ("certificate", "SSL handshake failed"),
])
def test_a_wrong_password_or_certificate_is_refused_at_once(
        command: str, wrong: str, said: str, broker: KafkaBroker, tls: Tls,
        tmp_path: Path) -> None:
    trusted = self_signed(tmp_path / "other", "other") if wrong == "certificate" else tls
    password = "not-the-password" if wrong == "password" else SECRET
    arguments = {"run": ["--warehouse", str(tmp_path / "warehouse")],
                 "serve": ["--listen", "127.0.0.1:0"]}[command]
    began = time.monotonic()
    done = subprocess.run(
        [SHARESTATE, command, "--source", f"kafka://{broker.sasl_bootstrap}",
         *_as("reader", trusted), "--connect-timeout", "30", *arguments],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, PASSWORD_VARIABLE: password}, check=False)
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - began < 20  # the connect timeout is 30 s
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"sharestate: error: the cluster at {broker.sasl_bootstrap} "
                           f"refused the client: "), line
    assert said in line
    assert password not in done.stdout + done.stderr
    assert not (tmp_path / "warehouse").exists()
