"""A run of changing shapes' figures (``--vary``: strategies.csv and shape_steps.csv): the
distribution of the varying dimension with the bucket edges, each strategy's time per step and
memory side by side, the padded share of the work, and the shapes in step order with every
strategy's time. Eager keeps its mode's colour; the other strategies are legend-only series.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.charts.common import (
    SERIES_PALETTE,
    apply_layout,
    empty_figure,
    escape,
    finite,
    minmax_decimate,
    tick_name,
)
from dashboard.charts.palette import MODE_COLORS, REFERENCE_COLOR

MAX_STEP_POINTS = 4_000  # points per strategy in the step-order chart (min-max decimated)


def strategy_color(strategy: str, order: list[str]) -> str:
    """Eager's mode colour for the eager strategy; a series colour for every other."""
    if strategy == "eager":
        return MODE_COLORS["eager"]
    others = [name for name in order if name != "eager"]
    return SERIES_PALETTE[others.index(strategy) % len(SERIES_PALETTE)] if strategy in others \
        else SERIES_PALETTE[-1]


def distribution(steps: pd.DataFrame, edges: list[int], dimension: str) -> go.Figure:
    """How often each value of the varying dimension came in the sequence, with the buckets'
    edges as dotted lines (a batch is padded up to the edge at or above it)."""
    title = f"The sequence's {escape(dimension)}: how often each value came, buckets dotted"
    eager = steps[steps["strategy"] == "eager"] if len(steps) else steps
    if eager.empty:
        return empty_figure(title, "this run holds no sequence of shapes")
    values = finite(eager["shape"])
    values = values[np.isfinite(values)]
    fig = go.Figure(go.Histogram(x=values, nbinsx=min(80, max(10, len(set(values)))),
                                 marker_color=MODE_COLORS["eager"], name="steps"))
    for edge in edges:
        fig.add_vline(x=edge, line_dash="dot", line_color=REFERENCE_COLOR,
                      annotation_text=f"{edge:,}", annotation_position="top")
    fig.update_xaxes(title_text=escape(dimension))
    fig.update_yaxes(title_text="steps")
    return apply_layout(fig, title, showlegend=False)


def times_and_memory(strategies: pd.DataFrame) -> go.Figure:
    """Left: each strategy's mean time per step over the sequence (its p90 and p99 as markers);
    right: the graphs' pool and the peak allocation (MiB; none for eager and compile's own)."""
    title = "Each strategy: time per step over the sequence, and its memory"
    if strategies.empty:
        return empty_figure(title, "this run holds no strategy")
    order = list(strategies["strategy"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("ms per step (bar: mean; p90, p99)",
                                                        "memory (MiB)"))
    ticks = [tick_name(name, 8) for name in order]
    colors = [strategy_color(name, order) for name in order]
    fig.add_trace(go.Bar(x=ticks, y=finite(strategies["mean_ms"]), marker_color=colors,
                         name="mean", showlegend=False), row=1, col=1)
    for column, symbol in (("p90_ms", "line-ew-open"), ("p99_ms", "x-thin-open")):
        fig.add_trace(go.Scatter(x=ticks, y=finite(strategies[column]), mode="markers",
                                 marker={"symbol": symbol, "size": 14, "color": REFERENCE_COLOR,
                                         "line": {"width": 2, "color": REFERENCE_COLOR}},
                                 name=column.split("_")[0]), row=1, col=1)
    fig.add_trace(go.Bar(x=ticks, y=finite(strategies["pool_bytes"]) / 2**20, marker_color=colors,
                         name="graph pool", showlegend=False), row=1, col=2)
    fig.add_trace(go.Scatter(x=ticks, y=finite(strategies["peak_bytes"]) / 2**20, mode="markers",
                             marker={"symbol": "diamond-open", "size": 11, "color": REFERENCE_COLOR},
                             name="peak allocated"), row=1, col=2)
    fig = apply_layout(fig, title, height=420)
    # under the plots: above them the legend ran over the two subplots' titles
    fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0})
    return fig


def padded_share(strategies: pd.DataFrame) -> go.Figure:
    """The share of each strategy's work that is padding."""
    title = "The padded share of the work"
    if strategies.empty:
        return empty_figure(title, "this run holds no strategy")
    order = list(strategies["strategy"])
    shares = finite(strategies["padded_share"]) * 100
    fig = go.Figure(go.Bar(x=[tick_name(name, 8) for name in order], y=shares,
                           marker_color=[strategy_color(name, order) for name in order],
                           text=[f"{v:.0f}%" if np.isfinite(v) else "" for v in shares],
                           textposition="outside"))
    fig.update_yaxes(title_text="% of the work", rangemode="tozero")
    return apply_layout(fig, title, showlegend=False)


def steps_in_order(steps: pd.DataFrame, dimension: str) -> go.Figure:
    """Every step of the sequence in order: each strategy's time (lines) and the step's shape
    (the dotted line, right axis), so a strategy's slow steps can be read against their shapes."""
    title = "The sequence in step order: every strategy's time, and the shape (dotted)"
    if steps.empty:
        return empty_figure(title, "this run holds no sequence of shapes")
    order = list(dict.fromkeys(steps["strategy"]))
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    for name in order:
        rows = steps[steps["strategy"] == name].sort_values("step")
        keep = minmax_decimate(finite(rows["ms"]), MAX_STEP_POINTS)
        fig.add_trace(go.Scattergl(x=rows["step"].to_numpy()[keep], y=finite(rows["ms"])[keep],
                                   mode="lines", name=escape(name),
                                   line={"color": strategy_color(name, order), "width": 1}),
                      secondary_y=False)
    eager = steps[steps["strategy"] == order[0]].sort_values("step")
    fig.add_trace(go.Scattergl(x=eager["step"], y=finite(eager["shape"]), mode="lines",
                               name=escape(dimension),
                               line={"color": REFERENCE_COLOR, "dash": "dot", "width": 1}),
                  secondary_y=True)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="ms per step", secondary_y=False)
    fig.update_yaxes(title_text=escape(dimension), secondary_y=True, showgrid=False)
    return apply_layout(fig, title, height=420)
