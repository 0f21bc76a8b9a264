"""A real broker with `log.preallocate=true`: every active segment of its log.dirs is a file
of the segment's full size, zeros past the last write, until it rolls. A copy of the running
broker's internal topics reads as Kafka serves them: no findings, and the share groups' and
consumer groups' offsets equal kafka-share-groups' and kafka-consumer-groups' (every command
exited 1 with a bad_length finding per active segment before)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka_broker import RELEASES, running_broker
from kafka_judge import SHARESTATE
from kafka_workload import (
    Workload,
    accept,
    consume,
    create_topics,
    produce,
    share_consumer,
    share_groups_start_earliest,
)

from sharestate import exit_codes

pytestmark = pytest.mark.kafka_broker

GROUP = "sg-prealloc"


@pytest.fixture(scope="module")
def preallocating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workload, Path]]:
    """A short share-group workload on a preallocating broker, and a copy of its internal
    topics taken while it runs."""
    root = tmp_path_factory.mktemp("preallocate")
    overrides = {"log.preallocate": "true", "log.roll.ms": "3600000"}
    with running_broker(RELEASES["4.3"], root / "broker", overrides) as broker:
        workload = Workload(broker)
        create_topics(workload)
        produce(workload)
        share_groups_start_earliest(workload, [GROUP])
        member = share_consumer(workload, GROUP, ["orders", "events"])
        consume(workload, member, GROUP, accept)
        member.close()
        try:
            yield workload, workload.copy_internal_logs(root / "copy")
        finally:
            workload.close()


def _run(*args: str) -> tuple[int, list[dict[str, object]], str]:
    done = subprocess.run([SHARESTATE, *args], capture_output=True, text=True, check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def _zero_tails(logs: Path) -> int:
    """Segments of a preallocated size whose last 4 KiB are zeros (no batch ends so)."""
    tails = 0
    for segment in logs.glob("*/*.log"):
        data = segment.read_bytes()
        tails += len(data) >= 1 << 20 and not any(data[-4096:])
    return tails


def test_a_running_preallocating_brokers_logs_read_without_findings(
        preallocating: tuple[Workload, Path]) -> None:
    _, logs = preallocating
    assert _zero_tails(logs) >= 2, "the broker preallocated its active segments"
    for command in ("decode", "state", "prune", "offsets"):
        status, _, err = _run(command, str(logs))
        assert status == exit_codes.OK, (command, err)


def test_share_state_of_a_preallocating_broker_agrees_with_kafka(
        preallocating: tuple[Workload, Path]) -> None:
    workload, logs = preallocating
    names = {topic_id: name for name, topic_id in workload.topic_ids.items()}
    _, states, _ = _run("state", str(logs), "--group", GROUP)
    ours = {(names[str(row["topic_id"])], row["partition"]): row["start_offset"]
            for row in states}
    kafkas = {(row["TOPIC"], int(row["PARTITION"])): int(row["START-OFFSET"])
              for row in workload.share_groups_describe(GROUP)}
    assert len(kafkas) == 5
    assert ours == kafkas
