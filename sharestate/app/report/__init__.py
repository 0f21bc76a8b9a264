"""`sharestate report`: one self-contained HTML page about a warehouse.

    write_report("warehouse", "report.html")

The page has a header (when the pipeline last ran, red/amber/green badges for audit
findings, the quality gate and decode errors), counts, what needs attention, plotly charts
(lag over time per share group, delivery-count histogram, redelivery hot spots, the prune
frontier per state partition with what holds it back, consumer-group offset history) and
tables (audit findings, inputs covered from `ingest_runs`, prune recommendations, the
latest quality-gate results). plotly.js is inlined: the page needs no network.

- `data`: the Spark SQL queries, reduced to small pandas frames;
- `charts`: the plotly figures;
- `page`: the HTML.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class ReportError(Exception):
    """The warehouse cannot be reported on (no tables, a damaged one) or the page cannot be
    written."""


class Written(NamedTuple):
    """A written report: its page, the header's verdicts (badge texts) and its counts."""

    path: Path
    verdicts: list[str]
    counts: dict[str, int | None]


def write_report(warehouse: str | Path, out: str | Path, *, backend: str | None = None,
                 spark: SparkSession | None = None, verbose: bool = False) -> Written:
    """Render the report of `warehouse` into `out`. A session it starts itself shows
    Spark's console output only when `verbose`."""
    from sharestate.app.report.data import load
    from sharestate.app.report.page import render, verdicts
    from sharestate.lake import find_tables
    from sharestate.lake.integrity import DamagedTable, check_warehouse

    if not find_tables(warehouse):
        raise ReportError(f"no Delta tables under {warehouse}")
    try:
        check_warehouse(warehouse)
    except DamagedTable as exc:
        raise ReportError(str(exc)) from None
    if spark is None:
        from sharestate.arguments import BACKEND_CONF, VERBOSE_CONF
        from sharestate.spark.session import SettingError, build_session

        conf = {BACKEND_CONF: backend} if backend else {}
        if verbose:
            conf[VERBOSE_CONF] = "true"
        try:
            spark = build_session("sharestate-report", ui=False, conf=conf)
        except SettingError as exc:
            raise ReportError(str(exc)) from None
    data = load(spark, str(Path(warehouse).resolve()))
    page = render(data)
    target = Path(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {target}: {exc.strerror}") from None
    return Written(target, [text for _, text in verdicts(data)], data.counts)
