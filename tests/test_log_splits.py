"""Reading a segment in splits at batch boundaries gives exactly what one whole read gives."""

from __future__ import annotations

import io
import itertools
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest import conformance_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharestate.log import Batch, LogFinding, read_batches
from sharestate.log.index import index_positions, split_points


def _segments() -> list[bytes]:
    data = [p.read_bytes() for p in sorted(conformance_dir().glob("*/*.log"))]
    damaged = []
    for segment in data[:6]:
        flipped = bytearray(segment)
        flipped[len(segment) // 3] ^= 0x10
        damaged.append(bytes(flipped))
        damaged.append(segment[:200] + b"\x00garbage\xff" * 5 + segment[200:])
        damaged.append(segment[: len(segment) - 5])
    return data + damaged


def _read(data: bytes, bounds: list[int]) -> list[Any]:
    items: list[Any] = []
    edges = [0, *bounds, None]
    for start, end in itertools.pairwise(edges):
        assert start is not None
        items.extend(read_batches(io.BytesIO(data), start_position=start, end_position=end,
                                  chunk_bytes=997))
    return items


def _boundaries(data: bytes) -> list[int]:
    """Where batches and findings start in a whole read (what an offset index points at)."""
    return [item.header.position if isinstance(item, Batch) else item.position
            for item in read_batches(io.BytesIO(data))]


@pytest.fixture(scope="module")
def segments() -> list[bytes]:
    return _segments()


@settings(max_examples=150, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_splits_read_every_batch_and_finding_once(segments: list[bytes],
                                                  data: st.DataObject) -> None:
    segment = segments[data.draw(st.integers(0, len(segments) - 1))]
    starts = [p for p in _boundaries(segment) if p > 0]
    if not starts:
        return
    cuts = sorted(set(data.draw(st.lists(st.sampled_from(starts), max_size=5))))
    assert _read(segment, cuts) == _read(segment, [])


def test_a_split_ends_after_the_batch_in_progress(tmp_path: Path) -> None:
    segment = (conformance_dir() / "kafka-4.4-dev" / "share_interleaved.log").read_bytes()
    whole = list(read_batches(io.BytesIO(segment)))
    second = whole[1].header.position
    assert list(read_batches(io.BytesIO(segment), end_position=second - 5)) == whole[:1]
    assert list(read_batches(io.BytesIO(segment), start_position=second)) == whole[1:]


def test_offset_index_gives_split_points(tmp_path: Path) -> None:
    data = (conformance_dir() / "kafka-4.4-dev" / "share_replay_small.log").read_bytes()
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    starts = _boundaries(data)
    entries = b"".join(struct.pack(">ii", i, p) for i, p in enumerate(starts[::7]))
    segment.with_suffix(".index").write_bytes(entries + bytes(8 * 20))  # preallocated tail
    assert index_positions(segment.with_suffix(".index").read_bytes()) == starts[::7]
    points = split_points(segment, len(data), 10_000)
    assert points[0] == 0 and len(points) > 3 and set(points) <= set(starts)
    assert all(b - a >= 10_000 for a, b in itertools.pairwise(points))
    assert _read(data, points[1:]) == _read(data, [])
    assert split_points(segment, len(data), len(data)) == [0]
    segment.with_suffix(".index").unlink()
    assert split_points(segment, len(data), 10_000) == [0]


def test_a_damaged_offset_index_splits_only_at_batches(tmp_path: Path) -> None:
    """Index entries that point inside batches (a damaged `.index` beside a sound log) are
    no split points: a split begun there reported good bytes as `bad_length` findings."""
    data = (conformance_dir() / "kafka-4.4-dev" / "share_replay_small.log").read_bytes()
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    starts = _boundaries(data)
    damaged = sorted({p + (30 if i % 3 else 0) for i, p in enumerate(starts[3::5])})
    segment.with_suffix(".index").write_bytes(
        b"".join(struct.pack(">ii", i, p) for i, p in enumerate(damaged)))
    points = split_points(segment, len(data), 1_000)
    assert len(points) > 3 and set(points) <= set(starts)
    assert _read(data, points[1:]) == _read(data, [])
    assert not any(isinstance(item, LogFinding) for item in _read(data, points[1:]))
