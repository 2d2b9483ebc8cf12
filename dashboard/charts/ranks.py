"""Figures of a data-parallel run, from its ``ranks.csv`` (pure functions: DataFrame -> plotly
Figure or DataFrame, no ``st.*``): the rank x mode step-time grid, each rank's step stacked into
compute, exposed communication, hidden communication and host wait, p50/p99 per rank with the
straggler named, and the all-reduce's share of the step."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.common import HEIGHT, apply_layout, empty_figure, escape, mode_color
from dashboard.charts.palette import SERIES_COLORS, STEP_PART_COLORS

STACK_PARTS = (  # metric (ranks.csv's, or compute_alone_us: see stacked_step), label, colour
    ("compute_alone_us", "compute (no communication beside it)", STEP_PART_COLORS["gpu_busy"]),
    ("comm_exposed_us", "communication, exposed", STEP_PART_COLORS["comm_exposed"]),
    ("comm_hidden_us", "communication, hidden under compute", STEP_PART_COLORS["comm_hidden"]),
    ("host_wait_us", "host wait (device idle)", STEP_PART_COLORS["gpu_idle"]),
)
GRID_BASE_PX, GRID_ROW_PX = 150, 45  # the heatmap's height: a margin, and a row per rank
SUMMARY_COLUMNS = ["rank", "mode", "step_median_ms", "step_p50_ms", "step_p99_ms", "speedup",
                   "job_speedup", "all_reduce_share_pct", "arrival_wait_us", "straggler"]


def wide(ranks: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """ranks.csv as one row per rank and mode, one column per metric (only ``mode``'s rows when
    given)."""
    rows = ranks if mode is None else ranks[ranks["mode"] == mode]
    if rows.empty:
        return pd.DataFrame(columns=["rank", "mode"])
    table = rows.pivot_table(index=["rank", "mode"], columns="metric", values="value",
                             aggfunc="first", sort=False)
    return table.reset_index().rename_axis(columns=None)


def summary_table(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per rank and mode: step times, own and job speedup, the all-reduce's share, the arrival
    wait and whether it is the straggler (NaN where not measured)."""
    table = wide(ranks)
    return table.reindex(columns=SUMMARY_COLUMNS)


def straggler_of(ranks: pd.DataFrame, mode: str) -> int | None:
    table = wide(ranks, mode)
    if "straggler" not in table.columns:
        return None
    named = table[table["straggler"] == 1.0]
    return int(named["rank"].iloc[0]) if len(named) else None


# A rank this much slower than its mode's fastest rank gets the grid's full colour; a spread of
# a fraction of a percent (noise) stays pale, not painted as a straggler.
GRID_FULL_SLOWER = 0.10


def step_grid(ranks: pd.DataFrame) -> go.Figure:
    """Rank x mode heatmap of the median step time (ms), each cell coloured by how much slower it
    is than the fastest rank of its mode (pale: as fast; full colour: ``GRID_FULL_SLOWER`` slower
    or more), so that noise between ranks does not look like a straggler."""
    table = wide(ranks)
    title = "Median step time per rank and mode (ms)"
    if table.empty or "step_median_ms" not in table.columns:
        return empty_figure(title)
    grid = table.pivot(index="rank", columns="mode", values="step_median_ms")
    values = grid.to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        fastest = np.nanmin(np.where(values > 0, values, np.nan), axis=0, keepdims=True)
        slower = values / fastest - 1.0
    text = [[f"{v:.3f} ms ({s:+.1%})" if math.isfinite(v) and math.isfinite(s) else
             (f"{v:.3f} ms" if math.isfinite(v) else "") for v, s in zip(row, srow)]
            for row, srow in zip(values, slower)]
    figure = go.Figure(go.Heatmap(z=np.nan_to_num(slower, nan=0.0), x=[escape(m) for m in grid.columns],
                                  y=[f"rank {int(r)}" for r in grid.index], text=text,
                                  texttemplate="%{text}", colorscale="Blues", showscale=False,
                                  zmin=0.0, zmax=max(GRID_FULL_SLOWER, float(np.nanmax(slower))
                                                     if np.isfinite(slower).any() else 0.0),
                                  hovertemplate="%{y}, %{x}: %{text}<extra></extra>"))
    return apply_layout(figure, title, height=GRID_BASE_PX + GRID_ROW_PX * len(grid.index),
                        yaxis={"autorange": "reversed"},
                        subtitle="colour: how much slower than the mode's fastest rank (full at "
                                 f"+{GRID_FULL_SLOWER:.0%} or more)")


NOT_PROFILED = ("no profiled window: where a rank's step goes comes from the profiler (run with "
                "--profile)")


def stacked_step(ranks: pd.DataFrame, mode: str) -> go.Figure:
    """Each rank's profiled iteration in ``mode``: compute alone, communication hidden under
    compute, exposed communication and host wait (medians, microseconds), which together make
    the iteration's span (compute alone is compute less the hidden communication)."""
    table = wide(ranks, mode)
    title = f"{escape(mode)}: where each rank's step goes"
    if {"compute_us", "comm_hidden_us"} <= set(table.columns):
        table = table.assign(compute_alone_us=(table["compute_us"] - table["comm_hidden_us"]).clip(lower=0))
    if not any(metric in table.columns and table[metric].notna().any()
               for metric, _, _ in STACK_PARTS):
        return empty_figure(title, NOT_PROFILED)
    figure = go.Figure()
    labels = [f"rank {int(r)}" for r in table.get("rank", [])]
    for metric, label, colour in STACK_PARTS:
        if metric in table.columns:
            figure.add_trace(go.Bar(name=label, x=labels, y=table[metric], marker_color=colour))
    return apply_layout(figure, title, barmode="stack", yaxis_title="µs per profiled iteration")


def percentiles(ranks: pd.DataFrame, mode: str) -> go.Figure:
    """p50 and p99 step time per rank in ``mode``, the straggler named in the title."""
    table = wide(ranks, mode)
    figure = go.Figure()
    labels = [f"rank {int(r)}" for r in table.get("rank", [])]
    for metric, label, colour in (("step_p50_ms", "p50", SERIES_COLORS[0]),
                                  ("step_p99_ms", "p99", SERIES_COLORS[3])):
        if metric in table.columns:
            figure.add_trace(go.Bar(name=label, x=labels, y=table[metric], marker_color=colour))
    named = straggler_of(ranks, mode)
    title = f"{escape(mode)}: p50 and p99 per rank" + (
        f" (straggler: rank {named})" if named is not None else " (no straggler named)")
    return apply_layout(figure, title, barmode="group", yaxis_title="ms per step")


def all_reduce_share(ranks: pd.DataFrame) -> go.Figure:
    """The all-reduce's share of each rank's profiled step, per mode (percent)."""
    table = wide(ranks)
    title = "The all-reduce's share of the step"
    if "all_reduce_share_pct" not in table.columns:
        return empty_figure(title, "not profiled")
    figure = go.Figure()
    for index, (mode, rows) in enumerate(table.groupby("mode", sort=False)):
        figure.add_trace(go.Bar(name=escape(mode), x=[f"rank {int(r)}" for r in rows["rank"]],
                                y=rows["all_reduce_share_pct"],
                                marker_color=mode_color(str(mode), index)))
    return apply_layout(figure, title, height=HEIGHT, barmode="group", yaxis_title="% of the step")
