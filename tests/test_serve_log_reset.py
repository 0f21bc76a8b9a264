"""A partition whose log goes back while the service reads it (the topic deleted and created
again, or its log truncated: the consumer then reads it again from its log start) is
replayed from the new log alone, never the old state with the new records applied on top,
and `/readyz` turns ready again once the new log's end is applied, however short it is;
the metrics, made from the same view, say the same."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import Message
from serve_support import fixture_records, offline

from sharestate.app.serve import view as views
from sharestate.app.serve.metrics import registry
from sharestate.app.serve.partition import PartitionReplay, ReplayOptions
from sharestate.app.serve.view import View, partition_view
from sharestate.cluster.consumed import consumed_runs
from sharestate.log import RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC

WHERE = (SHARE_STATE_TOPIC, 0)


def apply(replay: PartitionReplay, records: list[RawRecord]) -> None:
    """Apply `records` as the tailer does: consumed messages made into runs."""
    (run,) = consumed_runs([Message(topic=replay.topic, partition=replay.partition,
                                    offset=r.offset, key=r.key, value=r.value,
                                    timestamp=(1, r.timestamp)) for r in records])
    replay.apply(run.records, run.headers)


def behind_metric(view: View) -> float | None:
    """sharestate_serve_records_behind of the partition, scraped from `view`."""
    return registry(lambda: view, dict).get_sample_value(
        "sharestate_serve_records_behind",
        {"state_topic": SHARE_STATE_TOPIC, "state_partition": "0"})


def test_a_log_that_goes_back_is_replayed_from_its_new_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    old, new = fixture_records("share_replay_small.log"), fixture_records("share_interleaved.log")
    assert len(new) < len(old)
    expected = {name: offline(tmp_path / name, "state", {SHARE_STATE_TOPIC: records})
                for name, records in (("old", old), ("new", new))}
    assert expected["old"] and expected["new"] and expected["old"] != expected["new"]
    replay = PartitionReplay(*WHERE, ReplayOptions(), len(old))

    def published() -> View:
        return View({WHERE: partition_view(replay, None, 10080)})

    apply(replay, old[:len(new)])
    partway = published()
    assert not partway.readiness().ready
    assert partway.readiness().behind == behind_metric(partway) == len(old) - len(new)
    apply(replay, old[len(new):])
    replay.reached(len(old))   # the end the consumer saw
    before = published()
    assert before.readiness().ready and behind_metric(before) == 0
    assert views.share_partitions(before) == expected["old"]
    apply(replay, new)   # offsets from 0 again
    reset = published()
    assert views.share_partitions(reset) == expected["new"]
    # the new log's end not yet seen: behind the old log's end, metrics and probe alike
    assert reset.readiness().behind == behind_metric(reset) == len(old) - len(new)
    replay.reached(len(new))
    after = published()
    assert after.readiness().ready and behind_metric(after) == 0
    assert views.share_partitions(after) == expected["new"]
    assert after.partitions[WHERE].progress.records == len(new)
    assert views.share_partitions(before) == expected["old"]  # a view stays as published
    assert [r.getMessage() for r in caplog.records] == [
        f"{SHARE_STATE_TOPIC}-0: offset 0 comes after {len(old) - 1} (the topic was created "
        "again or its log truncated): replaying the partition from there"]
