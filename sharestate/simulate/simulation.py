"""What a simulation is asked to do (`SimulationConfig`) and what it produced
(`SimulationResult`); `simulator.simulate` runs it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from sharestate.coordinator.share_state import ShareKey
from sharestate.log import COMPRESSION_NAMES, DEFAULT_SEGMENT_BYTES
from sharestate.persister.persister import Persister
from sharestate.persister.state_view import KeyState, shard_states
from sharestate.persister.writer_rules import writer_rules_for
from sharestate.records.catalog import SHARE_STATE_TOPIC


@dataclass(frozen=True)
class SimulationConfig:
    """What to simulate; `records` is the target number of `__share_group_state` records."""

    records: int = 100_000
    groups: int = 3
    topics: int = 3
    partitions: int = 3
    state_partitions: int = 3
    offsets_partitions: int = 3
    codec: str = "none"
    batch_records: int = 10
    linger_ms: int = 5
    seed: int = 0
    snapshot_limit: int = 500
    cold_interval_ms: int = 300_000
    dialect: str = "4.1"
    max_delivery_count: int = 5
    lock_timeout_ms: int = 30_000
    max_in_flight: int = 500
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    orphaned_state: bool = False
    stuck_deleting: bool = False
    poison_rate: float = 0.0
    """Fraction of produced records no consumer can process (the same ones for every group):
    released on each delivery until Kafka archives them at the delivery limit."""
    data_topics: bool = False
    """Write the data topics' partitions too (`data_writer`): their end offsets through
    time for the lag history, offline."""

    def check(self) -> None:
        """Raise ValueError for settings that cannot be simulated."""
        positive = {"records": self.records, "groups": self.groups, "topics": self.topics,
                    "partitions": self.partitions, "state_partitions": self.state_partitions,
                    "offsets_partitions": self.offsets_partitions,
                    "batch_records": self.batch_records, "cold_interval_ms": self.cold_interval_ms,
                    "max_delivery_count": self.max_delivery_count,
                    "lock_timeout_ms": self.lock_timeout_ms, "max_in_flight": self.max_in_flight,
                    "segment_bytes": self.segment_bytes}
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        if not 0 <= self.poison_rate < 1:
            raise ValueError(f"poison_rate must be in [0, 1), not {self.poison_rate}")
        if self.snapshot_limit < 0 or self.linger_ms < 0:
            raise ValueError("snapshot_limit and linger_ms cannot be negative")
        if self.codec not in COMPRESSION_NAMES:
            raise ValueError(f"unknown codec {self.codec!r}; known: {', '.join(COMPRESSION_NAMES)}")
        try:
            rules = writer_rules_for(self.dialect)
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        if self.stuck_deleting and not rules.lifecycle_operations:
            raise ValueError(f"dialect {self.dialect} has no share-partition deletion")


@dataclass
class SimulationResult:
    """What a simulation wrote, and the writers' final state."""

    config: SimulationConfig
    root: Path
    records: int
    batches: int
    bytes: int
    segments: int
    offsets_records: int
    seconds: float
    persisters: dict[int, Persister]
    """The writer of each `__share_group_state` partition that received records."""
    expected_offsets: dict[tuple[str, str, int], int]
    """Committed offsets a `__consumer_offsets` loader must end with."""
    operations: Counter[str] = field(default_factory=Counter)
    """Requests by operation (and `op:errorNN` for refused ones)."""
    end_offsets: list[dict[str, object]] = field(default_factory=list)
    """The user topics' end offsets at the end: {topic, topic_id, partition, end_offset}."""
    data_ends: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)
    """With `data_topics`: (topic id, partition) -> (append time, end offset after the
    records appended then), in time order, for every topic that existed."""

    def write_end_offsets(self, path: str | Path) -> Path:
        """The end offsets as the `--end-offsets` JSON file the pipeline's lag reads."""
        target = Path(path)
        target.write_text(json.dumps(
            [{"topic": e["topic_id"], "partition": e["partition"],
              "end_offset": e["end_offset"]} for e in self.end_offsets], indent=1),
            encoding="utf-8")
        return target

    def final_state(self) -> dict[int, dict[ShareKey, KeyState]]:
        """Per state partition, every live key's state as the writer holds it."""
        return {p: shard_states(persister.shard) for p, persister in self.persisters.items()}

    def summary_line(self) -> str:
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        return (f"{self.records} records in {self.batches} batches, {self.bytes} bytes, "
                f"{self.segments} segments ({SHARE_STATE_TOPIC}); {self.offsets_records} "
                f"__consumer_offsets records; {self.seconds:.2f} s ({rate:,.0f} records/s)")


DEMO_POISON_RATE = 0.002
"""Records no consumer can process in the demo: archived once delivered 5 times (the
delivery limit the demo runs with)."""


def demo_config(records: int, seed: int) -> SimulationConfig:
    """The demo's world (`make demo`, the class archive's run): three of everything, lz4,
    cold snapshots, poison records, an orphaned share-partition, a topic stuck deleting,
    and the data topics' partitions."""
    return SimulationConfig(records=records, seed=seed, groups=3, topics=3, partitions=3,
                            state_partitions=3, offsets_partitions=2, batch_records=8,
                            codec="lz4", cold_interval_ms=60_000, orphaned_state=True,
                            stuck_deleting=True, poison_rate=DEMO_POISON_RATE, data_topics=True)
