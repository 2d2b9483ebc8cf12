"""Every figure of the dashboard: pure functions from tidy DataFrames to Plotly figures.

Scope: drawing only. No Streamlit here; the inputs are the run's tables (``profiler_core.schema``)
or the derived tables of ``dashboard.analysis``. An empty input gives a figure that says so.
Long inputs stay cheap: histograms are binned with numpy, the ECDF is drawn at a few hundred
quantiles, and the iteration series is min/max-decimated and drawn with Scattergl, so 100,000
samples render in well under a second.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from profiler_core.schema import BREAKDOWN_COMPONENTS

MODE_COLORS = {"eager": "#E4572E", "graph": "#2E86AB"}
SPLIT_COLORS = {
    "cpu_launch_us": "#F4A259", "cpu_other_us": "#BC4B51",
    "gpu_busy_us": "#5B8E7D", "gpu_idle_us": "#C9CBA3",
}
SPLIT_LABELS = {
    "cpu_launch_us": "CPU launch", "cpu_other_us": "CPU other",
    "gpu_busy_us": "GPU busy", "gpu_idle_us": "GPU idle",
}
PHASE_PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D755D", "#EECA3B", "#72B7B2",
                 "#FF9DA6", "#E45756", "#79706E", "#D67195", "#BAB0AC", "#439894", "#FFBF79"]
NVML_PANELS = (
    ("gpu_util_pct", "GPU util (%)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("power_w", "power (W)"),
    ("mem_used_mib", "memory (MiB)"),
)
LATENCY_LABELS = {"gpu_ms": "ms per step (CUDA events)", "wall_ms": "ms per step (wall clock)"}
HEIGHT = 380
# The breakdown's components come from the schema: "total_span" is the iteration span, the
# others belong to the GPU timeline (busy + idle = span) or the CPU one (launch + other).
TOTAL_COMPONENT = "total_span"
TIMELINE_OF_COMPONENT = {c: c.split("_", 1)[0].upper() for c in BREAKDOWN_COMPONENTS
                         if c != TOTAL_COMPONENT}


def _color(mode: str, index: int = 0) -> str:
    return MODE_COLORS.get(str(mode), PHASE_PALETTE[index % len(PHASE_PALETTE)])


def _layout(fig: go.Figure, title: str, height: int = HEIGHT, **kwargs) -> go.Figure:
    layout = {"title": {"text": title, "y": 0.99, "yref": "container", "yanchor": "top"},
              "height": height, "margin": {"l": 60, "r": 20, "t": 76, "b": 50},
              "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"}}
    layout.update(kwargs)
    fig.update_layout(**layout)
    return fig


def empty_figure(title: str, message: str = "no data in this run") -> go.Figure:
    """A figure that says there is nothing to draw (keeps the page layout stable)."""
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=220)


def _modes(frame: pd.DataFrame) -> list[str]:
    present = list(pd.unique(frame["mode"].dropna().astype(str)))  # a row without a mode is skipped
    order = {"eager": 0, "graph": 1}
    return sorted(present, key=lambda m: (order.get(m, 9), m))


# ----------------------------------------------------------------------------- overview


def median_bars(stats: pd.DataFrame, medians: pd.DataFrame | None = None,
                method: str = "steady_event", method_label: str | None = None) -> go.Figure:
    """Median time per step per mode with p10-p90 whiskers; the GPU busy time as the floor."""
    title = f"Median time per training step ({method_label or method}; whiskers: p10-p90)"
    part = stats[stats["method"] == method] if not stats.empty else stats
    if part.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(_modes(part)):
        row = part[part["mode"].astype(str) == mode].iloc[0]
        median, p10, p90 = float(row["median_ms"]), float(row["p10_ms"]), float(row["p90_ms"])
        fig.add_trace(go.Bar(
            x=[mode], y=[median], name=mode, marker_color=_color(mode, i),
            error_y={"type": "data", "symmetric": False, "array": [max(p90 - median, 0)],
                     "arrayminus": [max(median - p10, 0)]},
            text=[f"{median:.3f} ms"], textposition="inside", insidetextanchor="middle",
            hovertemplate=f"{mode}: median %{{y:.4f}} ms<br>p10 {p10:.4f} / p90 {p90:.4f}<extra></extra>"))
    if medians is not None and not medians.empty:
        floor = medians.dropna(subset=["gpu_busy_us"])
        fig.add_trace(go.Scatter(
            x=floor["mode"], y=floor["gpu_busy_us"] / 1000.0, mode="markers", name="GPU busy (floor)",
            marker={"symbol": "line-ew-open", "size": 60, "color": "#222",
                    "line": {"width": 3, "color": "#222"}},
            hovertemplate="%{x}: GPU busy %{y:.4f} ms<extra></extra>"))
    fig.update_yaxes(title_text="ms per step", rangemode="tozero")
    return _layout(fig, title, showlegend=True)


# ----------------------------------------------------------------------------- latency


def _clip_range(values: np.ndarray) -> tuple[float, float]:
    low = float(np.nanmin(values))
    high = float(np.nanpercentile(values, 99.5))
    top = float(np.nanmax(values))
    if high <= low:
        high = top if top > low else low + 1e-3
    return low, high


def latency_histogram(steps: pd.DataFrame, column: str = "gpu_ms", bins: int = 80) -> go.Figure:
    """Overlaid histograms per mode, binned with numpy on shared edges up to the 99.5th pct."""
    title = "Distribution of the time per step"
    data = steps.dropna(subset=[column]) if not steps.empty else steps
    if data.empty:
        return empty_figure(title)
    values = data[column].to_numpy(dtype=float)
    low, high = _clip_range(values)
    edges = np.linspace(low, high, bins + 1)
    centres, width = (edges[:-1] + edges[1:]) / 2, edges[1] - edges[0]
    fig = go.Figure()
    hidden = 0
    for i, mode in enumerate(_modes(data)):
        mode_values = data.loc[data["mode"] == mode, column].to_numpy(dtype=float)
        counts, _ = np.histogram(mode_values, bins=edges)
        hidden += int((mode_values > high).sum())
        fig.add_trace(go.Bar(x=centres, y=counts, width=width, name=mode, marker_color=_color(mode, i),
                             opacity=0.75,
                             hovertemplate=f"{mode}: %{{x:.4f}} ms<br>%{{y}} steps<extra></extra>"))
    if hidden:
        fig.add_annotation(text=f"{hidden} slower steps beyond {high:.3f} ms not shown",
                           x=1, y=1, xref="paper", yref="paper", showarrow=False, xanchor="right",
                           font={"size": 11})
    fig.update_layout(barmode="overlay", bargap=0)
    fig.update_xaxes(title_text=LATENCY_LABELS.get(column, column))
    fig.update_yaxes(title_text="steps")
    return _layout(fig, title)


def latency_ecdf(steps: pd.DataFrame, column: str = "gpu_ms", points: int = 400) -> go.Figure:
    """Empirical CDF per mode, drawn at ``points`` evenly spaced quantiles (plus min and max)."""
    title = "Cumulative distribution (ECDF)"
    data = steps.dropna(subset=[column]) if not steps.empty else steps
    if data.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(_modes(data)):
        values = np.sort(data.loc[data["mode"] == mode, column].to_numpy(dtype=float))
        n = values.size
        if n > points:
            index = np.unique(np.linspace(0, n - 1, points).round().astype(int))
            x, y = values[index], (index + 1) / n
        else:
            x, y = values, np.arange(1, n + 1) / n
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", name=mode, line={"shape": "hv", "width": 2,
                                                                              "color": _color(mode, i)},
                                 hovertemplate=f"{mode}: %{{y:.1%}} of steps <= %{{x:.4f}} ms"
                                               "<extra></extra>"))
    fig.update_xaxes(title_text=LATENCY_LABELS.get(column, column))
    fig.update_yaxes(title_text="fraction of steps", range=[0, 1.02], tickformat=".0%")
    return _layout(fig, title)


def minmax_decimate(y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices of ``y`` keeping each bucket's min and max (spikes stay visible), in order."""
    n = y.size
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 2)
    size = math.ceil(n / buckets)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = y
    blocks = padded.reshape(buckets, size)
    filled = np.where(np.isnan(blocks), np.inf, blocks)
    lows = np.argmin(filled, axis=1)
    highs = np.argmax(np.where(np.isnan(blocks), -np.inf, blocks), axis=1)
    offsets = np.arange(buckets) * size
    index = np.unique(np.concatenate([offsets + lows, offsets + highs]))
    return index[index < n]


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
    data = steps.dropna(subset=[column]) if not steps.empty else steps
    if data.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(_modes(data)):
        part = data[data["mode"] == mode]
        y = part[column].to_numpy(dtype=float)
        x = part["seq"].to_numpy()
        keep = minmax_decimate(y, max_points)
        color = _color(mode, i)
        fig.add_trace(go.Scattergl(x=x[keep], y=y[keep], mode="markers", name=mode,
                                   marker={"size": 3, "color": color, "opacity": 0.45},
                                   hovertemplate=f"{mode} step %{{x}}: %{{y:.4f}} ms<extra></extra>"))
        line_x, line_y = running_median(x, y)
        fig.add_trace(go.Scattergl(x=line_x, y=line_y, mode="lines",
                                   name=f"{mode} rolling median", line={"color": color, "width": 2},
                                   hoverinfo="skip"))
    fig.update_xaxes(title_text="step (measurement order, trials interleaved)")
    fig.update_yaxes(title_text=LATENCY_LABELS.get(column, column), rangemode="tozero")
    return _layout(fig, title)


