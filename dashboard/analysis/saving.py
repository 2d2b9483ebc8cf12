"""The headline's saving per step, attributed: one mode's block of attribution.csv, its parts
(GPU kernels, batch copy, GPU idle; host issue beside them), the saving table and each mode's
kernel floor.

Scope: pure functions of attribution.csv (no Streamlit, no Plotly); every function returns its
documented columns also when the input is empty.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashboard.analysis.frames import finite, float_column, ordered_modes

# What a negative share of the saving means (the saving table, the waterfall's caption).
NEGATIVE_SHARE_TEXT = ("A negative share is time the graph added, e.g. its batch copy or extra "
                       "kernels of a capturable optimizer; the other parts then add up to more "
                       "than 100%.")
# The attribution's components in words (profiler_core.analysis.attribution: the three parts add up to the
# step; host issue is shown beside them).
ATTRIBUTION_LABELS = {
    "gpu_kernels": "GPU kernels",
    "input_copy": "batch copy into the static inputs",
    "gpu_idle": "GPU idle",
    "step": "step (the headline: timed, no profiler)",
    "host_issue": "host time to issue a step",
}
ATTRIBUTION_ROLES = {
    "gpu_kernels": "part of the sum",
    "input_copy": "part of the sum",
    "gpu_idle": "part of the sum",
    "step": "the sum: the headline's saving",
    "host_issue": "not part of the sum: why the GPU waited",
}
SAVING_TABLE_COLUMNS = ["component", "what", "eager_us", "mode_us", "saving_us",
                        "share_of_saving_pct", "in_the_sum", "source"]


def attribution_modes(attribution: pd.DataFrame) -> list[str]:
    """The modes with a block in attribution.csv, in the order a run measures them."""
    if attribution.empty:
        return []
    return [m for m in ordered_modes(attribution) if m != "eager"]


def attribution_block(attribution: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """One mode's block of attribution.csv, its times as floats (non-finite ones NaN), in the
    order step, the three parts, host issue; empty with the columns when the run has none."""
    columns = list(attribution.columns) if len(attribution.columns) else [
        "mode", "component", "eager_us", "mode_us", "saving_us", "share_of_saving_pct", "source"]
    if attribution.empty:
        return pd.DataFrame(columns=columns)
    block = attribution[attribution["mode"].astype(str) == mode]
    block = block.assign(component=block["component"].astype(str),
                         **{c: float_column(block, c) for c in
                            ("eager_us", "mode_us", "saving_us", "share_of_saving_pct")})
    order = {c: i for i, c in enumerate(ATTRIBUTION_LABELS)}
    block = block[block["component"].isin(order)]
    block = block.iloc[block["component"].map(order).argsort(kind="stable")]
    return block.drop_duplicates("component").reset_index(drop=True)


def attribution_parts(attribution: pd.DataFrame, mode: str = "graph") -> dict[str, tuple[float, float]]:
    """component -> (eager_us, mode_us) of one mode's block; NaN pairs for what is missing."""
    block = attribution_block(attribution, mode).set_index("component") if len(attribution) else None
    out = {}
    for component in ATTRIBUTION_LABELS:
        if block is not None and component in block.index:
            out[component] = (float(block.at[component, "eager_us"]),
                              float(block.at[component, "mode_us"]))
        else:
            out[component] = (math.nan, math.nan)
    return out


def saving_table(attribution: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """The headline's saving per step by component (``SAVING_TABLE_COLUMNS``): the three parts
    (GPU kernels, batch copy, GPU idle), whose savings add up to the step's, the step itself, and
    the host's time to issue a step, marked as not part of the sum. Times in us per training step;
    a share is of the step's saving (negative: time the mode added); none for host issue (outside
    the sum) nor when the mode is not faster (no saving to share). The host issue row is left
    out when the run did not time it (older runs)."""
    block = attribution_block(attribution, mode)
    if block.empty:
        return pd.DataFrame(columns=SAVING_TABLE_COLUMNS)
    untimed = (block["component"] == "host_issue") & block[["eager_us", "mode_us"]].isna().all(axis=1)
    block = block[~untimed]
    step_saving = block.loc[block["component"] == "step", "saving_us"]
    no_saving = not len(step_saving) or not finite(float(step_saving.iloc[0])) or float(
        step_saving.iloc[0]) <= 0
    # a share of a saving that is not there, or of a time outside the sum, means nothing
    block = block.assign(share_of_saving_pct=block["share_of_saving_pct"].where(
        (block["component"] != "host_issue") & (not no_saving)))
    out = block.assign(what=block["component"].map(ATTRIBUTION_LABELS),
                       in_the_sum=block["component"].map(ATTRIBUTION_ROLES))
    order = ["gpu_kernels", "input_copy", "gpu_idle", "step", "host_issue"]
    out = out.iloc[out["component"].map(order.index).argsort(kind="stable")]
    return out[SAVING_TABLE_COLUMNS].reset_index(drop=True)


def kernel_floor(attribution: pd.DataFrame) -> pd.DataFrame:
    """Each mode's GPU kernel time per training step (columns mode, gpu_busy_us): the floor a
    launch strategy cannot beat, from the attribution (eager's from any block)."""
    rows: dict[str, float] = {}
    for mode in attribution_modes(attribution):
        kernels = attribution_parts(attribution, mode)["gpu_kernels"]
        rows.setdefault("eager", kernels[0])
        rows[mode] = kernels[1]
    frame = pd.DataFrame({"mode": list(rows), "gpu_busy_us": list(rows.values())})
    return frame[np.isfinite(frame["gpu_busy_us"].astype(float))].reset_index(drop=True)
