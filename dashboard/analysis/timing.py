"""The timing methods in words, and the tables of time per step: per-step latency, the series a
chart draws, and the comparison of eager against the graph by every method.

Scope: pure functions of stats.csv and latency.csv (no Streamlit, no Plotly); every function
returns its documented columns also when the input is empty.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashboard.analysis.frames import MODES, finite
from profiler_core.analysis.figures import Figures
from profiler_core.spec.metrics import CPU_METHOD_LABELS, STEP_METHOD_LABELS

# Every timing method of stats.csv that times a whole step, in the order they are shown, and a
# CPU run's labels where they differ (one declaration, ``profiler_core.spec.timing_methods``).
METHOD_LABELS = STEP_METHOD_LABELS
# What each method measures, as a clause that follows the method's name ("timed by <label>:
# <meaning>"); ``method_caption`` makes it a sentence.
METHOD_MEANING = {
    "steady_trial": "steps queued back to back as in training, each trial's mean time per step "
                    "(what a training loop's clock sees), its median over the trials",
    "steady_event": "the same steady-state steps one by one, GPU time between CUDA events "
                    "recorded after consecutive steps (a graph's batch copy included)",
    "steady_wall": "the same steady-state steps one by one, host time between consecutive "
                   "steps (CPU runs)",
    "cold_event": "one isolated step at a time: synchronise first, then CUDA events around the "
                  "step, so every step pays the latency of its first launch",
    "cold_wall": "one isolated step at a time: host time from a synchronise to a synchronise",
    "block_sync": "the article's loop, closed by torch.cuda.synchronize()",
    "article_no_sync": "CPU enqueue time only; the GPU may still be working",
}
# Whether a method measures training time (the timing table says so beside each): the article's
# no-sync loop does not.
METHOD_VERDICT = {method: "true" for method in METHOD_MEANING}
METHOD_VERDICT.update(steady_trial="true, the headline", article_no_sync="wrong")


def method_caption(method: str, cpu: bool = False) -> str:
    """One sentence for a timing method: its name, then what it measures (names such as CUDA
    keep their case)."""
    label = method_label(method, cpu)
    meaning = METHOD_MEANING.get(method, "")
    text = f"{label}: {meaning}" if meaning else label
    return text[:1].upper() + text[1:] + "."


# The latency.csv rows and column each per-iteration method reads.
SERIES = {
    "steady_event": ("steady", "gpu_ms"),
    "steady_wall": ("steady", "wall_ms"),
    "cold_event": ("cold", "gpu_ms"),
    "cold_wall": ("cold", "wall_ms"),
}


def method_label(method: str, cpu: bool = False) -> str:
    """A timing method in words; a CPU run's steady state says it is wall-clock time."""
    if cpu and method in CPU_METHOD_LABELS:
        return CPU_METHOD_LABELS[method]
    return METHOD_LABELS.get(method, method)


def headline_method(timing_method: str, stats: pd.DataFrame) -> str:
    """The timing method the speedup uses (``Headline.timing_method``: the steady state per trial;
    cold-start events for runs recorded before steady-state timing existed), else the first
    method ``stats`` has."""
    method = timing_method
    present = set(stats["method"].dropna()) if not stats.empty else set()
    if method in present or (method in METHOD_LABELS and not present):
        return str(method)
    for candidate in ("steady_trial", "steady_event", "steady_wall", "cold_event", "cold_wall",
                      "block_sync"):
        if candidate in present:
            return candidate
    return "steady_trial"


def series_available(steps: pd.DataFrame) -> list[str]:
    """The per-iteration methods (keys of ``SERIES``) this run has samples of."""
    return [name for name, (method, column) in SERIES.items()
            if not steps.empty and steps.loc[steps["method"] == method, column].notna().any()]


def series_steps(steps: pd.DataFrame, series: str) -> tuple[pd.DataFrame, str]:
    """The rows of ``per_step_latency`` one method reads, and the column holding its time."""
    method, column = SERIES[series]
    return steps[steps["method"] == method].reset_index(drop=True), column


PER_STEP_COLUMNS = ["mode", "method", "seq", "trial", "iteration", "gpu_ms", "wall_ms"]


def per_step_latency(latency: pd.DataFrame) -> pd.DataFrame:
    """Per training step (``gpu_ms``/``wall_ms`` divided by ``steps``); ``seq`` = order within
    its mode and method."""
    if latency.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c in ("mode", "method") else "float64")
                             for c in PER_STEP_COLUMNS})
    group = (latency["mode"].astype(str) + "\0" + latency["method"].astype(str))
    codes, names = pd.factorize(group, sort=True)
    mode = latency["mode"].astype(str).to_numpy(dtype=object)
    method = latency["method"].astype(str).to_numpy(dtype=object)
    trial = pd.to_numeric(latency["trial"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    iteration = pd.to_numeric(latency["iteration"], errors="coerce").to_numpy(dtype=float,
                                                                               na_value=np.nan)
    order = np.lexsort((iteration, trial, codes))  # by mode and method, then trial, then iteration
    steps = pd.to_numeric(latency["steps"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    steps = np.where(np.isfinite(steps) & (steps >= 1), steps, 1.0)[order]
    out = pd.DataFrame({
        "mode": mode[order],
        "method": method[order],
        "trial": trial[order],
        "iteration": iteration[order],
        "gpu_ms": pd.to_numeric(latency["gpu_ms"], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan)[order] / steps,
        "wall_ms": pd.to_numeric(latency["wall_ms"], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan)[order] / steps,
    })
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1]  # each group's first
    index = np.arange(len(out))
    out.insert(2, "seq", index - np.repeat(starts, np.diff(np.r_[starts, len(out)])))
    return out[PER_STEP_COLUMNS]


TIMING_COLUMNS = ["method", "label", "eager_median_ms", "graph_median_ms", "speedup", "meaning"]


def timing_comparison(stats: pd.DataFrame, figures: Figures, cpu: bool = False) -> pd.DataFrame:
    """Median per-step time per timing method and mode: the article's method beside the true ones
    (``cpu``: a CPU run, whose steady state is timed by the wall clock, labelled so)."""
    rows = []
    methods = [m for m in METHOD_LABELS if not stats.empty and m in set(stats["method"])]
    for method in methods:
        part = stats[stats["method"] == method].set_index("mode")["median_ms"]
        eager = float(part.get("eager", math.nan))
        graph = float(part.get("graph", math.nan))
        rows.append([method, method_label(method, cpu), eager, graph,
                     eager / graph if graph else math.nan,
                     f"{METHOD_VERDICT[method]}: {METHOD_MEANING[method]}"])
    if "article_no_sync" not in methods:
        eager, graph = (figures.get(mode, "article_no_sync_median_ms") for mode in MODES)
        if finite(eager) or finite(graph):
            rows.append(["article_no_sync", METHOD_LABELS["article_no_sync"], eager, graph,
                         eager / graph if graph else math.nan,
                         f"{METHOD_VERDICT['article_no_sync']}: {METHOD_MEANING['article_no_sync']}"])
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)