def timing_methods_bars(timing: pd.DataFrame) -> go.Figure:
    """Median per step by timing method and mode: the article's no-sync number beside the truth."""
    title = "The article's timing (no sync) beside the true timing"
    if timing.empty:
        return empty_figure(title)
    fig = go.Figure()
    for mode in ("eager", "graph"):
        values = timing[f"{mode}_median_ms"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=timing["label"], y=values, name=mode, marker_color=_color(mode),
                             text=[f"{v:.3f}" if np.isfinite(v) else "" for v in values],
                             textposition="outside",
                             hovertemplate=f"{mode}: %{{y:.4f}} ms<extra>%{{x}}</extra>"))
    for label, speedup in zip(timing["label"], timing["speedup"]):
        if np.isfinite(speedup):
            word = "'speedup'" if label == "article: perf_counter, no sync" else "speedup"
            fig.add_annotation(x=label, y=0, yshift=-38, text=f"{word} {speedup:.2f}x",
                               showarrow=False, font={"size": 11})
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="median ms per step", rangemode="tozero")
    return _layout(fig, title, margin={"l": 60, "r": 20, "t": 60, "b": 80})


# ----------------------------------------------------------------------------- launch split


def split_bars(medians: pd.DataFrame) -> go.Figure:
    """Per mode, two stacked bars: the CPU side (launch + other) and the GPU side (busy + idle)."""
    title = "Where a step's time goes (median per iteration, profiled window)"
    if medians.empty:
        return empty_figure(title, "no profiled window in this run (profiler off)")
    modes = list(medians["mode"].astype(str))
    fig = go.Figure()
    for side, parts in (("CPU", ("cpu_launch_us", "cpu_other_us")),
                        ("GPU", ("gpu_busy_us", "gpu_idle_us"))):
        for part in parts:
            values = medians[part].to_numpy(dtype=float)
            fig.add_trace(go.Bar(
                x=[modes, [side] * len(modes)], y=values, name=SPLIT_LABELS[part],
                marker_color=SPLIT_COLORS[part], text=[f"{v:,.0f}" for v in values],
                textposition="inside", insidetextanchor="middle",
                hovertemplate=f"{SPLIT_LABELS[part]}: %{{y:,.1f}} us<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal", uniformtext_minsize=9,
                      uniformtext_mode="hide")
    fig.update_yaxes(title_text="us per iteration")
    return _layout(fig, title, height=420)


def _is_total(component: str) -> bool:
    return component == TOTAL_COMPONENT


def _side(component: str) -> str:
    """Which timeline a breakdown component belongs to: 'GPU' or 'CPU' (schema components)."""
    return TIMELINE_OF_COMPONENT.get(component, "")


def unknown_components(breakdown: pd.DataFrame) -> list[str]:
    """Components of a breakdown table that the schema does not list (they are not drawn)."""
    names = breakdown["component"].dropna().astype(str)
    return sorted(set(names) - set(BREAKDOWN_COMPONENTS))


def _step_label(component: str, side: str) -> str:
    """'gpu_idle' -> 'idle' under a GPU panel; other names keep their words."""
    name = component.replace("_us", "")
    if side and name.lower().startswith(side.lower() + "_"):
        name = name[len(side) + 1:]
    return name.replace("_", " ")


def waterfall_steps(breakdown: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The decompositions in a breakdown table, one per timeline.

    The components of one timeline (``gpu_busy`` + ``gpu_idle``, ``cpu_launch`` + ``cpu_other``)
    each add up to the iteration span, so each gives its own walk from the eager step to the
    graph step; a part that does not add up shows as 'not attributed'. Columns: step, value,
    measure (absolute/relative/total).
    """
    names = breakdown["component"].astype(str)
    known = breakdown[names.isin(BREAKDOWN_COMPONENTS)]
    order = {c: i for i, c in enumerate(BREAKDOWN_COMPONENTS)}
    known = known.iloc[known["component"].astype(str).map(order).argsort(kind="stable")]
    names = known["component"].astype(str)
    totals = known[names.map(_is_total)]
    parts = known[~names.map(_is_total)]
    sides: dict[str, pd.DataFrame] = {}
    for side in dict.fromkeys(parts["component"].astype(str).map(_side)):
        group = parts[parts["component"].astype(str).map(_side) == side]
        eager_part = pd.to_numeric(group["eager_us"], errors="coerce").fillna(0.0)
        graph_part = pd.to_numeric(group["graph_us"], errors="coerce").fillna(0.0)
        if len(totals):
            eager_total = float(totals["eager_us"].iloc[0])
            graph_total = float(totals["graph_us"].iloc[0])
        else:
            eager_total, graph_total = float(eager_part.sum()), float(graph_part.sum())
        saving = pd.to_numeric(group["saving_us"], errors="coerce")
        change = (-saving).where(saving.notna(), graph_part - eager_part).to_numpy(dtype=float)
        labels = [_step_label(str(n), side) for n in group["component"]]
        residual = graph_total - eager_total - float(change.sum())
        if abs(residual) > 0.005 * max(abs(eager_total), 1e-9):
            # CPU launch + other is the time the CPU worked; the rest of the span it waited
            labels.append("waiting on GPU" if side == "CPU" else "not attributed")
            change = np.append(change, residual)
        sides[side or "all"] = pd.DataFrame({
            "step": ["eager", *labels, "graph"],
            "value": [eager_total, *change, graph_total],
            "measure": ["absolute", *["relative"] * len(change), "total"],
        })
    return sides


def speedup_waterfall(breakdown: pd.DataFrame) -> go.Figure:
    """From the eager step to the graph step: what each component saved (us per iteration),
    one panel per timeline (GPU: busy + idle; CPU: launch calls + other)."""
    title = "The speedup decomposed: eager step -> graph step"
    if breakdown.empty:
        return empty_figure(title, "no breakdown in this run (profiler off)")
    sides = waterfall_steps(breakdown)
    if not sides:
        return empty_figure(title, "no component of this breakdown is known to this dashboard")
    fig = make_subplots(rows=1, cols=len(sides), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{side} timeline" if side != "all" else "" for side in sides])
    for col, steps in enumerate(sides.values(), start=1):
        text = [f"{v:,.0f}" if m != "relative" else f"{v:+,.0f}"
                for v, m in zip(steps["value"], steps["measure"])]
        fig.add_trace(go.Waterfall(
            x=steps["step"], y=steps["value"], measure=steps["measure"], text=text,
            textposition="outside", decreasing={"marker": {"color": "#5B8E7D"}},
            increasing={"marker": {"color": "#E4572E"}}, totals={"marker": {"color": "#2E86AB"}},
            connector={"line": {"color": "#999", "width": 1}},
            hovertemplate="%{x}: %{y:,.1f} us<extra></extra>"), row=1, col=col)
    fig.update_yaxes(title_text="us per iteration", rangemode="tozero", row=1, col=1)
    return _layout(fig, title, height=420, showlegend=False)


def launch_count_bars(medians: pd.DataFrame) -> go.Figure:
    """CPU launch calls and GPU kernels per iteration, per mode."""
    title = "Launches and kernels per iteration"
    if medians.empty:
        return empty_figure(title, "no profiled window in this run (profiler off)")
    fig = go.Figure()
    for column, label, color in (("launches", "launch calls (CPU)", "#F4A259"),
                                 ("kernels", "kernels (GPU)", "#5B8E7D")):
        values = medians[column].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=medians["mode"], y=values, name=label, marker_color=color,
                             text=[f"{v:,.0f}" for v in values], textposition="outside",
                             hovertemplate=f"{label}: %{{y:,.0f}}<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="per iteration", rangemode="tozero")
    return _layout(fig, title)


# ----------------------------------------------------------------------------- GPU (NVML)


def nvml_timeseries(nvml: pd.DataFrame, phases: pd.DataFrame,
                    panels: Iterable[tuple[str, str]] = NVML_PANELS, max_points: int = 5_000) -> go.Figure:
    """NVML metrics over the run, one panel each, with the run's phases shaded behind them."""
    title = "GPU telemetry (NVML) over the run"
    if nvml.empty:
        return empty_figure(title, "no NVML samples in this run (NVML off or unavailable)")
    panels = list(panels)
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.03)
    values = pd.to_numeric(nvml["value"], errors="coerce")
    for row, (metric, label) in enumerate(panels, start=1):
        for source, style in (("poll", "lines"), ("driver", "markers")):
            mask = (nvml["metric"] == metric) & (nvml["source"] == source) & values.notna()
            part = nvml[mask].sort_values("t_s")
            if part.empty:
                continue
            y = pd.to_numeric(part["value"]).to_numpy(dtype=float)
            keep = minmax_decimate(y, max_points)
            fig.add_trace(go.Scattergl(
                x=part["t_s"].to_numpy(dtype=float)[keep], y=y[keep], mode=style,
                name=f"{label} ({'polled' if source == 'poll' else 'driver samples'})",
                line={"width": 1.5, "color": "#2E86AB"} if style == "lines" else None,
                marker={"size": 4, "color": "#E4572E"} if style == "markers" else None,
                showlegend=False, hovertemplate=f"%{{x:.2f}} s: %{{y:,.1f}}<extra>{label} {source}</extra>"),
                row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
        if not ((nvml["metric"] == metric) & values.notna()).any():
            fig.add_annotation(text="not reported by this GPU", showarrow=False, row=row, col=1,
                               x=0.5, y=0.5, xref="x domain", yref="y domain")
    if not phases.empty:
        colors: dict[str, str] = {}
        shapes = []
        for phase, start, end in phases[["phase", "start_s", "end_s"]].itertuples(index=False):
            color = colors.setdefault(str(phase), PHASE_PALETTE[len(colors) % len(PHASE_PALETTE)])
            # one band through every panel (the x axes are shared)
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": float(start),
                           "x1": float(end), "y0": 0, "y1": 1, "fillcolor": color, "opacity": 0.18,
                           "line": {"width": 0}, "layer": "below"})
        fig.update_layout(shapes=shapes)
        for phase, color in colors.items():  # a legend entry per phase name
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=phase,
                                     marker={"size": 12, "symbol": "square", "color": color,
                                             "opacity": 0.5}), row=1, col=1)
    fig.update_xaxes(title_text="seconds since the run started", row=len(panels), col=1)
    return _layout(fig, title, height=170 * len(panels) + 120, showlegend=True)


