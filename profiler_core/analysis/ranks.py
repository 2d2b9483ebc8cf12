"""Per-rank figures of a data-parallel run: communication against compute in each rank's
profiled window, the all-reduce's arrival wait between ranks, the straggler, and the job's pace.

Scope: pure pandas over what the ranks measured (their steady-state rows, host issue times and
Chrome-trace events as ``trace.load_trace`` reads them); it never runs torch and never draws.

How a rank's profiled window is read (each iteration marked ``ProfilerStep#N`` and synchronised
after, so the device work of iteration N lies between its mark and the next one):

- On a GPU, communication is the kernels named as NCCL names them (``ncclDevKernel_AllReduce*``,
  ``ncclKernel_*``); compute is every other kernel, copy and set. On the CPU (gloo), it is the
  collectives' own annotations (``gloo:all_reduce``, on gloo's thread) against the CPU operators
  of the step's thread.
- ``comm_hidden_us`` is the communication time overlapped by compute, ``comm_exposed_us`` the
  rest; ``host_wait_us`` is the iteration's span with neither running (the device waiting for
  the host); ``busy_us`` the union of both.
- The k-th collective of iteration N is the same all-reduce on every rank (DDP reduces the same
  buckets in the same order). All ranks leave it together, so a rank that arrived early waits
  inside it: its ``arrival_wait_us`` is its duration less the shortest rank's. This needs no clock
  shared between hosts. The rank that waits least arrived last: the straggler, named when the
  spread of waits is at least ``STRAGGLER_MIN_US`` and ``STRAGGLER_MIN_SHARE`` of the step.
- The job runs at its slowest rank's pace: the job's step time per mode is the largest rank's,
  and the job's speedup is eager's over the mode's on those figures, shown beside each rank's own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.trace import GPU_EVENT_CATEGORIES, STEP_MARKER_PATTERN

# Communication events: NCCL's kernels on a GPU, the collectives' annotations on the CPU.
GPU_COMM_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_", re.IGNORECASE)
GPU_COMM_KERNEL_IN_TEXT = re.compile(r"nccl(?:Dev)?Kernel_\w+")  # in a graph's debug dump
CPU_COMM_EVENT = re.compile(r"^(?:gloo|nccl|mpi|ucc):", re.IGNORECASE)
# CPU operators on the step's thread that wait for or hand off a collective, not compute.
CPU_NOT_COMPUTE = re.compile(r"c10d::|allreduce|all_reduce|wait", re.IGNORECASE)
CPU_COMPUTE_CATEGORIES = ("cpu_op",)

STRAGGLER_MIN_US = 100.0  # smallest spread of arrival waits that names a straggler
STRAGGLER_MIN_SHARE = 0.1  # ... and its smallest share of the slowest rank's step

WINDOW_COLUMNS = ["iteration", "span_us", "busy_us", "compute_us", "comm_us", "comm_exposed_us",
                  "comm_hidden_us", "host_wait_us", "comm_calls"]
INSTANCE_COLUMNS = ["iteration", "ordinal", "dur_us"]
WAIT_COLUMNS = ["rank", "iteration", "ordinal", "wait_us"]

# ranks.csv's metrics, in order (per rank and mode; times per training step unless "_us", which
# are per profiled iteration). Defined in the module docstring and in ``schema.RANK_COLUMNS``.
RANK_METRICS = (
    "step_median_ms",  # median over trials of each trial's mean time per step (the headline's)
    "step_p50_ms", "step_p99_ms",  # over the steady-state iterations, per step
    "host_issue_ms",  # host time to issue a step, median over trials
    "speedup",  # this rank's own: eager's step_median_ms over the mode's
    "job_speedup",  # the job's: the slowest rank's eager over the slowest rank's mode
    "span_us", "busy_us", "compute_us", "comm_us", "comm_exposed_us", "comm_hidden_us",
    "host_wait_us", "comm_calls", "all_reduce_share_pct", "arrival_wait_us",
    "straggler",  # 1 for the rank named the straggler in this mode, else 0 (NaN: none named)
    "one_time_ms",  # preparation: capture or compile with its warm-up
    "params_max_abs_diff_to_rank0",  # after the timed steps: 0 when bit-identical to rank 0's
    "parity_max_abs_diff",  # the mode's parameters against eager's after the same steps
    "all_reduce_captured",  # graph: 1 when every profiled replay held an all-reduce kernel
    "graph_all_reduce_nodes",  # graph: NCCL kernel names in the captured graph's debug dump
)


def _merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(merged: Sequence[tuple[float, float]]) -> float:
    return float(sum(end - start for start, end in merged))


def _overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Length of the intersection of two merged interval lists."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


def _intervals(frame: pd.DataFrame, low: float, high: float) -> list[tuple[float, float]]:
    starts = frame["ts"].to_numpy(dtype=float).clip(low, high)
    ends = frame["end"].to_numpy(dtype=float).clip(low, high)
    return _merged(zip(starts, ends))


def window_figures(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One rank's profiled window (``trace.TraceEvents.events``): per iteration the figures of
    ``WINDOW_COLUMNS``, and every collective as (iteration, ordinal, dur_us). Empty frames (with
    their columns) when the window has no iteration marks."""
    names = events["name"].astype(str)
    markers = events[names.str.fullmatch(STEP_MARKER_PATTERN)].sort_values("ts")
    device = events[events["cat"].astype(str).isin(GPU_EVENT_CATEGORIES)]
    on_gpu = not device.empty
    if on_gpu:
        is_comm = device["name"].astype(str).str.contains(GPU_COMM_KERNEL)
        comm_events, compute_events = device[is_comm], device[~is_comm]
    else:
        comm_events = events[names.str.contains(CPU_COMM_EVENT)]
        threads = set(markers["tid"].astype(str))
        compute_events = events[events["cat"].astype(str).isin(CPU_COMPUTE_CATEGORIES)
                                & events["tid"].astype(str).isin(threads)
                                & ~names.str.contains(CPU_NOT_COMPUTE)
                                & ~names.str.fullmatch(STEP_MARKER_PATTERN)]
    rows, instances = [], []
    starts = markers["ts"].to_numpy(dtype=float)
    for index, (start, marker_end) in enumerate(zip(starts, markers["end"].to_numpy(dtype=float))):
        next_start = starts[index + 1] if index + 1 < len(starts) else math.inf
        in_comm = comm_events[(comm_events["ts"] >= start) & (comm_events["ts"] < next_start)]
        in_compute = compute_events[(compute_events["ts"] >= start)
                                    & (compute_events["ts"] < next_start)]
        end = marker_end
        if on_gpu:
            last = pd.concat([in_comm["end"], in_compute["end"]])
            end = max(marker_end, float(last.max()) if len(last) else marker_end)
        comm, compute = _intervals(in_comm, start, end), _intervals(in_compute, start, end)
        comm_us, hidden = _length(comm), _overlap(comm, compute)
        busy = _length(_merged([*comm, *compute]))
        rows.append({"iteration": index, "span_us": end - start, "busy_us": busy,
                     "compute_us": _length(compute), "comm_us": comm_us,
                     "comm_exposed_us": comm_us - hidden, "comm_hidden_us": hidden,
                     "host_wait_us": max(0.0, end - start - busy), "comm_calls": len(in_comm)})
        for ordinal, duration in enumerate(in_comm.sort_values("ts")["dur"].to_numpy(dtype=float)):
            instances.append({"iteration": index, "ordinal": ordinal, "dur_us": duration})
    return (pd.DataFrame(rows, columns=WINDOW_COLUMNS),
            pd.DataFrame(instances, columns=INSTANCE_COLUMNS))


