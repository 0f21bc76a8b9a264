"""Lag through time against a real broker: the session's judge broker (its own topics and
groups here, none of the workload's), producers writing in rounds at known times, share
groups keeping up, falling behind then catching up, and a group on a CreateTime topic.

`share_group_lag_history` must equal, at every state change, the lag computed from the
history's state and the end offset then — what the producers' delivery reports say was
appended before that time (LogAppendTime: the broker's append time) and what Kafka's
ListOffsets by timestamp answers — exact on every row; the CreateTime topic's rows take
ListOffsets' answer and are not called exact. Once from the live cluster, once from the
broker's log.dirs copied (internal and data topics' folders) with no cluster at all."""

from __future__ import annotations

import subprocess
import time
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka_broker import KafkaBroker, copy_log_folders
from kafka_judge import SHARESTATE
from kafka_workload import Workload, share_groups_start_earliest
from serve_support import ServeProcess, get

from sharestate.analytics.end_offset_sources import observe

pytestmark = pytest.mark.kafka_broker

APPENDED, CREATED = "lag-appended", "lag-created"
PARTITIONS = {APPENDED: 2, CREATED: 1}
KEEPS_UP, FALLS_BEHIND, ON_CREATE_TIME = "sg-lag-keeps-up", "sg-lag-behind", "sg-lag-created"
GROUPS = {KEEPS_UP: APPENDED, FALLS_BEHIND: APPENDED, ON_CREATE_TIME: CREATED}
ROUNDS, PER_ROUND = 6, 15


