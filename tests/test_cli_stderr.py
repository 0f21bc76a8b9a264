"""What the offline commands say on stderr when their answer is not quite what was asked:
a stop point past the log's end, a group that has nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import conformance_dir

from sharestate import exit_codes
from sharestate.app.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), [line for line in captured.err.splitlines()
                                               if ", dialect " not in line]


@pytest.mark.parametrize(("command", "fixture", "first", "last"), [
    ("state", "share_txn.log", 0, 83), ("prune", "share_txn.log", 0, 83),
    ("offsets", "consumer_offsets_txn.log", 500, 518)])
def test_a_stop_point_past_the_end_is_said(capsys: pytest.CaptureFixture[str], command: str,
                                           fixture: str, first: int, last: int) -> None:
    """The answer as of offset 99999999 is the answer at the log's end: said in one line
    (it was answered silently). One before the log's first record, which is not offset 0,
    is not known: an as_of_before_log finding."""
    log = conformance_dir("kafka-4.4-dev") / fixture
    name = f"{'__consumer_offsets' if command == 'offsets' else '__share_group_state'}:{log}"
    _, at_end, _ = _run(capsys, command, str(log))
    for flag, value, said in (
            ("--as-of-offset", "99999999", f"offset {last}, before offset 99999999"),
            ("--as-of-time", "2030-01-01T00:00:00Z", f"offset {last} ("),
            ("--as-of-time", "1893456000000", "before time 2030-01-01T00:00:00Z")):
        status, rows, err = _run(capsys, command, str(log), flag, value)
        assert (status, rows) == (exit_codes.OK, at_end)
        assert len(err) == 1 and err[0].startswith(f"{name}: the log ends at offset {last}")
        assert said in err[0] and err[0].endswith(": the answer is as of its end")
    for within in (str(last), str(first)):
        assert _run(capsys, command, str(log), "--as-of-offset", within)[2] == []
    if first:
        status, rows, err = _run(capsys, command, str(log), "--as-of-offset", str(first - 1))
        assert (status, rows) == (exit_codes.FINDINGS, [])
        assert err[0].startswith(f"{name} offset {first}: as_of_before_log: offset {first - 1}")


def test_several_logs_past_their_end_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    folder = conformance_dir("kafka-4.4-dev")
    logs = [str(folder / f"{name}.log") for name in ("share_tombstones", "share_txn",
                                                     "share_replay_small", "share_interleaved")]
    _, _, err = _run(capsys, "state", *logs, "--as-of-offset", "99999999")
    assert len(err) == 1, err
    assert err[0].startswith("the logs end before offset 99999999 (the answers are as of their "
                             "ends): __share_group_state:")
    assert f"__share_group_state:{logs[0]} at offset 44" in err[0]
    assert err[0].count(" at offset ") == 3 and err[0].endswith(" and 1 more")


LONG = "share-group-long-name-" * 13 + "share-group-lo"
UNICODE = "grupo-ünïcødé-✓-🚀"


@pytest.mark.parametrize(("argv", "said"), [
    (("state", "share_txn.log", "--group", "G1"),
     f"no live share-partitions of group 'G1' as of the end of the log; groups with some: "
     f"'g1', '{UNICODE}', '{LONG}'; did you mean 'g1'?"),
    (("state", "share_txn.log", "--group", "grupo"), f"did you mean '{UNICODE}'?"),
    (("state", "share_txn.log", "--group", "zzz", "--as-of-offset", "0"),
     f"no live share-partitions of group 'zzz' as of offset 0; groups with some: '{UNICODE}'"),
    (("state", "share_txn.log", "--group", "g1", "--as-of-offset", "0"),
     f"groups with some: '{UNICODE}'"),
    (("offsets", "consumer_offsets_txn.log", "--group", "TXN-GROUP"),
     "no committed offsets of group 'TXN-GROUP' as of the end of the log; groups with some: "
     "'plain-group', 'txn-group'; did you mean 'txn-group'?"),
    (("offsets", "consumer_offsets_txn.log", "--group", "x", "--pending"),
     "no committed offsets or open commits of group 'x' as of the end of the log; groups with "
     "some: 'plain-group', 'txn-group'"),
])
def test_a_group_with_nothing_names_the_groups_there(capsys: pytest.CaptureFixture[str],
                                                     argv: tuple[str, ...], said: str) -> None:
    """`--group G1` answered "no live share-partitions of group 'G1'" and nothing more (and
    `offsets` said nothing at all): now the groups there and the closest name."""
    command, fixture, *rest = argv
    status, rows, err = _run(capsys, command, str(conformance_dir("kafka-4.4-dev") / fixture),
                             *rest)
    assert (status, rows) == (exit_codes.OK, [])
    assert len(err) == 1 and said in err[0], err
    if not said.endswith("?"):
        assert "did you mean" not in err[0]


def test_the_groups_listed_are_bounded(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    from sharestate.simulate import SimulationConfig, simulate

    simulate(SimulationConfig(records=400, groups=13, state_partitions=1), tmp_path)
    _, _, err = _run(capsys, "state", str(tmp_path), "--group", "nope")
    [line] = [line for line in err if line.startswith("no live")]
    assert line.count("', '") == 9 and line.endswith(" and 3 more"), line


@pytest.mark.slow
def test_the_pipeline_says_which_logs_end_before_the_stop_point(
        spark: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --as-of-offset` past a partition's end says so as `state` does, naming only the
    partitions that end before it (from bronze's statistics)."""
    from sharestate.spark.run import parser, run

    fixtures = conformance_dir("kafka-4.4-dev")
    for folder, fixture in (("__share_group_state-0", "share_tombstones.log"),
                            ("__share_group_state-1", "share_txn.log"),
                            ("__consumer_offsets-0", "consumer_offsets_txn.log")):
        (tmp_path / "logs" / folder).mkdir(parents=True)
        (tmp_path / "logs" / folder / f"{0:020d}.log").write_bytes(
            (fixtures / fixture).read_bytes())
    args = parser().parse_args(["--source", str(tmp_path / "logs"), "--warehouse",
                                str(tmp_path / "wh"), "--as-of-offset", "60"])
    assert run(args, ("ingest", "decode", "replay")) in (exit_codes.OK, exit_codes.FINDINGS)
    said = [line for line in capsys.readouterr().err.splitlines() if "log ends" in line]
    assert said == ["__share_group_state-0: the log ends at offset 44, before offset 60: the "
                    "answer is as of its end"]
