"""Run the whole pipeline, or one job, from the command line (spark-submit or local).

    spark-submit pipelines/run_all.py --source /var/kafka-logs --warehouse /lake/sharestate
    spark-submit pipelines/ingest.py  --source /var/kafka-logs --warehouse /lake/sharestate

`sharestate run` calls the same code with a local session. Exit status
(`sharestate.exit_codes`): 0 clean, 1 the run completed with findings (decode errors, audit
warnings or errors), 2 bad arguments, an unreadable source, a Delta backend that cannot
run or a damaged table (`sharestate.lake.integrity`), 75 a live source that did not
answer (run again later), 70 an internal error (a bug: traceback, then one line). The
closing line `tables in <warehouse> (run <id>)` is printed only by a run that completed.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from sharestate import arguments, exit_codes
from sharestate.coordinator.expiry import DEFAULT_RETENTION_MINUTES
from sharestate.coordinator.shard import KAFKA, SEMANTICS
from sharestate.coordinator.share_rules import DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT
from sharestate.lake.errors import out_of_space
from sharestate.lake.integrity import DamagedTable, check_warehouse
from sharestate.lake.lease import LeaseError, warehouse_lease
from sharestate.locations import URI, location
from sharestate.log import (
    DEFAULT_MAX_BATCH_RECORDS,
    DEFAULT_MAX_FINDINGS,
    ReadLimits,
    Segment,
    SourceError,
    SourceUnavailable,
    discover,
)
from sharestate.log.end_offsets import is_data_partition, log_end_offsets
from sharestate.replay.logs import AsOf
from sharestate.tables.gold_pass import GoldOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharestate.spark.jobs.analytics import AnalyticsInputs
    from sharestate.spark.jobs.warehouse import RunReport

JOBS = ("ingest", "decode", "replay", "analytics")
FULL_BYTES = 64 << 20
"""A warehouse file system with less free space than this is called the full one."""
QUALITY = "quality"
"""The data-quality gate: not in JOBS; run it as `run(args, (*JOBS, QUALITY))`,
`pipelines/quality.py` or `sharestate quality`."""


class ArgumentError(Exception):
    """A bad argument: reported in one line, exit 2."""


def _cluster_failure(exc: Exception) -> Exception:
    """A live source's error before any work, as the run reports it: SourceUnavailable
    when it may pass (`ClusterNotReady`: no broker answered, none ready), else
    ArgumentError (a refusal, a bad option)."""
    from sharestate.cluster.kafka_plan import ClusterNotReady

    kind = SourceUnavailable if isinstance(exc, ClusterNotReady) else ArgumentError
    return kind(str(exc))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgumentError(message)


def parser(job: str = "run") -> argparse.ArgumentParser:
    """The arguments every job takes (the ones a job does not use are ignored)."""
    p = _Parser(prog=f"pipelines/{job}.py",
                description="sharestate Spark job: Kafka internal-topic logs to Delta tables.")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Add the job arguments to `p` (shared by spark-submit and `sharestate run`)."""
    p.add_argument("--source", action="append", default=[], type=location,
                   help="segment file, partition directory, log.dirs root, folder of segments, "
                        "or kafka://host:port for a live cluster (repeatable)")
    p.add_argument("--warehouse", required=True, type=location,
                   help="folder holding the Delta tables")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--as-of-offset", type=arguments.offset, metavar="N",
                      help="replay every state-topic partition up to offset N")
    when.add_argument("--as-of-time", type=arguments.time, metavar="TIME",
                      help="ISO 8601 time or epoch ms")
    p.add_argument("--semantics", choices=SEMANTICS, default=KAFKA)
    p.add_argument("--snapshot-update-records", type=arguments.records_per_snapshot,
                   default=DEFAULT_SNAPSHOT_UPDATE_RECORDS_PER_SNAPSHOT,
                   help="share.coordinator.snapshot.update.records.per.snapshot")
    p.add_argument("--end-offsets", metavar="FILE", type=location,
                   help='JSON file of topic end offsets for the lag: '
                        '[{"topic": name-or-id, "partition": p, "end_offset": n}, ...] '
                        '(default with a kafka:// source: the cluster\'s, read at the start; '
                        'with a log.dirs source and no --as-of: the log end offsets of its data '
                        'topics\' partition folders)')
    p.add_argument("--end-offsets-from", action="append", default=[], metavar="SOURCE",
                   type=location,
                   help="where the data topics' end offsets through time come from, for the "
                        "lag history (repeatable): kafka://host:port (ListOffsets by "
                        "timestamp; a kafka:// --source is used too), http://host:port of "
                        "sharestate serve, or a log.dirs folder holding the data topics")
    p.add_argument("--delivery-limit", type=arguments.count, default=None,
                   help="group.share.delivery.count.limit, for poison ranges")
    p.add_argument("--retention-minutes", type=arguments.retention_minutes,
                   default=DEFAULT_RETENTION_MINUTES,
                   help="offsets.retention.minutes, for the expiry forecast")
    p.add_argument("--full", action="store_true",
                   help="re-ingest every segment, not only new or changed ones, and replay "
                        "every partition from its log start")
    p.add_argument("--max-batch-records", type=arguments.count,
                   default=DEFAULT_MAX_BATCH_RECORDS,
                   metavar="N", help="refuse (as a decode error) a batch declaring more "
                                     "records than this (default %(default)s)")
    p.add_argument("--max-findings", type=arguments.count, default=DEFAULT_MAX_FINDINGS,
                   metavar="N", help="decode errors of a segment, and a partition's replay "
                                     "findings, listed one by one; the rest are counted, "
                                     "one omitted_findings row per kind "
                                     "(default %(default)s)")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="client setting for a kafka:// source, e.g. security.protocol=SASL_SSL "
                        "(secrets: SHARESTATE_KAFKA_* environment variables)")
    p.add_argument("--connect-timeout", type=arguments.seconds, default=10.0,
                   metavar="SECONDS", help="how long a kafka:// source may take to answer "
                                           "before the run gives up (exit 2)")
    arguments.add_spark_arguments(p)
    p.add_argument("--run-id", metavar="ID",
                   help="run id to record in ingest_runs and each table commit (default: a "
                        "new one); a scheduler passes one per data interval to all four jobs. "
                        "The decode job run alone then decodes only the segments that ingest "
                        "run wrote (without --run-id: all of bronze)")


