"""The docs' commands and queries run: every ```console block of the README and the docs,
verbatim, from a fresh clone's root (or the test that runs it, or why none can, is named
here), and every query of the SQL cookbook."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT_ROOT, conformance_dir, conformance_root

README = PROJECT_ROOT / "README.md"
COOKBOOK = PROJECT_ROOT / "docs" / "sql-cookbook.md"
NOT_HERE = ("make ",)  # the two setup commands: what CI itself runs
DOCS = (README, *sorted((PROJECT_ROOT / "docs").glob("*.md")),
        PROJECT_ROOT / "airflow" / "README.md")

RUN = "run by the tests of this module"
BROKER = "run by test_kafka_cluster_page_runs_on_its_own_broker, on the broker it starts"
HOW: dict[str, list[str]] = {
    "README.md": ["`make demo` is tests/test_demo.py's, from a fresh clone; `make test` is "
                  "what CI runs", RUN, RUN, RUN, RUN],
    "docs/benchmarks.md": ["the benchmarks take about 15 minutes and bench/serve.py starts "
                           "a Kafka broker of its own: `make bench` runs them"],
    "docs/kafka-cluster.md": [BROKER, BROKER],
    "docs/sql-cookbook.md": [RUN] * 8,
    "airflow/README.md": ["it installs the airflow extra into the virtualenv and runs the DAG "
                          "for minutes: tests/test_airflow_dag.py runs the same `airflow dags "
                          "test` in a temporary AIRFLOW_HOME"],
}
"""How each console block of each page is run, in the page's order: by the tests here, or
why not (and what runs it instead)."""
MARK = "@@sharestate-doc-command@@"


def console_blocks(page: Path) -> list[list[str]]:
    """The page's ```console blocks, each as its commands: a `$ ` line with the lines after
    it up to the next one (a here-document's body)."""
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", page.read_text("utf-8"), re.S):
        commands: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                commands.append(line[2:])
            else:
                assert commands, f"{page.name}: a console block starts with a `$ ` command"
                commands[-1] += "\n" + line
        blocks.append(commands)
    return blocks


def readme_commands() -> list[str]:
    commands = []
    for block in console_blocks(README):
        for command in block:
            if not command.startswith(NOT_HERE):
                commands.append(command.split("  #")[0].strip())
    return commands


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    if argv[0].startswith(".venv/bin/"):
        argv[0] = str(Path(sys.executable).parent / Path(argv[0]).name)
    env = {**os.environ, "SHARESTATE_CONFORMANCE_DIR": str(conformance_root())}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def run_commands(commands: list[str], root: Path, tmp: Path, timeout: float = 1800
                 ) -> tuple[list[tuple[int, str]], str]:
    """Run `commands` verbatim in one bash from `root`, one after the other as a reader types
    them (a variable one sets is there for the next), with paths under /tmp/sharestate-*
    moved under `tmp` (tests run side by side); each one's exit status and stdout, and the
    whole stderr."""
    script = "".join(f"{command.replace('/tmp/sharestate-', f'{tmp}/sharestate-')}\n"
                     f"printf '\\n{MARK} %d\\n' \"$?\"\n" for command in commands)
    env = {**os.environ, "SHARESTATE_CONFORMANCE_DIR": str(conformance_root())}
    done = subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=timeout)
    parts = re.split(rf"\n{MARK} (\d+)\n", done.stdout)
    assert len(parts) == 2 * len(commands) + 1, done.stdout[-3000:] + done.stderr[-3000:]
    return [(int(parts[2 * i + 1]), parts[2 * i]) for i in range(len(commands))], done.stderr


def test_every_console_block_is_run_or_says_why_not() -> None:
    for page in DOCS:
        name = str(page.relative_to(PROJECT_ROOT))
        how = HOW.get(name, [])
        assert len(console_blocks(page)) == len(how), \
            f"{name}: say in HOW how each of its console blocks is run, or why not"


