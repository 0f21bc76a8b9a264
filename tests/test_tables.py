"""The executor-side row builders (no Spark): bronze, silver and gold rows against the core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import damage
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, Message
from conftest import conformance_dir

from sharestate import native
from sharestate.analytics.audit import ShareAuditor
from sharestate.cluster.consumed import HEADER, TIMESTAMP_TYPES, consumed_items, consumed_runs_py
from sharestate.log import (
    DEFAULT_MAX_FINDINGS,
    Batch,
    LogFinding,
    ReadLimits,
    discover,
    read_batches,
)
from sharestate.records import segment
from sharestate.records.catalog import SHARE_STATE_TOPIC as SHARE
from sharestate.records.catalog import dialect as catalog_dialect
from sharestate.records.keyvalue import decode_key_value
from sharestate.records.segment import (
    FindingCap,
    QuietRun,
    decode_segment,
    detect_segment,
    record_json,
)
from sharestate.replay.logs import END, AsOf, LogSource, partition_logs
from sharestate.replay.share_log import ShareReplay, replay_share_log
from sharestate.tables import gold_pass
from sharestate.tables.arrow_log import COLUMNS, ArrowLog
from sharestate.tables.bronze import Split, read_split
from sharestate.tables.gold import history_batch, history_columns
from sharestate.tables.silver import group_rows, share_state_rows
from sharestate.tables.spec import table
from sharestate.tables.tasks import bronze_tables, silver_tables


def _fixtures(pattern: str) -> list[Path]:
    return sorted(conformance_dir().glob(f"*/{pattern}.log"))


def _bronze(path: Path) -> pa.Table:
    (segment,) = discover([path])
    return pa.Table.from_batches([staged.rows for staged in read_split(Split(segment), "test")])


def _damaged_segments(root: Path) -> list[Path]:
    """Segments whose sample comes late or never: garbage first, fake headers, records that
    all fail, only control batches; each in a partition folder naming its topic, or not."""
    fixture = (conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes()
    markers = (conformance_dir("kafka-4.4-dev") / "share_txn.log").read_bytes()
    contents = {
        "garbage_first": bytes(range(256)) * 40 + fixture,
        "fake_headers": damage.fake_header(1 << 20) * 300 + fixture,
        "null_records": b"".join(damage.null_record_batch(i * 300, 300) for i in range(3)),
        "markers": b"".join(markers[s.position:s.position + s.size]
                            for s in damage.layout(markers) if s.is_control),
        "empty": b""}
    paths = []
    for name, data in contents.items():
        for folder in ("__share_group_state-0", "loose"):
            path = root / name / folder / "00000000000000000000.log"
            path.parent.mkdir(parents=True)
            path.write_bytes(data)
            paths.append(path)
    return paths


@pytest.mark.parametrize("held", [segment.HELD_ITEMS, 1])
def test_one_read_detects_and_reads_as_two_do(tmp_path: Path, held: int) -> None:
    """`detected_batches` (the ingest task reads a segment once) gives the detection and the
    items of `detect_segment` then `segment_batches`, its sample early, late or never (and
    past what it holds: `held` 1)."""
    for path in [*_fixtures("*"), *_damaged_segments(tmp_path)]:
        [seg] = discover([path])
        detection, items = segment.detected_batches(seg, held_items=held)
        expected = detect_segment(seg)
        assert (detection, _items(items)) == (
            expected, _items(segment.segment_batches(seg, expected))), path


def _items(items: Any) -> list[Any]:
    return [item if isinstance(item, LogFinding) else
            (item.header, [tuple(r) for r in item.records], item.findings) for item in items]


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
            for name in ("snapshot_epoch", "state_epoch", "leader_epoch", "start_offset",
                         "create_timestamp", "write_timestamp", "state_batches"):
                assert row[name] == value.get(name), name
            assert row["delivery_complete_count"] == (
                value.get("delivery_complete_count", -1) if line["record_type"] and
                row["dialect"] != "4.0" else None)


def test_silver_rows_of_a_mixed_batch_are_the_rows_of_each_record_alone() -> None:
    """Silver groups a batch's rows by value layout (dialect, type id, version) to build
    their columns: records of both dialects (whose layouts of one type and version differ),
    tombstones, values that do not decode and unknown record types, interleaved in one
    batch, give the rows each record gives alone, in the decode job and in ingest (with the
    decodings at hand)."""
    parts = [_bronze(conformance_dir(release) / name) for release, name in (
        ("kafka-4.0-dev", "share_interleaved.log"), ("kafka-4.4-dev", "share_tombstones.log"))]
    rows = [r for part in parts for r in part.to_pylist() if r["row_kind"] == "record"]
    rows = [r for pair in zip(rows[::2], rows[1::2], strict=False) for r in pair]  # interleaved
    for i in range(0, len(rows), 7):  # a value cut short: its kind is known, it does not decode
        if rows[i]["value"]:
            rows[i] = {**rows[i], "value": rows[i]["value"][:-3]}
    for i in range(3, len(rows), 11):  # a record type no dialect has
        rows[i] = {**rows[i], "key": b"\x7f\x7f" + rows[i]["key"][2:]}
    decoded = [decode_key_value(catalog_dialect(r["dialect"]), SHARE, r["key"], r["value"])
               for r in rows]
    rows = [{**r, "record_type_id": kv.type_id, "value_version": kv.value_version}
            for r, kv in zip(rows, decoded, strict=True)]  # bronze holds what they decode to
    assert {r["dialect"] for r in rows} == {"4.0", "4.1"}
    assert sum(kv.error is not None and kv.kind is not None for kv in decoded) > 5
    assert sum(kv.kind is None for kv in decoded) > 5
    assert any(kv.value is None and kv.error is None for kv in decoded)
    batch = pa.RecordBatch.from_pylist(rows, schema=table("log_records").arrow_schema())
    alone = [share_state_rows(batch.slice(i, 1)).to_pylist()[0] for i in range(len(rows))]
    assert share_state_rows(batch).to_pylist() == alone
    assert share_state_rows(batch, decoded).to_pylist() == alone


@pytest.mark.parametrize("path", _fixtures("*"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_ingest_silver_from_staged_decodings_equals_the_decode_job(path: Path) -> None:
    """Ingest's silver rows (from the decodings bronze made) equal the decode job's (which
    decodes the bronze bytes again)."""
    (segment,) = discover([path])
    fused: dict[str, list[dict[str, Any]]] = {}
    log_records = []
    for name, rows in bronze_tables(read_split(Split(segment), "test"), silver=True):
        if name == "log_records":
            log_records.append(rows)
        fused.setdefault(name, []).extend(rows.to_pylist())
    again: dict[str, list[dict[str, Any]]] = {}
    for name, rows in silver_tables(iter(log_records)):
        again.setdefault(name, []).extend(rows.to_pylist())
    assert again
    assert {name: fused.get(name) for name in again} == again


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


def _replayed(log: Any, as_of: AsOf = END) -> dict[str, Any]:
    """Everything a share replay reports, with the audit rows of its observer."""
    auditor = ShareAuditor(0, dialects=tuple(log.dialects))
    replay = ShareReplay.of_log(log, as_of=as_of, collect_history=True, observe=auditor.batch)
    history = []
    for item in log.items():
        history.extend(replay.apply(item))
    result = replay.result
    shard = result.shard
    return {"history": history, "audit": auditor.drain(),
            "states": {k: (shard.state(k), shard.leader_epoch(k), shard.state_epoch(k),
                           shard.snapshot_update_count(k), shard.last_snapshot_offset(k))
                       for k in shard},
            "log": (result.last_applied_offset, result.last_applied_timestamp,
                    result.log_start_offset, result.log_end_offset, result.records,
                    result.bytes, result.reclaimable_records, result.reclaimable_bytes,
                    shard.last_redundant_offset(), result.ledger.below(1 << 62)),
            "findings": result.findings, "shard_findings": shard.findings}


def _bronze_records(path: Path) -> pa.Table:
    bronze = _bronze(path)
    return bronze.filter(pc.equal(bronze["row_kind"], "record"))


BEYOND = AsOf(offset=1 << 62)
"""A stop point no record reaches: the replay then goes batch by batch (no quiet runs)."""


@pytest.mark.parametrize("path", [*_fixtures("share_*"), *_fixtures("*_share_*")],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replay_from_bronze_rows_equals_replay_from_the_segment(path: Path) -> None:
    """Bronze rows replay like the segment, batch by batch and in quiet runs (C, one call
    per run), with the same history, audit rows, prune ledger and findings."""
    (log,) = partition_logs(discover([path]))[0]
    records = _bronze_records(path)
    dialect = records["dialect"][0].as_py()
    expected = _replayed(log, BEYOND)
    assert _replayed(log) == expected
    for as_of in (END, BEYOND):
        rows = ArrowLog("__share_group_state", 0, records.to_batches(max_chunksize=7),
                        dialect)
        assert _replayed(rows, as_of) == expected


@pytest.mark.parametrize("name", ["share_replay_small", "share_txn"])
def test_bronze_files_read_with_dictionary_strings_make_the_same_batches(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_partition_files` reads a file's few-valued string columns (compression,
    timestamp type, dialect) as Arrow dictionaries, which differ from one row group to the
    next: `ArrowLog` makes the same batches of them as of the rows with plain strings,
    transaction markers included."""
    records = _bronze_records(conformance_dir("kafka-4.4-dev") / f"{name}.log")
    uri = str(tmp_path / "rows.parquet")
    pq.write_table(records.drop_columns(["segment"]), uri, row_group_size=5)
    monkeypatch.setattr(gold_pass, "READ_ROWS", 5)
    offsets = records["offset"].to_pylist()
    rows = list(gold_pass.read_partition_files(
        0, [gold_pass.BronzeFile(uri, 0, offsets[0], offsets[-1], 0)]))
    assert all(pa.types.is_dictionary(r.schema.field(c).type)
               for r in rows for c in gold_pass.DICTIONARY_COLUMNS)
    dialect = records["dialect"][0].as_py()
    assert list(ArrowLog(SHARE, 0, rows, dialect).batches()) == list(
        ArrowLog(SHARE, 0, records.to_batches(max_chunksize=5), dialect).batches())


