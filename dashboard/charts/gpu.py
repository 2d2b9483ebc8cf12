"""The GPU view's figure: NVML telemetry over the run, with the run's phases shaded behind the
panels and drawn as lanes under them, and the pauses of polling shown as such.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.charts.common import (
    MODE_COLORS,
    apply_layout,
    empty_figure,
    escape,
    finite_frame,
    minmax_decimate,
)
from dashboard.charts.palette import (
    OTHER_PHASES_COLOR,
    PHASE_COLORS,
    PHASE_EXTRA_COLORS,
    REFERENCE_COLOR,
    SERIES_COLORS,
)

# The GPU chart's phase bands: at most this many shapes, and legend entries for this many kinds
# of phase (the others share one grey entry). A run has about 70 blocks and 15 phase names, of
# about 10 kinds.
MAX_PHASE_BANDS = 400
MAX_PHASE_LEGEND = 24
# A phase is named "<mode> <kind>" ("eager timed", "graph warm-up") or by its kind alone
# ("setup", "capture", "parity"): its band is coloured by its kind (``palette.PHASE_COLORS``),
# every kind its own hue (the mode is the lane it is drawn in, under the panels). Kinds not
# listed take ``palette.PHASE_EXTRA_COLORS``, then ``palette.OTHER_PHASES_COLOR``.
PHASE_KIND_COLORS = PHASE_COLORS
PHASE_BAND_OPACITY = 0.22
NVML_PANELS = (
    ("gpu_util_pct", "GPU util (%)"),
    ("sm_clock_mhz", "SM clock (MHz)"),
    ("power_w", "power (W)"),
    ("mem_used_mib", "memory (MiB)"),
)
NVML_POLL_COLOR = SERIES_COLORS[2]
NVML_DRIVER_COLOR = SERIES_COLORS[4]

# A gap between polled samples longer than this many typical intervals (and than
# NVML_MIN_GAP_S) is a pause: the line breaks there instead of ramping across it.
NVML_GAP_FACTOR = 5.0
NVML_MIN_GAP_S = 0.2
NVML_PAUSE_COLOR = REFERENCE_COLOR
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
    """A colour per kind of phase (``PHASE_KIND_COLORS``, then ``PHASE_EXTRA_COLORS`` in order
    for kinds it does not list), for at most ``MAX_PHASE_LEGEND`` kinds: the others are left to
    ``OTHER_PHASES_COLOR``."""
    colors: dict[str, str] = {}
    extra = iter(PHASE_EXTRA_COLORS)
    for kind in list(dict.fromkeys(kinds))[:MAX_PHASE_LEGEND]:
        known = PHASE_KIND_COLORS.get(kind)
        colors[kind] = known if known is not None else next(extra, OTHER_PHASES_COLOR)
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
    nvml = finite_frame(nvml, ("t_s", "value")).dropna(subset=["t_s"])
    phases = finite_frame(phases, ("start_s", "end_s")).dropna(subset=["start_s", "end_s"])
    window: tuple[float, float] | None = None  # the x range shown, when one is asked for
    if x_range is not None:
        low, high = (float(v) for v in x_range)
        if math.isfinite(low) and math.isfinite(high) and high > low:
            window = (low, high)
    polled = nvml[nvml["source"] == "poll"]
    gaps = polling_gaps(polled.drop_duplicates("t_s")["t_s"].to_numpy(dtype=float))
    if window is not None:
        low, high = window
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
            fig.add_annotation(text="not reported by this GPU" if window is None else
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
        for (_phase, start, end), (_, kind) in zip(
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
        fig.update_yaxes(categoryorder="array", categoryarray=[escape(lane) for lane in lanes[::-1]],
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
    if window is not None:
        fig.update_xaxes(range=list(window))
    fig.update_xaxes(title_text="seconds since the run started", row=rows, col=1)
    # the legend (a dozen kinds of phase) sits under the chart, where it never covers the title
    # or the panels however many rows it wraps to
    entries = sum(1 for trace in fig.data if trace.showlegend is not False)
    legend_px = 24 * math.ceil(entries / 5) + 10
    return apply_layout(fig, title, height=170 * len(panels) + 160 + legend_px
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
