"""Persister calls from share-coordinator requests in Kafka's JSON form.

Requests are what Kafka's generated JsonConverters print (camelCase, topic ids in base64):
InitializeShareGroupState, WriteShareGroupState (v0 or v1, `deliveryCompleteCount` taken
when present), ReadShareGroupState and DeleteShareGroupState, each naming exactly one
share-partition as Kafka's shard expects. `apply_request` also runs the cold-partition job
(op `snapshotColdPartitions`, no request).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sharestate.coordinator.share_state import ShareKey, StateBatch
from sharestate.persister.persister import Persister
from sharestate.persister.responses import Result

OPERATIONS = ("initializeState", "writeState", "readStateAndMaybeUpdateLeaderEpoch",
              "deleteState", "snapshotColdPartitions")
"""The operation names `apply_request` understands (Kafka's shard method names)."""


def request_partition(request: Mapping[str, Any]) -> tuple[ShareKey, Mapping[str, Any]]:
    """The one share-partition a request names, and its partition object."""
    topics = request["topics"]
    if len(topics) != 1 or len(topics[0]["partitions"]) != 1:
        raise ValueError("a share-coordinator request names exactly one share-partition")
    partition = topics[0]["partitions"][0]
    return ShareKey(request["groupId"], topics[0]["topicId"], partition["partition"]), partition


def state_batches(items: list[Mapping[str, Any]]) -> tuple[StateBatch, ...]:
    """State batches from their JSON form."""
    return tuple(StateBatch(b["firstOffset"], b["lastOffset"], b["deliveryState"],
                            b["deliveryCount"]) for b in items)


def apply_request(persister: Persister, op: str, request: Mapping[str, Any] | None,
                  now: int | None = None) -> Result[Any]:
    """Run one operation on `persister` at time `now` (None: the persister's clock)."""
    if op == "snapshotColdPartitions":
        return persister.snapshot_cold_partitions(now)
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}; known: {', '.join(OPERATIONS)}")
    if request is None:
        raise ValueError(f"{op} needs a request")
    key, p = request_partition(request)
    if op == "initializeState":
        return persister.initialize(key, p["stateEpoch"], p["startOffset"], now=now)
    if op == "writeState":
        return persister.write(key, p["leaderEpoch"], p["stateEpoch"], p["startOffset"],
                               state_batches(p["stateBatches"]),
                               p.get("deliveryCompleteCount", -1), now=now)
    if op == "readStateAndMaybeUpdateLeaderEpoch":
        return persister.read(key, p["leaderEpoch"], now=now)
    return persister.delete(key, now=now)