# ----------------------------------------------------------------------------- kernels


def kernel_top_bar(kernels: pd.DataFrame, mode: str, top_n: int = 10) -> go.Figure:
    """The ``top_n`` kernels of one mode by total GPU time (horizontal bars, biggest on top)."""
    title = f"Top {top_n} kernels by GPU time: {mode}"
    part = kernels[kernels["mode"] == mode] if not kernels.empty else kernels
    if part.empty:
        return empty_figure(title, f"no kernels recorded for {mode}")
    top = part.sort_values("total_us", ascending=False).head(top_n).iloc[::-1]
    names = [n if len(n) <= 48 else n[:45] + "..." for n in top["kernel"].astype(str)]
    fig = go.Figure(go.Bar(
        x=top["total_us"], y=names, orientation="h", marker_color=_color(mode),
        text=[f"{s:.1f}%" for s in top["share_of_gpu_pct"].astype(float)], textposition="auto",
        customdata=np.stack([top["kernel_full"].astype(str), top["calls_per_iter"].astype(float),
                             top["mean_us"].astype(float)], axis=1),
        hovertemplate="%{customdata[0]}<br>total %{x:,.1f} us, %{customdata[1]:.0f} calls/iter, "
                      "mean %{customdata[2]:,.2f} us<extra></extra>"))
    fig.update_xaxes(title_text="GPU time (us, profiled window)")
    fig.update_yaxes(automargin=True)
    return _layout(fig, title, height=max(260, 28 * len(top) + 120), showlegend=False)


