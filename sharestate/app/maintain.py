"""`sharestate maintain`: keep a warehouse quick to read and its disk bounded as runs add up.

Every scheduled run appends small files (the history, the findings, bronze's segments)
and replaces others, whose old files stay on disk for time travel; a year of hourly runs
leaves hundreds of thousands of files. Under the warehouse lease, for each table:

1. small files are merged (`sharestate.lake.compact`), never across what the jobs tell
   apart: a history or findings file is merged only once the replay's state covers all
   its rows (a run that died before its state is committed has its rows past that state
   dropped by the next run, file by file), findings only with those of their own
   internal-topic partition; history and lag history only up to the moment the lag walk
   goes on from (it reads again every file holding a later row); so the next run still
   goes on from where the last one stopped, reading no more than before;
2. files no version within the retention needs are deleted (vacuum);
3. the log is checkpointed when 10 or more commits followed the last checkpoint.

Tables are read and written through delta-rs, with no JVM, whichever backend wrote them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deltalake.exceptions import DeltaError

from sharestate.analytics.audit import rules_of
from sharestate.lake.base import ActiveFile
from sharestate.lake.compact import (
    FileKey,
    RetentionError,
    checkpoint,
    compact,
    plan_bins,
    vacuum,
)
from sharestate.lake.lease import warehouse_lease
from sharestate.lake.rs import list_files, read_table
from sharestate.records.catalog import SHARE_STATE_TOPIC
from sharestate.tables.spec import table, table_names

MIB = 1 << 20
CHECKPOINT_EVERY = 10
"""Commits after which a table's log is checkpointed (Delta's default interval)."""
REPLAY_RULES = frozenset(rules_of("replay"))


@dataclass(frozen=True)
class Settings:
    """What `maintain` may do: the vacuum's retention (None: each table's own), the size
    files are merged up to, the least number of small files worth merging in a group, and
    whether it only says what it would do."""

    retain_hours: int | None = None
    target_bytes: int = 64 * MIB
    min_files: int = 8
    dry_run: bool = False


@dataclass(frozen=True)
class Upkeep:
    """What `maintain` did to one table."""

    table: str
    files: int
    merged: int
    written: int
    deleted: int
    checkpointed: int | None
    failed: str | None = None

    def line(self, dry_run: bool) -> str:
        if self.failed is not None:
            return f"{self.table}: left as it is: {self.failed}"
        would = "would be " if dry_run else ""
        parts = [f"{self.files} files"]
        if self.merged:
            parts.append(f"{self.merged} {would}merged into {self.written}")
        if self.deleted:
            parts.append(f"{self.deleted} unused {would}deleted")
        if self.checkpointed is not None:
            parts.append(f"log checkpointed at version {self.checkpointed}")
        return f"{self.table}: {'; '.join(parts)}"


def _rows(path: Path, columns: list[str]) -> list[dict[str, Any]]:
    """The table's rows (none where it is missing or cannot be read: then nothing that
    depends on it is merged)."""
    try:
        rows: list[dict[str, Any]] = read_table(path, columns).to_pylist()
    except (DeltaError, ValueError, OSError):
        return []
    return rows


def replay_points(root: Path) -> dict[tuple[str, int], int]:
    """The offset up to which each internal-topic partition's replay state has applied
    its log (`replay_state.last_applied_offset`)."""
    rows = _rows(root / "replay_state", ["topic", "partition", "last_applied_offset"])
    return {(r["topic"], r["partition"]): r["last_applied_offset"] for r in rows
            if r["last_applied_offset"] is not None}


def lag_since(root: Path) -> int | None:
    """The moment the lag walks go on from (`lag_state`'s one horizon, exclusive), or None."""
    horizons = {r["horizon"] for r in _rows(root / "lag_state", ["horizon"])}
    return None if len(horizons) != 1 or None in horizons else int(horizons.pop()) - 1


def _at_most(value: Any, bound: int | None) -> bool:
    return value is not None and bound is not None and value <= bound


def file_key(name: str, points: Mapping[tuple[str, int], int], since: int | None) -> FileKey:
    """Which files of table `name` may be merged together (see the module's text)."""
    if name == "share_partition_state_history":
        def history(f: ActiveFile) -> tuple[()] | None:
            point = points.get((SHARE_STATE_TOPIC, int(f.partition_values["state_partition"])))
            walked = since is None or _at_most(f.max_values.get("timestamp"), since)
            return () if walked and _at_most(f.max_values.get("record_offset"), point) else None
        return history
    if name == "audit_findings":
        def findings(f: ActiveFile) -> tuple[str, int] | None:
            topic, partition = f.min_values.get("topic"), f.min_values.get("partition")
            if (f.partition_values.get("rule") not in REPLAY_RULES or topic is None
                    or partition is None or f.max_values.get("topic") != topic
                    or f.max_values.get("partition") != partition):
                return None
            point = points.get((topic, partition))
            return (topic, partition) if _at_most(f.max_values.get("offset"), point) else None
        return findings
    if name == "share_group_lag_history":
        return lambda f: () if _at_most(f.max_values.get("time"), since) else None
    return lambda f: ()


def maintain_table(root: Path, name: str, key: FileKey, settings: Settings) -> Upkeep:
    """Merge, vacuum and checkpoint one table (a table delta-rs cannot read or write, such
    as one using deletion vectors, or a damaged one, is left as it is, saying why)."""
    path = root / name
    try:
        return _maintain_table(path, name, key, settings)
    except (DeltaError, ValueError, OSError) as exc:
        if isinstance(exc, RetentionError):
            raise
        return Upkeep(name, 0, 0, 0, 0, None, str(exc).splitlines()[0])


def _maintain_table(path: Path, name: str, key: FileKey, settings: Settings) -> Upkeep:
    files = list_files(path)
    bins = plan_bins(files, key, target_bytes=settings.target_bytes,
                     min_files=settings.min_files)
    if not settings.dry_run:
        compact(path, bins, table(name).cluster_by)
    deleted = vacuum(path, settings.retain_hours, dry_run=settings.dry_run)
    done = None if settings.dry_run else checkpoint(path, every=CHECKPOINT_EVERY)
    return Upkeep(name, len(files), sum(len(b.files) for b in bins), len(bins), len(deleted),
                  done)


def maintain(root: Path, settings: Settings) -> list[Upkeep]:
    """Maintain every documented table of the warehouse at `root` (the lease held by the
    caller); a retention shorter than a table allows is refused before any change."""
    names = [n for n in table_names() if (root / n / "_delta_log").is_dir()]
    if settings.retain_hours is not None and not settings.dry_run:
        for name in names:
            with suppress(DeltaError, OSError):  # a damaged table: said in its own line
                vacuum(root / name, settings.retain_hours, dry_run=True)
    points, since = replay_points(root), lag_since(root)
    return [maintain_table(root, name, file_key(name, points, since), settings)
            for name in names]


def run(args: argparse.Namespace) -> int:
    """The command: maintain under the lease, a line per table and a summary; exit 1 when a
    table was left as it is."""
    root = Path(args.warehouse)
    settings = Settings(args.retain_hours, args.target_mib * MIB, args.min_files,
                        args.dry_run)
    with warehouse_lease(root, run=f"maintain-{os.getpid()}", what="sharestate maintain",
                         wait=args.lease_wait):
        done = maintain(root, settings)
    for upkeep in done:
        print(upkeep.line(settings.dry_run))
    merged, written = sum(u.merged for u in done), sum(u.written for u in done)
    deleted = sum(u.deleted for u in done)
    verb = "would merge" if settings.dry_run else "merged"
    print(f"{len(done)} tables in {root.resolve()}: {verb} {merged} files into {written}, "
          f"{deleted} unused files {'to delete' if settings.dry_run else 'deleted'}")
    return 1 if any(u.failed is not None for u in done) else 0
