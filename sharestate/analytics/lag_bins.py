"""The lag-history walk's input without a shuffle: each task reads the history files, keeps
the rows of its own groups and puts them in the walk's order itself.

The walk needs a group's rows together and in `INPUT_ORDER`. Spark would hash the rows
to tasks by group and sort them (a shuffle of every row and a sort that spills under a
small heap). Instead the job counts each group's rows (`group_rows`, from the `group_id`
column alone), deals the groups into bins, largest first onto the lightest (`deal`), and
each task reads every file, keeps its bin's rows and sorts them on integer keys
(`bin_inputs`). A bin holds its rows in memory while it sorts them, at most `BIN_ROWS` (the
setting `spark.sharestate.lagBinRows`): one bin a core, or more where they would hold more
(`bins_for`), up to `BINS_PER_CORE` a core and `MOST_BINS` in all, as each bin reads every
file again; past that, or for a group larger than a bin, the job lets Spark shuffle and
sort the rows instead (its sort spills to disk). So on a cluster of many cores the files
are read at most `MOST_BINS` times, and a large history moves once, through the shuffle.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final

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

BIN_ROWS: Final = 3_000_000
"""The most history rows one task sorts in memory by default: about 90 bytes a row (the
rows, their sort keys and order) besides the 150-250 MB of reading the files (a task's
Python peaked at 450-550 MB on a bin of 2.7 M rows)."""
BINS_PER_CORE: Final = 4
"""The most bins a core: each reads the history files through (about 0.2 CPU-s per
million rows)."""
MOST_BINS: Final = 12
"""The most bins in all. Every bin reads every history file, about 0.3 CPU-s a million rows
with its filter, and sorts, walks and writes its own rows, about 0.9; Spark's shuffle and
sort instead cost about 5.3 CPU-s a million rows in all (5 M rows on `local[2]`, a 4 GiB
driver so that nothing spilled). On c cores the bins take some 0.3 + 0.9/c seconds of wall
time a million rows, the shuffle 5.3/c: past about 14 cores the shuffle is the quicker, as
a bin's read does not shrink with more cores (12 leaves a margin for files read over a
network, where a read costs more)."""
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


def bins_for(counts: Mapping[str, int], cores: int, limit: int) -> list[list[str]] | None:
    """The groups of `counts` dealt into the fewest bins, from one a core up to
    `BINS_PER_CORE` a core and `MOST_BINS` in all, none holding more than `limit` rows;
    None if there are none such (on more than `MOST_BINS` cores, always)."""
    least = max(cores, -(-sum(counts.values()) // max(limit, 1)))
    for bins in range(least, min(BINS_PER_CORE * cores, MOST_BINS) + 1):
        dealt = deal(counts, bins, limit)
        if dealt is not None:
            return dealt
    return None


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
    topics: dict[str, int] = {}
    pieces: list[list[pa.Array]] = [[] for _ in CODED]
    for uri, partition in files:
        for batch in history_batches(uri, partition, wanted, since):
            rows = lag_inputs(batch.filter(pc.is_in(batch.column("group_id"), value_set=keep)))
            if rows.num_rows:
                for column, piece in zip(pieces, _coded(rows, keep, topics).columns,
                                         strict=True):
                    column.append(piece)
    rows = _joined(pieces)
    keys = {name: rows.column(name).to_numpy() for name in INPUT_ORDER}
    order = np.lexsort([keys[name] for name in reversed(INPUT_ORDER)])
    bounds = np.searchsorted(keys["group_id"][order], np.arange(len(groups) + 1))
    del keys
    names = pa.array(list(topics), pa.string())
    for index, (group, resume) in enumerate(zip(groups, resumes, strict=True)):
        if resume is not None:
            yield _resume_row(group, resume)
        for start in range(bounds[index], bounds[index + 1], READ_ROWS):
            taken = rows.take(order[start:min(start + READ_ROWS, bounds[index + 1])])
            yield pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar(group, pa.string()), taken.num_rows),
                names.take(taken.column("topic_id")),
                *(taken.column(name) for name in INPUT_SCHEMA.names[2:]),
                pa.nulls(taken.num_rows, pa.string())], schema=RESUMED_SCHEMA)


CODED: Final = pa.schema([pa.field(f.name, pa.int32()) if f.name in ("group_id", "topic_id")
                          else f for f in INPUT_SCHEMA])
"""A bin's rows as it holds them: the group as its index in the bin's groups, the topic id
as its index in the topics the bin met."""


def _coded(rows: pa.RecordBatch, groups: pa.Array, topics: dict[str, int]) -> pa.RecordBatch:
    """`rows` (`INPUT_SCHEMA`) as `CODED`, new topic ids numbered on in `topics`."""
    encoded = pc.dictionary_encode(rows.column("topic_id"))
    codes = np.array([topics.setdefault(t, len(topics))
                      for t in encoded.dictionary.to_pylist()], np.int32)
    return pa.RecordBatch.from_arrays([
        pc.index_in(rows.column("group_id"), value_set=groups),
        pa.array(codes[encoded.indices.to_numpy()]),
        *rows.columns[2:]], schema=CODED)


def _joined(pieces: list[list[pa.Array]]) -> pa.RecordBatch:
    """A bin's rows (`CODED`) from each column's pieces, each column in one array (a take
    from it gathers three times faster than across chunks), a column's pieces let go once
    it is joined: the bin holds its rows once more by one column at most."""
    columns = []
    pool = pa.default_memory_pool()
    for field in CODED:
        column = pieces.pop(0)
        columns.append(pa.concat_arrays(column) if column else pa.array([], field.type))
        del column
        pool.release_unused()  # the pieces' memory back before the next column's
    return pa.RecordBatch.from_arrays(columns, schema=CODED)


def _resume_row(group: str, resume: str) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([group], pa.string()),
         *(pa.nulls(1, field.type) for field in list(INPUT_SCHEMA)[1:]),
         pa.array([resume], pa.string())], schema=RESUMED_SCHEMA)
