"""Checkpoints of `sharestate serve`: every partition's replay state and consumed position in
one file, `<dir>/serve.checkpoint`, so a restart (also after `kill -9`) resumes from it.

The file is three parts: a magic line naming the format version, one JSON header line (what
wrote it: the cluster, the replay settings, the core's fingerprint, when, the positions, the
body's length and SHA-256) and the body, an Arrow IPC stream of `BODY` rows: each
partition's progress and dialect, its replay's snapshot in the core's serialised form
(`sharestate.replay.snapshot.encode`: versioned Arrow tables, docs/replay-state.md) and the
findings it counted past those it lists. It
is written to a temporary file in the same directory, fsync'ed, renamed over the previous
one and the directory fsync'ed, so a crash at any moment leaves the previous checkpoint or
the new one, never a mix. One service at a time uses a directory (an OS lock on
`<dir>/lock`, released however the holder ends).

Loading decides what a checkpoint is worth:
- written for another cluster or with other `--semantics`, `--dialect` or
  `--snapshot-update-records`: refused (`CheckpointRefused`: exit 2, one line) — the
  operator pointed the service at the wrong directory;
- of another checkpoint format, or holding snapshots of another format version or made by
  another version of the core (its fingerprint: the sources that decode and replay
  records, C ones included), unreadable, truncated or not matching its checksum: not used
  (`CheckpointUnusable`: a warning, and the service replays from the log start, which gives
  the same answers, only later); a damaged file is kept aside as `serve.checkpoint.bad`.

The body is data only (Arrow tables of documented schemas, each snapshot restored once as
it loads), but the directory should still be the service's alone (it is created 0700).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from sharestate.app.serve.partition import PartitionCheckpoint, Progress
from sharestate.log.discovery import INTERNAL_TOPICS
from sharestate.log.files import NotRegularFile, read_regular
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect_names
from sharestate.replay.group_log import GroupReplay
from sharestate.replay.share_log import ShareReplay
from sharestate.replay.snapshot import SnapshotMismatch, decode, encode, fingerprint

FILE = "serve.checkpoint"
LOCK = "lock"
BAD_SUFFIX = ".bad"
MAGIC = b"sharestate serve checkpoint\n"
FORMAT = 3
"""The checkpoint file's format (1: a pickled body, 2: no counted findings; neither is read)."""
OMITTED = pa.list_(pa.struct([
    pa.field("kind", pa.string(), False), pa.field("count", pa.int64(), False),
    pa.field("position", pa.int64(), False), pa.field("offset", pa.int64())]))
BODY = pa.schema([
    pa.field("topic", pa.string(), nullable=False), pa.field("partition", pa.int32(), False),
    pa.field("position", pa.int64(), False), pa.field("records", pa.int64(), False),
    pa.field("last_timestamp", pa.int64()), pa.field("at_end", pa.bool_(), False),
    pa.field("dialect", pa.string()), pa.field("snapshot", pa.binary()),
    pa.field("omitted_findings", OMITTED, False)])
"""A checkpoint's body, a row per partition: its `Progress`, the dialect its replay reads,
the replay's snapshot (`encode`d; both null before the replay started) and the findings
counted past those listed (`PartitionCheckpoint.omitted`, a row per kind)."""

MAX_HEADER_BYTES = 1 << 20
"""The longest header read (it names each partition's position, ~40 bytes a partition)."""
MAX_HEADER_DEPTH = 8
"""The deepest nesting a header may have (it has two levels: itself and the positions)."""
_JSON_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(_NESTING)))
LOG = logging.getLogger("sharestate.serve")

Where = tuple[str, int]


class CheckpointRefused(Exception):
    """The checkpoint directory cannot be used as asked (one line: exit 2)."""


class CheckpointUnusable(Exception):
    """The checkpoint cannot be resumed from (one line: the service replays from the start)."""


@dataclass(frozen=True)
class Settings:
    """What a checkpoint must have been written with to be resumed from."""

    cluster_id: str
    semantics: str
    dialect: str | None
    snapshot_update_records: int

    def header(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "semantics": self.semantics,
                "dialect": self.dialect or "auto",
                "snapshot_update_records": self.snapshot_update_records}


