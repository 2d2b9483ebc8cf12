"""Every figure of the dashboard: pure functions from tidy DataFrames to Plotly figures.

Scope: drawing only. No Streamlit here; the inputs are the run's tables (``profiler_core.spec.schema``)
or the derived tables of ``dashboard.analysis``. An empty input gives a figure that says so.
Long inputs stay cheap: histograms are binned with numpy, the ECDF is drawn at a few hundred
quantiles, and the iteration series is min/max-decimated and drawn with Scattergl, so 100,000
samples render in well under a second.

Two rules hold for every figure:

- **Only finite numbers are drawn.** NaN, +inf and -inf (a hand-edited or damaged run) are left
  out, never binned, stacked or used for an axis range.
- **Text from a run is shown as text.** Plotly renders a subset of HTML in category labels,
  legend names, titles and hover text (``<a href>`` becomes a live link), so every label that
  comes from run data (modes, kernel names, phases, counter phases, run labels, components)
  goes through :func:`escape` (``&``, ``<``, ``>`` only: Plotly would show ``&quot;``
  literally), and run data never becomes part of a hover *template*: templates only refer to
  the (escaped) trace name, category or custom data.

Colours mean one thing everywhere: eager and graph have their mode colours (bars, totals,
lines); the four parts of a step keep their own colours in every chart (CPU launch amber, other
CPU work purple, GPU busy green, GPU idle grey), so green always means "the GPU was busy", never
"a decrease" (a waterfall step's sign is its direction and its +/- label). The colours are mid
tones that read on Streamlit's light and dark themes alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard import analysis
from dashboard.analysis import (
    RESIDUAL_COMPONENTS,
    TIMELINE_OF_COMPONENT,
    TOTAL_COMPONENT,
    ordered_modes,
)
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS

# One colour per mode, none of them the green, orange, purple or grey of the launch split's parts.
MODE_COLORS = {"eager": "#E4572E", "graph": "#2E86AB", "graphed_callables": "#8C564B",
               "compile": "#17BECF", "compile_ro": "#D6378A"}
SPLIT_COLORS = {
    "cpu_launch_us": "#F2A541", "cpu_other_us": "#9B6FC0",
    "gpu_busy_us": "#3FA34D", "gpu_idle_us": "#A3ABB8",
}
SPLIT_LABELS = {
    "cpu_launch_us": "CPU launch", "cpu_other_us": "CPU other",
    "gpu_busy_us": "GPU busy", "gpu_idle_us": "GPU idle",
}
# Parts of a step that are not one of the four (the CPU waiting on the GPU, an unattributed rest).
REST_COLOR = "#C9CED6"
# Lines that are neither a mode nor a part of a step (runs of an overlay, sweep series, a mode this
# dashboard has no colour for): hues at least 25 CIELAB units from every mode and part colour, so
# orange always means eager and blue the graph, and at least 50 from both themes' backgrounds, so
# a line reads on light and dark. Runs beyond the palette also change their dash (``run_line``).
SERIES_PALETTE = ["#3949AB", "#B5BD00", "#00796B", "#8E24AA", "#880E4F", "#827717"]
RUN_DASHES = ["solid", "dash", "dot", "dashdot"]
# The GPU chart's phase bands: at most this many shapes, and legend entries for this many kinds
# of phase (the others share one grey entry). A run has about 70 blocks and 15 phase names, of
# about 10 kinds.
MAX_PHASE_BANDS = 400
MAX_PHASE_LEGEND = 24
OTHER_PHASES_COLOR = "#BAB0AC"
# A phase is named "<mode> <kind>" ("eager timed", "graph warm-up") or by its kind alone
# ("setup", "capture", "parity"): its band is coloured by its kind, every kind its own hue (the
# mode is the lane it is drawn in, under the panels). Kinds not listed take PHASE_EXTRA_PALETTE.
PHASE_KIND_COLORS = {
    "setup": "#BAB0AC", "warm-up": "#EDC948", "capture": "#B07AA1", "preparation": "#9C755F",
    "timed": "#59A14F", "cold start": "#76B7B2", "article loop": "#FF9DA7",
    "input copy": "#8FD19E", "profiled": "#A0CBE8", "parity": "#D37295",
    "capture twin profiled": "#6B6ECF",
}
PHASE_EXTRA_PALETTE = ["#B6992D", "#FFBE7D", "#499894", "#D7B5A6", "#F1CE63", "#86BCB6",
                       "#FABFD2", "#79706E"]
PHASE_BAND_OPACITY = 0.22
NVML_PANELS = (
    ("gpu_util_pct", "GPU util (%)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("power_w", "power (W)"),
    ("mem_used_mib", "memory (MiB)"),
)
NVML_POLL_COLOR = "#17A2B8"
NVML_DRIVER_COLOR = "#C2185B"
COUNTER_COLORS = {"predicted": "#A9B8CC", "observed": "#4F6D8F"}
LATENCY_LABELS = {"gpu_ms": "ms per step (CUDA events)", "wall_ms": "ms per step (wall clock)"}
HEIGHT = 380
# Lanes and event kinds of the one-iteration timeline (``profiler_core.analysis.timeline.iteration_timeline``).
TIMELINE_KIND_COLORS = {
    "CPU op": SPLIT_COLORS["cpu_other_us"],
    "launch call": SPLIT_COLORS["cpu_launch_us"],
    "kernel": SPLIT_COLORS["gpu_busy_us"],
    "memcpy/memset": "#8FD19E",
}


def escape(text: object) -> str:
    """Run data as a Plotly label that shows as itself: ``&``, ``<`` and ``>`` escaped (no link,
    tag or entity survives), ``"`` left alone (Plotly would print ``&quot;``)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def finite(values: object) -> np.ndarray:
    """``values`` as floats with NaN for anything not a finite number (text, None, +-inf)."""
    series = values if isinstance(values, pd.Series) else pd.Series(values, dtype="object")
    array = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return np.where(np.isfinite(array), array, np.nan)


def _finite_frame(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """A copy with ``columns`` numeric and every non-finite value NaN."""
    out = frame.copy()
    for column in columns:
        if column in out:
            out[column] = finite(out[column])
    return out


def _color(mode: str, index: int = 0) -> str:
    return MODE_COLORS.get(str(mode), SERIES_PALETTE[index % len(SERIES_PALETTE)])


def _layout(fig: go.Figure, title: str, height: int = HEIGHT, subtitle: str | None = None,
            **kwargs) -> go.Figure:
    layout = {"title": {"text": title, "y": 0.99, "yref": "container", "yanchor": "top",
                        **({"subtitle": {"text": subtitle}} if subtitle else {})},
              "height": height, "margin": {"l": 60, "r": 20, "t": 76, "b": 50},
              "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"}}
    layout.update(kwargs)
    fig.update_layout(**layout)
    return fig