def arrival_waits(instances: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Each rank's wait inside every collective that all ranks recorded (rank -> its
    ``INSTANCE_COLUMNS`` frame): its duration less the shortest rank's (``WAIT_COLUMNS``)."""
    frames = [frame.assign(rank=rank) for rank, frame in instances.items() if len(frame)]
    if len(frames) < 2 or len(frames) < len(instances):
        return pd.DataFrame(columns=WAIT_COLUMNS)
    every = pd.concat(frames, ignore_index=True)
    counts = every.groupby(["iteration", "ordinal"])["rank"].transform("nunique")
    every = every[counts == len(instances)].copy()
    every["wait_us"] = every["dur_us"] - every.groupby(["iteration", "ordinal"])["dur_us"].transform("min")
    return every[WAIT_COLUMNS].reset_index(drop=True)


def _trial_means(rows: pd.DataFrame) -> np.ndarray:
    """Each steady-state trial's mean time per step (events, else wall clock)."""
    column = "gpu_ms" if rows["gpu_ms"].notna().any() else "wall_ms"
    per_step = rows[column].astype(float) / rows["steps"].astype(float)
    values = per_step.groupby(rows["trial"]).mean().to_numpy(dtype=float)
    return values[np.isfinite(values)]


def _per_step(rows: pd.DataFrame) -> np.ndarray:
    column = "gpu_ms" if rows["gpu_ms"].notna().any() else "wall_ms"
    values = (rows[column].astype(float) / rows["steps"].astype(float)).to_numpy(dtype=float)
    return values[np.isfinite(values)]


