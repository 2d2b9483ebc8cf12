"""A sweep's figures: the speedup and the medians against the swept parameter, the speedup over
two parameters as a heatmap, and the amortisation over the steps captured per graph.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.common import (
    HEIGHT,
    MODE_COLORS,
    SERIES_PALETTE,
    SPLIT_COLORS,
    apply_layout,
    empty_figure,
    escape,
    finite,
    finite_frame,
    log_ticks,
)
from dashboard.charts.palette import REFERENCE_COLOR

SWEEP_THRESHOLD_COLOR = REFERENCE_COLOR
SWEEP_FLOOR_COLOR = SPLIT_COLORS["gpu_busy_us"]  # the GPU-busy floor is green, as everywhere


def _series_color(series: str, index: int) -> str:
    """A sweep line's colour: its mode's colour when the series is a mode alone, else the palette."""
    return MODE_COLORS.get(series, SERIES_PALETTE[index % len(SERIES_PALETTE)])


def _sweep_x(values: pd.Series, numeric: bool) -> np.ndarray:
    return values.to_numpy(dtype=float) if numeric else values.astype(str).map(escape).to_numpy()


def _sweep_x_axis(fig: go.Figure, x: str, numeric: bool, log_x: bool, values: pd.Series) -> None:
    if numeric and log_x:  # ticks at the measured values only (no 2..9 minor labels)
        ticks = sorted(set(finite(values)[np.isfinite(finite(values))]))
        fig.update_xaxes(title_text=f"{escape(x)} (log scale)", type="log", tickvals=ticks,
                         ticktext=[f"{v:,.0f}" if v >= 1 else f"{v:g}" for v in ticks])
    else:
        fig.update_xaxes(title_text=escape(x), type="linear" if numeric else "category")


NO_GRAPH_TIMING = "no measured point with a graph timing yet"


def sweep_speedup(table: pd.DataFrame, x: str, threshold: float, crossovers: pd.DataFrame | None = None,
                  numeric: bool = True, log_x: bool = False,
                  empty_message: str = NO_GRAPH_TIMING) -> go.Figure:
    """Speedup over eager against the swept ``x``, one line per series of
    ``profiler_core.sweep.core.speedup_table`` with its 95% CI as a band (and, dashed with open markers,
    the speedup predicted from the eager profile where the points have it), the threshold as a
    dashed line and each series' crossover (``profiler_core.sweep.core.crossovers``) marked."""
    title = f"Speedup over eager against {escape(x)} (band: 95% CI)"
    data = finite_frame(table, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
        .dropna(subset=["speedup"]) if not table.empty else table
    if data.empty:
        return empty_figure(title, empty_message)
    fig = go.Figure()
    for i, (series, group) in enumerate(data.groupby("series", sort=False)):
        group = group.sort_values(x, kind="stable") if numeric else group
        color, name = _series_color(str(series), i), escape(series)
        xs = _sweep_x(group[x], numeric)
        band = group.dropna(subset=["speedup_ci_low", "speedup_ci_high"])
        if len(band) > 1:
            bx = _sweep_x(band[x], numeric)
            fig.add_trace(go.Scatter(
                x=np.concatenate([bx, bx[::-1]]),
                y=np.concatenate([band["speedup_ci_high"].to_numpy(float),
                                  band["speedup_ci_low"].to_numpy(float)[::-1]]),
                fill="toself", fillcolor=color, opacity=0.18, line={"width": 0},
                legendgroup=name, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(
            x=xs, y=group["speedup"].to_numpy(float), mode="lines+markers", name=name,
            legendgroup=name, line={"color": color, "width": 2},
            error_y={"type": "data", "symmetric": False,
                     "array": np.nan_to_num(np.clip(group["speedup_ci_high"].to_numpy(float)
                                                    - group["speedup"].to_numpy(float), 0, None)),
                     "arrayminus": np.nan_to_num(np.clip(group["speedup"].to_numpy(float)
                                                         - group["speedup_ci_low"].to_numpy(float), 0, None)),
                     "visible": len(band) <= 1, "color": color},
            hovertemplate=f"%{{fullData.name}}<br>{escape(x)} %{{x}}: %{{y:.2f}}x<extra></extra>"))
        predicted = finite(group["predicted_speedup"]) if "predicted_speedup" in group else None
        if predicted is not None and np.isfinite(predicted).any():
            fig.add_trace(go.Scatter(
                x=xs, y=predicted, mode="lines+markers", name=f"predicted · {name}",
                legendgroup=name, line={"color": color, "width": 1, "dash": "dash"},
                marker={"symbol": "circle-open", "size": 8},
                hovertemplate=f"%{{fullData.name}}<br>{escape(x)} %{{x}}: %{{y:.2f}}x"
                              "<extra>predicted before capture</extra>"))
    if math.isfinite(threshold):
        fig.add_hline(y=threshold, line={"dash": "dash", "color": SWEEP_THRESHOLD_COLOR, "width": 1},
                      annotation_text=f"threshold {threshold:.2f}x", annotation_position="top left")
    if crossovers is not None and numeric and not crossovers.empty:
        found = finite_frame(crossovers, ("crossover",)).dropna(subset=["crossover"])
        names = list(dict.fromkeys(data["series"].astype(str)))
        for _, row in found.iterrows():
            color = _series_color(str(row["series"]), names.index(str(row["series"]))
                                  if str(row["series"]) in names else 0)
            fig.add_vline(x=float(row["crossover"]), line={"dash": "dot", "color": color, "width": 2})
            fig.add_trace(go.Scatter(
                x=[float(row["crossover"])], y=[threshold], mode="markers", showlegend=False,
                marker={"symbol": "x", "size": 12, "color": color},
                name=escape(row["series"]),
                hovertemplate=f"%{{fullData.name}}: below {threshold:.2f}x from {escape(x)} "
                              "≈ %{x:.3g}<extra>crossover</extra>"))
    _sweep_x_axis(fig, x, numeric, log_x, data[x])
    fig.update_yaxes(title_text="speedup (eager / mode, median per step)", rangemode="tozero")
    return apply_layout(fig, title, height=HEIGHT + 40)


def sweep_medians(table: pd.DataFrame, x: str, numeric: bool = True, log_x: bool = False,
                  log_y: bool = False) -> go.Figure:
    """Eager's and each mode's median time per training step against ``x``, with the point's
    GPU-busy floor (dotted): how close a graph comes to the GPU's own work. ``table`` is
    ``sweep.speedup_table``, or for a sweep without a graph timing (a CPU sweep)
    ``sweep.eager_table``: eager's medians alone."""
    data = finite_frame(table, ("eager_ms", "mode_ms", "floor_ms")) if not table.empty else table
    eager_only = not data.empty and data["mode_ms"].isna().all()
    title = (f"Eager's median time per step against {escape(x)}" if eager_only else
             f"Median time per step against {escape(x)}, with the GPU-busy floor")
    if data.empty or data[["eager_ms", "mode_ms"]].isna().all().all():
        return empty_figure(title, "no measured point yet")
    fig = go.Figure()
    drawn: set[str] = set()
    for i, (series, group) in enumerate(data.groupby("series", sort=False)):
        group = group.sort_values(x, kind="stable") if numeric else group
        xs = _sweep_x(group[x], numeric)
        mode, _, rest = str(series).partition(" · ")
        suffix = f" · {rest}" if rest else ""
        lines = [(str(series), "mode_ms", _series_color(str(series), i), "solid"),
                 (f"eager{suffix}", "eager_ms", _series_color("eager", 0) if not rest
                  else SERIES_PALETTE[i % len(SERIES_PALETTE)], "solid" if eager_only else "dash"),
                 (f"GPU-busy floor{suffix}", "floor_ms", SWEEP_FLOOR_COLOR if not rest
                  else SERIES_PALETTE[i % len(SERIES_PALETTE)], "dot")]
        for label, column, color, dash in lines:
            values = group[column].to_numpy(float)
            if label in drawn or not np.isfinite(values).any():
                continue
            drawn.add(label)
            fig.add_trace(go.Scatter(
                x=xs, y=values, mode="lines+markers", name=escape(label),
                line={"color": color, "dash": dash, "width": 2},
                hovertemplate=f"%{{fullData.name}}<br>{escape(x)} %{{x}}: %{{y:.4f}} ms<extra></extra>"))
    _sweep_x_axis(fig, x, numeric, log_x, data[x])
    times = data[["eager_ms", "mode_ms", "floor_ms"]].to_numpy(dtype=float).ravel()
    times = times[np.isfinite(times) & (times > 0)]
    ticks = log_ticks(float(times.min()), float(times.max())) if log_y and times.size else {}
    fig.update_yaxes(title_text="ms per training step" + (" (log scale)" if log_y else ""),
                     type="log" if log_y else "linear", **ticks,
                     **({} if log_y else {"rangemode": "tozero"}))
    return apply_layout(fig, title, height=HEIGHT + 40)


def sweep_heatmap(table: pd.DataFrame, x: str, y: str, mode: str = "graph",
                  threshold: float = math.nan) -> go.Figure:
    """The speedup of ``mode`` for every pair of the two swept parameters (text: the speedup; a
    cell below ``threshold`` is marked with a trailing asterisk)."""
    title = f"Speedup of {escape(mode)} over eager: {escape(y)} against {escape(x)}"
    data = finite_frame(table, ("speedup",)) if not table.empty else table
    data = data[data["mode"].astype(str) == mode].dropna(subset=["speedup"]) if not data.empty else data
    if data.empty:
        return empty_figure(title, "no measured point with a graph timing yet")
    xs = list(dict.fromkeys(data.sort_values(x, kind="stable")[x].tolist())) \
        if pd.api.types.is_numeric_dtype(data[x]) else list(dict.fromkeys(data[x].tolist()))
    ys = list(dict.fromkeys(data.sort_values(y, kind="stable")[y].tolist())) \
        if pd.api.types.is_numeric_dtype(data[y]) else list(dict.fromkeys(data[y].tolist()))
    grid = np.full((len(ys), len(xs)), np.nan)
    for _, row in data.iterrows():
        grid[ys.index(row[y]), xs.index(row[x])] = float(row["speedup"])
    text = [[("" if not np.isfinite(v) else f"{v:.2f}x" + ("*" if v < threshold else ""))
             for v in line] for line in grid]
    fig = go.Figure(go.Heatmap(
        z=grid, x=[escape(v) for v in xs], y=[escape(v) for v in ys], text=text,
        texttemplate="%{text}", colorscale="Viridis", colorbar={"title": {"text": "speedup"}},
        hovertemplate=f"{escape(x)} %{{x}}, {escape(y)} %{{y}}: %{{z:.2f}}x<extra></extra>"))
    fig.update_xaxes(title_text=escape(x), type="category")
    fig.update_yaxes(title_text=escape(y), type="category")
    subtitle = f"* below the threshold of {threshold:.2f}x" if math.isfinite(threshold) else None
    return apply_layout(fig, title, height=HEIGHT + 40, subtitle=subtitle)


def sweep_amortisation(amortisation: pd.DataFrame) -> go.Figure:
    """The graph's time per training step against the steps captured in one graph
    (``profiler_core.sweep.core.amortisation_table``), approaching the GPU-busy floor (dotted), beside
    eager (dashed)."""
    title = "Amortisation: time per training step against iterations per graph"
    data = finite_frame(amortisation, ("graph_ms", "eager_ms", "floor_ms")) \
        .dropna(subset=["graph_ms"]) if not amortisation.empty else amortisation
    if data.empty:
        return empty_figure(title, "sweep capture_iters (iterations per graph) to see this")
    fig = go.Figure()
    for i, (series, group) in enumerate(data.groupby("series", sort=False)):
        group = group.sort_values("capture_iters", kind="stable")
        color = SERIES_PALETTE[i % len(SERIES_PALETTE)] if data["series"].nunique() > 1 \
            else MODE_COLORS["graph"]
        suffix = f" · {series}" if str(series) != "graph" else ""
        xs = group["capture_iters"].to_numpy(float)
        for label, column, line_color, dash in (
                (f"graph{suffix}", "graph_ms", color, "solid"),
                (f"eager{suffix}", "eager_ms", MODE_COLORS["eager"] if not suffix else color, "dash"),
                (f"GPU-busy floor{suffix}", "floor_ms", SWEEP_FLOOR_COLOR if not suffix else color,
                 "dot")):
            values = group[column].to_numpy(float)
            if not np.isfinite(values).any():
                continue
            fig.add_trace(go.Scatter(
                x=xs, y=values, mode="lines+markers", name=escape(label),
                line={"color": line_color, "dash": dash, "width": 2},
                hovertemplate="%{fullData.name}<br>%{x} steps per graph: %{y:.4f} ms per step"
                              "<extra></extra>"))
    fig.update_xaxes(title_text="training steps captured per graph (log scale)", type="log",
                     tickvals=sorted(set(data["capture_iters"].astype(float))))
    fig.update_yaxes(title_text="ms per training step", rangemode="tozero")
    return apply_layout(fig, title, height=HEIGHT + 40)
