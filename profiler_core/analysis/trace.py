"""Graph-aware analysis of a profiled window (a Chrome trace read by ``trace_reading``).

Scope: cut the trace into iterations, split each into CPU launch time, other CPU time, GPU busy
and GPU idle time (:class:`TraceAnalysis` defines each figure), list the kernels with the
operators that launched them, decompose a mode's speedup over eager into those parts, and write a
plain-text report. It returns DataFrames; it never runs a workload, imports torch or draws.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from profiler_core.analysis.kernel_names import KERNEL_NAME_MAX_CHARS, kernel_label
from profiler_core.analysis.trace_reading import TraceEvents, events_of, per_text
from profiler_core.spec.schema import BREAKDOWN_COLUMNS, KERNEL_COLUMNS, LAUNCH_SPLIT_COLUMNS

# Runtime and driver calls that enqueue GPU work. Trace names may carry a CUPTI version suffix
# ("cudaLaunchKernel_v7000") and a per-thread-stream suffix ("_ptsz", "_ptds"); both are
# stripped before the name is looked up here.
LAUNCH_API_NAMES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuGraphLaunch",
)
GRAPH_LAUNCH_API_NAMES = ("cudaGraphLaunch", "cuGraphLaunch")

# Kineto's Chrome-trace export (checked with torch 2.13 on CPU; GPU categories as GPU-FACTS.md
# lists them for torch 2.11): CPU-side CUDA API calls have category ``cuda_runtime`` or
# ``cuda_driver``; GPU work ``kernel``, ``gpu_memcpy`` or ``gpu_memset``, linked to the API call
# that enqueued it by ``args["correlation"]`` (every kernel of a graph replay carries the
# correlation id of its ``cudaGraphLaunch``). Step markers ``ProfilerStep#N`` are
# ``user_annotation`` in recent torch, ``cpu_op`` in older ones; torch writes them only when the
# profiler has a ``schedule`` and the loop calls ``prof.step()``.
API_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
GPU_EVENT_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_CATEGORY = "kernel"
STEP_MARKER_CATEGORIES = ("user_annotation", "cpu_op")
# Complete events that are not CPU activity: GPU work, the GPU copy of the step markers, and the
# profiler's own span ("PyTorch Profiler (0)"), which covers more than the recorded work.
NOT_CPU_CATEGORIES = GPU_EVENT_CATEGORIES + ("gpu_user_annotation", "trace")

STEP_MARKER_PATTERN = r"ProfilerStep#\d+"
API_NAME_SUFFIX_PATTERN = re.compile(r"(_ptsz|_ptds)?(_v\d+)?$")

ITERATION_SOURCE_DESCRIPTIONS = {
    "profiler_steps": "the profiler's step markers (ProfilerStep#N), one iteration per step",
    "graph_launches": (
        "graph launches: no ProfilerStep markers were found, so each cudaGraphLaunch is one "
        "iteration, from the launch call to the end of its last kernel"
    ),
    "whole_trace": (
        "the whole trace as one window: no ProfilerStep markers and no graph launches were "
        "found, so the figures are totals for the trace, not per training step"
    ),
}

SUMMARY_FIELDS = (
    "span_us", "cpu_launch_us", "cpu_other_us", "gpu_busy_us", "gpu_idle_us", "launches",
    "kernels", "launch_delay_us",
)
LAUNCH_SPLIT_DTYPES = {
    "mode": str, "iteration": "int64", "span_us": "float64", "cpu_launch_us": "float64",
    "cpu_other_us": "float64", "gpu_busy_us": "float64", "gpu_idle_us": "float64",
    "launches": "int64", "kernels": "int64", "launch_delay_us": "float64",
}
KERNEL_DTYPES = {
    "mode": str, "kernel": str, "kernel_full": str, "operator": str, "calls_per_iter": "float64",
    "total_us": "float64", "mean_us": "float64", "min_us": "float64", "max_us": "float64",
    "share_of_gpu_pct": "float64",
}
# The operator that launched a kernel: the innermost CPU op (category ``cpu_op``: ``aten::addmm``,
# ``aten::fill_``...) on the launching thread whose span holds the start of the kernel's launch
# call (linked by correlation id), as the PyTorch profiler and HTA attribute kernels to ops. A
# kernel of a graph replay was launched by the replay (``GRAPH_REPLAY_OPERATOR``); one whose call
# has no enclosing op gets "". A kernel launched by several operators lists the most frequent
# first, at most ``OPERATORS_PER_KERNEL`` names of at most ``OPERATOR_NAME_MAX_CHARS`` characters
# (then "+N more"), so a row stays short.
OPERATOR_CATEGORY = "cpu_op"
GRAPH_REPLAY_OPERATOR = "CUDA graph replay"
OPERATORS_PER_KERNEL = 3
OPERATOR_NAME_MAX_CHARS = 200
BREAKDOWN_DTYPES = {
    "mode": str, "component": str, "eager_us": "float64", "mode_us": "float64",
    "saving_us": "float64", "share_of_saving_pct": "float64",
}
REPORT_TOP_KERNELS = 10


@dataclass(frozen=True, eq=False)
class TraceAnalysis:
    """One trace analysed. Compared by identity (its fields are DataFrames).

    Iterations come from the step markers; without them each ``cudaGraphLaunch`` is one (its CPU
    window is the launch call itself); without those either, the whole trace is one window. Per
    iteration, in microseconds, with its CPU window [cpu_start, cpu_end]:

    - a GPU event belongs to the iteration whose CPU window holds the start of its linked API
      call; GPU events whose call is not in the trace count only when the whole trace is the
      window.
    - ``cpu_launch_us``: summed duration of the launch calls (``LAUNCH_API_NAMES``) starting in
      the window, on any thread; a launch call nested in another on the same thread (a driver
      call made by a runtime call) is not counted again. ``launches`` counts them.
    - ``cpu_other_us``: window duration minus ``cpu_launch_us`` (negative only if several
      threads launch at the same time).
    - ``span_us``: from ``cpu_start`` to the later of ``cpu_end`` and the end of the iteration's
      last GPU event (when the CPU runs ahead, consecutive spans overlap and ``gpu_idle_us``
      includes time the GPU spent on the previous iteration's work).
    - ``gpu_busy_us``: length of the union of the iteration's GPU intervals (kernels, memcpy,
      memset), clipped to the span; ``gpu_idle_us`` = ``span_us`` - ``gpu_busy_us``.
    - ``kernels``: GPU events of category ``kernel`` (memcpy/memset count in busy time only).
    - ``launch_delay_us``: median, over the launch calls that enqueued GPU work, of the first GPU
      start minus the end of the call; NaN without any.
    """

    mode: str  # label written in every row, e.g. "eager" or "graph"
    launch_split: pd.DataFrame  # LAUNCH_SPLIT_COLUMNS, one row per iteration
    kernels: pd.DataFrame  # KERNEL_COLUMNS, kernels of the analysed iterations
    iteration_source: str  # "profiler_steps", "graph_launches" or "whole_trace"
    launch_api_names: tuple[str, ...]  # launch call names found in the trace, as written there
    gpu_event_count: int  # kernel + memcpy + memset events in the whole trace

    def summary(self) -> dict[str, float]:
        """Per-iteration medians of the launch split; NaN where no iteration has a value."""
        medians = {}
        for field in SUMMARY_FIELDS:
            values = self.launch_split[field].dropna()
            medians[field] = float(values.median()) if len(values) else float("nan")
        return medians


def analyse_trace(trace: TraceEvents | dict, mode: str = "trace") -> TraceAnalysis:
    """Cut ``trace`` (read by ``trace_reading.load_trace``, or a Chrome trace object as
    ``json.load`` gives it) into iterations and measure each one (:class:`TraceAnalysis`)."""
    events, launch_calls, gpu_events, windows, source = cut_iterations(trace)
    launch_calls = launch_calls.assign(
        iteration=_window_of(launch_calls["ts"].to_numpy(), windows)
    )
    launch_split = _launch_split(windows, launch_calls, gpu_events, mode)
    assigned_kernels = gpu_events[
        (gpu_events["iteration"] >= 0) & (gpu_events["cat"] == KERNEL_CATEGORY)
    ]
    assigned_kernels = assigned_kernels.assign(operator=_launching_operators(events, assigned_kernels))
    return TraceAnalysis(
        mode=mode,
        launch_split=launch_split,
        kernels=_kernel_table(assigned_kernels, len(windows), mode),
        iteration_source=source,
        launch_api_names=tuple(sorted({str(name) for name in launch_calls["name"].unique()})),
        gpu_event_count=len(gpu_events),
    )


def cut_iterations(trace: TraceEvents | dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame,
                                             pd.DataFrame, str]:
    """A trace's complete events, its launch calls (outermost per thread; columns
    ``launches``, ``graph_launch``), its GPU events linked to their calls (``call_ts``,
    ``call_end``, ``by_launch_call``) with the ``iteration`` each belongs to (-1: none), its
    iteration windows and their source."""
    events = events_of(trace)
    api_calls = events[events["cat"].isin(API_CALL_CATEGORIES)]
    api_calls = api_calls.assign(
        launches=per_text(api_calls["name"], lambda name: _api_name(name) in LAUNCH_API_NAMES,
                           bool),
        graph_launch=per_text(api_calls["name"],
                               lambda name: _api_name(name) in GRAPH_LAUNCH_API_NAMES, bool),
    )
    launch_calls = outermost_per_thread(api_calls[api_calls["launches"]])
    windows, source = _iteration_windows(events, launch_calls)
    gpu_events = _link_to_calls(events[events["cat"].isin(GPU_EVENT_CATEGORIES)], api_calls)
    if source == "whole_trace":
        gpu_events = gpu_events.assign(iteration=np.zeros(len(gpu_events), dtype="int64"))
    else:
        gpu_events = gpu_events.assign(iteration=_window_of(gpu_events["call_ts"], windows))
    return events, launch_calls, gpu_events, windows, source


def _launching_operators(events: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """For each kernel event, the operator that launched it (see ``OPERATOR_CATEGORY``): the
    innermost ``cpu_op`` on its launch call's thread holding the call's start; the graph replay
    for a kernel launched by ``cudaGraphLaunch``; "" when none is found. One pass per launching
    thread over its ops and calls in time order (a stack of the ops open), so it costs one step
    per event, however deeply ops nest."""
    out = np.full(len(kernels), "", dtype=object)
    if kernels.empty:
        return out
    calls = events[events["cat"].isin(API_CALL_CATEGORIES)].dropna(subset=["correlation"])
    calls = calls.drop_duplicates("correlation")
    calls = calls[calls["correlation"].isin(kernels["correlation"])]
    if calls.empty:
        return out
    graph = per_text(calls["name"], lambda name: _api_name(name) in GRAPH_LAUNCH_API_NAMES, bool)
    ops = events[events["cat"] == OPERATOR_CATEGORY]
    ops_of_thread = {thread: group for thread, group in ops.groupby(["pid", "tid"], observed=True)}
    by_call: dict[float, str] = {}
    for thread, thread_calls in calls[~graph].groupby(["pid", "tid"], observed=True):
        if thread not in ops_of_thread:
            continue
        thread_ops = ops_of_thread[thread].sort_values(["ts", "end"], ascending=[True, False],
                                                       kind="stable")
        op_ts = thread_ops["ts"].to_numpy(dtype=float)
        op_end = thread_ops["end"].to_numpy(dtype=float)
        op_name = thread_ops["name"].to_numpy(dtype=object)
        ordered = thread_calls.sort_values("ts", kind="stable")
        stack: list[int] = []
        next_op = 0
        for when, correlation in zip(ordered["ts"].to_numpy(dtype=float),
                                     ordered["correlation"].to_numpy(dtype=float)):
            while next_op < len(op_ts) and op_ts[next_op] <= when:
                while stack and op_end[stack[-1]] < op_ts[next_op]:
                    stack.pop()  # ended before this op began: not open any more
                stack.append(next_op)
                next_op += 1
            while stack and op_end[stack[-1]] < when:
                stack.pop()
            if stack:
                by_call[correlation] = str(op_name[stack[-1]])[:OPERATOR_NAME_MAX_CHARS]
    for correlation in calls.loc[graph, "correlation"].to_numpy(dtype=float):
        by_call[correlation] = GRAPH_REPLAY_OPERATOR
    found = kernels["correlation"].map(by_call)
    return np.where(found.notna(), found, "").astype(object)


def _operators_text(operators: pd.Series) -> str:
    """The operators of one kernel's calls in a cell: the most frequent first ('aten::add_,
    aten::mul (+2 more)'); "" when none is known."""
    counts = operators[operators != ""].value_counts(sort=False)
    if counts.empty:
        return ""
    names = sorted(counts.index, key=lambda name: (-counts[name], name))
    text = ", ".join(names[:OPERATORS_PER_KERNEL])
    return text + (f" (+{len(names) - OPERATORS_PER_KERNEL} more)"
                   if len(names) > OPERATORS_PER_KERNEL else "")