def _end_offsets(path: str | None) -> dict[tuple[str, int], int] | None:
    if path is None:
        return None
    try:
        return arguments.read_end_offsets(path)
    except arguments.EndOffsetsError as exc:
        raise ArgumentError(str(exc)) from None


def _lag_roots(args: argparse.Namespace, jobs: Sequence[str]) -> list[str]:
    """The folder sources whose data topics' log end offsets are the lag's end offsets: all
    of them when the lag is now's (no --as-of) and neither an --end-offsets file nor a
    kafka:// source gives end offsets."""
    from sharestate.cluster.kafka_options import KAFKA_SCHEME

    sources = args.source or ()
    if ("analytics" not in jobs or args.end_offsets is not None or args.as_of_offset is not None
            or args.as_of_time is not None
            or any(source.startswith(KAFKA_SCHEME) for source in sources)):
        return []
    return [source for source in sources if Path(source).is_dir()]


def _analytics_inputs(args: argparse.Namespace, jobs: Sequence[str],
                      kafka_options: dict[str, str]) -> AnalyticsInputs:
    """End offsets for the lag now: the file's, else a live source's cluster's (read now,
    as Kafka's own share-group describe reads them), else the log end offsets of the data
    topics in the folder sources (`_lag_roots`), else none (the lag is a lower bound); for
    the lag through time, the `--end-offsets-from` sources and the live ones."""
    from sharestate.analytics.end_offset_sources import EndOffsetSourceError, check_source
    from sharestate.analytics.lag import LIVE, SEGMENTS
    from sharestate.cluster import (
        KafkaOptionError,
        KafkaSourceError,
        fetch_topic_ends,
        parse_options,
    )
    from sharestate.cluster.kafka_options import KAFKA_SCHEME, source_options
    from sharestate.spark.jobs.analytics import AnalyticsInputs

    if "analytics" not in jobs:
        return AnalyticsInputs()
    live = [source for source in args.source or () if source.startswith(KAFKA_SCHEME)]
    try:
        sources = tuple(dict.fromkeys(check_source(source)
                                      for source in [*live, *args.end_offsets_from]))
    except EndOffsetSourceError as exc:
        raise ArgumentError(str(exc)) from None
    through_time = {"end_offsets_from": sources, "kafka_options": kafka_options,
                    "delivery_limit": args.delivery_limit}
    if args.end_offsets is None and not live and (roots := _lag_roots(args, jobs)):
        return AnalyticsInputs(end_offsets=log_end_offsets(roots), end_offset_source=SEGMENTS,
                               **through_time)
    if args.end_offsets is not None or not live:
        return AnalyticsInputs(end_offsets=_end_offsets(args.end_offsets),
                               end_offsets_file=args.end_offsets, **through_time)
    ends: dict[tuple[str, int], int] = {}
    for uri in live:
        try:
            ends |= fetch_topic_ends(parse_options(source_options(uri, kafka_options)))
        except (KafkaSourceError, KafkaOptionError) as exc:
            raise _cluster_failure(exc) from None
    return AnalyticsInputs(end_offsets=ends, end_offset_source=LIVE, **through_time)


