"""Comparing runs: the method each is compared by, its rows of timing, its summary row, its
speedups, its steps to overlay, and how the host ran it (load against CPUs, threads, ranks).

Scope: pure functions of DataFrames, configs and figures (no Streamlit, no Plotly).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dashboard.analysis.frames import float_column
from dashboard.analysis.run_kind import is_cpu_run
from dashboard.analysis.timing import (
    METHOD_LABELS,
    headline_method,
    method_label,
    per_step_latency,
    series_available,
    series_steps,
)
from profiler_core.analysis.figures import Headline
from profiler_core.spec.config import RunConfig, preset_text
from profiler_core.timing.stability import HostLoad

COMPARE_COLUMNS = ["run", "mode", "method", "median_ms", "p10_ms", "p90_ms"]


COMPARE_SUMMARY_COLUMNS = ["tag", "run", "device", "preset", "speedup", "eager_ms", "graph_ms",
                           "break_even", "timed_by", "verdict", "complete"]


# When a run's headline method has no finite median (a damaged or very old run), compare by the
# first of these it has; the wall-clock ones need no CUDA events.
COMPARE_FALLBACKS = ("steady_trial", "steady_event", "steady_wall", "cold_event", "cold_wall",
                     "block_sync")


def compare_method(timing_method: str, stats: pd.DataFrame) -> str:
    """The method a run is compared by: its headline method (``Headline.timing_method``) if it has
    a finite median, else the first of ``COMPARE_FALLBACKS`` that has one ('' when none has)."""
    if stats.empty:
        return ""
    medians = pd.to_numeric(stats["median_ms"], errors="coerce")
    usable = set(stats.loc[np.isfinite(medians.astype(float)), "method"].astype(str))
    first = headline_method(timing_method, stats)
    for method in (first, *COMPARE_FALLBACKS):
        if method in usable:
            return method
    return ""


def compare_rows(tag: str, timing_method: str, stats: pd.DataFrame,
                 cpu: bool) -> tuple[pd.DataFrame, str]:
    """One run's bars for the comparison chart (``COMPARE_COLUMNS``) and a sentence saying how it
    was timed, or why it has no bar."""
    method = compare_method(timing_method, stats)
    if not method:
        return (pd.DataFrame(columns=COMPARE_COLUMNS),
                f"{tag} has no timing statistics (it stopped before the timed trials), so it has "
                "no bar.")
    label = method_label(method, cpu)
    part = stats[stats["method"].astype(str) == method]
    rows = pd.DataFrame({"run": tag, "mode": part["mode"].astype(str), "method": label,
                         "median_ms": float_column(part, "median_ms"),
                         "p10_ms": float_column(part, "p10_ms"),
                         "p90_ms": float_column(part, "p90_ms")})
    rows = rows.dropna(subset=["median_ms"])[COMPARE_COLUMNS].reset_index(drop=True)
    modes = " and ".join(rows["mode"]) or "no mode"
    if cpu:
        text = (f"{tag} is a CPU run: no CUDA events, so it is compared by wall-clock time "
                f"({label}), eager only.")
    elif "wall" in method:
        text = f"{tag} has no CUDA-event timing: compared by wall-clock time ({label}), {modes}."
    else:
        text = f"{tag}: {label}, {modes}."
    return rows, text


def compare_summary(tag: str, label: str, config: RunConfig, environment: dict[str, Any],
                    pair: Headline, stats: pd.DataFrame, verdict_title: str,
                    complete: bool, break_even: str = "") -> dict[str, Any]:
    """One row of the comparison's summary table (``COMPARE_SUMMARY_COLUMNS``); ``break_even``:
    the graph's ``PayBack.text`` ('' for a run without a graph)."""
    cpu = is_cpu_run(config, environment)
    method = compare_method(pair.timing_method, stats)
    return {"tag": tag, "run": label,
            "device": "CPU" if cpu else str(environment.get("gpu_name") or config.device),
            "preset": preset_text(config), "speedup": pair.speedup,
            "eager_ms": pair.eager_ms, "graph_ms": pair.graph_ms, "break_even": break_even,
            "timed_by": method_label(method, cpu) if method else "no timing",
            "verdict": verdict_title, "complete": bool(complete)}


