"""The headline's saving per training step, attributed to its parts (``attribution.csv``).

Scope: arithmetic over what a run measured, no measuring: per mode, the timed step split into GPU
kernel time (from the profiled window), the graph's batch copy and GPU idle time, which add up to
the step exactly, with the host's time to issue a step beside them (:func:`mode_parts`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from profiler_core.spec.schema import ATTRIBUTION_COLUMNS

BASELINE = "eager"
# The components that add up to ``step``, in the order they are shown.
PARTS = ("gpu_kernels", "input_copy", "gpu_idle")
# Every component: the total, its parts, then the cause shown beside them.
COMPONENTS = ("step", *PARTS, "host_issue")
SOURCES = {
    "step": "timed trials: steady-state median per step (no profiler)",
    "gpu_kernels": "profiled window: GPU busy time per step (kernel durations, under the profiler)",
    "input_copy": "timed apart: the batch copy into the static inputs (no profiler)",
    "gpu_idle": "the rest of the step: step - GPU kernels - batch copy",
    "host_issue": "timed trials: host time to issue a step (not part of the sum)",
}
# Idle below this fraction of the step is within the measurements' noise (a replayed graph's
# idle time is a few percent of its step), not a sign of a stretched kernel time.
NEGATIVE_IDLE_TOLERANCE = 0.03


def _median(stats: pd.DataFrame, mode: str, method: str) -> float:
    match = stats[(stats["mode"] == mode) & (stats["method"] == method)]["median_ms"]
    return float(match.iloc[0]) if len(match) and pd.notna(match.iloc[0]) else math.nan


def _steps_per_iteration(latency: pd.DataFrame, mode: str) -> float:
    steps = latency.loc[latency["mode"] == mode, "steps"].dropna()
    return float(steps.iloc[0]) if len(steps) else 1.0


def _busy_per_step_ms(launch_split: pd.DataFrame, mode: str, steps: float) -> float:
    busy = pd.to_numeric(launch_split.loc[launch_split["mode"] == mode, "gpu_busy_us"],
                         errors="coerce").dropna()
    return float(np.median(busy)) / 1e3 / steps if len(busy) else math.nan


def mode_parts(stats: pd.DataFrame, launch_split: pd.DataFrame, latency: pd.DataFrame,
               mode: str, headline_method: str = "steady_trial") -> dict[str, float]:
    """One mode's components per training step, in milliseconds (NaN where not measured).

    The headline is the steady-state time per step, timed with no profiler attached; the
    profiled window runs slower (the profiler slows the launching thread), so its span cannot
    explain the headline. What the timed trials cannot see, the GPU's kernel time, is taken from
    the profiled window: the profiler barely changes how long a kernel runs on the device, while
    it changes how long the host takes to issue it.

    - ``step``: the headline's steady-state median (timed trials, CUDA events or the CPU's clock);
    - ``gpu_kernels``: the GPU's busy time (union of the kernel, memcpy and memset intervals of an
      iteration, its median) in the profiled window; a graph's batch copy runs before the
      window's iteration mark, so it is not in here;
    - ``input_copy``: the graph's copy of a new batch into its static inputs, timed apart with no
      profiler (0 for a mode that reads its batch directly);
    - ``gpu_idle``: the rest, ``step - gpu_kernels - input_copy``: the GPU waiting for the host.
      Negative when the profiled kernels took longer than the unprofiled step (the profiler
      stretched them), which the run notes (:func:`stretched_kernel_notes`);
    - ``host_issue``: the launching thread's time to issue a step in the timed trials: why idle
      time exists, shown beside the parts, not one of them.

    Shares (in :func:`build`) are of the ``step`` saving; a part with a negative saving is time
    the mode added (a graph's batch copy, the extra kernels of a capturable optimizer)."""
    steps = _steps_per_iteration(latency, mode)
    step = _median(stats, mode, headline_method)
    kernels = _busy_per_step_ms(launch_split, mode, steps)
    copy = _median(stats, mode, "input_copy")
    copy = 0.0 if not math.isfinite(copy) and mode == BASELINE else copy
    if not math.isfinite(copy) and math.isfinite(kernels):
        copy = 0.0  # a mode that reads its batch directly copies nothing
    idle = step - kernels - copy
    return {"step": step, "gpu_kernels": kernels, "input_copy": copy, "gpu_idle": idle,
            "host_issue": _median(stats, mode, "host_issue")}


def build(stats: pd.DataFrame, launch_split: pd.DataFrame, latency: pd.DataFrame,
          headline_method: str = "steady_trial") -> pd.DataFrame:
    """attribution.csv: one block of components per mode other than eager (ATTRIBUTION_COLUMNS,
    times in microseconds per training step). Empty when there is no eager timing."""
    modes = [str(m) for m in stats["mode"].dropna().drop_duplicates()] if len(stats) else []
    if BASELINE not in modes or len(modes) < 2:
        return pd.DataFrame(columns=ATTRIBUTION_COLUMNS)
    eager = mode_parts(stats, launch_split, latency, BASELINE, headline_method)
    rows = []
    for mode in modes:
        if mode == BASELINE:
            continue
        other = mode_parts(stats, launch_split, latency, mode, headline_method)
        rows += _block(mode, eager, other)
    frame = pd.DataFrame(rows, columns=ATTRIBUTION_COLUMNS)
    return frame if len(frame) else pd.DataFrame(columns=ATTRIBUTION_COLUMNS)


def _block(mode: str, eager: Mapping[str, float], other: Mapping[str, float]) -> list[dict]:
    step_saving = eager["step"] - other["step"]
    rows = []
    for component in COMPONENTS:
        saving = eager[component] - other[component]
        additive = component in (*PARTS, "step")
        share = (saving / step_saving * 100 if additive and step_saving and math.isfinite(step_saving)
                 else math.nan)
        rows.append({"mode": mode, "component": component,
                     "eager_us": eager[component] * 1e3, "mode_us": other[component] * 1e3,
                     "saving_us": saving * 1e3, "share_of_saving_pct": share,
                     "source": SOURCES[component]})
    return rows


def parts_sum_error(block: pd.DataFrame) -> float:
    """How far one mode's parts' savings miss its step saving, as a fraction of that saving (0 when
    they add up; NaN when a part was not measured or there is no saving)."""
    saving = block.set_index("component")["saving_us"].astype(float)
    if any(part not in saving.index for part in (*PARTS, "step")):
        return math.nan
    total = float(saving["step"])
    parts = float(saving[list(PARTS)].sum(skipna=False))  # a part not measured: NaN
    if not (math.isfinite(total) and math.isfinite(parts)) or total == 0:
        return math.nan
    return abs(parts - total) / abs(total)


def stretched_kernel_notes(frame: pd.DataFrame) -> list[str]:
    """Notes for modes whose profiled kernel time exceeds their unprofiled step (negative idle
    beyond the noise): there the profiler stretched the kernels, and the parts are approximate."""
    notes = []
    idle = frame[frame["component"] == "gpu_idle"]
    steps = frame[frame["component"] == "step"].set_index("mode")
    for row in idle.itertuples():
        for side, value in (("eager", row.eager_us), (str(row.mode), row.mode_us)):
            step = float(steps.loc[row.mode, f"{'eager' if side == 'eager' else 'mode'}_us"])
            if math.isfinite(value) and math.isfinite(step) and step > 0 and (
                    value < -NEGATIVE_IDLE_TOLERANCE * step):
                note = (f"{side}: the GPU's kernel time under the profiler ({step - value:.1f} us "
                        f"per step with the copy) exceeds its unprofiled step ({step:.1f} us), so "
                        "the profiler stretched the kernels and the attribution is approximate")
                if note not in notes:
                    notes.append(note)
    return notes
