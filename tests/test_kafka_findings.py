"""What a real Kafka broker wrote that the conformance fixtures lacked: one test per finding.

Each input is a record a Kafka broker (4.3.1, else the release named) wrote under a workload of
tests/kafka_workload.py and each expected answer is what its own kafka-dump-log
printed for it (snake_cased), so these run without a broker.
"""

from __future__ import annotations

import base64
import json

import pytest
from kafka_judge import snake_all

from sharestate import native
from sharestate.records.catalog import dialect
from sharestate.records.codec import write_struct
from sharestate.records.keyvalue import decode_key_value
from sharestate.records.render import to_json

# A KIP-848 consumer group member (librdkafka, group.protocol=consumer): Kafka writes the
# tagged ClassicMemberMetadata (tag 0) explicitly as null, an unsigned-varint presence
# marker 0, because its generated code's default for an absent tagged struct is an empty
# struct, not null. sharestate read the marker as an int8 presence byte and failed.
MEMBER_KEY = "AAUABmNnLTg0OAAWYXhZVDcyWXpRcmlYZjlwYi9pL21hdw=="
MEMBER_VALUE = "AAAAAAhyZGthZmthCy8xMjcuMC4wLjECB2V2ZW50cwEADbugAAEAAQA="
KAFKA_MEMBER = (
    '{"instanceId":null,"rackId":null,"clientId":"rdkafka","clientHost":"/127.0.0.1",'
    '"subscribedTopicNames":["events"],"subscribedTopicRegex":"","rebalanceTimeoutMs":900000,'
    '"serverAssignor":null,"classicMemberMetadata":null}')


@pytest.fixture(params=["native", "pure"])
def codec(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pure":
        monkeypatch.setattr(native, "module", None)
    elif native.module is None:
        pytest.skip("the C extension is not built")
    return str(request.param)


def test_tagged_null_struct_decodes_as_kafka_prints_it(codec: str) -> None:
    decoded = decode_key_value(dialect("4.1"), "__consumer_offsets",
                               base64.b64decode(MEMBER_KEY), base64.b64decode(MEMBER_VALUE))
    assert decoded.error is None, decoded.error
    assert decoded.kind is not None and decoded.value is not None
    layout = decoded.kind.value_layout(0)
    assert layout is not None
    assert to_json(layout, decoded.value) == snake_all(json.loads(KAFKA_MEMBER))
    # Written back, the explicit null is written as Kafka wrote it: byte for byte.
    assert write_struct(layout, decoded.value) == base64.b64decode(MEMBER_VALUE)[2:]


def test_absent_tagged_struct_is_kafkas_empty_default_and_not_printed() -> None:
    decoded = decode_key_value(dialect("4.1"), "__consumer_offsets",
                               base64.b64decode(MEMBER_KEY),
                               base64.b64decode(MEMBER_VALUE)[:-4] + b"\x00")
    assert decoded.error is None and decoded.kind is not None and decoded.value is not None
    layout = decoded.kind.value_layout(0)
    assert layout is not None
    rendered = to_json(layout, decoded.value)
    assert "classic_member_metadata" not in rendered
    assert rendered["client_id"] == "rdkafka"


# Share state as Kafka 4.1.2 and 4.2.2 wrote it (tests/test_kafka_releases.py's workload),
# each with what the release's own kafka-dump-log printed: 4.1 writes the create/write
# timestamps but no delivered count; 4.2 adds deliveryCompleteCount (KIP-1226, a tagged
# field) to both record types, printed only when it is not its default -1.
RELEASE_SHARE_STATE = [
    ("4.1 ShareSnapshot", "AAAABHNnLWGakzFTgeNKzqmW1NoJrJ+UAAAAAQ==",
     "AAAAAAAAAAAAAQAAAAD//////////wAAAaIgN1SiAAABoiA3VKIBAA==",
     '{"snapshotEpoch":0,"stateEpoch":1,"leaderEpoch":0,"startOffset":-1,'
     '"createTimestamp":1795836826786,"writeTimestamp":1795836826786,"stateBatches":[]}'),
    ("4.1 ShareUpdate", "AAEABHNnLWGakzFTgeNKzqmW1NoJrJ+UAAAAAQ==",
     "AAAAAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAB0AAAEAAA==",
     '{"snapshotEpoch":0,"leaderEpoch":0,"startOffset":0,"stateBatches":[{"firstOffset":0,'
     '"lastOffset":29,"deliveryState":0,"deliveryCount":1}]}'),
    ("4.2 ShareSnapshot", "AAAABHNnLWHGF9Uaz4dEebPfgwhpLD0GAAAAAQ==",
     "AAAAAAABAAAAAQAAAAAAAAAAAAAAGwAAAaIgN7NIAAABoiA3s0gDAAAAAAAAABsAAAAAAAAAGwQAAwAAAAAAAAAA"
     "HAAAAAAAAAAdAgABAAEABAAAAAM=",
     '{"snapshotEpoch":1,"stateEpoch":1,"leaderEpoch":0,"startOffset":27,'
     '"deliveryCompleteCount":3,"createTimestamp":1795836851016,'
     '"writeTimestamp":1795836851016,"stateBatches":[{"firstOffset":27,"lastOffset":27,'
     '"deliveryState":4,"deliveryCount":3},{"firstOffset":28,"lastOffset":29,'
     '"deliveryState":2,"deliveryCount":1}]}'),
]


@pytest.mark.parametrize(("name", "key", "value", "kafka"), RELEASE_SHARE_STATE,
                         ids=[row[0] for row in RELEASE_SHARE_STATE])
def test_share_state_of_kafka_41_and_42_decodes_as_their_dump_log_prints_it(
        codec: str, name: str, key: str, value: str, kafka: str) -> None:
    decoded = decode_key_value(dialect("4.1"), "__share_group_state", base64.b64decode(key),
                               base64.b64decode(value))
    assert decoded.error is None, decoded.error
    assert decoded.kind is not None and decoded.value is not None
    layout = decoded.kind.value_layout(0)
    assert layout is not None
    assert to_json(layout, decoded.value) == snake_all(json.loads(kafka)), name
    assert write_struct(layout, decoded.value) == base64.b64decode(value)[2:]