def empty_figure(title: str, message: str = "no data in this run") -> go.Figure:
    """A figure that says there is nothing to draw (keeps the page layout stable). ``title`` is
    the chart's own title (its run data already escaped by the caller, its markup kept);
    ``message`` is escaped here."""
    fig = go.Figure()
    fig.add_annotation(text=escape(message), showarrow=False, x=0.5, y=0.5, xref="paper",
                       yref="paper", font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return _layout(fig, title, height=220)


def _plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


# ----------------------------------------------------------------------------- overview


def _tick_name(mode: str, width: int = 10) -> str:
    """A mode's name for an axis tick, escaped, broken after '_' when longer than ``width``
    ('graphed_<br>callables'), so five modes' ticks stand upright side by side."""
    text = escape(mode)
    return text.replace("_", "_<br>") if len(str(mode)) > width else text


def median_bars(stats: pd.DataFrame, medians: pd.DataFrame | None = None,
                method: str = "steady_event", method_label: str | None = None) -> go.Figure:
    """Median time per step per mode with p10-p90 whiskers; ``medians`` (columns mode and
    gpu_busy_us, per training step: ``analysis.kernel_floor``) draws each mode's GPU kernel time as
    the floor."""
    title = "Median time per training step"
    subtitle = f"{escape(method_label or method)}; whiskers: p10-p90"
    part = stats[stats["method"] == method] if not stats.empty else stats
    part = _finite_frame(part, ("median_ms", "p10_ms", "p90_ms")).dropna(subset=["median_ms"])
    if part.empty:
        return empty_figure(f"{title} ({subtitle})")
    fig = go.Figure()
    ticks = []
    for i, mode in enumerate(ordered_modes(part)):
        row = part[part["mode"].astype(str) == mode].iloc[0]
        median, p10, p90 = float(row["median_ms"]), float(row["p10_ms"]), float(row["p90_ms"])
        # the median is written under its bar, never on it: the whisker runs through the bar's
        # middle, and a wide p10-p90 (a CPU run) would cross any label placed there
        ticks.append(f"{_tick_name(mode)}<br><b>{median:.3f} ms</b>")
        fig.add_trace(go.Bar(  # named on the axis, so not in the legend (the floor is)
            x=[escape(mode)], y=[median], name=escape(mode), marker_color=_color(mode, i),
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
        floor = _finite_frame(medians, ("gpu_busy_us",)).dropna(subset=["gpu_busy_us"])
        fig.add_trace(go.Scatter(
            x=[escape(m) for m in floor["mode"]], y=floor["gpu_busy_us"] / 1000.0, mode="markers",
            name="GPU kernel time (floor)",
            marker={"symbol": "line-ew-open", "size": 60, "color": SPLIT_COLORS["gpu_busy_us"],
                    "line": {"width": 4, "color": SPLIT_COLORS["gpu_busy_us"]}},
            hovertemplate="%{x}: GPU kernels %{y:.4f} ms per step<extra></extra>"))
    fig.update_yaxes(title_text="ms per step", rangemode="tozero")
    return _layout(fig, title, subtitle=subtitle, showlegend=True,
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
        text = (f"{escape(mode)}: {_plural(values.size, 'step', 'steps')}, median "
                f"{float(np.median(values)):.4f} ms")
        if hidden:
            text += (f"<br>{_plural(hidden, 'slower step', 'slower steps')} beyond {high:.3f} ms "
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
                             marker_color=_color(mode, index),
                             hovertemplate="%{fullData.name}: %{x:.4f} ms<br>%{y} steps"
                                           "<extra></extra>"), row=row, col=col)
        fig.update_xaxes(title_text=LATENCY_LABELS.get(column, escape(column)), row=row, col=col)
        if col == 1:
            fig.update_yaxes(title_text="steps", row=row, col=col)
    fig.update_annotations(font_size=12)
    fig.update_layout(bargap=0)
    return _layout(fig, title, height=HEIGHT + (rows - 1) * 320, showlegend=False,
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
                                 line={"shape": "hv", "width": 2, "color": _color(mode, i)},
                                 hovertemplate="%{fullData.name}: %{y:.1%} of steps <= %{x:.4f} ms"
                                               "<extra></extra>"))
    fig.update_xaxes(title_text=LATENCY_LABELS.get(column, escape(column)))
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
    data = _finite_steps(steps, column)
    if data.empty:
        return empty_figure(title)
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data)):
        part = data[data["mode"].astype(str) == mode]
        y = part[column].to_numpy(dtype=float)
        x = part["seq"].to_numpy()
        keep = minmax_decimate(y, max_points)
        color = _color(mode, i)
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
    return _layout(fig, title)


def _wrap(label: str, width: int = 22) -> str:
    """An escaped axis label broken into lines of about ``width`` characters (at spaces)."""
    lines, line = [], ""
    for word in str(label).split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "<br>".join(escape(part) for part in lines)


def timing_methods_bars(timing: pd.DataFrame) -> go.Figure:
    """Median per step by timing method and mode: the article's no-sync number beside the truth.
    Each method's label, on a few short lines under its bars, ends with its speedup."""
    title = "The article's timing (no sync) beside the true timing"
    if timing.empty:
        return empty_figure(title)
    timing = _finite_frame(timing, ("eager_median_ms", "graph_median_ms", "speedup"))
    labels = []
    for raw, speedup in zip(timing["label"], timing["speedup"]):
        word = "'speedup'" if raw == "article: perf_counter, no sync" else "speedup"
        label = _wrap(raw)
        if np.isfinite(speedup):
            label += f"<br><b>{word} {speedup:.2f}x</b>"
        labels.append(label)
    fig = go.Figure()
    for mode in ("eager", "graph"):
        values = timing[f"{mode}_median_ms"].to_numpy(dtype=float)
        if not np.isfinite(values).any():  # a CPU run has no graph: no empty legend entry
            continue
        fig.add_trace(go.Bar(x=labels, y=values, name=mode, marker_color=_color(mode),
                             text=[f"{v:.3f}" if np.isfinite(v) else "" for v in values],
                             textposition="outside", cliponaxis=False,
                             hovertemplate="%{fullData.name}: %{y:.4f} ms<extra></extra>"))
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=0, automargin=True)
    fig.update_yaxes(title_text="median ms per step", rangemode="tozero")
    return _layout(fig, title, height=HEIGHT + 60, margin={"l": 60, "r": 20, "t": 60, "b": 40})


# ----------------------------------------------------------------------------- launch split


def _number_text(values: np.ndarray, pattern: str = "{:,.0f}") -> list[str]:
    return [pattern.format(v) if np.isfinite(v) else "" for v in values]


def split_bars(medians: pd.DataFrame, empty_message: str = "no profiled window in this run "
               "(profiler off)") -> go.Figure:
    """Per mode, two stacked bars: the CPU side (launch + other) and the GPU side (busy + idle)."""
    title = "Under the profiler: where an iteration's time goes (medians)"
    if medians.empty:
        return empty_figure(title, empty_message)
    medians = _finite_frame(medians, SPLIT_COLORS)
    modes = [escape(m) for m in medians["mode"].astype(str)]
    fig = go.Figure()
    for side, parts in (("CPU", ("cpu_launch_us", "cpu_other_us")),
                        ("GPU", ("gpu_busy_us", "gpu_idle_us"))):
        for part in parts:
            values = medians[part].to_numpy(dtype=float)
            fig.add_trace(go.Bar(
                x=[modes, [side] * len(modes)], y=values, name=SPLIT_LABELS[part],
                marker_color=SPLIT_COLORS[part], text=_number_text(values),
                textposition="inside", insidetextanchor="middle",
                hovertemplate="%{fullData.name}: %{y:,.1f} us<extra>%{x}</extra>"))
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


