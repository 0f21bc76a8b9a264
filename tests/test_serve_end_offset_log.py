"""The end offsets `sharestate serve` read, kept as runs (`app.serve.end_offset_log`)."""

from __future__ import annotations

from sharestate.app.serve.end_offset_log import EndOffsetLog

NAMES = {"T": "orders"}


def _rows(log: EndOffsetLog) -> list[tuple[int, int, int]]:
    return [(row["partition"], row["time"], row["end_offset"]) for row in log.rows(NAMES)]


def test_two_reads_of_one_value_bracket_a_stretch_a_lone_read_tells_nothing() -> None:
    log = EndOffsetLog()
    log.add(100, 110, {("T", 0): 5, ("orders", 0): 5})
    assert _rows(log) == []  # when, within the request, 5 held is not known
    log.add(200, 205, {("T", 0): 5})
    log.add(300, 302, {("T", 0): 5})
    # 5 held from the first answer (110) to the last ask (300); the name key is left out
    assert _rows(log) == [(0, 110, 5), (0, 300, 5)]
    log.add(400, 401, {("T", 0): 9})
    log.add(500, 501, {("T", 0): 9})
    assert _rows(log) == [(0, 110, 5), (0, 300, 5), (0, 401, 9), (0, 500, 9)]
    assert {row["topic"] for row in log.rows(NAMES)} == {"orders"}
    assert log.rows({}) == []


def test_a_read_overlapping_the_previous_answer_brackets_nothing() -> None:
    log = EndOffsetLog()
    log.add(100, 150, {("T", 1): 3})
    log.add(120, 160, {("T", 1): 3})  # asked before the first answer came
    assert _rows(log) == []


def test_the_oldest_runs_go_first() -> None:
    log = EndOffsetLog(runs=2)
    for end in (1, 2, 3):
        log.add(10 * end, 10 * end + 1, {("T", 0): end})
        log.add(10 * end + 5, 10 * end + 6, {("T", 0): end})
    assert [end for _, _, end in _rows(log)] == [2, 2, 3, 3]
