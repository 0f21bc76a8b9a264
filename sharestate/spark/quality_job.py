"""The data-quality gate as a job: `spark-submit pipelines/quality.py --warehouse DIR`.

Runs the Great Expectations suites of `sharestate.quality` over the gold tables, appends
one `quality_results` row per check, replaces the `quality_gate` partition of
`audit_findings` with one finding per failed check, and writes GE Data Docs to
`<warehouse>/_docs/quality/` (index.html). `sharestate quality` calls the same code; so
does `run_all` for the job name `quality`.

Exit status (`sharestate.exit_codes`): 0 the gate holds, 1 a check at or above `--fail-on`
failed (error: only error-severity checks count; warning: warnings too), 2 bad arguments or
settings, 3 the gate could not run (an unexpected error while it ran, traceback on stderr):
retry it; 70 an internal error outside the gate (a bug).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from sharestate import arguments, exit_codes
from sharestate.analytics.audit import rules_of
from sharestate.lake.lease import LeaseError, warehouse_lease
from sharestate.locations import location
from sharestate.quality import ConfigError, GateResult, QualityConfig, load_config, run_gate
from sharestate.quality.config import SEVERITIES
from sharestate.quality.records import audit_rows, result_rows
from sharestate.quality.suites import suites

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from sharestate.spark.jobs.warehouse import RunReport, Warehouse

EXIT_PASSED, EXIT_FAILED = exit_codes.OK, exit_codes.FINDINGS
EXIT_USAGE, EXIT_CRASHED = exit_codes.USAGE, exit_codes.QUALITY_NOT_RUN
DOCS = Path("_docs") / "quality"
"""Where the Data Docs go, under the warehouse."""
RESULTS, AUDIT = "quality_results", "audit_findings"


class QualityArgumentError(Exception):
    """A bad argument or settings file: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise QualityArgumentError(message)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The gate's arguments (shared by spark-submit and `sharestate quality`)."""
    p.add_argument("--warehouse", required=True, type=location,
                   help="folder holding the Delta tables")
    p.add_argument("--fail-on", choices=SEVERITIES, default=None,
                   help="fail on error checks only, or on warnings too "
                        "(default: fail_on of the settings file, else error)")
    p.add_argument("--config", metavar="FILE", type=location,
                   help="gate settings (default: $SHARESTATE_QUALITY_CONF or conf/quality.toml)")
    p.add_argument("--acknowledgements", metavar="FILE", type=location,
                   help="accepted decode errors (default: the one the settings name)")
    p.add_argument("--delivery-limit", type=arguments.count, default=None,
                   help="group.share.delivery.count.limit (default: the settings')")
    p.add_argument("--table", action="append", default=None, metavar="NAME",
                   help="validate only this gold table's suites (repeatable)")
    p.add_argument("--no-docs", action="store_true", help="do not build the Data Docs")
    arguments.add_spark_arguments(p)


def settings(args: argparse.Namespace) -> QualityConfig:
    """The gate settings the arguments ask for."""
    try:
        return load_config(args.config, acknowledgements=args.acknowledgements) \
            .with_overrides(fail_on=args.fail_on, delivery_count_limit=args.delivery_limit)
    except ConfigError as exc:
        raise QualityArgumentError(str(exc)) from None


def quality(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
            config: QualityConfig, tables: Sequence[str] | None = None,
            docs: bool = True) -> tuple[RunReport, GateResult]:
    """Run the gate and write its tables; the report counts the failures that block."""
    import great_expectations as gx

    from sharestate.lake import open_lake
    from sharestate.spark.jobs.warehouse import RunReport, rows_table

    started = time.monotonic()
    lake = open_lake(spark)
    for name in (RESULTS, AUDIT):
        warehouse.create(lake, name)
    gate = run_gate(spark, warehouse.root, config, run_id=run_id, tables=tables,
                    docs_dir=warehouse.root / DOCS if docs else None)
    metadata = {"run": run_id, "job": "quality"}
    lake.append(rows_table(result_rows(gate, gx.__version__), RESULTS),
                warehouse.path(RESULTS), metadata=metadata)
    lake.overwrite(rows_table(audit_rows(gate), AUDIT), warehouse.path(AUDIT),
                   partitions=[{"rule": rule} for rule in rules_of("quality")], metadata=metadata)
    report = RunReport("quality", run_id, rows={RESULTS: len(gate.results)},
                       findings=len(gate.failed()))
    report.seconds = time.monotonic() - started
    return report, gate


