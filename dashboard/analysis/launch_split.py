"""The profiled window's tables: the launch-split medians per mode, and the speedup decomposed
along each timeline (GPU busy and idle, CPU launch and other work).

Scope: pure functions of launch_split.csv and breakdown.csv (no Streamlit, no Plotly); every
function returns its documented columns also when the input is empty.
"""

from __future__ import annotations

import math

import pandas as pd

from dashboard.analysis.frames import finite, float_column, ordered_modes
from profiler_core import MODE_NAMES
from profiler_core.analysis.trace import decompose_medians
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS

SPLIT_PARTS = ["cpu_launch_us", "cpu_other_us", "gpu_busy_us", "gpu_idle_us"]
SPLIT_MEDIAN_COLUMNS = ["mode", "iterations", "span_us", *SPLIT_PARTS, "launches", "kernels",
                        "launch_delay_us"]


def breakdown_against(breakdown: pd.DataFrame, medians: pd.DataFrame, other: str) -> pd.DataFrame:
    """The speedup decomposed from eager to ``other``, as ``other``'s block of breakdown.csv (its
    columns; ``mode_us`` holds ``other``'s times): the run's own block when breakdown.csv has one,
    else worked out from the two modes' launch-split medians the same way
    (``trace.decompose_medians``); empty with those columns when neither is there."""
    own = breakdown[breakdown["mode"].astype(str) == other].reset_index(drop=True)
    if len(own) or medians.empty:
        return own
    rows = medians.set_index("mode")
    if "eager" not in rows.index or other not in rows.index:
        return own
    return decompose_medians(rows.loc["eager"].to_dict(), rows.loc[other].to_dict(), mode=other)


def decomposable_modes(breakdown: pd.DataFrame, medians: pd.DataFrame) -> list[str]:
    """The modes whose speedup over eager ``breakdown_against`` can decompose: those with a block
    in breakdown.csv, and those profiled beside eager (launch-split medians), in run order."""
    profiled = ordered_modes(medians) if "eager" in set(medians["mode"].astype(str)) else []
    present = pd.DataFrame({"mode": [*breakdown["mode"].astype(str), *profiled]})
    return [mode for mode in ordered_modes(present) if mode not in ("eager", "")]


def split_medians(launch_split: pd.DataFrame) -> pd.DataFrame:
    """Median of every launch-split column per mode (eager first)."""
    if launch_split.empty:
        return pd.DataFrame(columns=SPLIT_MEDIAN_COLUMNS)
    numeric = SPLIT_MEDIAN_COLUMNS[2:]
    frame = launch_split.copy()
    # plain floats: a missing integer (pandas NA) becomes NaN, never an NA that float() refuses
    frame[numeric] = frame[numeric].apply(pd.to_numeric, errors="coerce").astype(float)
    grouped = frame.groupby("mode", sort=False)
    out = grouped[numeric].median()
    out.insert(0, "iterations", grouped.size())
    out = out.reset_index()
    order = {m: i for i, m in enumerate(MODE_NAMES)}
    out = out.sort_values("mode", key=lambda s: s.map(lambda m: order.get(m, 99)), kind="stable")
    return out[SPLIT_MEDIAN_COLUMNS].reset_index(drop=True)


TOTAL_COMPONENT = "total_span"
# Each schema component's timeline: gpu_busy + gpu_idle make the GPU's span, cpu_launch +
# cpu_other (+ the time the CPU waited for the GPU) the CPU's.
TIMELINE_OF_COMPONENT = {c: c.split("_", 1)[0].upper() for c in BREAKDOWN_COMPONENTS
                         if c != TOTAL_COMPONENT}
RESIDUAL_COMPONENTS = {"CPU": "waiting on GPU", "GPU": "not attributed"}
BREAKDOWN_TABLE_COLUMNS = ["timeline", "component", "eager_us", "mode_us", "saving_us",
                           "share_of_timeline_saving_pct"]


def breakdown_table(breakdown: pd.DataFrame) -> pd.DataFrame:
    """One mode's block of the speedup decomposition (``breakdown_against``), one block per
    timeline, with shares that add up to 100% within each timeline (breakdown.csv's shares are all
    of the total saving, so the GPU rows and the CPU rows each add up to about 100% and together
    to far more, with nothing saying which is which). ``mode_us`` holds that mode's times.

    GPU: busy + idle = the span. CPU: launch calls + other work + time spent waiting on the GPU =
    the span (that last row is the rest of the span). A final row is the span itself (timeline
    "both"). Non-finite numbers count as missing.
    """
    if breakdown.empty:
        return pd.DataFrame(columns=BREAKDOWN_TABLE_COLUMNS)
    frame = breakdown.assign(component=breakdown["component"].astype(str),
                             eager_us=float_column(breakdown, "eager_us"),
                             mode_us=float_column(breakdown, "mode_us"))
    frame = frame[frame["component"].isin(BREAKDOWN_COMPONENTS)]
    total = frame[frame["component"] == TOTAL_COMPONENT]
    eager_total = float(total["eager_us"].iloc[0]) if len(total) else math.nan
    mode_total = float(total["mode_us"].iloc[0]) if len(total) else math.nan
    saving_total = eager_total - mode_total
    rows = []
    for timeline in ("GPU", "CPU"):
        parts = frame[frame["component"].map(TIMELINE_OF_COMPONENT.get) == timeline]
        if parts.empty:
            continue
        for row in parts.itertuples(index=False):
            rows.append([timeline, row.component, row.eager_us, row.mode_us])
        rest_eager = eager_total - float(parts["eager_us"].sum())
        rest_mode = mode_total - float(parts["mode_us"].sum())
        scale = 0.005 * max(abs(eager_total), 1e-9) if finite(eager_total) else math.inf
        if finite(rest_eager) and finite(rest_mode) and max(abs(rest_eager), abs(rest_mode)) > scale:
            rows.append([timeline, RESIDUAL_COMPONENTS[timeline], rest_eager, rest_mode])
    if len(total):
        rows.append(["both", TOTAL_COMPONENT, eager_total, mode_total])
    out = pd.DataFrame(rows, columns=BREAKDOWN_TABLE_COLUMNS[:4])
    out["saving_us"] = out["eager_us"] - out["mode_us"]
    share = out["saving_us"] / saving_total * 100 if finite(saving_total) and saving_total else math.nan
    out["share_of_timeline_saving_pct"] = share
    return out[BREAKDOWN_TABLE_COLUMNS].reset_index(drop=True)