@pytest.fixture(scope="module")
def clone_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone's root as the docs' commands see it: this checkout's tracked top-level
    entries (linked), `.venv` (the running one), `../shared/fixtures` (the conformance
    fixtures) and nothing any command made (no warehouse, no demo data, no dist)."""
    if not conformance_root().is_dir():
        pytest.skip(f"the docs read the fixtures in {conformance_root()}")
    if shutil.which("git") is None or not (PROJECT_ROOT / ".git").exists():
        pytest.skip("needs a git checkout: its tracked files are the clone")
    base = tmp_path_factory.mktemp("clone")
    root = base / "sharestate"
    root.mkdir()
    tracked = subprocess.run(["git", "ls-files"], cwd=PROJECT_ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    for name in sorted({path.split("/")[0] for path in tracked}):
        if (PROJECT_ROOT / name).exists():
            (root / name).symlink_to(PROJECT_ROOT / name)
    (root / ".venv").symlink_to(Path(sys.prefix))
    (base / "shared").mkdir()
    (base / "shared" / "fixtures").symlink_to(conformance_root())
    return root


@pytest.fixture(scope="module")
def tour(clone_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run the README's tour blocks from the clone's root; the warehouse they build, which is
    also the clone's `warehouse` (where `make demo` leaves one) for the cookbook's commands."""
    tmp_path = tmp_path_factory.mktemp("tour")
    commands = [command for block, how in zip(console_blocks(README), HOW["README.md"],
                                              strict=True)
                if how == RUN for command in block]
    assert any(" decode " in c for c in commands)
    ran, stderr = run_commands(commands, clone_root, tmp_path)
    for command, (status, out) in zip(commands, ran, strict=True):
        assert status in (0, 1), f"{command}\n{stderr[-2000:]}"
        assert out.strip(), command
    warehouse = clone_root / "warehouse"  # moved where make demo leaves its warehouse
    shutil.move(tmp_path / "sharestate-warehouse", warehouse)
    return warehouse


@pytest.mark.slow
def test_readme_tour_runs(tour: Path) -> None:
    assert (tour / "share_partition_state" / "_delta_log").is_dir()


def cookbook_queries() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", COOKBOOK.read_text("utf-8"), re.S)


@pytest.mark.slow
def test_cookbook_queries_run(tour: Path, spark: Any) -> None:
    """Every cookbook query against the warehouse the README tour built (same group names
    as the demo's)."""
    from sharestate.lake import register_views

    register_views(spark, tour)
    queries = cookbook_queries()
    assert len(queries) >= 7
    for query in queries:
        assert spark.sql(query).collect(), query


@pytest.mark.slow
def test_cookbook_lag_over_time_is_exact_to_the_end(tour: Path, spark: Any) -> None:
    """The tour gives the data topics' segments, so each group's lag over time is exact, and
    its last second ends at the group's last point in the table."""
    from sharestate.lake import register_views

    register_views(spark, tour)
    rows = spark.sql(cookbook_query("Lag over time, exact")).collect()
    assert rows and all(r["exact"] and not r["lag_is_lower_bound"] for r in rows)
    last = {r["group_id"]: r["lag"] for r in rows}  # ordered by bucket: the last one stays
    assert last == {r["group_id"]: r["lag"] for r in spark.sql(
        "SELECT group_id, max_by(lag, time) AS lag FROM share_group_lag_history "
        "WHERE scope = 'group' AND lag IS NOT NULL GROUP BY group_id").collect()}
    assert len(last) == 3