def quality_job(spark: SparkSession, warehouse: Warehouse, *, run_id: str,
                delivery_limit: int | None = None) -> RunReport:
    """The `quality` job of run_all: default settings, the run's delivery limit."""
    from sharestate.spark.run import ArgumentError

    try:
        config = load_config().with_overrides(delivery_count_limit=delivery_limit)
    except ConfigError as exc:
        raise ArgumentError(str(exc)) from None
    return quality(spark, warehouse, run_id=run_id, config=config)[0]


def summary(gate: GateResult) -> list[str]:
    """What to print: each failed check, then the verdict."""
    blocking = {id(r) for r in gate.failed()}
    lines = [f"{'FAIL' if id(r) in blocking else 'warn'} [{r.severity}] {r.summary()}"
             for r in gate.results if not r.success]
    passed = sum(r.success for r in gate.results)
    verdict = "passed" if gate.passed else "FAILED"
    lines.append(f"quality gate {verdict} (fail on {gate.config.fail_on}): {passed} of "
                 f"{len(gate.results)} checks passed; results in {RESULTS} "
                 f"(run {gate.run_id})")
    if gate.docs_index is not None:
        lines.append(f"data docs: {gate.docs_index} (their styles and scripts come from "
                     "public CDNs; offline, `sharestate report` shows every check)")
    return lines


def run(args: argparse.Namespace, *,
        spark_factory: Callable[..., SparkSession] | None = None) -> int:
    """Run the gate with a session built from `args`; print the summary; exit status."""
    from sharestate.lake import find_tables
    from sharestate.lake.integrity import DamagedTable, check_warehouse
    from sharestate.spark.jobs.warehouse import Warehouse, new_run_id
    from sharestate.spark.session import SettingError, build_session, resolve_conf

    try:
        conf = arguments.spark_settings(args)
    except ValueError as exc:
        raise QualityArgumentError(str(exc)) from None
    config = settings(args)
    known = sorted({suite.table for suite in suites(config)})
    unknown = sorted(set(args.table or ()) - set(known))
    if unknown:
        raise QualityArgumentError(f"no suites for {', '.join(unknown)} "
                                   f"(tables with suites: {', '.join(known)})")
    if not find_tables(args.warehouse):
        raise QualityArgumentError(f"no Delta tables under {args.warehouse}")
    try:
        check_warehouse(args.warehouse)
    except DamagedTable as exc:
        raise QualityArgumentError(str(exc)) from None
    try:
        resolve_conf(conf, master=args.master)  # bad settings: refused before any work
    except SettingError as exc:
        raise QualityArgumentError(str(exc)) from None
    run_id = new_run_id()
    with ExitStack() as held:
        try:
            spark = (spark_factory or build_session)("sharestate-quality",
                                                     master=args.master, conf=conf, ui=False)
            held.enter_context(warehouse_lease(args.warehouse, run=run_id, what="quality gate",
                                               wait=args.lease_wait))
        except (LeaseError, SettingError) as exc:
            raise QualityArgumentError(str(exc)) from None
        try:
            _report, gate = quality(spark, Warehouse(Path(args.warehouse)), run_id=run_id,
                                    config=config, tables=args.table, docs=not args.no_docs)
        except Exception as exc:  # not a verdict on the data: say so with a distinct status
            traceback.print_exc()
            print(f"sharestate: error: the quality gate could not run: {exc}", file=sys.stderr)
            return EXIT_CRASHED
    for line in summary(gate):
        print(line)
    return EXIT_PASSED if gate.passed else EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for `spark-submit pipelines/quality.py`."""
    parser = _Parser(prog="pipelines/quality.py", description="sharestate data-quality gate.")
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except QualityArgumentError as exc:
        print(f"sharestate: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug outside the gate: its own status
        return exit_codes.internal_error(exc)


if __name__ == "__main__":
    sys.exit(main())
