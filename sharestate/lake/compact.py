"""Warehouse upkeep on any Delta table on a local file system, through delta-rs (no JVM).

- `plan_bins` chooses what to merge: small data files grouped by a key the caller gives
  (None: leave the file as it is), each group packed into bins of at most `target_bytes`;
  a group is merged only when it holds at least `min_files` small files.
- `compact` rewrites each bin as one file, its rows sorted by the table's clustering
  columns, and commits all bins as one transaction whose add and remove actions say
  `dataChange: false` (the rows are the same, as Delta's OPTIMIZE says): readers of the
  previous version still read the removed files until a vacuum past the retention.
- `vacuum` deletes the files no version within the retention needs (the table's
  `delta.deletedFileRetentionDuration`, 7 days unless set; a shorter one is refused), and
  files no commit ever named (a killed writer's) once older than the retention.
- `checkpoint` writes a checkpoint and drops the commit files older than the table's
  `delta.logRetentionDuration` that it makes unnecessary.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction, RemoveAction

from sharestate.lake.base import ActiveFile, TablePath, metadata_json
from sharestate.lake.data_files import DataFile, TableFiles
from sharestate.lake.partitions import partition_string

COMPACTED = "compacted"
"""`userMetadata.maintenance` of a compaction's commit."""

FileKey = Callable[[ActiveFile], Hashable | None]
"""Which files may share a bin: those of equal keys (None: the file is left as it is)."""


@dataclass(frozen=True)
class Bin:
    """Files of one partition to merge into one, with their sizes in bytes."""

    files: tuple[ActiveFile, ...]
    sizes: tuple[int, ...]

    @property
    def bytes(self) -> int:
        return sum(self.sizes)


def plan_bins(files: Sequence[ActiveFile], key: FileKey, *, target_bytes: int,
              min_files: int) -> list[Bin]:
    """The bins worth merging: per key, the files smaller than `target_bytes` (largest
    first onto the first bin they fit), when there are at least `min_files` of them; bins
    of one file are left out."""
    groups: dict[Hashable, list[tuple[ActiveFile, int]]] = {}
    for f in files:
        size = os.path.getsize(f.uri)
        if size < target_bytes and (k := key(f)) is not None:
            partition = tuple(sorted((c, partition_string(v))
                                     for c, v in f.partition_values.items()))
            groups.setdefault((partition, k), []).append((f, size))
    bins: list[Bin] = []
    for group in groups.values():
        if len(group) < min_files:
            continue
        packed: list[list[tuple[ActiveFile, int]]] = []
        for item in sorted(group, key=lambda fs: -fs[1]):
            for open_bin in packed:
                if sum(s for _, s in open_bin) + item[1] <= target_bytes:
                    open_bin.append(item)
                    break
            else:
                packed.append([item])
        bins.extend(Bin(tuple(f for f, _ in b), tuple(s for _, s in b))
                    for b in packed if len(b) > 1)
    return bins


def _rows(one: Bin, schema: pa.Schema, cluster_by: Sequence[str]) -> pa.Table:
    """The bin's rows, partition columns put back from the folder's values, sorted by the
    clustering columns that can be sorted."""
    parts = []
    for f in one.files:
        data = pq.read_table(f.uri)
        columns = []
        for field in schema:
            if field.name in data.column_names:
                columns.append(data.column(field.name).cast(field.type))
            else:
                value = f.partition_values.get(field.name)
                text = pa.array([partition_string(value)], pa.string()).cast(field.type)
                columns.append(pa.repeat(text[0], data.num_rows))
        parts.append(pa.table(columns, schema=schema))
    rows = pa.concat_tables(parts)
    keys = [(c, "ascending") for c in cluster_by
            if c in schema.names and not pa.types.is_nested(schema.field(c).type)]
    return rows.sort_by(keys) if keys else rows


def compact(path: TablePath, bins: Sequence[Bin], cluster_by: Sequence[str]) -> int | None:
    """Rewrite each bin as one data file and commit them all, with the removal of the files
    they replace, as one transaction that changes no data; the new version (None: nothing
    to do)."""
    if not bins:
        return None
    root = os.path.realpath(os.fspath(path))
    table = DeltaTable(root)
    partition_by = list(table.metadata().partition_columns)
    schema = pa.schema(table.schema().to_arrow())
    not_null = [f.name for f in schema if not f.nullable]
    written: list[DataFile] = []
    try:
        for one in bins:
            files = TableFiles(root, partition_by, not_null)
            for batch in _rows(one, schema, cluster_by).to_batches():
                files.add(batch)
            written.extend(DataFile.from_row(row) for row in files.close())
        now = int(time.time() * 1000)
        adds = [AddAction(f.path, f.size, dict(f.partition_values), f.modification_time,
                          False, f.stats) for f in written]
        removes = [RemoveAction(os.path.relpath(f.uri, root), False, now, size,
                                {c: partition_string(v) for c, v in f.partition_values.items()})
                   for one in bins for f, size in zip(one.files, one.sizes, strict=True)]
        custom = {"operationParameters": {"predicate": "[]"},
                  "userMetadata": metadata_json({"maintenance": COMPACTED})}
        table.create_write_transaction(
            [*adds, *removes], mode="append", schema=table.schema(), partition_by=partition_by,
            commit_properties=CommitProperties(custom_metadata=custom))
    except BaseException:
        for f in written:
            os.remove(os.path.join(root, f.path))
        raise
    table.update_incremental()
    return int(table.version())


class RetentionError(ValueError):
    """A vacuum retention shorter than the table allows (one line)."""


def vacuum(path: TablePath, retain_hours: int | None, *, dry_run: bool) -> list[str]:
    """Delete the data files no version within the retention needs, and untracked ones older
    than it (`retain_hours`, default the table's); the paths deleted (or, `dry_run`, that
    would be)."""
    table = DeltaTable(os.path.realpath(os.fspath(path)))
    try:
        return sorted(table.vacuum(retain_hours, dry_run=dry_run,
                                   enforce_retention_duration=True, full=True))
    except DeltaError as exc:
        if "retention" in str(exc).lower():
            raise RetentionError(f"{path}: {exc}".splitlines()[0]) from None
        raise


def checkpoint(path: TablePath, *, every: int) -> int | None:
    """Checkpoint the table when `every` or more commits followed its last checkpoint, and
    drop the commit files that became unnecessary and are older than the log's retention;
    the version checkpointed (None: none was due)."""
    root = os.path.realpath(os.fspath(path))
    table = DeltaTable(root)
    version = int(table.version())
    last = _last_checkpoint(root)
    if version - (-1 if last is None else last) < every:
        return None
    table.create_checkpoint()
    table.cleanup_metadata()
    return version


def _last_checkpoint(root: str) -> int | None:
    versions = [int(name.split(".", 1)[0])
                for name in os.listdir(os.path.join(root, "_delta_log"))
                if ".checkpoint." in name and name[:20].isdigit()]
    return max(versions, default=None)
