"""The report's plotly figures, one function per chart; None when there is nothing to draw."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

STATE_NAMES = {0: "available", 1: "acquired", 2: "acknowledged", 3: "archiving",
               4: "archived"}
STATE_COLORS = {0: "#5b8def", 1: "#a7c4f9", 2: "#3aa76d", 3: "#f0a23b", 4: "#d64545"}
PALETTE = ["#4c6ef5", "#e8590c", "#2b8a3e", "#ae3ec9", "#1098ad", "#f59f00", "#c92a2a",
           "#5c940d", "#862e9c", "#0b7285", "#d9480f", "#364fc7"]
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def _layout(fig: go.Figure, *, height: int = 340, **settings: Any) -> go.Figure:
    layout: dict[str, Any] = {
        "template": "plotly_white", "height": height, "colorway": PALETTE,
        "font": {"family": FONT, "size": 12, "color": "#1f2933"},
        "margin": {"l": 60, "r": 20, "t": 36, "b": 44},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left",
                   "x": 0},
        "hoverlabel": {"font": {"family": FONT}}}
    layout.update(settings)
    fig.update_layout(**layout)
    return fig


def _times(values: Any) -> Any:
    import pandas as pd

    return pd.to_datetime(values, unit="ms", utc=True)


def lag_over_time(series: Any, current: Any) -> go.Figure | None:
    """Two panels with axes of their own: per group, the lag over time as a lower bound
    (derived from the state alone) and, beside it, the lag now, exact where end offsets
    were given and labelled a lower bound where not. One axis for both would scale the
    history by the exact values (often orders of magnitude larger) and flatten it."""
    if series.empty and current.empty:
        return None
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.09,
                        subplot_titles=("over time: lower bound (from the state)",
                                        "now: exact where end offsets were given"))
    groups = sorted({str(g) for g in series.get("group_id", [])}
                    | {str(g) for g in current.get("group_id", [])})
    colors = {group: PALETTE[number % len(PALETTE)] for number, group in enumerate(groups)}
    history = series.groupby("group_id", sort=True) if not series.empty else []
    for group, rows in history:
        fig.add_trace(go.Scatter(
            x=_times(rows["time_ms"]), y=rows["lag"], name=f"{group} (lower bound)",
            legendgroup=str(group), mode="lines",
            line={"width": 2, "color": colors[str(group)], "shape": "hv"},
            customdata=rows[["partitions"]],
            hovertemplate="%{x|%H:%M:%S}<br>lag ≥ %{y:,}<br>%{customdata[0]} partitions"
                          "<extra>%{fullData.name}</extra>"), row=1, col=1)
    if not current.empty:
        lower = current["lower_bound"].astype(bool)
        kinds = ["lower bound" if flag else "exact" for flag in lower]
        fig.add_trace(go.Bar(
            x=[str(g) for g in current["group_id"]], y=current["lag"], showlegend=False,
            marker={"color": [colors[str(g)] for g in current["group_id"]],
                    "pattern": {"shape": ["/" if flag else "" for flag in lower]}},
            text=[f"≥ {int(v):,}" if flag else f"{int(v):,}"
                  for v, flag in zip(current["lag"], lower, strict=True)],
            textposition="outside", cliponaxis=False, customdata=kinds,
            hovertemplate="%{x}: lag %{y:,} (%{customdata})<extra></extra>"), row=1, col=2)
    fig.update_yaxes(title_text="records behind (at least)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="records behind now", rangemode="tozero", row=1, col=2)
    fig.update_xaxes(type="category", row=1, col=2)
    fig.update_annotations(font={"size": 12, "color": "#5f6b7a"})
    return _layout(fig, hovermode="closest", margin={"l": 60, "r": 20, "t": 56, "b": 44},
                   legend={"orientation": "h", "yanchor": "top", "y": -0.12, "xanchor": "left",
                           "x": 0})


def delivery_histogram(counts: Any) -> go.Figure | None:
    """In-flight records by delivery count, stacked by delivery state."""
    if counts.empty:
        return None
    fig = go.Figure()
    for state, rows in counts.groupby("delivery_state", sort=True):
        fig.add_trace(go.Bar(
            x=rows["delivery_count"].astype(str), y=rows["records"],
            name=STATE_NAMES.get(int(state), str(state)),
            marker_color=STATE_COLORS.get(int(state), "#868e96"),
            hovertemplate="delivered %{x} times: %{y:,} records"
                          "<extra>%{fullData.name}</extra>"))
    highest = max(int(counts["delivery_count"].max()), 5)
    order = [str(n) for n in range(1, highest + 1)]
    return _layout(fig, barmode="stack", yaxis={"title": "records"},
                   xaxis={"title": "delivery count", "type": "category",
                          "categoryorder": "array", "categoryarray": order,
                          "range": [-0.5, highest - 0.5]},
                   legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left",
                           "x": 0, "traceorder": "normal"})


def hot_spots(spots: Any) -> go.Figure | None:
    """Share-partitions with the most redelivered, archived and poison records."""
    if spots.empty:
        return None
    spots = spots.iloc[::-1]
    labels = [f"{g} · {t}-{p}" for g, t, p in
              zip(spots["group_id"], spots["topic"], spots["partition"], strict=True)]
    fig = go.Figure()
    for column, name, color in (("redelivered", "redelivered (count ≥ 2)", "#f0a23b"),
                                ("archived", "archived", "#868e96"),
                                ("poison", "poison (delivery limit)", "#d64545")):
        fig.add_trace(go.Bar(
            y=labels, x=spots[column], name=name, orientation="h", marker_color=color,
            customdata=spots[["max_delivery_count"]],
            hovertemplate="%{x:,} records, max delivery count %{customdata[0]}"
                          "<extra>%{fullData.name}</extra>"))
    return _layout(fig, height=max(260, 34 * len(labels) + 90), barmode="stack",
                   xaxis={"title": "records"}, yaxis={"automargin": True})


def prune_frontier(prune: Any) -> go.Figure | None:
    """Each state partition's log: redundant now, freed by a cold snapshot, still needed."""
    if prune.empty:
        return None
    rows = prune.sort_values("state_partition", ascending=False)
    labels = [f"partition {p}" for p in rows["state_partition"]]
    start = rows["log_start_offset"].fillna(0)
    end = rows["log_end_offset"].fillna(start)
    prune_at = rows["prune_offset"].fillna(start).clip(lower=start)
    cold_at = rows["cold_snapshot_prune_offset"].fillna(prune_at).clip(lower=prune_at)
    fig = go.Figure()
    layers = (("redundant now (below prune offset)", start, prune_at, "#3aa76d"),
              ("freed by a cold-partition snapshot", prune_at, cold_at, "#f0a23b"),
              ("still needed", cold_at, end, "#ced4da"))
    for name, low, high, color in layers:
        fig.add_trace(go.Bar(
            y=labels, x=high - low, base=low, name=name, orientation="h", marker_color=color,
            customdata=list(zip(low, high, strict=True)),
            hovertemplate="offsets %{customdata[0]:,} to %{customdata[1]:,}"
                          "<extra>%{fullData.name}</extra>"))
    notes = [f"prune at {int(p):,} · cold snapshot → {int(c):,} of {int(e):,}"
             for p, c, e in zip(prune_at, cold_at, end, strict=True)]
    fig.add_trace(go.Scatter(y=labels, x=end, mode="text", text=notes,
                             textposition="middle right", showlegend=False,
                             hoverinfo="skip", textfont={"size": 11, "color": "#495057"}))
    widest = float(end.max()) if len(end) else 1.0
    return _layout(fig, height=max(220, 46 * len(labels) + 100), barmode="overlay",
                   xaxis={"title": "state-topic offset", "range": [0, widest * 1.45]},
                   yaxis={"automargin": True})