@pytest.mark.parametrize("name", ["share_replay_small", "share_txn"])
def test_consumed_records_make_the_batches_of_their_bronze_rows(name: str) -> None:
    """`consumed_runs` and `consumed_items` (the live service's path, from confluent-kafka's
    `Message`s) give the batches `ArrowLog` makes of the same records as a consumer reads
    them (no batch columns, no control records): headers, records and decodings, a record
    that does not decode included (with its finding, as a segment's reader gives it)."""
    records = _bronze_records(conformance_dir("kafka-4.4-dev") / f"{name}.log")
    records = records.filter(pc.invert(records["is_control"]))
    values = records["value"].to_pylist()
    values[len(values) // 2] = b"\x00\x07garbage"
    records = records.set_column(records.schema.get_field_index("value"), "value",
                                 pa.array(values, pa.binary()))
    dialect = records["dialect"][0].as_py()
    consumed = records.select(["offset", "timestamp", "timestamp_type", "key", "value"])
    live = consumed.append_column("position", pa.nulls(len(records), pa.int64()))
    for name_ in COLUMNS:
        if name_ not in live.column_names:
            live = live.append_column(name_, pa.nulls(len(records), records[name_].type))
    expected = list(ArrowLog("__share_group_state", 0, live.to_batches(), dialect).batches())
    kinds = {"CreateTime": 1, "LogAppendTime": 2}
    messages = [Message(topic="__share_group_state", partition=0, offset=row["offset"],
                        key=row["key"], value=row["value"],
                        timestamp=(kinds[row["timestamp_type"]], row["timestamp"]))
                for row in consumed.to_pylist()]
    (run,) = _runs(messages)
    items = consumed_items("__share_group_state", catalog_dialect(dialect),
                           "__share_group_state-0", run.records, run.headers,
                           FindingCap(DEFAULT_MAX_FINDINGS, "__share_group_state-0"))
    batches = [b for item in items
               for b in (item.batches() if isinstance(item, QuietRun) else [item])]
    assert [b._replace(failed=()) for b in batches] == expected
    failed = [f for b in batches for f in b.failed]
    assert len(failed) == 1 and failed[0].offset == consumed["offset"][len(values) // 2].as_py()


def _runs(messages: list[Message]) -> list[Any]:
    """`consumed_runs` of `messages`, the C function's and its Python twin's, held equal."""
    runs = consumed_runs_py(messages, HEADER, TIMESTAMP_TYPES)
    if native.enabled():
        assert native.module.consumed_runs(messages, HEADER, TIMESTAMP_TYPES) == runs
    return runs


def test_consumed_runs_split_by_partition_and_take_errors_alone() -> None:
    """Consecutive messages of one partition make one run, whatever came before; an error
    message (the end of a partition) is a run of its own, between the records around it;
    an unknown timestamp kind is NoTimestampType."""
    def record(partition: int, offset: int, kind: int = 1) -> Message:
        return Message(topic="t", partition=partition, offset=offset, key=b"k%d" % offset,
                       value=None, timestamp=(kind, 1000 + offset))
    end = Message(topic="t", partition=1, offset=3,
                  error=KafkaError(KafkaError._PARTITION_EOF))
    runs = _runs([record(0, 0), record(0, 1, 2), record(1, 2, 0), end, record(1, 3, 7),
                  record(0, 2)])
    assert [(r.partition, [x.offset for x in r.records], r.offset, r.error is None)
            for r in runs] == [(0, [0, 1], 1, True), (1, [2], 2, True), (1, [], 3, False),
                               (1, [3], 3, True), (0, [2], 2, True)]
    assert [h.timestamp_type for r in runs for h in r.headers] == [
        "CreateTime", "LogAppendTime", "NoTimestampType", "NoTimestampType", "CreateTime"]
    assert [(h.base_offset, h.last_offset, h.base_timestamp, h.max_timestamp)
            for h in runs[0].headers] == [(0, 0, 1000, 1000), (1, 1, 1001, 1001)]
    assert runs[0].records[0] == (0, 1000, -1, b"k0", None, ())
    assert runs[2].error is not None and runs[2].error.code() == KafkaError._PARTITION_EOF


@pytest.mark.parametrize("source", ["segment", "bronze"])
@pytest.mark.parametrize("name", ["share_txn", "share_replay_small"])
def test_quiet_runs_gather_only_plain_data_batches(name: str, source: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A log's `items()` (segments: `quiet_runs`; bronze rows: built column-wise) holds
    batches outside transactions without control records or findings in runs of about
    QUIET_RUN_RECORDS records, and gives its `batches()` back unchanged."""
    monkeypatch.setattr(segment, "QUIET_RUN_RECORDS", 40)
    path = conformance_dir("kafka-4.4-dev") / f"{name}.log"
    log: LogSource
    if source == "segment":
        (log,) = partition_logs(discover([path]))[0]
    else:
        records = _bronze_records(path)
        log = ArrowLog("__share_group_state", 0, records.to_batches(max_chunksize=300),
                       records["dialect"][0].as_py())
    items = list(log.batches())
    gathered = list(log.items())
    runs = [g for g in gathered if isinstance(g, QuietRun)]
    alone = [g for g in gathered if not isinstance(g, QuietRun)]
    assert runs
    assert all(not h.is_transactional and not h.is_control for r in runs for h in r.headers)
    assert all(isinstance(g, LogFinding) or g.findings or g.header.is_transactional
               or g.header.is_control for g in alone)
    assert all(len(r.records) < 40 + max(len(b.records) for b in r.batches()) for r in runs)
    assert [b for g in gathered for b in (g.batches() if isinstance(g, QuietRun) else [g])
            ] == items
    if name == "share_replay_small":  # no transactions: everything is in runs of many
        assert not alone and len(runs) < len(items) / 3


def test_quiet_runs_keep_each_records_batch_for_findings_and_stop_points() -> None:
    """A record that fails to decode inside a quiet run is skipped (ingest wrote its
    `decode_errors` row); a bounded replay (which cannot run in one call) agrees, and stops
    where Kafka's would."""
    path = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    records = _bronze_records(path)
    values = records["value"].to_pylist()
    broken = [len(values) // 3 + 7, len(values) // 2 + 23]  # inside runs, not at their start
    for i in broken:
        values[i] = values[i][:5]
    records = records.set_column(records.schema.get_field_index("value"), "value",
                                 pa.array(values, pa.binary()))
    dialect = records["dialect"][0].as_py()

    def replayed(as_of: AsOf) -> dict[str, Any]:
        return _replayed(ArrowLog("__share_group_state", 0, records.to_batches(
            max_chunksize=50), dialect), as_of)

    in_runs = replayed(END)
    offsets = records["offset"].to_pylist()
    applied = {entry[0] for entry in in_runs["history"]}
    assert not applied & {offsets[i] for i in broken}
    assert {offsets[i + 1] for i in broken} <= applied
    assert replayed(BEYOND) == in_runs
    middle = AsOf(offset=offsets[len(offsets) * 2 // 3])
    assert replayed(middle)["log"][0] == middle.offset  # as of N includes N


def test_history_rows_hold_the_state_after_each_record() -> None:
    path = conformance_dir("kafka-4.4-dev") / "share_tombstones.log"
    entries = history_columns("4.1")
    result = replay_share_log(partition_logs(discover([path]))[0][0],
                              history_sink=entries.extend)
    rows = history_batch(entries, "__share_group_state", 0, "4.1").to_pylist()
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


def test_replay_of_spark_ordered_rows_equals_replay_of_bronze_files(tmp_path: Path) -> None:
    """`replay_rows` (rows Spark read and ordered: the jvm backend's way) gives the gold rows
    `replay_partitions` gives reading each partition's bronze files (the rs backend's)."""
    from sharestate.tables.gold_pass import REPLAY_COLUMNS, GoldOptions
    from sharestate.tables.tasks import REPLAY_TASKS, replay_partitions, replay_rows

    names = ["share_txn", "share_tombstones"]
    files = []
    for partition, name in enumerate(names):
        records = _bronze_records(conformance_dir("kafka-4.4-dev") / f"{name}.log")
        path = tmp_path / f"{partition}.parquet"
        written = records if partition == 0 else records.take(  # one file out of order
            pa.array(range(records.num_rows - 1, -1, -1)))
        # as Delta writes a data file: the partition columns are in its folder's name only
        pq.write_table(written.drop_columns(["topic", "partition", "segment"]), path,
                       row_group_size=7)
        files.append((partition, path, records))
    options = GoldOptions()
    tasks = pa.RecordBatch.from_pylist([
        {"topic": "__share_group_state", "partition": p, "files": [
            {"uri": str(path), "segment": pc.min(records["segment"]).as_py(),
             "first_offset": pc.min(records["offset"]).as_py(),
             "last_offset": pc.max(records["offset"]).as_py(), "read_at": 1}]}
        for p, path, records in files], schema=REPLAY_TASKS)
    by_files = [(name, rows.to_pylist()) for name, rows in replay_partitions(iter([tasks]),
                                                                             options)]
    ordered = pa.concat_tables([
        records.select(list(REPLAY_COLUMNS)).append_column(
            "partition", pa.array([p] * records.num_rows, pa.int32())).append_column(
            "topic", pa.array(["__share_group_state"] * records.num_rows))
        for p, _, records in files]).combine_chunks().to_batches(max_chunksize=11)
    by_rows = [(name, rows.to_pylist()) for name, rows in replay_rows(iter(ordered), options)]
    assert by_rows == by_files
    assert {name for name, _ in by_files} >= {"share_partition_state_history",
                                              "share_partition_state"}


def test_ingest_refuses_batches_over_the_record_limit_as_decode_errors(tmp_path: Path) -> None:
    """The ingest task takes the record limit of the job (`--max-batch-records`)."""
    path = tmp_path / "__share_group_state-0" / "00000000000000000000.log"
    path.parent.mkdir()
    path.write_bytes((conformance_dir("kafka-4.4-dev") / "share_codec_none.log").read_bytes())
    (segment,) = discover([path])
    limit = 5
    tables: dict[str, list[dict[str, Any]]] = {}
    for name, rows in bronze_tables(read_split(Split(segment), "test",
                                               limits=ReadLimits(max_batch_records=limit))):
        tables.setdefault(name, []).extend(rows.to_pylist())
    counts = [len(b.records) for b in read_batches(path.open("rb")) if isinstance(b, Batch)]
    assert {e["kind"] for e in tables["decode_errors"]} == {"too_many_records"}
    assert len(tables["decode_errors"]) == sum(count > limit for count in counts)
    assert len(tables["log_records"]) == sum(count for count in counts if count <= limit)