@dataclass
class Restored:
    """A checkpoint loaded: its partitions and what its header says."""

    partitions: dict[Where, PartitionCheckpoint]
    header: dict[str, Any]


def _depth(text: bytes) -> int:
    """How deep the arrays and objects of JSON `text` nest (escapes dropped, then what
    lies outside the strings summed bracket by bracket)."""
    outside = b"".join(_JSON_ESCAPE.sub(b"", text).split(b'"')[::2])
    brackets = outside.translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_NESTING.__getitem__, brackets)), default=0)


def encode_body(partitions: Mapping[Where, PartitionCheckpoint]) -> bytes:
    """The body of a checkpoint of `partitions` (what the writer took: `Taken`)."""
    rows: dict[str, list[Any]] = {name: [] for name in BODY.names}
    for (topic, partition), saved in sorted(partitions.items()):
        progress = saved.progress
        for name, value in (("topic", topic), ("partition", partition),
                            ("position", progress.position), ("records", progress.records),
                            ("last_timestamp", progress.last_timestamp),
                            ("at_end", progress.at_end), ("dialect", saved.dialect),
                            ("snapshot", None if saved.snapshot is None
                             else encode([saved.snapshot])),
                            ("omitted_findings", [
                                {"kind": kind, "count": count, "position": position,
                                 "offset": offset}
                                for kind, (count, position, offset) in saved.omitted.items()])):
            rows[name].append(value)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, BODY) as writer:
        writer.write_table(pa.Table.from_pydict(rows, schema=BODY))
    return bytes(sink.getvalue().to_pybytes())


