"""The data topics' end offsets the service read from its cluster, and when: what
`/v1/end-offsets` answers, for a pipeline run's `--end-offsets-from http://...`
(`topic_end_offsets` rows of source `serve`).

Each read is a request that ends some time after it starts, and the end offset it returns
held at some moment in between. Two reads returning the same end offset bracket a stretch
in which it held all along: from the end of the first to the start of the last (the end
offset never goes down). So reads are kept as runs of equal values, and a run read twice or
more gives two rows, the end offset at the start and at the end of that stretch (a lone
read gives none: when in its request the value held is not known). At most `RUNS` runs are
kept per partition, the oldest dropped first.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

RUNS = 10_000


class EndOffsetLog:
    """Runs of equal end offsets per (topic name or id, partition), as read."""

    def __init__(self, runs: int = RUNS) -> None:
        self._runs: dict[tuple[str, int], deque[list[int]]] = {}
        self._most = runs
        self._lock = threading.Lock()

    def add(self, asked_ms: int, answered_ms: int, ends: Mapping[tuple[str, int], int]) -> None:
        """A read that started at `asked_ms` and returned `ends` at `answered_ms`."""
        with self._lock:
            for where, end in ends.items():
                runs = self._runs.setdefault(where, deque(maxlen=self._most))
                if runs and runs[-1][2] == end:
                    runs[-1][1] = asked_ms  # held from the first read's answer to this ask
                else:
                    runs.append([answered_ms, -1, end])

    def rows(self, names: Mapping[str, str]) -> list[dict[str, Any]]:
        """The runs read twice or more as end-offset rows, for the topics whose id `names`
        names (id -> name)."""
        with self._lock:
            found = [(where, list(runs)) for where, runs in self._runs.items()
                     if where[0] in names]
        rows: list[dict[str, Any]] = []
        for (topic_id, partition), runs in sorted(found):
            for since, until, end in runs:
                if since <= until:
                    rows.extend({"topic": names[topic_id], "topic_id": topic_id,
                                 "partition": partition, "time": time, "end_offset": end}
                                for time in dict.fromkeys((since, until)))
        return rows