def profiled_waterfall_steps(breakdown: pd.DataFrame, other: str = "graph") -> dict[str, pd.DataFrame]:
    """The decompositions in ``other``'s block of a breakdown table (``mode_us`` holds its times),
    one per timeline.

    The components of one timeline (``gpu_busy`` + ``gpu_idle``, ``cpu_launch`` + ``cpu_other``)
    each add up to the iteration span, so each gives its own walk from the eager step to
    ``other``'s step; a part that does not add up shows as 'waiting on GPU' (the CPU) or 'not
    attributed'. Columns: step, component (the schema name; the residual's own label), value,
    measure (absolute/relative/total). Non-finite numbers count as missing.
    """
    breakdown = breakdown[breakdown["mode"].astype(str) == other]  # other modes' blocks left out
    breakdown = _finite_frame(breakdown, ("eager_us", "mode_us", "saving_us"))
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
        eager_part = group["eager_us"].fillna(0.0)
        mode_part = group["mode_us"].fillna(0.0)
        eager_total = float(totals["eager_us"].iloc[0]) if len(totals) else math.nan
        mode_total = float(totals["mode_us"].iloc[0]) if len(totals) else math.nan
        if not math.isfinite(eager_total):
            eager_total = float(eager_part.sum())
        if not math.isfinite(mode_total):
            mode_total = float(mode_part.sum())
        saving = group["saving_us"]
        change = (-saving).where(saving.notna(), mode_part - eager_part).to_numpy(dtype=float)
        components = [str(n) for n in group["component"]]
        labels = [_step_label(n, side) for n in components]
        residual = mode_total - eager_total - float(change.sum())
        if abs(residual) > 0.005 * max(abs(eager_total), 1e-9):
            # CPU launch + other is the time the CPU worked; the rest of the span it waited
            labels.append(RESIDUAL_COMPONENTS.get(side, "not attributed"))
            components.append(labels[-1])
            change = np.append(change, residual)
        sides[side or "all"] = pd.DataFrame({
            "step": ["eager", *labels, other],
            "component": ["eager", *components, other],
            "value": [eager_total, *change, mode_total],
            "measure": ["absolute", *["relative"] * len(change), "total"],
        })
    return sides


def _step_color(component: str) -> str:
    if component in MODE_COLORS:
        return MODE_COLORS[component]
    return SPLIT_COLORS.get(f"{component}_us", REST_COLOR)


def profiled_waterfall(breakdown: pd.DataFrame, empty_message: str = "no breakdown in this run "
                       "(profiler off)", other: str = "graph") -> go.Figure:
    """Under the profiler: from the eager iteration's span to ``other`` mode's, from that mode's
    block of a breakdown table (whose ``mode_us`` holds its times): what each component saved (us
    per profiled iteration), one panel per timeline (GPU: busy + idle; CPU: launch calls + other).
    The profiler slows every launch, so these totals are not the headline's (``speedup_waterfall``
    draws the headline's saving).

    Drawn as floating bars (not Plotly's Waterfall, whose colours can only say up or down): the
    eager and ``other`` totals in their mode colours, each step in its part's colour, its sign in its
    direction and its +/- label. Labels are never clipped (the axis leaves room above the
    tallest bar and below the lowest)."""
    title = f"Under the profiler: the profiled iteration decomposed, eager -> {escape(other)}"
    if not (breakdown["mode"].astype(str) == other).any():
        return empty_figure(title, empty_message)
    sides = profiled_waterfall_steps(breakdown, other)
    if not sides:
        return empty_figure(title, "no component of this breakdown is known to this dashboard")
    fig = make_subplots(rows=1, cols=len(sides), shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=[f"{side} timeline" if side != "all" else "" for side in sides])
    tops, bottoms = [0.0], [0.0]
    for col, steps in enumerate(sides.values(), start=1):
        bases, heights, level = [], [], 0.0
        for value, measure in zip(steps["value"], steps["measure"]):
            value = float(value) if math.isfinite(float(value)) else 0.0
            if measure == "relative":
                bases.append(level)
                heights.append(value)
                level += value
            else:
                bases.append(0.0)
                heights.append(value)
                level = value
            tops.append(max(bases[-1], bases[-1] + heights[-1]))
            bottoms.append(min(bases[-1], bases[-1] + heights[-1]))
        text = [f"{v:+,.0f}" if m == "relative" else f"{v:,.0f}"
                for v, m in zip(heights, steps["measure"])]
        fig.add_trace(go.Bar(
            x=[escape(s) for s in steps["step"]], y=heights, base=bases,
            marker_color=[_step_color(c) for c in steps["component"]],
            marker_line_width=0, text=text, textposition="outside", cliponaxis=False,
            customdata=np.stack([np.asarray(bases, dtype=float) + np.asarray(heights, dtype=float)],
                                axis=1),
            hovertemplate="%{x}: %{text} us (to %{customdata[0]:,.1f} us)<extra></extra>",
            showlegend=False), row=1, col=col)
        for i in range(len(heights) - 1):  # connectors at the running level
            end = bases[i] + heights[i]
            fig.add_shape(type="line", x0=i + 0.32, x1=i + 0.68, y0=end, y1=end,
                          line={"color": "#999999", "width": 1, "dash": "dot"}, row=1, col=col)
    top, bottom = max(tops), min(bottoms)
    pad = 0.14 * max(top - bottom, 1e-9)
    fig.update_yaxes(range=[bottom - (pad if bottom < 0 else 0), top + pad])
    fig.update_yaxes(title_text="us per profiled iteration", row=1, col=1)
    fig.update_layout(bargap=0.35)
    return _layout(fig, title, height=420, showlegend=False,
                   margin={"l": 60, "r": 20, "t": 80, "b": 60})


# The attribution's parts (``profiler_core.analysis.attribution.PARTS``) as waterfall steps: label, colour.
ATTRIBUTION_STEPS = {
    "gpu_kernels": ("kernel time changed", SPLIT_COLORS["gpu_busy_us"]),
    "input_copy": ("batch copy added", TIMELINE_KIND_COLORS["memcpy/memset"]),
    "gpu_idle": ("GPU idle removed", SPLIT_COLORS["gpu_idle_us"]),
}


def waterfall_steps(attribution: pd.DataFrame, other: str = "graph") -> pd.DataFrame:
    """The headline's saving per step as a walk, from ``other``'s block of attribution.csv: eager's
    step (absolute), then each part's change from eager to ``other`` (kernel time, batch copy,
    GPU idle; relative: negative is time saved, positive time the mode added), then ``other``'s
    step (total). The parts add up to the step exactly (idle is the rest of the step), so the walk
    ends on the headline's median. A batch copy neither mode has is left out. Columns: step,
    component, value (us per training step), measure. Empty when the block lacks either step or
    the kernel time (no profiled window)."""
    columns = ["step", "component", "value", "measure"]
    parts = analysis.attribution_parts(attribution, other)
    eager, mode = parts["step"]
    if not all(math.isfinite(v) for v in (eager, mode, *parts["gpu_kernels"])):
        return pd.DataFrame(columns=columns)
    rows = [["eager step", "eager", eager, "absolute"]]
    level = eager
    for component, (label, _) in ATTRIBUTION_STEPS.items():
        before, after = parts[component]
        if component == "gpu_idle" and not (math.isfinite(before) and math.isfinite(after)):
            change = mode - level  # idle is the rest of the step
        else:
            before, after = (v if math.isfinite(v) else 0.0 for v in (before, after))
            change = after - before
        if component == "input_copy" and before == 0 and after == 0:
            continue
        rows.append([label, component, change, "relative"])
        level += change
    rows.append([f"{other} step", other, mode, "total"])
    return pd.DataFrame(rows, columns=columns)