def _api_name(name: str) -> str:
    """A CUDA API call's name without its version and per-thread-stream suffixes."""
    return API_NAME_SUFFIX_PATTERN.sub("", name)



def is_step_marker(names: pd.Series) -> np.ndarray:
    """Whether each name (a categorical column of ``TraceEvents``) is a ``ProfilerStep#N``."""
    return per_text(names, lambda name: re.fullmatch(STEP_MARKER_PATTERN, name) is not None,
                    bool)


def decompose_speedup(eager: TraceAnalysis, other: TraceAnalysis) -> pd.DataFrame:
    """Where the per-iteration time went, eager vs ``other`` (one mode's block of breakdown.csv,
    BREAKDOWN_COLUMNS; ``mode`` is ``other.mode`` in every row, ``mode_us`` its times).

    Rows: ``gpu_busy`` (median GPU busy time), ``gpu_idle`` (median span minus median busy, so
    that ``gpu_busy`` + ``gpu_idle`` = ``total_span`` exactly in every column; medians are not
    additive, so this can differ slightly from the median of per-iteration idle times),
    ``total_span`` (median span), then ``cpu_launch`` and ``cpu_other`` (median CPU times: they
    explain the saving but do not add up to it). ``saving_us`` = ``eager_us`` - ``mode_us``;
    ``share_of_saving_pct`` is every row's saving as a percentage of the span saving (NaN when
    the span saving is zero), so a CPU row above 100% means more CPU time was removed than
    span time.
    """
    return decompose_medians(eager.summary(), other.summary(), mode=other.mode)


