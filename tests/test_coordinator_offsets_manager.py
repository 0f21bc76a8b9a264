"""`OffsetsManager` against Kafka's `ShareCoordinatorOffsetsManagerTest` vectors (facts §10.2)."""

from __future__ import annotations

import pytest

from sharestate.coordinator.offsets_manager import LONG_MAX, OffsetsManager

# Each step: (key, offset, is_delete, expected last_redundant_offset() afterwards).
Step = tuple[str, int, bool, int | None]

SCENARIOS: dict[str, list[Step]] = {
    "A": [("K1", 0, False, None), ("K1", 10, False, 10), ("K2", 15, False, 10),
          ("K1", 25, True, 15)],
    "B": [("K1", 10, False, 10), ("K1", 11, False, 11), ("K1", 15, False, 15)],
    "C": [("K1", 10, False, 10), ("K2", 11, False, 10), ("K3", 15, False, 10),
          ("K2", 16, False, 10), ("K1", 17, False, 15)],
    "D": [("K1", 10, False, 10), ("K2", 11, False, 10), ("K3", 15, True, 10),
          ("K2", 16, False, 10), ("K1", 17, False, 16)],
    "E": [("K1", 10, False, 10), ("K2", 11, False, 10), ("K3", 15, False, 10),
          ("K3", 18, False, 10), ("K2", 20, False, 10), ("K1", 25, False, 18)],
    "F": [("K1", 10, False, 10), ("K2", 11, False, 10), ("K3", 15, False, 10),
          ("K3", 18, True, 10), ("K2", 20, True, 10), ("K1", 25, False, 25)],
    "G": [("K1", 10, False, 10),
          *[(k, o, False, 10) for k, o in zip(["K2", "K3"] * 4,
                                              [11, 15, 18, 20, 22, 25, 27, 28], strict=True)],
          ("K1", 30, False, 27)],
    "H": [("K1", 10, True, 10), ("K4", 11, True, 11), ("K2", 13, True, 13)],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_kafka_scenarios(name: str) -> None:
    manager = OffsetsManager()
    for key, offset, is_delete, expected in SCENARIOS[name]:
        manager.update_state(key, offset, is_delete)
        assert manager.last_redundant_offset() == expected, (key, offset)
        if is_delete:
            assert manager.snapshot_offset(key) is None
        else:
            assert manager.snapshot_offset(key) == offset


def test_deleted_key_leaves_the_state() -> None:
    manager = OffsetsManager()
    manager.update_state("K1", 10, False)
    manager.update_state("K2", 15, False)
    manager.update_state("K1", 25, True)
    assert len(manager) == 1 and manager.snapshot_offset("K1") is None


def test_never_set_is_empty() -> None:
    manager = OffsetsManager()
    assert manager.raw == LONG_MAX
    assert manager.last_redundant_offset() is None
