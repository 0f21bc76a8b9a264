"""Snapshots of the replays: a replay restored from its snapshot (taken at any point, through
its serialised form) goes on to exactly the answers of one never interrupted, on every
Kafka-written fixture log, a damaged one and simulated ones, under both transaction
semantics and with stop points; a snapshot of another format or other code is refused.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import conformance_dir
from damage import layout

from sharestate import native
from sharestate.coordinator.group_offsets import OffsetEvent
from sharestate.coordinator.shard import KAFKA, TRANSACTIONAL_ACKS
from sharestate.log import LogFinding, discover
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC
from sharestate.records.segment import DecodedBatch, LogItem, QuietRun
from sharestate.replay import snapshot
from sharestate.replay.group_log import GroupReplay
from sharestate.replay.logs import END, AsOf, PartitionLog, partition_logs
from sharestate.replay.prune import prune_recommendation
from sharestate.replay.rows import offset_rows, state_rows
from sharestate.replay.share_log import HistoryEntry, ShareReplay
from sharestate.replay.snapshot import Snapshot, SnapshotMismatch, decode, encode
from sharestate.runtime import quiet_gc
from sharestate.simulate import SimulationConfig, simulate

CUTS = 40
"""Cut points tried per log (every item boundary of a log with fewer items)."""
LARGE = 20_000
"""Records of a log cut at two points only (and replayed to its end only)."""


def _logs(paths: list[Path]) -> list[PartitionLog]:
    return partition_logs(discover([str(p) for p in paths]))[0]


def _fixtures(pattern: str) -> list[Path]:
    return sorted(conformance_dir().glob(f"kafka-*/{pattern}"))


def _log(path: Path) -> PartitionLog:
    (log,) = _logs([path])
    return log


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _cuts(count: int) -> list[int]:
    """Item positions to cut at: all of them, or `CUTS` spread over the log."""
    if count <= CUTS:
        return list(range(count + 1))
    return sorted({round(i * count / CUTS) for i in range(CUTS + 1)})


def _through_bytes(taken: Snapshot) -> Snapshot:
    (back,) = decode(encode([taken]))
    assert back.topic == taken.topic and back.partition == taken.partition
    assert {n: t.to_pylist() for n, t in back.tables.items()} == {
        n: t.to_pylist() for n, t in taken.tables.items()}
    return back


def _tables(taken: Snapshot) -> dict[str, list[dict[str, Any]]]:
    return {name: table.to_pylist() for name, table in taken.tables.items()}


# -- share ----------------------------------------------------------------------------------

def _share_answers(replay: ShareReplay) -> dict[str, Any]:
    """What the commands and tables answer of a share replay (built from the replay, not its
    snapshot), and its snapshot."""
    result = replay.result
    return {"state": state_rows(result),
            "prune": prune_recommendation(result), "findings": result.findings,
            "shard_findings": result.shard.findings, "stopped": replay.stopped,
            "snapshot": _tables(replay.snapshot())}


@pytest.fixture(autouse=True, scope="module")
def _quiet_gc() -> Iterator[None]:
    """The collector as the CLI and the pipeline run it (the histories held are long)."""
    thresholds = gc.get_threshold()
    quiet_gc()
    yield
    gc.set_threshold(*thresholds)


def _share_run(log: PartitionLog, items: list[LogItem], cut: int | None, *, semantics: str,
               as_of: AsOf) -> tuple[list[HistoryEntry], dict[str, Any], bool]:
    """Replay `items`, through a snapshot at item `cut` (None: never); the history after
    the cut, the answers, whether the snapshot held open transactions."""
    replay = ShareReplay.of_log(log, as_of=as_of, semantics=semantics, collect_history=True)
    pending = False
    history: list[HistoryEntry] = []
    for index, item in enumerate(items):
        if index == cut:
            taken = replay.snapshot()
            pending = taken.tables["share_pending"].num_rows > 0
            replay = ShareReplay.restore(_through_bytes(taken), as_of=as_of,
                                         collect_history=True)
            history = []
        history.extend(replay.apply(item))
    if cut == len(items):
        replay = ShareReplay.restore(_through_bytes(replay.snapshot()), as_of=as_of)
        history = []
    return history, _share_answers(replay), pending


@pytest.mark.parametrize(("path", "semantics"), [
    pytest.param(path, semantics, id=f"{_name(path)}-{semantics}")
    for path in _fixtures("share_*.log*") for semantics in (KAFKA, TRANSACTIONAL_ACKS)
    # Kafka 4.4's large log, in C, once: the 4.0 one replays in Python (4.0's combiner) as
    # both do under transactional-acks (they have no transactions), and the small logs
    # cover those paths
    if "large" not in path.name or (semantics == KAFKA and "4.4" in path.parent.name)])
def test_a_restored_share_replay_goes_on_as_the_uninterrupted_one(path: Path,
                                                                   semantics: str) -> None:
    _check_share(_log(path), semantics)


def _check_share(log: PartitionLog, semantics: str) -> None:
    items = list(log.items())
    offsets = [r.offset for item in items for r in _records(item)]
    last = max(offsets, default=0)
    checked_pending = False
    large = len(offsets) > LARGE
    stops = (END,) if large else (END, AsOf(offset=last // 2), AsOf(offset=last // 3 + 1))
    for as_of in stops:
        whole_history, expected, _ = _share_run(log, items, None, semantics=semantics,
                                                as_of=as_of)
        cuts = _cuts(len(items)) if as_of.unbounded else _cuts(len(items))[::4]
        if large:
            cuts = [len(items) // 3, 2 * len(items) // 3]
        for cut in cuts:
            history, answers, pending = _share_run(log, items, cut, semantics=semantics,
                                                   as_of=as_of)
            checked_pending |= pending
            assert answers == expected, f"cut at item {cut} of {len(items)}, {as_of}"
            applied_before = len(whole_history) - len(history)
            assert history == whole_history[applied_before:], f"cut at item {cut}"
    if semantics == TRANSACTIONAL_ACKS and any(
            isinstance(item, DecodedBatch) and item.header.is_transactional for item in items):
        assert checked_pending, "no cut fell inside an open transaction"


def _records(item: LogItem) -> list[Any]:
    return [] if isinstance(item, LogFinding) else list(item.records)


def test_a_restored_share_replay_of_a_damaged_log_keeps_its_findings(tmp_path: Path) -> None:
    """A log with a refused batch and garbage between batches: the findings (and the state
    after them) come through the snapshot."""
    source = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    data = bytearray(source.read_bytes())
    spans = layout(bytes(data))
    for span in spans[len(spans) // 3], spans[2 * len(spans) // 3]:
        data[span.position + span.size - 3] ^= 0xFF  # CRC no longer matches
    damaged = tmp_path / "__share_group_state-0" / "00000000000000000000.log"
    damaged.parent.mkdir()
    damaged.write_bytes(bytes(data) + b"\x00garbage")
    (log,) = _logs([damaged])
    _check_share(log, KAFKA)
    whole = _share_run(log, list(log.items()), None, semantics=KAFKA, as_of=END)[1]
    assert len(whole["findings"]) >= 2


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> list[PartitionLog]:
    out = tmp_path_factory.mktemp("simulated")
    simulate(SimulationConfig(records=6000, seed=3, state_partitions=2, offsets_partitions=2,
                              snapshot_limit=20, poison_rate=0.02, orphaned_state=1,
                              stuck_deleting=1), out)
    return _logs([out])


def test_restored_replays_of_simulated_logs_go_on_as_the_uninterrupted_ones(
        simulated: list[PartitionLog]) -> None:
    shares = [log for log in simulated if log.topic == SHARE_STATE_TOPIC]
    groups = [log for log in simulated if log.topic == CONSUMER_OFFSETS_TOPIC]
    assert shares and groups
    for log in shares:
        _check_share(log, KAFKA)
    for log in groups:
        _check_group(log)


def test_native_and_python_replays_snapshot_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C kernel and the Python path leave the same snapshot, and each restores the
    other's (the fingerprint tells them apart only by what code ran)."""
    if not native.enabled():
        pytest.skip("the C extension is not built")
    log = _log(conformance_dir("kafka-4.4-dev") / "share_interleaved.log")
    items = list(log.items())
    fast = _share_run(log, items, len(items) // 2, semantics=KAFKA, as_of=END)
    monkeypatch.setattr(native, "module", None)
    assert _share_run(log, items, len(items) // 2, semantics=KAFKA, as_of=END) == fast


def test_a_snapshot_leaves_its_replay_going_and_stays_as_taken(
        simulated: list[PartitionLog]) -> None:
    """A replay snapshotted along the way (as the live service's checkpoints do) goes on
    as one never snapshotted, and each snapshot keeps what it held when taken."""
    for log in simulated:
        kind = ShareReplay if log.topic == SHARE_STATE_TOPIC else GroupReplay
        items = list(log.items())
        plain, watched = kind.of_log(log), kind.of_log(log)
        taken: list[tuple[Snapshot, dict[str, Any]]] = []
        for index, item in enumerate(items):
            plain.apply(item)
            watched.apply(item)
            if index % 7 == 0:
                snap = watched.snapshot()
                taken.append((snap, _tables(snap)))
        assert _tables(watched.snapshot()) == _tables(plain.snapshot())
        assert all(_tables(snap) == tables for snap, tables in taken)
        if kind is ShareReplay:
            assert any(snap.tables["prune_ledger"].num_rows for snap, _ in taken)


# -- group ----------------------------------------------------------------------------------

def _group_answers(replay: GroupReplay) -> dict[str, Any]:
    result = replay.result
    coordinator = result.coordinator
    return {"offsets": offset_rows(coordinator, 10080, pending=True),
            "groups": {gid: (repr(group), group.state)
                       for gid, group in coordinator.groups.groups.items()},
            "order": list(coordinator.groups.groups),
            "share": repr(coordinator.groups.share_partitions),
            "anomalies": coordinator.groups.anomalies, "skipped": coordinator.skipped,
            "findings": result.findings, "records": result.records,
            "last": (result.last_applied_offset, result.last_applied_timestamp),
            "stopped": replay.stopped, "snapshot": _tables(replay.snapshot())}


def _group_run(log: PartitionLog, items: list[LogItem], cut: int | None, as_of: AsOf
               ) -> tuple[list[OffsetEvent], dict[str, Any], bool]:
    events: list[OffsetEvent] = []
    replay = GroupReplay.of_log(log, as_of=as_of, listener=events.append)
    pending = False
    for index, item in enumerate(items):
        if index == cut:
            taken = replay.snapshot()
            pending = taken.tables["pending_offsets"].num_rows > 0
            events = []
            replay = GroupReplay.restore(_through_bytes(taken), as_of=as_of,
                                         listener=events.append)
        replay.apply(item)
    if cut == len(items):
        replay = GroupReplay.restore(_through_bytes(replay.snapshot()), as_of=as_of)
        events = []
    return events, _group_answers(replay), pending


def _check_group(log: PartitionLog) -> None:
    items: list[LogItem] = list(log.batches())
    last = max((r.offset for item in items for r in _records(item)), default=0)
    for as_of in (END, AsOf(offset=last // 2)):
        whole_events, expected, _ = _group_run(log, items, None, as_of)
        for cut in _cuts(len(items)):
            events, answers, _ = _group_run(log, items, cut, as_of)
            assert answers == expected, f"cut at item {cut} of {len(items)}, {as_of}"
            assert events == whole_events[len(whole_events) - len(events):]


@pytest.mark.parametrize("path", _fixtures("consumer_offsets_*.log"), ids=_name)
def test_a_restored_group_replay_goes_on_as_the_uninterrupted_one(path: Path) -> None:
    _check_group(_log(path))


def test_the_group_logs_fill_every_group_table(simulated: list[PartitionLog]) -> None:
    """Kafka's fixtures and the simulated logs snapshot every kind of group state (so the
    tests above cover it)."""
    filled: set[str] = set()
    types: set[str] = set()
    pending = False
    for log in [*map(_log, _fixtures("consumer_offsets_*.log")),
                *(log for log in simulated if log.topic == CONSUMER_OFFSETS_TOPIC)]:
        replay = GroupReplay.of_log(log)
        for item in log.batches():
            replay.apply(item)
            pending |= replay.snapshot().tables["pending_offsets"].num_rows > 0
        taken = replay.snapshot()
        filled |= {name for name, table in taken.tables.items() if table.num_rows}
        types |= set(taken.tables["groups"]["type"].to_pylist())
    assert types == {"classic", "consumer", "share", "streams"}
    assert {"committed_offsets", "groups", "group_members", "target_assignments",
            "share_group_metadata"} <= filled
    assert pending


# -- the serialised form ----------------------------------------------------------------------

def _small() -> Snapshot:
    log = _log(conformance_dir("kafka-4.4-dev") / "share_txn.log")
    replay = ShareReplay.of_log(log)
    for item in log.items():
        replay.apply(item)
    return replay.snapshot()


def _with_metadata(data: bytes, change: Callable[[dict[bytes, bytes]], None]) -> bytes:
    envelope = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    metadata = dict(envelope.schema.metadata)
    change(metadata)
    sink = pa.BufferOutputStream()
    table = envelope.replace_schema_metadata(metadata)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def test_a_snapshot_of_another_format_or_other_code_is_refused() -> None:
    data = encode([_small()])
    assert decode(data)
    other_format = _with_metadata(data, lambda m: m.update(
        {b"sharestate.snapshot.format": str(snapshot.FORMAT + 1).encode()}))
    with pytest.raises(SnapshotMismatch, match=f"format {snapshot.FORMAT + 1}"):
        decode(other_format)
    other_core = _with_metadata(data, lambda m: m.update(
        {b"sharestate.snapshot.core": b"0" * 64}))
    with pytest.raises(SnapshotMismatch, match="another version"):
        decode(other_core)
    for damaged in (data[: len(data) // 2], b"not a snapshot", b""):
        with pytest.raises(ValueError):
            decode(damaged)


def test_the_fingerprint_covers_the_c_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension carries the digest of the csrc/ files it was built from, and the core's
    fingerprint changes with it: a C-only change to a replay rule invalidates snapshots."""
    if not native.enabled():
        pytest.skip("the C extension is not built")
    import hashlib

    csrc = Path(__file__).resolve().parent.parent / "csrc"
    digest = hashlib.sha256()
    for path in sorted([*csrc.glob("*.c"), *csrc.glob("*.h")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    assert digest.hexdigest() == native.module.SOURCES, "rebuild: the extension is stale"
    before = snapshot.fingerprint()
    monkeypatch.setattr(native.module, "SOURCES", "0" * 64)
    snapshot.fingerprint.cache_clear()
    try:
        assert snapshot.fingerprint() != before
    finally:
        monkeypatch.undo()
        snapshot.fingerprint.cache_clear()
    assert snapshot.fingerprint() == before


def test_every_snapshot_table_is_documented_and_made() -> None:
    """Each schemas/state file is a table snapshots hold, each with column descriptions."""
    from sharestate.specs import load, names

    assert set(names("state")) == {*snapshot.SHARE_TABLES, *snapshot.GROUP_TABLES,
                                   *snapshot.AUDIT_TABLES}
    for name in names("state"):
        spec = load("state", name)
        assert spec.layer == "state" and all(c.description for c in spec.columns)
    assert set(_small().tables) == set(snapshot.SHARE_TABLES)


def test_quiet_runs_are_cut_at_too() -> None:
    """Cut points fall between quiet runs applied in C in one call (not only batches)."""
    log = _log(conformance_dir("kafka-4.4-dev") / "share_replay_small.log")
    assert any(isinstance(item, QuietRun) for item in log.items())
