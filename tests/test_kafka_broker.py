"""The real broker the judge tests run on: what the fixture promises."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka_broker import (
    RELEASES,
    SHARE_STATE_PARTITIONS,
    BrokerFailed,
    KafkaBroker,
    running_broker,
)

pytestmark = pytest.mark.kafka_broker


def test_broker_runs_share_groups_with_the_tests_settings(kafka_broker: KafkaBroker) -> None:
    log = kafka_broker.server_log.read_text()
    features = re.findall(r"finalizedFeatures=\{([^}]*)\}", log)
    assert features and "share.version=1" in features[-1]
    assert re.search(r"Kafka version: 4\.3\.1\b", log)
    settings = (kafka_broker.workdir / "server.properties").read_text()
    assert f"share.coordinator.state.topic.num.partitions={SHARE_STATE_PARTITIONS}" in settings
    assert kafka_broker.log_dirs.is_dir()


def test_a_broker_that_cannot_start_fails_with_its_log_tail(tmp_path: Path) -> None:
    settings = {"authorizer.class.name": "org.example.NoSuchAuthorizer"}
    with pytest.raises(BrokerFailed) as failure, running_broker(RELEASES["4.3"], tmp_path,
                                                                settings):
        pytest.fail("a broker without its authorizer class started")
    assert "the broker exited" in str(failure.value)
    assert "server.log ---" in str(failure.value)
    assert "org.example.NoSuchAuthorizer" in str(failure.value)


def test_a_bad_setting_fails_at_format_with_kafkas_reason(tmp_path: Path) -> None:
    with pytest.raises(BrokerFailed, match=r"count\.limit: Value must be at least 2"), \
            running_broker(RELEASES["4.3"], tmp_path, {"group.share.delivery.count.limit": "1"}):
        pytest.fail("a broker with delivery count limit 1 started")
