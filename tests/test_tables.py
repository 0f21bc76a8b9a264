"""The executor-side row builders (no Spark): bronze, silver and gold rows against the core."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import conformance_dir

from sharestate.log import Batch, discover, read_batches
from sharestate.records.segment import decode_segment, detect_segment, record_json
from sharestate.replay.logs import partition_logs
from sharestate.replay.share_log import replay_share_log
from sharestate.tables.arrow_log import ArrowLog
from sharestate.tables.bronze import Split, read_split
from sharestate.tables.gold import history_batch
from sharestate.tables.silver import group_rows, share_state_rows


def _fixtures(pattern: str) -> list[Path]:
    return sorted(conformance_dir().glob(f"*/{pattern}.log"))


def _bronze(path: Path) -> pa.Table:
    (segment,) = discover([path])
    return pa.Table.from_batches(list(read_split(Split(segment), "test")))


@pytest.mark.parametrize("path", _fixtures("*"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bronze_rows_are_the_records_and_findings_of_the_segment(path: Path) -> None:
    rows = _bronze(path).to_pylist()
    records = [r for item in read_batches(path.open("rb")) if isinstance(item, Batch)
               for r in item.records]
    data = [r for r in rows if r["row_kind"] == "record"]
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in data] == \
        [(r.offset, r.timestamp, r.key, r.value) for r in records]
    (segment,) = discover([path])
    decoded = list(decode_segment(segment, detect_segment(segment)))
    assert [r["decode_status"] for r in data] == \
        [d.error.kind if d.error else "ok" for d in decoded if d.offset is not None]


@pytest.mark.parametrize("path", _fixtures("share_*"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_silver_share_rows_carry_the_decoded_values(path: Path) -> None:
    bronze = _bronze(path)
    silver = share_state_rows(bronze.filter(pc.equal(bronze["row_kind"], "record"))
                              .to_batches()[0] if bronze.num_rows else None).to_pylist()
    (segment,) = discover([path])
    for row, line in zip(silver, (record_json(r) for r in
                                  decode_segment(segment, detect_segment(segment))),
                         strict=True):
        assert row["offset"] == line["offset"]
        value = line["value"]
        if line["control"] is not None or line["error"] is not None:
            continue
        assert row["group_id"] == line["key"]["group_id"]
        assert row["tombstone"] is (value is None)
        if value is not None:
            assert row["start_offset"] == value["start_offset"]
            assert row["state_batches"] == value["state_batches"]
            assert row["delivery_complete_count"] == (
                value.get("delivery_complete_count", -1) if line["record_type"] and
                row["dialect"] != "4.0" else None)


def test_silver_group_rows_type_offset_commits() -> None:
    path = conformance_dir("kafka-4.4-dev") / "consumer_offsets_records.log"
    bronze = _bronze(path)
    rows = group_rows(bronze.filter(pc.equal(bronze["row_kind"], "record")).to_batches()[0])
    commits = [r for r in rows.to_pylist() if r["record_type"] == "OffsetCommit"
               and not r["tombstone"]]
    assert {(r["group_id"], r["topic"], r["partition"], r["committed_offset"])
            for r in commits} >= {("classic-group", "orders", 5, 555)}
    assert next(r for r in commits if r["partition"] == 5)["commit_topic_id"] == \
        "q5xWKzzkQ4eA4hoB1xQpEg"


def test_replay_from_bronze_rows_equals_replay_from_the_segment() -> None:
    path = conformance_dir("kafka-4.4-dev") / "share_txn.log"
    bronze = _bronze(path)
    records = bronze.filter(pc.equal(bronze["row_kind"], "record"))
    from_rows = replay_share_log(ArrowLog("__share_group_state", 0, records.to_batches(),
                                          "4.1"))
    from_segment = replay_share_log(partition_logs(discover([path]))[0])
    assert {k: from_rows.shard.state(k) for k in from_rows.shard} == \
        {k: from_segment.shard.state(k) for k in from_segment.shard}


def test_history_rows_hold_the_state_after_each_record() -> None:
    path = conformance_dir("kafka-4.4-dev") / "share_tombstones.log"
    entries: list[object] = []
    result = replay_share_log(partition_logs(discover([path]))[0],
                              history_sink=entries.extend)
    rows = history_batch(entries, "__share_group_state", 0, "4.1").to_pylist()  # type: ignore[arg-type]
    assert len(rows) == result.records
    last = {}
    for row in rows:
        last[(row["group_id"], row["topic_id"], row["partition"])] = row
    for key in result.shard:
        state = result.shard.state(key)
        assert state is not None
        assert last[tuple(key)]["start_offset"] == state.start_offset
        assert last[tuple(key)]["state_batches"] == [
            {"first_offset": b[0], "last_offset": b[1], "delivery_state": b[2],
             "delivery_count": b[3]} for b in state.batches]
    assert [r["record_type"] for r in rows if r["deleted"]] == ["Tombstone"] * sum(
        r["deleted"] for r in rows)
