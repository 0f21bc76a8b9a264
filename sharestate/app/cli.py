"""The `sharestate` command line.

Exit statuses (`sharestate.exit_codes`): 0 everything decoded/applied cleanly; 1 the run
completed but recorded findings; 2 bad arguments, an unreadable source or an environment that
cannot run (one line on stderr); 3 the quality gate could not run; 4 a `sql`
query was refused or failed (one line with Spark's error class); 75 a live source did not
answer (`run` and `serve`: one line; run again later); 70 an internal error (a bug:
traceback, then one line).
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from typing import IO, TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from sharestate import arguments, exit_codes
from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES
from sharestate.coordinator.shard import KAFKA, SEMANTICS
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.locations import URI, location
from sharestate.log import (
    COMPRESSION_NAMES,
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_FINDINGS,
    LogFinding,
    ReadLimits,
    Segment,
    SourceError,
    SourceUnavailable,
    discover,
)
from sharestate.log.files import open_output
from sharestate.log.order import OffsetOrder
from sharestate.records.catalog import CONSUMER_OFFSETS_TOPIC, SHARE_STATE_TOPIC, dialect_names
from sharestate.records.detect import Detection
from sharestate.records.segment import (
    FindingCap,
    LogItem,
    decode_segment,
    detect_segment,
    finding_json,
    record_json,
)
from sharestate.replay.group_log import GroupLogResult, GroupReplay
from sharestate.replay.logs import (
    AsOf,
    PartitionLog,
    log_key,
    partition_logs,
    past_end_line,
    segment_rank,
)
from sharestate.replay.prune import prune_row
from sharestate.replay.rows import offset_rows, state_rows
from sharestate.replay.share_log import ShareLogResult, ShareReplay, partial_state_finding
from sharestate.runtime import quiet_gc
from sharestate.simulate import SimulationConfig, simulate

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = exit_codes.OK, exit_codes.FINDINGS, exit_codes.USAGE
EXIT_QUERY = exit_codes.SQL_FAILED


class UsageError(Exception):
    """A bad argument or unreadable input: reported in one line, exit 2."""


class QueryError(Exception):
    """A `sharestate sql` statement refused or failed: reported in one line, exit 4."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Sink:
    """A text output whose write errors (a full disk, `/dev/full`) end the command with one
    line, exit 2."""

    def __init__(self, handle: IO[str], name: str) -> None:
        self._handle = handle
        self._name = name
        self.failed = False

    def write(self, text: str) -> int:
        try:
            return self._handle.write(text)
        except OSError as exc:
            raise self._failure(exc) from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except OSError as exc:
            raise self._failure(exc) from None

    def _failure(self, exc: OSError) -> UsageError:
        self.failed = True
        return UsageError(f"cannot write {self._name}: {exc.strerror}")


