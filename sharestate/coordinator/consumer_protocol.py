"""The subscribed topics inside a classic member's `ConsumerProtocolSubscription` bytes.

Kafka reads a classic consumer-protocol member's subscription as version 0, whatever version
the prefix names, because v0 is the prefix of every later version: an int16 version, then
`topics` (int32 count of int16-length UTF-8 strings) and `user_data` (int32-length nullable
bytes). Bytes that do not hold that prefix make the group's subscriptions unknown.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class SubscriptionError(ValueError):
    """Subscription bytes that do not start with a v0 `ConsumerProtocolSubscription`."""


def subscribed_topics(data: bytes) -> list[str]:
    """The topic names of one subscription; raises `SubscriptionError` when malformed."""
    end = len(data)
    pos = 0

    def take(n: int, what: str) -> int:
        nonlocal pos
        if n < 0 or pos + n > end:
            raise SubscriptionError(f"{what}: needs {n} bytes at byte {pos}, {end - pos} left")
        start = pos
        pos += n
        return start

    take(2, "version")
    count = _I32.unpack_from(data, take(4, "topic count"))[0]
    if count < 0 or count > end - pos:
        raise SubscriptionError(f"invalid topic count {count}")
    topics = []
    for _ in range(count):
        length = _I16.unpack_from(data, take(2, "topic name length"))[0]
        if length < 0:
            raise SubscriptionError("null topic name")
        start = take(length, "topic name")
        topics.append(data[start:start + length].decode("utf-8", errors="replace"))
    user_data = _I32.unpack_from(data, take(4, "user data length"))[0]
    if user_data >= 0:
        take(user_data, "user data")
    return topics
