"""Kafka error codes and messages the share-coordinator writer answers with."""

from __future__ import annotations

from typing import Final

NONE: Final = 0
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
UNSUPPORTED_VERSION: Final = 35
INVALID_REQUEST: Final = 42
FENCED_LEADER_EPOCH: Final = 74
FENCED_STATE_EPOCH: Final = 124

DEFAULT_MESSAGES: Final = {
    UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    UNSUPPORTED_VERSION: "The version of API is not supported.",
    FENCED_LEADER_EPOCH: "The leader epoch in the request is older than the epoch on the broker.",
    FENCED_STATE_EPOCH: "The share coordinator rejected the request because the share-group "
                        "state epoch did not match.",
}
"""Kafka's `Errors.message()` for the codes answered without a specific message."""

NULL_TOPIC_ID: Final = "The topic id cannot be null."
NEGATIVE_PARTITION_ID: Final = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH: Final = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH: Final = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED: Final = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED: Final = "Read operation on uninitialized share partition not allowed."