@contextmanager
def _output(path: str | None) -> Iterator[_Sink]:
    if path is None or path == "-":
        sink = _Sink(sys.stdout, "standard output")
        try:
            yield sink
            sink.flush()
        except UsageError:
            if sink.failed:  # nothing more reaches a stdout that cannot take it (not at exit)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise
        return
    try:
        handle = open_output(path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        sink = _Sink(handle, path)
        yield sink
        sink.flush()
    finally:
        with suppress(OSError):  # the flush above reported it
            handle.close()


def _table_line(row: dict[str, Any]) -> str:
    error = row["error"]
    what = row["record_type"] or (row["control"] or {}).get("type") or "-"
    shown = error if error is not None else row["control"] or row["value"]
    body = json.dumps(shown, ensure_ascii=False)
    key = json.dumps(row["key"], ensure_ascii=False) if row["key"] else ""
    return f"{row['partition'] if row['partition'] is not None else '-':>4} " \
           f"{row['offset'] if row['offset'] is not None else '-':>12} {what:<36} {key} {body}"


Found = tuple[str | None, int | None, LogFinding]
"""A finding with the topic and partition it was read as (None where unknown)."""


@contextmanager
def _findings_file(path: str | None) -> Iterator[Callable[[Iterable[Found]], None]]:
    """A writer of findings as JSON lines (`--findings`), or one that drops them."""
    if path is None:
        yield lambda found: None
        return
    with _output(path) as out:
        def write(found: Iterable[Found]) -> None:
            for topic, partition, finding in found:
                out.write(json.dumps(finding_json(finding, topic, partition),
                                     ensure_ascii=False, separators=(",", ":")) + "\n")
        yield write


def _limits(args: argparse.Namespace) -> ReadLimits:
    return ReadLimits(max_batch_records=args.max_batch_records, max_findings=args.max_findings)


class _Findings:
    """Where a replaying command's findings go as they are found (none is held): the first
    `SHOWN` on stderr, every one to `--findings`; counted."""

    SHOWN = 20

    def __init__(self, write: Callable[[Iterable[Found]], None]) -> None:
        self.write = write
        self.count = 0

    def __call__(self, topic: str | None, partition: int | None, finding: LogFinding) -> None:
        self.count += 1
        if self.count <= self.SHOWN:
            where = f"offset {finding.offset}" if finding.offset is not None \
                else f"position {finding.position}"
            print(f"{finding.source} {where}: {finding.kind}: {finding.message}",
                  file=sys.stderr)
        self.write([(topic, partition, finding)])

    def status(self, shard_findings: int) -> int:
        """Say how many findings there were (with the replays' own); the exit status."""
        total = self.count + shard_findings
        if total:
            print(f"{total} findings", file=sys.stderr)
        return EXIT_FINDINGS if total else EXIT_OK


@contextmanager
def _findings(args: argparse.Namespace) -> Iterator[_Findings]:
    with _findings_file(args.findings) as write:
        yield _Findings(write)


def cmd_decode(args: argparse.Namespace) -> int:
    """Decode segments to JSON lines (or a table), one line per record in log order."""
    limits = _limits(args)
    findings = 0
    orders: dict[tuple[str, object], OffsetOrder] = {}  # one per partition log
    with _output(args.output) as out, _findings_file(args.findings) as write_findings:
        for segment, detection in _in_log_order(_discover(args), args, limits):
            _say_how_read(segment, detection)
            order = None if detection.topic is None else orders.setdefault(
                log_key(segment, detection.topic), OffsetOrder())
            for record in decode_segment(segment, detection, limits=limits, order=order):
                row = record_json(record)
                if record.finding is not None and record.listed:
                    findings += 1
                    write_findings([(record.topic, record.partition, record.finding)])
                if args.format == "table":
                    out.write(_table_line(row) + "\n")
                else:
                    out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    if findings:
        print(f"{findings} findings", file=sys.stderr)
    return EXIT_FINDINGS if findings else EXIT_OK


def _discover(args: argparse.Namespace) -> list[Segment]:
    """The sources' segments; on stderr, what their folders held that is not read."""
    return discover(args.source, say=lambda line: print(line, file=sys.stderr))


def _in_log_order(segments: list[Segment], args: argparse.Namespace, limits: ReadLimits
                  ) -> list[tuple[Segment, Detection]]:
    """Each segment with its detection, those of one partition log together (where its
    first one was given) in its order, as `state` and the others read them."""
    detected = [(segment, detect_segment(segment, dialect_name=args.dialect, topic=args.topic,
                                         limits=limits)) for segment in segments]
    keys = [log_key(segment, detection.topic) if detection.topic is not None
            else ("", segment.path) for segment, detection in detected]
    first: dict[tuple[str, object], int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    return [detected[i] for i in sorted(range(len(detected)), key=lambda i: (
        first[keys[i]], segment_rank(detected[i][0])))]


def _say_how_read(segment: Segment, detection: Detection) -> None:
    """On stderr: the topic and dialect a segment was read as, and what its path did not say."""
    if segment.note:
        print(f"{segment.path}: {segment.note}: partition unknown", file=sys.stderr)
    print(f"{segment.path}: {detection.describe()}", file=sys.stderr)


def _as_of(args: argparse.Namespace) -> AsOf:
    return AsOf(offset=args.as_of_offset, time=args.as_of_time)


def _logs(args: argparse.Namespace, topic: str, found: _Findings) -> list[PartitionLog]:
    """The partition logs of `topic` among the sources. Every other segment is read for
    its findings, which go to `found` (every command reports the findings of every segment
    it reads, whichever topic it answers for): those whose topic is unknown, and the
    partition logs of the other topic."""
    logs, unknown = partition_logs(_discover(args), dialect=args.dialect,
                                   topic=args.topic, limits=_limits(args))
    for log in logs:
        for segment, detection in zip(log.segments, log.detections, strict=True):
            _say_how_read(segment, detection)
    for finding in unknown:
        print(f"{finding.source}: {finding.message}", file=sys.stderr)
        found(None, None, finding)
    for log in logs:
        if log.topic == topic:
            continue
        for item in log.batches():
            for finding in [item] if isinstance(item, LogFinding) else [*item.failed,
                                                                        *item.findings]:
                found(log.topic, log.partition, finding)
    return [log for log in logs if log.topic == topic]


def _write_rows(rows: Iterable[dict[str, Any]], out: _Sink) -> int:
    """Write `rows` as JSON lines; how many."""
    written = 0
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        written += 1
    return written


def _as_of_text(args: argparse.Namespace) -> str:
    return _as_of(args).describe()


class _Replay(Protocol):
    stopped: bool

    @property
    def result(self) -> ShareLogResult | GroupLogResult: ...

    def apply(self, item: LogItem) -> object: ...


_R = TypeVar("_R", bound=_Replay)


def _replayed(replay: _R, log: PartitionLog, found: _Findings) -> _R:
    """`replay` fed `log` up to its stop point, its findings handed to `found` as they
    come (so that the replay holds none)."""
    findings = replay.result.findings
    for item in log.items():
        replay.apply(item)
        for finding in findings:
            found(log.topic, log.partition, finding)
        findings.clear()
        if replay.stopped:
            break
    return replay


def _say_past_end(args: argparse.Namespace, replays: Sequence[_Replay]) -> None:
    """On stderr, in one line: the logs that end before the stop point asked for (no record
    past it, the last one before it), and where (the answer is as of their end)."""
    as_of = _as_of(args)
    line = past_end_line(as_of, [
        (r.result.name, r.result.last_applied_offset, r.result.last_applied_timestamp)
        for r in replays if not r.stopped and r.result.last_applied_offset is not None
        and as_of.beyond(r.result.last_applied_offset, r.result.last_applied_timestamp)])
    if line is not None:
        print(line, file=sys.stderr)


def _replay_share(args: argparse.Namespace) -> tuple[list[ShareLogResult], int]:
    """Each share-state partition log replayed; the shard's own findings on stderr and in
    `--findings`, the first `--max-findings` of a log in full, then one per code counted
    past them."""
    caps: list[FindingCap] = []
    with _findings(args) as found:
        logs = _logs(args, SHARE_STATE_TOPIC, found)
        replays = []
        for log in logs:
            replay = ShareReplay.of_log(
                log, as_of=_as_of(args), semantics=args.semantics,
                snapshot_update_records_per_snapshot=args.snapshot_update_records)
            replay.result.shard.cap = FindingCap(args.max_findings, log.name, "partition")
            caps.append(replay.result.shard.cap)
            replays.append(_replayed(replay, log, found))
            if (partial := partial_state_finding(log, replay)) is not None:
                found(log.topic, log.partition, partial)
        _say_past_end(args, replays)
        for log, replay, cap in zip(logs, replays, caps, strict=True):
            name = replay.result.name
            listed = [*(f.listed(name) for f in replay.result.shard.findings), *cap.summary()]
            for finding in listed:
                print(f"{name} offset {finding.offset}: {finding.kind}: {finding.message}",
                      file=sys.stderr)
            found.write((log.topic, log.partition, finding) for finding in listed)
    results = [replay.result for replay in replays]
    return results, found.status(sum(len(r.shard.findings) for r in results)
                                 + sum(cap.omitted_count() for cap in caps))


def cmd_state(args: argparse.Namespace) -> int:
    """Every live share-partition's state as of a point, one JSON line each."""
    with _output(args.output) as out:  # refused before any reading
        results, status = _replay_share(args)
        written = _write_rows((row for result in results
                               for row in state_rows(result, args.group)), out)
    if written or status != EXIT_OK:  # a finding may say the state then is not known
        return status
    if args.group is not None:
        _say_no_group(args, "live share-partitions",
                      {key.group_id for result in results for key in result.shard})
    else:
        print(f"no live share-partitions as of {_as_of_text(args)}", file=sys.stderr)
    return status


def _say_no_group(args: argparse.Namespace, what: str, groups: Iterable[str],
                  most: int = 10) -> None:
    """On stderr, in one line: nothing of `--group` as of the stop point, the groups that
    have some (`most` of them) and the closest name among them (case aside, else one that
    starts with the name asked for)."""
    names = sorted(groups)
    line = f"no {what} of group {args.group!r} as of {_as_of_text(args)}"
    if not names:
        print(f"{line}, nor of any other group", file=sys.stderr)
        return
    more = f" and {len(names) - most} more" if len(names) > most else ""
    line += f"; groups with some: {', '.join(map(repr, names[:most]))}{more}"
    by_folded = {name.casefold(): name for name in reversed(names)}
    typed = args.group.casefold()
    close = (difflib.get_close_matches(typed, by_folded, n=1)
             or [name for name in sorted(by_folded) if name.startswith(typed)][:1])
    print(line + (f"; did you mean {by_folded[close[0]]!r}?" if close else ""), file=sys.stderr)


def cmd_prune(args: argparse.Namespace) -> int:
    """Kafka's prune point per state-topic partition and what holds it back."""
    with _output(args.output) as out:
        results, status = _replay_share(args)
        _write_rows((prune_row(result) for result in results), out)
    return status


def cmd_offsets(args: argparse.Namespace) -> int:
    """Committed consumer-group offsets as of a point (`--pending`: open transactions too)."""
    with _output(args.output) as out:
        with _findings(args) as found:
            logs = _logs(args, CONSUMER_OFFSETS_TOPIC, found)
            replays = [_replayed(GroupReplay.of_log(log, as_of=_as_of(args)), log, found)
                       for log in logs]
        _say_past_end(args, replays)
        results = [replay.result for replay in replays]
        every = [row for result in results for row in offset_rows(
            result.coordinator, args.retention_minutes, pending=args.pending)]
        rows = [row for row in every if args.group is None or row["group_id"] == args.group]
        _write_rows(rows, out)
    status = found.status(0)
    if not rows and args.group is not None and status == EXIT_OK:
        _say_no_group(args, "committed offsets" + (" or open commits" if args.pending else ""),
                      {row["group_id"] for row in every})
    return status


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate share groups driving the share coordinator; write both internal topics'
    segments and the data topics' (their end offsets through time, for the lag history)."""
    config = SimulationConfig(
        records=args.records, seed=args.seed, groups=args.groups, topics=args.topics,
        partitions=args.partitions, state_partitions=args.state_partitions,
        offsets_partitions=args.offsets_partitions, codec=args.codec,
        batch_records=args.batch_records, linger_ms=args.linger_ms,
        snapshot_limit=args.snapshot_limit, cold_interval_ms=args.cold_interval_ms,
        dialect=args.dialect, orphaned_state=args.orphaned_state,
        stuck_deleting=args.stuck_deleting, poison_rate=args.poison_rate, data_topics=True)
    try:
        result = simulate(config, args.out)
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(result.summary_line())
    return EXIT_OK


def _add_simulate(sub: Any) -> None:
    defaults = SimulationConfig()
    command = sub.add_parser("simulate", help="write a simulated share-group workload",
                             description=cmd_simulate.__doc__)
    command.add_argument("--out", required=True, type=location,
                         help="log.dirs root to write into")
    command.add_argument("--records", type=arguments.count, required=True,
                         help="__share_group_state records to write (at least)")
    command.add_argument("--seed", type=int, default=defaults.seed)
    for flag, help_text in (("groups", "share groups"), ("topics", "user topics"),
                            ("partitions", "partitions per user topic"),
                            ("state-partitions", "__share_group_state partitions"),
                            ("offsets-partitions", "__consumer_offsets partitions"),
                            ("batch-records", "most records per batch")):
        command.add_argument(f"--{flag}", type=arguments.count,
                             default=getattr(defaults, flag.replace("-", "_")),
                             help=f"{help_text} (default %(default)s)")
    command.add_argument("--codec", choices=COMPRESSION_NAMES, default=defaults.codec)
    command.add_argument("--linger-ms", type=int, default=defaults.linger_ms,
                         help="close a batch after this long (default %(default)s)")
    command.add_argument("--snapshot-limit", type=arguments.records_per_snapshot,
                         default=defaults.snapshot_limit,
                         help="share.coordinator.snapshot.update.records.per.snapshot")
    command.add_argument("--cold-interval-ms", type=arguments.count,
                         default=defaults.cold_interval_ms,
                         help="share.coordinator.cold.partition.snapshot.interval.ms")
    command.add_argument("--dialect", choices=["4.1", "4.0"], default=defaults.dialect)
    command.add_argument("--orphaned-state", action="store_true",
                         help="keep one group's share-partitions of a topic out of its metadata")
    command.add_argument("--stuck-deleting", action="store_true",
                         help="leave one topic in a group's deleting list with its state")
    command.add_argument("--poison-rate", type=arguments.fraction, default=defaults.poison_rate,
                         help="fraction of produced records no consumer can process: released "
                              "on every delivery until archived at the delivery limit "
                              "(default %(default)s)")
    command.set_defaults(func=cmd_simulate)


def cmd_run(args: argparse.Namespace) -> int:
    """Run every pipeline job on a local Spark session into a warehouse of Delta tables."""
    from sharestate.spark.run import ArgumentError, run

    try:
        return run(args)
    except ArgumentError as exc:
        raise UsageError(str(exc)) from None


def _add_run(sub: Any) -> None:
    from sharestate.spark.run import add_arguments

    command = sub.add_parser("run", help="run the Spark pipeline into Delta tables",
                             description=cmd_run.__doc__)
    add_arguments(command)
    command.set_defaults(func=cmd_run)


SQL_FORMATS = ("table", "jsonl", "csv")


def cmd_sql(args: argparse.Namespace) -> int:
    """Run Spark SQL over every table of a warehouse, each by its name (on the jvm backend a
    catalog table, so Delta's own SQL works: VERSION AS OF, TIMESTAMP AS OF, DESCRIBE
    HISTORY; on rs a view, where those are refused saying how to get them): one query, the
    statements of a --file, or, without either, a prompt in one Spark session (statements
    from a pipe when stdin is no terminal). At the prompt, statements end with ';', \\d
    lists the tables and their columns, \\d TABLE one table's, \\q quits.

    Read-only: a statement that writes (INSERT, CREATE TABLE ... AS, INSERT OVERWRITE
    DIRECTORY, SET, DELETE, ...) or calls out of SQL (reflect(), TRANSFORM ... USING, ADD
    JAR) is refused before anything runs. A refused or failed query exits 4 with one line
    naming Spark's error class (the Java stack with --verbose); at the prompt the line is
    printed and the prompt goes on, a --file or a pipe stops there with that status. --write
    (jvm backend) also runs DELETE, UPDATE, MERGE, OPTIMIZE, VACUUM (under Delta's retention
    check) and RESTORE of the warehouse's tables by name, and no other statement that
    writes; call-outs stay refused. Times print in the session's time zone
    (spark.sql.session.timeZone, UTC unless --conf says otherwise), the one Spark reads time
    literals in.
    """
    import tempfile

    from sharestate.app.sql_session import (
        BadCommand,
        Rows,
        Session,
        Tables,
        describe,
        history_file,
    )
    from sharestate.lake import find_tables, open_lake
    from sharestate.lake.integrity import DamagedTable, check_warehouse
    from sharestate.lake.read_only import session_settings
    from sharestate.lake.rs import FilesGone
    from sharestate.spark.console import heartbeat, jvm_logging_off
    from sharestate.spark.session import SettingError, build_session

    if args.query is not None and args.file is not None:
        raise UsageError("a query or --file, not both")
    script = None if args.file is None else _statements_file(args.file)
    if not find_tables(args.warehouse):
        raise UsageError(f"no Delta tables under {args.warehouse}")
    try:
        check_warehouse(args.warehouse)
    except DamagedTable as exc:
        raise QueryError(str(exc)) from None
    if args.write and args.as_of_time is not None:
        raise UsageError("--write changes the tables as they are now: not with --as-of-time")
    try:
        settings = arguments.spark_settings(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="sharestate-sql-") as scratch:
        conf = {**settings, **session_settings(scratch)}
        try:
            # the queries of a session are short: C2's compilations cost more CPU than
            # they save (the cookbook on the demo warehouse: 19.9 CPU-s full, 10.3 quick)
            spark = build_session("sharestate-sql", ui=False, conf=conf, lean_driver=True)
        except SettingError as exc:
            raise UsageError(str(exc)) from None
        # a failed task logs its Java stack; the error line says enough
        with nullcontext() if args.verbose else jvm_logging_off(spark):
            if args.write and open_lake(spark).backend != "jvm":
                raise UsageError("--write needs the jvm backend (Delta's SQL): Delta's jars on "
                                 "the classpath and --backend jvm")
            try:
                tables = Tables(spark, args.warehouse, as_of_time=args.as_of_time)
            except FilesGone as exc:
                raise UsageError(str(exc)) from None
            if args.as_of_time is not None:
                absent = sorted(set(find_tables(args.warehouse)) - set(tables.names))
                if absent:
                    print(f"not there yet at {AsOf(time=args.as_of_time).describe()}: "
                          f"{', '.join(absent)}",
                          file=sys.stderr)
            delta_sql = open_lake(spark).backend == "jvm"

            def execute(statement: str) -> Rows:
                tables.refresh()
                with heartbeat("sql"):
                    return _run_statement(spark, args, statement, delta_sql=delta_sql)

            def describe_tables(name: str) -> Rows:
                tables.refresh()
                return describe(spark, tables.names, name)

            if args.query is None:
                with _output(args.output) as out:
                    session = Session(
                        execute, describe_tables,
                        lambda sink, result: write_rows(sink, result[1], result[0],
                                                        args.format, zone=result[2]),
                        out, {QueryError: EXIT_QUERY, UsageError: EXIT_USAGE,
                              BadCommand: EXIT_USAGE})
                    if script is not None:
                        return session.run_lines(script.splitlines())
                    if not sys.stdin.isatty():
                        return session.run_lines(sys.stdin)
                    print(f"{len(tables.names)} tables of {args.warehouse} "
                          f"({open_lake(spark).backend} backend); \\d lists them, \\q quits",
                          file=sys.stderr)
                    return session.prompt(history_file())
            columns, rows, zone = execute(args.query)
    with _output(args.output) as out:
        write_rows(out, rows, columns, args.format, zone=zone)
    return EXIT_OK


SQL_FILE_LIMIT = 16 << 20
"""The largest --file of statements read."""


def _statements_file(path: str) -> str:
    """The text of a --file of statements, else UsageError."""
    from sharestate.log.files import read_regular

    try:
        return read_regular(path, limit=SQL_FILE_LIMIT).decode("utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {path}: not UTF-8 text ({exc.reason} at byte "
                         f"{exc.start})") from None


def _run_statement(spark: Any, args: argparse.Namespace, statement: str, *, delta_sql: bool
                   ) -> tuple[list[str], list[dict[str, Any]], str | None]:
    """Check and run `statement`: its columns, its rows and, where they hold times, the
    time zone they are in (the session's); else QueryError."""
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException
    from pyspark.logger import PySparkLogger
    from pyspark.sql import DataFrame

    from sharestate.lake.errors import spark_error_line
    from sharestate.lake.read_only import RefusedStatement, check_statement
    from sharestate.spark.session import SESSION_ZONE

    # pyspark logs every failed query's Java stack; the one line below says what failed
    PySparkLogger.getLogger("SQLQueryContextLogger").disabled = not args.verbose
    spark.conf.set("spark.sql.pyspark.jvmStacktrace.enabled", str(args.verbose).lower())
    try:
        with _write_lease(args):
            plan = check_statement(spark, statement, write=args.write, delta_sql=delta_sql)
            dataset = spark._jvm.org.apache.spark.sql.classic.Dataset.ofRows(
                spark._jsparkSession, plan)
            frame, timed = _times_as_text(DataFrame(dataset, spark))
            zone = spark.conf.get(SESSION_ZONE) if timed else None
            return frame.columns, [row.asDict(recursive=True) for row in frame.collect()], zone
    except RefusedStatement as exc:
        raise QueryError(str(exc)) from None
    except (PySparkException, Py4JJavaError) as exc:
        if args.verbose:
            print(str(exc), file=sys.stderr)
        raise QueryError(f"query failed: {spark_error_line(exc)}") from None


def _times_as_text(frame: Any) -> tuple[Any, bool]:
    """`frame` with its TIMESTAMP values, nested ones too, as Spark writes them in the
    session's time zone (`spark.sql.session.timeZone`), the zone it reads time literals in
    (PySpark gives them in this machine's zone: a time copied from the output into TIMESTAMP
    AS OF or a WHERE clause meant another moment); and whether it held any."""
    from pyspark.sql import functions
    from pyspark.sql.types import (
        ArrayType,
        DataType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    def text(kind: DataType) -> DataType:
        if isinstance(kind, TimestampType):
            return StringType()
        if isinstance(kind, ArrayType):
            return ArrayType(text(kind.elementType), kind.containsNull)
        if isinstance(kind, MapType):
            return MapType(text(kind.keyType), text(kind.valueType), kind.valueContainsNull)
        if isinstance(kind, StructType):
            return StructType([StructField(f.name, text(f.dataType), f.nullable)
                               for f in kind.fields])
        return kind

    kinds = [field.dataType for field in frame.schema.fields]
    if all(text(kind) == kind for kind in kinds):
        return frame, False
    names = frame.columns
    numbered = frame.toDF(*(f"_{i}" for i in range(len(names))))  # names may repeat
    return numbered.select(*(functions.col(f"_{i}").cast(text(kind)).alias(name)
                             for i, (name, kind) in enumerate(zip(names, kinds, strict=True)))
                           ), True


@contextmanager
def _write_lease(args: argparse.Namespace) -> Iterator[None]:
    """Hold the warehouse lease while a statement that may write (--write) runs."""
    from sharestate.lake.lease import LeaseError, warehouse_lease

    with ExitStack() as held:
        if args.write:
            try:
                held.enter_context(warehouse_lease(
                    args.warehouse, run=f"sql-{os.getpid()}", what="sharestate sql --write",
                    wait=args.lease_wait))
            except LeaseError as exc:
                raise UsageError(str(exc)) from None
        yield


def write_rows(out: SupportsWrite[str], rows: list[dict[str, Any]], columns: list[str],
               fmt: str, *, zone: str | None = None) -> None:
    """Rows as an aligned text table, JSON lines or CSV; the table's last line names the
    time `zone` its times are in, where given."""
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        return
    if fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows([_cell(row[c]) for c in columns] for row in rows)
        return
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()
              + "\n")
    for row_cells in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(row_cells, widths, strict=True))
                  .rstrip() + "\n")
    times = f", times in {zone}" if zone else ""
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{times})\n")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _add_sql(sub: Any) -> None:
    command = sub.add_parser("sql", help="query the Delta tables with Spark SQL",
                             description=cmd_sql.__doc__)
    command.add_argument("--warehouse", required=True, type=location,
                         help="folder holding the Delta tables")
    command.add_argument("--format", choices=SQL_FORMATS, default="table")
    command.add_argument("--backend", choices=arguments.BACKENDS, default=None,
                         help="Delta backend (jvm: Delta's own SQL, time travel and "
                              "DESCRIBE HISTORY; default: the session's, else auto)")
    command.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                         help="Spark setting (repeatable), as for run")
    command.add_argument("--as-of-time", type=arguments.time, metavar="TIME",
                         help="query every table as it was at this time (ISO 8601 or epoch "
                              "ms): its last commit then; either backend")
    command.add_argument("--output", "-o", type=location, help="write here instead of stdout")
    command.add_argument("--write", action="store_true",
                         help="let the statement change the warehouse's Delta tables (jvm "
                              "backend; holds the warehouse lease)")
    command.add_argument("--lease-wait", type=arguments.seconds, default=0.0,
                         metavar="SECONDS", help="with --write: wait this long for the "
                                                 "warehouse lease another writer holds")
    arguments.add_verbose_argument(command, also=", and Spark's Java stack of a failed query")
    command.add_argument("--file", "-f", metavar="FILE",
                         help="run this file's statements (each ending with ;) in one "
                              "session, stopping at the first that fails")
    command.add_argument("query", nargs="?",
                         help="a Spark SQL query; tables are views by name (without a query "
                              "or --file: a prompt)")
    command.set_defaults(func=cmd_sql)