SPEEDUP_ROW_COLUMNS = ["run", "mode", "speedup", "speedup_ci_low", "speedup_ci_high"]


OVERLAY_STEP_COLUMNS = ["run", "mode", "ms", "timed_by"]


def compare_speedup_rows(tag: str, pair: Headline, modes: pd.DataFrame) -> pd.DataFrame:
    """One run's speedups over eager with their 95% CI (``SPEEDUP_ROW_COLUMNS``): every mode of
    its modes table but eager, else the pair's graph speedup; rows without a finite speedup
    are left out (a CPU run has none)."""
    if not modes.empty and "speedup" in modes:
        part = modes[modes["mode"].astype(str) != "eager"]
        rows = pd.DataFrame({"run": tag, "mode": part["mode"].astype(str),
                             "speedup": float_column(part, "speedup"),
                             "speedup_ci_low": float_column(part, "speedup_ci_low"),
                             "speedup_ci_high": float_column(part, "speedup_ci_high")})
    else:
        rows = pd.DataFrame([{"run": tag, "mode": "graph", "speedup": pair.speedup,
                              "speedup_ci_low": pair.speedup_ci_low,
                              "speedup_ci_high": pair.speedup_ci_high}])
    finite_rows = np.isfinite(pd.to_numeric(rows["speedup"], errors="coerce").astype(float))
    return rows[finite_rows][SPEEDUP_ROW_COLUMNS].reset_index(drop=True)


def overlay_steps(tag: str, latency: pd.DataFrame) -> pd.DataFrame:
    """One run's steady-state time per training step, every step (``OVERLAY_STEP_COLUMNS``): by
    CUDA events when the run has them, else by the wall clock (a CPU run); empty when it has
    neither."""
    steps = per_step_latency(latency)
    for series in ("steady_event", "steady_wall"):
        if series in series_available(steps):
            part, column = series_steps(steps, series)
            part = part[np.isfinite(part[column].to_numpy(dtype=float))]
            return pd.DataFrame({"run": tag, "mode": part["mode"].astype(str),
                                 "ms": part[column].to_numpy(dtype=float),
                                 "timed_by": METHOD_LABELS[series]})[OVERLAY_STEP_COLUMNS]
    return pd.DataFrame(columns=OVERLAY_STEP_COLUMNS)


HOST_COLUMNS = ["tag", "processes", "torch_threads", "cpus", "load_start", "load_end", "loaded"]


def host_row(tag: str, environment: dict[str, Any]) -> dict[str, Any]:
    """How the host ran one run (``HOST_COLUMNS``): its processes (data-parallel ranks), torch's
    thread count in each, the CPUs it could use, the 1-minute load average at its start and end
    (NaN where not recorded), and whether that was a loaded host (``HostLoad.loaded``)."""
    host = HostLoad.of(environment)
    return {"tag": tag, "processes": host.ranks,
            "torch_threads": host.threads or np.nan, "cpus": host.cpus or np.nan,
            "load_start": host.load_start, "load_end": host.load_end,
            "loaded": host.loaded}


def host_differences(rows: list[dict[str, Any]]) -> str:
    """A sentence naming what differs in how the host ran the runs (processes, threads, a loaded
    host), '' when nothing recorded differs: runs of the same settings can still differ there (a
    2-rank run under torchrun, which sets one thread per rank, beside a process of 2 threads)."""
    def threads(row: dict[str, Any]) -> str:
        count = row["torch_threads"]
        each = f"{int(count)} torch thread(s)" if count == count else "threads not recorded"
        return f"{row['processes']} processes of {each} each" if row["processes"] > 1 else each

    said = []
    if len({threads(row) for row in rows}) > 1:
        said.append("threads: " + ", ".join(f"{row['tag']} ran {threads(row)}" for row in rows))
    loaded = [row["tag"] for row in rows if row["loaded"]]
    if loaded and len(loaded) < len(rows):
        said.append(f"{' and '.join(loaded)} ran on a loaded host")
    return "; ".join(said)
