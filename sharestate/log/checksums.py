"""CRCs of ranges of a stream in bounded work: what keeps resynchronisation linear.

Resynchronisation computes a CRC wherever the cheap header checks pass, over the length the
header declares (up to 64 MiB). Candidates a few bytes apart whose declared ranges overlap
(one fake header repeated, say) would each cost their whole length: quadratic. Instead a
`RunningCrc` keeps the CRC of the stream from an anchor at checkpoints every `STEP` bytes,
computed once as the reader moves forward, and gives the CRC of any range `[a, b)` from
those: with `C(x)` the CRC of the stream from the anchor up to `x`,

    crc(stream[a:b]) = C(b) ^ shift(C(a), b - a)

where `shift` multiplies by x^(8n) modulo the CRC's polynomial (as zlib's `crc32_combine`
does). A range then costs at most `2 * STEP` bytes of CRC and two shifts, whatever its
length, and each byte of the stream enters the checkpoints once.

`crc_shift` has a C twin (`sharestate._native.crc_shift`); both give the same values.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from functools import cache, lru_cache

from crc32c import crc32c

from sharestate import native

STEP = 4096
"""Bytes between two checkpoints."""
CASTAGNOLI = 0x82F63B78
"""CRC-32C's polynomial (reflected): magic 2 batches."""
IEEE = 0xEDB88320
"""CRC-32's polynomial (reflected): magic 0 and 1 messages."""

Crc = Callable[[bytes | memoryview, int], int]
"""A CRC function continuing from a previous value: `crc(data, value)`."""


def _multiply(a: int, b: int, poly: int) -> int:
    """a * b modulo the polynomial (both reflected, bit 31 the x^0 term)."""
    m = 1 << 31
    product = 0
    while True:
        if a & m:
            product ^= b
            if not a & (m - 1):
                return product
        m >>= 1
        b = (b >> 1) ^ poly if b & 1 else b >> 1


@cache
def _powers(poly: int) -> tuple[int, ...]:
    """x^(2^k) modulo the polynomial, k = 0..63."""
    powers = [1 << 30]  # x^1
    for _ in range(63):
        powers.append(_multiply(powers[-1], powers[-1], poly))
    return tuple(powers)


@lru_cache(maxsize=1024)
def _factor(length: int, poly: int) -> int:
    """x^(8 * length) modulo the polynomial (lengths repeat: cached)."""
    powers = _powers(poly)
    factor = 1 << 31  # x^0
    k = 3  # bytes to bits
    while length and k < len(powers):
        if length & 1:
            factor = _multiply(powers[k], factor, poly)
        length >>= 1
        k += 1
    return factor


def crc_shift_py(crc: int, length: int, castagnoli: bool) -> int:
    """`crc_shift` without the C extension."""
    poly = CASTAGNOLI if castagnoli else IEEE
    return _multiply(_factor(length, poly), crc, poly)


def crc_shift(crc: int, length: int, castagnoli: bool) -> int:
    """`crc` moved past `length` zero bytes' worth of polynomial: x^(8 * length) * crc
    modulo CRC-32C's polynomial (`castagnoli`) or CRC-32's. With it, for any bytes A and
    B, crc(A + B) == crc(B) ^ crc_shift(crc(A), len(B)), which is what `crc(B)`
    continued from crc(A) (`crc(B, crc(A))`) adds."""
    if native.enabled():
        return native.module.crc_shift(crc, length, castagnoli)
    return crc_shift_py(crc, length, castagnoli)


class RunningCrc:
    """The CRC of a stream from an anchor, at checkpoints every `STEP` bytes, to compute
    the CRC of ranges of a forward-moving buffer (see the module docstring).

    The buffer is the reader's: `buf` holds the stream from position `base` on. The
    reader keeps in it the bytes from `keep_from(position)` when it drops what lies before
    a position (at most `STEP` more), so that checkpoints stay usable; when they are not
    (the reader moved past them), the checkpoints start again at the next range asked for.
    """

    def __init__(self, crc: Crc, castagnoli: bool) -> None:
        self._crc = crc
        self._castagnoli = castagnoli
        self._anchor = 0
        self._values: list[int] = []  # C(anchor + k * STEP)

    def keep_from(self, position: int) -> int:
        """Where the reader's buffer must start for ranges from `position` on to be
        computed from the checkpoints (`position` itself when there are none for it)."""
        k = (position - self._anchor) // STEP
        if not self._values or k < 0 or k >= len(self._values):
            self._values = []  # past them (or none): start again when next asked
            return position
        if k > len(self._values) // 2:  # drop the checkpoints behind the reader
            del self._values[:k]
            self._anchor += k * STEP
        return self._anchor + ((position - self._anchor) // STEP) * STEP

    def of_range(self, buf: bytes | memoryview, base: int, start: int, end: int) -> int:
        """The CRC of stream bytes [start, end), all of which `buf` (from `base`) holds."""
        first = min((start - self._anchor) // STEP, len(self._values) - 1)
        if not self._values or start < self._anchor or self._anchor + first * STEP < base:
            self._anchor = start  # no usable checkpoint: start again here
            self._values = [0]
        view = memoryview(buf)
        return self._at(view, base, end) ^ crc_shift(self._at(view, base, start), end - start,
                                                     self._castagnoli)

    def _at(self, view: memoryview, base: int, position: int) -> int:
        """C(position): the CRC of the stream from the anchor up to `position`."""
        crc, values, anchor = self._crc, self._values, self._anchor
        k = (position - anchor) // STEP
        while len(values) <= k:
            at = anchor + (len(values) - 1) * STEP - base
            values.append(crc(view[at:at + STEP], values[-1]))
        at = anchor + k * STEP - base
        return crc(view[at:position - base], values[k])


def running_crc32c() -> RunningCrc:
    """A `RunningCrc` of CRC-32C (magic 2 batches)."""
    return RunningCrc(crc32c, True)


def running_crc32() -> RunningCrc:
    """A `RunningCrc` of CRC-32 (magic 0 and 1 messages)."""
    return RunningCrc(zlib.crc32, False)
