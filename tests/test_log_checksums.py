"""CRCs of ranges from running checkpoints (`sharestate.log.checksums`) equal the CRCs
computed over the bytes, as the reader's buffer moves forward, with and without C."""

from __future__ import annotations

import random
import zlib

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from sharestate import native
from sharestate.log.checksums import STEP, crc_shift, running_crc32, running_crc32c


@pytest.mark.parametrize("pure", [False, True], ids=["native", "pure"])
def test_crc_of_a_and_b_is_crc_of_b_plus_a_shifted(pure: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    if pure:
        monkeypatch.setattr(native, "module", None)
    rng = random.Random(3)
    for _ in range(200):
        a, b = rng.randbytes(rng.randrange(100)), rng.randbytes(rng.randrange(10_000))
        assert crc32c(a + b) == crc32c(b) ^ crc_shift(crc32c(a), len(b), True)
        assert zlib.crc32(a + b) == zlib.crc32(b) ^ crc_shift(zlib.crc32(a), len(b), False)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 1 << 30), moves=st.lists(
    st.tuples(st.integers(0, 3 * STEP), st.integers(0, 5 * STEP), st.booleans()),
    min_size=1, max_size=30))
def test_ranges_of_a_moving_buffer(seed: int, moves: list[tuple[int, int, bool]]) -> None:
    """The reader's pattern: a forward-moving position whose buffer drops what lies before
    what `keep_from` says, and ranges from the position on, some far ahead."""
    stream = random.Random(seed).randbytes(40 * STEP)
    tables = {True: (running_crc32c(), crc32c), False: (running_crc32(), zlib.crc32)}
    position = base = 0
    for step, length, castagnoli in moves:
        position = min(position + step, len(stream) - 1)
        table, crc = tables[castagnoli]
        base = max(base, min(position, *(t.keep_from(position) for t, _ in tables.values())))
        buf = stream[base:]  # what the reader holds (it never gets dropped bytes back)
        end = min(len(stream), position + length)
        assert table.of_range(buf, base, position, end) == crc(stream[position:end])
