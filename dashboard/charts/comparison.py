"""Figures over several runs: their medians side by side, their speedups with 95% CIs, their
latency distributions overlaid. Each run keeps one colour (never a mode's or a step part's) and,
past the palette, a dash.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.analysis.frames import ordered_modes
from dashboard.charts.common import (
    HEIGHT,
    RUN_DASHES,
    SERIES_PALETTE,
    apply_layout,
    empty_figure,
    escape,
    finite_frame,
    log_ticks,
    mode_color,
    tick_name,
    wrap,
)
from dashboard.charts.palette import REFERENCE_COLOR

COMPARE_COLUMNS = ["run", "mode", "method", "median_ms", "p10_ms", "p90_ms"]


def compare_medians(frame: pd.DataFrame, log_scale: bool = False) -> go.Figure:
    """Median per step for any number of runs: ``frame`` has ``COMPARE_COLUMNS`` (``method``: how
    that run's bars were timed, in words; written under each run's name on the axis). Each bar
    has its own place on a two-level axis (run, then mode with its median written under the bar,
    never on it: a wide p10-p90 whisker would cross a label on the bar). A log axis keeps runs that
    differ by orders of magnitude (a CPU run beside a GPU run) readable."""
    title = "Median time per step, run by run (whiskers: p10-p90)"
    data = finite_frame(frame, ("median_ms", "p10_ms", "p90_ms")).dropna(subset=["median_ms"]) \
        if not frame.empty else frame
    if data.empty:
        return empty_figure(title)
    method = data["method"] if "method" in data else pd.Series([""] * len(data), index=data.index)
    # narrow labels: a run's timing method wrapped, a long mode name broken after '_', so a run
    # of five modes beside a run of one keeps its words apart
    data = data.assign(_x=[f"{escape(r)}<br>{wrap(str(m), 16)}" if str(m) else escape(r)
                           for r, m in zip(data["run"], method)],
                       _bar=[f"{tick_name(mode)}<br>{float(v):.3f} ms"
                             for mode, v in zip(data["mode"], data["median_ms"])])
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data)):
        part = data[data["mode"].astype(str) == mode]
        median = part["median_ms"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(
            x=[part["_x"].tolist(), part["_bar"].tolist()], y=median, name=escape(mode),
            marker_color=mode_color(mode, i), showlegend=False,  # each bar is named on the axis
            error_y={"type": "data", "symmetric": False,
                     "array": np.nan_to_num(np.clip(part["p90_ms"].to_numpy(dtype=float) - median,
                                                    0, None)),
                     "arrayminus": np.nan_to_num(np.clip(median - part["p10_ms"].to_numpy(
                         dtype=float), 0, None))},
            hovertemplate="%{fullData.name}: %{y:.4f} ms<extra></extra>"))
    # one bar per place (run, mode): bars never share a slot, so none is pushed off its label
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_xaxes(tickangle=0)
    if log_scale:
        top = data[["median_ms", "p90_ms"]].max(axis=1)
        bottom = data[["median_ms", "p10_ms"]].min(axis=1)
        fig.update_yaxes(title_text="ms per step (log scale)", type="log",
                         **log_ticks(float(bottom[bottom > 0].min()) if (bottom > 0).any() else 1e-3,
                                     float(top.max())))
    else:
        fig.update_yaxes(title_text="ms per step", rangemode="tozero")
    return apply_layout(fig, title, height=HEIGHT + 80, margin={"l": 60, "r": 20, "t": 60, "b": 150})


def run_color(index: int) -> str:
    """The colour of the overlay's ``index``-th run: never a mode's or a step part's colour."""
    return SERIES_PALETTE[index % len(SERIES_PALETTE)]


