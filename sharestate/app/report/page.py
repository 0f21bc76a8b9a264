"""The report page: one self-contained HTML document (plotly.js inlined, no network)."""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from sharestate.app.report import charts
from sharestate.app.report.data import TOP_GROUPS, ReportData

Formatter = Callable[[Any], str]
Column = tuple[str, str, Formatter]
"""(frame column, header, formatter)."""
DASH, MINUS = "\u2013", "\u2212"
QUALITY_ANCHOR = "quality"

AGES_JS = """
(function () {
  function age(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var units = [["d", 86400], ["h", 3600], ["min", 60]];
    for (var i = 0; i < units.length; i++)
      if (s >= units[i][1]) return Math.floor(s / units[i][1]) + " " + units[i][0];
    return s + " s";
  }
  function update() {
    document.querySelectorAll("[data-since]").forEach(function (el) {
      el.textContent = "(" + age(Date.now() - Number(el.dataset.since)) + " ago)";
    });
  }
  update();
  setInterval(update, 30000);
})();
"""
"""Keeps every "(… ago)" current while the page is open (the page is static HTML)."""

CSS = """
:root { --ink:#1f2933; --muted:#5f6b7a; --line:#e3e8ee; --bg:#f3f5f8; --card:#fff;
        --red:#c92a2a; --red-bg:#ffe3e3; --amber:#a65b00; --amber-bg:#fff1c2;
        --green:#237032; --green-bg:#d8f5dd; --grey:#495057; --grey-bg:#e9ecef; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
       font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif; }
header { background:#17202c; color:#f1f3f5; padding:18px 28px 20px; }
header h1 { margin:0 0 4px; font-size:22px; font-weight:650; letter-spacing:.2px; }
header .meta { color:#adb5bd; font-size:13px; }
header .meta b { color:#e9ecef; font-weight:600; }
.badges { display:flex; flex-wrap:wrap; gap:10px; margin-top:14px; }
.badge { display:inline-flex; align-items:center; gap:8px; padding:6px 12px; border-radius:999px;
         font-weight:600; font-size:13px; }
.badge::before { content:""; width:10px; height:10px; border-radius:50%; background:currentColor; }
.badge.red { color:var(--red); background:var(--red-bg); }
.badge.amber { color:var(--amber); background:var(--amber-bg); }
.badge.green { color:var(--green); background:var(--green-bg); }
.badge.grey { color:var(--grey); background:var(--grey-bg); }
main { padding:20px 28px 40px; max-width:1500px; margin:0 auto; }
.counts { display:grid; grid-template-columns:repeat(auto-fit,minmax(150px,1fr)); gap:12px;
          margin-bottom:18px; }
.count { background:var(--card); border:1px solid var(--line); border-radius:10px;
         padding:12px 14px; }
.count .n { font-size:24px; font-weight:650; font-variant-numeric:tabular-nums; }
.count .l { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.5px; }
.grid { display:grid; grid-template-columns:repeat(2,minmax(0,1fr)); gap:18px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:12px;
        padding:16px 18px; margin-bottom:18px; min-width:0; }
.grid .card { margin-bottom:0; }
.card.wide { grid-column:1 / -1; }
.card h2 { font-size:16px; margin:0 0 2px; }
.card .hint { color:var(--muted); margin:0 0 10px; font-size:12.5px; }
.card.alert { border-left:5px solid var(--red); }
.card.warn { border-left:5px solid #f0a23b; }
.empty { color:var(--muted); font-style:italic; padding:18px 0; }
table { border-collapse:collapse; width:100%; font-size:12.5px; }
th { text-align:left; color:var(--muted); font-weight:600; border-bottom:2px solid var(--line);
     padding:6px 8px; white-space:nowrap; }
td { border-bottom:1px solid var(--line); padding:5px 8px; vertical-align:top; }
td.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
td.nw { white-space:nowrap; }
h3 { font-size:13px; margin:14px 0 6px; color:var(--ink); }
header .inputs { color:#ced4da; font-size:12.5px; margin-top:6px; }
header .inputs span { margin-right:18px; white-space:nowrap; }
tr:hover td { background:#f8f9fb; }
.sev { display:inline-block; padding:1px 8px; border-radius:999px; font-size:11.5px;
       font-weight:600; }
.sev.error { color:var(--red); background:var(--red-bg); }
.sev.warning { color:var(--amber); background:var(--amber-bg); }
.sev.info, .sev.passed { color:var(--green); background:var(--green-bg); }
.scroll { max-height:420px; overflow:auto; }
td code { font-size:11.5px; word-break:break-all; color:var(--grey); }
footer { color:var(--muted); font-size:12px; text-align:center; padding:10px 0 24px; }
@media (max-width: 1000px) { .grid { grid-template-columns:1fr; } }
"""


