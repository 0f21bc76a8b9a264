"""Logs that went back: what an ingest run read that contradicts what bronze already held.

Kafka only appends to a partition's log, deletes whole segments below its start, and (for a
compacted topic) rewrites segments keeping some of their records as they were. So a record
read again is the same bytes at the same offset. When the bytes at an offset differ from
what bronze holds, the log itself went back: the topic was deleted and created again, or
the log was truncated (an unclean leader election) and written anew. The same holds when a
`__share_group_state` segment read again ends before it ended (that topic is never
compacted: it was truncated). Such a partition is replayed from its log start, without the
rows read before the change at or above its offset (`BronzeFile.below`): they are of a log
that is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sharestate.records.catalog import SHARE_STATE_TOPIC

COMPARED = ("offset", "timestamp", "key", "value", "is_control")
"""What makes a record the same record (its batch may be rewritten by the cleaner)."""
WENT_BACK = "log went back at offset "
"""How an `ingest_runs` note names the offset from which a partition's log changed."""


class BronzeData(NamedTuple):
    """A `log_records` data file: where, its partition and segment, its offsets."""

    uri: str
    topic: str
    partition: int
    segment: int
    first_offset: int
    last_offset: int


class Change(NamedTuple):
    """Where a partition's log went back: the first offset that changed, and why."""

    topic: str
    partition: int
    segment: int
    offset: int
    reason: str


def changes(added: Sequence[BronzeData], held: Sequence[BronzeData],
            removed: Sequence[BronzeData]) -> list[Change]:
    """The partitions whose log went back, from the files a run `added` and those bronze
    `held` before it (`removed`: the files it replaced, earlier reads of the segments it read
    again). Only files whose offsets overlap are read."""
    found = []
    for (topic, partition), new in _by_partition(added).items():
        before = [f for f in held if (f.topic, f.partition) == (topic, partition)
                  and any(_overlap(f, n) for n in new)]
        change = _first_difference(new, before)
        if change is not None:
            found.append(Change(topic, partition, change[1], change[0],
                                "other bytes at the same offset than bronze held"))
            continue
        if topic == SHARE_STATE_TOPIC:
            for segment, files in _by_segment(new).items():
                was = [f.last_offset for f in removed if (f.topic, f.partition, f.segment)
                       == (topic, partition, segment)]
                now = max(f.last_offset for f in files)
                if was and max(was) > now:
                    found.append(Change(topic, partition, segment, now + 1,
                                        f"segment {segment} now ends at offset {now}, "
                                        f"read before up to {max(was)}"))
                    break
    return found


def _by_partition(files: Iterable[BronzeData]) -> dict[tuple[str, int], list[BronzeData]]:
    grouped: dict[tuple[str, int], list[BronzeData]] = {}
    for f in files:
        grouped.setdefault((f.topic, f.partition), []).append(f)
    return grouped


def _by_segment(files: Iterable[BronzeData]) -> dict[int, list[BronzeData]]:
    grouped: dict[int, list[BronzeData]] = {}
    for f in files:
        grouped.setdefault(f.segment, []).append(f)
    return grouped


def _overlap(a: BronzeData, b: BronzeData) -> bool:
    return a.first_offset <= b.last_offset and b.first_offset <= a.last_offset


def _read(files: Sequence[BronzeData]) -> pa.Table:
    tables = [pq.read_table(f.uri, columns=list(COMPARED)).append_column(
        "segment", pa.repeat(pa.scalar(f.segment, pa.int64()), pq.read_metadata(f.uri).num_rows))
        for f in files]
    data = pa.concat_tables(tables)
    return data.filter(pc.is_valid(data["offset"]))


def _first_difference(new: Sequence[BronzeData], old: Sequence[BronzeData]
                      ) -> tuple[int, int] | None:
    """(offset, segment of the new read) of the first offset held with other bytes."""
    if not old:
        return None
    fresh, held = _read(new), _read(old)
    joined = fresh.join(held, "offset", join_type="inner", left_suffix="_new",
                        right_suffix="_old")
    if not joined.num_rows:
        return None
    differs = np.zeros(joined.num_rows, dtype=bool)
    for column in COMPARED[1:]:
        a, b = joined[f"{column}_new"], joined[f"{column}_old"]
        same = pc.or_kleene(pc.equal(a, b), pc.and_(pc.is_null(a), pc.is_null(b)))
        differs |= ~same.fill_null(False).to_numpy(zero_copy_only=False)
    if not differs.any():
        return None
    changed = joined.filter(pa.array(differs)).sort_by("offset")
    return changed["offset"][0].as_py(), changed["segment_new"][0].as_py()


def went_back_note(change: Change) -> str:
    """The `ingest_runs` note of a change (`WENT_BACK` and its offset first)."""
    return f"{WENT_BACK}{change.offset}: {change.reason}"


def went_back_offset(note: str | None) -> int | None:
    """The offset an `ingest_runs` note says the log went back at (None: no such note)."""
    if note is None or not note.startswith(WENT_BACK):
        return None
    return int(note[len(WENT_BACK):].split(":", 1)[0])
