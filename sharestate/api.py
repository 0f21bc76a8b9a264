"""sharestate as a library: what the command line answers, as Arrow tables.

Every function takes the sources the command line takes — segment files, partition
directories, a `log.dirs` root, any folder of segments (`.log` and `.log.gz`; what a folder
holds that is not read is a warning) — and returns a `pyarrow.Table` whose
columns are those of the Delta table of the same name (`schemas/tables/<name>.json`), so a
notebook's answer and the pipeline's agree. pandas is `.to_pandas()` away, Spark
`spark.createDataFrame(table)`::

    from sharestate import api

    states = api.share_partition_states("/var/kafka-logs", as_of_time="2026-11-21T10:00:00Z")
    states.to_pandas()
    api.prune_points("/var/kafka-logs").select(["state_partition", "prune_offset"])

Nothing here starts Spark; `register_views` is for a session the caller already has. What a
replay cannot read (damaged batches, unknown records) is in `read_log(...).decode_errors`;
the state functions apply everything else, as Kafka's coordinator does.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Generic, NamedTuple, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import DEFAULT_LIMITS, LogFinding, ReadLimits, Segment, discover
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.replay.group_log import GroupLogResult, GroupReplay, replay_group_log
from sharestate.replay.logs import AsOf, PartitionLog, loose_logs, parse_time, partition_logs
from sharestate.replay.loose_partitions import loose_partitions
from sharestate.replay.prune import prune_recommendation
from sharestate.replay.rows import offset_rows
from sharestate.replay.share_log import ShareLogResult, ShareReplay, replay_share_log
from sharestate.replay.snapshot import Snapshot
from sharestate.tables.gold import state_batch
from sharestate.tables.spec import table
from sharestate.tables.tasks import SPLITS, ingest_splits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Sources = str | Path | Iterable[str | Path]
"""One source or several."""
When = int | str | datetime | None
"""A point in time: epoch ms, ISO 8601 text (naive = UTC) or a datetime."""
R = TypeVar("R", ShareLogResult, GroupLogResult)

__all__ = [
    "LogTables",
    "Replayed",
    "as_of",
    "consumer_group_offsets",
    "prune_points",
    "read_log",
    "register_views",
    "replay_offsets",
    "replay_share",
    "replay_snapshots",
    "share_partition_states",
]


class LogTables(NamedTuple):
    """Every record of the sources, in the shapes of the bronze and silver tables."""

    log_records: pa.Table
    decode_errors: pa.Table
    share_state_records: pa.Table
    group_records: pa.Table


class Replayed(NamedTuple, Generic[R]):
    """Replayed partition logs of one topic, and the findings of segments whose topic could
    not be told (they belong to no log)."""

    results: list[R]
    unreadable: list[LogFinding]


def _paths(sources: Sources) -> list[str]:
    if isinstance(sources, str | Path):
        return [str(sources)]
    return [str(source) for source in sources]


def _segments(sources: Sources) -> list[Segment]:
    """The sources' segments; what a folder held that is not read, as a warning."""
    return discover(_paths(sources), say=warnings.warn)


def as_of(offset: int | None = None, time: When = None) -> AsOf:
    """The stop point: after offset `offset`, or after the records up to `time`."""
    if isinstance(time, datetime):
        time = parse_time(time.isoformat())
    elif isinstance(time, str):
        time = parse_time(time)
    return AsOf(offset=offset, time=time)


def _logs(sources: Sources, topic: str, dialect: str | None, limits: ReadLimits
          ) -> tuple[list[PartitionLog], list[LogFinding]]:
    logs, unknown = partition_logs(_segments(sources), dialect=dialect, limits=limits)
    return [log for log in logs if log.topic == topic], unknown


def replay_share(sources: Sources, *, as_of_offset: int | None = None, as_of_time: When = None,
                 semantics: str = KAFKA, dialect: str | None = None,
                 snapshot_update_records: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                 limits: ReadLimits = DEFAULT_LIMITS) -> Replayed[ShareLogResult]:
    """Each `__share_group_state` partition of the sources replayed up to the stop point
    (the whole log without one) with Kafka's share-coordinator semantics."""
    logs, unknown = _logs(sources, SHARE_STATE_TOPIC, dialect, limits)
    point = as_of(as_of_offset, as_of_time)
    return Replayed([replay_share_log(log, as_of=point, semantics=semantics,
                                      snapshot_update_records_per_snapshot=snapshot_update_records)
                     for log in logs], unknown)


def replay_offsets(sources: Sources, *, as_of_offset: int | None = None,
                   as_of_time: When = None, dialect: str | None = None,
                   limits: ReadLimits = DEFAULT_LIMITS) -> Replayed[GroupLogResult]:
    """Each `__consumer_offsets` partition of the sources replayed up to the stop point with
    the group coordinator's semantics (transactional commits, tombstones, group metadata)."""
    logs, unknown = _logs(sources, CONSUMER_OFFSETS_TOPIC, dialect, limits)
    point = as_of(as_of_offset, as_of_time)
    return Replayed([replay_group_log(log, as_of=point) for log in logs], unknown)


