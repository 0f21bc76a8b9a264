"""A `sharestate serve` whose replay or cluster reader fails stops (exit 5, one line on
stderr naming what failed and why) instead of answering 503 forever, and writes no
checkpoint of the failed state: a restart resumes from the last good one.

The failures are real: a checkpoint whose state the replay cannot go on from once records
arrive, resumed by a service in this process and by the whole command in a process of its
own. The services run on librdkafka's mock cluster; `supervise` is the command's own
loop.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from serve_support import (
    Cluster,
    ServeProcess,
    eventually,
    fixture_records,
    get,
    mock_cluster,
)

from sharestate import __version__, exit_codes
from sharestate.app.serve.checkpoint import FILE, CheckpointStore, Settings, encode_body
from sharestate.app.serve.command import supervise
from sharestate.app.serve.partition import ReplayOptions
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


def serve(bootstrap: str, directory: Path, seconds: float = 10**6) -> Service:
    options = parse_options({"bootstrap.servers": bootstrap, "timeoutMs": "10000"})
    return start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                 version="test", checkpoints=CheckpointOptions(directory, 10**9, seconds))


def damage(cluster: Cluster, directory: Path) -> bytes:
    """Rewrite the checkpoint in `directory` with share-partitions that have no start
    offset (written by a buggy release with the same core fingerprint, say: its tables are
    of their schemas, but no shard holds such a state): a replay resumed from it fails at
    the first update that keeps the start offset. Its bytes."""
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
    store.close()
    return (directory / FILE).read_bytes()


def test_a_failed_replay_stops_the_service_without_a_checkpoint(
        records: Records, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The replay fails in the writer: /healthz says why, the checkpoints due (every 50 ms
    while records are read) write nothing of the failed state, and `supervise` stops with
    one line and exit 5, writing no last checkpoint."""
    cluster = mock_cluster()
    share = records[SHARE_STATE_TOPIC]
    cluster.produce(SHARE_STATE_TOPIC, share[:len(share) // 2])
    cluster.produce(CONSUMER_OFFSETS_TOPIC, records[CONSUMER_OFFSETS_TOPIC])
    directory = tmp_path / "checkpoints"
    first = serve(cluster.bootstrap, directory)
    try:
        eventually(lambda: get(first.address, "/readyz")[0] == 200)
    finally:
        first.close()  # a last checkpoint
    damaged = damage(cluster, directory)
    cluster.produce(SHARE_STATE_TOPIC, share[len(share) // 2:])
    service = serve(cluster.bootstrap, directory, seconds=0.05)
    try:
        eventually(lambda: get(service.address, "/healthz")[0] == 503)
        reason = get(service.address, "/healthz")[1]["reason"]
        assert reason.startswith(f"replay of {SHARE_STATE_TOPIC}-0 failed: TypeError(")
        assert get(service.address, "/readyz")[0] == 503  # the failed replay is not at its end
        time.sleep(0.5)  # ten checkpoints' time
        assert (directory / FILE).read_bytes() == damaged
        capsys.readouterr()
        assert supervise(service, threading.Event()) == exit_codes.SERVE_FAILED == 5
    except BaseException:
        service.close(checkpoint=False)
        raise
    assert capsys.readouterr().err.splitlines() == [
        f"sharestate serve: stopping: {reason}; no checkpoint written (a restart resumes "
        f"from the last one)"]
    assert (directory / FILE).read_bytes() == damaged


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
    damaged = damage(cluster, directory)
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