def render(data: ReportData) -> str:
    """The whole page."""
    from plotly.offline import get_plotlyjs

    body = "\n".join([_header(data), "<main>", _counts(data), _attention(data),
                      _charts(data), _tables(data), "</main>",
                      f"<footer>sharestate report · {html.escape(data.warehouse)}</footer>"])
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>sharestate report · {html.escape(Path(data.warehouse).name)}</title>"
            f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head>"
            f"<body>{body}<script>{AGES_JS}</script></body></html>\n")


# -- header ------------------------------------------------------------------------------


def _header(data: ReportData) -> str:
    last = data.frames["last_run"]
    if last.empty:
        run = "no ingest run recorded"
    else:
        finished = int(last["finished_at"].iloc[0])
        run = (f"last ingest run <b>{html.escape(str(last['ingest_run'].iloc[0]))}</b> "
               f"finished <b>{_time(finished)}</b> {_ago(finished, data.generated_ms)}")
    return (f"<header><h1>sharestate · share-group state report</h1>"
            f"<div class=\"meta\">warehouse <b>{html.escape(data.warehouse)}</b> · {run} · "
            f"generated {_time(data.generated_ms)}</div>{_inputs_line(data)}"
            f"<div class=\"badges\">{''.join(_badges(data))}</div></header>")


def _inputs_line(data: ReportData) -> str:
    inputs = data.frames["inputs"]
    if inputs.empty:
        return "<div class=\"inputs\">no inputs recorded in ingest_runs</div>"
    spans = [f"<span><b>{html.escape(str(r['topic']))}</b>: {_int(r['partitions'])} "
             f"partitions, offsets {_int(r['first_offset'])}{DASH}{_int(r['last_offset'])}, "
             f"{_int(r['records'])} records ({_bytes(r['bytes'])})</span>"
             for r in inputs.to_dict("records")]
    return f"<div class=\"inputs\">inputs covered: {''.join(spans)}</div>"


def verdicts(data: ReportData) -> list[tuple[str, str]]:
    """The header's badges as (colour, text): audit findings by severity, the quality gate,
    decode errors, whether the lag is exact, missing tables (`sharestate demo` prints them
    too)."""
    findings = data.frames["findings"]

    def total(severity: str) -> int:
        if findings.empty:
            return 0
        return int(findings.loc[findings["severity"] == severity, "findings"].sum())

    def plural(n: int, what: str) -> str:
        return f"{n:,} {what}{'s' * (n != 1)}"

    errors, warnings = total("error"), total("warning")
    badges = [("red", plural(errors, "error finding")) if errors else ("green", "no errors"),
              ("amber", plural(warnings, "warning finding")) if warnings
              else ("green", "no warnings")]
    quality = data.frames["quality"]
    if quality.empty:
        badges.append(("grey", "quality gate not run"))
    else:
        blocking = int(quality["blocking"].sum())
        failed = int((~quality["success"].astype(bool)).sum())
        badges.append(("red", f"quality gate failed ({blocking} blocking)") if blocking
                      else ("amber", f"quality gate passed ({plural(failed, 'warning')})")
                      if failed else ("green", "quality gate passed"))
    decode = data.counts.get("decode errors")
    if decode is not None:
        badges.append(("red", plural(decode, "decode error")) if decode
                      else ("green", "no decode errors"))
    lag = _lag_badge(data.frames["lag_over_time"], data.frames["current_lag"])
    if lag is not None:
        badges.append(("grey", lag))
    if data.missing:
        badges.append(("grey", f"{len(data.missing)} tables missing"))
    return badges


