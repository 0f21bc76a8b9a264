"""The data topics' end offsets the service reads from its cluster (for lag: `DataTopicEnds`,
on the readers' side, reused for `END_OFFSETS_TTL_S`), and when: what `/v1/end-offsets`
answers, for a pipeline run's `--end-offsets-from http://...` (`topic_end_offsets` rows of
source `serve`).

Each read is a request that ends some time after it starts, and the end offset it returns
held at some moment in between. Two reads returning the same end offset bracket a stretch
in which it held all along: from the end of the first to the start of the last (the end
offset never goes down). So reads are kept as runs of equal values, and a run read twice or
more gives two rows, the end offset at the start and at the end of that stretch (a lone
read gives none: when in its request the value held is not known). At most `RUNS` runs are
kept per partition, the oldest dropped first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from sharestate.analytics.lag import EndOffsets
from sharestate.cluster import KafkaSourceError

RUNS = 10_000
END_OFFSETS_TTL_S = 2.0
"""How long fetched data-topic end offsets are reused (lag, metrics)."""
LOG = logging.getLogger("sharestate.serve")


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


class DataTopicEnds:
    """The data topics' end offsets from the cluster (`fetch`), as readers ask for them:
    one read reused for `END_OFFSETS_TTL_S`, every read kept in `log`."""

    def __init__(self, fetch: Callable[[], EndOffsets]) -> None:
        self.fetch = fetch
        self.log = EndOffsetLog()
        self._lock = threading.Lock()
        self._read: tuple[float, EndOffsets] | None = None

    def __call__(self) -> EndOffsets:
        """The end offsets; none when the cluster does not answer (lag is then the state's
        lower bound, and says so), with a warning."""
        with self._lock:
            now = time.monotonic()
            if self._read is None or now - self._read[0] > END_OFFSETS_TTL_S:
                asked = int(time.time() * 1000)
                try:
                    ends = self.fetch()
                except KafkaSourceError as exc:
                    LOG.warning("%s: lag is a lower bound from the state", exc)
                    ends = {}
                self.log.add(asked, int(time.time() * 1000), ends)
                self._read = (now, ends)
            return self._read[1]

    def rows(self, names: Mapping[str, str]) -> list[dict[str, Any]]:
        """The end offsets read so far (a read now included), as `EndOffsetLog.rows`."""
        self()
        return self.log.rows(names)
