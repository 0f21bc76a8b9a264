"""Java hash codes Kafka relies on, and the partition choices built on them.

- `string_hash`: `String.hashCode` (31-polynomial over UTF-16 code units, int32 wrap-around).
- `utils_abs`: Kafka's `Utils.abs` (`Integer.MIN_VALUE` maps to 0, not to itself).
- `uuid_hash`: `Uuid.hashCode` (the two 64-bit halves xor-ed, then the int halves xor-ed).
- `share_key_hash`: `SharePartitionKey.hashCode`, i.e. `Objects.hash(groupId,
  TopicIdPartition(topicId, TopicPartition(null, partition)))`.
- `state_partition`: the `__share_group_state` partition of a share-partition,
  `Utils.abs("group:topicId:partition".hashCode()) % partitions`.
- `offsets_partition`: the `__consumer_offsets` partition of a group,
  `Utils.abs(groupId.hashCode()) % partitions`.
"""

from __future__ import annotations

from functools import lru_cache

from sharestate.coordinator.share_state import ShareKey
from sharestate.records.codec import uuid_from_str

_MASK32 = 0xFFFFFFFF
INT_MIN = -(1 << 31)


def int32(value: int) -> int:
    """`value` wrapped to a signed 32-bit int, as Java's int arithmetic does."""
    value &= _MASK32
    return value - (1 << 32) if value & 0x80000000 else value


@lru_cache(maxsize=1 << 16)
def string_hash(text: str) -> int:
    """Java's `String.hashCode` of `text`."""
    h = 0
    if text.isascii():
        for unit in text.encode("ascii"):
            h = (31 * h + unit) & _MASK32
    else:
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK32
    return int32(h)


def utils_abs(value: int) -> int:
    """Kafka's `Utils.abs`: the absolute value, with `Integer.MIN_VALUE` mapped to 0."""
    return 0 if value == INT_MIN else abs(value)


@lru_cache(maxsize=1 << 12)
def uuid_hash(topic_id: str) -> int:
    """`Uuid.hashCode` of a topic id given in Kafka's base64 form."""
    raw = uuid_from_str(topic_id)
    xor = int.from_bytes(raw[:8], "big", signed=True) ^ int.from_bytes(raw[8:], "big",
                                                                        signed=True)
    return int32((xor >> 32) ^ xor)


def share_key_hash(key: ShareKey) -> int:
    """`SharePartitionKey.hashCode` of a share-partition."""
    topic_partition = int32(31 * (31 + key.partition))  # TopicPartition(null, partition)
    topic_id_partition = int32(31 * (31 + uuid_hash(key.topic_id)) + topic_partition)
    return int32(31 * (31 + string_hash(key.group_id)) + topic_id_partition)


def coordinator_key(key: ShareKey) -> str:
    """`SharePartitionKey.asCoordinatorKey`: "group:topicId:partition"."""
    return f"{key.group_id}:{key.topic_id}:{key.partition}"


def state_partition(key: ShareKey, partitions: int) -> int:
    """The `__share_group_state` partition of `key` (`ShareCoordinatorService.partitionFor`)."""
    return utils_abs(string_hash(coordinator_key(key))) % partitions


def offsets_partition(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group (`GroupCoordinatorService.partitionFor`)."""
    return utils_abs(string_hash(group_id)) % partitions