def _lag_badge(series: Any, current: Any) -> str | None:
    """How exact the lag shown is: now, and over time (the points drawn)."""
    if current.empty and series.empty:
        return None
    exact_now = int((~current["lower_bound"].astype(bool)).sum()) if not current.empty else 0
    now = ("no lag now" if current.empty else
           "lag now exact" if exact_now == len(current) else
           "lag now a lower bound" if not exact_now else
           f"lag now exact for {exact_now} of {len(current)} groups")
    if series.empty:
        return f"{now}; no lag history"
    lower = int(series["lower_bound"].astype(bool).sum())
    if lower == 0:
        return f"{now}, and over time"
    if lower == len(series):
        return f"{now}; over time a lower bound (no end offsets through time)"
    return f"{now}; over time exact but {lower} of {len(series)} points (hatched)"


def _badges(data: ReportData) -> list[str]:
    return [_badge(color, text) for color, text in verdicts(data)]


def _badge(color: str, text: str) -> str:
    return f"<span class=\"badge {color}\">{html.escape(text)}</span>"


def _counts(data: ReportData) -> str:
    cells = "".join(f"<div class=\"count\"><div class=\"n\">{DASH if n is None else f'{n:,}'}"
                    f"</div><div class=\"l\">{html.escape(label)}</div></div>"
                    for label, n in data.counts.items())
    return f"<div class=\"counts\">{cells}</div>"


# -- sections ----------------------------------------------------------------------------


def _attention(data: ReportData) -> str:
    serious, quality = data.frames["serious_findings"], data.frames["quality"]
    failed = quality[~quality["success"].astype(bool)] if not quality.empty else quality
    if serious.empty and failed.empty:
        return ""
    parts = []
    if not failed.empty:
        parts.append(f"<h3>Failed quality checks <a href=\"#{QUALITY_ANCHOR}\">(all checks and "
                     "examples)</a></h3>")
        parts.append(_table(failed, [
            ("severity", "severity", _severity), ("suite", "suite", str),
            ("check", "check", str), ("unexpected", "rows", _int),
            ("description", "what it means", _wrap)]))
    if not serious.empty:
        parts.append("<h3>Audit findings: errors and warnings</h3>")
        parts.append(_table(serious, [
            ("severity", "severity", _severity), ("rule", "rule", str),
            ("group_id", "group", _text), ("topic", "topic", _text),
            ("partition", "partition", _int), ("share_partition", "share-partition", _int),
            ("offset", "offset", _int), ("message", "message", _wrap)], scroll=True))
    red = (not failed.empty and failed["blocking"].astype(bool).any()) or \
        (serious["severity"] == "error").any()
    return _card("Needs attention", "Failed quality checks and audit findings of severity "
                 "error or warning (first 40).", "".join(parts), css="alert" if red else "warn",
                 wide=True)


