"""The partition numbers the tables give logs whose path names none: one per log, -1 down per
topic in path order, and each kept from run to run whatever is added or removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import conformance_dir

from sharestate import api
from sharestate.app.cli import main
from sharestate.log import Segment
from sharestate.replay.loose_partitions import loose_partitions

STATE, OFFSETS = "__share_group_state", "__consumer_offsets"


def _log(*names: str) -> list[Segment]:
    return [Segment(Path(f"/data/{name}"), None, None, None, False) for name in names]


def _numbers(logs: dict[str, list[list[Segment]]],
             known: dict[str, tuple[str, int]] | None = None) -> dict[str, tuple[str, int]]:
    return loose_partitions(logs, known or {})


def test_each_log_of_a_topic_is_numbered_down_from_minus_one() -> None:
    logs = {STATE: [_log("a/00000000000000000000.log", "a/00000000000000000900.log"),
                    _log("b.log"), _log("c.log")], OFFSETS: [_log("offsets.log")]}
    assert _numbers(logs) == {
        "/data/a/00000000000000000000.log": (STATE, -1),
        "/data/a/00000000000000000900.log": (STATE, -1),
        "/data/b.log": (STATE, -2), "/data/c.log": (STATE, -3),
        "/data/offsets.log": (OFFSETS, -1)}


def test_a_log_added_later_takes_a_new_number_and_shifts_none() -> None:
    known = {"/data/b.log": (STATE, -1), "/data/c.log": (STATE, -2)}
    logs = {STATE: [_log("a.log"), _log("b.log"), _log("c.log")]}  # a.log is new, first
    assert _numbers(logs, known) == {"/data/a.log": (STATE, -3), "/data/b.log": (STATE, -1),
                                     "/data/c.log": (STATE, -2)}


def test_the_number_of_a_log_gone_is_not_given_again() -> None:
    known = {"/data/gone.log": (STATE, -1), "/data/b.log": (STATE, -2)}
    assert _numbers({STATE: [_log("b.log"), _log("new.log")]}, known) == {
        "/data/b.log": (STATE, -2), "/data/new.log": (STATE, -3)}


def test_a_new_segment_of_a_numbered_log_joins_it() -> None:
    known = {"/data/a/00000000000000000000.log": (STATE, -4)}
    logs = {STATE: [_log("a/00000000000000000000.log", "a/00000000000000000700.log")]}
    assert set(_numbers(logs, known).values()) == {(STATE, -4)}


def test_logs_that_shared_minus_one_before_get_their_own() -> None:
    """A warehouse from before the numbering holds every loose log as -1: the first by path
    keeps it, the others get the next free numbers."""
    known = {"/data/a.log": (STATE, -1), "/data/b.log": (STATE, -1),
             "/data/c.log": (STATE, -1)}
    assert _numbers({STATE: [_log("a.log"), _log("b.log"), _log("c.log")]}, known) == {
        "/data/a.log": (STATE, -1), "/data/b.log": (STATE, -2), "/data/c.log": (STATE, -3)}


def test_another_topics_numbers_do_not_count() -> None:
    known = {"/data/x.log": (OFFSETS, -1)}
    assert _numbers({STATE: [_log("y.log")]}, known) == {"/data/y.log": (STATE, -1)}


def test_the_commands_and_read_log_number_loose_logs_as_a_fresh_run_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """(Every loose log was partition -1 in `state`, null in `prune`, and both files'
    records -1 in `read_log`: two logs' share-partitions could not be told apart.)"""
    fixtures = conformance_dir("kafka-4.4-dev")
    for name in ("share_txn", "share_tombstones"):
        (tmp_path / f"{name}.log").write_bytes((fixtures / f"{name}.log").read_bytes())
    records = api.read_log(tmp_path).log_records
    found = records.group_by(["source", "partition"]).aggregate([]).to_pylist()
    assert sorted((Path(r["source"]).name, r["partition"]) for r in found) == [
        ("share_tombstones.log", -1), ("share_txn.log", -2)]
    for number, name in ((-1, "share_tombstones"), (-2, "share_txn")):
        for command, field in (("state", "state_partition"), ("prune", "partition")):
            main([command, str(tmp_path)])
            together = capsys.readouterr().out.splitlines()
            main([command, str(tmp_path / f"{name}.log")])
            alone = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert alone and [{**row, field: number} for row in alone] == [
                row for row in map(json.loads, together) if row[field] == number]
