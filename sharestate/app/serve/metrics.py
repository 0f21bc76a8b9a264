"""Prometheus exposition of the service, built at scrape time from one published view (as
client_python's custom collectors do), with the view functions every other answer uses."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from sharestate.analytics.context import live_states
from sharestate.analytics.lag import ARCHIVED, LIVE, STATE, EndOffsets, end_offset, share_lag
from sharestate.app.serve.checkpoint import Checkpointer
from sharestate.app.serve.view import View, prune

SHARE_LABELS = ["group", "topic", "partition"]
STATE_LABELS = ["state_topic", "state_partition"]


class StateCollector(Collector):
    """Per share-partition, per state-topic partition, per consumer-group partition and
    service gauges (names below are what the dashboard may use), from the view `current()`
    returns at the scrape and the data topics' end offsets `ends()` returns."""

    def __init__(self, current: Callable[[], View], ends: Callable[[], EndOffsets]) -> None:
        self.current = current
        self.ends = ends

    def collect(self) -> Iterator[Metric]:
        view = self.current()
        ends = self.ends()
        share = {name: GaugeMetricFamily(f"sharestate_share_partition_{name}", text,
                                         labels=SHARE_LABELS) for name, text in (
            ("lag", "Records not yet acknowledged or archived (end offset - SPSO - done)"),
            ("start_offset", "Share-partition start offset (SPSO)"),
            ("in_flight_records", "Records at or above the SPSO in an in-flight batch"),
            ("archived_records", "Archived records at or above the SPSO"),
            ("max_delivery_count", "Highest delivery count among in-flight batches"),
            ("state_epoch", "Share-partition state epoch"))}
        prune_offset = GaugeMetricFamily(
            "sharestate_state_prune_offset",
            "Offset below which the state-topic partition can be pruned", labels=STATE_LABELS)
        committed = GaugeMetricFamily("sharestate_consumer_group_committed_offset",
                                      "Committed consumer-group offset", labels=SHARE_LABELS)
        group_lag = GaugeMetricFamily("sharestate_consumer_group_lag",
                                      "End offset - committed offset", labels=SHARE_LABELS)
        applied = CounterMetricFamily("sharestate_serve_records_applied",
                                      "Internal-topic records applied", labels=STATE_LABELS)
        errors = CounterMetricFamily("sharestate_serve_decode_errors",
                                     "Findings of records that did not decode or apply",
                                     labels=STATE_LABELS)
        omitted = CounterMetricFamily("sharestate_serve_findings_omitted",
                                      "Findings counted, not listed one by one in "
                                      "/v1/findings (past --max-findings)", labels=STATE_LABELS)
        behind = GaugeMetricFamily("sharestate_serve_records_behind",
                                   "Offsets between what was applied and the end seen at "
                                   "start (as /readyz counts them)", labels=STATE_LABELS)
        heard = GaugeMetricFamily("sharestate_serve_last_fetch_timestamp_seconds",
                                  "When the partition's leader last answered the consumer "
                                  "(every 0.5 s at least while it is up)", labels=STATE_LABELS)
        unapplied = GaugeMetricFamily("sharestate_serve_records_lag",
                                      "Records of the partition not yet applied (its end at "
                                      "the last fetch - the next offset to apply)",
                                      labels=STATE_LABELS)
        for (topic, partition), part in view.partitions.items():
            where = [topic, str(partition)]
            applied.add_metric(where, part.progress.records)
            errors.add_metric(where, len(part.listed()) + part.omitted_count)
            omitted.add_metric(where, part.omitted_count)
            behind.add_metric(where, part.behind)
            if (fetch := view.fetched.get((topic, partition))) is not None:
                heard.add_metric(where, fetch.at)
                unapplied.add_metric(where, max(fetch.end - part.progress.position, 0))
        for row in prune(view):
            if row["prune_offset"] is not None:
                prune_offset.add_metric([row["state_topic"], str(row["state_partition"])],
                                        row["prune_offset"])
        names = view.names()
        for result in view.shares():
            for key, value in live_states(result.shard):
                name = names.get(key.topic_id, key.topic_id)
                end = end_offset(ends, key, names.get(key.topic_id))
                lag = share_lag(value, end, LIVE if end is not None else STATE)
                labels = [key.group_id, name, str(key.partition)]
                if lag.lag is not None:
                    share["lag"].add_metric(labels, lag.lag)
                share["start_offset"].add_metric(labels, lag.start_offset)
                share["in_flight_records"].add_metric(labels,
                                                      sum(lag.records_by_state.values()))
                share["archived_records"].add_metric(labels, lag.records(ARCHIVED))
                if lag.max_delivery_count is not None:
                    share["max_delivery_count"].add_metric(labels, lag.max_delivery_count)
                share["state_epoch"].add_metric(labels, value.state_epoch)
        for part in view.partitions.values():
            for rows in part.offsets.values():
                for row in rows:
                    labels = [row["group_id"], row["topic"], str(row["partition"])]
                    committed.add_metric(labels, row["committed_offset"])
                    end = ends.get((row["topic"], row["partition"]))
                    if end is not None:
                        group_lag.add_metric(labels, max(end - row["committed_offset"], 0))
        yield from share.values()
        yield from (prune_offset, committed, group_lag, applied, errors, omitted, behind, heard,
                    unapplied)


class CheckpointCollector(Collector):
    """The checkpoints: when the last was written, its size, how long it took, failures."""

    def __init__(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    def collect(self) -> Iterator[Metric]:
        written = self.checkpointer.written
        if written.at is not None:
            yield GaugeMetricFamily("sharestate_serve_checkpoint_last_written_timestamp_seconds",
                                    "When the last checkpoint was written", value=written.at)
            yield GaugeMetricFamily("sharestate_serve_checkpoint_bytes",
                                    "Size of the last checkpoint", value=written.size)
            yield GaugeMetricFamily("sharestate_serve_checkpoint_write_seconds",
                                    "How long writing the last checkpoint took",
                                    value=written.took)
        yield CounterMetricFamily("sharestate_serve_checkpoint_failures",
                                  "Checkpoint writes that failed", value=written.failures)


def registry(current: Callable[[], View], ends: Callable[[], EndOffsets],
             checkpointer: Checkpointer | None = None) -> CollectorRegistry:
    """A registry holding only the service's own metrics."""
    found = CollectorRegistry(auto_describe=False)
    found.register(StateCollector(current, ends))
    if checkpointer is not None:
        found.register(CheckpointCollector(checkpointer))
    return found