def offset_history(offsets: Any) -> go.Figure | None:
    """Committed offset over commit time per group and topic-partition (busiest series)."""
    if offsets.empty:
        return None
    fig = go.Figure()
    committed = offsets[offsets["event"].isin(["applied", "committed"])]
    for number, ((group, topic, partition), rows) in enumerate(
            committed.groupby(["group_id", "topic", "partition"], sort=True)):
        fig.add_trace(go.Scatter(
            x=_times(rows["time_ms"]), y=rows["committed_offset"], mode="lines+markers",
            name=f"{group} · {topic}-{partition}", legendgroup=str(group),
            line={"width": 1.6, "shape": "hv", "color": PALETTE[number % len(PALETTE)]},
            marker={"size": 4},
            hovertemplate="%{x|%H:%M:%S.%L}<br>offset %{y:,}<extra>%{fullData.name}</extra>"))
    aborted = offsets[offsets["event"] == "aborted"]
    if not aborted.empty:
        fig.add_trace(go.Scatter(
            x=_times(aborted["time_ms"]), y=aborted["committed_offset"], mode="markers",
            name="aborted transactional commit", marker={"symbol": "x", "size": 9,
                                                         "color": "#d64545"},
            hovertemplate="aborted: offset %{y:,}<extra></extra>"))
    return _layout(fig, height=380, yaxis={"title": "committed offset"},
                   xaxis={"title": None}, legend={"orientation": "v", "x": 1.02, "y": 1,
                                                  "font": {"size": 11}})
