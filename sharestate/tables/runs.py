"""`ingest_runs` rows: the one place they are made."""

from __future__ import annotations

from collections.abc import Mapping
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