def speedup_waterfall(attribution: pd.DataFrame, empty_message: str = "no attribution in this "
                      "run", other: str = "graph") -> go.Figure:
    """The headline's saving per training step, attributed (``waterfall_steps``): eager's step ->
    kernel time changed -> batch copy added -> GPU idle removed -> ``other``'s step, the two ends
    the headline's medians (timed, no profiler). A part the mode added is drawn as an increase.
    Beside it, when the run timed it, the host's time to issue a step in each mode: not part of the
    sum, it is why the GPU waited.

    Drawn as floating bars (not Plotly's Waterfall, whose colours can only say up or down): the
    eager and ``other`` totals in their mode colours, each part in its colour (kernels green as
    GPU busy everywhere, idle grey), its sign in its direction and its +/- label. Labels are never
    clipped (the axis leaves room above the tallest bar and below the lowest)."""
    title = f"The headline's saving per step, attributed: eager -> {escape(other)}"
    steps = waterfall_steps(attribution, other)
    if steps.empty:
        return empty_figure(title, empty_message)
    host = analysis.attribution_parts(attribution, other)["host_issue"]
    beside = all(math.isfinite(v) for v in host)
    fig = make_subplots(rows=1, cols=2 if beside else 1, shared_yaxes=True,
                        horizontal_spacing=0.06, column_widths=[0.76, 0.24] if beside else None,
                        subplot_titles=["parts of the step (add up to it)",
                                        "host time to issue a step<br>(not part of the sum)"]
                        if beside else None)
    bases, heights, level = [], [], 0.0
    for value, measure in zip(steps["value"].astype(float), steps["measure"]):
        if measure == "relative":
            bases.append(level)
            heights.append(value)
            level += value
        else:
            bases.append(0.0)
            heights.append(value)
            level = value
    colors = {c: color for c, (_, color) in ATTRIBUTION_STEPS.items()}
    text = [f"{v:+,.0f}" if m == "relative" and abs(v) >= 10 else
            f"{v:+,.1f}" if m == "relative" else f"{v:,.0f}"
            for v, m in zip(heights, steps["measure"])]
    ends = np.asarray(bases, dtype=float) + np.asarray(heights, dtype=float)
    fig.add_trace(go.Bar(
        x=[escape(s) for s in steps["step"]], y=heights, base=bases,
        marker_color=[colors.get(c, _color(c)) for c in steps["component"]],
        marker_line_width=0, text=text, textposition="outside", cliponaxis=False,
        customdata=np.stack([ends], axis=1),
        hovertemplate="%{x}: %{text} us (to %{customdata[0]:,.1f} us)<extra></extra>",
        showlegend=False), row=1, col=1)
    for i in range(len(heights) - 1):  # connectors at the running level
        fig.add_shape(type="line", x0=i + 0.32, x1=i + 0.68, y0=ends[i], y1=ends[i],
                      line={"color": "#999999", "width": 1, "dash": "dot"}, row=1, col=1)
    tops = [0.0, *np.maximum(bases, ends)]
    bottoms = [0.0, *np.minimum(bases, ends)]
    if beside:
        names = ["eager", escape(other)]
        fig.add_trace(go.Bar(
            x=names, y=list(host), base=[0.0, 0.0], marker_color=[_color("eager"), _color(other, 1)],
            marker_pattern_shape="/", marker_line_width=0, opacity=0.75,
            text=[f"{v:,.0f}" for v in host], textposition="outside", cliponaxis=False,
            hovertemplate="%{x}: host needed %{y:,.1f} us to issue a step<extra></extra>",
            showlegend=False), row=1, col=2)
        tops += list(host)
    top, bottom = max(tops), min(bottoms)
    pad = 0.14 * max(top - bottom, 1e-9)
    fig.update_yaxes(range=[bottom - (pad if bottom < 0 else 0), top + pad])
    fig.update_yaxes(title_text="us per training step", row=1, col=1)
    fig.update_layout(bargap=0.3)
    return _layout(fig, title, height=440, showlegend=False,
                   subtitle="timed with no profiler (the headline's medians); kernel time from the "
                            "profiled window; above zero: time the mode added",
                   margin={"l": 60, "r": 20, "t": 110, "b": 60})


def launch_count_bars(medians: pd.DataFrame, empty_message: str = "no profiled window in this "
                      "run (profiler off)") -> go.Figure:
    """CPU launch calls and GPU kernels per iteration, per mode."""
    title = "Launches and kernels per iteration"
    if medians.empty:
        return empty_figure(title, empty_message)
    medians = _finite_frame(medians, ("launches", "kernels"))
    modes = [escape(m) for m in medians["mode"].astype(str)]
    fig = go.Figure()
    for column, label, color in (("launches", "launch calls (CPU)", SPLIT_COLORS["cpu_launch_us"]),
                                 ("kernels", "kernels (GPU)", SPLIT_COLORS["gpu_busy_us"])):
        values = medians[column].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=modes, y=values, name=label, marker_color=color,
                             text=_number_text(values), textposition="outside", cliponaxis=False,
                             hovertemplate="%{fullData.name}: %{y:,.0f}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="per iteration", rangemode="tozero")
    return _layout(fig, title)


def _lane_order(lane: str) -> tuple[int, str]:
    """CPU op lanes (thread 1 first), then the launch calls, then the GPU."""
    lowered = lane.lower()
    rank = 2 if lowered.startswith("gpu") else 1 if "launch" in lowered else 0
    return rank, lowered


def iteration_timeline(events: pd.DataFrame, title: str, span_us: float | None = None) -> go.Figure:
    """One profiled iteration as lanes (CPU ops per thread, CPU launch calls, GPU work): one
    horizontal bar per event from its start, in microseconds since the iteration began.

    ``events`` has ``profiler_core.analysis.timeline.TIMELINE_COLUMNS`` (lane, kind, name, start_us, dur_us)."""
    title = escape(title)
    if events.empty:
        return empty_figure(title, "no events in this iteration")
    data = _finite_frame(events, ("start_us", "dur_us")).dropna(subset=["start_us", "dur_us"])
    if data.empty:
        return empty_figure(title, "no events in this iteration")
    lanes = sorted(dict.fromkeys(data["lane"].astype(str)), key=_lane_order)
    fig = go.Figure()
    for kind in dict.fromkeys(data["kind"].astype(str)):
        part = data[data["kind"].astype(str) == kind]
        fig.add_trace(go.Bar(
            base=part["start_us"], x=part["dur_us"].clip(lower=0),
            y=[escape(lane) for lane in part["lane"].astype(str)], orientation="h",
            name=escape(kind), marker_color=TIMELINE_KIND_COLORS.get(kind, REST_COLOR),
            marker_line={"width": 1, "color": TIMELINE_KIND_COLORS.get(kind, REST_COLOR)},
            customdata=np.stack([[escape(n) for n in part["name"].astype(str)],
                                 [f"{v:,.1f}" for v in part["start_us"]],
                                 [f"{v:,.1f}" for v in part["dur_us"]]], axis=1),
            hovertemplate="%{customdata[0]}<br>from %{customdata[1]} us, lasting %{customdata[2]} us"
                          "<extra>%{y}</extra>"))
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=[escape(l) for l in lanes[::-1]],
                     automargin=True)
    end = float((data["start_us"] + data["dur_us"]).max())
    if span_us is not None and math.isfinite(span_us):
        end = max(end, float(span_us))
    fig.update_xaxes(title_text="us since the iteration started", range=[0, end * 1.01 or 1])
    return _layout(fig, title, height=max(230, 42 * len(lanes) + 150))


# ----------------------------------------------------------------------------- GPU (NVML)


# A gap between polled samples longer than this many typical intervals (and than
# NVML_MIN_GAP_S) is a pause: the line breaks there instead of ramping across it.
NVML_GAP_FACTOR = 5.0
NVML_MIN_GAP_S = 0.2
NVML_PAUSE_COLOR = "#7F7F7F"
# A panel whose readings barely move (an SM clock locked at 1,980 MHz) spans at least this many
# units, so its ticks are whole numbers and a flat line looks flat.
NVML_MIN_SPAN = 10.0


MAX_PAUSES = 50  # pauses shaded (the longest); a run pauses a few times, a crafted table could
# hold a gap between every two samples


def polling_gaps(times: np.ndarray, factor: float = NVML_GAP_FACTOR,
                 min_gap_s: float = NVML_MIN_GAP_S, limit: int = MAX_PAUSES
                 ) -> list[tuple[float, float]]:
    """The intervals (start, end) in seconds with no polled sample: gaps between consecutive
    sorted ``times`` longer than ``factor`` times their median spacing and than ``min_gap_s``
    (the sampler pauses polling for the timed trials; the driver's own samples still cover it).
    At most ``limit``, the longest, in time order."""
    times = np.sort(np.asarray(times, dtype=float)[np.isfinite(np.asarray(times, dtype=float))])
    if times.size < 3:
        return []
    steps = np.diff(times)
    typical = float(np.median(steps[steps > 0])) if (steps > 0).any() else 0.0
    found = np.flatnonzero(steps > max(factor * typical, min_gap_s))
    if found.size > limit:
        found = np.sort(found[np.argsort(steps[found], kind="stable")[::-1][:limit]])
    return [(float(times[i]), float(times[i + 1])) for i in found]


