"""Run the suites with Great Expectations on Spark and collect one result per check.

    result = run_gate(spark, "/lake/sharestate", load_config(), run_id="r1",
                      docs_dir=Path("/lake/sharestate/_docs/quality"))
    result.failed()        # checks at or above config.fail_on that did not pass

Each suite's frame is built from the warehouse's Delta tables (through `open_lake`),
cached while its expectations run, and validated by a Spark data source of an ephemeral
GE context. A table that does not exist fails that suite's `table_exists` check. With
`docs_dir` (absolute: GE refuses a relative one; the commands resolve paths where they
enter), GE's Data Docs (HTML) for this run are written there, replacing older ones.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sharestate.quality.config import QualityConfig, Severity
from sharestate.quality.suites import Check, Suite, suites

if TYPE_CHECKING:
    from great_expectations.core import ExpectationValidationResult
    from great_expectations.data_context import AbstractDataContext
    from pyspark.sql import DataFrame, SparkSession

SAMPLE_SIZE = 5
DOCS_SITE = "sharestate_quality"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check in one run."""

    suite: str
    suite_version: str
    suite_fingerprint: str
    table: str
    table_version: int | None
    check: str
    family: str
    severity: Severity
    expectation_type: str
    description: str
    success: bool
    rows: int | None = None
    """Rows of the validated frame."""
    unexpected: int | None = None
    unexpected_percent: float | None = None
    sample: list[Any] = field(default_factory=list)
    exception: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def qualified_name(self) -> str:
        """`suite:check`, how findings and summaries name the check."""
        return f"{self.suite}:{self.check}"

    def summary(self) -> str:
        """One line: what failed, how many rows, an example."""
        if self.exception:
            return f"{self.qualified_name} could not run: {self.exception}"
        counts = ("" if self.unexpected is None else
                  f" {self.unexpected} of {self.rows} rows")
        example = (f"; e.g. {json.dumps(self.sample[0], default=str, ensure_ascii=False)}"
                   if self.sample else "")
        return f"{self.qualified_name} failed:{counts} ({self.description}){example}"


@dataclass
class GateResult:
    """Every check's outcome in a run, and whether the gate holds."""

    run_id: str
    started_ms: int
    config: QualityConfig
    results: list[CheckResult]
    docs_index: Path | None = None

    def failed(self, fail_on: Severity | None = None) -> list[CheckResult]:
        """Failed checks that count at `fail_on` (default: the config's)."""
        level = fail_on or self.config.fail_on
        counted = ("error",) if level == "error" else ("error", "warning")
        return [r for r in self.results if not r.success and r.severity in counted]

    @property
    def passed(self) -> bool:
        return not self.failed()


def run_gate(spark: SparkSession, warehouse: str | Path, config: QualityConfig, *,
             run_id: str, tables: Sequence[str] | None = None,
             docs_dir: Path | None = None, today: dt.date | None = None) -> GateResult:
    """Validate the warehouse's gold tables (only `tables`, when given) with every suite."""
    from sharestate.lake import open_lake

    started = int(time.time() * 1000)
    today = today or dt.datetime.now(dt.UTC).date()
    lake = open_lake(spark)
    root = Path(warehouse)

    def read(name: str) -> DataFrame:
        return lake.read(root / name)

    context = _context(docs_dir)
    # the gate caches each frame itself: without persist=False, GX caches it again per run
    source = context.data_sources.add_spark("sharestate", persist=False)
    results: list[CheckResult] = []
    for suite in suites(config):
        if tables is not None and suite.table not in tables:
            continue
        path = root / suite.table
        if not lake.exists(path):
            results.append(_missing(suite))
            continue
        version = lake.version(path)
        frame = suite.frame(read, config, today).persist()
        try:
            rows = frame.count()
            outcomes = _validate(context, source, suite, frame, suite.checks)
            failed = [c for c in suite.checks if not outcomes[c.name].success]
            if failed:  # again, with counts and samples, only what failed
                outcomes.update(_validate(context, source, suite, frame, failed, detail=True))
        finally:
            frame.unpersist()
        results.extend(_result(suite, version, rows, check, outcomes[check.name])
                       for check in suite.checks)
    docs_index = _build_docs(context, docs_dir) if docs_dir is not None else None
    return GateResult(run_id, started, config, results, docs_index)


