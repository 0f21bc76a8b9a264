"""The persister against Kafka's own request streams (`*.requests.jsonl`), request by request.

Each request is fed with the line's `timeMs` as the clock (topic deletions update the
metadata image first). Error code and message, the emitted records (offset, type, key,
tombstone), the record bytes (against the fixture segment at that offset), the prune point
after the request and read responses must all equal Kafka's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir, conformance_root

from sharestate.coordinator.shard import ShareShard
from sharestate.coordinator.share_rules import rules_for
from sharestate.coordinator.share_state import share_key, share_value
from sharestate.log import Batch, read_batches
from sharestate.persister import (
    MetadataImage,
    Persister,
    PersisterConfig,
    Result,
    apply_request,
    shard_states,
)
from sharestate.persister.kafka_requests import request_partition
from sharestate.persister.persister import DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS
from sharestate.records.catalog import SHARE_STATE_TOPIC, dialect
from sharestate.records.keyvalue import decode_key_value, encode_key_value

FOLDERS = {"kafka-4.4-dev": "4.1", "kafka-4.0-dev": "4.0"}
"""Fixture folder -> record dialect."""


def _request_files() -> list[str]:
    root = conformance_root()
    if not root.is_dir():
        return ["(fixtures missing)"]
    return sorted(str(p.relative_to(root)) for folder in FOLDERS
                  for p in (root / folder).glob("*.requests.jsonl"))


def _segment(path: Path) -> dict[int, tuple[bytes | None, bytes | None]]:
    with path.open("rb") as stream:
        return {r.offset: (r.key, r.value) for item in read_batches(stream)
                if isinstance(item, Batch) for r in item.records}


def _image(lines: list[dict[str, Any]], partitions: int) -> MetadataImage:
    """The topics the workload starts with (every requested topic but the replacements)."""
    replacements = {line["replacementTopicId"] for line in lines if "replacementTopicId" in line}
    image = MetadataImage()
    for line in lines:
        if line.get("request"):
            topic_id = line["request"]["topics"][0]["topicId"]
            if topic_id not in replacements:
                image.add_topic(topic_id, partitions)
    return image


def _expected_records(line: dict[str, Any]) -> list[dict[str, Any]]:
    if "records" in line:
        records: list[dict[str, Any]] = line["records"]
        return records
    if line["recordOffset"] is None:  # the 4.0 write-only stream: one record or none
        return []
    key, _ = request_partition(line["request"])
    return [{"offset": line["recordOffset"], "recordType": line["recordType"],
             "tombstone": False, "groupId": key.group_id, "topicId": key.topic_id,
             "partition": key.partition}]


def _read_response(result: Result[Any], request: dict[str, Any]) -> dict[str, Any]:
    """Our answer as ReadShareGroupStateResponse v0 JSON."""
    key, _ = request_partition(request)
    data = result.data
    partition = {"partition": key.partition, "errorCode": result.error_code,
                 "errorMessage": result.error_message,
                 "stateEpoch": data.state_epoch if data else 0,
                 "startOffset": data.start_offset if data else 0,
                 "stateBatches": [{"firstOffset": b.first_offset, "lastOffset": b.last_offset,
                                   "deliveryState": b.delivery_state,
                                   "deliveryCount": b.delivery_count}
                                  for b in (data.batches if data else ())]}
    return {"results": [{"topicId": key.topic_id, "partitions": [partition]}]}


def _loader_states(dialect_name: str, limit: int,
                   segment: dict[int, tuple[bytes | None, bytes | None]]) -> ShareShard:
    shard = ShareShard(rules_for(dialect_name, limit))
    schemas = dialect(dialect_name)
    for offset, (key, value) in sorted(segment.items()):
        kv = decode_key_value(schemas, SHARE_STATE_TOPIC, key, value)
        assert kv.kind is not None and kv.key is not None and kv.type_id is not None
        layout = kv.kind.value_layout(kv.value_version) if kv.value_version is not None else None
        shard.replay(offset, kv.type_id, share_key(kv.key, kv.kind.key_layout()),
                     share_value(kv.value, layout) if kv.value is not None and layout else None)
    return shard


@pytest.mark.parametrize("name", _request_files())
def test_requests_match_kafka(name: str) -> None:
    folder, file_name = name.split("/", 1)
    base = conformance_dir(folder) / file_name.removesuffix(".requests.jsonl")
    dialect_name = FOLDERS[folder]
    summary = json.loads(base.with_suffix(".summary.json").read_text(encoding="utf-8"))
    lines = [json.loads(line) for line in
             base.with_suffix(".requests.jsonl").read_text(encoding="utf-8").splitlines()]
    segment = _segment(base.with_suffix(".log"))
    limit = summary["shareCoordinatorSnapshotUpdateRecordsPerSnapshot"]
    image = _image(lines, summary["partitionsPerTopic"])
    persister = Persister(dialect_name, metadata=image, next_offset=min(segment),
                          config=PersisterConfig(limit, summary.get(
                              "shareCoordinatorColdPartitionSnapshotIntervalMs",
                              DEFAULT_COLD_PARTITION_SNAPSHOT_INTERVAL_MS)))
    schemas = dialect(dialect_name)
    written: list[int] = []
    for line in lines:
        op = line.get("op", "writeState")
        where = f"step {line['step']} ({op})"
        if op == "maybeCleanupShareState":
            deleted = line["deletedTopicId"]
            partitions = image.partitions(deleted)
            assert partitions is not None
            image.remove_topic(deleted)
            image.add_topic(line["replacementTopicId"], partitions)
            result = persister.on_topics_deleted([deleted], now=line["timeMs"])
        else:
            result = apply_request(persister, op, line["request"], line.get("timeMs"))
        assert (result.error_code, result.error_message) == \
            (line["errorCode"], line["errorMessage"]), where
        expected = _expected_records(line)
        assert [(r.offset, r.type_id, r.is_tombstone, *r.key) for r in result.records] == \
            [(e["offset"], e["recordType"], e["tombstone"], e["groupId"], e["topicId"],
              e["partition"]) for e in expected], where
        for record in result.records:
            key_bytes, value_bytes = persister.codec.encode(record)
            assert (key_bytes, value_bytes) == segment[record.offset], \
                f"{where}: bytes of offset {record.offset}"
            kind = schemas.kind(SHARE_STATE_TOPIC, record.type_id)
            assert kind is not None
            version = persister.codec.value_versions[record.type_id]
            assert encode_key_value(kind, (*record.key, None),
                                    None if record.value is None else version,
                                    record.value) == (key_bytes, value_bytes), where
            written.append(record.offset)
        if "lastRedundantOffsetAfter" in line:
            assert persister.last_redundant_offset() == line["lastRedundantOffsetAfter"], where
        if "response" in line:
            assert _read_response(result, line["request"]) == line["response"], where
    assert written == sorted(segment), "every record of the segment was written, in order"
    loader = _loader_states(dialect_name, limit, segment)
    assert shard_states(persister.shard) == shard_states(loader)
    assert persister.last_redundant_offset() == loader.last_redundant_offset()