def cmd_demo(args: argparse.Namespace) -> int:
    """Simulate a realistic log, run the whole pipeline on it and summarise the tables."""
    from sharestate.app.demo import run_demo

    return run_demo(args, lambda line: print(line, flush=True))


def _add_demo(sub: Any) -> None:
    command = sub.add_parser("demo", help="simulate a log and run the pipeline on it",
                             description=cmd_demo.__doc__)
    command.add_argument("--logs", default="demo-data", type=location,
                         help="where to write the simulated log")
    command.add_argument("--warehouse", default="warehouse", type=location,
                         help="where to write the tables")
    command.add_argument("--records", type=arguments.count, default=200_000,
                         help="__share_group_state records to simulate (default %(default)s)")
    command.add_argument("--seed", type=int, default=7)
    arguments.add_verbose_argument(command)
    command.set_defaults(func=cmd_demo)


def cmd_quality(args: argparse.Namespace) -> int:
    """Run the data-quality gate (Great Expectations suites) over a warehouse's gold tables.

    Writes quality_results, audit_findings (rule quality_gate) and Data Docs under
    <warehouse>/_docs/quality/. Exit 0 the gate holds, 1 it failed, 2 bad arguments,
    3 it could not run, 70 an internal error.
    """
    from sharestate.spark.console import heartbeat
    from sharestate.spark.quality_job import QualityArgumentError, run

    try:
        with heartbeat("quality"):
            return run(args)
    except QualityArgumentError as exc:
        raise UsageError(str(exc)) from None


