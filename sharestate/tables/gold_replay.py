"""The gold pass: replay bronze rows of each internal-topic partition into every gold table.

What a replay task runs on an executor. Its input is the bronze `log_records` rows of one
topic, ordered by (partition, offset); it replays each partition with the shared core and
yields record batches in the *gold staging* schema — the union of the gold tables' columns
plus `gold_table`, naming the table a row belongs to — so one pass over the log feeds every
table. The job then splits the staging rows by `gold_table`.

- `__share_group_state` partitions give `share_partition_state_history` (streamed while the
  replay runs), `share_partition_state`, `share_group_lag`, `redelivery`,
  `prune_recommendations` and the per-record `audit_findings`.
- `__consumer_offsets` partitions give `consumer_group_offsets`, `share_group_partitions`
  (the share groups' state-partition metadata the cross-topic audits and topic names need)
  and their `audit_findings` (aborted transactions). Records that did not decode are in
  `decode_errors` already; the analytics job turns those into `decode_error` findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

import pyarrow as pa

from sharestate.analytics.audit import ShareAuditor, TransactionAuditor, shard_finding_rows
from sharestate.analytics.context import StateContext, live_states
from sharestate.analytics.lag import FILE, lag_rows
from sharestate.analytics.offsets import OffsetHistory
from sharestate.analytics.prune import prune_recommendation
from sharestate.analytics.redelivery import redelivery_rows
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.log import Finding
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.segment import DecodedBatch
from sharestate.replay.group_log import replay_group_log
from sharestate.replay.logs import END, AsOf
from sharestate.replay.share_log import HistoryEntry, ShareReplay
from sharestate.tables.arrow_log import ArrowLog
from sharestate.tables.gold import history_batch, state_batch
from sharestate.tables.metadata import metadata_rows
from sharestate.tables.spec import table

SHARE_GOLD = ("share_partition_state_history", "share_partition_state", "share_group_lag",
              "redelivery", "prune_recommendations", "audit_findings")
GROUP_GOLD = ("consumer_group_offsets", "share_group_partitions", "audit_findings")
HISTORY_ROWS = 65_536


def staging_schema() -> pa.Schema:
    """The union of the gold tables' columns (all nullable) and `gold_table`."""
    fields: dict[str, pa.Field] = {}
    for name in dict.fromkeys(SHARE_GOLD + GROUP_GOLD):
        for f in table(name).arrow_schema():
            known = fields.get(f.name)
            if known is not None and known.type != f.type:
                raise TypeError(f"column {f.name} differs in type across gold tables")
            fields[f.name] = f.with_nullable(True)
    return pa.schema([*fields.values(), pa.field("gold_table", pa.string(), nullable=False)])


STAGING = staging_schema()


