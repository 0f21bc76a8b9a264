"""Process settings for bulk work."""

from __future__ import annotations

import gc


def quiet_gc() -> None:
    """Run the cyclic collector less often.

    Decoding and replay allocate millions of small acyclic tuples while holding large live
    states; at Python's default thresholds the collector rescans those states again and
    again (half the replay time). Nothing of ours builds reference cycles in bulk, so a
    large first-generation threshold costs no memory worth counting.
    """
    gc.set_threshold(100_000, 50, 100)
