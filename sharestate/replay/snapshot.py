"""A replay's whole state as data: versioned Arrow tables, and their serialised form.

`ShareReplay.snapshot()` and `GroupReplay.snapshot()` give a `Snapshot`: one internal-topic
partition's state as Arrow tables whose schemas are `schemas/state/<table>.json` (read by
`sharestate.specs`), under format version `FORMAT`; `restore()` takes it back, and the
restored replay goes on to exactly the answers of one never interrupted.

- `__share_group_state`: `share_replay` (one row: position in the log, settings, counters),
  `share_keys` (every share-partition's state, epoch maps, update counter, latest snapshot
  offset), `share_pending` (open transactions' records, `transactional-acks`),
  `prune_ledger`, `shard_findings`, `log_findings`.
- `__consumer_offsets`: `group_replay` (one row), `committed_offsets`, `pending_offsets`
  (open transactions), `groups`, `group_members`, `target_assignments`,
  `share_group_metadata`, `group_anomalies`, `skipped_records`, `log_findings`.

Rows keep the order of the structures they come from (the order keys gained their state,
groups were created, producers opened), so a restored replay iterates as the original does.

Serialised (`encode`, `decode`), snapshots are one Arrow IPC stream: an envelope table with a
row per (partition, table) holding that table as an IPC stream of its own, and in the
envelope schema's metadata the format version and the fingerprint of the code that made
it (`fingerprint`: the sources that decode and replay records, C ones included, and the
record and state schemas). `decode` refuses another version or another fingerprint with a
`SnapshotMismatch` (one line): state made by other code may differ from what this code
computes, and the log replayed again gives the right one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import pyarrow as pa

import sharestate
from sharestate import native
from sharestate.specs import load

FORMAT = 2
"""The version of the snapshot tables' layout; raised on any change to `schemas/state/`."""

SHARE_TABLES = ("share_replay", "share_keys", "share_pending", "prune_ledger", "shard_findings",
                "log_findings")
GROUP_TABLES = ("group_replay", "committed_offsets", "pending_offsets", "groups",
                "group_members", "target_assignments", "share_group_metadata",
                "group_anomalies", "skipped_records", "log_findings")
AUDIT_TABLES = ("audit_keys", "audit_deleted", "audit_transactions", "audit_cap")
"""What the pipeline's audit of a partition remembers (`sharestate.analytics.audit_state`),
kept with the replay's snapshot in `replay_state`."""

CORE = ("log", "records", "coordinator", "replay")
"""The packages whose code decodes and replays records (every module in them)."""
CORE_FILES = ("native.py", "specs.py", "tables/arrow_log.py", "cluster/consumed.py",
              "app/serve/partition.py")
"""The other modules that decode records for a replay (bronze rows, consumed records)."""
SCHEMAS = ("records", "state")
"""The schema folders the fingerprint covers: the records' and the snapshot tables'."""

_FORMAT_KEY = b"sharestate.snapshot.format"
_CORE_KEY = b"sharestate.snapshot.core"
ENVELOPE = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                      ("table", pa.string()), ("data", pa.binary())])
"""The serialised form: a row per (partition, table), `data` that table's IPC stream."""


class SnapshotMismatch(Exception):
    """A serialised snapshot of another format version or made by other code (one line)."""


@cache
def schema(name: str) -> pa.Schema:
    """The Arrow schema of snapshot table `name` (`schemas/state/<name>.json`)."""
    return load("state", name).arrow_schema()


@dataclass(frozen=True)
class Snapshot:
    """One internal-topic partition's replay state: `tables` by name (`SHARE_TABLES` or
    `GROUP_TABLES`), each of the schema `schema(name)`."""

    topic: str
    partition: int | None
    tables: Mapping[str, pa.Table]

    @property
    def kind(self) -> str:
        """"share" or "group"."""
        return "share" if "share_replay" in self.tables else "group"

    def table(self, name: str) -> pa.Table:
        """Table `name`, checked to be of its documented schema."""
        found = self.tables.get(name)
        if found is None:
            raise ValueError(f"snapshot of {self.topic}-{self.partition} has no {name} table")
        if not found.schema.equals(schema(name)):
            raise ValueError(f"snapshot table {name} is not of its schema (schemas/state/"
                             f"{name}.json)")
        return found


def table_of(name: str, rows: list[dict[str, Any]]) -> pa.Table:
    """Snapshot table `name` of row dicts (every key a column of it, none null where the
    schema says not nullable)."""
    table = pa.Table.from_pylist(rows, schema=schema(name))
    _check_nulls(name, table)
    return table


