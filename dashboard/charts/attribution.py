"""The launch split's figures: where a profiled iteration's time goes (CPU launch, other CPU work,
GPU busy, GPU idle), the waterfalls from eager's step to a mode's, launches and kernels per
iteration, and one profiled iteration as a timeline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboard.analysis.launch_split import (
    RESIDUAL_COMPONENTS,
    TIMELINE_OF_COMPONENT,
    TOTAL_COMPONENT,
)
from dashboard.analysis.saving import attribution_parts
from dashboard.charts.common import (
    MODE_COLORS,
    SPLIT_COLORS,
    SPLIT_LABELS,
    STEP_PART_COLORS,
    TIMELINE_KIND_COLORS,
    apply_layout,
    empty_figure,
    escape,
    finite_frame,
    mode_color,
    number_text,
)
from dashboard.charts.palette import REFERENCE_COLOR
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS


def split_bars(medians: pd.DataFrame, empty_message: str = "no profiled window in this run "
               "(profiler off)") -> go.Figure:
    """Per mode, two stacked bars: the CPU side (launch + other) and the GPU side (busy + idle)."""
    title = "Under the profiler: where an iteration's time goes (medians)"
    if medians.empty:
        return empty_figure(title, empty_message)
    medians = finite_frame(medians, SPLIT_COLORS)
    modes = [escape(m) for m in medians["mode"].astype(str)]
    fig = go.Figure()
    for side, parts in (("CPU", ("cpu_launch_us", "cpu_other_us")),
                        ("GPU", ("gpu_busy_us", "gpu_idle_us"))):
        for part in parts:
            values = medians[part].to_numpy(dtype=float)
            fig.add_trace(go.Bar(
                x=[modes, [side] * len(modes)], y=values, name=SPLIT_LABELS[part],
                marker_color=SPLIT_COLORS[part], text=number_text(values),
                textposition="inside", insidetextanchor="middle",
                hovertemplate="%{fullData.name}: %{y:,.1f} us<extra>%{x}</extra>"))
    fig.update_layout(barmode="stack", legend_traceorder="normal", uniformtext_minsize=9,
                      uniformtext_mode="hide")
    fig.update_yaxes(title_text="us per iteration")
    return apply_layout(fig, title, height=420)


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
    breakdown = finite_frame(breakdown, ("eager_us", "mode_us", "saving_us"))
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


# The rests of a side's span (``launch_split.RESIDUAL_COMPONENTS``): each its own part of a step.
RESIDUAL_COLORS = {RESIDUAL_COMPONENTS["CPU"]: STEP_PART_COLORS["cpu_waiting"],
                   RESIDUAL_COMPONENTS["GPU"]: STEP_PART_COLORS["not_attributed"]}


def _step_color(component: str) -> str:
    if component in MODE_COLORS:
        return MODE_COLORS[component]
    return SPLIT_COLORS.get(f"{component}_us") or RESIDUAL_COLORS.get(
        component, STEP_PART_COLORS["not_attributed"])


def _waterfall_bars(values: Iterable[float], measures: Iterable[str]) -> tuple[list[float], list[float]]:
    """Each waterfall bar's base and height: a "relative" step starts at the running level and
    moves it by its value; any other step (a total) stands on zero and sets the level."""
    bases: list[float] = []
    heights: list[float] = []
    level = 0.0
    for value, measure in zip(values, measures):
        bases.append(level if measure == "relative" else 0.0)
        heights.append(value)
        level = level + value if measure == "relative" else value
    return bases, heights


def _fit_labels(fig: go.Figure, tops: list[float], bottoms: list[float]) -> None:
    """A y range with room for the bars' outside labels: 14% of the span above the tallest bar,
    and below the lowest where it goes under zero."""
    top, bottom = max(tops), min(bottoms)
    pad = 0.14 * max(top - bottom, 1e-9)
    fig.update_yaxes(range=[bottom - (pad if bottom < 0 else 0), top + pad])


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
        values = [float(v) if math.isfinite(float(v)) else 0.0 for v in steps["value"]]
        bases, heights = _waterfall_bars(values, steps["measure"])
        tops += [max(base, base + height) for base, height in zip(bases, heights)]
        bottoms += [min(base, base + height) for base, height in zip(bases, heights)]
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
                          line={"color": REFERENCE_COLOR, "width": 1, "dash": "dot"}, row=1, col=col)
    _fit_labels(fig, tops, bottoms)
    fig.update_yaxes(title_text="us per profiled iteration", row=1, col=1)
    fig.update_layout(bargap=0.35)
    return apply_layout(fig, title, height=420, showlegend=False,
                   margin={"l": 60, "r": 20, "t": 80, "b": 60})


# The attribution's parts (``profiler_core.analysis.attribution.PARTS``) as waterfall steps: label, colour.
ATTRIBUTION_STEPS = {
    "gpu_kernels": ("kernel time changed", STEP_PART_COLORS["gpu_busy"]),
    "input_copy": ("batch copy added", STEP_PART_COLORS["batch_copy"]),
    "gpu_idle": ("GPU idle removed", STEP_PART_COLORS["gpu_idle"]),
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
    parts = attribution_parts(attribution, other)
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
    host = attribution_parts(attribution, other)["host_issue"]
    beside = all(math.isfinite(v) for v in host)
    fig = make_subplots(rows=1, cols=2 if beside else 1, shared_yaxes=True,
                        horizontal_spacing=0.06, column_widths=[0.76, 0.24] if beside else None,
                        subplot_titles=["parts of the step (add up to it)",
                                        "host time to issue a step<br>(not part of the sum)"]
                        if beside else None)
    bases, heights = _waterfall_bars(steps["value"].astype(float), steps["measure"])
    colors = {c: color for c, (_, color) in ATTRIBUTION_STEPS.items()}
    text = [f"{v:+,.0f}" if m == "relative" and abs(v) >= 10 else
            f"{v:+,.1f}" if m == "relative" else f"{v:,.0f}"
            for v, m in zip(heights, steps["measure"])]
    ends = np.asarray(bases, dtype=float) + np.asarray(heights, dtype=float)
    fig.add_trace(go.Bar(
        x=[escape(s) for s in steps["step"]], y=heights, base=bases,
        marker_color=[colors.get(c, mode_color(c)) for c in steps["component"]],
        marker_line_width=0, text=text, textposition="outside", cliponaxis=False,
        customdata=np.stack([ends], axis=1),
        hovertemplate="%{x}: %{text} us (to %{customdata[0]:,.1f} us)<extra></extra>",
        showlegend=False), row=1, col=1)
    for i in range(len(heights) - 1):  # connectors at the running level
        fig.add_shape(type="line", x0=i + 0.32, x1=i + 0.68, y0=ends[i], y1=ends[i],
                      line={"color": REFERENCE_COLOR, "width": 1, "dash": "dot"}, row=1, col=1)
    tops = [0.0, *np.maximum(bases, ends)]
    bottoms = [0.0, *np.minimum(bases, ends)]
    if beside:
        names = ["eager", escape(other)]
        fig.add_trace(go.Bar(
            x=names, y=list(host), base=[0.0, 0.0], marker_color=[mode_color("eager"), mode_color(other, 1)],
            marker_pattern_shape="/", marker_line_width=0, opacity=0.75,
            text=[f"{v:,.0f}" for v in host], textposition="outside", cliponaxis=False,
            hovertemplate="%{x}: host needed %{y:,.1f} us to issue a step<extra></extra>",
            showlegend=False), row=1, col=2)
        tops += list(host)
    _fit_labels(fig, tops, bottoms)
    fig.update_yaxes(title_text="us per training step", row=1, col=1)
    fig.update_layout(bargap=0.3)
    return apply_layout(fig, title, height=440, showlegend=False,
                   subtitle="timed with no profiler (the headline's medians); kernel time from the "
                            "profiled window; above zero: time the mode added",
                   margin={"l": 60, "r": 20, "t": 110, "b": 60})


def launch_count_bars(medians: pd.DataFrame, empty_message: str = "no profiled window in this "
                      "run (profiler off)") -> go.Figure:
    """CPU launch calls and GPU kernels per iteration, per mode."""
    title = "Launches and kernels per iteration"
    if medians.empty:
        return empty_figure(title, empty_message)
    medians = finite_frame(medians, ("launches", "kernels"))
    modes = [escape(m) for m in medians["mode"].astype(str)]
    fig = go.Figure()
    for column, label, color in (("launches", "launch calls (CPU)", SPLIT_COLORS["cpu_launch_us"]),
                                 ("kernels", "kernels (GPU)", SPLIT_COLORS["gpu_busy_us"])):
        values = medians[column].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=modes, y=values, name=label, marker_color=color,
                             text=number_text(values), textposition="outside", cliponaxis=False,
                             hovertemplate="%{fullData.name}: %{y:,.0f}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="per iteration", rangemode="tozero")
    return apply_layout(fig, title)


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
    data = finite_frame(events, ("start_us", "dur_us")).dropna(subset=["start_us", "dur_us"])
    if data.empty:
        return empty_figure(title, "no events in this iteration")
    lanes = sorted(dict.fromkeys(data["lane"].astype(str)), key=_lane_order)
    other_kind = STEP_PART_COLORS["not_attributed"]  # an event of no kind the timeline names
    fig = go.Figure()
    for kind in dict.fromkeys(data["kind"].astype(str)):
        part = data[data["kind"].astype(str) == kind]
        fig.add_trace(go.Bar(
            base=part["start_us"], x=part["dur_us"].clip(lower=0),
            y=[escape(lane) for lane in part["lane"].astype(str)], orientation="h",
            name=escape(kind), marker_color=TIMELINE_KIND_COLORS.get(kind, other_kind),
            marker_line={"width": 1, "color": TIMELINE_KIND_COLORS.get(kind, other_kind)},
            customdata=np.stack([[escape(n) for n in part["name"].astype(str)],
                                 [f"{v:,.1f}" for v in part["start_us"]],
                                 [f"{v:,.1f}" for v in part["dur_us"]]], axis=1),
            hovertemplate="%{customdata[0]}<br>from %{customdata[1]} us, lasting %{customdata[2]} us"
                          "<extra>%{y}</extra>"))
    fig.update_layout(barmode="overlay", bargap=0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=[escape(lane) for lane in lanes[::-1]],
                     automargin=True)
    end = float((data["start_us"] + data["dur_us"]).max())
    if span_us is not None and math.isfinite(span_us):
        end = max(end, float(span_us))
    fig.update_xaxes(title_text="us since the iteration started", range=[0, end * 1.01 or 1])
    return apply_layout(fig, title, height=max(230, 42 * len(lanes) + 150))