def _broken_at(x: np.ndarray, y: np.ndarray, gaps: Sequence[tuple[float, float]]
               ) -> tuple[np.ndarray, np.ndarray]:
    """``x``, ``y`` (sorted by x) with a NaN point inside each gap, so a line breaks there."""
    if not gaps:
        return x, y
    middles = np.array([(a + b) / 2 for a, b in gaps])
    where = np.searchsorted(x, middles)
    keep = (where > 0) & (where < x.size)
    return (np.insert(x, where[keep], middles[keep]),
            np.insert(y.astype(float), where[keep], np.nan))


def _panel_range(values: np.ndarray, min_span: float = NVML_MIN_SPAN) -> list[float] | None:
    """A y range for values that barely move: at least ``min_span`` wide around them (never
    below zero for readings that are not negative); None when they move enough for autorange."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    if high - low >= min_span:
        return None
    middle = (low + high) / 2
    span = max(min_span, (high - low) * 1.2)
    bottom = middle - span / 2
    if low >= 0 > bottom:
        bottom = 0.0
    return [bottom, bottom + span]


def phase_kind(name: str, modes: Iterable[str] = ()) -> tuple[str, str]:
    """A phase name split into (mode, kind): "eager timed" -> ("eager", "timed"), "graph
    warm-up" -> ("graph", "warm-up"); a name that does not start with a mode ("setup",
    "capture", "parity") -> ("", name)."""
    text = str(name)
    for mode in sorted({*MODE_COLORS, *map(str, modes)}, key=len, reverse=True):
        if text.startswith(mode + " ") and len(text) > len(mode) + 1:
            return mode, text[len(mode) + 1:]
    return "", text


def phase_kind_colors(kinds: Sequence[str]) -> dict[str, str]:
    """A colour per kind of phase (``PHASE_KIND_COLORS``, then ``PHASE_EXTRA_PALETTE`` in order
    for kinds it does not list), for at most ``MAX_PHASE_LEGEND`` kinds: the others are left to
    ``OTHER_PHASES_COLOR``."""
    colors: dict[str, str] = {}
    extra = iter(PHASE_EXTRA_PALETTE)
    for kind in list(dict.fromkeys(kinds))[:MAX_PHASE_LEGEND]:
        colors[kind] = PHASE_KIND_COLORS.get(kind) or next(extra, OTHER_PHASES_COLOR)
    return colors


ALL_MODES_LANE = "run"  # the lane of phases that belong to no one mode (setup, capture, parity)


def nvml_timeseries(nvml: pd.DataFrame, phases: pd.DataFrame,
                    panels: Iterable[tuple[str, str]] = NVML_PANELS, max_points: int = 5_000,
                    x_range: Sequence[float] | None = None,
                    empty_message: str = "no NVML samples in this run (NVML off or unavailable)"
                    ) -> go.Figure:
    """NVML metrics over the run, one panel each, with the run's phases shaded behind them and
    drawn as lanes under them (one lane per mode; a phase's colour is its kind: warm-up, timed,
    profiled...).

    Polled lines break where polling paused (the timed trials: ``polling_gaps``) and the pause
    is shaded; the driver's own samples (dots) cover it. A panel whose readings barely move keeps
    a span of ``NVML_MIN_SPAN`` units with whole-number ticks. ``x_range`` (seconds since the run
    started) zooms to part of the run: samples and phase bands outside it are left out, so each
    panel's y axis fits what is shown."""
    title = "GPU telemetry (NVML) over the run"
    if nvml.empty:
        return empty_figure(title, empty_message)
    panels = list(panels)
    nvml = _finite_frame(nvml, ("t_s", "value")).dropna(subset=["t_s"])
    phases = _finite_frame(phases, ("start_s", "end_s")).dropna(subset=["start_s", "end_s"])
    low = high = None
    if x_range is not None:
        low, high = (float(v) for v in x_range)
        if not (math.isfinite(low) and math.isfinite(high) and high > low):
            low = high = None
    polled = nvml[nvml["source"] == "poll"]
    gaps = polling_gaps(polled.drop_duplicates("t_s")["t_s"].to_numpy(dtype=float))
    if low is not None:
        nvml = nvml[(nvml["t_s"] >= low) & (nvml["t_s"] <= high)]
        phases = phases[(phases["end_s"] > low) & (phases["start_s"] < high)]
        gaps = [(max(a, low), min(b, high)) for a, b in gaps if b > low and a < high]
    bands, left_out = phase_bands(phases) if not phases.empty else (phases, 0)
    lane_row = len(panels) + 1 if not bands.empty else None
    rows = len(panels) + (1 if lane_row else 0)
    split = [(str(mode), str(kind)) for mode, kind in
             (phase_kind(p) for p in bands["phase"].astype(str))] if lane_row else []
    lanes = list(dict.fromkeys(mode or ALL_MODES_LANE for mode, _ in split))
    lane_height = (0.05 * len(lanes) + 0.04) if lane_row else 0.0
    heights = [(1.0 - lane_height) / len(panels)] * len(panels) + ([lane_height] if lane_row else [])
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.03,
                        row_heights=heights)
    values = nvml["value"]
    for row, (metric, label) in enumerate(panels, start=1):
        drawn = []
        for source, style in (("poll", "lines"), ("driver", "markers")):
            mask = (nvml["metric"] == metric) & (nvml["source"] == source) & values.notna()
            part = nvml[mask].sort_values("t_s")
            if part.empty:
                continue
            y = part["value"].to_numpy(dtype=float)
            keep = minmax_decimate(y, max_points)
            x, y = part["t_s"].to_numpy(dtype=float)[keep], y[keep]
            drawn.append(y)
            if style == "lines":
                x, y = _broken_at(x, y, gaps)
            fig.add_trace(go.Scattergl(
                x=x, y=y, mode=style, connectgaps=False,
                name=f"{label} ({'polled' if source == 'poll' else 'driver samples'})",
                line={"width": 1.5, "color": NVML_POLL_COLOR} if style == "lines" else None,
                marker={"size": 4, "color": NVML_DRIVER_COLOR} if style == "markers" else None,
                showlegend=False,
                hovertemplate="%{x:.2f} s: %{y:,.1f}<extra>%{fullData.name}</extra>"),
                row=row, col=1)
        fig.update_yaxes(title_text=label, row=row, col=1)
        fixed = _panel_range(np.concatenate(drawn)) if drawn else None
        if fixed is not None:
            fig.update_yaxes(range=fixed, tickformat=",.0f", row=row, col=1)
        if not drawn:
            fig.add_annotation(text="not reported by this GPU" if low is None else
                               "no sample in the phases shown", showarrow=False, row=row, col=1,
                               x=0.5, y=0.5, xref="x domain", yref="y domain")
    shapes = []
    subtitle = None
    panels_bottom = float(fig.get_subplot(len(panels), 1).yaxis.domain[0])
    if lane_row:
        if left_out:
            subtitle = (f"{len(bands):,} of {len(bands) + left_out:,} phase blocks shaded (the "
                        "longest); zoom to fewer phases to see the others")
        colors = phase_kind_colors([kind for _, kind in split])
        kinds_left = len(dict.fromkeys(kind for _, kind in split)) - len(colors)
        for (phase, start, end), (_, kind) in zip(
                bands[["phase", "start_s", "end_s"]].itertuples(index=False), split):
            # one band through every panel (the x axes are shared), not the lanes
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": float(start),
                           "x1": float(end), "y0": panels_bottom, "y1": 1, "fillcolor": colors.get(kind, OTHER_PHASES_COLOR),
                           "opacity": PHASE_BAND_OPACITY, "line": {"width": 0}, "layer": "below"})
        frame = pd.DataFrame({"lane": [m or ALL_MODES_LANE for m, _ in split],
                              "kind": [k if k in colors else "" for _, k in split],
                              "phase": bands["phase"].astype(str).to_numpy(),
                              "start": bands["start_s"].to_numpy(dtype=float),
                              "end": bands["end_s"].to_numpy(dtype=float)})
        legend = [(kind, color) for kind, color in colors.items()]
        if kinds_left:
            legend.append(("", OTHER_PHASES_COLOR))
        for kind, color in legend:  # one trace, and one legend entry, per kind of phase
            part = frame[frame["kind"] == kind]
            name = escape(kind) if kind else f"{kinds_left:,} other kinds of phase"
            fig.add_trace(go.Bar(
                base=part["start"], x=(part["end"] - part["start"]).clip(lower=0),
                y=[escape(lane) for lane in part["lane"]], orientation="h", name=name,
                marker={"color": color, "line": {"width": 0}}, width=0.7,
                customdata=np.stack([[escape(p) for p in part["phase"]],
                                     [f"{v:,.3f}" for v in part["start"]],
                                     [f"{v:,.3f}" for v in part["end"]]], axis=1)
                if len(part) else None,
                hovertemplate="%{customdata[0]}: %{customdata[1]}-%{customdata[2]} s"
                              "<extra></extra>"), row=lane_row, col=1)
        fig.update_yaxes(categoryorder="array", categoryarray=[escape(l) for l in lanes[::-1]],
                         title_text="phase", row=lane_row, col=1)
        fig.update_layout(barmode="overlay")
    for start, end in gaps:  # where polling paused: a grey veil with dotted edges
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": end,
                       "y0": panels_bottom, "y1": 1, "fillcolor": NVML_PAUSE_COLOR, "opacity": 0.15,
                       "line": {"width": 1, "dash": "dot", "color": NVML_PAUSE_COLOR},
                       "layer": "above"})
        fig.add_annotation(x=(start + end) / 2, y=1, xref="x", yref="paper", yanchor="bottom",
                           text="polling paused", showarrow=False,
                           font={"size": 11, "color": NVML_PAUSE_COLOR})
    if gaps:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="polling paused "
                                 "(driver samples only)",
                                 marker={"size": 12, "symbol": "square", "color": NVML_PAUSE_COLOR,
                                         "opacity": 0.4}), row=1, col=1)
    if shapes:
        fig.update_layout(shapes=shapes)
    if low is not None:
        fig.update_xaxes(range=[low, high])
    fig.update_xaxes(title_text="seconds since the run started", row=rows, col=1)
    # the legend (a dozen kinds of phase) sits under the chart, where it never covers the title
    # or the panels however many rows it wraps to
    entries = sum(1 for trace in fig.data if trace.showlegend is not False)
    legend_px = 24 * math.ceil(entries / 5) + 10
    return _layout(fig, title, height=170 * len(panels) + 160 + legend_px
                   + (30 * len(lanes) + 30 if lane_row else 0),
                   subtitle=subtitle, showlegend=True,
                   legend={"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom",
                           "x": 0, "xanchor": "left"},
                   margin={"l": 60, "r": 20, "t": 90 if subtitle else 70, "b": 50 + legend_px})


