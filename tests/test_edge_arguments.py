"""Bad values are refused at the edge: exit 2 and one line on stderr, before any work (no
traceback, nothing coerced, nothing ignored). The Spark jobs' cases are refused before a
JVM starts, so these tests need no Spark."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import client_threads, closed_port, conformance_dir

from sharestate.app.cli import main
from sharestate.spark.run import main as run_all

USAGE = 2
HUGE = str(2**63)  # one past int64


def _one_line(capsys: pytest.CaptureFixture[str], *words: str, after_work: bool = False) -> str:
    """The one error line (`after_work`: after the lines naming what was read)."""
    err = capsys.readouterr().err.strip().splitlines()
    if after_work:
        assert "Traceback" not in "\n".join(err)
        err = [line for line in err if line.startswith("sharestate")]
    assert len(err) == 1 and err[0].startswith("sharestate: error:"), err
    assert all(word in err[0] for word in words), err
    return err[0]


@pytest.fixture
def segment() -> str:
    return str(conformance_dir("kafka-4.4-dev") / "share_tombstones.log")


@pytest.mark.parametrize("command", ["state", "prune", "offsets"])
@pytest.mark.parametrize("flag,value", [("--as-of-offset", HUGE), ("--as-of-offset", "-1"),
                                        ("--as-of-offset", "1.5"), ("--as-of-time", HUGE),
                                        ("--as-of-time", "-" + HUGE + "0")])
def test_as_of_beyond_int64_or_negative(capsys: pytest.CaptureFixture[str], segment: str,
                                        command: str, flag: str, value: str) -> None:
    assert main([command, segment, flag, value]) == USAGE
    _one_line(capsys, flag.lstrip("-").split("-")[0])


@pytest.mark.parametrize("command", ["decode", "state", "prune", "offsets"])
def test_a_cluster_is_not_a_file(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """The offline commands took `kafka://127.0.0.1:9092` for a path ("kafka:/127.0.0.1:9092:
    no such file or directory"): they say they read files, and what reads a cluster."""
    assert main([command, "kafka://127.0.0.1:9092"]) == USAGE
    _one_line(capsys, "kafka://127.0.0.1:9092 is a live cluster", "read segment files",
              "sharestate serve --source kafka://", "sharestate run --source kafka://")
    assert main([command, "s3://bucket/logs"]) == USAGE
    _one_line(capsys, "s3://bucket/logs: ", "read local segment files, not URIs")


@pytest.mark.parametrize("command", ["state", "prune"])
@pytest.mark.parametrize("value", ["-1", "x", HUGE])
def test_snapshot_update_records(capsys: pytest.CaptureFixture[str], segment: str,
                                 command: str, value: str) -> None:
    assert main([command, segment, "--snapshot-update-records", value]) == USAGE
    _one_line(capsys, "--snapshot-update-records")


def test_snapshot_update_records_zero_is_kafkas_every_write_a_snapshot(
        capsys: pytest.CaptureFixture[str], segment: str) -> None:
    assert main(["state", segment, "--snapshot-update-records", "0"]) in (0, 1)


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_retention_minutes(capsys: pytest.CaptureFixture[str], value: str) -> None:
    offsets = conformance_dir("kafka-4.4-dev") / "consumer_offsets_txn.log"
    assert main(["offsets", str(offsets), "--retention-minutes", value]) == USAGE
    _one_line(capsys, "--retention-minutes")


@pytest.mark.parametrize("command", ["decode", "state", "prune"])
def test_a_full_disk_is_one_line(capsys: pytest.CaptureFixture[str], segment: str,
                                 command: str) -> None:
    assert main([command, segment, "-o", "/dev/full"]) == USAGE
    _one_line(capsys, "/dev/full", "No space left on device", after_work=True)


def test_a_full_standard_output_is_one_line(segment: str) -> None:
    with open("/dev/full", "w", encoding="utf-8") as full:
        done = subprocess.run([sys.executable, "-m", "sharestate", "decode", segment],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == USAGE, done.stderr
    err = [line for line in done.stderr.splitlines() if not line.startswith(segment)]
    assert err == ["sharestate: error: cannot write standard output: No space left on device"]


# -- the Spark jobs: refused before a JVM starts ----------------------------------------


def _job(tmp_path: Path, *extra: str) -> int:
    """The pipeline on a new partition's empty segment with `extra` arguments."""
    partition = tmp_path / "logs" / "__share_group_state-0"
    partition.mkdir(parents=True, exist_ok=True)
    (partition / f"{0:020d}.log").touch()
    return run_all(["--source", str(tmp_path / "logs"), "--warehouse", str(tmp_path / "wh"),
                    *extra])


@pytest.mark.parametrize("entries,words", [
    ([{"topic": "t", "partition": 0, "end_offset": 1e30}], ("end_offset", "integer")),
    ([{"topic": "t", "partition": 0, "end_offset": -5}], ("end_offset", "between")),
    ([{"topic": "t", "partition": 0, "end_offset": 2**63}], ("end_offset", "between")),
    ([{"topic": "t", "partition": 0, "end_offset": True}], ("end_offset", "integer")),
    ([{"topic": "t", "partition": 0, "end_offset": 1.7}], ("end_offset", "integer")),
    ([{"topic": "t", "partition": 0, "end_offset": [5]}], ("end_offset", "integer")),
    ([{"topic": "t", "partition": 0, "end_offset": "5"}], ("end_offset", "integer")),
    ([{"topic": "t", "partition": 1.0, "end_offset": 5}], ("partition", "integer")),
    ([{"topic": "t", "partition": -1, "end_offset": 5}], ("partition", "between")),
    ([{"topic": 7, "partition": 0, "end_offset": 5}], ("topic",)),
    ([{"topic": "t", "partition": 0, "endoffset": 5}], ("exactly",)),
    ([{"topic": "t", "partition": 0, "end_offset": 5}] * 2, ("twice",)),
    ({"t": 5}, ("JSON list",)),
])
def test_end_offsets_values(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                            entries: object, words: tuple[str, ...]) -> None:
    path = tmp_path / "end-offsets.json"
    path.write_text(json.dumps(entries), encoding="utf-8")
    assert _job(tmp_path, "--end-offsets", str(path)) == USAGE
    _one_line(capsys, str(path), *words)


def test_end_offsets_not_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "end-offsets.json"
    path.write_text("[{", encoding="utf-8")
    assert _job(tmp_path, "--end-offsets", str(path)) == USAGE
    _one_line(capsys, "not JSON")


def _in_a_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """`sharestate argv` in a process of its own, stopped after 60 s and held to 1 GiB."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    return subprocess.run([sys.executable, "-m", "sharestate", *argv], capture_output=True,
                          text=True, timeout=60, preexec_fn=limit, check=False)


@pytest.mark.parametrize("kind,words", [
    ("deep", ("nests too deeply",)), ("zero", ("not a regular file (a character device)",)),
    ("fifo", ("not a regular file (a FIFO)",)), ("folder", ("not a regular file (a directory)",)),
    ("huge", ("larger than the 64 MiB",))])
def test_end_offsets_files_are_bounded(tmp_path: Path, kind: str,
                                       words: tuple[str, ...]) -> None:
    """Deep nesting exited 70, /dev/zero was read past 2.5 GB, a FIFO waited for ever: each is
    refused at once, one line, exit 2."""
    path = {"zero": Path("/dev/zero"), "folder": tmp_path}.get(kind, tmp_path / "ends.json")
    if kind == "deep":
        path.write_text("[" * 100_000, encoding="utf-8")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as file:
            file.truncate((64 << 20) + 1)  # sparse
    logs = tmp_path / "logs" / "__share_group_state-0"
    logs.mkdir(parents=True)
    (logs / f"{0:020d}.log").touch()
    done = _in_a_process("run", "--source", str(logs.parent), "--warehouse",
                         str(tmp_path / "wh"), "--end-offsets", str(path))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == USAGE and len(lines) == 1, done.stderr
    assert lines[0].startswith("sharestate: error: ") and str(path) in lines[0] \
        and all(word in lines[0] for word in words), lines
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("command", ["decode", "state", "prune", "offsets"])
@pytest.mark.parametrize("flag", ["--findings", "--output"])
def test_a_fifo_nobody_reads_is_refused_as_output(tmp_path: Path, segment: str,
                                                  flag: str, command: str) -> None:
    """Opening it waited for a reader for ever; one a process reads is written to. Every
    command refuses it before reading anything (state, prune and offsets opened their
    output after the replay: a line saying how each segment was read came first)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = _in_a_process(command, segment, flag, str(fifo))
    assert done.returncode == USAGE, done.stderr
    assert done.stderr.strip() == f"sharestate: error: cannot write {fifo}: a FIFO no process " \
                                  "reads", done.stderr
    with subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True) as reader:
        deadline = time.monotonic() + 30
        while True:  # `cat` has the FIFO open once a writer's non-blocking open succeeds
            done = _in_a_process(command, segment, "--output", str(fifo))
            if done.returncode != USAGE or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out, _ = reader.communicate(timeout=30)
    assert done.returncode in (0, 1), done.stderr
    assert out == _in_a_process(command, segment).stdout


@pytest.mark.parametrize("extra,words", [
    (("--conf", "noequals"), ("--conf", "KEY=VALUE", "noequals")),
    (("--conf", "=x"), ("--conf", "KEY=VALUE")),
    (("--kafka-option", "security.protocol"), ("--kafka-option", "KEY=VALUE")),
    (("--conf", "spark.driver.memory=abc"), ("spark.driver.memory", "'abc'")),
    (("--conf", "spark.sql.shuffle.partitions=-1"), ("spark.sql.shuffle.partitions",)),
    (("--conf", "spark.sql.shuffle.partitions=0"), ("spark.sql.shuffle.partitions",)),
    (("--conf", "spark.executor.cores=two"), ("spark.executor.cores",)),
    (("--master", "bogus"), ("spark.master", "'bogus'")),
    (("--conf", "spark.sharestate.lake.backend=delta"), ("lake.backend", "'delta'")),
    (("--conf", "spark.sharestate.lagBinRows=-1"), ("lagBinRows", "'-1'")),
    (("--conf", "spark.sharestate.lagBinRows=3M"), ("lagBinRows", "'3M'")),
    (("--master", "local[0]"), ("spark.master",)),
    (("--conf", "spark.master=local[x]"), ("spark.master",)),
    (("--as-of-offset", HUGE), ("--as-of-offset",)),
    (("--as-of-time", HUGE), ("out of range",)),
    (("--snapshot-update-records", "-1"), ("--snapshot-update-records",)),
    (("--retention-minutes", "0"), ("--retention-minutes",)),
    (("--retention-minutes", "-1"), ("--retention-minutes",)),
    (("--delivery-limit", "0"), ("--delivery-limit",)),
])
def test_job_arguments(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                       extra: tuple[str, ...], words: tuple[str, ...]) -> None:
    assert _job(tmp_path, *extra) == USAGE
    _one_line(capsys, *words)
    assert not (tmp_path / "wh").exists()  # nothing started


@pytest.mark.parametrize("source", ["nope", "empty", "__share_group_state-0"])
def test_sources_are_checked_before_any_work(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, source: str) -> None:
    """A source that is missing or holds no segment stops the run before Spark starts and
    before the lease: nothing is created in the warehouse (it left `_lease` and 14 empty
    tables)."""
    if source != "nope":
        (tmp_path / source).mkdir()
    assert run_all(["--source", str(tmp_path / source), "--warehouse",
                    str(tmp_path / "wh")]) == USAGE
    _one_line(capsys, f"{tmp_path / source}: ", "no such file" if source == "nope"
              else "no log segments")
    assert not (tmp_path / "wh").exists()


@pytest.mark.parametrize("warehouse", ["file", "file/wh"])
def test_a_warehouse_that_cannot_be_a_folder(capsys: pytest.CaptureFixture[str],
                                             tmp_path: Path, segment: str,
                                             warehouse: str) -> None:
    (tmp_path / "file").write_text("not a folder")
    assert run_all(["--source", segment, "--warehouse", str(tmp_path / warehouse)]) == USAGE
    _one_line(capsys, f"--warehouse {tmp_path / warehouse}: {tmp_path / 'file'} is not a "
                      "directory")


def test_quality_conf_without_equals(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    from sharestate.spark.quality_job import main as quality

    assert quality(["--warehouse", str(tmp_path), "--conf", "noequals"]) == USAGE
    _one_line(capsys, "--conf", "KEY=VALUE")


@pytest.mark.parametrize("flag", ["--config", "--acknowledgements"])
def test_quality_files_are_regular_files(tmp_path: Path, flag: str) -> None:
    """The gate's settings files are read as --end-offsets is: a FIFO is refused at once."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    done = _in_a_process("quality", "--warehouse", str(tmp_path), flag, str(fifo))
    assert done.returncode == USAGE, done.stderr
    assert done.stderr.strip() == f"sharestate: error: cannot read {fifo}: not a regular file " \
                                  "(a FIFO)", done.stderr


def test_quality_bad_spark_setting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from sharestate.spark.quality_job import main as quality

    log = tmp_path / "t" / "_delta_log"  # a warehouse of one whole (empty) table
    log.mkdir(parents=True)
    (log / f"{0:020}.json").write_text(
        '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}\n'
        '{"metaData":{"id":"t","format":{"provider":"parquet","options":{}},'
        '"schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}",'
        '"partitionColumns":[],"configuration":{}}}\n')
    assert quality(["--warehouse", str(tmp_path), "--master", "bogus"]) == USAGE
    _one_line(capsys, "spark.master")


@pytest.mark.parametrize("read", ["now", "at_times"])
def test_end_offsets_from_a_cluster_gone_say_why_quietly_and_leave_no_client(
        read: str, capfd: pytest.CaptureFixture[str]) -> None:
    """A cluster gone after run's check, when the analytics read its end offsets (the lag
    now: `fetch_topic_ends`; through time, `--end-offsets-from kafka://`:
    `offsets_at_times`): the error names the refused connection, librdkafka's own lines
    stay off stderr (they were `%3|...|FAIL|...` every 50 ms) and no client thread outlives
    the error (the exception held the client: its threads went on retrying)."""
    from sharestate.cluster import fetch_topic_ends, parse_options
    from sharestate.cluster.kafka_plan import ClusterNotReady
    from sharestate.cluster.kafka_times import offsets_at_times

    address = f"127.0.0.1:{closed_port()}"
    options = parse_options({"bootstrap.servers": address, "timeoutMs": "1000"})
    gc.collect()  # a client an earlier test left, gone now rather than during the call
    threads = client_threads()
    with pytest.raises(ClusterNotReady, match=f"cannot read end offsets from {address}: .*"
                                              f"Connection refused") as failed:
        if read == "now":
            fetch_topic_ends(options)
        else:
            offsets_at_times(options, {("topic-id", 0): [0]})
    gc.collect()
    assert client_threads() <= threads, failed.value  # `failed` holds the exception
    # errors and warnings about this cluster (a client another test left may log its own)
    assert not [line for line in re.findall(r"^%[0-4]\|.*", capfd.readouterr().err, re.M)
                if address in line]


def test_credentials_on_the_command_line_are_warned_about(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert _job(tmp_path, "--kafka-option", "sasl.password=hunter2", "--conf",
                "spark.hadoop.fs.s3a.secret.key=s3cr3t", "--conf", "spark.driver.memory=abc") \
        == USAGE  # the memory setting stops it before any work
    err = capsys.readouterr().err
    assert "hunter2" not in err and "s3cr3t" not in err
    assert "--kafka-option sasl.password=... looks like a credential" in err
    assert "SHARESTATE_KAFKA_SASL_PASSWORD" in err
    assert "--conf spark.hadoop.fs.s3a.secret.key=... looks like a credential" in err
