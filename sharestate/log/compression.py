"""Bounded decompression (and compression) of batch payloads: gzip, snappy, lz4, zstd.

Every decompressor stops as soon as the output would pass `max_inflated_bytes`, and
checks declared sizes (snappy blocks carry their uncompressed length) before allocating,
so a small hostile payload cannot exhaust memory. Snappy is read both with the xerial
framing that Kafka's Java clients write (`\\x82SNAPPY\\x00`, two int32 versions, then
int32-length-prefixed raw blocks) and as one plain raw block; it is written with xerial
framing. A fault after frames that ended whole (gzip members, xerial blocks, zstd frames)
carries what they inflated (`DecompressionError.inflated`): the batch reader keeps their
records.
"""

from __future__ import annotations

import zlib

import cramjam
import lz4.frame
import zstandard

DEFAULT_MAX_INFLATED_BYTES = 64 << 20

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
_XERIAL_BLOCK = 32 << 10  # the block size of Java's SnappyOutputStream
_ZSTD_FEED = 256  # compressed bytes fed per step: bounds the overshoot past the limit


class DecompressionError(Exception):
    """A payload that cannot be inflated; `kind` is the finding kind to report and
    `inflated` what its frames (gzip members, xerial snappy blocks, zstd frames) that ended
    whole before the fault gave."""

    def __init__(self, kind: str, message: str, inflated: bytes = b"") -> None:
        super().__init__(message)
        self.kind = kind
        self.inflated = inflated


def _failed(message: str, whole: list[bytes] | None = None) -> DecompressionError:
    return DecompressionError("decompression_failed", message, b"".join(whole or ()))


def _too_big(limit: int) -> DecompressionError:
    return DecompressionError("decompression_limit",
                              f"payload inflates past the limit of {limit} bytes")


def decompress(codec: str, data: bytes, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
               ) -> bytes:
    """Inflate `data` compressed with `codec`; raises `DecompressionError`."""
    inflate = _DECOMPRESSORS.get(codec)
    if inflate is None:
        raise _failed(f"unsupported codec {codec!r}")
    try:
        return inflate(data, max_inflated_bytes)
    except DecompressionError:
        raise
    except Exception as exc:  # a codec library rejecting hostile bytes, whatever its type
        raise _failed(f"{codec} payload is corrupt: {exc}") from None


def compress(codec: str, data: bytes) -> bytes:
    """Compress `data` with `codec` the way Kafka's clients frame it."""
    if codec == "gzip":
        deflater = zlib.compressobj(6, zlib.DEFLATED, 31)
        return deflater.compress(data) + deflater.flush()
    if codec == "snappy":
        out = bytearray(_XERIAL_HEADER)
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(data[start:start + _XERIAL_BLOCK]))
            out += len(block).to_bytes(4, "big") + block
        return bytes(out)
    if codec == "lz4":
        return bytes(lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                        block_linked=False, content_checksum=False,
                                        store_size=False))
    if codec == "zstd":
        return bytes(zstandard.ZstdCompressor(level=3).compress(data))
    raise ValueError(f"unsupported codec {codec!r}")


def _gunzip(data: bytes, limit: int) -> bytes:
    """Gzip members back to back (as Java's GZIPInputStream); other trailing bytes ignored."""
    parts: list[bytes] = []
    total = 0
    rest = data
    while True:
        whole = parts[:]
        inflater = zlib.decompressobj(31)
        pending = rest
        while not inflater.eof:
            try:
                chunk = inflater.decompress(pending, limit + 1 - total)
            except zlib.error as exc:
                raise _failed(f"gzip payload is corrupt: {exc}", whole) from None
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
            pending = inflater.unconsumed_tail
            if not (chunk or pending or inflater.eof):
                raise _failed("gzip payload is truncated", whole)
            parts.append(chunk)
        rest = inflater.unused_data
        if not rest.startswith(b"\x1f\x8b"):
            return b"".join(parts)


def _raw_snappy(block: bytes, room: int, limit: int, whole: list[bytes] | None = None) -> bytes:
    """One raw snappy block (`whole`: the blocks before it, for an error to carry)."""
    try:
        declared = int(cramjam.snappy.decompress_raw_len(block))
        if declared > room:
            raise _too_big(limit)
        out = bytes(cramjam.snappy.decompress_raw(block))
    except DecompressionError:
        raise
    except Exception as exc:  # cramjam rejecting the block, whatever its type
        raise _failed(f"snappy payload is corrupt: {exc}", whole) from None
    if len(out) != declared:
        raise _failed(f"snappy block declares {declared} bytes but holds {len(out)}", whole)
    return out


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(XERIAL_MAGIC):
        return _raw_snappy(data, limit, limit)
    parts: list[bytes] = []
    total = 0
    pos = 0
    end = len(data)
    while pos < end:
        if data.startswith(XERIAL_MAGIC, pos):  # a (possibly concatenated) stream header
            if end - pos < len(_XERIAL_HEADER):
                raise _failed("xerial snappy header is truncated", parts)
            pos += len(_XERIAL_HEADER)
            continue
        if end - pos < 4:
            raise _failed(f"xerial snappy block length truncated at byte {pos}", parts)
        size = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        pos += 4
        if size < 0 or size > end - pos:
            raise _failed(f"xerial snappy block of {size} bytes at byte {pos - 4} "
                          f"with {end - pos} left", parts)
        block = _raw_snappy(data[pos:pos + size], limit - total, limit, parts)
        total += len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)


def _unlz4(data: bytes, limit: int) -> bytes:
    inflater = lz4.frame.LZ4FrameDecompressor()
    parts: list[bytes] = []
    total = 0
    chunk = inflater.decompress(data, max_length=limit + 1)
    while True:
        total += len(chunk)
        if total > limit:
            raise _too_big(limit)
        parts.append(chunk)
        if inflater.eof:
            return b"".join(parts)
        if inflater.needs_input or not chunk:
            raise _failed("lz4 frame is truncated")
        chunk = inflater.decompress(b"", max_length=limit + 1 - total)


def _unzstd(data: bytes, limit: int) -> bytes:
    """Zstd frames back to back, fed in small steps so output stays near the limit."""
    window = 1 << max(23, min(27, limit.bit_length()))
    context = zstandard.ZstdDecompressor(max_window_size=window)
    parts: list[bytes] = []
    total = 0
    rest = data
    while rest:
        whole = parts[:]
        inflater = context.decompressobj()
        pos = 0
        while not inflater.eof:
            if pos >= len(rest):
                raise _failed("zstd frame is truncated", whole)
            try:
                chunk = inflater.decompress(rest[pos:pos + _ZSTD_FEED])
            except zstandard.ZstdError as exc:
                raise _failed(f"zstd payload is corrupt: {exc}", whole) from None
            pos += _ZSTD_FEED
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
            parts.append(chunk)
        rest = inflater.unused_data + rest[pos:]
    return b"".join(parts)


_DECOMPRESSORS = {"gzip": _gunzip, "snappy": _unsnappy, "lz4": _unlz4, "zstd": _unzstd}