def test_configuration_reference_is_rendered_from_the_code() -> None:
    """docs/configuration.md is what `python -m sharestate.app.reference` renders now, and it
    covers every command, job argument, Spark default and quality key."""
    from sharestate.app.reference import render
    from sharestate.quality.config import QualityConfig
    from sharestate.spark.session import DEFAULTS

    page = render()
    committed = (PROJECT_ROOT / "docs" / "configuration.md").read_text("utf-8")
    assert committed == page, \
        "regenerate: python -m sharestate.app.reference > docs/configuration.md"
    for needle in ("### `sharestate run`", "### `sharestate decode`", "--as-of-offset N",
                   "--run-id ID", "--kafka-option KEY=VALUE", *DEFAULTS,
                   *(f"`{name}`" for name in QualityConfig.__dataclass_fields__
                     if name != "source")):
        assert needle in page, needle


def cookbook_query(heading: str) -> str:
    """The SQL block under `## heading` in the cookbook."""
    text = COOKBOOK.read_text("utf-8")
    section = text[text.index(f"## {heading}\n"):]
    block = re.search(r"```sql\n(.*?)```", section, re.S)
    assert block is not None, heading
    return block.group(1)


def _history(warehouse: Path) -> list[dict[str, Any]]:
    from sharestate.lake.rs import read_table

    return read_table(warehouse / "share_partition_state_history", [
        "group_id", "topic_id", "partition", "record_offset", "timestamp", "deleted",
        "start_offset", "state_batches"]).to_pylist()