def phase_bands(phases: pd.DataFrame, max_bands: int = MAX_PHASE_BANDS
                ) -> tuple[pd.DataFrame, int]:
    """The phase blocks to shade, at most ``max_bands`` (the longest, in their order), and how
    many were left out. Every band is a shape the browser draws: a run's phases are a few
    hundred at most, a crafted table could hold a million."""
    if len(phases) <= max_bands:
        return phases, 0
    length = phases["end_s"] - phases["start_s"]
    keep = length.rank(method="first", ascending=False) <= max_bands
    return phases[keep], int((~keep).sum())


# ----------------------------------------------------------------------------- kernels


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


def _unique(labels: Sequence[str]) -> list[str]:
    """Category labels made distinct (two kernels with one short name would share a bar):
    a repeated label gets ' (2)', ' (3)'..."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def _operators(kernels: pd.DataFrame) -> list[str]:
    """Each row's launching operator for hover text, escaped ('not recorded' when the run has
    none: recorded before the operator column, or not found in the trace)."""
    column = kernels["operator"] if "operator" in kernels else pd.Series("", index=kernels.index)
    return [escape(str(op)) if isinstance(op, str) and op else "(not recorded)" for op in column]


def kernel_top_bar(kernels: pd.DataFrame, mode: str, top_n: int = 10) -> go.Figure:
    """The ``top_n`` kernels of one mode by total GPU time (horizontal bars, biggest on top)."""
    title = f"Under the profiler: top {top_n} kernels by GPU time, {escape(mode)}"
    part = kernels[kernels["mode"].astype(str) == mode] if not kernels.empty else kernels
    part = _finite_frame(part, ("total_us", "share_of_gpu_pct", "calls_per_iter", "mean_us"))
    part = part.dropna(subset=["total_us"]) if not part.empty else part
    if part.empty:
        return empty_figure(title, f"no kernels recorded for {mode}")
    top = part.sort_values("total_us", ascending=False).head(top_n)
    names = _unique([escape(_short(n)) for n in top["kernel"].astype(str)])[::-1]
    top = top.iloc[::-1]
    fig = go.Figure(go.Bar(
        x=top["total_us"], y=names, orientation="h", marker_color=_color(mode),
        text=[f"{s:.1f}%" if np.isfinite(s) else "" for s in top["share_of_gpu_pct"]],
        textposition="auto",
        customdata=np.stack([[escape(n) for n in top["kernel_full"].astype(str)],
                             _number_text(top["calls_per_iter"].to_numpy(dtype=float), "{:,.0f}"),
                             _number_text(top["mean_us"].to_numpy(dtype=float), "{:,.2f}"),
                             _operators(top)], axis=1),
        hovertemplate="%{customdata[0]}<br>launched by %{customdata[3]}<br>total %{x:,.1f} us, "
                      "%{customdata[1]} calls/iter, mean %{customdata[2]} us<extra></extra>"))
    fig.update_xaxes(title_text="GPU time (us, profiled window)")
    fig.update_yaxes(automargin=True)
    return _layout(fig, title, height=max(260, 28 * len(top) + 120), showlegend=False)


def kernel_diff_bars(diff: pd.DataFrame, top_n: int = 15) -> go.Figure:
    """Eager vs another mode, GPU time per iteration of each kernel (``analysis.kernel_diff``, whose
    columns name the mode): the ``top_n`` kernels with the largest time in either, side by side."""
    other = next((c[:-len("_us_per_iter")] for c in diff.columns
                  if c.endswith("_us_per_iter") and c != "eager_us_per_iter"), "graph")
    title = (f"Under the profiler: kernels eager vs {escape(other)}, GPU time per iteration "
             f"(top {top_n})")
    if diff.empty:
        return empty_figure(title, "no kernels to compare")
    pair = ("eager", other)
    diff = _finite_frame(diff, [f"{mode}_us_per_iter" for mode in pair])
    size = diff[[f"{mode}_us_per_iter" for mode in pair]].max(axis=1, skipna=True)
    top = diff.assign(_size=size.fillna(0)).sort_values("_size", ascending=False).head(top_n)
    names = _unique([escape(_short(n)) for n in top["kernel"].astype(str)])[::-1]
    top = top.iloc[::-1]
    full = np.stack([[escape(n) for n in top["kernel_full"].astype(str)], _operators(top)], axis=1)
    fig = go.Figure()
    for mode in pair:
        values = top[f"{mode}_us_per_iter"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=values, y=names, orientation="h", name=escape(mode),
                             marker_color=_color(mode), customdata=full,
                             hovertemplate="%{customdata[0]}<br>launched by %{customdata[1]}<br>"
                                           "%{fullData.name}: %{x:,.2f} us per iteration"
                                           "<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_xaxes(title_text="GPU time per iteration (us, profiled window)")
    fig.update_yaxes(automargin=True)
    return _layout(fig, title, height=max(280, 34 * len(top) + 130))


# ----------------------------------------------------------------------------- counters


def counter_bars(lessons: pd.DataFrame) -> go.Figure:
    """The static counter after each phase: predicted by the article's rule vs observed."""
    title = "Static counter after each phase"
    if lessons.empty:
        return empty_figure(title)
    phases = [escape(p) for p in lessons["phase"].astype(str)]
    fig = go.Figure()
    for column, color in COUNTER_COLORS.items():
        values = finite(lessons[column])
        fig.add_trace(go.Bar(x=phases, y=values, name=column, marker_color=color,
                             hovertemplate="%{fullData.name}: %{y}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="counter value", rangemode="tozero")
    return _layout(fig, title)


# ----------------------------------------------------------------------------- comparing runs

COMPARE_COLUMNS = ["run", "mode", "method", "median_ms", "p10_ms", "p90_ms"]


def compare_medians(frame: pd.DataFrame, log_scale: bool = False) -> go.Figure:
    """Median per step for any number of runs: ``frame`` has ``COMPARE_COLUMNS`` (``method``: how
    that run's bars were timed, in words; written under each run's name on the axis). Each bar
    has its own place on a two-level axis (run, then mode with its median written under the bar,
    never on it: a wide p10-p90 whisker would cross a label on the bar). A log axis keeps runs that
    differ by orders of magnitude (a CPU run beside a GPU run) readable."""
    title = "Median time per step, run by run (whiskers: p10-p90)"
    data = _finite_frame(frame, ("median_ms", "p10_ms", "p90_ms")).dropna(subset=["median_ms"]) \
        if not frame.empty else frame
    if data.empty:
        return empty_figure(title)
    method = data["method"] if "method" in data else pd.Series([""] * len(data), index=data.index)
    # narrow labels: a run's timing method wrapped, a long mode name broken after '_', so a run
    # of five modes beside a run of one keeps its words apart
    data = data.assign(_x=[f"{escape(r)}<br>{_wrap(str(m), 16)}" if str(m) else escape(r)
                           for r, m in zip(data["run"], method)],
                       _bar=[f"{_tick_name(mode)}<br>{float(v):.3f} ms"
                             for mode, v in zip(data["mode"], data["median_ms"])])
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data)):
        part = data[data["mode"].astype(str) == mode]
        median = part["median_ms"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(
            x=[part["_x"].tolist(), part["_bar"].tolist()], y=median, name=escape(mode),
            marker_color=_color(mode, i), showlegend=False,  # each bar is named on the axis
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
    return _layout(fig, title, height=HEIGHT + 80, margin={"l": 60, "r": 20, "t": 60, "b": 150})


def log_ticks(low: float, high: float, max_ticks: int = 12) -> dict:
    """Ticks for a log axis from ``low`` to ``high``, each written in full: 1-2-5 steps per
    decade ("0.5, 1, 2, 5, 10, 20, 50, 100"), or only the powers of ten when that would be too
    many. Plotly's own log ticks shorten 20 and 50 to "2" and "5" ("10, 2, 5, 100")."""
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high <= 0:
        return {}
    low, high = min(low, high), max(low, high)
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    values: list[float] = []
    for steps in ((1, 2, 5), (1,)):
        values = [d * 10.0 ** e for e in range(first, last + 1) for d in steps]
        below = [v for v in values if v <= low]
        above = [v for v in values if v >= high]
        values = [v for v in values if (below and v >= below[-1] or not below)
                  and (above and v <= above[0] or not above)]
        if len(values) <= max_ticks or steps == (1,):
            break
    if len(values) > max_ticks:  # many decades: every few powers of ten
        values = values[::math.ceil(len(values) / max_ticks)]
    if sum(low <= v <= high for v in values) < 2:  # within one step: Plotly's own ticks, in full
        return {}
    return {"tickvals": values, "ticktext": [_tick_text(v) for v in values]}


def _tick_text(value: float) -> str:
    """1000 -> '1,000'; 0.05 -> '0.05'; 2e-05 -> '2e-05' (no rounding to a neighbour)."""
    if value >= 1:
        return f"{value:,.0f}"
    return f"{value:.{max(0, -math.floor(math.log10(value)))}f}" if value >= 1e-4 else f"{value:g}"


# ----------------------------------------------------------------------------- modes


def modes_speedup_bars(modes: pd.DataFrame) -> go.Figure:
    """Every timed mode's steady-state speedup over eager, with its 95% CI, and (hover) its
    one-time cost: how the ways of graphing a step compare on this step."""
    title = "Speedup over eager, mode by mode (whiskers: 95% CI)"
    data = _finite_frame(modes, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
        .dropna(subset=["speedup"]) if not modes.empty else modes
    if data.empty:
        return empty_figure(title, "no modes table in this run (recorded before modes existed)")
    speedup = data["speedup"].to_numpy(dtype=float)
    names = [escape(mode) for mode in data["mode"].astype(str)]
    fig = go.Figure(go.Bar(
        x=names, y=speedup, marker_color=[_color(str(mode), i) for i, mode in enumerate(data["mode"])],
        error_y={"type": "data", "symmetric": False,
                 "array": np.nan_to_num(np.clip(data["speedup_ci_high"].to_numpy(dtype=float) - speedup, 0, None)),
                 "arrayminus": np.nan_to_num(np.clip(speedup - data["speedup_ci_low"].to_numpy(dtype=float), 0, None))},
        customdata=np.stack([data["median_ms"].to_numpy(dtype=float),
                             data["one_time_ms"].to_numpy(dtype=float)], axis=1),
        hovertemplate="%{x}: %{y:.2f}x, %{customdata[0]:.4f} ms per step<br>one-time cost "
                      "%{customdata[1]:,.1f} ms<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text="eager",
                  annotation_position="bottom right")
    # each speedup written under its bar, never on it, where its CI whisker runs
    fig.update_xaxes(tickvals=names, tickangle=0,
                     ticktext=[f"{_tick_name(str(mode))}<br><b>{value:.2f}x</b>"
                               for mode, value in zip(data["mode"], speedup)])
    fig.update_yaxes(title_text="speedup over eager (x)", rangemode="tozero")
    return _layout(fig, title, showlegend=False)


# ----------------------------------------------------------------------------- overlaying runs

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
    """Speedup over eager with its 95% CI, run by run (``analysis.SPEEDUP_ROW_COLUMNS``): one
    marker per run and mode, the runs on the x axis in the order given, a line at 1x. The y axis
    holds every marker, CI and label. ``missing`` (run -> why) keeps the runs that have no
    speedup on the axis, each with its reason written where its marker would be. ``order``: the
    runs in the order of the x axis (by default as they come, then the missing ones)."""
    title = "Speedup over eager, run by run (whiskers: 95% CI)"
    missing = dict(missing or {})
    data = _finite_frame(frame, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
        .dropna(subset=["speedup"]) if not frame.empty else frame
    if data.empty and not missing:
        return empty_figure(title, "none of these runs has a speedup (CPU runs time eager only)")
    order = list(dict.fromkeys([*(str(run) for run in (order or [])),
                                *(str(run) for run in (data["run"] if len(data) else [])),
                                *missing]))
    fig = go.Figure()
    for i, mode in enumerate(ordered_modes(data) if len(data) else []):
        part = data[data["mode"].astype(str) == mode]
        speedup = part["speedup"].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(
            x=[escape(run) for run in part["run"]], y=speedup, mode="markers+text",
            name=escape(mode), marker={"color": _color(mode, i), "size": 11},
            error_y={"type": "data", "symmetric": False,
                     "array": np.nan_to_num(np.clip(part["speedup_ci_high"].to_numpy(dtype=float)
                                                    - speedup, 0, None)),
                     "arrayminus": np.nan_to_num(np.clip(
                         speedup - part["speedup_ci_low"].to_numpy(dtype=float), 0, None))},
            text=[f"{value:.2f}x" for value in speedup], textposition="middle right",
            cliponaxis=False,
            hovertemplate="%{x}, %{fullData.name}: %{y:.2f}x<extra></extra>"))
    for run, why in missing.items():  # said where its marker would be, not left out in silence
        fig.add_annotation(x=escape(run), y=1.0, yshift=18, text=_wrap(f"no speedup: {why}", 28),
                           showarrow=False, font={"size": 11, "color": "#888"})
    fig.add_hline(y=1.0, line_dash="dot", line_color="#888", annotation_text="eager (1x)",
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
    return _layout(fig, title)


def _nice_step(rough: float) -> float:
    """The 1-2-5 step (..., 0.5, 1, 2, 5, 10, ...) at or above ``rough``."""
    if not math.isfinite(rough) or rough <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(rough))
    return next(d * power for d in (1, 2, 5, 10) if d * power >= rough - 1e-12)


def compare_latency_ecdf(frame: pd.DataFrame, log_scale: bool = False,
                         points: int = 400) -> go.Figure:
    """The runs' distributions of time per step overlaid (``analysis.OVERLAY_STEP_COLUMNS``):
    one panel per mode, one ECDF line per run (its colour the same in every panel), drawn at
    ``points`` evenly spaced quantiles plus the minimum and maximum."""
    title = "Time per step, run by run (cumulative distribution)"
    data = _finite_frame(frame, ("ms",)).dropna(subset=["ms"]) if not frame.empty else frame
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
    return _layout(fig, title, legend={"orientation": "h", "yanchor": "bottom", "y": 1.1, "x": 0,
                                       "xanchor": "left"},
                   margin={"l": 60, "r": 20, "t": 110, "b": 50})


# ----------------------------------------------------------------------------- sweeps

SWEEP_THRESHOLD_COLOR = "#A3ABB8"
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
    data = _finite_frame(table, ("speedup", "speedup_ci_low", "speedup_ci_high")) \
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
        found = _finite_frame(crossovers, ("crossover",)).dropna(subset=["crossover"])
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
    return _layout(fig, title, height=HEIGHT + 40)


def sweep_medians(table: pd.DataFrame, x: str, numeric: bool = True, log_x: bool = False,
                  log_y: bool = False) -> go.Figure:
    """Eager's and each mode's median time per training step against ``x``, with the point's
    GPU-busy floor (dotted): how close a graph comes to the GPU's own work. ``table`` is
    ``sweep.speedup_table``, or for a sweep without a graph timing (a CPU sweep)
    ``sweep.eager_table``: eager's medians alone."""
    data = _finite_frame(table, ("eager_ms", "mode_ms", "floor_ms")) if not table.empty else table
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
    return _layout(fig, title, height=HEIGHT + 40)


def sweep_heatmap(table: pd.DataFrame, x: str, y: str, mode: str = "graph",
                  threshold: float = math.nan) -> go.Figure:
    """The speedup of ``mode`` for every pair of the two swept parameters (text: the speedup; a
    cell below ``threshold`` is marked with a trailing asterisk)."""
    title = f"Speedup of {escape(mode)} over eager: {escape(y)} against {escape(x)}"
    data = _finite_frame(table, ("speedup",)) if not table.empty else table
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
    return _layout(fig, title, height=HEIGHT + 40, subtitle=subtitle)


def sweep_amortisation(amortisation: pd.DataFrame) -> go.Figure:
    """The graph's time per training step against the steps captured in one graph
    (``profiler_core.sweep.core.amortisation_table``), approaching the GPU-busy floor (dotted), beside
    eager (dashed)."""
    title = "Amortisation: time per training step against iterations per graph"
    data = _finite_frame(amortisation, ("graph_ms", "eager_ms", "floor_ms")) \
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
    return _layout(fig, title, height=HEIGHT + 40)


# ----------------------------------------------------------------------------- prediction before capture

# The predicted parts keep the dashboard's meanings: GPU busy green, the GPU's gaps (a graph's
# launch and per-node costs) in idle greys, the batch copy in the timeline's memcpy colour; the
# measured graph time in the graph's mode colour.
PREDICTION_PART_COLORS = {"GPU busy (eager)": SPLIT_COLORS["gpu_busy_us"], "launch": "#7F8C9A",
                          "per-node cost": SPLIT_COLORS["gpu_idle_us"],
                          "batch copy": TIMELINE_KIND_COLORS["memcpy/memset"],
                          "graph, steady state": MODE_COLORS["graph"]}


def prediction_bars(parts: pd.DataFrame) -> go.Figure:
    """The graph time per step predicted before capture, in its parts, beside the measured one
    (``profiler_core.analysis.predict.prediction_parts``: bar, part, us)."""
    title = "Graph time per step: predicted before capture vs measured"
    data = _finite_frame(parts, ("us",)).dropna(subset=["us"]) if not parts.empty else parts
    if data.empty:
        return empty_figure(title, "no prediction in this run")
    fig = go.Figure()
    for index, (part, rows) in enumerate(data.groupby("part", sort=False)):
        fig.add_trace(go.Bar(
            y=[escape(bar) for bar in rows["bar"]], x=rows["us"], name=escape(part),
            orientation="h", marker_color=PREDICTION_PART_COLORS.get(str(part), _color(str(part), index)),
            hovertemplate="%{fullData.name}: %{x:,.2f} us per step<extra></extra>"))
    totals = data.groupby("bar", sort=False)["us"].sum()
    fig.add_trace(go.Scatter(y=[escape(bar) for bar in totals.index], x=totals.to_numpy(),
                             mode="text", text=[f" {value:,.1f} us" for value in totals.to_numpy()],
                             textposition="middle right", showlegend=False, hoverinfo="skip"))
    fig.update_xaxes(title_text="us per training step", range=[0, float(totals.max()) * 1.18])
    fig.update_yaxes(autorange="reversed")
    layout = _layout(fig, title, height=260, barmode="stack")
    layout.update_layout(legend_traceorder="normal")
    return layout


# ----------------------------------------------------------------------------- repeats

SHOWN_COLOR = "#2E86AB"  # the process whose tables the run folder holds
OTHER_PROCESS_COLOR = "#8A94A6"


def repeats_chart(repeats: pd.DataFrame) -> go.Figure:
    """A run measured in several fresh processes (repeats.csv): each process's speedup with its
    own 95% CI as whiskers, the one the run folder holds (the median) marked, a line at the median
    over processes. A run without a graph (CPU) shows each process's eager time per step."""
    data = _finite_frame(repeats, ("repeat", "speedup", "speedup_ci_low", "speedup_ci_high",
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
    fig.add_hline(y=middle, line_dash="dot", line_color="#888",
                  annotation_text=f"median {middle:.2f}x" if with_speedup else f"median {middle:.4f} ms",
                  annotation_position="top left")
    fig.update_xaxes(title_text="fresh process, in the order they ran", type="category",
                     categoryorder="array",
                     categoryarray=[f"#{int(r)}" for r in sorted(data["repeat"])])
    fig.update_yaxes(title_text="speedup over eager (x)" if with_speedup else "ms per step",
                     rangemode="tozero")
    return _layout(fig, title, showlegend=True)
