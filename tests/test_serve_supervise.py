"""A `sharestate serve` whose replay or cluster reader fails stops (exit 5, one line on
stderr naming what failed and why) instead of answering 503 forever, and writes no
checkpoint of the failed state: a restart resumes from the last good one.

The failures are real: a chunk whose values are not bytes fed to a running partition's
replay (its thread raises in the record decoder), and, for the whole command in a process
of its own, a checkpoint whose state the replay cannot go on from once records arrive. The
services run on librdkafka's mock cluster; `supervise` is the command's own loop.
"""

from __future__ import annotations

import re
import signal
import threading
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from serve_support import ServeProcess, eventually, fixture_records, get, mock_cluster, offline

from sharestate import __version__, exit_codes
from sharestate.app.serve.checkpoint import FILE, CheckpointStore, Settings, encode_body
from sharestate.app.serve.command import supervise
from sharestate.app.serve.live_log import Consumed, ReplayOptions
from sharestate.app.serve.service import CheckpointOptions, Service, start
from sharestate.cluster import parse_options
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import RawRecord
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC

Records = dict[str, list[RawRecord]]


@pytest.fixture(scope="module")
def records() -> Records:
    return {SHARE_STATE_TOPIC: fixture_records("share_codec_none.log"),
            CONSUMER_OFFSETS_TOPIC: fixture_records("consumer_offsets_records.log")}


def serve(bootstrap: str, directory: Path) -> Service:
    options = parse_options({"bootstrap.servers": bootstrap, "timeoutMs": "10000"})
    return start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                 version="test", checkpoints=CheckpointOptions(directory, 10**9, 10**6))


def applied(service: Service, topic: str) -> int:
    return service.state.replays[(topic, 0)].progress.records


def test_a_failed_replay_stops_the_service_without_a_checkpoint_and_a_restart_resumes(
        records: Records, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = mock_cluster()
    half = {topic: written[:len(written) // 2] for topic, written in records.items()}
    for topic, written in half.items():
        cluster.produce(topic, written)
    directory = tmp_path / "checkpoints"
    service = serve(cluster.bootstrap, directory)
    try:
        eventually(lambda: get(service.address, "/readyz")[0] == 200)
        assert service.checkpointer is not None
        service.checkpointer.write()
        good = (directory / FILE).read_bytes()
        rest = records[SHARE_STATE_TOPIC][len(half[SHARE_STATE_TOPIC]):]
        cluster.produce(SHARE_STATE_TOPIC, rest)
        eventually(lambda: applied(service, SHARE_STATE_TOPIC)
                   == len(records[SHARE_STATE_TOPIC]))
        replay = service.state.replays[(SHARE_STATE_TOPIC, 0)]
        end = replay.progress.position
        not_bytes: list[bytes | None] = ["not bytes"]  # type: ignore[list-item]
        replay.feed(Consumed([end], [0], ["CreateTime"], [b"\x00\x00key"], not_bytes))
        eventually(lambda: get(service.address, "/healthz")[0] == 503)
        reason = get(service.address, "/healthz")[1]["reason"]
        assert reason.startswith(f"replay of {SHARE_STATE_TOPIC}-0 failed: TypeError(")
        service.checkpointer.write()  # the periodic writer's turn: it writes nothing
        capsys.readouterr()
        assert supervise(service, threading.Event()) == exit_codes.SERVE_FAILED == 5
    except BaseException:
        service.close(checkpoint=False)
        raise
    assert capsys.readouterr().err.splitlines() == [
        f"sharestate serve: stopping: {reason}; no checkpoint written (a restart resumes "
        f"from the last one)"]
    assert (directory / FILE).read_bytes() == good
    resumed = serve(cluster.bootstrap, directory)
    stop = threading.Event()
    try:
        expected = offline(tmp_path, "state", records)
        eventually(lambda: get(resumed.address, "/v1/share-partitions")[1] == expected)
        assert get(resumed.address, "/v1/consumer-group-offsets")[1] == offline(
            tmp_path, "offsets", half)
        assert get(resumed.address, "/healthz") == (200, {"status": "up"})
    finally:
        stop.set()
        assert supervise(resumed, stop) == exit_codes.OK
    assert (directory / FILE).read_bytes() != good  # a clean stop writes a last checkpoint



def test_the_command_exits_5_when_a_replay_fails_and_leaves_its_checkpoint(
        records: Records, tmp_path: Path) -> None:
    """A checkpoint whose share-partitions have no start offset (written by a buggy release
    with the same core fingerprint, say: its tables are of their schemas, but no shard holds
    such a state): the resumed replay fails at the first update that keeps the start
    offset."""
    cluster = mock_cluster()
    share = records[SHARE_STATE_TOPIC]
    cluster.produce(SHARE_STATE_TOPIC, share[:len(share) // 2])
    cluster.produce(CONSUMER_OFFSETS_TOPIC, records[CONSUMER_OFFSETS_TOPIC])
    directory = tmp_path / "checkpoints"
    args = ("--source", f"kafka://{cluster.bootstrap}", "--checkpoint-dir", str(directory))
    first = ServeProcess(*args)
    try:
        eventually(lambda: get(first.address or ("", 0), "/readyz")[0] == 200)
        assert first.stop(signal.SIGTERM) == exit_codes.OK
    finally:
        first.kill()
    store = CheckpointStore(directory, Settings(
        str(cluster.holder.list_topics(timeout=10).cluster_id), KAFKA, None,
        DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT))
    loaded = store.load()
    assert loaded is not None
    saved = loaded.partitions[(SHARE_STATE_TOPIC, 0)]
    assert saved.snapshot is not None
    keys = saved.snapshot.tables["share_keys"]
    assert keys.num_rows
    saved.snapshot = replace(saved.snapshot, tables={**saved.snapshot.tables, "share_keys": (
        keys.set_column(keys.schema.get_field_index("start_offset"), "start_offset",
                        pa.nulls(keys.num_rows, pa.int64())))})
    store.save(encode_body(loaded.partitions), {w: p.progress.position for w, p in
                                                loaded.partitions.items()},
               sum(p.progress.records for p in loaded.partitions.values()), __version__)
    damaged = (directory / FILE).read_bytes()
    cluster.produce(SHARE_STATE_TOPIC, share[len(share) // 2:])
    second = ServeProcess(*args)
    try:
        assert second.process.wait(30) == exit_codes.SERVE_FAILED
        second.reader.join(10)
    finally:
        second.kill()
    stopping = [line for line in second.lines if line.startswith("sharestate serve: stopping")]
    assert len(stopping) == 1 and re.fullmatch(
        rf"sharestate serve: stopping: replay of {SHARE_STATE_TOPIC}-0 failed: "
        r"TypeError\(.*NoneType.*\); no checkpoint written \(a restart resumes from the "
        r"last one\)\n", stopping[0]), second.stderr
    assert (directory / FILE).read_bytes() == damaged
