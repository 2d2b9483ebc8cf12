"""The timing figures of one run: the median per mode, the latency distributions and series, the
timing methods side by side, every mode's speedup, the fresh processes of a repeated run and the
graph time predicted before capture.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.analysis.frames import ordered_modes
from dashboard.charts.common import (
    HEIGHT,
    MODE_COLORS,
    SPLIT_COLORS,
    apply_layout,
    empty_figure,
    escape,
    finite,
    finite_frame,
    minmax_decimate,
    mode_color,
    plural,
    tick_name,
    wrap,
)
from dashboard.charts.palette import REFERENCE_COLOR, SERIES_COLORS, STEP_PART_COLORS
from profiler_core.spec.metrics import STEP_METHOD_LABELS

LATENCY_LABELS = {"gpu_ms": "ms per step (CUDA events)", "wall_ms": "ms per step (wall clock)"}


def median_bars(stats: pd.DataFrame, medians: pd.DataFrame | None = None,
                method: str = "steady_event", method_label: str | None = None) -> go.Figure:
    """Median time per step per mode with p10-p90 whiskers; ``medians`` (columns mode and
    gpu_busy_us, per training step: ``saving.kernel_floor``) draws each mode's GPU kernel time as
    the floor."""
    title = "Median time per training step"
    subtitle = f"{escape(method_label or method)}; whiskers: p10-p90"
    part = stats[stats["method"] == method] if not stats.empty else stats
    part = finite_frame(part, ("median_ms", "p10_ms", "p90_ms")).dropna(subset=["median_ms"])
    if part.empty:
        return empty_figure(f"{title} ({subtitle})")
    fig = go.Figure()
    ticks = []
    for i, mode in enumerate(ordered_modes(part)):
        row = part[part["mode"].astype(str) == mode].iloc[0]
        median, p10, p90 = float(row["median_ms"]), float(row["p10_ms"]), float(row["p90_ms"])
        # the median is written under its bar, never on it: the whisker runs through the bar's
        # middle, and a wide p10-p90 (a CPU run) would cross any label placed there
        ticks.append(f"{tick_name(mode)}<br><b>{median:.3f} ms</b>")
        fig.add_trace(go.Bar(  # named on the axis, so not in the legend (the floor is)
            x=[escape(mode)], y=[median], name=escape(mode), marker_color=mode_color(mode, i),
            showlegend=False,
            offsetgroup="median", error_y={"type": "data", "symmetric": False,
                     "array": [max(p90 - median, 0) if math.isfinite(p90) else 0],
                     "arrayminus": [max(median - p10, 0) if math.isfinite(p10) else 0]},
            customdata=[[p10, p90]],
            hovertemplate="%{x}: median %{y:.4f} ms<br>p10 %{customdata[0]:.4f} / "
                          "p90 %{customdata[1]:.4f}<extra></extra>"))
    fig.update_xaxes(tickvals=[escape(m) for m in ordered_modes(part)], ticktext=ticks,
                     tickangle=0)
    if medians is not None and not medians.empty:
        floor = finite_frame(medians, ("gpu_busy_us",)).dropna(subset=["gpu_busy_us"])
        fig.add_trace(go.Scatter(
            x=[escape(m) for m in floor["mode"]], y=floor["gpu_busy_us"] / 1000.0, mode="markers",
            name="GPU kernel time (floor)",
            marker={"symbol": "line-ew-open", "size": 60, "color": SPLIT_COLORS["gpu_busy_us"],
                    "line": {"width": 4, "color": SPLIT_COLORS["gpu_busy_us"]}},
            hovertemplate="%{x}: GPU kernels %{y:.4f} ms per step<extra></extra>"))
    fig.update_yaxes(title_text="ms per step", rangemode="tozero")
    return apply_layout(fig, title, subtitle=subtitle, showlegend=True,
                   margin={"l": 60, "r": 20, "t": 100, "b": 50})

# ----------------------------------------------------------------------------- latency


def _clip_range(values: np.ndarray) -> tuple[float, float]:
    low = float(np.nanmin(values))
    high = float(np.nanpercentile(values, 99.5))
    top = float(np.nanmax(values))
    if high <= low:
        high = top if top > low else low + max(abs(low) * 1e-3, 1e-3)
    return low, high


def _finite_steps(steps: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of ``steps`` whose ``column`` is a finite number (others are never drawn)."""
    if steps.empty:
        return steps
    data = steps.assign(**{column: finite(steps[column])})
    return data.dropna(subset=[column])


