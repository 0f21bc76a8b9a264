"""`sharestate serve` started on a cluster where no share group was ever used (no
`__share_group_state` yet) reads that topic's partitions once they appear, without a
restart: its answers then equal `sharestate state` over the same records, and its
checkpoints hold the new partitions."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from serve_support import eventually, fixture_records, get, mock_cluster, offline

from sharestate.app.serve import tailer
from sharestate.app.serve.checkpoint import CheckpointStore, Settings
from sharestate.app.serve.partition import ReplayOptions
from sharestate.app.serve.service import CheckpointOptions, start
from sharestate.cluster import parse_options
from sharestate.coordinator.shard import KAFKA
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC


def test_a_state_topic_created_after_the_start_is_read_without_a_restart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sharestate.serve")
    monkeypatch.setattr(tailer, "NEW_PARTITIONS_S", 0.2)  # the test need not wait 5 s
    records = {SHARE_STATE_TOPIC: fixture_records("share_codec_none.log"),
               CONSUMER_OFFSETS_TOPIC: fixture_records("consumer_offsets_records.log")}
    cluster = mock_cluster()
    cluster.produce(CONSUMER_OFFSETS_TOPIC, records[CONSUMER_OFFSETS_TOPIC])
    assert SHARE_STATE_TOPIC not in cluster.holder.list_topics(timeout=10).topics
    options = parse_options({"bootstrap.servers": cluster.bootstrap, "timeoutMs": "10000"})
    directory = tmp_path / "checkpoints"
    service = start(options, ("127.0.0.1", 0), ReplayOptions(), retention_minutes=10080,
                    version="test", checkpoints=CheckpointOptions(directory, 10**9, 10**6))
    try:
        eventually(lambda: get(service.address, "/readyz")[0] == 200)
        assert get(service.address, "/v1/share-partitions") == (200, [])
        assert get(service.address, "/v1/consumer-group-offsets")[1] == offline(
            tmp_path, "offsets", records)
        cluster.produce(SHARE_STATE_TOPIC, records[SHARE_STATE_TOPIC])  # creates the topic
        expected = offline(tmp_path, "state", records)
        assert expected
        eventually(lambda: get(service.address, "/v1/share-partitions")[1] == expected)
        assert get(service.address, "/readyz")[0] == 200
        assert get(service.address, "/healthz") == (200, {"status": "up"})
        state_partitions = sorted(where for where in service.tailer.view.partitions
                                  if where[0] == SHARE_STATE_TOPIC)
    finally:
        service.close()
    assert state_partitions and (SHARE_STATE_TOPIC, 0) in state_partitions
    found = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("reading ") and "new partitions" in r.getMessage()]
    assert found == [f"reading {len(state_partitions)} new partitions from their log start: "
                     + ", ".join(f"{t}-{p}" for t, p in state_partitions)]
    store = CheckpointStore(directory, Settings(
        str(cluster.holder.list_topics(timeout=10).cluster_id), KAFKA, None,
        DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT))
    restored = store.load()
    assert restored is not None
    positions = {where: saved.progress.position for where, saved in restored.partitions.items()}
    assert positions[(SHARE_STATE_TOPIC, 0)] == len(records[SHARE_STATE_TOPIC])
    assert set(state_partitions) <= set(positions)