def _charts(data: ReportData) -> str:
    f = data.frames
    colors = charts.group_colors(*(f[name].get("group_id", []) for name in (
        "lag_over_time", "current_lag", "offsets")))
    sections = [
        _card("Lag per share group",
              f"Records behind, summed over the group's share-partitions: end offset {MINUS} "
              f"SPSO {MINUS} delivery-complete count, over time (left: at each change of the "
              "group's state or of a sampled end offset, from share_group_lag_history) and "
              "now (right). Exact where the data topics' end offsets at that time are known "
              "(topic_end_offsets), hatched where only a lower bound is. Each panel has its "
              "own scale.",
              _figure(charts.lag_over_time(f["lag_over_time"], f["current_lag"], colors)),
              wide=True),
        _card("Delivery counts of in-flight records",
              "Records at or above the SPSO now, by times delivered and delivery state "
              "(log scale).",
              _figure(charts.delivery_histogram(f["delivery_counts"]))),
        _card("Redelivery hot spots",
              "Share-partitions with the most records delivered more than once, archived, or "
              "archived at the delivery limit (poison).",
              _figure(charts.hot_spots(f["hot_spots"]))),
        _card("Prune frontier per __share_group_state partition",
              "Where the log can be cut (Kafka's lastRedundantOffset), how much further a "
              "cold-partition snapshot of the holding keys would move it, and what must stay.",
              _figure(charts.prune_frontier(f["prune"]))
              + _holding(f["holding"]), wide=True),
        _card("Consumer-group offset history",
              "Committed offset over commit time, one panel per consumer group (the busiest "
              f"{TOP_GROUPS}, their busiest topic-partitions); red crosses mark "
              "transactional commits that were aborted.",
              _figure(charts.offset_history(f["offsets"], colors,
                                            data.counts.get("consumer groups"))), wide=True),
    ]
    return f"<div class=\"grid\">{''.join(sections)}</div><div style=\"height:18px\"></div>"


def _holding(holding: Any) -> str:
    if holding.empty:
        return ""
    return ("<h3 style=\"font-size:13px;margin:14px 0 6px\">What holds the prune point back"
            "</h3>" + _table(holding, [
                ("state_partition", "state partition", _int), ("group_id", "group", str),
                ("topic_id", "topic id", str), ("partition", "partition", _int),
                ("last_snapshot_offset", "oldest needed snapshot at", _int),
                ("write_timestamp", "snapshot written", _time_cell)]))


def _tables(data: ReportData) -> str:
    f = data.frames
    inputs = _table(f["inputs"], [
        ("topic", "topic", str), ("partitions", "partitions", _int),
        ("segments", "segments", _int), ("first_offset", "first offset", _int),
        ("last_offset", "last offset", _int), ("records", "records", _int),
        ("bytes", "bytes", _bytes), ("findings", "findings", _int),
        ("runs", "runs", _int), ("finished_at", "last read", _time_cell)])
    findings = _table(f["findings"], [
        ("severity", "severity", _severity), ("rule", "rule", str),
        ("findings", "findings", _int), ("groups", "groups", _int),
        ("first_offset", "first offset", _int), ("last_offset", "last offset", _int),
        ("example", "example", _wrap)])
    prune = _table(f["prune"], [
        ("state_partition", "partition", _int), ("log_start_offset", "log start", _int),
        ("prune_offset", "prune offset", _int), ("log_end_offset", "log end", _int),
        ("reclaimable_records", "reclaimable records", _int),
        ("reclaimable_bytes", "reclaimable", _bytes),
        ("cold_snapshot_prune_offset", "after cold snapshot", _int),
        ("cold_snapshot_reclaimable_bytes", "then reclaimable", _bytes),
        ("live_keys", "live keys", _int), ("holding_keys", "holding", _int)])
    gate = _quality(f["quality"])
    return "<div class=\"grid\">" + "".join([
        _card("Audit findings", "Every rule that fired, worst first.", findings, wide=True),
        _card("Inputs covered (ingest_runs)", "What the pipeline has read, per topic.", inputs,
              wide=True),
        _card("Prune recommendations", "Per state partition.", prune, wide=True),
        _card("Quality gate (latest run)", "Every Great Expectations check over the gold "
              "tables, failed first, with examples of the rows that failed.", gate, wide=True,
              anchor=QUALITY_ANCHOR),
    ]) + "</div>"


# -- pieces ------------------------------------------------------------------------------


