"""A partition whose log goes back while the service reads it (the topic deleted and created
again, or its log truncated: the consumer then reads it again from its log start) is
replayed from the new log alone, never the old state with the new records applied on top,
and `/readyz` turns ready again once the new log's end is applied, however short it is."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from serve_support import eventually, fixture_records, offline

from sharestate.app.serve.live_log import Consumed, ReplayOptions
from sharestate.app.serve.state import LiveState
from sharestate.log import RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC

WHERE = (SHARE_STATE_TOPIC, 0)


def consumed(records: list[RawRecord]) -> Consumed:
    """`records` as the tailer hands them over."""
    return Consumed([r.offset for r in records], [r.timestamp for r in records],
                    ["CreateTime"] * len(records), [r.key for r in records],
                    [r.value for r in records])


def test_a_log_that_goes_back_is_replayed_from_its_new_start(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sharestate.serve")
    old, new = fixture_records("share_replay_small.log"), fixture_records("share_interleaved.log")
    assert len(new) < len(old)
    expected = {name: offline(tmp_path / name, "state", {SHARE_STATE_TOPIC: records})
                for name, records in (("old", old), ("new", new))}
    assert expected["old"] and expected["new"] and expected["old"] != expected["new"]
    state = LiveState([WHERE], {WHERE: len(old)}, ReplayOptions(), dict, 10080)
    replay = state.replays[WHERE]
    try:
        replay.feed(consumed(old))
        replay.feed(len(old))   # the end the consumer saw
        eventually(lambda: state.readiness().ready)
        assert state.share_partitions() == expected["old"]
        replay.feed(consumed(new))   # offsets from 0 again
        replay.feed(len(new))
        eventually(lambda: state.readiness().ready)
        assert state.share_partitions() == expected["new"]
        assert replay.progress.records == len(new)
    finally:
        state.stop()
    assert [r.getMessage() for r in caplog.records] == [
        f"{SHARE_STATE_TOPIC}-0: offset 0 comes after {len(old) - 1} (the topic was created "
        "again or its log truncated): replaying the partition from there"]
