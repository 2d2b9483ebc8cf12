"""What every figure shares: the colours and their meanings, the layout, escaping run text,
finite numbers, axis ticks and decimation of long series.

Colours mean one thing everywhere (``dashboard.charts.palette`` declares them): each mode has its
colour (``profiler_core.spec.modes``); the parts of a step keep theirs in every chart (CPU launch
amber, other CPU work purple, GPU busy green, GPU idle grey...), so green always means "the GPU
was busy", never "a decrease". The colours are mid tones that read on Streamlit's light and dark
themes alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.palette import MODE_COLORS, SERIES_COLORS, STEP_PART_COLORS
from profiler_core.spec.metrics import SPECS as METRIC_SPECS

# The palettes (``dashboard.charts.palette``): the modes, and the four parts of a step under their
# launch-split column names, named as their figures are declared (``spec.metrics``).
SPLIT_COLORS = {f"{part}_us": STEP_PART_COLORS[part]
                for part in ("cpu_launch", "cpu_other", "gpu_busy", "gpu_idle")}
SPLIT_LABELS = {name: METRIC_SPECS[name].short for name in SPLIT_COLORS}
# Lines that are neither a mode nor a part of a step (runs of an overlay, sweep series, a mode this
# dashboard has no colour for): ``palette.SERIES_COLORS``, kept apart from every mode, part and
# phase colour, so orange always means eager and blue the graph, and at least 50 from both
# themes' backgrounds, so a line reads on light and dark. Runs beyond the palette also change
# their dash (``run_line``).
SERIES_PALETTE = list(SERIES_COLORS)
RUN_DASHES = ["solid", "dash", "dot", "dashdot"]

HEIGHT = 380
# Lanes and event kinds of the one-iteration timeline (``profiler_core.analysis.timeline.iteration_timeline``).
TIMELINE_KIND_COLORS = {
    "CPU op": STEP_PART_COLORS["cpu_other"],
    "launch call": STEP_PART_COLORS["cpu_launch"],
    "kernel": STEP_PART_COLORS["gpu_busy"],
    "memcpy/memset": STEP_PART_COLORS["batch_copy"],
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


def finite_frame(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """A copy with ``columns`` numeric and every non-finite value NaN."""
    out = frame.copy()
    for column in columns:
        if column in out:
            out[column] = finite(out[column])
    return out


def mode_color(mode: str, index: int = 0) -> str:
    return MODE_COLORS.get(str(mode), SERIES_PALETTE[index % len(SERIES_PALETTE)])


def apply_layout(fig: go.Figure, title: str, height: int = HEIGHT, subtitle: str | None = None,
            **kwargs) -> go.Figure:
    layout = {"title": {"text": title, "y": 0.99, "yref": "container", "yanchor": "top",
                        **({"subtitle": {"text": subtitle}} if subtitle else {})},
              "height": height, "margin": {"l": 60, "r": 20, "t": 76, "b": 50},
              "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "xanchor": "left"}}
    layout.update(kwargs)
    fig.update_layout(**layout)
    return fig


EMPTY_LINE_CHARS = 56  # an empty figure's message, in lines that fit a chart half a page wide


def empty_figure(title: str, message: str = "no data in this run") -> go.Figure:
    """A figure that says there is nothing to draw (keeps the page layout stable). ``title`` is
    the chart's own title (its run data already escaped by the caller, its markup kept);
    ``message`` is escaped here, in lines of about ``EMPTY_LINE_CHARS`` characters."""
    fig = go.Figure()
    fig.add_annotation(text=wrap(message, EMPTY_LINE_CHARS), showarrow=False, x=0.5, y=0.5,
                       xref="paper", yref="paper", font={"size": 14})
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return apply_layout(fig, title, height=220)


def plural(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def tick_name(mode: str, width: int = 10) -> str:
    """A mode's name for an axis tick, escaped, broken after '_' when longer than ``width``
    ('graphed_<br>callables'), so five modes' ticks stand upright side by side."""
    text = escape(mode)
    return text.replace("_", "_<br>") if len(str(mode)) > width else text


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


def wrap(label: str, width: int = 22) -> str:
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


def number_text(values: np.ndarray, pattern: str = "{:,.0f}") -> list[str]:
    return [pattern.format(v) if np.isfinite(v) else "" for v in values]


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
