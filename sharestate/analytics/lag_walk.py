"""The lag-history walk over Arrow batches: `lag_inputs` rows, each group's rows together
and in `INPUT_ORDER` (a group's saved walk first, as a `lag_state` row's JSON in a `resume`
column) -> `share_group_lag_history` rows as record batches, and each group's `GroupState`
(`lag_history.walk_groups`).

The walk runs in C (`sharestate._native.lag_walk_*`) when the extension is built, over the
batches' columns with no Python object per row; else `walk_groups` walks the rows as
tuples. Both give the same rows and states (tests/test_native.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sharestate import native
from sharestate.analytics.end_offsets import (
    FILE,
    KAFKA,
    SEGMENTS,
    SERVE,
    STATE,
    Estimate,
    Timeline,
    Where,
)
from sharestate.analytics.lag_history import (
    GROUP,
    SHARE_PARTITION,
    GroupState,
    HistoryRow,
    LagRow,
    MemberState,
    StateLag,
    walk_groups,
)
from sharestate.analytics.lag_state import group_state

SOURCE_CODES: Final = (STATE, FILE, KAFKA, SEGMENTS, SERVE)
"""End-offset sources by their code in C: 0 the state's own bound, 1 a file's row."""
BATCH_ROWS: Final = 10_000
"""Rows per record batch of the pure walk."""

Walked: TypeAlias = pa.RecordBatch | GroupState


def walk_batches(batches: Iterable[pa.RecordBatch], lines: Mapping[Where, Timeline],
                 names: Mapping[str, str], horizon: int | None,
                 schema: pa.Schema) -> Iterator[Walked]:
    """`share_group_lag_history` rows (record batches of its `schema`) and, after each
    group's rows, its `GroupState` before `horizon` (see `walk_groups`)."""
    if native.enabled():
        return _NativeWalk(lines, names, horizon, schema).walk(batches)
    return walk_batches_py(batches, lines, names, horizon, schema)


def walk_batches_py(batches: Iterable[pa.RecordBatch], lines: Mapping[Where, Timeline],
                    names: Mapping[str, str], horizon: int | None,
                    schema: pa.Schema) -> Iterator[Walked]:
    """`walk_batches` in Python: the rows as tuples through `walk_groups` (the C walk's
    twin)."""

    def items() -> Iterator[HistoryRow | GroupState]:
        for batch in batches:
            resume = (batch.column("resume").to_pylist() if "resume" in batch.schema.names
                      else [None] * batch.num_rows)
            columns = zip(*(batch.column(name).to_pylist() for name in HistoryRow._fields),
                          strict=True)
            for saved, row in zip(resume, columns, strict=True):
                yield (group_state(json.loads(saved)) if saved is not None
                       else HistoryRow._make(row))

    chunk: list[LagRow] = []
    for item in walk_groups(items(), lines, names, horizon):
        if isinstance(item, GroupState):
            yield item
            continue
        chunk.append(item)
        if len(chunk) >= BATCH_ROWS:
            yield _columns(chunk, schema)
            chunk = []
    if chunk:
        yield _columns(chunk, schema)


def _columns(rows: list[LagRow], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(column, field.type) for column, field in zip(
        zip(*rows, strict=True), schema, strict=True)], schema=schema)


def _ints(column: pa.Array) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(pc.fill_null(column, 0).to_numpy(), dtype=np.int64)


def _valid(column: pa.Array) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(column.is_valid().to_numpy(zero_copy_only=False))


def _int64s(values: list[int]) -> np.ndarray[Any, Any]:
    return np.asarray(values, dtype=np.int64)


