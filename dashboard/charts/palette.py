"""Every colour that means something in a chart, declared once, in three palettes: the modes
(each mode's own colour, from ``profiler_core.spec.modes``), the parts of a step (where a step's
time goes: CPU launch, GPU busy, the batch copy, communication...) and the phases of a run (the
GPU view's bands and lanes). One colour, one meaning: no colour is in two palettes, nor twice in
one; any two of them are at least ``MIN_APART`` CIELAB units apart, and each reads on Streamlit's
light and dark backgrounds (``tests/test_dashboard_charts.py`` checks both). Lines that mean only
their legend's words take ``SERIES_COLORS``, kept as far from the palettes.

Scope: colours only (no Plotly, no Streamlit). The chart modules take their colours from here.
"""

from __future__ import annotations

from profiler_core import MODES

MIN_APART = 20.0  # CIELAB (CIE76) distance between any two colours of the palettes below

# One colour per mode, as ``profiler_core.spec.modes`` declares it: orange is always eager, blue
# always the article's graph.
MODE_COLORS = {mode.name: mode.color for mode in MODES}

# Where a step's time goes, in every chart that splits one (the launch split, the saving's
# waterfall, the prediction's parts, one profiled iteration drawn lane by lane, a rank's step):
# green always means the GPU (or a rank's device) was busy, never "a decrease".
STEP_PART_COLORS = {
    "cpu_launch": "#F2A541",  # the CPU issuing launches
    "cpu_other": "#9B6FC0",  # the CPU's other work (Python, the framework)
    "gpu_busy": "#3FA34D",  # the GPU running kernels (a rank's compute)
    "gpu_idle": "#A3ABB8",  # the GPU waiting for work (a rank's host wait)
    "batch_copy": "#8FD19E",  # copying a batch into the graph's static inputs (memcpy/memset)
    "graph_launch": "#556677",  # the prediction's cost of launching one graph replay
    "per_node": "#CCAA66",  # the prediction's cost per kernel node of a graph
    "cpu_waiting": "#DDBBDD",  # the CPU waiting on the GPU (the CPU side's rest of the span)
    "not_attributed": "#AACCBB",  # the GPU side's rest of the span, not attributed to a part
    "comm_exposed": "#BB1122",  # communication nothing else ran beside (a rank waits on it)
    "comm_hidden": "#FFBBBB",  # communication under compute
}

# The kinds of phase a run's timeline holds ("eager timed" is the kind "timed" in eager's lane).
PHASE_COLORS = {
    "setup": "#778866", "warm-up": "#EECC44", "capture": "#AA7799", "preparation": "#DDCCAA",
    "timed": "#338855", "cold start": "#77BBDD", "article loop": "#FF8899",
    "input copy": "#33BB99", "profiled": "#99EEFF", "parity": "#BB5577",
    "capture twin profiled": "#7788EE",
}
# Kinds of phase not listed above (a newer or older run's), in order; past these, one colour.
PHASE_EXTRA_COLORS = ("#AA7711", "#5566AA", "#AA66DD", "#CC7744")
OTHER_PHASES_COLOR = "#AA8888"

# Lines that mean only what their legend says (the runs of an overlay, a sweep's series, a
# rank's p50 and p99, NVML's two kinds of reading, the counter predicted against observed): kept
# apart from every colour of the palettes, so that none of them reads as a mode, a part of a step
# or a phase.
SERIES_COLORS = ("#3949AB", "#B5BD00", "#00796B", "#8E24AA", "#880E4F", "#827717")
# Reference lines and notes (the 1x line, a threshold, a pause in NVML's polling): a neutral grey,
# drawn dotted or as text, never as a bar or a band of data.
REFERENCE_COLOR = "#888888"

PALETTES: dict[str, dict[str, str]] = {
    "modes": MODE_COLORS,
    "parts of a step": STEP_PART_COLORS,
    "phases": {**PHASE_COLORS, **{f"other kind {i + 1}": color
                                  for i, color in enumerate(PHASE_EXTRA_COLORS)},
               "other phases": OTHER_PHASES_COLOR},
}