def decode_body(data: bytes) -> dict[Where, PartitionCheckpoint]:
    """The partitions a checkpoint body holds, each snapshot restored once to be sure its
    replay can go on from it. SnapshotMismatch for snapshots made by other code or of
    another format; ValueError (or any exception of the restore) when it is no body of
    `body`'s."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"not an Arrow IPC stream ({exc})") from None
    if not table.schema.equals(BODY):
        raise ValueError("not a checkpoint's partitions")
    partitions: dict[Where, PartitionCheckpoint] = {}
    for row in table.to_pylist():
        where = (row["topic"], row["partition"])
        if row["topic"] not in INTERNAL_TOPICS or where in partitions or None in (
                row["position"], row["records"], row["at_end"]) or (
                row["dialect"] is not None and row["dialect"] not in dialect_names()):
            raise ValueError(f"{where!r} is not a partition's checkpoint")
        snapshot = None
        if row["snapshot"] is not None:
            (snapshot,) = decode(row["snapshot"])
            if (snapshot.topic, snapshot.partition) != where or row["dialect"] is None:
                raise ValueError(f"{where!r} holds the snapshot of another partition")
            if row["topic"] == SHARE_STATE_TOPIC:
                ShareReplay.restore(snapshot)
            else:
                GroupReplay.restore(snapshot)
        omitted = {counted["kind"]: (counted["count"], counted["position"], counted["offset"])
                   for counted in row["omitted_findings"]}
        if len(omitted) != len(row["omitted_findings"]) or any(
                count < 1 for count, _, _ in omitted.values()):
            raise ValueError(f"{where!r} counts its findings wrong")
        partitions[where] = PartitionCheckpoint(
            Progress(row["position"], row["records"], row["last_timestamp"], row["at_end"]),
            row["dialect"], snapshot, omitted)
    return partitions


class CheckpointStore:
    """The checkpoint directory of one service: `lock()` first, then `load` and `save`."""

    def __init__(self, directory: Path, settings: Settings) -> None:
        self.directory = directory
        self.path = directory / FILE
        self.settings = settings
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the directory (creating it); CheckpointRefused when another service has it."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise CheckpointRefused(f"cannot use checkpoint directory {self.directory}: "
                                    f"{exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise CheckpointRefused(f"checkpoint directory {self.directory} is in use by "
                                    f"another sharestate serve (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd
        for leftover in self.directory.glob(f".{FILE}.*.tmp"):  # a write a crash cut short
            leftover.unlink(missing_ok=True)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> Restored | None:
        """The checkpoint, or None when there is none. CheckpointRefused when it was written
        with other settings, CheckpointUnusable when it cannot be resumed from (a damaged
        file is moved aside first)."""
        data = self._read()
        if data is None:
            return None
        header, body = self._split(data)
        expected = self.settings.header()
        for name, value in expected.items():
            if header.get(name) != value:
                raise CheckpointRefused(
                    f"checkpoint {self.path} was written for {name} {header.get(name)!r}, "
                    f"not {value!r}: give the settings it was written with or another "
                    f"--checkpoint-dir")
        if header.get("core") != fingerprint():
            raise CheckpointUnusable(
                f"checkpoint {self.path} was written by another version of sharestate's core "
                f"(sharestate {header.get('sharestate')}); its state may differ from what "
                f"this one computes")
        try:
            partitions = decode_body(body)
        except SnapshotMismatch as exc:
            raise CheckpointUnusable(f"checkpoint {self.path}: {exc}") from None
        except Exception as exc:  # any damage the checksum let through: never resumed from
            raise self._damaged(f"its body does not load ({exc})") from None
        return Restored(partitions, header)

    def _read(self) -> bytes | None:
        """The file's bytes, None when there is none. Only a regular file is read, and only
        the bytes it held when opened (`files.read_regular`: a FIFO, a device or a directory
        in its place is damage, and opening one never waits)."""
        try:
            return read_regular(self.path)
        except FileNotFoundError:
            return None
        except NotRegularFile as exc:
            raise self._damaged(f"it is {exc.strerror}") from None
        except OSError as exc:
            raise CheckpointUnusable(f"cannot read {self.path}: {exc.strerror}") from None

    def _split(self, data: bytes) -> tuple[dict[str, Any], bytes]:
        """(header, body) of a checkpoint file; CheckpointUnusable when it is damaged."""
        if not data.startswith(MAGIC):
            raise self._damaged("it does not start as a sharestate serve checkpoint")
        end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER_BYTES + 1)
        if end < 0:
            raise self._damaged(f"its header line does not end within {MAX_HEADER_BYTES} "
                                f"bytes")
        line = data[len(MAGIC):end]
        if _depth(line) > MAX_HEADER_DEPTH:
            raise self._damaged(f"its header nests deeper than {MAX_HEADER_DEPTH} levels")
        try:
            header = json.loads(line)
        except ValueError:
            header = None
        if not isinstance(header, dict):
            raise self._damaged("its header is not a JSON object")
        if header.get("format") != FORMAT:
            raise CheckpointUnusable(f"checkpoint {self.path} is of format "
                                     f"{header.get('format')!r}, this sharestate reads {FORMAT}")
        body = data[end + 1:]
        if len(body) != header.get("body_bytes"):
            raise self._damaged(f"it holds {len(body)} bytes of state, its header says "
                                f"{header.get('body_bytes')} (truncated?)")
        if hashlib.sha256(body).hexdigest() != header.get("body_sha256"):
            raise self._damaged("its state does not match its checksum")
        return header, body

    def _damaged(self, reason: str) -> CheckpointUnusable:
        bad = self.path.with_name(FILE + BAD_SUFFIX)
        try:
            os.replace(self.path, bad)
            kept = f"; kept as {bad}"
        except OSError:
            kept = ""
        return CheckpointUnusable(f"checkpoint {self.path} is damaged: {reason}{kept}")

    def save(self, body: bytes, positions: Mapping[Where, int], records: int,
             version: str) -> int:
        """Write a checkpoint of `body` (from `encode_body`) atomically; its size in bytes."""
        header = {"format": FORMAT, "sharestate": version, "core": fingerprint(),
                  **self.settings.header(),
                  "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "records_applied": records,
                  "positions": {f"{topic}-{partition}": position
                                for (topic, partition), position in sorted(positions.items())},
                  "body_bytes": len(body), "body_sha256": hashlib.sha256(body).hexdigest()}
        data = MAGIC + json.dumps(header).encode() + b"\n" + body
        temporary = self.directory / f".{FILE}.{os.getpid()}.tmp"
        with open(temporary, "wb", opener=_private) as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.path)
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        return len(data)


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


class Taken(NamedTuple):
    """A checkpoint the writer took of its own state: every partition (the snapshots are
    Arrow tables, data that stays as taken), to be encoded and written on another thread."""

    partitions: dict[Where, PartitionCheckpoint]

    @property
    def positions(self) -> dict[Where, int]:
        return {where: saved.progress.position for where, saved in self.partitions.items()}

    @property
    def records(self) -> int:
        return sum(saved.progress.records for saved in self.partitions.values())


class Written(NamedTuple):
    """What the checkpoints written so far say (replaced whole after each write): when the
    last was written (epoch seconds, None before the first), its size, how long it took,
    the records applied and positions it holds, and the writes that failed."""

    at: float | None
    size: int
    took: float
    records: int
    positions: Mapping[Where, int]
    failures: int


class Checkpointer(threading.Thread):
    """Writes the checkpoints the service's writer hands it (`submit`), one at a time and
    off the writer's thread (a newer one handed over before the last is written replaces
    it), and says when one is due (`due`): once `records` records were applied since the
    last one written or `seconds` passed with anything read. A write that fails is logged
    and counted (`written.failures`); the service goes on and tries again when the next is
    due. `close` writes a last one."""

    def __init__(self, store: CheckpointStore, *, records: int, seconds: float, version: str,
                 applied: int = 0, positions: Mapping[Where, int] | None = None) -> None:
        """`applied`, `positions`: what the state the service starts from holds."""
        super().__init__(name="checkpoint", daemon=True)
        self.store = store
        self.every_records = records
        self.every_seconds = seconds
        self.version = version
        self.written = Written(None, 0, 0.0, applied, dict(positions or {}), 0)
        self.stopping = threading.Event()
        self._since = time.monotonic()
        self._handed = threading.Condition()
        self._next: Taken | None = None
        self._writing = False

    def due(self, records: int, positions: Mapping[Where, int], now: float) -> bool:
        """Whether a checkpoint of a state of `records` applied and `positions` is due (never
        while the last one handed over is not yet written)."""
        with self._handed:
            if self._writing or self._next is not None:
                return False
        written = self.written
        if records - written.records >= self.every_records or (
                positions != written.positions and now - self._since >= self.every_seconds):
            self._since = now
            return True
        return False

    def submit(self, taken: Taken) -> None:
        """Write `taken` on this thread, as soon as it is free."""
        with self._handed:
            self._next = taken
            self._handed.notify()

    def run(self) -> None:
        while True:
            with self._handed:
                while self._next is None and not self.stopping.is_set():
                    self._handed.wait()
                taken, self._next = self._next, None
                self._writing = taken is not None
            if taken is None:
                return
            self.write(taken)
            with self._handed:
                self._writing = False

    def write(self, taken: Taken) -> None:
        """Encode and write `taken` now."""
        started = time.monotonic()
        written = self.written
        try:
            size = self.store.save(encode_body(taken.partitions), taken.positions,
                                   taken.records, self.version)
        except Exception:  # logged and counted; the service keeps answering
            LOG.exception("writing checkpoint %s failed", self.store.path)
            self.written = written._replace(failures=written.failures + 1)
            return
        took = time.monotonic() - started
        self.written = Written(time.time(), size, took, taken.records, taken.positions,
                               written.failures)
        LOG.debug("checkpoint %s: %d records applied, %d bytes, %.3f s", self.store.path,
                  taken.records, size, took)

    def close(self, last: Taken | None) -> None:
        """Stop once what was handed over is written, write `last` (None: none, e.g. after a
        replay failed), free the directory."""
        with self._handed:
            self.stopping.set()
            self._handed.notify()
        if self.is_alive():
            self.join()
        if last is not None:
            self.write(last)
        self.store.close()
