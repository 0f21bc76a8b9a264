"""How `make test` shares the suite between pytest-xdist workers (tests/conftest.py): every
test that uses one of the session's costly fixtures runs in the worker that builds it."""

from __future__ import annotations

import pytest
from conftest import SHARED_FIXTURES, XDIST_GROUPS, xdist_group


def test_the_users_of_a_costly_session_fixture_share_its_group(
        request: pytest.FixtureRequest) -> None:
    misplaced = sorted({f"{item.nodeid.split('::')[0]} uses {name}: add it to "
                        f"XDIST_GROUPS[{group!r}] in tests/conftest.py"
                        for item in request.session.items
                        for name, group in SHARED_FIXTURES.items()
                        if name in getattr(item, "fixturenames", ())
                        and xdist_group(item.nodeid) != group})
    assert misplaced == []


def test_a_module_is_its_own_unit_unless_grouped() -> None:
    assert xdist_group("tests/test_tables.py::test_x[a::b]") == "tests/test_tables.py"
    assert xdist_group("tests/test_kafka_judge.py::test_x") == "kafka-judge"
    assert set(SHARED_FIXTURES.values()) <= set(XDIST_GROUPS)