def run_line(index: int) -> dict:
    """The line of the overlay's ``index``-th run: its colour, and past the palette a dash too,
    so 26 runs stay apart."""
    dash = RUN_DASHES[(index // len(SERIES_PALETTE)) % len(RUN_DASHES)]
    return {"color": run_color(index), "dash": dash}


def compare_speedups(frame: pd.DataFrame, missing: dict[str, str] | None = None,
                     order: Sequence[str] | None = None) -> go.Figure:
    """Speedup over eager with its 95% CI, run by run (``compare.SPEEDUP_ROW_COLUMNS``): one
    marker per run and mode, the runs on the x axis in the order given, a line at 1x. The y axis
    holds every marker, CI and label. ``missing`` (run -> why) keeps the runs that have no
    speedup on the axis, each with its reason written where its marker would be. ``order``: the
    runs in the order of the x axis (by default as they come, then the missing ones)."""
    title = "Speedup over eager, run by run (whiskers: 95% CI)"
    missing = dict(missing or {})
    data = finite_frame(frame, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
        .dropna(subset=["speedup"]) if not frame.empty else frame
    if data.empty:  # an axis with only notes on it says nothing: say why instead
        reasons = "; ".join(f"{run}: {why}" for run, why in missing.items())
        return empty_figure(title, "none of these runs has a speedup"
                            + (f" ({reasons})" if reasons else " (CPU runs time eager only)"))
    order = list(dict.fromkeys([*(str(run) for run in (order or [])),
                                *(str(run) for run in (data["run"] if len(data) else [])),
                                *missing]))
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data) if len(data) else []):
        part = data[data["mode"].astype(str) == mode]
        speedup = part["speedup"].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(
            x=[escape(run) for run in part["run"]], y=speedup, mode="markers+text",
            name=escape(mode), marker={"color": mode_color(mode, i), "size": 11},
            error_y={"type": "data", "symmetric": False,
                     "array": np.nan_to_num(np.clip(part["speedup_ci_high"].to_numpy(dtype=float)
                                                    - speedup, 0, None)),
                     "arrayminus": np.nan_to_num(np.clip(
                         speedup - part["speedup_ci_low"].to_numpy(dtype=float), 0, None))},
            text=[f"{value:.2f}x" for value in speedup], textposition="middle right",
            cliponaxis=False,
            hovertemplate="%{x}, %{fullData.name}: %{y:.2f}x<extra></extra>"))
    for run, why in missing.items():  # said where its marker would be, not left out in silence
        fig.add_annotation(x=escape(run), y=1.0, yshift=18, text=wrap(f"no speedup: {why}", 28),
                           showarrow=False, font={"size": 11, "color": REFERENCE_COLOR})
    fig.add_hline(y=1.0, line_dash="dot", line_color=REFERENCE_COLOR, annotation_text="eager (1x)",
                  annotation_position="bottom right")
    top = 1.0
    if len(data):
        top = max(top, float(np.nanmax(data[["speedup", "speedup_ci_high"]].to_numpy(dtype=float))))
    fig.update_xaxes(categoryorder="array", categoryarray=[escape(run) for run in order],
                     title_text="run", range=[-0.5, len(order) - 0.5])
    # the axis ends on a gridline above the highest marker or CI, so no marker looks as if it
    # sat beyond the axis
    step = _nice_step(top * 1.12 / 4)
    fig.update_yaxes(title_text="speedup over eager (x)", dtick=step,
                     range=[0, math.ceil(top * 1.12 / step) * step])
    # modes of one run side by side, not on one vertical line where their labels overlapped
    fig.update_layout(scattermode="group", scattergap=0.5)
    return apply_layout(fig, title)


def _nice_step(rough: float) -> float:
    """The 1-2-5 step (..., 0.5, 1, 2, 5, 10, ...) at or above ``rough``."""
    if not math.isfinite(rough) or rough <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(rough))
    return next(d * power for d in (1, 2, 5, 10) if d * power >= rough - 1e-12)


def compare_latency_ecdf(frame: pd.DataFrame, log_scale: bool = False,
                         points: int = 400) -> go.Figure:
    """The runs' distributions of time per step overlaid (``compare.OVERLAY_STEP_COLUMNS``):
    one panel per mode, one ECDF line per run (its colour the same in every panel), drawn at
    ``points`` evenly spaced quantiles plus the minimum and maximum."""
    title = "Time per step, run by run (cumulative distribution)"
    data = finite_frame(frame, ("ms",)).dropna(subset=["ms"]) if not frame.empty else frame
    if data.empty:
        return empty_figure(title, "none of these runs has per-step times")
    modes = ordered_modes(data)
    runs = list(dict.fromkeys(data["run"].astype(str)))
    fig = make_subplots(rows=1, cols=len(modes), shared_yaxes=True,
                        subplot_titles=[escape(mode) for mode in modes], horizontal_spacing=0.06)
    in_legend: set[str] = set()
    for column, mode in enumerate(modes, 1):
        for i, run in enumerate(runs):
            values = np.sort(data.loc[(data["mode"].astype(str) == mode)
                                      & (data["run"].astype(str) == run), "ms"].to_numpy(dtype=float))
            n = values.size
            if n == 0:
                continue
            index = np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(int))
            fig.add_trace(go.Scatter(
                x=values[index], y=(index + 1) / n, mode="lines", name=escape(run),
                legendgroup=escape(run), showlegend=run not in in_legend,
                line={"shape": "hv", "width": 2, **run_line(i)},
                hovertemplate=f"%{{fullData.name}}, {escape(mode)}: %{{y:.1%}} of steps <= "
                              "%{x:.4f} ms<extra></extra>"), row=1, col=column)
            in_legend.add(run)
        positive = data.loc[(data["mode"].astype(str) == mode) & (data["ms"] > 0), "ms"]
        ticks = log_ticks(float(positive.min()), float(positive.max())) \
            if log_scale and len(positive) else {}
        fig.update_xaxes(title_text="ms per step" + (" (log scale)" if log_scale else ""),
                         type="log" if log_scale else "linear", row=1, col=column, **ticks)
    fig.update_yaxes(title_text="fraction of steps", range=[0, 1.02], tickformat=".0%", row=1, col=1)
    # the runs' legend above the panels' titles (at the usual place it covered the first title)
    return apply_layout(fig, title, legend={"orientation": "h", "yanchor": "bottom", "y": 1.1, "x": 0,
                                       "xanchor": "left"},
                   margin={"l": 60, "r": 20, "t": 110, "b": 50})
