"""One profiled iteration as lanes of events, for drawing: CPU ops per thread, the launch calls,
and the GPU work they enqueued (:func:`iteration_timeline`). Returns a DataFrame; draws nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler_core.analysis.kernel_names import short_kernel_name
from profiler_core.analysis.trace import (
    KERNEL_CATEGORY,
    STEP_MARKER_CATEGORIES,
    cut_iterations,
    is_step_marker,
    outermost_per_thread,
)
from profiler_core.analysis.trace_reading import TraceEvents, per_text

TIMELINE_COLUMNS = ["lane", "kind", "name", "start_us", "dur_us"]
TIMELINE_CPU_OP_CATEGORIES = ("cpu_op", "user_annotation")
TIMELINE_MAX_EVENTS = 4000  # events of one iteration kept for drawing (the longest first)
TIMELINE_MAX_THREADS = 16  # CPU threads drawn, one lane each (the step's own thread first)
LAUNCH_LANE = "CPU: launch calls"
GPU_LANE = "GPU: kernels, copies"


@dataclass(frozen=True, eq=False)
class IterationTimeline:
    """The events of one profiled iteration, for drawing its lanes. Compared by identity."""

    iteration: int  # which iteration (0-based, in start order)
    iterations: int  # how many the trace has
    span_us: float  # from the iteration's CPU start to its last CPU or GPU end
    iteration_source: str  # as in TraceAnalysis
    events: pd.DataFrame  # TIMELINE_COLUMNS; start_us from the iteration's CPU start
    dropped: int = 0  # short events left out to stay under TIMELINE_MAX_EVENTS
    hidden_threads: int = 0  # CPU threads beyond the first TIMELINE_MAX_THREADS, not drawn


def _spans(windows: pd.DataFrame, gpu_events: pd.DataFrame) -> pd.Series:
    last_gpu_end = gpu_events[gpu_events["iteration"] >= 0].groupby("iteration")["end"].max()
    ends = np.fmax(windows["cpu_end"].to_numpy(),
                   last_gpu_end.reindex(windows["iteration"]).to_numpy(dtype=float))
    return pd.Series(ends - windows["cpu_start"].to_numpy(), index=windows["iteration"])


def typical_iteration(spans: pd.Series) -> int:
    """The iteration whose span is the median one (the first iteration, often slow, only when
    it is the only one)."""
    candidates = spans.iloc[1:] if len(spans) > 2 else spans
    candidates = candidates.dropna()
    if candidates.empty:
        return int(spans.index[0]) if len(spans) else 0
    ordered = candidates.sort_values(kind="stable")
    return int(ordered.index[(len(ordered) - 1) // 2])


def iteration_timeline(trace: TraceEvents | dict, iteration: int | None = None,
                       max_events: int = TIMELINE_MAX_EVENTS) -> IterationTimeline:
    """One iteration of a profiled window as lanes of events, cut at ``ProfilerStep#`` markers
    like ``trace.analyse_trace`` (the median-span iteration when ``iteration`` is None; an index out
    of range is clamped).

    Lanes: the outermost CPU ops of each thread that has some in the iteration's CPU window
    ("CPU: ops, thread 1" is the thread that ran the step marker), the launch calls starting in
    the window ("CPU: launch calls"), and the GPU work those calls enqueued ("GPU: kernels,
    copies"; kinds "kernel" and "memcpy/memset"). Times are microseconds from the iteration's
    CPU start; ``name`` is the trace's own text (escape it before showing it as markup).
    """
    events, launch_calls, gpu_events, windows, source = cut_iterations(trace)
    empty = pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith("_us") else "object")
                          for c in TIMELINE_COLUMNS})
    if windows.empty:
        return IterationTimeline(0, 0, math.nan, source, empty)
    spans = _spans(windows, gpu_events)
    chosen = typical_iteration(spans) if iteration is None else int(
        min(max(int(iteration), 0), len(windows) - 1))
    window = windows.set_index("iteration").loc[chosen]
    start, end = float(window["cpu_start"]), float(window["cpu_end"])

    def rows(frame: pd.DataFrame, lane, kind, names=None) -> pd.DataFrame:
        # names stay Python objects (each distinct text held once) until the rows are trimmed
        names = frame["name"].to_numpy(dtype=object) if names is None else names
        return pd.DataFrame({"lane": lane, "kind": kind, "name": pd.Series(names, dtype=object),
                             "start_us": frame["ts"].to_numpy() - start,
                             "dur_us": frame["dur"].to_numpy()})

    parts = []
    markers = is_step_marker(events["name"])
    ops = events[events["cat"].isin(TIMELINE_CPU_OP_CATEGORIES).to_numpy() & ~markers
                 & (events["ts"] >= start).to_numpy() & (events["ts"] <= end).to_numpy()]
    ops = outermost_per_thread(ops)
    hidden_threads = 0
    if len(ops):
        marker_rows = events[markers & events["cat"].isin(STEP_MARKER_CATEGORIES).to_numpy()]
        main = (marker_rows["pid"].iloc[0], marker_rows["tid"].iloc[0]) if len(marker_rows) else None
        first_ops = ops.sort_values("ts", kind="stable").drop_duplicates(["pid", "tid"])
        threads = list(zip(first_ops["pid"], first_ops["tid"]))
        if main in threads:
            threads.remove(main)
            threads.insert(0, main)
        hidden_threads = max(0, len(threads) - TIMELINE_MAX_THREADS)
        for number, (pid, tid) in enumerate(threads[:TIMELINE_MAX_THREADS], start=1):
            on_thread = ops[(ops["pid"] == pid) & (ops["tid"] == tid)]
            parts.append(rows(on_thread, f"CPU: ops, thread {number}", "CPU op"))
    launches = launch_calls[(launch_calls["ts"] >= start) & (launch_calls["ts"] <= end)]
    if len(launches):
        parts.append(rows(launches, LAUNCH_LANE, "launch call"))
    gpu = gpu_events[gpu_events["iteration"] == chosen]
    if len(gpu):
        is_kernel = (gpu["cat"] == KERNEL_CATEGORY).to_numpy()
        kinds = np.where(is_kernel, "kernel", "memcpy/memset")
        names = np.where(is_kernel, per_text(gpu["name"], short_kernel_name),
                         gpu["name"].to_numpy(dtype=object))
        parts.append(rows(gpu, GPU_LANE, kinds, names))
    timeline = pd.concat(parts, ignore_index=True) if parts else empty
    dropped = 0
    if len(timeline) > max_events:  # keep the longest events, in their lanes
        keep = timeline["dur_us"].rank(method="first", ascending=False) <= max_events
        dropped = int((~keep).sum())
        timeline = timeline[keep]
    timeline = timeline.sort_values(["start_us"], kind="stable").reset_index(drop=True)
    timeline["name"] = timeline["name"].astype(str)
    return IterationTimeline(chosen, len(windows), float(spans.loc[chosen]), source,
                             timeline[TIMELINE_COLUMNS], dropped, hidden_threads)