def _quality(quality: Any) -> str:
    """The gate's latest run: every check, failed first, with its sample of failed rows; the
    Data Docs only as a secondary link (their pages load styles and scripts from CDNs)."""
    table = _table(quality, [
        ("outcome", "result", _outcome), ("severity", "severity", str),
        ("suite", "suite", str), ("check", "check", str), ("description", "what", _wrap),
        ("rows", "rows", _int), ("unexpected", "unexpected", _int),
        ("sample_json", "examples", _sample)], scroll=True)
    if quality.empty or not isinstance(quality["docs_index"].iloc[0], str):
        return table
    link = html.escape(Path(quality["docs_index"].iloc[0]).resolve().as_uri())
    return table + (f"<p class=\"hint\">Great Expectations' own Data Docs of this run: "
                    f"<a href=\"{link}\">{link}</a> (they load their styles and scripts from "
                    "public CDNs, so they need network access; this section does not)</p>")


def _sample(value: Any) -> str:
    """A check's sample of failed rows or values (JSON), compact."""
    if _missing(value) or str(value) in ("", "[]", "null"):
        return ""
    return f"<code>{html.escape(str(value)[:400])}</code>"


def _card(title: str, hint: str, content: str, *, css: str = "", wide: bool = False,
          anchor: str | None = None) -> str:
    classes = " ".join(c for c in ("card", css, "wide" if wide else "") if c)
    ident = f" id=\"{anchor}\"" if anchor else ""
    return (f"<section class=\"{classes}\"{ident}><h2>{html.escape(title)}</h2>"
            f"<p class=\"hint\">{html.escape(hint)}</p>{content}</section>")


def _figure(fig: go.Figure | None) -> str:
    if fig is None:
        return "<div class=\"empty\">No data in this warehouse.</div>"
    height = int(fig.layout.height or 340)
    rendered: str = fig.to_html(full_html=False, include_plotlyjs=False,
                                default_width="100%", default_height=f"{height}px",
                                config={"displaylogo": False, "displayModeBar": False,
                                        "responsive": True})
    return rendered


def _table(frame: Any, columns: Sequence[Column], *, scroll: bool = False) -> str:
    if frame.empty:
        return "<div class=\"empty\">Nothing recorded.</div>"
    numeric: set[Formatter] = {_int, _bytes}
    short: set[Formatter] = {_text, _severity, _outcome, _time_cell, str}
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label, _ in columns)
    rows = []
    for record in frame.to_dict("records"):
        cells = "".join(
            f"<td{_cell_class(fmt, numeric, short)}>{fmt(record.get(name))}</td>"
            for name, _, fmt in columns)
        rows.append(f"<tr>{cells}</tr>")
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f"<div class=\"scroll\">{table}</div>" if scroll else table


def _cell_class(fmt: Formatter, numeric: set[Formatter], short: set[Formatter]) -> str:
    if fmt in numeric:
        return " class=num"
    return " class=nw" if fmt in short else ""


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _text(value: Any) -> str:
    return "" if _missing(value) else html.escape(str(value))


def _wrap(value: Any) -> str:
    """Long text: may wrap."""
    return _text(value)


def _int(value: Any) -> str:
    return "" if _missing(value) else f"{int(value):,}"


def _bytes(value: Any) -> str:
    if _missing(value):
        return ""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} TiB"


def _severity(value: Any) -> str:
    text = html.escape(str(value))
    return f"<span class=\"sev {text}\">{text}</span>"


def _outcome(value: Any) -> str:
    css = {"passed": "passed", "failed": "error"}.get(str(value), "warning")
    return f"<span class=\"sev {css}\">{html.escape(str(value))}</span>"


def _time(ms: int) -> str:
    """`ms` as a UTC time; past the years a datetime holds (a damaged timestamp), as ms."""
    try:
        moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    except (ValueError, OverflowError, OSError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _time_cell(value: Any) -> str:
    return "" if _missing(value) else _time(int(value))


def _ago(since_ms: int, generated_ms: int) -> str:
    """How long ago `since_ms` was: the page's script keeps it current wherever the page is
    opened; the text it starts with (and keeps without scripts) says what it is relative to."""
    return (f"<span class=\"ago\" data-since=\"{since_ms}\">({_age(generated_ms - since_ms)} "
            "before this report was generated)</span>")


def _age(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
