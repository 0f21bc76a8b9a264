"""`sharestate report`: one self-contained HTML page, rendered in headless Chromium.

A small simulated cluster goes through the pipeline (with its end offsets now and its data
topics' segments, so exact lag shows now and over time) and the quality gate; the page is
rendered in Chromium (Debian's `chromium` and `chromium-driver`, driven by selenium),
checked for console errors and charts, and a screenshot is written next to it (`report.png`
in the test's temporary folder, printed).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import SimulatedWarehouse

from sharestate.app.cli import main as cli
from sharestate.app.report.data import QUERIES, ReportData
from sharestate.app.report.page import render
from sharestate.quality import load_config
from sharestate.spark.jobs.warehouse import Warehouse
from sharestate.spark.quality_job import quality

pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--window-size=1440,1000")
CHARTS = 5


@pytest.fixture(scope="module")
def warehouse(spark: Any, simulated_warehouse: SimulatedWarehouse) -> Path:
    """The simulated warehouse (exact end offsets now and through time, an orphan warning)
    with quality-gate results."""
    root = simulated_warehouse.warehouse
    # The gate's results for two suites (the whole gate runs in test_quality_gate.py).
    quality(spark, Warehouse(root), run_id="gate", config=load_config(),
            tables=["audit_findings", "share_group_lag"], docs=False)
    return root


@pytest.fixture(scope="module")
def page(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, written by the command."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert cli(["report", "--warehouse", str(warehouse), "--out", str(out)]) == 0
    return out


def test_report_command_writes_a_self_contained_page(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert len(text) > 3_000_000  # plotly.js is inlined
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"https?:", text)
    assert text.count('class="plotly-graph-div"') == CHARTS
    assert "quality gate passed (1 warning)" in text
    assert "lag now exact, and over time" in text
    assert 'id="quality"' in text and "sharestate_quality" not in text
    assert "inputs covered: <span><b>__consumer_offsets</b>" in text
    assert "orphaned_state" in text and "Needs attention" in text


def test_both_lag_panels_rank_the_groups_alike(spark: Any, warehouse: Path) -> None:
    """Over time the lag is exact (the data topics' segments), so its last point ranks the
    groups as the lag now does (it was a lower bound whose ranking could be reversed)."""
    from sharestate.app.report.charts import group_colors, lag_over_time
    from sharestate.app.report.data import load

    frames = load(spark, str(warehouse)).frames
    series, current = frames["lag_over_time"], frames["current_lag"]
    assert series["exact"].astype(bool).all()
    figure = lag_over_time(series, current, group_colors(current["group_id"]))
    assert figure is not None
    last = {t.name: t.y[-1] for t in figure.data if t.type == "scatter"}
    (bars,) = [t for t in figure.data if t.type == "bar"]
    now = dict(zip(bars.x, bars.y, strict=True))
    assert sorted(last, key=last.__getitem__) == sorted(now, key=now.__getitem__)


def test_report_without_tables_exits_2(tmp_path: Path) -> None:
    assert cli(["report", "--warehouse", str(tmp_path), "--out", str(tmp_path / "r.html")]) == 2


def test_empty_warehouse_renders_placeholders() -> None:
    data = ReportData("/nowhere", 0, frames={name: pd.DataFrame() for name in QUERIES},
                      counts={"share-partitions": None}, missing={"redelivery"})
    page = render(data)
    assert "No data in this warehouse." in page and "quality gate not run" in page
    assert 'class="plotly-graph-div"' not in page


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def test_page_renders_in_chromium(page: Path, tmp_path: Path) -> None:
    paths = _chromium()
    if paths is None:
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are missing (.ci/run installs them)")
        pytest.skip("needs Debian's chromium and chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(dir=tmp_path)}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    try:
        browser.get(page.resolve().as_uri())
        counts = browser.execute_script("""
            return {ages: [...document.querySelectorAll('[data-since]')].map(
                        e => e.textContent),
                    charts: document.querySelectorAll('.plotly-graph-div').length,
                    drawn: document.querySelectorAll('.plotly-graph-div .main-svg').length,
                    marks: document.querySelectorAll(
                        '.plotly-graph-div .trace path, .plotly-graph-div .point path').length,
                    badges: [...document.querySelectorAll('.badge')].map(
                        b => b.className + ':' + b.textContent),
                    height: document.body.scrollHeight}""")
        # the lag chart as drawn (plotly's full data: a bar's values arrive base64-encoded,
        # decoded there into a typed array): each group's last point over time, its bar now
        drawn_lag = browser.execute_script("""
            const chart = document.querySelectorAll('.plotly-graph-div')[0];
            const last = {}, now = {};
            chart._fullData.filter(t => t.type === 'scatter' && t.fill !== 'tozeroy')
                .forEach(t => { const y = Array.from(t.y); last[t.name] = y[y.length - 1]; });
            const bars = chart._fullData.find(t => t.type === 'bar');
            Array.from(bars.x).forEach((g, i) => { now[g] = Array.from(bars.y)[i]; });
            return {last: last, now: now};""")
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        browser.set_window_size(1440, int(counts["height"]) + 40)
        screenshot = page.with_suffix(".png")
        assert browser.save_screenshot(str(screenshot))
    finally:
        browser.quit()
    print(f"screenshot: {screenshot}")
    assert errors == []
    # "(… ago)" is computed where the page is opened, not frozen when it was written
    assert counts["ages"] and all(re.fullmatch(r"\(\d+ (s|min|h|d) ago\)", age)
                                  for age in counts["ages"]), counts["ages"]
    assert counts["charts"] == CHARTS
    assert counts["drawn"] >= CHARTS and counts["marks"] > 20
    assert "badge green:no errors" in counts["badges"]
    last, now = drawn_lag["last"], drawn_lag["now"]
    assert len(last) == 2 and set(last) == set(now)
    assert sorted(last, key=last.__getitem__) == sorted(now, key=now.__getitem__)
    assert any(b.startswith("badge amber:") and "warning" in b for b in counts["badges"])
    assert screenshot.stat().st_size > 50_000


def test_failed_gate_turns_the_quality_badge_red() -> None:
    frames = {name: pd.DataFrame() for name in QUERIES}
    frames["quality"] = pd.DataFrame([
        {"run_id": "r", "run_at": 0, "suite": "share_group_lag", "check": "keys_unique",
         "severity": "error", "success": False, "blocking": True, "unexpected": 2, "rows": 9,
         "description": "One row per share-partition.", "docs_index": None,
         "outcome": "failed"},
        {"run_id": "r", "run_at": 0, "suite": "share_group_lag", "check": "lag_non_negative",
         "severity": "error", "success": True, "blocking": False, "unexpected": 0, "rows": 9,
         "description": "Lag is >= 0.", "docs_index": None, "outcome": "passed"}])
    page = render(ReportData("/wh", 0, frames=frames))
    assert '<span class="badge red">quality gate failed (1 blocking)</span>' in page
    assert "Failed quality checks" in page and "keys_unique" in page
    assert '<span class="sev error">failed</span>' in page


def _frames(**given: pd.DataFrame) -> dict[str, pd.DataFrame]:
    frames = {name: pd.DataFrame() for name in QUERIES}
    frames.update(given)
    return frames


def _series(group: str, lags: list[int], lower: list[bool]) -> pd.DataFrame:
    return pd.DataFrame({"group_id": [group] * len(lags),
                         "time_ms": [1_000 * (i + 1) for i in range(len(lags))], "lag": lags,
                         "exact": [not flag for flag in lower], "lower_bound": lower,
                         "partitions": [3] * len(lags)})


def test_lag_over_time_hatches_only_the_lower_bound_stretches() -> None:
    from sharestate.app.report.charts import group_colors, lag_over_time

    series = pd.concat([_series("g1", [12, 40, 25, 30, 31], [False, True, True, False, False]),
                        _series("g2", [3, 7, 9], [False, False, False])])
    current = pd.DataFrame({"group_id": ["g1", "g2"], "lag": [1_200_000, 35],
                            "time_ms": [3_000, 3_000], "lower_bound": [False, True],
                            "partitions": [3, 3]})
    colors = group_colors(series["group_id"], current["group_id"])
    figure = lag_over_time(series, current, colors)
    assert figure is not None
    lines = [t for t in figure.data if t.type == "scatter" and t.fill != "tozeroy"]
    hatched = [t for t in figure.data if t.type == "scatter" and t.fill == "tozeroy"]
    assert [t.name for t in lines] == ["g1", "g2"]
    # one hatched stretch: g1's two lower-bound points, from the exact point before them
    assert [(t.name, list(t.y)) for t in hatched] == [("g1 (lower bound)", [12, 40, 25])]
    assert hatched[0].fillpattern.shape == "/"
    (now,) = [t for t in figure.data if t.type == "bar"]
    assert list(now.text) == ["1,200,000", "≥ 35"]  # the lower bound is marked as one
    assert list(now.marker.pattern.shape) == ["", "/"]
    assert [t.line.color for t in lines] == list(now.marker.color)  # one colour per group
    assert {t.yaxis for t in lines} == {"y"} and now.yaxis == "y2"


def test_lag_badge_never_calls_a_lower_bound_exact() -> None:
    current = pd.DataFrame({"group_id": ["g1", "g2"], "lag": [5, 7], "time_ms": [0, 0],
                            "lower_bound": [False, False], "partitions": [1, 1]})
    exact = _series("g1", [1, 2], [False, False])
    page = render(ReportData("/wh", 0, frames=_frames(current_lag=current,
                                                      lag_over_time=exact)))
    assert "lag now exact, and over time" in page
    mixed = current.assign(lower_bound=[False, True])
    partly = _series("g1", [1, 2, 3], [False, True, False])
    page = render(ReportData("/wh", 0, frames=_frames(current_lag=mixed,
                                                      lag_over_time=partly)))
    assert "lag now exact for 1 of 2 groups; over time exact but 1 of 3 points (hatched)" \
        in page
    bound = _series("g1", [1], [True])
    page = render(ReportData("/wh", 0, frames=_frames(current_lag=mixed.assign(
        lower_bound=[True, True]), lag_over_time=bound)))
    assert "lag now a lower bound; over time a lower bound" in page


def test_delivery_counts_are_on_a_log_scale() -> None:
    from sharestate.app.report.charts import delivery_histogram

    counts = pd.DataFrame({"delivery_count": [1, 1, 3, 5], "delivery_state": [0, 2, 0, 4],
                           "records": [90_000, 5_000, 4, 2]})
    figure = delivery_histogram(counts)
    assert figure is not None and figure.layout.yaxis.type == "log"
    assert figure.layout.barmode == "group"  # stacked bars on a log axis would mislead


def test_offset_history_is_one_panel_per_group_with_aborted_marks() -> None:
    from sharestate.app.report.charts import group_colors, offset_history

    rows = []
    for number in range(12):
        group = f"cg-{number:02d}"
        for partition in (0, 1):
            rows += [{"group_id": group, "topic": "t", "partition": partition,
                      "record_offset": i, "event": "applied", "committed_offset": 10 * i,
                      "time_ms": 1_000 * i, "txn_outcome": None} for i in range(3)]
    rows.append({"group_id": "cg-03", "topic": "t", "partition": 0, "record_offset": 9,
                 "event": "aborted", "committed_offset": 99, "time_ms": 9_000,
                 "txn_outcome": "ABORT"})
    offsets = pd.DataFrame(rows)
    colors = group_colors(offsets["group_id"])
    figure = offset_history(offsets, colors, 14)
    assert figure is not None
    titles = [a.text for a in figure.layout.annotations]
    assert titles[:12] == [f"cg-{n:02d}" for n in range(12)] and "and 2 more groups" in titles
    (aborted,) = [t for t in figure.data if t.name == "aborted transactional commit"]
    assert list(aborted.y) == [99] and aborted.marker.symbol == "x"
    assert aborted.xaxis == "x4"  # in cg-03's panel
    lines = [t for t in figure.data if t.name.startswith("cg-03")]
    assert len(lines) == 2 and {t.line.color for t in lines} == {colors["cg-03"]}


def test_age_is_not_frozen_into_the_page() -> None:
    last = pd.DataFrame({"ingest_run": ["r1"], "finished_at": [1_700_000_000_000]})
    page = render(ReportData("/wh", 1_700_000_032_000, frames=_frames(last_run=last)))
    assert "(32 s ago)" not in page
    assert ('<span class="ago" data-since="1700000000000">(32 s before this report was '
            "generated)</span>") in page
    assert "Date.now() - Number(el.dataset.since)" in page


def test_quality_section_is_complete_and_offline() -> None:
    """Every check of the latest run with its examples, in the page (no network): GE's Data
    Docs load their styles and scripts from CDNs, so they are only a secondary link."""
    quality_rows = pd.DataFrame([
        {"run_id": "r", "run_at": 0, "suite": "share_group_lag", "check": "lag_non_negative",
         "severity": "error", "success": False, "blocking": True, "unexpected": 1, "rows": 9,
         "description": "Lag is >= 0.", "docs_index": "/wh/_docs/quality/index.html",
         "sample_json": '[{"group_id": "g1", "lag": -4}]', "outcome": "failed"},
        {"run_id": "r", "run_at": 0, "suite": "audit_findings", "check": "rules_known",
         "severity": "warning", "success": True, "blocking": False, "unexpected": 0,
         "rows": 20, "description": "Known rules only.", "docs_index": "/wh/_docs/quality/"
         "index.html", "sample_json": "[]", "outcome": "passed"}])
    page = render(ReportData("/wh", 0, frames=_frames(quality=quality_rows)))
    section = page[page.index('<section class="card wide" id="quality">'):]
    section = section[:section.index("</section>")]
    assert "lag_non_negative" in section and "rules_known" in section
    assert "&quot;lag&quot;: -4" in section
    assert "need network access" in section
    assert '<a href="#quality">' in page  # "Needs attention" points at it


TOP = (1 << 63) - 1
"""int64's largest value: CRC-valid records of a damaged writer can hold it."""


def test_values_at_int64s_ends_still_give_a_page(spark: Any) -> None:
    """A warehouse of states and commits with offsets and timestamps at int64's ends: the
    queries' sums and differences overflowed (ARITHMETIC_OVERFLOW), an unknown lag failed
    int(NaN) and such a time failed pandas and datetime, each exit 70. Now an overflowing
    figure is null and shows as "?", such a time as its milliseconds."""
    views = {
        "share_group_lag": ("group_id string, lag bigint, as_of_timestamp bigint, "
                            "lag_is_lower_bound boolean, topic string, topic_id string, "
                            "partition int", [("g", TOP, TOP, False, "t", "id", 0),
                                              ("g", TOP, -TOP - 1, False, "t", "id", 1)]),
        "share_partition_state": (
            "start_offset bigint, state_batches array<struct<first_offset: bigint, "
            "last_offset: bigint, delivery_state: int, delivery_count: int>>",
            [(-TOP - 1, [(-TOP - 1, TOP, 0, 1)])]),
        "redelivery": ("group_id string, topic_id string, partition int, records bigint, "
                       "delivery_count int, delivery_state int, poison boolean",
                       [("g", "id", 0, TOP, 2, 4, True), ("g", "id", 0, TOP, 3, 4, True)]),
        "share_group_lag_history": (
            "group_id string, time bigint, lag bigint, exact boolean, "
            "lag_is_lower_bound boolean, partitions int, scope string",
            [("g", -TOP - 1, 1, True, False, 1, "group"), ("g", TOP, 2, True, False, 1,
                                                             "group")])}
    for name, (schema, rows) in views.items():
        spark.createDataFrame(rows, schema).createOrReplaceTempView(name)
    try:
        frames = _frames(**{name: spark.sql(QUERIES[name]).toPandas() for name in (
            "current_lag", "delivery_counts", "hot_spots", "lag_over_time")})
    finally:
        for name in views:
            spark.catalog.dropTempView(name)
    assert frames["current_lag"]["lag"].isna().all()
    frames["offsets"] = pd.DataFrame([{
        "group_id": "cg", "topic": "t", "partition": 0, "record_offset": 0, "event": "applied",
        "committed_offset": 1, "time_ms": TOP, "txn_outcome": None, "commits": 1}])
    frames["last_run"] = pd.DataFrame({"ingest_run": ["r"], "finished_at": [-TOP - 1]})
    page = render(ReportData("/wh", 0, frames=frames))
    assert f"{-TOP - 1} ms" in page