def staged(name: str, batch: pa.RecordBatch | list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows of table `name` (a record batch or row dicts) in the staging schema."""
    if isinstance(batch, list):
        batch = pa.RecordBatch.from_pylist(batch, schema=table(name).arrow_schema()) \
            if batch else pa.RecordBatch.from_pylist([], schema=table(name).arrow_schema())
    n = batch.num_rows
    arrays = [batch.column(f.name) if f.name in batch.schema.names else pa.nulls(n, f.type)
              for f in STAGING if f.name != "gold_table"]
    return pa.RecordBatch.from_arrays([*arrays, pa.array([name] * n, pa.string())],
                                      schema=STAGING)


@dataclass(frozen=True)
class GoldOptions:
    """How the gold pass replays: stop point, semantics, Kafka config, lag inputs."""

    as_of: AsOf = END
    semantics: str = KAFKA
    snapshot_update_records_per_snapshot: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
    end_offsets: Mapping[tuple[str, int], int] | None = None
    end_offset_source: str = FILE
    topic_names: Mapping[str, str] = field(default_factory=dict)
    delivery_limit: int | None = None
    retention_minutes: int = 10080


def _partitions(rows: Iterable[pa.RecordBatch]
                ) -> Iterator[tuple[int, Iterator[pa.RecordBatch]]]:
    """(partition, its row slices) for rows ordered by partition, lazily."""
    def pieces() -> Iterator[tuple[int, pa.RecordBatch]]:
        for batch in rows:
            values = batch.column("partition").to_pylist()
            start = 0
            for i in range(1, len(values) + 1):
                if i == len(values) or values[i] != values[start]:
                    yield values[start], batch.slice(start, i - start)
                    start = i

    for partition, group in groupby(pieces(), key=lambda piece: piece[0]):
        yield partition, (piece for _, piece in group)


def _first_dialect(slices: Iterator[pa.RecordBatch]) -> tuple[str, Iterator[pa.RecordBatch]]:
    first = next(slices)
    dialect = first.column("dialect")[0].as_py()

    def chained() -> Iterator[pa.RecordBatch]:
        yield first
        yield from slices

    return dialect, chained()


def _tee(batches: Iterator[DecodedBatch | Finding], auditor: ShareAuditor | TransactionAuditor,
         as_of: AsOf) -> Iterator[DecodedBatch | Finding]:
    for item in batches:
        if isinstance(item, Finding) or not item.records \
                or not as_of.passed(item.records[0].offset, item.records[0].timestamp):
            auditor.batch(item)
        yield item


class _AuditedLog:
    """An `ArrowLog` whose batches also feed an auditor."""

    def __init__(self, log: ArrowLog, auditor: ShareAuditor | TransactionAuditor,
                 as_of: AsOf) -> None:
        self.log = log
        self.auditor = auditor
        self.as_of = as_of
        self.topic = log.topic
        self.partition = log.partition
        self.name = log.name
        self.dialects = log.dialects

    def batches(self) -> Iterator[DecodedBatch | Finding]:
        return _tee(self.log.batches(), self.auditor, self.as_of)


def share_gold(rows: Iterable[pa.RecordBatch], options: GoldOptions, *, history: bool = True,
               summary: bool = True) -> Iterator[pa.RecordBatch]:
    """Gold staging batches for bronze rows of `__share_group_state` (see the module).

    `history` yields the history rows, `summary` every other table's; a job may replay
    twice to write the big history table first and the small ones after, without keeping
    the history around.
    """
    for partition, slices in _partitions(rows):
        dialect, slices = _first_dialect(slices)
        auditor = ShareAuditor(partition)
        arrow_log = ArrowLog(SHARE_STATE_TOPIC, partition, slices, dialect)
        log: ArrowLog | _AuditedLog = (_AuditedLog(arrow_log, auditor, options.as_of)
                                       if summary else arrow_log)
        replay = ShareReplay(log, as_of=options.as_of, semantics=options.semantics,
                             snapshot_update_records_per_snapshot=(
                                 options.snapshot_update_records_per_snapshot),
                             collect_history=history)
        pending: list[HistoryEntry] = []
        for entries in replay.steps():
            pending.extend(entries)
            if len(pending) >= HISTORY_ROWS:
                yield staged(SHARE_GOLD[0], history_batch(pending, SHARE_STATE_TOPIC,
                                                          partition, dialect))
                pending = []
        if pending:
            yield staged(SHARE_GOLD[0], history_batch(pending, SHARE_STATE_TOPIC, partition,
                                                      dialect))
        if not summary:
            continue
        result = replay.result
        context = StateContext.of(result)
        yield staged("share_partition_state", state_batch(result, partition))
        yield staged("share_group_lag", list(lag_rows(
            live_states(result.shard), context, end_offsets=options.end_offsets,
            end_offset_source=options.end_offset_source, names=options.topic_names)))
        yield staged("redelivery", list(redelivery_rows(
            live_states(result.shard), context, delivery_limit=options.delivery_limit)))
        yield staged("prune_recommendations", [prune_recommendation(result)])
        yield staged("audit_findings", [
            *auditor.drain(), *shard_finding_rows(result.shard.findings, partition)])


def group_gold(rows: Iterable[pa.RecordBatch], options: GoldOptions) -> Iterator[pa.RecordBatch]:
    """Gold staging batches for bronze rows of `__consumer_offsets` (see the module)."""
    for partition, slices in _partitions(rows):
        dialect, slices = _first_dialect(slices)
        history = OffsetHistory(partition)
        auditor = TransactionAuditor(CONSUMER_OFFSETS_TOPIC, partition)
        log = _AuditedLog(ArrowLog(CONSUMER_OFFSETS_TOPIC, partition, slices, dialect),
                          auditor, options.as_of)
        result = replay_group_log(log, as_of=options.as_of, listener=history)
        coordinator = result.coordinator
        offsets_rows = history.drain() + history.finish(
            coordinator.offsets, coordinator.groups.groups, options.retention_minutes)
        yield staged("consumer_group_offsets", offsets_rows)
        yield staged("audit_findings", auditor.drain())
        yield staged("share_group_partitions",
                     metadata_rows(coordinator.groups.share_partitions, partition))


def read_partition_files(partition: int, uris: list[str]) -> Iterator[pa.RecordBatch]:
    """Bronze rows of one topic-partition from its data files (ordered by segment and first
    offset), with the `partition` column the gold passes group by; in offset order."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from sharestate.tables.arrow_log import COLUMNS

    for uri in uris:
        rows = pq.read_table(uri, columns=[*COLUMNS, "dialect"])
        rows = rows.filter(pc.is_valid(rows["offset"]))
        offsets = rows["offset"]
        if len(offsets) > 1 and not pc.all(pc.greater(offsets[1:], offsets[:-1])).as_py():
            rows = rows.sort_by("offset")
        rows = rows.append_column("partition", pa.array([partition] * rows.num_rows,
                                                        pa.int32()))
        yield from rows.to_batches(max_chunksize=HISTORY_ROWS)