def _add_quality(sub: Any) -> None:
    from sharestate.spark.quality_job import add_arguments

    command = sub.add_parser("quality", help="run the data-quality gate over the tables",
                             description=cmd_quality.__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(command)
    command.set_defaults(func=cmd_quality)


def cmd_report(args: argparse.Namespace) -> int:
    """Write one self-contained HTML page about a warehouse: lag, redelivery, prune frontier,
    audit findings, consumer-group offsets, with the inputs covered and finding badges."""
    from sharestate.app.report import ReportError, write_report
    from sharestate.spark.console import heartbeat

    try:
        with heartbeat("report"):
            written = write_report(args.warehouse, args.out, backend=args.backend,
                                   verbose=args.verbose)
    except ReportError as exc:
        raise UsageError(str(exc)) from None
    print(f"report: {written.path}")
    return EXIT_OK


def _add_report(sub: Any) -> None:
    command = sub.add_parser("report", help="write an HTML report of a warehouse",
                             description=cmd_report.__doc__)
    command.add_argument("--warehouse", required=True, type=location,
                         help="folder holding the Delta tables")
    command.add_argument("--out", required=True, type=location, help="HTML file to write")
    command.add_argument("--backend", choices=arguments.BACKENDS, default=None)
    arguments.add_verbose_argument(command)
    command.set_defaults(func=cmd_report)


def cmd_maintain(args: argparse.Namespace) -> int:
    """Merge the small files scheduled runs leave in a warehouse's tables, delete the files no
    version within the retention needs, and checkpoint the tables' logs, under the
    warehouse lease; the next run goes on from where the last one stopped. Works on the
    tables of either backend, with no JVM. Exit 0 done, 2 bad arguments (a retention
    shorter than a table's `delta.deletedFileRetentionDuration`, the lease held)."""
    from sharestate.app import maintain
    from sharestate.lake.compact import RetentionError
    from sharestate.lake.lease import LeaseError
    from sharestate.spark.console import heartbeat

    if not os.path.isdir(args.warehouse):
        raise UsageError(f"no warehouse at {args.warehouse}")
    try:
        with heartbeat("maintain"):
            return maintain.run(args)
    except (RetentionError, LeaseError) as exc:
        raise UsageError(str(exc)) from None


def _add_maintain(sub: Any) -> None:
    command = sub.add_parser("maintain", help="compact, vacuum and checkpoint the tables",
                             description=cmd_maintain.__doc__)
    command.add_argument("--warehouse", required=True, type=location,
                         help="folder holding the Delta tables")
    command.add_argument("--retain-hours", type=arguments.bounded(0, 1 << 31),
                         metavar="HOURS", help="keep the files versions of this many hours "
                                               "read (default: each table's retention, 7 "
                                               "days unless set)")
    command.add_argument("--target-mib", type=arguments.bounded(1, 1 << 14), default=64,
                         metavar="MIB", help="merge small files into files up to this size "
                                             "(default %(default)s)")
    command.add_argument("--min-files", type=arguments.bounded(2, 1 << 20), default=8,
                         metavar="N", help="merge a partition's small files once there are "
                                           "this many (default %(default)s)")
    command.add_argument("--dry-run", action="store_true",
                         help="say what would be merged and deleted, change nothing")
    command.add_argument("--lease-wait", type=arguments.seconds, default=0.0,
                         metavar="SECONDS",
                         help="wait this long for the warehouse lease another writer holds")
    command.set_defaults(func=cmd_maintain)


def _add_serve(sub: Any) -> None:
    from sharestate.app.serve.command import add_arguments, run

    command = sub.add_parser("serve", help="replay a live cluster's state topics and answer "
                                           "over HTTP", description=run.__doc__)
    add_arguments(command)
    command.set_defaults(func=run)


def _file_source(text: str) -> str:
    """A source of the offline commands: a path; a URI (a live cluster's) is refused."""
    from sharestate.cluster.kafka_options import redact_userinfo

    if text.startswith("kafka://"):
        raise argparse.ArgumentTypeError(
            f"{redact_userinfo(text)} is a live cluster: decode, state, prune and offsets read "
            "segment files; for a cluster, sharestate serve --source kafka://HOST:PORT "
            "answers the same over HTTP and sharestate run --source kafka://HOST:PORT writes "
            "the Delta tables")
    if URI.match(text):
        raise argparse.ArgumentTypeError(f"{redact_userinfo(text)}: decode, state, prune and "
                                         "offsets read local segment files, not URIs")
    return text


def _add_sources(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", nargs="+", type=_file_source,
                        help="segment file (.log or .log.gz), partition directory, log.dirs "
                             "root or any folder of segments (read with the folders under it)")
    parser.add_argument("--dialect", type=arguments.dialect, default=None,
                        help="record format: auto (detect per segment, default), "
                             + ", ".join(dialect_names()))
    parser.add_argument("--topic", choices=["__share_group_state", "__consumer_offsets"],
                        help="topic of segments whose path does not name it (default: detect)")
    parser.add_argument("--findings", metavar="FILE",
                        help="also write every finding as a JSON line here (its segment, "
                             "offset, position, kind, message and bytes)")
    parser.add_argument("--max-batch-records", type=arguments.count,
                        default=DEFAULT_MAX_BATCH_RECORDS,
                        metavar="N", help="refuse (as a finding) a batch declaring more "
                                          "records than this (default %(default)s)")
    parser.add_argument("--max-findings", type=arguments.count, default=DEFAULT_MAX_FINDINGS,
                        metavar="N", help="list at most this many findings of a segment one "
                                          "by one; count the rest, with one omitted_findings "
                                          "finding per kind (default %(default)s)")


def version() -> str:
    """`sharestate X.Y.Z (C extension|pure Python), Python X.Y.Z`."""
    from sharestate import __version__, native

    kernels = "C extension" if native.module is not None else "pure Python"
    return f"sharestate {__version__} ({kernels}), Python {sys.version.split()[0]}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sharestate",
                     description="Decode, replay and analyse Kafka's share-group state and "
                                 "consumer-offsets logs.",
                     epilog="sharestate COMMAND --help: that command's arguments.")
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser,
                                title="commands", metavar="COMMAND")
    decode = sub.add_parser("decode", help="decode segments to JSON lines")
    _add_sources(decode)
    decode.add_argument("--output", "-o", help="write here instead of stdout")
    decode.add_argument("--format", choices=["jsonl", "table"], default="jsonl")
    decode.set_defaults(func=cmd_decode)

    for name, func, help_text in (
            ("state", cmd_state, "share-partition state as of an offset or time"),
            ("prune", cmd_prune, "prune points of __share_group_state partitions"),
            ("offsets", cmd_offsets, "committed consumer-group offsets as of a point")):
        command = sub.add_parser(name, help=help_text, description=func.__doc__)
        _add_sources(command)
        when = command.add_mutually_exclusive_group()
        when.add_argument("--as-of-offset", type=arguments.offset, metavar="N",
                          help="after applying every record with offset <= N")
        when.add_argument("--as-of-time", type=arguments.time, metavar="TIME",
                          help="ISO 8601 time or epoch ms: after every record up to it")
        command.add_argument("--output", "-o", help="write here instead of stdout")
        if name in ("state", "offsets"):
            command.add_argument("--group", help="only this group")
        if name == "offsets":
            command.add_argument("--pending", action="store_true",
                                 help="add open transactional commits (state pending:<pid>)")
            command.add_argument("--retention-minutes", type=arguments.retention_minutes,
                                 default=DEFAULT_RETENTION_MINUTES,
                                 help="offsets.retention.minutes for the expiry forecast")
        else:
            command.add_argument("--semantics", choices=SEMANTICS, default=KAFKA,
                                 help="kafka (markers ignored, as Kafka does) or "
                                      "transactional-acks (acks wait for COMMIT)")
            command.add_argument("--snapshot-update-records",
                                 type=arguments.records_per_snapshot,
                                 default=DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                                 help="share.coordinator.snapshot.update.records.per.snapshot")
        command.set_defaults(func=func)
    _add_simulate(sub)
    _add_run(sub)
    _add_sql(sub)
    _add_demo(sub)
    _add_quality(sub)
    _add_report(sub)
    _add_serve(sub)
    _add_maintain(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    quiet_gc()
    argv = sys.argv[1:] if argv is None else argv
    try:
        if not argv:  # the usage and the commands, as an error (a script's empty command)
            build_parser().print_help(sys.stderr)
            return EXIT_USAGE
        args = build_parser().parse_args(argv)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except SourceUnavailable as exc:
        return exit_codes.unavailable(exc)
    except (UsageError, SourceError) as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except QueryError as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return EXIT_QUERY
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # anything else is a bug: say so, with its own status
        return exit_codes.internal_error(exc)


if __name__ == "__main__":
    sys.exit(main())
