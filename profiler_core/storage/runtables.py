"""A run's tables and summary figures, assembled from what it measured.

Scope: pure functions over the runner's raw rows and tables (no torch, no measuring): latency.csv
from timed rows, stats.csv from latency.csv and the other timings, the summary headline's facts
of the timing and profiling, and each mode's pay-back (the figures go to modes.csv and
metrics.csv). ``engine.runner`` measures and calls these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from profiler_core.spec import schema
from profiler_core.spec.config import ALWAYS_MEASURED
from profiler_core.spec.metrics import HEADLINE_METHOD
from profiler_core.storage.results import coerce_table
from profiler_core.timing import stats
from profiler_core.timing import trials as timing


def latency_table(rows: list[tuple]) -> pd.DataFrame:
    return coerce_table("latency", pd.DataFrame(rows, columns=schema.LATENCY_COLUMNS))


# stats.csv methods computed from latency.csv: (latency method, column) per stats method.
LATENCY_METHODS = {
    "steady_event": (timing.STEADY, "gpu_ms"),
    "steady_wall": (timing.STEADY, "wall_ms"),
    "cold_event": (timing.COLD, "gpu_ms"),
    "cold_wall": (timing.COLD, "wall_ms"),
}


# Copies of a batch into the graph's static inputs timed together (one figure per run).
INPUT_COPIES = 32


# Replays of the graph timed together with the device held (no wait for the host).
HELD_REPLAYS = 16


def steady_rows(latency: pd.DataFrame, mode: str) -> tuple[pd.DataFrame, str]:
    """A mode's steady-state rows and the column holding their time (events, or wall clock)."""
    rows = latency[(latency["mode"] == mode) & (latency["method"] == timing.STEADY)]
    return rows, ("gpu_ms" if rows["gpu_ms"].notna().any() else "wall_ms")


def per_step(latency: pd.DataFrame, mode: str, method: str) -> np.ndarray:
    """A stats method's samples of one mode, per training step (NaN-free). ``steady_trial`` has
    one sample per trial: the trial's mean time per step, as a training loop's clock sees it."""
    if method == "steady_trial":
        rows, column = steady_rows(latency, mode)
        per_step = rows[column].astype(float) / rows["steps"].astype(float)
        values = per_step.groupby(rows["trial"]).mean().to_numpy()
    else:
        latency_method, column = LATENCY_METHODS[method]
        rows = latency[(latency["mode"] == mode) & (latency["method"] == latency_method)]
        values = (rows[column].astype(float) / rows["steps"].astype(float)).to_numpy()
    return values[np.isfinite(values)]


def stats_table(latency: pd.DataFrame, loops: pd.DataFrame,
                 copy_ms: dict[str, float] | None = None,
                 host_issue: list[tuple] | None = None,
                 held_ms: dict[str, float] | None = None) -> pd.DataFrame:
    """stats.csv: every method per mode; ``copy_ms`` is the batch copy per training step,
    ``host_issue`` the steady-state trials' host time to issue a step, (mode, trial, ms),
    ``held_ms`` a mode's replay on a held device per step."""
    rows = []
    issue = pd.DataFrame(host_issue or [], columns=["mode", "trial", "ms"])
    for mode in latency["mode"].drop_duplicates():
        for method in ("steady_trial", *LATENCY_METHODS):
            summary = stats.summarize(per_step(latency, mode, method))
            if summary["count"]:
                rows.append({"mode": mode, "method": method, **summary})
        summary = stats.summarize(issue.loc[issue["mode"] == mode, "ms"].astype(float))
        if summary["count"]:
            rows.append({"mode": mode, "method": "host_issue", **summary})
    for mode, value in (copy_ms or {}).items():
        if math.isfinite(value):
            rows.append({"mode": mode, "method": "input_copy", **stats.summarize([value]),
                         "count": INPUT_COPIES})
    for mode, value in (held_ms or {}).items():
        if math.isfinite(value):
            rows.append({"mode": mode, "method": "held_replay", **stats.summarize([value]),
                         "count": HELD_REPLAYS})
    for (mode, method), group in loops.groupby(["mode", "method"], sort=False):
        rows.append({"mode": mode, "method": method, **stats.summarize(group["ms_per_step"])})
    frame = pd.DataFrame(rows, columns=schema.STATS_COLUMNS) if rows else pd.DataFrame(
        columns=schema.STATS_COLUMNS)
    return coerce_table("stats", frame)


def median(table: pd.DataFrame, mode: str, method: str) -> float:
    match = table[(table["mode"] == mode) & (table["method"] == method)]
    return float(match["median_ms"].iloc[0]) if len(match) else math.nan


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator and math.isfinite(denominator) else math.nan


def headline_facts(iteration_sources: Mapping[str, str]) -> dict[str, object]:
    """The summary headline's facts of a run's timing and profiling: the headline timing method
    (the steady state: median over trials of each trial's mean time per step, whose figures are
    modes.csv's and metrics.csv's) and how each profiled window of the article's pair found its
    iterations. The pair's figures are in metrics.csv only (``metrics.build``)."""
    headline: dict[str, object] = {"timing_method": HEADLINE_METHOD}
    for name in ALWAYS_MEASURED:
        if name in iteration_sources:
            headline[f"{name}_iteration_source"] = iteration_sources[name]
    return headline


def add_pay_back(figures: dict[str, dict[str, float]], modes_table: pd.DataFrame) -> None:
    """Every mode but eager: whether its one-time cost (warm-up and capture, or compile) is paid
    back by its saving per step, and after how many steps (``stats.pay_back``)."""
    table = modes_table.set_index("mode")
    if "eager" not in table.index:
        return
    eager_ms = float(table.loc["eager", "median_ms"])
    for name in figures:
        if name != "eager" and name in table.index:
            figures[name].update(stats.pay_back(float(table.loc[name, "one_time_ms"]), eager_ms,
                                                float(table.loc[name, "median_ms"])))
