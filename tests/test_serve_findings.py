"""`sharestate serve` lists a partition's findings as the offline commands list a segment's
(`records.segment.FindingCap`): the first `--max-findings` in full, the rest counted per kind,
each kind summed up in one `omitted_findings` finding. A partition of records that do not
decode holds no more than that, its views share the listed findings instead of copying
them, `/v1/findings` and `/metrics` say how many were left out, and a checkpoint keeps the
counts."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from serve_support import eventually, fixture_records, get, mock_cluster
from test_serve_log_reset import apply

from sharestate.app.serve.checkpoint import decode_body, encode_body
from sharestate.app.serve.metrics import registry
from sharestate.app.serve.partition import PartitionReplay, ReplayOptions
from sharestate.app.serve.service import start
from sharestate.app.serve.view import View, findings, partition_view
from sharestate.cluster import parse_options
from sharestate.log import RawRecord
from sharestate.records.catalog import SHARE_STATE_TOPIC

WHERE = (SHARE_STATE_TOPIC, 0)
CAP = 10
UNKNOWN = (b"\x00\x63garbage-key", b"\x00\x01not-a-value")  # record type 99


def bad(first: int, nulls: int, unknown: int) -> list[RawRecord]:
    """`nulls` records without a key, then `unknown` of an unknown record type, from offset
    `first`."""
    return ([RawRecord(first + i, 1000, -1, None, b"\x00\x01x", ()) for i in range(nulls)]
            + [RawRecord(first + nulls + i, 1000, -1, *UNKNOWN, ()) for i in range(unknown)])


def metric(text: str, name: str) -> float:
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == name
               and s.labels == {"state_topic": SHARE_STATE_TOPIC, "state_partition": "0"})


def test_a_partition_lists_max_findings_and_counts_the_rest() -> None:
    cluster = mock_cluster()
    good = fixture_records("share_codec_none.log")
    cluster.produce(SHARE_STATE_TOPIC, [*good, *bad(len(good), 2000, 500)])
    running = start(parse_options({"bootstrap.servers": cluster.bootstrap}),
                    ("127.0.0.1", 0), ReplayOptions(max_findings=CAP),
                    retention_minutes=10080, version="test")
    try:
        eventually(lambda: running.tailer.view.readiness().ready)
        replay = running.tailer.partitions[WHERE]
        assert replay.share is not None and len(replay.share.result.findings) == CAP
        part = running.tailer.view.partitions[WHERE]
        assert len(part.findings) + len(part.omitted) == CAP + 2  # a summary per kind
        assert part.omitted_count == 2500 - CAP
        found: list[dict[str, Any]] = [f for f in get(running.address, "/v1/findings")[1]
                                       if (f["topic"], f["partition"]) == WHERE]
        assert [f["kind"] for f in found] == ["null_key"] * CAP + ["omitted_findings"] * 2
        assert [f["message"].split(" on,")[0] for f in found[CAP:]] == [
            f"{2000 - CAP} more null_key findings in this partition, from offset "
            f"{len(good) + CAP}",
            f"500 more unknown_record_type findings in this partition, from offset "
            f"{len(good) + 2000}"]
        text = get(running.address, "/metrics")[1]
        assert metric(text, "sharestate_serve_findings_omitted_total") == 2500 - CAP
        assert metric(text, "sharestate_serve_decode_errors_total") == 2500
        # more bad records: the views go on sharing the listed findings
        listed = part.findings
        cluster.produce(SHARE_STATE_TOPIC, bad(len(good) + 2500, 100, 0))
        eventually(lambda: running.tailer.view.partitions[WHERE].omitted_count
                   == 2600 - CAP)
        assert running.tailer.view.partitions[WHERE].findings is listed
    finally:
        running.close()


def test_a_checkpoint_keeps_the_counted_findings() -> None:
    """A replay resumed from a checkpoint lists no more than `max_findings` in all and goes
    on counting from the counts it was saved with."""
    good = fixture_records("share_codec_none.log")
    options = ReplayOptions(max_findings=CAP)
    replay = PartitionReplay(*WHERE, options)
    apply(replay, [*good, *bad(len(good), 4, 3)])
    assert replay.cap.omitted_count() == 0
    apply(replay, bad(len(good) + 7, 5, 2))
    (saved,) = decode_body(encode_body({WHERE: replay.checkpoint()})).values()
    assert saved.omitted == {"null_key": (2, -1, len(good) + 10),
                             "unknown_record_type": (2, -1, len(good) + 12)}
    resumed = PartitionReplay(*WHERE, options, saved=saved)
    apply(resumed, bad(len(good) + 14, 1, 1))
    part = partition_view(resumed, None, 10080)
    assert len(part.findings) == CAP and part.omitted_count == 6
    assert [f.message.split(" finding")[0] for f in part.omitted] == [
        "3 more null_key", "3 more unknown_record_type"]


def tombstones(first: int, count: int) -> list[RawRecord]:
    """`count` ShareUpdate-key tombstones from offset `first`: Kafka's replay throws on
    each, so each is a finding of the share shard, not of the log."""
    (tombstone, *_) = [r for r in fixture_records("share_update_tombstone.log")
                       if r.value is None]
    return [tombstone._replace(offset=first + i) for i in range(count)]


def test_the_shards_findings_are_listed_up_to_the_cap_with_the_logs() -> None:
    """The share shard's own findings (a record Kafka's replay does not apply) come under
    the partition's cap with the log's: listed in full up to `max_findings` in all, then
    counted per code; the replay and its views hold no more, /v1/findings and /metrics
    give every one, and a resumed replay goes on counting."""
    good = fixture_records("share_codec_none.log")
    options = ReplayOptions(max_findings=CAP)
    replay = PartitionReplay(*WHERE, options)
    apply(replay, [*good, *bad(len(good), 4, 0)])
    apply(replay, tombstones(len(good) + 4, 2500))
    assert replay.share is not None and len(replay.share.result.shard.findings) == CAP - 4
    part = partition_view(replay, None, 10080)
    assert part.share is not None and len(part.share.shard.findings) == CAP - 4
    found = findings(View({WHERE: part}))
    assert [f["kind"] for f in found] == (["null_key"] * 4 + ["update-tombstone"] * (CAP - 4)
                                          + ["omitted_findings"])
    assert [f["offset"] for f in found[4:CAP]] == list(range(len(good) + 4, len(good) + CAP))
    assert found[-1]["message"].split(" on,")[0] == (
        f"{2500 - CAP + 4} more update-tombstone findings in this partition, from offset "
        f"{len(good) + CAP}")
    scraped = registry(lambda: View({WHERE: part}), dict)
    labels = {"state_topic": SHARE_STATE_TOPIC, "state_partition": "0"}
    assert scraped.get_sample_value("sharestate_serve_decode_errors_total", labels) == 2504
    assert scraped.get_sample_value("sharestate_serve_findings_omitted_total",
                                    labels) == 2504 - CAP
    (saved,) = decode_body(encode_body({WHERE: replay.checkpoint()})).values()
    resumed = PartitionReplay(*WHERE, options, saved=saved)
    apply(resumed, tombstones(len(good) + 2504, 6))
    assert resumed.share is not None and len(resumed.share.result.shard.findings) == CAP - 4
    assert resumed.cap.omitted_count() == 2510 - CAP
