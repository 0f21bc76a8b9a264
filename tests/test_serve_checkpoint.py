"""`sharestate serve --checkpoint-dir`: a restart resumes from its checkpoint and answers what
an uninterrupted run answers, field by field — after a clean stop, and after `kill -9` of a
real `sharestate serve` process while records still arrive. A damaged checkpoint is set
aside with a warning (the service replays from the log start); one written for other
settings or another cluster is refused in one line (exit 2).

The cluster is librdkafka's mock cluster in this process; its records are a simulated
workload's `__share_group_state` and `__consumer_offsets` records, partition by partition.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_support import (
    ENDPOINTS,
    Cluster,
    ServeProcess,
    eventually,
    get,
    mock_cluster,
    simulated,
)

from sharestate.app.cli import main
from sharestate.app.serve.checkpoint import FILE, MAGIC
from sharestate.app.serve.partition import ReplayOptions
from sharestate.app.serve.service import CheckpointOptions, Service, start
from sharestate.cluster import parse_options
from sharestate.log import RawRecord

Records = dict[tuple[str, int], list[RawRecord]]
NEVER = CheckpointOptions(Path(), records=10**9, seconds=10**6)
"""Checkpoint settings under which only `close()` writes one."""


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory) -> Records:
    return simulated(tmp_path_factory.mktemp("simulated"), 8000, seed=7)


def serve(cluster: Cluster, checkpoints: CheckpointOptions | None = None,
          semantics: str = "kafka") -> Service:
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "10000"})
    return start(options, ("127.0.0.1", 0), ReplayOptions(semantics=semantics),
                 retention_minutes=10080, version="test", checkpoints=checkpoints)


def checkpointed(cluster: Cluster, checkpoints: CheckpointOptions) -> None:
    """Serve until ready, then stop (which writes a checkpoint)."""
    service = serve(cluster, checkpoints)
    try:
        eventually(lambda: get(service.address, "/readyz")[0] == 200)
    finally:
        service.close()


def produce(cluster: Cluster, records: Records, part: slice) -> None:
    for (topic, partition), written in records.items():
        cluster.produce(topic, written[part], partition)


def header(directory: Path) -> dict[str, Any]:
    data = (directory / FILE).read_bytes()
    assert data.startswith(MAGIC)
    found: dict[str, Any] = json.loads(data[len(MAGIC):data.index(b"\n", len(MAGIC))])
    return found


def applied(address: tuple[str, int]) -> dict[str, float]:
    """Records applied per internal-topic partition, from /metrics."""
    families = text_string_to_metric_families(get(address, "/metrics")[1])
    return {f"{s.labels['state_topic']}-{s.labels['state_partition']}": s.value
            for f in families if f.name == "sharestate_serve_records_applied"
            for s in f.samples if s.name.endswith("_total")}


def totals(records: Records) -> dict[str, float]:
    return {f"{topic}-{partition}": len(written) for (topic, partition), written in
            records.items()}


UNEQUAL = ("sharestate_serve_checkpoint", "sharestate_serve_records_behind",
           "sharestate_serve_last_fetch", "sharestate_serve_records_lag")
"""Metrics two services over the same records need not share: their checkpoints, how far
behind the end each saw at its start, and what their consumers last heard and when."""


def answers(address: tuple[str, int]) -> dict[str, Any]:
    """Every JSON answer and every state metric sample (but `UNEQUAL`)."""
    found: dict[str, Any] = {path: get(address, path)[1] for path in ENDPOINTS}
    found["/metrics"] = sorted(
        (s.name, sorted(s.labels.items()), s.value)
        for f in text_string_to_metric_families(get(address, "/metrics")[1])
        if not f.name.startswith(UNEQUAL)
        for s in f.samples)
    return found


def caught_up(address: tuple[str, int], records: Records) -> bool:
    counts = applied(address)
    return all(counts.get(name) == total for name, total in totals(records).items())


def test_a_restart_resumes_from_the_checkpoint_and_answers_as_one_uninterrupted_run(
        workload: Records, tmp_path: Path) -> None:
    cluster = mock_cluster()
    produce(cluster, workload, slice(0, 2000))
    checkpoints = CheckpointOptions(tmp_path / "checkpoints", NEVER.records, NEVER.seconds)
    first = serve(cluster, checkpoints)
    eventually(lambda: get(first.address, "/readyz")[0] == 200)
    first.close()  # a clean stop writes the last checkpoint
    written = header(checkpoints.directory)
    assert {name: at for name, at in written["positions"].items() if at} == {
        name: min(total, 2000) for name, total in totals(workload).items()}
    produce(cluster, workload, slice(2000, None))
    resumed = serve(cluster, checkpoints)
    uninterrupted = serve(cluster)
    try:
        assert {f"{t}-{p}": at for (t, p), at in resumed.tailer.starts.items()} == written[
            "positions"]
        for service in (resumed, uninterrupted):
            eventually(lambda s=service: caught_up(s.address, workload))  # type: ignore[misc]
        expected = answers(uninterrupted.address)
        assert expected["/v1/share-partitions"] and expected["/v1/consumer-group-offsets"]
        assert answers(resumed.address) == expected
    finally:
        resumed.close()
        uninterrupted.close()


@pytest.fixture()
def processes() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for process in started:
        process.kill()


def test_kill_9_mid_stream_then_restart_answers_as_the_uninterrupted_run_field_by_field(
        workload: Records, tmp_path: Path, processes: list[ServeProcess]) -> None:
    cluster = mock_cluster()
    rounds = 50
    step = -(-max(map(len, workload.values())) // rounds)
    produce(cluster, workload, slice(0, step))  # the partitions exist when serving starts
    uninterrupted = serve(cluster)
    directory = tmp_path / "checkpoints"
    arguments = ("--source", f"kafka://{cluster.bootstrap}", "--checkpoint-dir",
                 str(directory), "--checkpoint-records", "500", "--checkpoint-seconds", "0.2")
    processes.append(ServeProcess(*arguments))
    killed = processes[0]
    produced = threading.Event()

    def stream() -> None:  # the rest of the workload in rounds, a tenth of a second apart
        for round_ in range(1, rounds):
            produce(cluster, workload, slice(round_ * step, (round_ + 1) * step))
            time.sleep(0.1)
        produced.set()

    producer = threading.Thread(target=stream)
    producer.start()
    try:
        eventually(lambda: (directory / FILE).exists()
                   and header(directory)["records_applied"] >= 2000)
        assert not produced.is_set(), "the stream ended before the kill: make it longer"
        assert killed.stop(signal.SIGKILL) == -signal.SIGKILL
        at_kill = header(directory)
        processes.append(ServeProcess(*arguments))
        restarted = processes[1]
    finally:
        producer.join()
    assert restarted.address is not None
    assert "resuming from checkpoint" in restarted.stderr
    final = totals(workload)
    assert 0 < sum(at_kill["positions"].values()) < sum(final.values())
    try:
        for address in (restarted.address, uninterrupted.address):
            eventually(lambda a=address: caught_up(a, workload), timeout=60)  # type: ignore[misc]
        eventually(lambda: get(restarted.address, "/readyz")[0] == 200)
        expected = answers(uninterrupted.address)
        assert expected["/v1/share-partitions"] and expected["/v1/redelivery"]
        assert answers(restarted.address) == expected
    finally:
        uninterrupted.close()
    assert restarted.stop(signal.SIGTERM) == 0
    assert header(directory)["positions"] == {
        name: int(final.get(name, 0)) for name in at_kill["positions"]}


def test_a_damaged_checkpoint_is_set_aside_with_a_warning_and_the_log_replayed(
        workload: Records, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    cluster = mock_cluster()
    produce(cluster, workload, slice(0, 1500))
    checkpoints = CheckpointOptions(tmp_path / "checkpoints", NEVER.records, NEVER.seconds)
    checkpointed(cluster, checkpoints)
    path = checkpoints.directory / FILE
    good = path.read_bytes()
    assert header(checkpoints.directory)["records_applied"] > 0
    reference = serve(cluster)
    eventually(lambda: get(reference.address, "/readyz")[0] == 200)
    expected = answers(reference.address)
    reference.close()
    damages = {"truncated": good[:len(good) // 2], "bytes flipped": good[:-9] + b"x" * 9,
               "not a checkpoint": b"PK\x03\x04 something else", "empty": b""}
    for name, damaged in damages.items():
        caplog.clear()
        path.write_bytes(damaged)
        (checkpoints.directory / f".{FILE}.4242.tmp").write_bytes(good[:100])  # a cut write
        service = serve(cluster, checkpoints)
        try:
            eventually(lambda s=service: get(s.address, "/readyz")[0] == 200)  # type: ignore[misc]
            assert service.tailer.starts == {}, name
            assert answers(service.address) == expected, name
        finally:
            service.close()
        warnings = [r.getMessage() for r in caplog.records if r.name == "sharestate.serve"
                    and r.levelno == logging.WARNING]
        assert len(warnings) == 1, (name, warnings)
        assert warnings[0].startswith(f"checkpoint {path} is damaged: "), warnings
        assert warnings[0].endswith(f"kept as {path}.bad: replaying from the log start")
        assert (checkpoints.directory / f"{FILE}.bad").read_bytes() == damaged
        assert not (checkpoints.directory / f".{FILE}.4242.tmp").exists()
        assert header(checkpoints.directory)["positions"] == json.loads(
            good[len(MAGIC):good.index(b"\n", len(MAGIC))])["positions"]


def test_a_checkpoint_of_another_core_is_not_resumed_from(
        workload: Records, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    cluster = mock_cluster()
    produce(cluster, workload, slice(0, 500))
    checkpoints = CheckpointOptions(tmp_path / "checkpoints", NEVER.records, NEVER.seconds)
    checkpointed(cluster, checkpoints)
    path = checkpoints.directory / FILE
    data = path.read_bytes()
    end = data.index(b"\n", len(MAGIC))
    written = json.loads(data[len(MAGIC):end])
    assert written["records_applied"] > 0
    path.write_bytes(MAGIC + json.dumps(written | {"core": "0" * 64}).encode() + data[end:])
    service = serve(cluster, checkpoints)
    try:
        assert service.tailer.starts == {}
    finally:
        service.close()
    assert [r.getMessage() for r in caplog.records if r.name == "sharestate.serve"] == [
        f"checkpoint {path} was written by another version of sharestate's core (sharestate "
        f"test); its state may differ from what this one computes: replaying from the log "
        f"start"]


def test_a_checkpoint_for_other_settings_or_a_busy_directory_is_refused_in_one_line(
        workload: Records, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = mock_cluster()
    produce(cluster, workload, slice(0, 300))
    directory = tmp_path / "checkpoints"
    checkpointed(cluster, CheckpointOptions(directory, NEVER.records, NEVER.seconds))
    base = ["serve", "--source", f"kafka://{cluster.bootstrap}", "--listen", "127.0.0.1:0",
            "--checkpoint-dir", str(directory)]
    other = mock_cluster()
    cases = {
        "semantics 'kafka', not 'transactional-acks'": [*base, "--semantics",
                                                        "transactional-acks"],
        "dialect 'auto', not '4.1'": [*base, "--dialect", "4.1"],
        "snapshot_update_records 500, not 7": [*base, "--snapshot-update-records", "7"],
        "cluster_id ": ["serve", "--source", f"kafka://{other.bootstrap}", "--listen",
                        "127.0.0.1:0", "--checkpoint-dir", str(directory)],
    }
    for said, argv in cases.items():
        capsys.readouterr()
        assert main(argv) == 2, said
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"sharestate: error: checkpoint {directory / FILE} was "
                                  f"written for {said}"), err
        assert not [line for line in err if "Traceback" in line]
    holder = serve(cluster, CheckpointOptions(directory, NEVER.records, NEVER.seconds))
    try:
        assert main(base) == 2
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"sharestate: error: checkpoint directory {directory} is in use by another "
            f"sharestate serve (pid {os.getpid()})")
    finally:
        holder.close()
    assert main(["serve", "--source", "kafka://127.0.0.1:1", "--checkpoint-seconds", "5"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sharestate: error: --checkpoint-seconds needs --checkpoint-dir")
