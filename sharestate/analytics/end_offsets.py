"""The data topics' end offsets through time: the `topic_end_offsets` rows, which times to
sample, and what the end offset of a partition was at a given time.

The end offset at time t is the next offset to be produced at t (Kafka's share-group lag
takes the partition's end offset as it is when asked). Each `topic_end_offsets` row is one
observation, from one source:

- `kafka` (exact for LogAppendTime topics): ListOffsets by timestamp on the live cluster,
  the first offset stamped at or after t;
- `segments` (exact for LogAppendTime topics): the same answer from the data topics'
  segment files (`sharestate.log.end_offsets`);
- `serve` (always exact): the end offsets `sharestate serve` read from its cluster as it
  ran, at the times it read them;
- `file` (never exact): an `--end-offsets` file, read at or before it was written (its
  modification time).

An exact row is the end offset at `time` by the broker's clock (LogAppendTime stamps are the
broker's append times). A CreateTime row (`exact` false, source `kafka` or `segments`) is
the end offset as the producers' timestamps place the records (see
`sharestate.log.end_offsets` for how that differs). A `file` row says only that the end
offset was at least that from `time` on.

`Timeline.at(t)` answers from a partition's rows: exact when an exact row is at t, or the
exact rows around t have the same end offset (the end offset never goes down, so nothing was
produced between them); else the CreateTime answer in the same way; else a lower bound (the
latest exact or file row before t).

**Which times are sampled.** The lag of a share group changes when its state changes, so
each partition is sampled at the state-change times of every share group consuming it, at
most `MAX_SAMPLES_PER_PARTITION` (and the latest) per partition and run: the times are put
on a grid of 2^k ms cells (k the least that leaves at most that many cells holding a time;
0, every time, when there are no more times than that) and the first time of each cell is
sampled, and the latest time. The grid
nests (a coarser one samples a subset of a finer one's times), so a re-run samples the same
times and a longer history only adds times at its end. Partitions consumed by the same
groups are sampled at the same times, so their groups' lag is exact there. A live cluster
answers one ListOffsets request per sampled rank, each covering every partition: at most
`MAX_SAMPLES_PER_PARTITION` + 1 requests per run.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

KAFKA: Final = "kafka"
SEGMENTS: Final = "segments"
SERVE: Final = "serve"
FILE: Final = "file"
STATE: Final = "state"
SOURCES: Final = (KAFKA, SEGMENTS, SERVE, FILE)
"""The sources of `topic_end_offsets` rows, the one preferred first when two disagree."""
LOG_APPEND_TIME: Final = "LogAppendTime"
CREATE_TIME: Final = "CreateTime"

MAX_SAMPLES_PER_PARTITION: Final = 1000
"""Sampled times per data topic partition and run (see the module docstring)."""

Where = tuple[str, int]
"""(topic id, partition)."""


def end_offset_row(topic: str | None, topic_id: str | None, partition: int, time: int,
                   end_offset: int, source: str, timestamp_type: str | None) -> dict[str, Any]:
    """One `topic_end_offsets` row; `exact` follows from the source and timestamp type."""
    if source not in SOURCES:
        raise ValueError(f"unknown end offset source {source!r}")
    exact = source == SERVE or (source in (KAFKA, SEGMENTS)
                                and timestamp_type == LOG_APPEND_TIME)
    return {"topic": topic, "topic_id": topic_id, "partition": partition, "time": time,
            "end_offset": end_offset, "source": source, "timestamp_type": timestamp_type,
            "exact": exact}


def merge_rows(old: Iterable[Mapping[str, Any]], new: Iterable[Mapping[str, Any]]
               ) -> list[dict[str, Any]]:
    """The table after a run: `new` rows replace old ones of the same (topic id or name,
    partition, time, source); the rest of `old` is kept (earlier runs' observations stay
    true after the records are gone). Of several `new` rows of one key, the largest end
    offset is kept: they are replicas of the partition (the log.dirs of several brokers),
    and the one that reaches furthest had the records the others had not yet copied.
    Sorted, so a re-run writes the same table."""
    merged = {_key(row): dict(row) for row in old}
    observed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in new:
        key = _key(row)
        if key not in observed or row["end_offset"] > observed[key]["end_offset"]:
            observed[key] = dict(row)
    merged.update(observed)
    return [merged[key] for key in sorted(merged)]


def _key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row["topic_id"] or "", row["topic"] or "", row["partition"], row["time"],
            row["source"])


def sample_level(times: Sequence[int], bound: int = MAX_SAMPLES_PER_PARTITION) -> int:
    """The least k whose 2^k ms cells holding one of `times` number at most `bound`."""
    if bound < 1:
        raise ValueError("bound must be at least 1")
    low, high = 0, 64  # the count of cells only falls as k grows: search it
    while low < high:
        middle = (low + high) // 2
        if len({t >> middle for t in times}) <= bound:
            high = middle
        else:
            low = middle + 1
    return low


def sampled(times: Iterable[int], bound: int = MAX_SAMPLES_PER_PARTITION) -> list[int]:
    """The times to sample among `times` (see the module docstring), ascending."""
    ordered = sorted(set(times))
    if not ordered:
        return []
    level = sample_level(ordered, bound)
    first: dict[int, int] = {}
    for t in ordered:
        first.setdefault(t >> level, t)
    return sorted({*first.values(), ordered[-1]})


def sample_times(consumers: Mapping[Where, Collection[str]],
                 group_times: Mapping[str, Collection[int]],
                 bound: int = MAX_SAMPLES_PER_PARTITION) -> dict[Where, list[int]]:
    """The times to sample each partition at: `sampled` over the state-change times of
    the groups consuming it (`consumers`: partition -> groups; `group_times`: group -> its
    state-change times); partitions consumed by the same groups share one answer."""
    answers: dict[frozenset[str], list[int]] = {}
    wanted = {}
    for where, groups in consumers.items():
        key = frozenset(groups)
        if key not in answers:
            answers[key] = sampled(set().union(*(group_times.get(g, ()) for g in key)), bound)
        wanted[where] = answers[key]
    return wanted


class Estimate(NamedTuple):
    """The end offset of a partition at a time, as far as the rows tell.

    `exact`: the end offset then. Neither exact nor `lower_bound`: the CreateTime answer.
    `lower_bound`: at least that (None: no row tells anything). `time` and `source` are the
    row's the value came from.
    """

    end_offset: int | None
    time: int | None
    source: str
    exact: bool
    lower_bound: bool


UNKNOWN: Final = Estimate(None, None, STATE, False, True)


@dataclass
class _Points:
    """Rows of one kind, by time (one per time: the preferred source's)."""

    times: list[int]
    ends: list[int]
    sources: list[str]

    @classmethod
    def of(cls, rows: list[tuple[int, int, str]]) -> _Points:
        chosen: dict[int, tuple[int, str]] = {}
        for time, end, source in sorted(rows, key=lambda r: (r[0], SOURCES.index(r[2]))):
            chosen.setdefault(time, (end, source))
        times = sorted(chosen)
        return cls(times, [chosen[t][0] for t in times], [chosen[t][1] for t in times])

    def bracket(self, t: int) -> tuple[int, bool] | None:
        """(index of the last row at or before t, whether the value holds at t)."""
        i = bisect_right(self.times, t) - 1
        if i < 0:
            return None
        holds = self.times[i] == t or (i + 1 < len(self.times)
                                       and self.ends[i + 1] == self.ends[i])
        return i, holds


class Timeline:
    """The `topic_end_offsets` rows of one partition, answering `at(t)`."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        exact, stamped, files = [], [], []
        for row in rows:
            point = (int(row["time"]), int(row["end_offset"]), str(row["source"]))
            if row["exact"]:
                exact.append(point)
            elif row["source"] == FILE:
                files.append(point)
            else:
                stamped.append(point)
        self.exact = _Points.of(exact)
        self.stamped = _Points.of(stamped)
        self.files = _Points.of(files)
        self.file_maxima: list[int] = []
        """The highest file value at or before each file row's time."""
        for end in self.files.ends:
            self.file_maxima.append(max(end, self.file_maxima[-1]) if self.file_maxima else end)

    @property
    def sample_times(self) -> list[int]:
        """The times of the rows that can make a lag exact or CreateTime-based."""
        return sorted({*self.exact.times, *self.stamped.times})

    def at(self, t: int) -> Estimate:
        """The end offset at `t` (see the module docstring)."""
        found = self.exact.bracket(t)
        if found is not None and found[1]:
            i = found[0]
            return Estimate(self.exact.ends[i], self.exact.times[i], self.exact.sources[i],
                            True, False)
        stamped = self.stamped.bracket(t)
        if stamped is not None and stamped[1]:
            i = stamped[0]
            return Estimate(self.stamped.ends[i], self.stamped.times[i],
                            self.stamped.sources[i], False, False)
        best: Estimate = UNKNOWN
        if found is not None:
            i = found[0]
            best = Estimate(self.exact.ends[i], self.exact.times[i], self.exact.sources[i],
                            False, True)
        j = bisect_right(self.files.times, t) - 1
        if j >= 0 and (best.end_offset is None or self.file_maxima[j] > best.end_offset):
            k = self.files.ends.index(self.file_maxima[j])
            best = Estimate(self.file_maxima[j], self.files.times[k], FILE, False, True)
        return best


def timelines(rows: Iterable[Mapping[str, Any]],
              ids: Mapping[str, str] | None = None) -> dict[Where, Timeline]:
    """A timeline per (topic id, partition) from `topic_end_offsets` rows; a row with only
    a topic name is filed under the id `ids` gives that name (name -> id), else dropped."""
    by_where: dict[Where, list[Mapping[str, Any]]] = {}
    for row in rows:
        topic_id = row["topic_id"] or (ids or {}).get(row["topic"] or "")
        if topic_id is not None:
            by_where.setdefault((topic_id, int(row["partition"])), []).append(row)
    return {where: Timeline(found) for where, found in by_where.items()}