class _NativeWalk:
    """The walk in C: topic ids as codes, timelines as flat arrays (csrc/lagwalk.c)."""

    def __init__(self, lines: Mapping[Where, Timeline], names: Mapping[str, str],
                 horizon: int | None, schema: pa.Schema) -> None:
        self.names = names
        self.codes: dict[str, int] = {}
        self.topics: list[str] = []
        self.schema = schema
        self.capsule = native.module.lag_walk_new(
            tuple(a.data for a in self._lines(lines)), horizon)
        self.groups: list[str] = []  # by ordinal, from the one of groups[0] (`first`)
        self.first = 0

    def _code(self, topic_id: str) -> int:
        code = self.codes.get(topic_id)
        if code is None:
            code = self.codes[topic_id] = len(self.topics)
            self.topics.append(topic_id)
        return code

    def _lines(self, lines: Mapping[Where, Timeline]) -> tuple[np.ndarray[Any, Any], ...]:
        flat: dict[str, list[int]] = {name: [] for name in (
            "topic", "partition", "exact_time", "exact_end", "exact_src", "stamped_time",
            "stamped_end", "stamped_src", "file_time", "file_max", "file_max_time",
            "sample_time")}
        starts: dict[str, list[int]] = {name: [0] for name in ("exact", "stamped", "file",
                                                                "sample")}
        for (topic_id, partition), line in lines.items():
            flat["topic"].append(self._code(topic_id))
            flat["partition"].append(partition)
            for kind, points in (("exact", line.exact), ("stamped", line.stamped)):
                flat[f"{kind}_time"] += points.times
                flat[f"{kind}_end"] += points.ends
                flat[f"{kind}_src"] += [SOURCE_CODES.index(s) for s in points.sources]
            flat["file_time"] += line.files.times
            maxima = line.file_maxima
            flat["file_max"] += maxima
            flat["file_max_time"] += [line.files.times[line.files.ends.index(m)]
                                      for m in maxima]
            flat["sample_time"] += line.sample_times
            for kind, name in (("exact", "exact_time"), ("stamped", "stamped_time"),
                               ("file", "file_time"), ("sample", "sample_time")):
                starts[kind].append(len(flat[name]))
        f = {name: _int64s(values) for name, values in flat.items()}
        s = {name: _int64s(values) for name, values in starts.items()}
        return (f["topic"], f["partition"], s["exact"], f["exact_time"], f["exact_end"],
                f["exact_src"], s["stamped"], f["stamped_time"], f["stamped_end"],
                f["stamped_src"], s["file"], f["file_time"], f["file_max"], f["file_max_time"],
                s["sample"], f["sample_time"])

    def walk(self, batches: Iterable[pa.RecordBatch]) -> Iterator[Walked]:
        group: str | None = None
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            ids = batch.column("group_id")
            changes = pc.not_equal(ids.slice(1), ids.slice(0, n - 1))
            bounds = [0, *(np.flatnonzero(changes.to_numpy(zero_copy_only=False)) + 1), n]
            saved = (batch.column("resume") if "resume" in batch.schema.names
                     else pa.nulls(n, pa.string()))
            columns = self._columns(batch)
            for start, stop in itertools.pairwise(bounds):
                name = ids[start].as_py()
                if name != group:
                    if group is not None:
                        yield from self._end(group)
                    resume = saved[start].as_py()
                    native.module.lag_walk_begin(self.capsule, None if resume is None else
                                                 self._saved(group_state(json.loads(resume))))
                    self.groups.append(name)
                    group = name
                    start += resume is not None
                native.module.lag_walk_feed(self.capsule,
                                            *(c[start:stop].data for c in columns))
            yield from self._take()
        if group is not None:
            yield from self._end(group)
            yield from self._take()

    def _columns(self, batch: pa.RecordBatch) -> list[np.ndarray[Any, Any]]:
        encoded = pc.dictionary_encode(batch.column("topic_id"))
        codes = np.array([self._code(t) for t in encoded.dictionary.to_pylist()] or [0],
                         dtype=np.int32)
        topic = np.ascontiguousarray(codes[_ints(encoded.indices)])
        start, complete, end = (batch.column(name) for name in (
            "start_offset", "complete", "state_end"))
        deleted = np.ascontiguousarray(
            pc.fill_null(batch.column("deleted"), False).to_numpy(zero_copy_only=False))
        return [topic, *(_ints(batch.column(name)) for name in (
            "partition", "state_partition", "record_offset", "time")), deleted,
            _ints(start), _valid(start), _ints(complete), _valid(complete), _ints(end),
            _valid(end)]

    def _saved(self, state: GroupState) -> tuple[int, list[tuple[Any, ...]]]:
        def lag(value: StateLag | None) -> tuple[Any, ...] | None:
            if value is None:
                return None
            e = value.estimate
            return (value.end_offset, e.end_offset, e.time, SOURCE_CODES.index(e.source),
                    e.exact, e.lower_bound, SOURCE_CODES.index(value.source), value.lag)

        return state.time, [(self._code(m.topic_id), m.partition, m.state, *m.last_offset,
                             lag(m.lag), m.at_sample) for m in state.members]

    def _end(self, group: str) -> Iterator[GroupState]:
        saved = native.module.lag_walk_end(self.capsule)
        if saved is None:
            return
        time, members = saved

        def lag(value: tuple[Any, ...] | None) -> StateLag | None:
            if value is None:
                return None
            end, est_end, est_time, est_src, exact, lower, source, lag = value
            return StateLag(end, Estimate(est_end, est_time, SOURCE_CODES[est_src],
                                          bool(exact), bool(lower)), SOURCE_CODES[source], lag)

        yield GroupState(group, time, tuple(sorted(
            MemberState(self.topics[topic], partition, state, (last_sp, last_offset),
                        lag(value), at_sample)
            for topic, partition, state, last_sp, last_offset, value, at_sample in members)))

    def _take(self) -> Iterator[pa.RecordBatch]:
        n, cols = native.module.lag_walk_take(self.capsule)
        if n:
            yield self._batch(cols)
        if self.groups:  # the rows taken are the older groups': keep the last one's name
            self.first += len(self.groups) - 1
            self.groups = self.groups[-1:]

    def _batch(self, cols: tuple[bytes, ...]) -> pa.RecordBatch:
        def ints(i: int, valid: np.ndarray[Any, Any], width: Any = np.int64) -> pa.Array:
            return pa.array(np.frombuffer(cols[i], np.int64).astype(width, copy=False),
                            mask=~valid)

        def flag(i: int) -> np.ndarray[Any, Any]:
            return np.frombuffer(cols[i], np.uint8).astype(bool)

        (kind, group, time, topic, partition, state_partition, offset, start, start_ok,
         complete, complete_ok, end, end_ok, end_time, end_time_ok, source, exact, lower, lag,
         lag_ok, partitions) = range(21)
        rows = np.frombuffer(cols[kind], np.uint8)
        whose = rows == 0  # share_partition rows
        topics = np.frombuffer(cols[topic], np.int32)
        topic_index = pa.array(topics, mask=topics < 0)
        sources = np.frombuffer(cols[source], np.int8)
        arrays = [
            pc.take(pa.array([SHARE_PARTITION, GROUP]), pa.array(rows)),
            pc.take(pa.array(self.groups, pa.string()),
                    pa.array(np.frombuffer(cols[group], np.int32) - self.first)),
            pa.array(np.frombuffer(cols[time], np.int64)),
            pc.take(pa.array(self.topics, pa.string()), topic_index),
            pc.take(pa.array([self.names.get(t) for t in self.topics], pa.string()),
                    topic_index),
            ints(partition, whose, np.int32), ints(state_partition, whose, np.int32),
            ints(offset, whose), ints(start, flag(start_ok)),
            ints(complete, flag(complete_ok)), ints(end, flag(end_ok)),
            ints(end_time, flag(end_time_ok)),
            pc.take(pa.array(SOURCE_CODES), pa.array(sources, mask=sources < 0)),
            pa.array(flag(exact)), pa.array(flag(lower)), ints(lag, flag(lag_ok)),
            pa.array(np.frombuffer(cols[partitions], np.int32)),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