def _check_nulls(name: str, table: pa.Table) -> None:
    for field in table.schema:
        if not field.nullable and table.column(field.name).null_count:
            raise ValueError(f"snapshot table {name}: null in column {field.name}")


@cache
def fingerprint() -> str:
    """SHA-256 over the code that decodes and replays records: the modules of `CORE` and
    `CORE_FILES`, the schemas of `SCHEMAS`, and the C extension's sources (the digest it
    was built with; "-" when it is not in use)."""
    digest = hashlib.sha256()
    package = Path(sharestate.__file__).parent
    files = sorted(path for name in CORE for path in (package / name).rglob("*.py"))
    for path in [*files, *(package / name for name in CORE_FILES)]:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    root = resources.files("sharestate.schemas")
    for name in SCHEMAS:
        digest_tree(digest, root.joinpath(name), name)
    digest.update(b"csrc\0" + native.sources().encode())
    return digest.hexdigest()


def digest_tree(digest: hashlib._Hash, entry: Traversable, name: str) -> None:
    """Feed `digest` the names and bytes of the JSON files under `entry` (named `name`)."""
    if entry.is_dir():
        for child in sorted(entry.iterdir(), key=lambda child: child.name):
            if child.name != "__pycache__":
                digest_tree(digest, child, f"{name}/{child.name}")
    elif name.endswith(".json"):
        digest.update(name.encode() + b"\0" + entry.read_bytes())


def encode(snapshots: Iterable[Snapshot]) -> bytes:
    """Snapshots as one Arrow IPC stream (see the module)."""
    rows: dict[str, list[object]] = {name: [] for name in ENVELOPE.names}
    for snapshot in snapshots:
        for name, table in snapshot.tables.items():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            rows["topic"].append(snapshot.topic)
            rows["partition"].append(snapshot.partition)
            rows["table"].append(name)
            rows["data"].append(sink.getvalue().to_pybytes())
    envelope = ENVELOPE.with_metadata({_FORMAT_KEY: str(FORMAT).encode(),
                                       _CORE_KEY: fingerprint().encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, envelope) as writer:
        writer.write_table(pa.Table.from_pydict(rows, schema=envelope))
    return bytes(sink.getvalue().to_pybytes())


def decode(data: bytes) -> list[Snapshot]:
    """The snapshots `encode` wrote, in order. SnapshotMismatch when they are of another
    format version or were made by other code; ValueError when the bytes are not a snapshot
    (damaged, or not of the documented schemas)."""
    try:
        envelope = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ValueError(f"not an Arrow IPC stream ({exc})") from None
    metadata = envelope.schema.metadata or {}
    if _FORMAT_KEY not in metadata or not envelope.schema.remove_metadata().equals(ENVELOPE):
        raise ValueError("not a sharestate snapshot")
    version = metadata[_FORMAT_KEY].decode(errors="replace")
    if version != str(FORMAT):
        raise SnapshotMismatch(f"snapshot format {version}, this sharestate reads {FORMAT}")
    if metadata.get(_CORE_KEY, b"").decode(errors="replace") != fingerprint():
        raise SnapshotMismatch("snapshot made by another version of sharestate's core: its "
                               "state may differ from what this one computes")
    snapshots: dict[tuple[str, int | None], dict[str, pa.Table]] = {}
    for row in envelope.to_pylist():
        try:
            table = pa.ipc.open_stream(pa.py_buffer(row["data"])).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"snapshot table {row['table']} does not read ({exc})") from None
        if row["table"] not in schema_names() or not table.schema.equals(schema(row["table"])):
            raise ValueError(f"snapshot table {row['table']!r} is not of a documented schema")
        _check_nulls(row["table"], table)
        snapshots.setdefault((row["topic"], row["partition"]), {})[row["table"]] = table
    return [Snapshot(topic, partition, tables)
            for (topic, partition), tables in snapshots.items()]


def read_table(data: bytes, name: str) -> pa.Table | None:
    """Table `name` of the first snapshot `encode` wrote in `data`, read alone (the others
    stay bytes); None when it holds none, or `data` is no snapshot's."""
    try:
        envelope = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
        if name not in schema_names() or not envelope.schema.remove_metadata().equals(ENVELOPE):
            return None
        at = envelope["table"].to_pylist().index(name)
        table = pa.ipc.open_stream(envelope["data"][at].as_buffer()).read_all()
    except (pa.ArrowInvalid, OSError, ValueError):
        return None
    return table if table.schema.equals(schema(name)) else None


@cache
def schema_names() -> frozenset[str]:
    return frozenset((*SHARE_TABLES, *GROUP_TABLES, *AUDIT_TABLES))
