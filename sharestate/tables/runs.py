"""`ingest_runs` and `log_start_offsets` rows: the one place they are made (and read back)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def ingest_run_row(run_id: str, covered: Mapping[str, Any], *, findings: int,
                   size_and_time: tuple[int | None, int | None], note: str | None,
                   finished_at: int) -> dict[str, Any]:
    """What one ingest run read of one segment (or one live partition's chunk): `covered`
    holds its source, topic, partition, segment, first/last offset and records;
    `size_and_time` the file's size and modification time as the run saw them (None for a
    live source); `note` what a consumer of a live source cannot see (None: segment files)."""
    size, modified_ms = size_and_time
    return {"ingest_run": run_id, "job": "ingest", "source": covered["source"],
            "source_kind": "kafka" if note else "segments", "topic": covered["topic"],
            "partition": covered["partition"], "segment": covered["segment"],
            "first_offset": covered["first_offset"], "last_offset": covered["last_offset"],
            "bytes": size, "records": covered["records"], "findings": findings,
            "modified_ms": modified_ms, "note": note, "finished_at": finished_at}


def log_start_row(run_id: str, source: str, where: tuple[str, int], offset: int,
                  finished_at: int) -> dict[str, Any]:
    """A `log_start_offsets` row: Kafka's log start `offset` of partition `where` (topic,
    partition) as `source` (a log.dirs root, or kafka://...) gave it to run `run_id`."""
    topic, partition = where
    return {"ingest_run": run_id, "source": source, "topic": topic, "partition": partition,
            "log_start_offset": offset, "finished_at": finished_at}


def latest_log_starts(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[int, int]]:
    """Kafka's log start of each partition, by topic, from `log_start_offsets` rows: the
    latest run's (the largest if its sources differ); a partition without a row is absent."""
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for row in rows:
        key = (row["topic"], row["partition"])
        seen = (row["finished_at"], row["log_start_offset"])
        latest[key] = max(latest.get(key, seen), seen)
    starts: dict[str, dict[int, int]] = {}
    for (topic, partition), (_, offset) in latest.items():
        starts.setdefault(topic, {})[partition] = offset
    return starts


def usable_log_starts(starts: Mapping[str, Mapping[int, int]], ends: Mapping[tuple[str, int], int]
                      ) -> tuple[dict[str, dict[int, int]], list[str]]:
    """`starts` (`latest_log_starts`) but those past the end of their partition's log in
    bronze (`ends`: its largest offset + 1), and a line on each of these: a damaged
    checkpoint, or one of other segments, which the replay does not trust (it reads the
    partition from its first row, as the commands read the segments from their start)."""
    kept: dict[str, dict[int, int]] = {}
    refused = []
    for topic, partitions in sorted(starts.items()):
        for partition, start in sorted(partitions.items()):
            end = ends.get((topic, partition))
            if end is not None and start > end:
                refused.append(
                    f"{topic}-{partition}: log_start_past_end: the log start offset {start} "
                    f"ingest read (log_start_offsets) lies past the end of its log (offset "
                    f"{end}): a damaged log-start-offset-checkpoint, or not of these "
                    f"segments; the partition is replayed from its first record")
            else:
                kept.setdefault(topic, {})[partition] = start
    return kept, refused
