"""Shared test helpers."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_workload import Workload, run_release_workload, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharestate.simulate import SimulationResult

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_ENV = "SHARESTATE_CONFORMANCE_DIR"


_CLIENT_LOG = re.compile(r"%\d\|\d+\.\d+\|[A-Z_]+\|rdkafka#")


def own_lines(err: str) -> list[str]:
    """The lines of a command's captured stderr, less librdkafka's log lines (`%3|<time>|
    FAIL|rdkafka#producer-2| ...`): a Kafka client another test left in this process writes
    them to file descriptor 2 from its own thread, at any time, once its broker is gone; a
    command that connects to no cluster writes none of its own."""
    return [line for line in err.splitlines() if not _CLIENT_LOG.match(line)]


def under_ci() -> bool:
    """Whether the tests run under CI (CI set, as CI services do, and not to 0 / false)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def conformance_root() -> Path:
    """Where the Kafka-produced fixture folders live (may not exist)."""
    configured = os.environ.get(CONFORMANCE_ENV)
    if configured:
        return Path(configured).resolve()
    return (PROJECT_ROOT / ".." / "shared" / "fixtures").resolve()


def conformance_dir(name: str | None = None) -> Path:
    """The conformance fixture directory (or one fixture set inside it), or skip the test."""
    root = conformance_root()
    if not root.is_dir():
        pytest.skip(f"conformance fixtures not found at {root} "
                    f"(set {CONFORMANCE_ENV} to the folder holding kafka-4.4-dev/ etc.)")
    if name is None:
        return root
    folder = root / name
    if not folder.is_dir():
        pytest.skip(f"conformance fixture set {name!r} not found under {root}")
    return folder


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session (`build_session`'s defaults, no UI) for every test that
    needs one; a test that needs other JVM settings starts a JVM of its own (a subprocess)."""
    from sharestate.spark.session import build_session

    session = build_session("sharestate-tests", ui=False)
    yield session
    session.stop()


RELEASE_FIXTURE = "release_run"


@pytest.fixture(scope="session", autouse=True)
def kafka_releases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[dict[str, Future[Workload]]]:
    """The other releases' brokers (4.0.2, 4.4.0), each with kafka_workload's short
    share-group workload, when the release tests are collected: run one after the other in
    a thread of their own from the session's start (a workload mostly waits on its broker:
    idle polls, lock timeouts) while the tests before them run. Not the judge's workload:
    what it leaves (open transactions, members kept in their groups, offsets retained for
    a minute) is judged right after it."""
    needed = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    versions = ("4.0", "4.4") if RELEASE_FIXTURE in needed else ()
    workdirs = {version: tmp_path_factory.mktemp(f"kafka-{version}") for version in versions}
    with ExitStack() as stack:
        def start(version: str) -> Workload:
            broker = stack.enter_context(running_broker(RELEASES[version], workdirs[version]))
            workload = run_release_workload(broker)
            stack.callback(workload.close)
            return workload

        pool = ThreadPoolExecutor(1, thread_name_prefix="kafka-releases")
        try:
            yield {version: pool.submit(start, version) for version in versions}
        finally:
            pool.shutdown(wait=True)  # then the workloads' clients close, the brokers stop


@dataclass(frozen=True)
class SimulatedWarehouse:
    """A small simulated cluster's logs (data topics included), what the simulator wrote,
    and the warehouse the whole pipeline made of them."""

    logs: Path
    result: SimulationResult
    warehouse: Path
    end_offsets: Path


@pytest.fixture(scope="session")
def simulated_warehouse(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
                        ) -> SimulatedWarehouse:
    """Two groups on two topics of two partitions, an orphaned share-partition, the data
    topics' segments: the pipeline run with the end offsets now (the simulator's file) and
    through time (the data topics' segments). Tests that change it work on a copy."""
    from sharestate.simulate import SimulationConfig, simulate
    from sharestate.simulate.simulator import END_OFFSETS_FILE
    from sharestate.spark.run import parser, run

    logs = tmp_path_factory.mktemp("simulated-logs")
    result = simulate(SimulationConfig(records=3000, seed=11, groups=2, topics=2, partitions=2,
                                       state_partitions=2, offsets_partitions=1,
                                       batch_records=8, cold_interval_ms=60_000,
                                       orphaned_state=True, data_topics=True), logs)
    warehouse = tmp_path_factory.mktemp("simulated-warehouse")
    common = ["--warehouse", str(warehouse), "--delivery-limit", "5"]
    assert run(parser().parse_args(["--source", str(logs), *common]),
               ("ingest", "decode", "replay")) in (0, 1)
    assert run(parser().parse_args([*common, "--end-offsets", str(logs / END_OFFSETS_FILE),
                                    "--end-offsets-from", str(logs)]),
               ("analytics",)) == 1  # the orphan
    return SimulatedWarehouse(logs, result, warehouse, logs / END_OFFSETS_FILE)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """The judge: one Kafka 4.3.1 broker (KRaft, share groups on) for the whole session."""
    with running_broker(RELEASES["4.3"], tmp_path_factory.mktemp("kafka-4.3")) as broker:
        yield broker


@pytest.fixture(scope="session")
def kafka_workload(kafka_broker: KafkaBroker,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    """The real-client workload, run once on the session's broker."""
    workload = run_workload(kafka_broker)
    try:
        yield workload
    finally:
        workload.close()


@pytest.fixture(scope="session")
def kafka_logs(kafka_workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The internal topics' segment files, copied out of the broker's log.dirs after the
    workload (the broker keeps running)."""
    return kafka_workload.copy_internal_logs(tmp_path_factory.mktemp("kafka-logs"))
