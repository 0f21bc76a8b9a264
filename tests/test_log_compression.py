"""Bounded decompression: round trips, framings, bombs and corrupt payloads per codec."""

from __future__ import annotations

import gzip
import struct

import cramjam
import lz4.frame
import pytest
import zstandard

from sharestate.log import DecompressionError, compress, decompress

CODECS = ["gzip", "snappy", "lz4", "zstd"]
TEXT = b"share-group-state " * 5000


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec: str) -> None:
    assert decompress(codec, compress(codec, TEXT)) == TEXT
    assert decompress(codec, compress(codec, b"")) == b""


def test_snappy_is_written_with_xerial_framing_and_read_raw_too() -> None:
    framed = compress("snappy", TEXT)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress("snappy", bytes(cramjam.snappy.compress_raw(TEXT))) == TEXT
    assert decompress("snappy", framed + framed) == TEXT + TEXT  # concatenated streams


def test_concatenated_gzip_members_and_zstd_frames() -> None:
    assert decompress("gzip", gzip.compress(b"a") + gzip.compress(b"b") + b"junk") == b"ab"
    frames = zstandard.ZstdCompressor().compress(b"a") + zstandard.ZstdCompressor().compress(
        b"b")
    assert decompress("zstd", frames) == b"ab"


@pytest.mark.parametrize("codec", CODECS)
def test_bomb_stops_at_the_limit(codec: str) -> None:
    bomb = compress(codec, bytes(4 << 20))
    with pytest.raises(DecompressionError) as caught:
        decompress(codec, bomb, max_inflated_bytes=1 << 20)
    assert caught.value.kind == "decompression_limit"
    assert decompress(codec, bomb, max_inflated_bytes=4 << 20) == bytes(4 << 20)


def test_snappy_declared_size_is_checked_before_inflating() -> None:
    block = bytes(cramjam.snappy.compress_raw(bytes(100)))
    lying = b"\xff\xff\xff\xff\x0f" + block[1:]  # declares 4 GiB
    with pytest.raises(DecompressionError) as caught:
        decompress("snappy", lying, max_inflated_bytes=1 << 20)
    assert caught.value.kind == "decompression_limit"


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_and_garbage_payloads_fail_cleanly(codec: str) -> None:
    good = compress(codec, TEXT)
    for bad in (good[: len(good) // 2], b"\x00garbage" * 3, good[:3]):
        with pytest.raises(DecompressionError) as caught:
            decompress(codec, bad)
        assert caught.value.kind == "decompression_failed"


def test_xerial_block_length_is_validated() -> None:
    header = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for bad in (header + struct.pack(">i", 1000) + b"abc", header + b"\x00\x01",
                header[:10]):
        with pytest.raises(DecompressionError):
            decompress("snappy", bad)


def test_kafka_style_lz4_frame() -> None:
    frame = compress("lz4", TEXT)
    assert frame[4:6] == b"\x60\x40"  # independent 64 KiB blocks, no checksums: as Kafka
    assert lz4.frame.decompress(frame) == TEXT


def test_unknown_codec() -> None:
    with pytest.raises(DecompressionError):
        decompress("brotli", b"")
    with pytest.raises(ValueError):
        compress("brotli", b"")