def decompose_medians(eager: Mapping[str, float], other: Mapping[str, float], *,
                      mode: str) -> pd.DataFrame:
    """:func:`decompose_speedup` from two modes' launch-split medians (``TraceAnalysis.summary``
    or a launch_split.csv's medians): mode ``mode`` (whose medians ``other`` holds) against
    eager, its block of breakdown.csv."""
    eager_us, mode_us = _breakdown_components(eager), _breakdown_components(other)
    span_saving = eager_us["total_span"] - mode_us["total_span"]
    rows = []
    for component in eager_us:
        saving = eager_us[component] - mode_us[component]
        rows.append({
            "mode": mode,
            "component": component,
            "eager_us": eager_us[component],
            "mode_us": mode_us[component],
            "saving_us": saving,
            "share_of_saving_pct": saving / span_saving * 100 if span_saving else float("nan"),
        })
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS).astype(BREAKDOWN_DTYPES)


def _breakdown_components(medians: Mapping[str, float]) -> dict[str, float]:
    return {
        "gpu_busy": medians["gpu_busy_us"],
        "gpu_idle": medians["span_us"] - medians["gpu_busy_us"],
        "total_span": medians["span_us"],
        "cpu_launch": medians["cpu_launch_us"],
        "cpu_other": medians["cpu_other_us"],
    }


