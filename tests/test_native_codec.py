"""The C struct reader gives exactly what the pure-Python reader gives, good bytes or bad."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sharestate import native
from sharestate.records import catalog
from sharestate.records.codec import DecodeError, read_struct, read_struct_py
from sharestate.records.spec import StructLayout
from conftest import conformance_dir

pytestmark = pytest.mark.skipif(native.module is None, reason="sharestate._native is not built")


def _layouts() -> list[StructLayout]:
    found: list[StructLayout] = []
    for name in catalog.dialect_names():
        for kinds in catalog.dialect(name).topics.values():
            for kind in kinds.values():
                found.append(kind.key_layout())
                lo, hi = kind.value.valid.lo, kind.value.valid.hi or kind.value.valid.lo
                found.extend(layout for v in range(lo, hi + 1)
                             if (layout := kind.value_layout(v)) is not None)
    return found


LAYOUTS = _layouts()


def _outcome(reader: Any, layout: StructLayout, data: bytes) -> tuple[Any, ...]:
    try:
        values, pos = reader(layout, data, 0, len(data))
    except DecodeError as exc:
        return ("error", str(exc), exc.position)
    return ("ok", values, pos)


def _fixture_payloads() -> Iterator[bytes]:
    root = conformance_dir()
    for path in sorted(root.glob("*/*.records.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for field in ("keyHex", "valueHex"):
                if row.get(field):
                    yield bytes.fromhex(row[field])[2:]


def test_native_matches_python_on_every_fixture_payload_under_every_layout() -> None:
    payloads = list(_fixture_payloads())
    assert payloads
    for data in payloads:
        for layout in LAYOUTS:
            assert _outcome(read_struct, layout, data) == _outcome(read_struct_py, layout, data)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(LAYOUTS) - 1), data=st.binary(max_size=200))
def test_native_matches_python_on_random_bytes(index: int, data: bytes) -> None:
    layout = LAYOUTS[index]
    assert _outcome(read_struct, layout, data) == _outcome(read_struct_py, layout, data)