# ----------------------------------------------------------------------------- counters


def counter_bars(lessons: pd.DataFrame) -> go.Figure:
    """The static counter after each phase: predicted by the article's rule vs observed."""
    title = "Static counter after each phase"
    if lessons.empty:
        return empty_figure(title)
    fig = go.Figure()
    for column, color in (("predicted", "#C9CBA3"), ("observed", "#2E86AB")):
        values = pd.to_numeric(lessons[column], errors="coerce")
        fig.add_trace(go.Bar(x=lessons["phase"].astype(str), y=values, name=column, marker_color=color,
                             hovertemplate=f"{column}: %{{y}}<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="counter value", rangemode="tozero")
    return _layout(fig, title)


# ----------------------------------------------------------------------------- comparing runs


def compare_medians(frame: pd.DataFrame) -> go.Figure:
    """Median per step for several runs: ``frame`` has run, mode, median_ms, p10_ms, p90_ms."""
    title = "Median time per step, run by run (whiskers: p10-p90)"
    if frame.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(_modes(frame)):
        part = frame[frame["mode"] == mode]
        median = part["median_ms"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(
            x=part["run"], y=median, name=mode, marker_color=_color(mode, i),
            error_y={"type": "data", "symmetric": False,
                     "array": np.clip(part["p90_ms"].to_numpy(dtype=float) - median, 0, None),
                     "arrayminus": np.clip(median - part["p10_ms"].to_numpy(dtype=float), 0, None)},
            hovertemplate=f"{mode}: %{{y:.4f}} ms<extra>%{{x}}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="ms per step", rangemode="tozero")
    return _layout(fig, title)