HISTOGRAM_PANELS_PER_ROW = 3  # more modes wrap onto further rows (their titles stay readable)


def latency_histogram(steps: pd.DataFrame, column: str = "gpu_ms", bins: int = 80) -> go.Figure:
    """One panel per mode, side by side, each binned on its own range up to its 99.5th percentile,
    so a tall, narrow graph distribution never flattens the eager one (the ECDF compares them on
    one axis). Each panel's title says how many slower steps lie beyond what it draws."""
    title = "Distribution of the time per step (one panel per mode, each on its own scale)"
    data = _finite_steps(steps, column)
    if data.empty:
        return empty_figure(title)
    modes = ordered_modes(data)
    subtitles, panels = [], []
    for mode in modes:
        values = data.loc[data["mode"].astype(str) == mode, column].to_numpy(dtype=float)
        low, high = _clip_range(values)
        count = min(bins, max(10, int(1.5 * math.sqrt(values.size))))  # few samples: fewer bins
        edges = np.linspace(low, high, count + 1)
        counts, _ = np.histogram(values, bins=edges)
        hidden = int((values > high).sum())
        text = (f"{escape(mode)}: {plural(values.size, 'step', 'steps')}, median "
                f"{float(np.median(values)):.4f} ms")
        if hidden:
            text += (f"<br>{plural(hidden, 'slower step', 'slower steps')} beyond {high:.3f} ms "
                     f"{'is' if hidden == 1 else 'are'} not shown")
        subtitles.append(text)
        panels.append((mode, edges, counts))
    columns = min(len(modes), HISTOGRAM_PANELS_PER_ROW)
    rows = math.ceil(len(modes) / columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=subtitles, horizontal_spacing=0.08,
                        vertical_spacing=min(0.3, 0.9 / rows) if rows > 1 else 0.0)
    for index, (mode, edges, counts) in enumerate(panels):
        row, col = index // columns + 1, index % columns + 1
        centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
        fig.add_trace(go.Bar(x=centres, y=counts, width=width, name=escape(mode),
                             marker_color=mode_color(mode, index),
                             hovertemplate="%{fullData.name}: %{x:.4f} ms<br>%{y} steps"
                                           "<extra></extra>"), row=row, col=col)
        fig.update_xaxes(title_text=LATENCY_LABELS.get(column, escape(column)), row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="steps", row=row, col=col)
    fig.update_annotations(font_size=12)
    fig.update_layout(bargap=0)
    return apply_layout(fig, title, height=HEIGHT + (rows - 1) * 320, showlegend=False,
                   margin={"l": 60, "r": 20, "t": 96, "b": 50})


def latency_ecdf(steps: pd.DataFrame, column: str = "gpu_ms", points: int = 400) -> go.Figure:
    """Empirical CDF per mode, drawn at ``points`` evenly spaced quantiles (plus min and max)."""
    title = "Cumulative distribution (ECDF)"
    data = _finite_steps(steps, column)
    if data.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data)):
        values = np.sort(data.loc[data["mode"].astype(str) == mode, column].to_numpy(dtype=float))
        n = values.size
        if n > points:
            index = np.unique(np.linspace(0, n - 1, points).round().astype(int))
            x, y = values[index], (index + 1) / n
        else:
            x, y = values, np.arange(1, n + 1) / n
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=escape(mode),
                                 line={"shape": "hv", "width": 2, "color": mode_color(mode, i)},
                                 hovertemplate="%{fullData.name}: %{y:.1%} of steps <= %{x:.4f} ms"
                                               "<extra></extra>"))
    fig.update_xaxes(title_text=LATENCY_LABELS.get(column, escape(column)))
    fig.update_yaxes(title_text="fraction of steps", range=[0, 1.02], tickformat=".0%")
    return apply_layout(fig, title)