def _progress(warehouse: Path, width: int
              ) -> tuple[dict[tuple[str, int], tuple[int | None, int]], dict[str, int]]:
    """"Progress and lag over time" from the history rows: per group (of share_group_lag)
    and bucket of `width` ms, the sum of the SPSOs at least 0 of its live share-partitions
    (None when none has one) and their number, each share-partition at its last state by the
    end of the bucket (its record with the highest offset in the last bucket it wrote in);
    and how many of those states were written in their bucket, carried from an earlier one,
    deletions."""
    from sharestate.lake.rs import read_table

    groups = set(read_table(warehouse / "share_group_lag", ["group_id"]).column(0).to_pylist())
    by_key: dict[tuple[str, str, int], list[tuple[int, int, bool, int | None]]] = {}
    for r in _history(warehouse):
        by_key.setdefault((r["group_id"], r["topic_id"], r["partition"]), []).append(
            (r["timestamp"] // width, r["record_offset"], r["deleted"], r["start_offset"]))
    buckets = sorted({row[0] for rows in by_key.values() for row in rows})
    spso: dict[tuple[str, int], int] = {}
    live: dict[tuple[str, int], int] = {}
    seen = {"written": 0, "carried": 0, "deleted": 0}
    for (group, _, _), rows in by_key.items():
        if group not in groups:
            continue
        rows.sort()
        at = 0
        for bucket in buckets:
            written = at < len(rows) and rows[at][0] == bucket
            while at < len(rows) and rows[at][0] <= bucket:
                at += 1
            key = (group, bucket)
            live.setdefault(key, 0)
            if not at:
                continue  # no state yet
            _, _, deleted, start = rows[at - 1]
            seen["written" if written else "carried"] += 1
            seen["deleted"] += deleted
            if not deleted:
                live[key] += 1
                if start is not None and start >= 0:
                    spso[key] = spso.get(key, 0) + start
    return {key: (spso.get(key), n) for key, n in live.items()}, seen


@pytest.mark.slow
@pytest.mark.parametrize(("where", "width", "deletions"),
                         [("tour", 100, True), ("simulated_warehouse", 10, False)])
def test_cookbook_progress_carries_each_share_partition_forward(
        where: str, width: int, deletions: bool, request: pytest.FixtureRequest,
        spark: Any) -> None:
    """"Progress and lag over time": per group and time bucket, the sum of every live
    share-partition's SPSO as of the end of that bucket (its last state carried forward,
    left out once deleted), computed here from the history rows, on the README tour's
    warehouse (where share-partitions get deleted) and on the shared simulated one; summing
    only the share-partitions that wrote in a bucket made progress seem to go backwards."""
    from sharestate.lake import register_views

    found = request.getfixturevalue(where)
    warehouse = found if isinstance(found, Path) else found.warehouse
    expected, seen = _progress(warehouse, width)
    assert seen["carried"] > len({bucket for _, bucket in expected})
    assert bool(seen["deleted"]) == deletions
    register_views(spark, warehouse)
    query = cookbook_query("Progress and lag over time")
    assert query.count("% 60000") == 1
    query = query.replace("% 60000", f"% {width}")
    got = {(r["group_id"], r["m"] // width): (r["spso_sum"], r["share_partitions"])
           for r in spark.sql(f"SELECT group_id, unix_millis(bucket_start) AS m, spso_sum, "
                              f"share_partitions FROM ({query})").collect()}
    assert got == expected


@pytest.mark.slow
def test_cookbook_poison_records_are_found(tour: Path, spark: Any) -> None:
    """"Poison records": the tour's workload has records no consumer can process; each one
    archived at the delivery limit (5) anywhere in the history is one row."""
    from sharestate.lake import register_views

    expected = {(r["group_id"], r["topic_id"], r["partition"], offset)
                for r in _history(tour) if not r["deleted"]
                for b in r["state_batches"] or []
                if b["delivery_state"] == 4 and b["delivery_count"] >= 5
                for offset in range(b["first_offset"], b["last_offset"] + 1)}
    register_views(spark, tour)
    got = {(r["group_id"], r["topic_id"], r["partition"], r["offset"])
           for r in spark.sql(cookbook_query("Poison records")).collect()}
    assert expected and got == expected


def test_readme_pending_offsets_example_shows_pending_offsets() -> None:
    [command] = [c for c in readme_commands() if " offsets --pending" in c]
    result = _run(command, PROJECT_ROOT)
    assert result.returncode == 0, result.stderr
    states = [json.loads(line)["state"] for line in result.stdout.splitlines()]
    assert any(state.startswith("pending:") for state in states), states
    assert "committed" in states


def test_readme_state_as_of_time_matches_its_offset() -> None:
    """The README says its state example works with --as-of-time too: the time it names gives
    the same share-partitions; a time where nothing is live says so (it printed nothing)."""
    [command] = [c for c in readme_commands() if " state " in c]
    time = re.search(r"`--as-of-time (\S+)`", README.read_text("utf-8"))
    assert time is not None
    by_offset = _run(command, PROJECT_ROOT)
    by_time = _run(re.sub(r"--as-of-offset \d+", f"--as-of-time {time.group(1)}", command),
                   PROJECT_ROOT)
    assert by_offset.returncode == by_time.returncode == 0
    assert by_time.stdout == by_offset.stdout != ""
    early = _run(re.sub(r"--as-of-offset \d+", "--as-of-time 2025-10-09T08:53:20Z", command),
                 PROJECT_ROOT)
    assert early.returncode == 0 and early.stdout == ""
    assert early.stderr.splitlines()[-1] == (
        "no live share-partitions of group 'g1' as of time 2025-10-09T08:53:20Z; groups with "
        f"some: '{'share-group-long-name-' * 13}share-group-lo'")


@pytest.mark.slow
def test_cookbook_attention_is_worst_first(spark: Any) -> None:
    """"What needs attention" ranks errors, then warnings, then information: `ORDER BY
    severity` put info before warning (alphabetical)."""
    findings = [("quiet_rule", "info", 9), ("quiet_rule", "info", 8), ("loud_rule", "warning", 1),
                ("loud_rule", "warning", 4), ("other_rule", "warning", 3), ("bad_rule", "error", 2)]
    spark.createDataFrame(findings, "rule string, severity string, offset bigint") \
        .createOrReplaceTempView("audit_findings")
    try:
        rows = spark.sql(cookbook_query("What needs attention")).collect()
    finally:
        spark.catalog.dropTempView("audit_findings")
    assert [(r["rule"], r["severity"], r["findings"]) for r in rows] == [
        ("bad_rule", "error", 1), ("loud_rule", "warning", 2), ("other_rule", "warning", 1),
        ("quiet_rule", "info", 2)]


@pytest.mark.slow
def test_cookbook_console_runs(tour: Path, clone_root: Path, tmp_path: Path) -> None:
    """Every console command of the cookbook, verbatim and in order, from the clone's root on
    the tour's warehouse (`warehouse` there): none names a date that only one day's
    warehouse has, and Delta's TIMESTAMP AS OF and sharestate's --as-of-time agree at the
    time they are given. Last in this module: its --write commands change the warehouse."""
    from sharestate.jars import delta_jars

    if not delta_jars().present:
        pytest.skip("the cookbook's jvm-backend commands need Delta's jars: make jars")
    assert set(HOW["docs/sql-cookbook.md"]) == {RUN}
    commands = [command for block in console_blocks(COOKBOOK) for command in block]
    ran, stderr = run_commands(commands, clone_root, tmp_path)
    outputs = {}
    for command, (status, out) in zip(commands, ran, strict=True):
        assert status == 0, f"{command}\n{stderr[-3000:]}"
        assert command.startswith(("t=", "cat > ")) or out.strip(), command  # or a file
        outputs[command] = out
    travelled = [out for command, out in outputs.items() if "TIMESTAMP AS OF '$t'" in command]
    as_of = [out for command, out in outputs.items() if "--as-of-time \"$t\"" in command]
    assert len(travelled) == len(as_of) == 1
    assert sorted(travelled[0].splitlines()) == sorted(as_of[0].splitlines())
    assert len(travelled[0].splitlines()) > 2  # a header, the groups' rows, "(N rows)"


def test_architecture_prune_point_claim_holds() -> None:
    """architecture.md: over the same log, Kafka's log start (the prune point as of its last
    prune run) is never later than sharestate's prune point (as of the last record read), as
    the prune point only grows with the log. Held at offset after offset of a Kafka-written
    log; the page said both that Kafka's log start trails and that sharestate's is never the
    later one."""
    from sharestate import api

    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text("utf-8")
    claim = re.search(r"\*\*The prune point\.\*\*(.*?)(?:\n- \*\*|\n\n|\Z)", text, re.S)
    assert claim is not None
    said = " ".join(claim.group(1).split())
    assert "Kafka's log start is never later than sharestate's prune point" in said, said
    assert "sharestate's is never the later" not in said
    log = conformance_dir("kafka-4.4-dev") / "share_replay_small.log"
    [end] = api.prune_points([log]).to_pylist()
    points = [row["prune_offset"] or 0 for offset in range(0, end["log_end_offset"], 13)
              for row in api.prune_points([log], as_of_offset=offset).to_pylist()]
    assert len(set(points)) > 3  # the frontier moves along this log (None: no prune yet)
    assert points == sorted(points) and points[-1] <= end["prune_offset"]


def test_airflow_by_hand_installs_airflow_first() -> None:
    """`.venv/bin/airflow` exists only after `make install-airflow` (the airflow extra; `make
    install` and `make demo` install dev only): a console block that runs it installs it
    first."""
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    extras = project["optional-dependencies"]
    assert not any(d.startswith("apache-airflow") for d in extras["dev"])
    assert any(d.startswith("apache-airflow==") for d in extras["airflow"])
    makefile = (PROJECT_ROOT / "Makefile").read_text("utf-8")
    assert "-e '.[dev,airflow]'" in makefile and "\ninstall-airflow:" in makefile
    using = [(page, block) for page in DOCS for block in console_blocks(page)
             if any(".venv/bin/airflow" in command for command in block)]
    assert using, "the airflow README's by-hand run is a console block"
    for page, block in using:
        first = next(i for i, command in enumerate(block) if ".venv/bin/airflow" in command)
        assert "make install-airflow" in block[:first], (page.name, block)


@pytest.mark.kafka_broker
def test_kafka_cluster_page_runs_on_its_own_broker(clone_root: Path, tmp_path: Path) -> None:
    """docs/kafka-cluster.md verbatim from the clone's root (/tmp/sharestate-kafka moved under
    this test's folder; `make jars` is the session's): the first block starts a broker in
    the background and prints where it is; once a share group consumed, the second block
    (PORT: the printed port) describes the group and dumps the state topic's segments,
    whatever their names; then `kill %1`, as the page says, stops the script and its broker
    (SIGTERM left the broker running)."""
    from kafka_workload import Workload, accept, consume, share_consumer
    from kafka_workload import share_groups_start_earliest as start_earliest

    first, second = console_blocks(PROJECT_ROOT / "docs" / "kafka-cluster.md")
    assert first[0] == "make jars"
    stop = tmp_path / "stop"
    script = "".join(f"{command.replace('/tmp/sharestate-', f'{tmp_path}/sharestate-')}\n"
                     for command in first[1:])
    script += f"while [ ! -e {stop} ]; do sleep 0.2; done\nkill %1\nwait\n"
    printed = tmp_path / "printed"
    with printed.open("wb") as sink:
        shell = subprocess.Popen(["bash", "-c", script], cwd=clone_root, stdout=sink,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        bootstrap = _wait_for_bootstrap(printed, shell)
        workload = Workload(broker=_Bootstrap(bootstrap))  # type: ignore[arg-type]
        _consume_once(workload, accept, consume, share_consumer, start_earliest)
        port = bootstrap.rsplit(":", 1)[1]
        commands = [command.replace(":PORT", f":{port}") for command in second]
        ran, stderr = run_commands(commands, clone_root, tmp_path, timeout=600)
        for command, (status, _) in zip(commands, ran, strict=True):
            assert status == 0, f"{command}\n{stderr[-3000:]}"
        assert "docs-group" in ran[1][1], ran[1][1]
        assert "Dumping " in ran[2][1] and "payload" in ran[2][1], ran[2][1][-3000:]
        stop.touch()
        assert shell.wait(timeout=120) == 0, printed.read_text(errors="replace")[-3000:]
        assert _processes_naming(tmp_path) == [], "the broker outlived the page's script"
    finally:
        stop.touch()
        for pid in _processes_naming(tmp_path):  # ours: they name this test's folder
            os.kill(pid, 9)
        if shell.poll() is None:
            os.killpg(shell.pid, 9)
            shell.wait(30)


class _Bootstrap:
    """The page's broker, as kafka_workload's helpers ask for one: its address."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


def _wait_for_bootstrap(printed: Path, shell: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and shell.poll() is None:
        found = re.search(r"^bootstrap (\S+) log\.dirs ", printed.read_text(errors="replace"),
                          re.M)
        if found:
            return found.group(1)
        time.sleep(0.5)
    pytest.fail(f"the page's broker printed no address: {printed.read_text()[-3000:]}")


def _consume_once(workload: Any, accept: Any, consume: Any, share_consumer: Any,
                  start_earliest: Any) -> None:
    """A share group consumes 20 records: the broker creates __share_group_state."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    admin = workload.admin()
    admin.create_topics([NewTopic("docs", 1, 1)])["docs"].result(60)
    start_earliest(workload, ["docs-group"])
    producer = Producer({"bootstrap.servers": workload.bootstrap})
    for index in range(20):
        producer.produce("docs", value=f"record {index}")
    assert producer.flush(30) == 0
    producer.close()  # its broker stops with this test: a client left would log for ever
    consumer = share_consumer(workload, "docs-group", ["docs"])
    try:
        assert consume(workload, consumer, "docs-group", accept) == 20
    finally:
        consumer.close()


def _processes_naming(folder: Path) -> list[int]:
    """Processes whose command line names `folder` (the page's broker runs from there)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids
