"""Shared test helpers."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_workload import Workload, run_release_workload, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharestate.simulate import SimulationResult

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_ENV = "SHARESTATE_CONFORMANCE_DIR"
RELEASE_FIXTURE = "release_run"


_CLIENT_LOG = re.compile(r"%\d\|\d+\.\d+\|[A-Z_]+\|rdkafka#")


def own_lines(err: str) -> list[str]:
    """The lines of a command's captured stderr, less librdkafka's log lines (`%3|<time>|
    FAIL|rdkafka#producer-2| ...`): a Kafka client another test left in this process writes
    them to file descriptor 2 from its own thread, at any time, once its broker is gone; a
    command that connects to no cluster writes none of its own."""
    return [line for line in err.splitlines() if not _CLIENT_LOG.match(line)]


def closed_port() -> int:
    """A loopback port nothing listens on (bound a moment, then let go)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def client_threads() -> int:
    """librdkafka's threads in this process (it names them `rdk:main`, `rdk:broker...`)."""
    count = 0
    for task in Path("/proc/self/task").iterdir():
        with suppress(FileNotFoundError):  # a thread that ended meanwhile
            count += (task / "comm").read_text().startswith("rdk:")
    return count


def xdist_worker(config: pytest.Config) -> str | None:
    """The pytest-xdist worker this process is (gw0, gw1, ...), or None when not one."""
    return getattr(config, "workerinput", {}).get("workerid")


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


XDIST_GROUPS = {
    "kafka-judge": ("test_kafka_broker.py", "test_kafka_judge.py", "test_kafka_lag_history.py",
                    "test_kafka_reader_ranges.py", "test_kafka_releases.py"),
    "simulated-warehouse": ("test_lag_history.py", "test_report.py", "test_sql_prompt.py"),
}
"""The test modules one pytest-xdist worker runs together (`make test` runs `-n 2 --dist
loadfile`, each module's tests in one worker): those that use one of the session's costly
fixtures, which that worker then builds once for them all (test_xdist_groups.py checks)."""
SHARED_FIXTURES = {"kafka_broker": "kafka-judge", "kafka_workload": "kafka-judge",
                   "kafka_logs": "kafka-judge", RELEASE_FIXTURE: "kafka-judge",
                   "simulated_warehouse": "simulated-warehouse"}
"""Each such fixture, and the group of the modules that use it."""


def xdist_group(nodeid: str) -> str:
    """The work unit of a test under `--dist loadfile`: its module's group, else its module."""
    module = nodeid.split("::", 1)[0]
    name = module.rsplit("/", 1)[-1]
    return next((group for group, names in XDIST_GROUPS.items() if name in names), module)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with the modules of an XDIST_GROUPS group as one file. (Not
    `--dist loadgroup` and xdist_group marks: pytest-xdist 3.8 does not see them with
    pytest 9.2, pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleGroupScheduling(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return ModuleGroupScheduling(config, log)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session (`build_session`'s defaults, no UI) for every test that
    needs one; a test that needs other JVM settings starts a JVM of its own (a subprocess)."""
    from sharestate.spark.session import build_session

    session = build_session("sharestate-tests", ui=False)
    yield session
    session.stop()


class ReleaseWorkloads:
    """The release brokers' workloads by version (Futures), begun by `start`, or by the first
    look-up of one."""

    def __init__(self, versions: tuple[str, ...], start: Callable[[str], Workload],
                 pool: ThreadPoolExecutor) -> None:
        self._versions, self._start, self._pool = versions, start, pool
        self._futures: dict[str, Future[Workload]] = {}

    def start(self) -> None:
        if not self._futures:
            self._futures = {version: self._pool.submit(self._start, version)
                             for version in self._versions}

    def __getitem__(self, version: str) -> Future[Workload]:
        self.start()
        return self._futures[version]


@pytest.fixture(scope="session", autouse=True)
def kafka_releases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[ReleaseWorkloads]:
    """The brokers of the release tests collected (4.0.2, 4.1.2, 4.2.2, 4.4.0), each with
    kafka_workload's short share-group workload: run one after the other in a thread of
    their own from the session's start (a workload mostly waits on its broker:
    idle polls, lock timeouts) while the tests before them run. Not the judge's workload:
    what it leaves (open transactions, members kept in their groups, offsets retained for
    a minute) is judged right after it. Under pytest-xdist every worker collects every
    test but only one runs the release tests (they are in the judge's xdist group), so
    there they begin with the judge's broker, in the worker that starts it, or at the
    first release test."""
    collected = (getattr(item, "callspec", None) for item in request.session.items)
    versions = tuple(dict.fromkeys(str(spec.params[RELEASE_FIXTURE]) for spec in collected
                                   if spec is not None and RELEASE_FIXTURE in spec.params))
    workdirs = {version: tmp_path_factory.mktemp(f"kafka-{version}") for version in versions}
    with ExitStack() as stack:
        def start(version: str) -> Workload:
            broker = stack.enter_context(running_broker(RELEASES[version], workdirs[version]))
            workload = run_release_workload(broker)
            stack.callback(workload.close)
            return workload

        pool = ThreadPoolExecutor(1, thread_name_prefix="kafka-releases")
        try:
            workloads = ReleaseWorkloads(versions, start, pool)
            if not xdist_worker(request.config):
                workloads.start()
            yield workloads
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
def kafka_broker(tmp_path_factory: pytest.TempPathFactory, kafka_releases: ReleaseWorkloads
                 ) -> Iterator[KafkaBroker]:
    """The judge: one Kafka 4.3.1 broker (KRaft, share groups on) for the whole session
    (the release brokers' workloads begin with it, if they have not yet)."""
    kafka_releases.start()
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