def format_report(analysis: TraceAnalysis) -> str:
    """A plain-text report of one analysed trace."""
    split = analysis.launch_split
    lines = [
        f"Trace analysis, mode {analysis.mode!r}",
        f"Iterations: {len(split)}, taken from "
        f"{ITERATION_SOURCE_DESCRIPTIONS[analysis.iteration_source]}.",
        f"GPU events in the trace (kernel, memcpy, memset): {analysis.gpu_event_count}",
        "Launch calls counted: "
        + (", ".join(analysis.launch_api_names) or "none found in this trace"),
        "",
        "Per-iteration medians:",
    ]
    medians = analysis.summary()
    for field in SUMMARY_FIELDS:
        unit = " us" if field.endswith("_us") else ""
        lines.append(f"  {field.removesuffix('_us'):<14}{medians[field]:>12.1f}{unit}")
    lines.append("")
    top = analysis.kernels.head(REPORT_TOP_KERNELS)
    if top.empty:
        lines.append("No GPU kernels in the analysed iterations (a CPU-only profile?).")
        return "\n".join(lines)
    lines.append(f"Top {len(top)} kernels by total time:")
    lines.append(f"  {'kernel':<{KERNEL_NAME_MAX_CHARS}} {'calls/iter':>10} {'total us':>10} "
                 f"{'mean us':>9} {'% of GPU':>8}")
    for kernel in top.itertuples(index=False):
        lines.append(
            f"  {kernel.kernel:<{KERNEL_NAME_MAX_CHARS}} {kernel.calls_per_iter:>10.2f} "
            f"{kernel.total_us:>10.1f} {kernel.mean_us:>9.2f} {kernel.share_of_gpu_pct:>8.1f}"
        )
    return "\n".join(lines)



