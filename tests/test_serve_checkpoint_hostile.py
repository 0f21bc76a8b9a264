"""Hostile `serve` checkpoints: files crafted to run code or to stall, crash or exhaust the
service at start. Each one — a pickle that would call a global (what checkpoints were before
they became Arrow data), a body of other tables or of state no replay can go on from, also
behind a valid header and a recomputed checksum — stays inert: nothing runs, no file is
touched, the service logs one warning and replays from the log, answering what a service
without a checkpoint answers.

The cluster is librdkafka's mock cluster in this process (a simulated workload's records).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import resource
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
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

from sharestate.app.serve.checkpoint import (
    BODY,
    FILE,
    MAGIC,
    CheckpointStore,
    Settings,
    encode_body,
)
from sharestate.app.serve.partition import PartitionCheckpoint, Progress, ReplayOptions
from sharestate.app.serve.service import CheckpointOptions, Service, start
from sharestate.cluster import parse_options
from sharestate.log import discover
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.replay.group_log import GroupReplay
from sharestate.replay.logs import partition_logs
from sharestate.replay.rows import offset_rows, state_rows
from sharestate.replay.share_log import ShareReplay
from sharestate.replay.snapshot import Snapshot, decode, encode

FIXTURES = Path(os.environ.get("SHARESTATE_CONFORMANCE_DIR",
                               Path(__file__).parents[1].parent / "shared" / "fixtures"))
NEVER = dict(records=10**9, seconds=10**6)


@dataclass
class Served:
    """A mock cluster with a few hundred records, a good checkpoint of it, and what a
    service without a checkpoint answers."""

    cluster: Cluster
    good: bytes
    expected: dict[str, Any]


def serve(cluster: Cluster, directory: Path | None = None) -> Service:
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "10000"})
    return start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                 version="test", checkpoints=None if directory is None
                 else CheckpointOptions(directory, **NEVER))  # type: ignore[arg-type]


UNEQUAL = ("sharestate_serve_checkpoint", "sharestate_serve_records_behind",
           "sharestate_serve_last_fetch", "sharestate_serve_records_lag")
"""Metrics two services over the same records need not share: their checkpoints, how far
behind the end each saw at its start, and what their consumers last heard and when."""


def answers(address: tuple[str, int]) -> dict[str, Any]:
    found: dict[str, Any] = {path: get(address, path)[1] for path in ENDPOINTS}
    found["/metrics"] = sorted(
        (s.name, sorted(s.labels.items()), s.value)
        for f in text_string_to_metric_families(get(address, "/metrics")[1])
        if not f.name.startswith(UNEQUAL)
        for s in f.samples)
    return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Served:
    records = simulated(tmp_path_factory.mktemp("simulated"), 1500, seed=11)
    cluster = mock_cluster()
    for (topic, partition), written in records.items():
        cluster.produce(topic, written[:300], partition)
    directory = tmp_path_factory.mktemp("good")
    service = serve(cluster, directory)
    try:
        eventually(lambda: get(service.address, "/readyz")[0] == 200)
        expected = answers(service.address)
    finally:
        service.close()
    assert expected["/v1/share-partitions"] and expected["/v1/consumer-group-offsets"]
    return Served(cluster, (directory / FILE).read_bytes(), expected)


def with_body(good: bytes, body: bytes) -> bytes:
    """`good`'s header over `body`, its length and checksum recomputed: only the body's
    content tells it is not a checkpoint of the service's."""
    end = good.index(b"\n", len(MAGIC))
    header = json.loads(good[len(MAGIC):end]) | {
        "body_bytes": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
    return MAGIC + json.dumps(header).encode() + b"\n" + body


def calling(module: str, name: str, *args: object) -> bytes:
    """A pickle (protocol 4, which resolves dotted names) that calls `module`'s `name`
    with `args`."""
    return (b"\x80\x04c" + f"{module}\n{name}\n".encode()
            + pickle.dumps(args, protocol=2)[2:-1] + b"R.")


def replayed_with_one_warning(served: Served, tmp_path: Path, data: bytes | Callable[[Path], None],
                              caplog: pytest.LogCaptureFixture) -> str:
    """Start on a checkpoint holding `data` (or made by it): the service must start at once
    (within 30 s: it never waits on the file), replay from the log start, answer as without
    a checkpoint and log exactly one warning (returned)."""
    directory = tmp_path / "checkpoints"
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(mode=0o700)
    if isinstance(data, bytes):
        (directory / FILE).write_bytes(data)
    else:
        data(directory / FILE)
    caplog.clear()
    started: list[Service] = []
    starting = threading.Thread(target=lambda: started.append(serve(served.cluster, directory)),
                                daemon=True)
    starting.start()
    starting.join(30)
    if starting.is_alive() and stat.S_ISFIFO((directory / FILE).lstat().st_mode):
        os.close(os.open(directory / FILE, os.O_WRONLY))  # what waited on the FIFO goes on
    assert not starting.is_alive(), "the start waited on the checkpoint file"
    service, = started
    try:
        assert service.tailer.starts == {}
        eventually(lambda: get(service.address, "/readyz")[0] == 200)
        assert answers(service.address) == served.expected
    finally:
        service.close(checkpoint=False)
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "sharestate.serve" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].endswith("replaying from the log start"), warnings
    return warnings[0]