def running_median(x: np.ndarray, y: np.ndarray, exact_up_to: int = 20_000,
                   points: int = 1_000) -> tuple[np.ndarray, np.ndarray]:
    """A centred rolling median (window n/50) for short series; for long ones the median of
    ``points`` consecutive blocks, which shows the same drift at a fraction of the cost."""
    n = y.size
    if n <= exact_up_to:
        window = max(5, min(501, n // 50))
        return x, pd.Series(y).rolling(window, center=True, min_periods=1).median().to_numpy()
    size = math.ceil(n / points)
    blocks = np.full(points * size, np.nan)
    blocks[:n] = y
    medians = np.nanmedian(blocks.reshape(points, size), axis=1)
    centres = np.minimum(np.arange(points) * size + size // 2, n - 1)
    keep = centres < n
    return x[centres[keep]], medians[keep]


def latency_series(steps: pd.DataFrame, column: str = "gpu_ms", max_points: int = 10_000) -> go.Figure:
    """Time per step in the order measured (warm-up effects, drift), with a rolling median."""
    title = "Every step in order (a line: rolling median)"
    data = _finite_steps(steps, column)
    if data.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data)):
        part = data[data["mode"].astype(str) == mode]
        y = part[column].to_numpy(dtype=float)
        x = part["seq"].to_numpy()
        keep = minmax_decimate(y, max_points)
        color = mode_color(mode, i)
        # One legend entry per mode (dots and their rolling median toggle together).
        fig.add_trace(go.Scattergl(x=x[keep], y=y[keep], mode="markers", name=escape(mode),
                                   legendgroup=escape(mode), showlegend=False,
                                   marker={"size": 3, "color": color, "opacity": 0.45},
                                   hovertemplate="%{fullData.name} step %{x}: %{y:.4f} ms"
                                                 "<extra></extra>"))
        line_x, line_y = running_median(x, y)
        fig.add_trace(go.Scattergl(x=line_x, y=line_y, mode="lines", name=escape(mode),
                                   legendgroup=escape(mode),
                                   line={"color": color, "width": 2}, hoverinfo="skip"))
    fig.update_xaxes(title_text="step (measurement order, trials interleaved)")
    fig.update_yaxes(title_text=LATENCY_LABELS.get(column, escape(column)), rangemode="tozero")
    return apply_layout(fig, title)


def timing_methods_bars(timing: pd.DataFrame) -> go.Figure:
    """Median per step by timing method and mode: the article's no-sync number beside the truth.
    Each method's label, on a few short lines under its bars, ends with its speedup."""
    title = "The article's timing (no sync) beside the true timing"
    if timing.empty:
        return empty_figure(title)
    timing = finite_frame(timing, ("eager_median_ms", "graph_median_ms", "speedup"))
    labels = []
    for raw, speedup in zip(timing["label"], timing["speedup"]):
        word = "'speedup'" if raw == STEP_METHOD_LABELS["article_no_sync"] else "speedup"
        label = wrap(raw)
        if np.isfinite(speedup):
            label += f"<br><b>{word} {speedup:.2f}x</b>"
        labels.append(label)
    fig = go.Figure()
    for mode in ("eager", "graph"):
        values = timing[f"{mode}_median_ms"].to_numpy(dtype=float)
        if not np.isfinite(values).any():  # a CPU run has no graph: no empty legend entry
            continue
        fig.add_trace(go.Bar(x=labels, y=values, name=mode, marker_color=mode_color(mode),
                             text=[f"{v:.3f}" if np.isfinite(v) else "" for v in values],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{fullData.name}: %{y:.4f} ms<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=0, automargin=True)
    fig.update_yaxes(title_text="median ms per step", rangemode="tozero")
    return apply_layout(fig, title, height=HEIGHT + 60, margin={"l": 60, "r": 20, "t": 60, "b": 40})

# ----------------------------------------------------------------------------- modes


def modes_speedup_bars(modes: pd.DataFrame) -> go.Figure:
    """Every timed mode's steady-state speedup over eager, with its 95% CI, and (hover) its
    one-time cost: how the ways of graphing a step compare on this step."""
    title = "Speedup over eager, mode by mode (whiskers: 95% CI)"
    data = finite_frame(modes, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
        .dropna(subset=["speedup"]) if not modes.empty else modes
    if data.empty:
        return empty_figure(title, "no modes table in this run (recorded before modes existed)")
    speedup = data["speedup"].to_numpy(dtype=float)
    names = [escape(mode) for mode in data["mode"].astype(str)]
    fig = go.Figure(go.Bar(
        x=names, y=speedup, marker_color=[mode_color(str(mode), i) for i, mode in enumerate(data["mode"])],
        error_y={"type": "data", "symmetric": False,
                 "array": np.nan_to_num(np.clip(data["speedup_ci_high"].to_numpy(dtype=float) - speedup, 0, None)),
                 "arrayminus": np.nan_to_num(np.clip(speedup - data["speedup_ci_low"].to_numpy(dtype=float), 0, None))},
        customdata=np.stack([data["median_ms"].to_numpy(dtype=float),
                             data["one_time_ms"].to_numpy(dtype=float)], axis=1),
        hovertemplate="%{x}: %{y:.2f}x, %{customdata[0]:.4f} ms per step<br>one-time cost "
                      "%{customdata[1]:,.1f} ms<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color=REFERENCE_COLOR)
    # the 1x line's label right of the plot, where no bar stands (on it, it sat on the last bar)
    fig.add_annotation(xref="paper", x=1.0, xanchor="left", y=1.0, yanchor="middle",
                       text="eager (1x)", showarrow=False, font={"color": REFERENCE_COLOR})
    # each speedup written under its bar, never on it, where its CI whisker runs
    fig.update_xaxes(tickvals=names, tickangle=0,
                     ticktext=[f"{tick_name(str(mode))}<br><b>{value:.2f}x</b>"
                               for mode, value in zip(data["mode"], speedup)])
    fig.update_yaxes(title_text="speedup over eager (x)", rangemode="tozero")
    return apply_layout(fig, title, showlegend=False, margin={"l": 60, "r": 80, "t": 76, "b": 50})

# ----------------------------------------------------------------------------- prediction before capture

# The predicted parts keep the dashboard's meanings (``palette.STEP_PART_COLORS``): GPU busy green,
# a graph's launch and per-node costs each in its own colour, the batch copy in the timeline's
# memcpy colour; the measured graph time in the graph's mode colour.
PREDICTION_PART_COLORS = {"GPU busy (eager)": STEP_PART_COLORS["gpu_busy"],
                          "launch": STEP_PART_COLORS["graph_launch"],
                          "per-node cost": STEP_PART_COLORS["per_node"],
                          "batch copy": STEP_PART_COLORS["batch_copy"],
                          "graph, steady state": MODE_COLORS["graph"]}


def prediction_bars(parts: pd.DataFrame) -> go.Figure:
    """The graph time per step predicted before capture, in its parts, beside the measured one
    (``profiler_core.analysis.predict.prediction_parts``: bar, part, us)."""
    title = "Graph time per step: predicted before capture vs measured"
    data = finite_frame(parts, ("us",)).dropna(subset=["us"]) if not parts.empty else parts
    if data.empty:
        return empty_figure(title, "no prediction in this run")
    fig = go.Figure()
    for index, (part, rows) in enumerate(data.groupby("part", sort=False)):
        fig.add_trace(go.Bar(
            y=[escape(bar) for bar in rows["bar"]], x=rows["us"], name=escape(part),
            orientation="h", marker_color=PREDICTION_PART_COLORS.get(str(part), mode_color(str(part), index)),
            hovertemplate="%{fullData.name}: %{x:,.2f} us per step<extra></extra>"))
    totals = data.groupby("bar", sort=False)["us"].sum()
    fig.add_trace(go.Scatter(y=[escape(bar) for bar in totals.index], x=totals.to_numpy(),
                             mode="text", text=[f" {value:,.1f} us" for value in totals.to_numpy()],
                             textposition="middle right", showlegend=False, hoverinfo="skip"))
    fig.update_xaxes(title_text="us per training step", range=[0, float(totals.max()) * 1.18])
    fig.update_yaxes(autorange="reversed")
    layout = apply_layout(fig, title, height=260, barmode="stack")
    layout.update_layout(legend_traceorder="normal")
    return layout

# ----------------------------------------------------------------------------- repeats

SHOWN_COLOR = SERIES_COLORS[0]  # the process whose tables the run folder holds
OTHER_PROCESS_COLOR = SERIES_COLORS[1]


def repeats_chart(repeats: pd.DataFrame) -> go.Figure:
    """A run measured in several fresh processes (repeats.csv): each process's speedup with its
    own 95% CI as whiskers, the one the run folder holds (the median) marked, a line at the median
    over processes. A run without a graph (CPU) shows each process's eager time per step."""
    data = finite_frame(repeats, ("repeat", "speedup", "speedup_ci_low", "speedup_ci_high",
                                   "eager_median_ms")) if not repeats.empty else repeats
    with_speedup = not data.empty and data["speedup"].notna().any()
    column = "speedup" if with_speedup else "eager_median_ms"
    title = ("Speedup in each fresh process (whiskers: that process's own 95% CI)" if with_speedup
             else "Eager time per step in each fresh process")
    data = data.dropna(subset=[column, "repeat"]) if not data.empty else data
    if data.empty:
        return empty_figure(title, "this run was measured in one process (repeats.csv is empty)")
    shown = data["shown"].fillna(False).astype(bool).to_numpy()
    value = data[column].to_numpy(dtype=float)
    fig = go.Figure()
    for mask, name, color, symbol in ((~shown, "other processes", OTHER_PROCESS_COLOR, "circle"),
                                      (shown, "shown: the median process", SHOWN_COLOR, "diamond")):
        if not mask.any():
            continue
        part = data[mask]
        y = value[mask]
        error = None
        if with_speedup:
            high = part["speedup_ci_high"].to_numpy(dtype=float)
            low = part["speedup_ci_low"].to_numpy(dtype=float)
            error = {"type": "data", "symmetric": False,
                     "array": np.nan_to_num(np.clip(high - y, 0, None)),
                     "arrayminus": np.nan_to_num(np.clip(y - low, 0, None))}
        fig.add_trace(go.Scatter(
            x=[f"#{int(r)}" for r in part["repeat"]], y=y, mode="markers", name=name,
            marker={"color": color, "size": 12 if symbol == "diamond" else 9, "symbol": symbol},
            error_y=error,
            hovertemplate=("process %{x}: %{y:.2f}x<extra></extra>" if with_speedup
                           else "process %{x}: %{y:.4f} ms per step<extra></extra>")))
    middle = float(np.median(value))
    fig.add_hline(y=middle, line_dash="dot", line_color=REFERENCE_COLOR,
                  annotation_text=f"median {middle:.2f}x" if with_speedup else f"median {middle:.4f} ms",
                  annotation_position="top left")
    fig.update_xaxes(title_text="fresh process, in the order they ran", type="category",
                     categoryorder="array",
                     categoryarray=[f"#{int(r)}" for r in sorted(data["repeat"])])
    fig.update_yaxes(title_text="speedup over eager (x)" if with_speedup else "ms per step",
                     rangemode="tozero")
    return apply_layout(fig, title, showlegend=True)
