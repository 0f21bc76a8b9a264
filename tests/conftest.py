"""Shared test helpers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from kafka_broker import RELEASES, KafkaBroker, running_broker
from kafka_workload import Workload, run_workload

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE_ENV = "SHARESTATE_CONFORMANCE_DIR"


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


KAFKA_FIXTURES = {"kafka_broker", "kafka_workload", "kafka_logs"}


@pytest.fixture(scope="session", autouse=True)
def kafka_session(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Future[Workload] | None]:
    """The judge: one Kafka 4.3.1 broker (KRaft, share groups on) and the real-client
    workload run once on it, for the whole session. Started with the session, in a thread
    of its own, when a collected test needs them: the workload mostly waits on the broker
    (idle polls, lock timeouts, the prune interval) while the tests before run."""
    if not any(KAFKA_FIXTURES & set(getattr(item, "fixturenames", ()))
               for item in request.session.items):
        yield None
        return
    workdir = tmp_path_factory.mktemp("kafka-4.3")
    with ExitStack() as stack:
        def start() -> Workload:
            broker = stack.enter_context(running_broker(RELEASES["4.3"], workdir))
            workload = run_workload(broker)
            stack.callback(workload.close)
            return workload

        pool = ThreadPoolExecutor(1, thread_name_prefix="kafka-session")
        try:
            yield pool.submit(start)
        finally:
            pool.shutdown(wait=True)  # then the workload's clients close, the broker stops


@pytest.fixture(scope="session")
def kafka_workload(kafka_session: Future[Workload] | None) -> Workload:
    """The session's workload, once it has run on the session's broker."""
    assert kafka_session is not None
    return kafka_session.result()


@pytest.fixture(scope="session")
def kafka_broker(kafka_workload: Workload) -> KafkaBroker:
    """The session's broker (after its workload: what tests add comes after it)."""
    return kafka_workload.broker


@pytest.fixture(scope="session")
def kafka_logs(kafka_workload: Workload, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The internal topics' segment files, copied out of the broker's log.dirs after the
    workload (the broker keeps running)."""
    return kafka_workload.copy_internal_logs(tmp_path_factory.mktemp("kafka-logs"))
