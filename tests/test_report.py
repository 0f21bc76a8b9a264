"""`sharestate report`: one self-contained HTML page, rendered in headless Chromium.

A small simulated cluster goes through the pipeline (with a file of end offsets, so exact
lag shows) and the quality gate; the page is rendered in Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium), checked for console errors and charts, and a
screenshot is written next to it (`report.png` in the test's temporary folder, printed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sharestate.app.cli import main as cli
from sharestate.app.report.data import QUERIES, ReportData
from sharestate.app.report.page import render
from sharestate.lake import open_lake
from sharestate.quality import load_config
from sharestate.simulate import SimulationConfig, simulate
from sharestate.spark.jobs.warehouse import Warehouse
from sharestate.spark.quality_job import quality
from sharestate.spark.run import parser, run

pytestmark = pytest.mark.slow

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--window-size=1440,1000")
CHARTS = 5


@pytest.fixture(scope="module")
def warehouse(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A simulated warehouse with exact end offsets, an orphan warning and gate results."""
    logs = tmp_path_factory.mktemp("logs")
    simulate(SimulationConfig(records=3000, seed=11, groups=2, topics=2, partitions=2,
                              state_partitions=2, offsets_partitions=1, batch_records=8,
                              cold_interval_ms=60_000, orphaned_state=True), logs)
    root = tmp_path_factory.mktemp("warehouse")
    common = ["--warehouse", str(root), "--delivery-limit", "5"]
    assert run(parser().parse_args(["--source", str(logs), *common]),
               ("ingest", "decode", "replay")) in (0, 1)
    ends: dict[tuple[str, int], int] = {}
    for s in open_lake(spark).read(root / "share_partition_state").collect():
        last = max([b["last_offset"] for b in s["state_batches"] or []] + [s["start_offset"]])
        key = (s["topic_id"], s["partition"])  # end offsets are per topic-partition
        ends[key] = max(ends.get(key, 0), last + 40)
    end_file = root.parent / "end-offsets.json"
    end_file.write_text(json.dumps([{"topic": t, "partition": p, "end_offset": e}
                                    for (t, p), e in ends.items()]), encoding="utf-8")
    assert run(parser().parse_args([*common, "--end-offsets", str(end_file)]),
               ("analytics",)) == 1  # the orphan warning is a finding
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
    assert "lag now exact (end offsets given), over time a lower bound" in text
    assert 'id="quality"' in text and "sharestate_quality" not in text
    assert "inputs covered: <span><b>__consumer_offsets</b>" in text
    assert "orphaned_state" in text and "Needs attention" in text


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


def test_lag_history_and_exact_lag_do_not_share_an_axis() -> None:
    """The history is a lower bound of tens of records, the exact lag now 1.2 M: on one axis
    the history was a flat line at zero. Separate panels; what is a lower bound says so."""
    from sharestate.app.report.charts import lag_over_time

    series = pd.DataFrame({"group_id": ["g1"] * 3 + ["g2"] * 3, "bucket": [0, 1, 2] * 2,
                           "time_ms": [1_000, 2_000, 3_000] * 2, "lag": [12, 40, 25, 3, 7, 9],
                           "partitions": [3] * 6})
    current = pd.DataFrame({"group_id": ["g1", "g2"], "lag": [1_200_000, 35],
                            "time_ms": [3_000, 3_000], "lower_bound": [False, True],
                            "partitions": [3, 3]})
    figure = lag_over_time(series, current)
    assert figure is not None
    history = [t for t in figure.data if t.type == "scatter"]
    now = [t for t in figure.data if t.type != "scatter"]
    assert {t.name for t in history} == {"g1 (lower bound)", "g2 (lower bound)"}
    assert {t.yaxis for t in history} == {"y"} and {t.yaxis for t in now} == {"y2"}
    assert list(now[0].text) == ["1,200,000", "≥ 35"]  # the lower bound is marked as one
    layout = figure.layout
    assert "lower bound" in layout.yaxis.title.text or "at least" in layout.yaxis.title.text


def test_lag_badge_never_calls_a_lower_bound_exact() -> None:
    current = pd.DataFrame({"group_id": ["g1", "g2"], "lag": [5, 7], "time_ms": [0, 0],
                            "lower_bound": [False, False], "partitions": [1, 1]})
    page = render(ReportData("/wh", 0, frames=_frames(current_lag=current)))
    assert "lag now exact (end offsets given), over time a lower bound" in page
    assert ">lag exact" not in page
    mixed = current.assign(lower_bound=[False, True])
    page = render(ReportData("/wh", 0, frames=_frames(current_lag=mixed)))
    assert "lag now exact for 1 of 2 groups, else a lower bound" in page


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