def options(args: argparse.Namespace) -> GoldOptions:
    """The replay options the arguments ask for."""
    return GoldOptions(as_of=AsOf(offset=args.as_of_offset, time=args.as_of_time),
                       semantics=args.semantics,
                       snapshot_update_records_per_snapshot=args.snapshot_update_records,
                       retention_minutes=args.retention_minutes,
                       max_findings=args.max_findings)


def _check_clusters(sources: Sequence[str], kafka_options: dict[str, str],
                    timeout_s: float) -> None:
    """Every `kafka://` source must answer within `timeout_s` seconds, before any work."""
    from sharestate.cluster import (
        KafkaOptionError,
        KafkaSourceError,
        check_reachable,
        parse_options,
    )
    from sharestate.cluster.kafka_options import KAFKA_SCHEME, source_options

    for uri in sources:
        if uri.startswith(KAFKA_SCHEME):
            try:
                check_reachable(parse_options(source_options(uri, kafka_options)), timeout_s)
            except (KafkaSourceError, KafkaOptionError) as exc:
                raise _cluster_failure(exc) from None


def _check_files(sources: Sequence[str], end_offsets_from: Sequence[str] = ()
                 ) -> list[Segment]:
    """The file sources' segments, which ingest reads (a cluster's copies are ranked once):
    every file source must hold some (else SourceError), before any work; stderr says what
    a folder held that is not read (a root's data topics are, when it is also an
    `--end-offsets-from` source), and which folders name no partition."""
    from sharestate.cluster.kafka_options import KAFKA_SCHEME

    data_roots = {Path(source).resolve() for source in end_offsets_from
                  if not source.startswith(KAFKA_SCHEME)}

    def read_elsewhere(folder: Path) -> bool:
        return folder.parent.resolve() in data_roots and is_data_partition(folder)

    files = [source for source in sources if not source.startswith(KAFKA_SCHEME)]
    segments = discover(files, say=lambda line: print(line, file=sys.stderr),
                        read_elsewhere=read_elsewhere) if files else []
    for note in dict.fromkeys(f"{segment.path.parent}: {segment.note}: partition unknown"
                              for segment in segments if segment.note):
        print(note, file=sys.stderr)
    return segments


def _check_warehouse(warehouse: str) -> None:
    """A local warehouse must be a folder, or one that can be made, and its tables whole
    (`sharestate.lake.integrity`), before any work."""
    if URI.match(warehouse):
        return
    path = Path(warehouse)
    existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise ArgumentError(f"--warehouse {warehouse}: {existing} is not a directory")
    try:
        check_warehouse(path)
    except DamagedTable as exc:
        raise ArgumentError(str(exc)) from None


