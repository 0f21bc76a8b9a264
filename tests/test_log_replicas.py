"""A cluster's copies of one partition (the `log.dirs` of several brokers) are read once: from
the replica that reaches furthest (they were all read, every batch after the first copy's an
`offset_order` finding, exit 1)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import conformance_dir
from damage import layout

from sharestate import exit_codes
from sharestate.app.cli import main
from sharestate.log.discovery import discover

SEGMENT = f"{0:020d}.log"


def _replica(root: Path, broker: str, data: bytes, partition: int = 0) -> Path:
    folder = root / broker / f"__share_group_state-{partition}"
    folder.mkdir(parents=True)
    (folder / SEGMENT).write_bytes(data)
    return folder


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def log() -> bytes:
    return (conformance_dir("kafka-4.4-dev") / "share_replay_small.log").read_bytes()


@pytest.mark.parametrize("command", ["state", "prune", "decode"])
def test_each_partition_is_read_from_the_replica_that_reaches_furthest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], log: bytes, command: str) -> None:
    spans = layout(log)
    behind = log[:spans[len(spans) // 2].position]  # a follower that had not caught up
    cluster = tmp_path / "cluster"
    _replica(cluster, "broker-1", behind)
    leader = _replica(cluster, "broker-2", log)
    _replica(cluster, "broker-3", log[:spans[-1].position])
    alone = _replica(tmp_path, "one", log)

    status, out, err = _run(capsys, command, str(cluster))
    expected_status, expected, _ = _run(capsys, command, str(alone))
    assert (status, out.replace(str(leader), str(alone))) == (expected_status, expected), err
    assert status == exit_codes.OK, err
    assert "offset_order" not in err
    assert (f"__share_group_state-0: 3 copies (replicas of several brokers?); read {leader} "
            f"(last offset {spans[-1].last_offset}), not {cluster / 'broker-1' / leader.name} "
            f"({spans[len(spans) // 2 - 1].last_offset}), {cluster / 'broker-3' / leader.name} "
            f"({spans[-2].last_offset})") in err


def test_equal_replicas_are_read_from_the_first_and_other_partitions_from_theirs(
        tmp_path: Path, log: bytes) -> None:
    first = _replica(tmp_path, "a", log)
    _replica(tmp_path, "b", log)
    own = _replica(tmp_path, "b", log, partition=7)
    said: list[str] = []
    segments = discover([tmp_path], say=said.append)
    assert [s.path.parent for s in segments] == [first, own]
    assert said == [f"__share_group_state-0: 2 copies (replicas of several brokers?); read "
                    f"{first} (last offset 599), not {tmp_path / 'b' / first.name} (599)"]


def test_a_replica_with_no_readable_batch_is_not_chosen(tmp_path: Path, log: bytes) -> None:
    _replica(tmp_path, "a", b"\xff" * 4096)
    good = _replica(tmp_path, "b", log[:layout(log)[3].position])
    said: list[str] = []
    assert {s.path.parent for s in discover([tmp_path], say=said.append)} == {good}
    assert said[0].endswith(f"not {tmp_path / 'a' / good.name} (none readable)")


def test_on_equal_reach_the_replica_with_more_history_is_read(tmp_path: Path,
                                                             log: bytes) -> None:
    """A replica that kept an older segment (its cleaner or retention ran later) is read."""
    spans = layout(log)
    cut = spans[len(spans) // 2]
    trimmed = tmp_path / "a" / "__share_group_state-0"
    trimmed.mkdir(parents=True)
    (trimmed / f"{cut.base_offset:020d}.log").write_bytes(log[cut.position:])
    fuller = tmp_path / "b" / "__share_group_state-0"
    fuller.mkdir(parents=True)
    (fuller / SEGMENT).write_bytes(log[:cut.position])
    (fuller / f"{cut.base_offset:020d}.log").write_bytes(log[cut.position:])
    assert {s.path.parent for s in discover([tmp_path])} == {fuller}


def test_the_copy_read_keeps_the_latest_log_start_any_copy_checkpointed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], log: bytes) -> None:
    """Three caught-up copies, the one read (the first by path on a tie) from a broker whose
    checkpoint trails the share coordinator's last prune: prune and state answer from the
    latest start a copy checkpointed, as from that copy alone (a 3-broker 4.3.1 cluster
    after a leader's kill -9: log start 1655 and 51 records reclaimable, where
    ListOffsets earliest said 1706)."""
    spans = layout(log)
    stale, start = spans[3].base_offset, spans[len(spans) // 2].base_offset + 1
    cluster = tmp_path / "cluster"
    for broker, checkpointed in (("broker-1", stale), ("broker-2", start), ("broker-3", 0)):
        _replica(cluster, broker, log)
        (cluster / broker / "log-start-offset-checkpoint").write_text(
            f"0\n1\n__share_group_state 0 {checkpointed}\n")
    alone = _replica(tmp_path, "one", log).parent
    (alone / "log-start-offset-checkpoint").write_text(f"0\n1\n__share_group_state 0 {start}\n")

    for command in ("prune", "state"):
        status, out, err = _run(capsys, command, str(cluster))
        assert (status, out) == _run(capsys, command, str(alone))[:2], err
        assert f"; log start {start} as {cluster / 'broker-2'} checkpointed it" in err
    (row,) = [json.loads(line) for line in _run(capsys, "prune", str(cluster))[1].splitlines()]
    assert row["log_start_offset"] == start


@pytest.mark.parametrize("epoch_from", ["checkpoint", "last batch"])
def test_a_copy_reaching_further_at_an_older_leader_epoch_is_not_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], log: bytes, epoch_from: str) -> None:
    """A leader killed with records its followers had not fetched: the new leader's epoch
    starts at its own end and Kafka truncates the old leader's copy to it, so the copy that
    knows the newer epoch is read, not the one reaching further (a 3-broker 4.3.1 cluster:
    three consumer groups' offsets one commit ahead of kafka-consumer-groups)."""
    spans = layout(log)
    top = max(struct.unpack_from(">i", log, span.position + 12)[0] for span in spans)
    cut = spans[-3]  # the new leader's log ends before the old one's last two batches
    new = bytearray(log[:cut.position + cut.size])
    if epoch_from == "last batch":  # partitionLeaderEpoch, which the CRC does not cover
        struct.pack_into(">i", new, cut.position + 12, top + 1)
    cluster = tmp_path / "cluster"
    old_leader = _replica(cluster, "broker-1", log)
    leader = _replica(cluster, "broker-2", bytes(new))
    alone = _replica(tmp_path, "one", bytes(new))
    if epoch_from == "checkpoint":
        (old_leader / "leader-epoch-checkpoint").write_text(f"0\n1\n{top} 0\n")
        (leader / "leader-epoch-checkpoint").write_text(
            f"0\n2\n{top} 0\n{top + 1} {cut.last_offset + 1}\n")

    for command in ("state", "prune", "decode"):
        status, out, err = _run(capsys, command, str(cluster))
        assert (status, out.replace(str(leader), str(alone))) == _run(
            capsys, command, str(alone))[:2], err
        assert (f"read {leader} (last offset {cut.last_offset}), not {old_leader} "
                f"({spans[-1].last_offset}); {old_leader} reaches further at an older leader "
                f"epoch than {top + 1} (records Kafka truncates)") in err