@pytest.fixture()
def victim(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "victim"
    path.write_text("kept")
    yield path
    assert path.read_text() == "kept"


def test_a_crafted_checkpoint_runs_nothing_and_touches_no_file(
        served: Served, tmp_path: Path, victim: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    ran = tmp_path / "ran"
    touch = ["/bin/sh", "-c", f"echo ran > {ran}"]
    crafted = {
        "a process, through a sharestate module": calling("sharestate.jars",
                                                          "subprocess.Popen", touch),
        "a file truncated, through a serve module": calling(
            "sharestate.app.serve.checkpoint", "io.FileIO", str(victim), "w"),
        "a shell command, through os": calling("sharestate.app.serve.checkpoint",
                                               "os.system", f"echo ran > {ran}"),
        "a process, directly": calling("subprocess", "Popen", touch),
        "a sharestate function that opens files": calling(
            "sharestate.app.serve.checkpoint", "_private", str(victim),
            os.O_WRONLY | os.O_TRUNC),
        "a sharestate class that is no state": calling(
            "sharestate.app.serve.checkpoint", "CheckpointStore", str(victim), None),
        "a builtin": calling("builtins", "eval", f"open({str(victim)!r}, 'w')"),
    }
    for name, body in crafted.items():
        warning = replayed_with_one_warning(served, tmp_path, with_body(served.good, body),
                                            caplog)
        assert not ran.exists(), name
        assert victim.read_text() == "kept", name
        assert ": its body does not load (not an Arrow IPC stream" in warning, (name,
                                                                                 warning)


def _rows(good: bytes) -> list[dict[str, Any]]:
    """The partition rows of a good checkpoint's body."""
    body = good[good.index(b"\n", len(MAGIC)) + 1:]
    rows: list[dict[str, Any]] = pa.ipc.open_stream(pa.py_buffer(body)).read_all().to_pylist()
    return rows


def _body(rows: list[dict[str, Any]], schema: pa.Schema = BODY) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(pa.Table.from_pylist(rows, schema=schema))
    return bytes(sink.getvalue().to_pybytes())


def _with_share_replay(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`row` with its snapshot's `share_replay` row changed."""
    (taken,) = decode(row["snapshot"])
    tables = dict(taken.tables)
    tables["share_replay"] = pa.Table.from_pylist(
        [tables["share_replay"].to_pylist()[0] | changes], schema=tables["share_replay"].schema)
    return row | {"snapshot": encode([Snapshot(taken.topic, taken.partition, tables)])}


def test_a_checkpoint_that_is_no_file_or_a_crafted_header_or_state_is_one_warning(
        served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    body = served.good[served.good.index(b"\n", len(MAGIC)) + 1:]
    rows = _rows(served.good)
    share = next(i for i, row in enumerate(rows)
                 if row["topic"] == SHARE_STATE_TOPIC and row["snapshot"] is not None)
    other = next(row for row in rows if row["topic"] != SHARE_STATE_TOPIC
                 and row["snapshot"] is not None)

    def replaced(index: int, row: dict[str, Any]) -> bytes:
        return with_body(served.good, _body([*rows[:index], row, *rows[index + 1:]]))

    cases: list[tuple[str, bytes | Callable[[Path], None]]] = [
        ("is damaged: its header nests deeper than 8 levels",
         MAGIC + b"[" * 100_000 + b"]" * 100_000 + b"\n" + body),
        ("is damaged: its header line does not end within 1048576 bytes",
         MAGIC + b'{"format": 1, "x": "' + b"x" * (2 << 20) + b'"}\n' + body),
        ("is damaged: it is not a regular file (a FIFO)", os.mkfifo),
        ("is damaged: it is not a regular file (a directory)", Path.mkdir),
        ("(not a checkpoint's partitions)", with_body(served.good, _body(
            [{"topic": row["topic"]} for row in rows], pa.schema([("topic", pa.string())])))),
        ("(('x', 0) is not a partition's checkpoint)", replaced(0, rows[0] | {"topic": "x"})),
        ("is not a partition's checkpoint)", replaced(1, rows[0])),
        ("is not a partition's checkpoint)", replaced(share, rows[share] | {"dialect": "9.9"})),
        ("holds the snapshot of another partition)", replaced(share, rows[share] | {
            "snapshot": other["snapshot"]})),
        ("no share replay rules for dialect '9.9'", replaced(share, _with_share_replay(
            rows[share], dialect="9.9"))),
        ("(not an Arrow IPC stream", replaced(share, rows[share] | {"snapshot": b"garbage"})),
    ]
    for said, data in cases:
        warning = replayed_with_one_warning(served, tmp_path, data, caplog)
        assert said in warning, (said, warning)


def test_a_checkpoint_linked_to_an_endless_device_is_not_read(
        served: Served, tmp_path: Path) -> None:
    """`sharestate serve` itself, under a 2 GiB address space (were it read, /dev/zero
    would fill it)."""
    directory = tmp_path / "checkpoints"
    directory.mkdir(mode=0o700)
    (directory / FILE).symlink_to("/dev/zero")
    service = ServeProcess("--source", f"kafka://{served.cluster.bootstrap}",
                           "--checkpoint-dir", str(directory),
                           limits={resource.RLIMIT_AS: 2 << 30})
    try:
        assert service.address is not None
        eventually(lambda: get(service.address, "/readyz")[0] == 200)  # type: ignore[arg-type]
        assert answers(service.address) == served.expected
    finally:
        assert service.stop(signal.SIGTERM) == 0
    said = [line for line in service.lines if str(directory / FILE) in line]
    assert len(said) == 1 and said[0].rstrip().endswith(
        f"checkpoint {directory / FILE} is damaged: it is not a regular file (a character "
        f"device); kept as "
        f"{directory / FILE}.bad: replaying from the log start"), service.stderr
    assert "Traceback" not in service.stderr
    assert (directory / f"{FILE}.bad").is_symlink()


def test_every_replay_of_kafkas_logs_loads_back(tmp_path: Path) -> None:
    """Checkpoints hold the snapshot of every replay of Kafka's own logs (both dialects,
    both semantics, every group type): each loads back and answers as the replay did."""
    logs, _ = partition_logs(discover(sorted(  # the large replays hold nothing else
        str(path) for path in FIXTURES.glob("kafka-*/*.log") if "large" not in path.name)))
    assert len(logs) > 10
    partitions: dict[tuple[str, int], PartitionCheckpoint] = {}
    replays: dict[tuple[str, int], ShareReplay | GroupReplay] = {}
    for index, log in enumerate(logs):
        made: list[ShareReplay | GroupReplay] = (
            [ShareReplay.of_log(log, semantics=s) for s in ("kafka", "transactional-acks")]
            if log.topic == SHARE_STATE_TOPIC else [GroupReplay.of_log(log)])
        for replay in made:
            where = (log.topic, len(partitions))
            replay.result.partition = where[1]  # a checkpoint's partitions are numbered
            for item in log.items():
                replay.apply(item)
            replays[where] = replay
            partitions[where] = PartitionCheckpoint(Progress(index), log.dialects[0],
                                                    replay.snapshot())
    store = CheckpointStore(tmp_path, Settings("cluster", "kafka", None, 500))
    store.save(encode_body(partitions), {}, 0, "test")
    loaded = store.load()
    assert loaded is not None and loaded.partitions.keys() == partitions.keys()
    for where, replay in replays.items():
        saved = loaded.partitions[where].snapshot
        assert saved is not None
        if isinstance(replay, ShareReplay):
            share = ShareReplay.restore(saved).result
            assert state_rows(share) == state_rows(replay.result)
            assert share.findings == replay.result.findings
        else:
            group = GroupReplay.restore(saved).result
            assert offset_rows(group.coordinator, 10080, pending=True) == offset_rows(
                replay.result.coordinator, 10080, pending=True)
            assert group.findings == replay.result.findings