def _median(values: Iterable[float]) -> float:
    array = np.asarray(list(values), dtype=float)
    array = array[np.isfinite(array)]
    return float(np.median(array)) if len(array) else math.nan


def step_figures(rank_latency: pd.DataFrame, host_issue: pd.DataFrame) -> pd.DataFrame:
    """Per rank and mode: ``step_median_ms``, ``step_p50_ms``, ``step_p99_ms`` and
    ``host_issue_ms`` (``rank_latency``: ``schema.RANK_LATENCY_COLUMNS``, steady rows;
    ``host_issue``: rank, mode, trial, ms), in ``schema.RANK_COLUMNS`` long form."""
    rows = []
    steady = rank_latency[rank_latency["method"] == "steady"]
    for (rank, mode), group in steady.groupby(["rank", "mode"], sort=True):
        samples = _per_step(group)
        rows += [(rank, mode, "step_median_ms", _median(_trial_means(group))),
                 (rank, mode, "step_p50_ms", float(np.percentile(samples, 50)) if len(samples) else math.nan),
                 (rank, mode, "step_p99_ms", float(np.percentile(samples, 99)) if len(samples) else math.nan)]
        issued = host_issue[(host_issue["rank"] == rank) & (host_issue["mode"] == mode)]
        rows.append((rank, mode, "host_issue_ms", _median(issued["ms"])))
    return pd.DataFrame(rows, columns=["rank", "mode", "metric", "value"])


def window_summary(rank: int, mode: str, window: pd.DataFrame) -> list[tuple]:
    """A rank's profiled-window medians for ``mode`` as ranks.csv rows, with the all-reduce's
    share of the span."""
    rows = [(rank, mode, column, _median(window[column])) for column in WINDOW_COLUMNS[1:]]
    share = 100.0 * (window["comm_us"] / window["span_us"].where(window["span_us"] > 0))
    rows.append((rank, mode, "all_reduce_share_pct", _median(share)))
    return rows


def wait_summary(mode: str, waits: pd.DataFrame) -> list[tuple]:
    """Each rank's arrival wait in ``mode``: the median over iterations of its waits summed over
    the iteration's collectives."""
    per_iteration = waits.groupby(["rank", "iteration"])["wait_us"].sum().reset_index()
    return [(rank, mode, "arrival_wait_us", _median(group["wait_us"]))
            for rank, group in per_iteration.groupby("rank")]


def by_rank(table: pd.DataFrame, mode: str, metric: str) -> pd.Series:
    """rank -> value of ``metric`` in ``mode``."""
    rows = table[(table["mode"] == mode) & (table["metric"] == metric)]
    return pd.Series(rows["value"].to_numpy(dtype=float), index=rows["rank"].to_numpy())


def straggler(table: pd.DataFrame, mode: str) -> int | None:
    """The rank that arrives last at ``mode``'s all-reduces (the smallest arrival wait), when
    the spread of waits is large enough to say so (see the module docstring); else None."""
    waits = by_rank(table, mode, "arrival_wait_us").dropna()
    if len(waits) < 2:
        return None
    spread = float(waits.max() - waits.min())
    step_us = 1e3 * float(by_rank(table, mode, "step_median_ms").max())
    if spread < STRAGGLER_MIN_US or not (math.isfinite(step_us) and spread >= STRAGGLER_MIN_SHARE * step_us):
        return None
    return int(waits.idxmin())


def job_step_ms(table: pd.DataFrame, mode: str) -> tuple[float, int | None]:
    """The job's step time in ``mode`` (its slowest rank's median) and that rank."""
    medians = by_rank(table, mode, "step_median_ms").dropna()
    if medians.empty:
        return math.nan, None
    return float(medians.max()), int(medians.idxmax())


