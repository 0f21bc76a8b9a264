"""Process settings for bulk work."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def quiet_gc() -> None:
    """Run the cyclic collector less often.

    Decoding and replay allocate millions of small acyclic tuples while holding large live
    states; at Python's default thresholds the collector rescans those states again and
    again (half the replay time). Nothing of ours builds reference cycles in bulk, so a
    large first-generation threshold costs no memory worth counting.
    """
    gc.set_threshold(100_000, 50, 100)


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for one bounded piece of bulk work (a pipeline task), and
    back as it was after it.

    Even at `quiet_gc`'s thresholds every young collection visits each tracked object that
    survived since the last one: a replay keeps every record's state (a dozen or more
    tuples) until its history rows are built, so a quarter of a replay task went to
    collections that freed nothing. Nothing of ours builds reference cycles in bulk; the
    few a task leaves are collected once the collector is back.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