def _table(warehouse: Path, name: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    rows: list[dict[str, Any]] = DeltaTable(str(warehouse / name)).to_pyarrow_table().to_pylist()
    return rows


def _consume(consumer: ShareConsumer, want: int, limit_s: float = 30.0) -> int:
    """Poll and accept until `want` records came (or `limit_s`); records seen."""
    seen, deadline = 0, time.monotonic() + limit_s
    while seen < want and time.monotonic() < deadline:
        for message in consumer.poll(0.5):
            if message.error() is None:
                consumer.acknowledge(message)
                seen += 1
        consumer.commit_sync()
    return seen


def _member(bootstrap: str, group: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([GROUPS[group]])
    return consumer


def _workload(broker: KafkaBroker, serve: ServeProcess
              ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Run it (asking `serve` its end offsets now and then, as a scraper would); each data
    partition's (timestamp, offset) per record, from delivery reports."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([
            NewTopic(APPENDED, PARTITIONS[APPENDED], 1,
                     config={"message.timestamp.type": "LogAppendTime"}),
            NewTopic(CREATED, PARTITIONS[CREATED], 1)]).values():
        future.result()
    time.sleep(1)
    share_groups_start_earliest(Workload(broker), GROUPS)
    appended: dict[tuple[str, int], list[tuple[int, int]]] = {}

    def delivered(error: Any, message: Message) -> None:
        assert error is None, error
        appended.setdefault((message.topic(), message.partition()), []).append(
            (message.timestamp()[1], message.offset()))

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    members = {group: _member(broker.bootstrap, group) for group in GROUPS}
    for number in range(ROUNDS):
        for topic, partitions in PARTITIONS.items():
            for partition in range(partitions):
                for _ in range(PER_ROUND):
                    producer.produce(topic, value=b"v", partition=partition,
                                     on_delivery=delivered)
        assert producer.flush(30) == 0
        time.sleep(0.3)
        keeping_up = [KEEPS_UP, ON_CREATE_TIME] + ([FALLS_BEHIND] if number == 0 else [])
        for group in keeping_up:
            _consume(members[group], PER_ROUND * PARTITIONS[GROUPS[group]])
        if number == 0:  # then it stops reading, and its member leaves
            members.pop(FALLS_BEHIND).close()
        assert serve.address is not None
        assert get(serve.address, "/v1/lag")[0] == 200
        time.sleep(0.3)
    behind = _member(broker.bootstrap, FALLS_BEHIND)  # and catches up
    _consume(behind, (ROUNDS - 1) * PER_ROUND * PARTITIONS[APPENDED])
    behind.close()
    for member in members.values():
        member.close()
    for _ in range(2):  # two reads of the end offsets now, past serve's 2 s reuse
        time.sleep(2.1)
        assert serve.address is not None
        assert get(serve.address, "/v1/end-offsets")[0] == 200
    return appended


@pytest.fixture(scope="module")
def lag_runs(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[dict[tuple[str, int], list[tuple[int, int]]], Path, Path,
                                 list[dict[str, Any]]]]:
    """The workload's appends, the warehouses of the live run and the offline one, and the
    end offsets a `sharestate serve` running meanwhile read."""
    serve = ServeProcess("--source", f"kafka://{kafka_broker.bootstrap}")
    try:
        appended = _workload(kafka_broker, serve)
        assert serve.address is not None
        served = observe(f"http://{serve.address[0]}:{serve.address[1]}", {})
    finally:
        serve.kill()
    live = tmp_path_factory.mktemp("lag-live") / "warehouse"
    common = ["--conf", "spark.ui.enabled=false"]
    done = subprocess.run([SHARESTATE, "run", "--source", f"kafka://{kafka_broker.bootstrap}",
                           "--warehouse", str(live), *common],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    # A plain copy (not keeping modification times): the copy's time says the data logs
    # took nothing more up to then, so the state changes after the last append are covered.
    copied = tmp_path_factory.mktemp("lag-logs")
    copy_log_folders([folder for folder in kafka_broker.log_dirs.iterdir()
                      if folder.is_dir() and folder.name.startswith(
                          ("__share_group_state-", "__consumer_offsets-", f"{APPENDED}-",
                           f"{CREATED}-"))], copied, keep_times=False)
    offline = tmp_path_factory.mktemp("lag-offline") / "warehouse"
    done = subprocess.run([SHARESTATE, "run", "--source", str(copied), "--end-offsets-from",
                           str(copied), "--warehouse", str(offline), *common],
                          capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    yield appended, live, offline, served


def _list_offsets(bootstrap: str, asked: set[tuple[str, int, int]]) -> dict[Any, int]:
    """Kafka's ListOffsets answer for each (topic, partition, time) asked, now; -1 (no
    record stamped at or after it) as the end offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ends = {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in PARTITIONS_ALL}).items()}
    answers = {}
    for topic, partition, at in sorted(asked):
        (future,) = admin.list_offsets(
            {TopicPartition(topic, partition): OffsetSpec.for_timestamp(at)}).values()
        offset = future.result().offset
        answers[(topic, partition, at)] = offset if offset >= 0 else ends[(topic, partition)]
    return answers


PARTITIONS_ALL = [(topic, p) for topic, count in PARTITIONS.items() for p in range(count)]


def _ours(warehouse: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = [r for r in _table(warehouse, "share_group_lag_history") if r["group_id"] in GROUPS]
    return ([r for r in rows if r["scope"] == "share_partition"],
            [r for r in rows if r["scope"] == "group"])


def _history(warehouse: Path) -> list[dict[str, Any]]:
    return sorted((h for h in _table(warehouse, "share_partition_state_history")
                   if h["group_id"] in GROUPS),
                  key=lambda h: (h["timestamp"], h["state_partition"], h["record_offset"]))


def test_lag_history_is_the_lag_at_each_time_live_and_offline(
        lag_runs: tuple[dict[tuple[str, int], list[tuple[int, int]]], Path, Path,
                        list[dict[str, Any]]],
        kafka_broker: KafkaBroker) -> None:
    """Each warehouse against the truth. The copied segments still hold the records the
    share coordinator has pruned since (below the log start offset, where a consumer
    starts), so the offline history is the longer one: the whole story is told there, and
    the rows of the records both read agree."""
    appended, live, offline, _ = lag_runs
    runs = {warehouse: (_history(warehouse), *_ours(warehouse)) for warehouse in (live, offline)}
    names = {row["topic_id"]: row["topic"] for _, own, _ in runs.values() for row in own}
    asked = {(topic, partition, row["time"]) for _, own, groups in runs.values()
             for row in [*own, *groups]
             for topic, partition in PARTITIONS_ALL if topic == GROUPS[row["group_id"]]}
    kafka = _list_offsets(kafka_broker.bootstrap, asked)

    def appended_before(topic: str, partition: int, at: int) -> int:
        stamps = sorted(appended[(topic, partition)])
        before = bisect_left(stamps, (at, -1))
        return stamps[before - 1][1] + 1 if before else 0

    def lag(h: dict[str, Any], at: int) -> tuple[int, int] | None:
        """(end offset, lag) of history row `h`'s state at `at`: Kafka's formula against
        ListOffsets' answer then (or the state's own bound, if higher); None without."""
        if h["deleted"] or h["start_offset"] < 0:
            return None
        topic = names[h["topic_id"]]
        said = kafka[(topic, h["partition"], at)]
        if topic == APPENDED:  # the producers' reports and Kafka's index agree
            assert said == appended_before(topic, h["partition"], at), (h, at)
        start = h["start_offset"]
        batches = [b for b in h["state_batches"] or () if b["last_offset"] >= start]
        complete = h["delivery_complete_count"]
        if complete is None or complete < 0:
            complete = sum(b["last_offset"] - max(b["first_offset"], start) + 1
                           for b in batches if b["delivery_state"] in (2, 4))
        end = max(said, start, *(b["last_offset"] + 1 for b in batches))
        return end, end - start - complete

    for history, own, groups in runs.values():
        assert len(own) == len(history) > 0
        by_record = {(h["state_partition"], h["record_offset"]): h for h in history}
        for row in own:
            expected = lag(by_record[(row["state_partition"], row["record_offset"])],
                           row["time"])
            if expected is None:
                assert row["lag"] is None
                continue
            assert (row["end_offset"], row["lag"]) == expected, row
            topic = names[row["topic_id"]]
            assert row["exact"] == (topic == APPENDED) and not row["lag_is_lower_bound"], row
        # a group's rows: the sum over its share-partitions' latest states, exact on the
        # LogAppendTime topic
        for row in groups:
            latest: dict[tuple[str, int], dict[str, Any]] = {}
            for h in history:
                if h["group_id"] == row["group_id"] and h["timestamp"] <= row["time"]:
                    latest[(h["topic_id"], h["partition"])] = h
            lags = [found[1] for h in latest.values() if (found := lag(h, row["time"]))]
            assert (row["lag"], row["partitions"]) == (sum(lags) if lags else None,
                                                       len(lags)), row
            if row["lag"] is not None:
                assert row["exact"] == (GROUPS[row["group_id"]] == APPENDED), row
                assert not row["lag_is_lower_bound"], row
    # the story, whole offline: a group keeps up, one falls behind and catches up
    history, own, groups = runs[offline]
    assert len(own) >= 2 * ROUNDS  # how many state records the coordinator writes for a
    # round's acknowledgements is the broker's timing: 17 on a loaded machine, 18+ idle
    behind = [r["lag"] for r in sorted(groups, key=lambda r: r["time"])
              if r["group_id"] == FALLS_BEHIND and r["lag"] is not None]
    assert max(behind) >= (ROUNDS - 2) * PER_ROUND * PARTITIONS[APPENDED] and behind[-1] == 0
    assert {r["end_offset_source"] for r in own if r["lag"] is not None} == {"segments"}
    live_own = runs[live][1]
    assert {r["end_offset_source"] for r in live_own if r["lag"] is not None} == {"kafka"}

    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(value for name, value in sorted(row.items())
                     if name != "end_offset_source")

    both = {(r["state_partition"], r["record_offset"]) for r in live_own}
    assert sorted(key(r) for r in own if (r["state_partition"], r["record_offset"]) in both) \
        == sorted(map(key, live_own))
    ends = {source: {(r["topic_id"], r["partition"], r["time"]): r["end_offset"]
                     for r in _table(warehouse, "topic_end_offsets") if r["topic"] in PARTITIONS}
            for source, warehouse in (("kafka", live), ("segments", offline))}
    assert ends["kafka"] and ends["kafka"].items() <= ends["segments"].items()


def test_serve_read_the_end_offsets_of_each_stretch_it_bracketed(
        lag_runs: tuple[dict[tuple[str, int], list[tuple[int, int]]], Path, Path,
                        list[dict[str, Any]]]) -> None:
    """`sharestate serve`'s /v1/end-offsets, as a run's `--end-offsets-from http://...`
    reads it: exact rows (read by the broker's clock), each what was appended before it."""
    appended, _, _, served = lag_runs
    ours = [row for row in served if row["topic"] == APPENDED]
    assert len(ours) >= 2 * PARTITIONS[APPENDED]
    assert all(row["source"] == "serve" and row["exact"] for row in ours)
    for row in ours:
        stamps = sorted(appended[(APPENDED, row["partition"])])
        before = bisect_left(stamps, (row["time"], -1))
        assert row["end_offset"] == (stamps[before - 1][1] + 1 if before else 0), row