def replay_snapshots(sources: Sources, *, as_of_offset: int | None = None,
                     as_of_time: When = None, semantics: str = KAFKA,
                     dialect: str | None = None,
                     snapshot_update_records: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                     limits: ReadLimits = DEFAULT_LIMITS) -> list[Snapshot]:
    """Each internal-topic partition of the sources (both topics) replayed up to the stop
    point, as its snapshot: the replay's whole state as versioned Arrow tables
    (`snapshot.tables`, schemas in `schemas/state/`; docs/replay-state.md), as the live
    service checkpoints it."""
    logs, _ = partition_logs(discover(_paths(sources)), dialect=dialect, limits=limits)
    point = as_of(as_of_offset, as_of_time)
    taken = []
    for log in logs:
        if log.topic == SHARE_STATE_TOPIC:
            share = ShareReplay.of_log(log, as_of=point, semantics=semantics,
                                       snapshot_update_records_per_snapshot=(
                                           snapshot_update_records))
            share.run(log.items())
            taken.append(share.snapshot())
        elif log.topic == CONSUMER_OFFSETS_TOPIC:
            group = GroupReplay.of_log(log, as_of=point)
            group.run(log.batches())
            taken.append(group.snapshot())
    return taken


def share_partition_states(sources: Sources, *, as_of_offset: int | None = None,
                           as_of_time: When = None, semantics: str = KAFKA,
                           group: str | None = None) -> pa.Table:
    """Every live share-partition as of the stop point: `share_partition_state` rows."""
    batches = [state_batch(result) for result in replay_share(sources, as_of_offset=as_of_offset,
                                          as_of_time=as_of_time, semantics=semantics).results]
    states = pa.Table.from_batches(batches, schema=table("share_partition_state").arrow_schema())
    if group is not None:
        states = states.filter(pc.equal(states["group_id"], group))
    return states


def prune_points(sources: Sources, *, as_of_offset: int | None = None,
                 as_of_time: When = None, semantics: str = KAFKA) -> pa.Table:
    """Kafka's prune point per state-topic partition, what holds it back and what a cold
    snapshot would free: `prune_recommendations` rows."""
    rows = [prune_recommendation(result) for result in replay_share(
        sources, as_of_offset=as_of_offset, as_of_time=as_of_time, semantics=semantics).results]
    return pa.Table.from_pylist(rows, schema=table("prune_recommendations").arrow_schema())


OFFSETS = pa.schema([
    ("group_id", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
    ("topic_id", pa.string()), ("committed_offset", pa.int64()), ("leader_epoch", pa.int32()),
    ("metadata", pa.string()), ("commit_timestamp", pa.int64()),
    ("expire_timestamp", pa.int64()), ("record_offset", pa.int64()),
    ("producer_id", pa.int64()), ("state", pa.string()), ("expires_at", pa.int64()),
    ("expiry_reason", pa.string())])
"""The columns of `sharestate offsets` lines: each offset as of the stop point (the
`consumer_group_offsets` table is their history)."""


def consumer_group_offsets(sources: Sources, *, as_of_offset: int | None = None,
                           as_of_time: When = None, group: str | None = None,
                           pending: bool = False,
                           retention_minutes: int = DEFAULT_RETENTION_MINUTES) -> pa.Table:
    """Committed consumer-group offsets as of the stop point, each with its KIP-211 expiry
    forecast (`pending`: open transactional commits too, state `pending:<producer id>`)."""
    rows = []
    for result in replay_offsets(sources, as_of_offset=as_of_offset,
                                 as_of_time=as_of_time).results:
        rows.extend(offset_rows(result.coordinator, retention_minutes, group=group,
                                pending=pending))
    return pa.Table.from_pylist(rows, schema=OFFSETS)


def read_log(sources: Sources, *, limits: ReadLimits = DEFAULT_LIMITS,
             run_id: str = "api") -> LogTables:
    """Every record of the sources' segments (`log_records`), what could not be read
    (`decode_errors`), and the decoded records (`share_state_records`, `group_records`), a
    log that names no partition numbered as a fresh pipeline run numbers it
    (`loose_partitions`). Holds the whole input in memory: for large logs, run the
    pipeline."""
    segments = _segments(sources)
    paths = [str(segment.path) for segment in segments]
    numbers = loose_partitions(loose_logs(segments), {})
    splits = pa.RecordBatch.from_pydict(
        {"path": paths, "start": [0] * len(paths), "end": [None] * len(paths),
         "partition": [numbers.get(path, (None, None))[1] for path in paths]}, schema=SPLITS)
    found: dict[str, list[pa.RecordBatch]] = {name: [] for name in LogTables._fields}
    for name, rows in ingest_splits(iter([splits]), run_id, silver=True, limits=limits):
        found[name].append(rows)
    return LogTables(*(_in_schema(found[name], table(name).arrow_schema())
                       for name in LogTables._fields))


def _in_schema(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """`batches` as a table of the Delta table's schema (its non-null columns declared)."""
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).select(schema.names).cast(schema)


def register_views(spark: SparkSession, warehouse: str | Path,
                   backend: str | None = None) -> list[str]:
    """Register each Delta table of `warehouse` as a temporary view of `spark` under its
    name (`SELECT * FROM share_group_lag`); the names, sorted."""
    from sharestate.lake.sql_views import register_views as register

    return register(spark, warehouse, backend)
