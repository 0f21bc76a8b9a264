"""Prometheus exposition of the live state, built at scrape time under the shared lock."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sharestate.analytics.context import live_states
from sharestate.analytics.lag import ARCHIVED, LIVE, share_lag
from sharestate.app.serve.checkpoint import Checkpointer
from sharestate.app.serve.state import LiveState
from sharestate.app.serve.tailer import Fetched
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC

SHARE_LABELS = ["group", "topic", "partition"]
STATE_LABELS = ["state_topic", "state_partition"]


class StateCollector(Collector):
    """Per share-partition, per state-topic partition, per consumer-group partition and
    service gauges (names below are what the dashboard may use)."""

    def __init__(self, state: LiveState,
                 fetched: Callable[[], Mapping[tuple[str, int], Fetched]] = dict) -> None:
        self.state = state
        self.fetched = fetched

    def collect(self) -> Iterator[Metric]:
        state = self.state
        ends = state.end_offsets()
        share = {name: GaugeMetricFamily(f"sharestate_share_partition_{name}", text,
                                         labels=SHARE_LABELS) for name, text in (
            ("lag", "Records not yet acknowledged or archived (end offset - SPSO - done)"),
            ("start_offset", "Share-partition start offset (SPSO)"),
            ("in_flight_records", "Records at or above the SPSO in an in-flight batch"),
            ("archived_records", "Archived records at or above the SPSO"),
            ("max_delivery_count", "Highest delivery count among in-flight batches"),
            ("state_epoch", "Share-partition state epoch"))}
        prune = GaugeMetricFamily("sharestate_state_prune_offset",
                                  "Offset below which the state-topic partition can be pruned",
                                  labels=STATE_LABELS)
        committed = GaugeMetricFamily("sharestate_consumer_group_committed_offset",
                                      "Committed consumer-group offset", labels=SHARE_LABELS)
        group_lag = GaugeMetricFamily("sharestate_consumer_group_lag",
                                      "End offset - committed offset", labels=SHARE_LABELS)
        applied = CounterMetricFamily("sharestate_serve_records_applied",
                                      "Internal-topic records applied", labels=STATE_LABELS)
        errors = CounterMetricFamily("sharestate_serve_decode_errors",
                                     "Findings of records that did not decode or apply",
                                     labels=STATE_LABELS)
        behind = GaugeMetricFamily("sharestate_serve_records_behind",
                                   "Offsets between what was applied and the end seen at start",
                                   labels=STATE_LABELS)
        heard = GaugeMetricFamily("sharestate_serve_last_fetch_timestamp_seconds",
                                  "When the partition's leader last answered the consumer "
                                  "(every 0.5 s at least while it is up)", labels=STATE_LABELS)
        unapplied = GaugeMetricFamily("sharestate_serve_records_lag",
                                      "Records of the partition not yet applied (its end at "
                                      "the last fetch - the next offset to apply)",
                                      labels=STATE_LABELS)
        fetches = self.fetched()
        with state.lock:
            names = state.names()
            for (topic, partition), replay in state.replays.items():
                where = [topic, str(partition)]
                progress = replay.progress
                applied.add_metric(where, progress.records)
                behind.add_metric(where, max(state.start_ends.get((topic, partition), 0)
                                             - progress.position, 0))
                if (fetch := fetches.get((topic, partition))) is not None:
                    heard.add_metric(where, fetch.at)
                    unapplied.add_metric(where, max(fetch.end - progress.position, 0))
                result = replay.share_result or replay.group_result
                errors.add_metric(where, len(result.findings) if result is not None else 0)
                if topic == SHARE_STATE_TOPIC and (share_result := replay.share_result):
                    shard = share_result.shard
                    point = shard.last_redundant_offset()
                    if point is not None:
                        prune.add_metric(where, point)
                    for key, value in live_states(shard):
                        name = names.get(key.topic_id, key.topic_id)
                        end = ends.get((key.topic_id, key.partition),
                                       ends.get((name, key.partition)))
                        lag = share_lag(value, end, LIVE if end is not None else "state")
                        labels = [key.group_id, name, str(key.partition)]
                        if lag.lag is not None:
                            share["lag"].add_metric(labels, lag.lag)
                        share["start_offset"].add_metric(labels, lag.start_offset)
                        share["in_flight_records"].add_metric(
                            labels, sum(lag.records_by_state.values()))
                        share["archived_records"].add_metric(labels, lag.records(ARCHIVED))
                        if lag.max_delivery_count is not None:
                            share["max_delivery_count"].add_metric(labels,
                                                                   lag.max_delivery_count)
                        share["state_epoch"].add_metric(labels, value.state_epoch)
                elif topic == CONSUMER_OFFSETS_TOPIC and (group_result := replay.group_result):
                    offsets = group_result.coordinator.offsets
                    for (group, data_topic, data_partition), commit in offsets.committed():
                        labels = [group, data_topic, str(data_partition)]
                        committed.add_metric(labels, commit.committed_offset)
                        end = ends.get((data_topic, data_partition))
                        if end is not None:
                            group_lag.add_metric(labels, max(end - commit.committed_offset, 0))
        yield from share.values()
        yield from (prune, committed, group_lag, applied, errors, behind, heard, unapplied)


class CheckpointCollector(Collector):
    """The checkpoints: when the last was written, its size, how long it took, failures."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    def collect(self) -> Iterator[Metric]:
        writer = self.checkpointer
        if writer.written is not None:
            yield GaugeMetricFamily("sharestate_serve_checkpoint_last_written_timestamp_seconds",
                                    "When the last checkpoint was written", value=writer.written)
            yield GaugeMetricFamily("sharestate_serve_checkpoint_bytes",
                                    "Size of the last checkpoint", value=writer.size)
            yield GaugeMetricFamily("sharestate_serve_checkpoint_write_seconds",
                                    "How long writing the last checkpoint took",
                                    value=writer.took)
        yield CounterMetricFamily("sharestate_serve_checkpoint_failures",
                                  "Checkpoint writes that failed", value=writer.failures)


def registry(state: LiveState, checkpointer: Checkpointer | None = None,
             fetched: Callable[[], Mapping[tuple[str, int], Fetched]] = dict
             ) -> CollectorRegistry:
    """A registry holding only the service's own metrics (`fetched`: what the consumer last
    heard of each partition)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(StateCollector(state, fetched))
    if checkpointer is not None:
        found.register(CheckpointCollector(checkpointer))
    return found
