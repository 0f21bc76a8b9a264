"""The `replay_state` table: each internal-topic partition's state at the last offset a run
applied (the replay's snapshot and the audit's memory, in the core's serialised form), so the
next run restores it and applies only the records above it.

A row is restored only by the same code (`code_fingerprint`: the core's fingerprint, the
audit's and the gold rows' sources, the tables' schemas) with the same replay settings;
anything else replays the partition from its log start.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sharestate
from sharestate.replay.snapshot import (
    FORMAT,
    Snapshot,
    digest_tree,
    encode,
    fingerprint,
    read_table,
)

if TYPE_CHECKING:
    from sharestate.tables.gold_pass import GoldOptions

CODE = ("analytics", "tables")
"""The packages, besides the core, whose code makes the gold rows and the audit's memory."""


@cache
def code_fingerprint() -> str:
    """SHA-256 over the core's fingerprint and the modules of `CODE` (the tables' schemas
    are read there too)."""
    digest = hashlib.sha256(fingerprint().encode())
    package = Path(sharestate.__file__).parent
    for path in sorted(p for name in CODE for p in (package / name).rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    digest_tree(digest, resources.files("sharestate.schemas").joinpath("tables"), "tables")
    return digest.hexdigest()


def state_row(snapshot: Snapshot, last_offset: int | None, last_timestamp: int | None,
              records: int, options: GoldOptions) -> dict[str, Any]:
    """The `replay_state` row of a partition's state (`snapshot`: its tables)."""
    return {"topic": snapshot.topic, "partition": snapshot.partition,
            "run_id": options.run_id, "committed_at": options.started_at, "format": FORMAT,
            "code": code_fingerprint(), "semantics": options.semantics,
            "snapshot_update_records": options.snapshot_update_records_per_snapshot,
            "last_applied_offset": last_offset, "last_applied_timestamp": last_timestamp,
            "records": records, "state": encode([snapshot])}


def resumable(row: dict[str, Any], options: GoldOptions) -> bool:
    """Whether a run with `options` goes on from a `replay_state` row: made by this code with
    the same settings (`--max-findings` among them: its state holds it), and the run has
    no stop point (its tables would be as of it)."""
    return (options.as_of.unbounded and row["format"] == FORMAT
            and row["code"] == code_fingerprint() and row["semantics"] == options.semantics
            and row["snapshot_update_records"] == options.snapshot_update_records_per_snapshot
            and finding_limit(row["state"]) == options.max_findings)


def finding_limit(state: bytes) -> int | None:
    """The findings a partition's replay lists one by one (`--max-findings`) in the state of
    a `replay_state` row (None: no such state), read without the rest of it."""
    cap = read_table(state, "audit_cap")
    return None if cap is None or cap.num_rows != 1 else cap["limit"][0].as_py()


def state_log_start(state: bytes) -> int | None:
    """The log start offset a share replay's state in a `replay_state` row began from (None:
    no such state, or nothing applied yet), read without the rest of it."""
    replay = read_table(state, "share_replay")
    return None if replay is None or replay.num_rows != 1 else \
        replay["log_start_offset"][0].as_py()


def restored_dialect(snapshot: Snapshot) -> str:
    """The dialect a restored share replay decodes its records under."""
    dialect: str = snapshot.table("share_replay")["dialect"][0].as_py()
    return dialect
