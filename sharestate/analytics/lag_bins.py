"""The lag-history walk's input without a shuffle: each task reads the history files, keeps
the rows of its own groups and puts them in the walk's order itself.

The walk needs a group's rows together and in `INPUT_ORDER`. Spark would hash the rows
to tasks by group and sort them (a shuffle of every row and a sort that spills under a
small heap). Instead the job counts each group's rows (`group_rows`, from the `group_id`
column alone), deals the groups into one bin per core, largest first onto the lightest
(`deal`), and each task reads every file, keeps its bin's rows and sorts them on integer
keys (`bin_inputs`). A bin holds its rows in memory while it sorts them: one that would
pass `BIN_ROWS` rows makes the job shuffle instead (Spark's sort spills to disk).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharestate.analytics.lag_history import (
    INPUT_ORDER,
    INPUT_SCHEMA,
    READ_ROWS,
    history_batches,
    lag_inputs,
)

BIN_ROWS: Final = 4_000_000
"""The most history rows one task sorts in memory (about 60 bytes a row)."""
WALK_BINS: Final = pa.schema([
    ("groups", pa.list_(pa.string())), ("resumes", pa.list_(pa.string())),
    ("uris", pa.list_(pa.string())), ("state_partitions", pa.list_(pa.int32()))])
"""A `bin_inputs` task: its groups (sorted), each one's saved walk (a `lag_state` row as
JSON, or null), and the history data files with the state partition of each."""
RESUMED_SCHEMA: Final = INPUT_SCHEMA.append(pa.field("resume", pa.string()))
"""`bin_inputs`' rows: the walk's input, a group's saved walk first in a row of its own."""


def group_rows(uris: Iterable[str]) -> Counter[str]:
    """Rows per group in the history data files `uris`."""
    counts: Counter[str] = Counter()
    for uri in uris:
        column = pq.read_table(uri, columns=["group_id"]).column("group_id")
        for item in pc.value_counts(column).to_pylist():
            counts[item["values"]] += item["counts"]
    return counts


def deal(counts: Mapping[str, int], bins: int, limit: int) -> list[list[str]] | None:
    """The groups of `counts` (rows each) in at most `bins` bins, each group in turn, the
    largest first, onto the bin with the fewest rows; the bins with groups, fullest first,
    each sorted. None when a bin would hold more than `limit` rows."""
    heap: list[tuple[int, int, list[str]]] = [(0, i, []) for i in range(max(1, bins))]
    for group in sorted(counts, key=lambda g: (-counts[g], g)):
        rows, i, groups = heapq.heappop(heap)
        groups.append(group)
        heapq.heappush(heap, (rows + counts[group], i, groups))
    if max(rows for rows, _, _ in heap) > limit:
        return None
    return [sorted(groups) for _, _, groups in sorted(heap, reverse=True) if groups]


def bin_inputs(tasks: Iterator[pa.RecordBatch], wanted: pa.Schema,
               since: int | None = None) -> Iterator[pa.RecordBatch]:
    """For each row of `tasks` (`WALK_BINS`): its groups' `lag_inputs` rows stamped after
    `since` (None: every row), read from its files, group by group in `INPUT_ORDER`, each
    group's saved walk first (`RESUMED_SCHEMA`)."""
    for task in tasks:
        for groups, resumes, uris, partitions in zip(
                *(task.column(name).to_pylist() for name in WALK_BINS.names), strict=True):
            yield from _bin(groups, resumes, zip(uris, partitions, strict=True), wanted,
                            since)


def _bin(groups: Sequence[str], resumes: Sequence[str | None],
         files: Iterable[tuple[str, int]], wanted: pa.Schema,
         since: int | None) -> Iterator[pa.RecordBatch]:
    keep = pa.array(groups, pa.string())
    parts: list[pa.RecordBatch] = []
    for uri, partition in files:
        for batch in history_batches(uri, partition, wanted, since):
            codes = pc.index_in(batch.column("group_id"), value_set=keep)
            rows = lag_inputs(batch.filter(pc.is_valid(codes)))
            if rows.num_rows:  # group ids as their index in `groups`, topic ids as codes
                parts.append(rows.set_column(0, "group_id", pc.index_in(
                    rows.column("group_id"), value_set=keep)).set_column(
                    1, "topic_id", pc.dictionary_encode(rows.column("topic_id"))))
    rows = pa.Table.from_batches(parts).unify_dictionaries().combine_chunks() if parts else None
    del parts
    order: np.ndarray[Any, Any] = np.zeros(0, np.int64)
    bounds = np.zeros(len(groups) + 1, np.int64)
    if rows is not None:
        code = _key(rows, "group_id")
        order = np.lexsort(tuple(_key(rows, name) for name in reversed(INPUT_ORDER)))
        bounds = np.searchsorted(code[order], np.arange(len(groups) + 1))
    for index, (group, resume) in enumerate(zip(groups, resumes, strict=True)):
        if resume is not None:
            yield _resume_row(group, resume)
        for start in range(bounds[index], bounds[index + 1], READ_ROWS):
            assert rows is not None
            taken = rows.take(order[start:min(start + READ_ROWS, bounds[index + 1])])
            yield pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar(group, pa.string()), taken.num_rows),
                taken.column("topic_id").cast(pa.string()).combine_chunks(),
                *(taken.column(name).combine_chunks() for name in INPUT_SCHEMA.names[2:]),
                pa.nulls(taken.num_rows, pa.string())], schema=RESUMED_SCHEMA)


def _key(rows: pa.Table, name: str) -> np.ndarray[Any, Any]:
    """A sort key: the column (never null) as int64."""
    values: np.ndarray[Any, Any] = rows.column(name).combine_chunks().to_numpy().astype(
        np.int64, copy=False)
    return values


def _resume_row(group: str, resume: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([group], pa.string()),
         *(pa.nulls(1, field.type) for field in list(INPUT_SCHEMA)[1:]),
         pa.array([resume], pa.string())], schema=RESUMED_SCHEMA)