def _context(docs_dir: Path | None) -> AbstractDataContext:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    logging.getLogger("great_expectations").setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False,
                                                         metric_calculations=False)
    if docs_dir is not None:
        context.add_data_docs_site(site_name=DOCS_SITE, site_config={
            "class_name": "SiteBuilder",
            "store_backend": {"class_name": "TupleFilesystemStoreBackend",
                              "base_directory": str(docs_dir)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
    return context


def _validate(context: AbstractDataContext, source: Any, suite: Suite, frame: DataFrame,
              checks: Sequence[Check], *, detail: bool = False
              ) -> dict[str, ExpectationValidationResult]:
    """Validate `frame` with `checks`: pass/fail only, or (`detail`) with counts and samples."""
    import great_expectations as gx

    name = suite.name + (".failures" if detail else "")
    asset = source.add_dataframe_asset(name)
    batch = asset.add_batch_definition_whole_dataframe("whole")
    gx_suite = context.suites.add(gx.ExpectationSuite(
        name=name, expectations=[c.expectation.copy(update={"id": None}) for c in checks],
        meta={"sharestate_suite_version": suite.version,
              "sharestate_fingerprint": suite.fingerprint(), "table": suite.table}))
    definition = context.validation_definitions.add(
        gx.ValidationDefinition(name=name, data=batch, suite=gx_suite))
    result_format: dict[str, Any] = {"result_format": "BOOLEAN_ONLY"}
    if detail:
        result_format = {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_SIZE,
                         "unexpected_index_column_names":
                             [c for c in suite.index_columns if c in frame.columns]}
    outcome = definition.run(batch_parameters={"dataframe": frame},
                             result_format=result_format)
    return {_check_name(r): r for r in outcome.results}


def _check_name(outcome: ExpectationValidationResult) -> str:
    config = outcome.expectation_config
    return str((config.meta or {}).get("check")) if config is not None else ""


def _result(suite: Suite, version: int, rows: int, check: Check,
            outcome: ExpectationValidationResult) -> CheckResult:
    details = outcome.result or {}
    exception = None
    if outcome.exception_info and outcome.exception_info.get("raised_exception"):
        exception = str(outcome.exception_info.get("exception_message"))
    sample = details.get("partial_unexpected_index_list") \
        or details.get("partial_unexpected_list") or []
    success = bool(outcome.success)
    return CheckResult(
        suite=suite.name, suite_version=suite.version, suite_fingerprint=suite.fingerprint(),
        table=suite.table, table_version=version, check=check.name, family=check.family,
        severity=check.severity, expectation_type=check.expectation.expectation_type,
        description=check.description, success=success, rows=rows,
        unexpected=0 if success else details.get("unexpected_count"),
        unexpected_percent=0.0 if success else details.get("unexpected_percent"),
        sample=_jsonable(list(sample)[:SAMPLE_SIZE]), exception=exception,
        kwargs=_jsonable(check.configuration()["kwargs"]))


def _missing(suite: Suite) -> CheckResult:
    return CheckResult(
        suite=suite.name, suite_version=suite.version, suite_fingerprint=suite.fingerprint(),
        table=suite.table, table_version=None, check="table_exists", family="tables",
        severity="error", expectation_type="table_exists",
        description=f"The table {suite.table} exists.", success=False)


def _jsonable(value: Any) -> Any:
    """`value` through JSON (numpy scalars, conditions and the like become plain values)."""
    return json.loads(json.dumps(value, default=_plain, sort_keys=True))


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _build_docs(context: AbstractDataContext, docs_dir: Path) -> Path:
    if docs_dir.exists():
        shutil.rmtree(docs_dir)
    docs_dir.mkdir(parents=True)
    context.build_data_docs(site_names=[DOCS_SITE])
    return docs_dir / "index.html"