def run(args: argparse.Namespace, jobs: Sequence[str] = JOBS, *,
        spark_factory: Callable[..., SparkSession] | None = None) -> int:
    """Run `jobs` in order with a session built from `args`; print a summary; exit status."""
    from sharestate.analytics.end_offset_sources import (
        EndOffsetSourceError,
        EndOffsetsUnavailable,
    )
    from sharestate.spark import console
    from sharestate.spark.executors import executor_kernels, warn_if_pure
    from sharestate.spark.jobs.analytics import analytics
    from sharestate.spark.jobs.decode import decode
    from sharestate.spark.jobs.ingest import ingest
    from sharestate.spark.jobs.replay import replay
    from sharestate.spark.jobs.warehouse import Warehouse, new_run_id
    from sharestate.spark.session import SettingError, build_session, resolve_conf

    if "ingest" in jobs and not args.source:
        raise ArgumentError("--source is required (segment files, partition dirs or a root)")
    if args.run_id is not None and not args.run_id.strip():
        raise ArgumentError("--run-id cannot be empty")
    gold = options(args)
    try:
        conf = arguments.spark_settings(args)
        kafka_options = arguments.key_values(args.kafka_option, "--kafka-option")
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None
    for warning in arguments.secret_warnings(kafka_options, "--kafka-option"):
        print(warning, file=sys.stderr)
    try:
        resolve_conf(conf, master=args.master)  # bad settings: refused before any work
    except SettingError as exc:
        raise ArgumentError(str(exc)) from None
    _check_warehouse(args.warehouse)
    segments = None
    if "ingest" in jobs:
        segments = _check_files(args.source, [*args.end_offsets_from,
                                               *_lag_roots(args, jobs)])
        _check_clusters(args.source, kafka_options, args.connect_timeout)
    if "analytics" in jobs:
        _check_clusters(args.end_offsets_from, kafka_options, args.connect_timeout)
    inputs = _analytics_inputs(args, jobs, kafka_options)
    warehouse = Warehouse(Path(args.warehouse))
    run_id = args.run_id or new_run_id()
    reports: list[RunReport] = []
    printed = 0
    with ExitStack() as held:
        held.enter_context(_full_file_system_named(warehouse.root))
        try:
            # the session first: a backend that cannot run is refused before the lease
            # creates anything in the warehouse
            spark = (spark_factory or build_session)("sharestate", master=args.master,
                                                     conf=conf, lean_driver=True)
            held.enter_context(warehouse_lease(
                warehouse.root, run=run_id, wait=args.lease_wait,
                what=f"job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)}"))
        except (LeaseError, SettingError) as exc:
            raise ArgumentError(str(exc)) from None
        kernels = None
        if {"ingest", "replay"} & set(jobs):  # the jobs whose executors do the work
            kernels, modules = executor_kernels(spark)
            more = f" and {len(modules) - 1} more" if len(modules) > 1 else ""
            print(f"executors {kernels}: sharestate from {modules[0]}{more}")
            warn_if_pure(kernels)
        # ingest followed by decode is one pass: ingest writes the silver tables as well
        fused = "ingest" in jobs and "decode" in jobs
        for job in jobs:
            announced = (nullcontext() if job == "decode" and fused  # ingest decodes
                         else console.phase("quality gate" if job == QUALITY else job))
            with announced:
                if job == "ingest":
                    with _reader_failure_named():
                        reports.append(ingest(
                            spark, warehouse, args.source, segments=segments,
                            run_id=run_id, full=args.full,
                            kafka_options=kafka_options, connect_timeout=args.connect_timeout,
                            silver=fused,
                            limits=ReadLimits(max_batch_records=args.max_batch_records,
                                              max_findings=args.max_findings),
                            executors=kernels))
                elif job == "decode":
                    if not fused:
                        reports.append(decode(spark, warehouse, run_id=run_id,
                                              only_run=args.run_id))
                elif job == "replay":
                    reports.append(replay(spark, warehouse, run_id=run_id, options=gold,
                                          executors=kernels, full=args.full))
                elif job == QUALITY:
                    from sharestate.spark.quality_job import quality_job

                    reports.append(quality_job(spark, warehouse, run_id=run_id,
                                               delivery_limit=args.delivery_limit))
                else:
                    try:
                        reports.append(analytics(spark, warehouse, run_id=run_id,
                                                 inputs=inputs))
                    except EndOffsetsUnavailable as exc:
                        raise SourceUnavailable(str(exc)) from None
                    except EndOffsetSourceError as exc:
                        raise ArgumentError(str(exc)) from None
            if len(reports) > printed:  # its line as soon as the job is done
                _print_report(reports[-1])
                printed = len(reports)
    print(f"tables in {warehouse.root.resolve()} (run {run_id})")
    return exit_codes.FINDINGS if any(r.findings for r in reports) else exit_codes.OK