def with_speedups_and_straggler(table: pd.DataFrame) -> pd.DataFrame:
    """ranks.csv completed: every rank's own ``speedup`` and the job's ``job_speedup`` for each
    mode but eager, and ``straggler`` (1 or 0 per rank, per mode where one is named)."""
    rows = []
    eager = by_rank(table, "eager", "step_median_ms")
    job_eager, _ = job_step_ms(table, "eager")
    for mode in table["mode"].drop_duplicates():
        medians = by_rank(table, mode, "step_median_ms")
        if mode != "eager":
            job_mode, _ = job_step_ms(table, mode)
            for rank, value in medians.items():
                own = eager.get(rank, math.nan) / value if value > 0 else math.nan
                rows += [(rank, mode, "speedup", own),
                         (rank, mode, "job_speedup", job_eager / job_mode if job_mode > 0 else math.nan)]
        named = straggler(table, mode)
        if named is not None:
            rows += [(rank, mode, "straggler", float(rank == named)) for rank in medians.index]
    extra = pd.DataFrame(rows, columns=["rank", "mode", "metric", "value"])
    return order(pd.concat([table, extra], ignore_index=True) if len(extra) else table)


def order(table: pd.DataFrame) -> pd.DataFrame:
    """ranks.csv in rank, mode (as first seen), ``RANK_METRICS`` order."""
    if table.empty:
        return table.reset_index(drop=True)
    modes = {mode: i for i, mode in enumerate(table["mode"].drop_duplicates())}
    metrics = {metric: i for i, metric in enumerate(RANK_METRICS)}
    keys = (table["rank"].astype(int) * 10_000 + table["mode"].map(modes) * 100
            + table["metric"].map(metrics).fillna(99))
    return table.iloc[np.argsort(keys.to_numpy(), kind="stable")].reset_index(drop=True)


BOUND_SHARE = 0.3  # share of the profiled span that makes a step launch- or communication-bound
LAUNCH_BOUND, COMMUNICATION_BOUND, GPU_BOUND = "launch-bound", "communication-bound", "GPU-bound"


def bound_label(table: pd.DataFrame, mode: str = "eager") -> str:
    """What sets the pace of ``mode``'s step on the job's slowest rank, from its profiled window:
    launch-bound when the device waits for the host for at least ``BOUND_SHARE`` of the span,
    else communication-bound when exposed communication takes that share, else GPU-bound; ""
    when the window was not profiled."""
    _, rank = job_step_ms(table, mode)
    if rank is None:
        return ""
    span = by_rank(table, mode, "span_us").get(rank, math.nan)
    if not (isinstance(span, float) and span > 0):
        return ""
    if by_rank(table, mode, "host_wait_us").get(rank, 0.0) >= BOUND_SHARE * span:
        return LAUNCH_BOUND
    if by_rank(table, mode, "comm_exposed_us").get(rank, 0.0) >= BOUND_SHARE * span:
        return COMMUNICATION_BOUND
    return GPU_BOUND


def job_headline(table: pd.DataFrame) -> dict[str, Any]:
    """The job's facts: which rank is slowest in each mode (it sets the job's step time, so the
    job's speedup in metrics.csv is its slowest ranks'), the straggler (eager's, else the graph's;
    NaN when none is named) and what sets the eager step's pace (``bound_label``)."""
    _, eager_rank = job_step_ms(table, "eager")
    _, graph_rank = job_step_ms(table, "graph")
    named = straggler(table, "eager")
    named = named if named is not None else straggler(table, "graph")
    return {"slowest_eager_rank": math.nan if eager_rank is None else eager_rank,
            "slowest_graph_rank": math.nan if graph_rank is None else graph_rank,
            "straggler_rank": math.nan if named is None else float(named),
            "eager_bound": bound_label(table, "eager")}


def job_figures(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Each mode's job-level figure for metrics.csv: ``arrival_skew_us``, the spread of the
    ranks' arrival waits (how much later the last rank reaches the all-reduce than the first)."""
    figures: dict[str, dict[str, float]] = {}
    for mode in table["mode"].drop_duplicates():
        waits = by_rank(table, str(mode), "arrival_wait_us").dropna()
        figures[str(mode)] = {
            "arrival_skew_us": float(waits.max() - waits.min()) if len(waits) > 1 else math.nan}
    return figures
