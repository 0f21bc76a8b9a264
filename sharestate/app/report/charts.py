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

    return pd.to_datetime(values, unit="ms", utc=True, errors="coerce")


def group_colors(*groups: Any) -> dict[str, str]:
    """One colour per group id (sorted) of every group the page shows, so a group keeps its
    colour from panel to panel."""
    names = sorted({str(g) for column in groups for g in column})
    return {name: PALETTE[number % len(PALETTE)] for number, name in enumerate(names)}


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """[start, end] index ranges of the consecutive true flags."""
    runs: list[tuple[int, int]] = []
    for index, flag in enumerate(flags):
        if flag and runs and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index)
        elif flag:
            runs.append((index, index))
    return runs


def lag_over_time(series: Any, current: Any, colors: dict[str, str]) -> go.Figure | None:
    """Two panels with axes of their own, each group in its colour: the lag over time
    (`share_group_lag_history`), hatched where it is only a lower bound, and the lag now,
    hatched where that is a lower bound. Exact values share a scale; a lower bound from the
    state alone is often orders of magnitude below them, so the panels keep theirs."""
    if series.empty and current.empty:
        return None
    import pandas as pd
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.72, 0.28], horizontal_spacing=0.09,
                        subplot_titles=("over time (hatched: a lower bound)",
                                        "now (hatched: a lower bound)"))
    history = series.groupby("group_id", sort=True) if not series.empty else []
    for group, rows in history:
        color = colors[str(group)]
        times, lags = _times(rows["time_ms"]), list(rows["lag"])
        lower = [bool(flag) for flag in rows["lower_bound"]]
        kinds = ["at least" if flag else "exact" if ex else "by CreateTime"
                 for flag, ex in zip(lower, rows["exact"], strict=True)]
        fig.add_trace(go.Scatter(
            x=times, y=lags, name=str(group), legendgroup=str(group), mode="lines+markers",
            line={"width": 2, "color": color}, marker={"size": 3, "color": color},
            customdata=list(zip(kinds, rows["partitions"], strict=True)),
            hovertemplate="%{x|%H:%M:%S.%L}<br>lag %{y:,} (%{customdata[0]})<br>"
                          "%{customdata[1]} partitions<extra>%{fullData.name}</extra>"),
            row=1, col=1)
        for first, last in _runs(lower):
            stretch = slice(max(first - 1, 0), last + 1)
            fig.add_trace(go.Scatter(
                x=times[stretch], y=lags[stretch], mode="lines", fill="tozeroy",
                fillpattern={"shape": "/", "fgcolor": color, "bgcolor": "rgba(0,0,0,0)",
                             "solidity": 0.3},
                line={"width": 0, "color": color}, legendgroup=str(group),
                showlegend=False, hoverinfo="skip", name=f"{group} (lower bound)"),
                row=1, col=1)
    if not current.empty:
        lower_now = current["lower_bound"].astype(bool)
        fig.add_trace(go.Bar(
            x=[str(g) for g in current["group_id"]], y=current["lag"], showlegend=False,
            marker={"color": [colors[str(g)] for g in current["group_id"]],
                    "pattern": {"shape": ["/" if flag else "" for flag in lower_now]}},
            text=["?" if pd.isna(v) else f"≥ {int(v):,}" if flag else f"{int(v):,}"
                  for v, flag in zip(current["lag"], lower_now, strict=True)],
            textposition="outside", cliponaxis=False,
            customdata=["lower bound" if flag else "exact" for flag in lower_now],
            hovertemplate="%{x}: lag %{y:,} (%{customdata})<extra></extra>"), row=1, col=2)
    fig.update_yaxes(title_text="records behind", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="records behind now", rangemode="tozero", row=1, col=2)
    fig.update_xaxes(type="category", row=1, col=2)
    fig.update_annotations(font={"size": 12, "color": "#5f6b7a"})
    return _layout(fig, hovermode="closest", margin={"l": 60, "r": 20, "t": 56, "b": 44},
                   legend={"orientation": "h", "yanchor": "top", "y": -0.12, "xanchor": "left",
                           "x": 0})


def delivery_histogram(counts: Any) -> go.Figure | None:
    """In-flight records by delivery count and delivery state, on a log scale: the few
    records delivered 3-5 times show beside the many delivered once."""
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
    return _layout(fig, barmode="group", yaxis={"title": "records (log scale)", "type": "log"},
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


def offset_history(offsets: Any, colors: dict[str, str], groups_in_all: int | None
                   ) -> go.Figure | None:
    """Committed offset over commit time, one panel per consumer group (the busiest ones the
    query kept, its busiest topic-partitions), in the group's colour, then how many groups
    are left out of `groups_in_all`; aborted transactional commits marked with a red cross
    where they were aborted."""
    if offsets.empty:
        return None
    from plotly.subplots import make_subplots

    groups = [str(g) for g in dict.fromkeys(offsets["group_id"])]  # busiest first
    more = (groups_in_all or 0) - len(groups)
    columns = min(3, len(groups))
    rows = -(-len(groups) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=groups,
                        horizontal_spacing=0.06, vertical_spacing=min(0.12, 0.5 / rows))
    dashes = ["solid", "dot", "dash", "dashdot", "longdash", "longdashdot"]
    for number, group in enumerate(groups):
        row, col = number // columns + 1, number % columns + 1
        mine = offsets[offsets["group_id"].astype(str) == group]
        committed = mine[mine["event"].isin(["applied", "committed"])]
        for series, ((topic, partition), lines) in enumerate(
                committed.groupby(["topic", "partition"], sort=True)):
            fig.add_trace(go.Scatter(
                x=_times(lines["time_ms"]), y=lines["committed_offset"], mode="lines+markers",
                name=f"{group} · {topic}-{partition}", legendgroup=group, showlegend=False,
                line={"width": 1.6, "shape": "hv", "color": colors[group],
                      "dash": dashes[series % len(dashes)]},
                marker={"size": 4},
                hovertemplate="%{x|%H:%M:%S.%L}<br>offset %{y:,}"
                              "<extra>%{fullData.name}</extra>"), row=row, col=col)
        aborted = mine[mine["event"] == "aborted"]
        if not aborted.empty:
            fig.add_trace(go.Scatter(
                x=_times(aborted["time_ms"]), y=aborted["committed_offset"], mode="markers",
                name="aborted transactional commit", legendgroup="aborted",
                showlegend=not any(t.legendgroup == "aborted" for t in fig.data),
                marker={"symbol": "x", "size": 10, "color": "#d64545",
                        "line": {"width": 1, "color": "#d64545"}},
                hovertemplate="aborted: offset %{y:,}<extra>" + group + "</extra>"),
                row=row, col=col)
    if more > 0:
        fig.add_annotation(text=f"and {more} more group{'s' * (more != 1)}", showarrow=False,
                           xref="paper", yref="paper", x=1, y=-0.08, xanchor="right",
                           font={"size": 12, "color": "#5f6b7a"})
    fig.update_annotations(font={"size": 12})
    return _layout(fig, height=max(300, 230 * rows + 60),
                   legend={"orientation": "h", "yanchor": "bottom", "y": 1.04, "x": 0},
                   margin={"l": 60, "r": 20, "t": 60, "b": 50})