@contextmanager
def _full_file_system_named(warehouse: Path) -> Iterator[None]:
    """A write that found its file system full ends the run with one line saying which one
    is full (ArgumentError, exit 2). Every table write is one Delta commit, so the tables
    hold only whole commits, and a run started again after space is freed completes the
    work (ingest replaces what it wrote for a segment it had not recorded as read)."""
    try:
        yield
    except Exception as exc:
        if not out_of_space(exc):
            raise
        made = next(p for p in (warehouse, *warehouse.parents) if p.exists())
        free = shutil.disk_usage(made).free
        where = (f"the warehouse's file system ({warehouse}) is full ({free >> 10} KiB free)"
                 if free < FULL_BYTES else
                 f"a file system the run writes to is full (the warehouse's has {free >> 20} "
                 f"MiB free: Spark's local directories? spark.local.dir, default "
                 f"{tempfile.gettempdir()})")
        raise ArgumentError(f"no space left on device: {where}; the tables hold only whole "
                            "commits: free space and run again, and the re-run completes the "
                            "work") from None


READER_FAILED = re.compile(
    r"\b(KafkaSourceError|ClusterNotReady|ClusterUnreachable|ClusterRefused): (.+)")
"""A live source's reader failing in an executor, as the Spark error carrying its
traceback states it: the error's class and message."""
PASSING = frozenset({"ClusterNotReady", "ClusterUnreachable"})
"""The reader's errors that may pass (`sharestate.cluster.kafka_plan.ClusterNotReady`)."""


@contextmanager
def _reader_failure_named() -> Iterator[None]:
    """A live source's reader that failed in an executor ends the run with its one line,
    not as a bug: SourceUnavailable (exit 75) when the cluster went away or was not ready,
    else SourceError (exit 2: a read refused, a range cut short)."""
    try:
        yield
    except SourceError:
        raise
    except Exception as exc:
        said = READER_FAILED.findall(str(exc))
        if not said:
            raise
        kind, message = said[-1]
        raise (SourceUnavailable if kind in PASSING else SourceError)(message.strip()) from None


def _print_report(report: RunReport) -> None:
    counts = ", ".join(f"{name} {rows}" for name, rows in report.rows.items())
    print(f"{report.job:<9} {report.seconds:6.1f}s  {counts or 'nothing new'}"
          + (f"  ({report.findings} findings)" if report.findings else ""), flush=True)
    for note in report.notes:
        print(note, file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None, jobs: Sequence[str] = JOBS) -> int:
    """Entry point for `spark-submit pipelines/<job>.py`."""
    try:
        args = parser("run_all" if len(jobs) > 1 else jobs[0]).parse_args(argv)
        return run(args, jobs)
    except SourceUnavailable as exc:
        return exit_codes.unavailable(exc)
    except (ArgumentError, SourceError) as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except Exception as exc:  # anything else is a bug: its own status, not "findings"
        return exit_codes.internal_error(exc)


if __name__ == "__main__":
    sys.exit(main())