def outermost_per_thread(calls: pd.DataFrame) -> pd.DataFrame:
    """Drop calls that lie inside an earlier call on the same thread (nested driver calls)."""
    ordered = calls.sort_values(["pid", "tid", "ts", "end"], ascending=[True, True, True, False])
    thread = [ordered["pid"], ordered["tid"]]
    furthest_end_before = (ordered.groupby(thread, observed=True)["end"].cummax()
                           .groupby(thread, observed=True).shift())
    nested = (ordered["ts"] < furthest_end_before) & (ordered["end"] <= furthest_end_before)
    return ordered[~nested].sort_index()


def _iteration_windows(events: pd.DataFrame,
                       launch_calls: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """CPU windows ``iteration, cpu_start, cpu_end`` sorted by start, and their source."""
    step_markers = events[
        events["cat"].isin(STEP_MARKER_CATEGORIES).to_numpy() & is_step_marker(events["name"])
    ]
    graph_launches = launch_calls[launch_calls["graph_launch"]]
    if len(step_markers):
        chosen, source = step_markers, "profiler_steps"
    elif len(graph_launches):
        chosen, source = graph_launches, "graph_launches"
    else:
        cpu_events = events[~events["cat"].isin(NOT_CPU_CATEGORIES)]
        if len(cpu_events):
            start, end = cpu_events["ts"].min(), cpu_events["end"].max()
        else:  # GPU events only, or nothing at all
            start = end = events["ts"].min()
        chosen = pd.DataFrame({"ts": [start], "end": [end]}).dropna()
        source = "whole_trace"
    chosen = chosen.sort_values("ts")
    windows = pd.DataFrame({
        "iteration": np.arange(len(chosen), dtype="int64"),
        "cpu_start": chosen["ts"].to_numpy(dtype="float64"),
        "cpu_end": chosen["end"].to_numpy(dtype="float64"),
    })
    return windows, source


def _window_of(timestamps, windows: pd.DataFrame) -> np.ndarray:
    """Index of the window containing each timestamp, -1 for none (or a NaN timestamp)."""
    timestamps = np.asarray(timestamps, dtype="float64")
    if windows.empty:
        return np.full(len(timestamps), -1, dtype="int64")
    starts, ends = windows["cpu_start"].to_numpy(), windows["cpu_end"].to_numpy()
    candidate = np.searchsorted(starts, timestamps, side="right") - 1
    inside = (candidate >= 0) & (timestamps <= ends[np.maximum(candidate, 0)])
    return np.where(inside, candidate, -1).astype("int64")


def _link_to_calls(gpu_events: pd.DataFrame, api_calls: pd.DataFrame) -> pd.DataFrame:
    """Add the linked API call's start and end (NaN when unlinked) and whether it launches."""
    calls = api_calls.dropna(subset=["correlation"]).drop_duplicates("correlation")
    call_by_correlation = calls.set_index("correlation")
    launch_correlations = calls.loc[calls["launches"], "correlation"]
    correlation = gpu_events["correlation"]
    return gpu_events.assign(
        call_ts=correlation.map(call_by_correlation["ts"]).astype("float64"),
        call_end=correlation.map(call_by_correlation["end"]).astype("float64"),
        by_launch_call=correlation.isin(launch_correlations),
    )


def _launch_split(windows: pd.DataFrame, launch_calls: pd.DataFrame,
                  gpu_events: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One LAUNCH_SPLIT_COLUMNS row per window (definitions in :class:`TraceAnalysis`)."""
    split = windows.set_index("iteration")
    per_launch = launch_calls.groupby("iteration")["dur"]
    split["cpu_launch_us"] = per_launch.sum().reindex(split.index, fill_value=0.0)
    split["launches"] = per_launch.size().reindex(split.index, fill_value=0)
    per_gpu_event = gpu_events.groupby("iteration")
    last_gpu_end = per_gpu_event["end"].max().reindex(split.index)
    split["span_end"] = np.fmax(split["cpu_end"], last_gpu_end)
    split["span_us"] = split["span_end"] - split["cpu_start"]
    split["cpu_other_us"] = split["cpu_end"] - split["cpu_start"] - split["cpu_launch_us"]
    split["gpu_busy_us"] = _busy_time(gpu_events, split).reindex(split.index, fill_value=0.0)
    split["gpu_idle_us"] = split["span_us"] - split["gpu_busy_us"]
    is_kernel = (gpu_events["cat"] == KERNEL_CATEGORY).groupby(gpu_events["iteration"])
    split["kernels"] = is_kernel.sum().reindex(split.index, fill_value=0)
    split["launch_delay_us"] = _launch_delays(gpu_events).reindex(split.index)
    split["mode"] = mode
    return split.reset_index()[LAUNCH_SPLIT_COLUMNS].astype(LAUNCH_SPLIT_DTYPES)


def _busy_time(gpu_events: pd.DataFrame, split: pd.DataFrame) -> pd.Series:
    """Per iteration, the length of the union of its GPU intervals clipped to its span.

    With intervals sorted by start, each adds what reaches past the furthest end before it.
    """
    in_windows = gpu_events[gpu_events["iteration"].isin(split.index)]
    lower = split["cpu_start"].reindex(in_windows["iteration"]).to_numpy()
    upper = split["span_end"].reindex(in_windows["iteration"]).to_numpy()
    intervals = pd.DataFrame({
        "iteration": in_windows["iteration"].to_numpy(),
        "start": np.clip(in_windows["ts"].to_numpy(), lower, upper),
        "end": np.clip(in_windows["end"].to_numpy(), lower, upper),
    }).sort_values(["iteration", "start"], kind="stable")
    furthest_end_before = (
        intervals.groupby("iteration")["end"].cummax().groupby(intervals["iteration"]).shift()
    )
    reach_start = np.fmax(intervals["start"], furthest_end_before)
    added = (intervals["end"] - reach_start).clip(lower=0)
    return added.groupby(intervals["iteration"]).sum()


def _launch_delays(gpu_events: pd.DataFrame) -> pd.Series:
    """Per iteration, the median over launch calls of first GPU start minus end of the call."""
    launched = gpu_events[gpu_events["by_launch_call"] & (gpu_events["iteration"] >= 0)]
    per_call = launched.groupby(["iteration", "correlation"]).agg(
        first_gpu_start=("ts", "min"), call_end=("call_end", "first")
    )
    delays = per_call["first_gpu_start"] - per_call["call_end"]
    return delays.groupby(level="iteration").median()


def _kernel_table(kernels: pd.DataFrame, iterations: int, mode: str) -> pd.DataFrame:
    per_name = kernels.groupby("name", observed=True).agg(
        calls=("dur", "size"), total_us=("dur", "sum"), mean_us=("dur", "mean"),
        min_us=("dur", "min"), max_us=("dur", "max"),
    ).reset_index()
    all_kernels_us = per_name["total_us"].sum()
    full_names = per_name["name"].to_numpy(dtype=object)
    if "operator" in kernels and len(per_name):
        operators = kernels.groupby("name", observed=True)["operator"].agg(_operators_text)
        operator = operators.reindex(per_name["name"]).fillna("").to_numpy(dtype=object)
    else:
        operator = np.full(len(per_name), "", dtype=object)
    table = pd.DataFrame({
        "mode": mode,
        "kernel": [kernel_label(name) for name in full_names],
        "kernel_full": full_names,
        "operator": operator,
        "calls_per_iter": per_name["calls"] / iterations if iterations else np.nan,
        "total_us": per_name["total_us"],
        "mean_us": per_name["mean_us"],
        "min_us": per_name["min_us"],
        "max_us": per_name["max_us"],
        "share_of_gpu_pct": per_name["total_us"] / all_kernels_us * 100 if all_kernels_us
        else np.nan,
    }, columns=KERNEL_COLUMNS)
    table = table.sort_values(["total_us", "kernel_full"], ascending=[False, True])
    return table.astype(KERNEL_DTYPES).reset_index(drop=True)

