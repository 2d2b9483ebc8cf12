"""Tables and words derived from a run: per-step latency, percentiles, the timing comparison,
the launch-split medians, the verdict, and the counter lessons explained.

Scope: pure functions of DataFrames and dicts (no Streamlit, no Plotly); every function returns
its documented columns also when the input is empty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.config import RunConfig

MODES = ("eager", "graph")

# Every timing method of stats.csv (see profiler_core.schema), in the order they are shown.
METHOD_LABELS = {
    "steady_trial": "steady state, per trial",
    "steady_event": "steady state, every step (CUDA events)",
    "steady_wall": "steady state, every step (wall clock)",
    "cold_event": "cold start (CUDA events)",
    "cold_wall": "cold start (wall clock)",
    "block_sync": "loop closed by one sync",
    "article_no_sync": "article: perf_counter, no sync",
}
METHOD_MEANING = {
    "steady_trial": "true, the headline: steps queued back to back as in training, each trial's "
                    "mean time per step (what a training loop's clock sees); medians are over "
                    "the trials",
    "steady_event": "true: the same steady-state steps one by one, GPU time between CUDA events "
                    "recorded after consecutive steps (a graph's batch copy included)",
    "steady_wall": "true: the same steady-state steps one by one, host time between consecutive "
                   "steps (CPU runs)",
    "cold_event": "true for one isolated step: synchronise first, then CUDA events around the step, "
                  "so every step pays the latency of its first launch",
    "cold_wall": "true for one isolated step: host time from a synchronise to a synchronise",
    "block_sync": "true: the article's loop, closed by torch.cuda.synchronize()",
    "article_no_sync": "wrong: CPU enqueue time only - the GPU may still be working",
}
# The latency.csv rows and column each per-iteration method reads.
SERIES = {
    "steady_event": ("steady", "gpu_ms"),
    "steady_wall": ("steady", "wall_ms"),
    "cold_event": ("cold", "gpu_ms"),
    "cold_wall": ("cold", "wall_ms"),
}


def number(values: dict[str, Any], key: str) -> float:
    """``values[key]`` as a float; NaN when missing, None or not a number."""
    value = values.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def finite(value: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def headline_method(headline: dict[str, Any], stats: pd.DataFrame) -> str:
    """The timing method the speedup uses (the steady state per trial; cold-start events for runs
    recorded before steady-state timing existed)."""
    method = headline.get("timing_method")
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


PERCENTILES = (1, 10, 25, 50, 75, 90, 99, 99.9)
PERCENTILE_COLUMNS = (["mode", "timing", "count"]
                      + [f"p{str(p).replace('.', '_')}_ms" for p in PERCENTILES]
                      + ["max_ms", "mean_ms"])


def percentile_table(latency: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Percentiles of the per-step time per mode and per-iteration method (``steps``: the
    ``per_step_latency`` of ``latency`` when already computed)."""
    steps = per_step_latency(latency) if steps is None else steps
    rows = []
    for timing in SERIES:
        part, column = series_steps(steps, timing)
        for mode, group in part.groupby("mode", sort=True):
            values = group[column].dropna().to_numpy(dtype=float)
            if values.size == 0:
                continue
            quantiles = np.percentile(values, PERCENTILES)
            rows.append([mode, timing, int(values.size), *quantiles, values.max(), values.mean()])
    return pd.DataFrame(rows, columns=PERCENTILE_COLUMNS)


TIMING_COLUMNS = ["method", "label", "eager_median_ms", "graph_median_ms", "speedup", "meaning"]


def timing_comparison(stats: pd.DataFrame, headline: dict[str, Any]) -> pd.DataFrame:
    """Median per-step time per timing method and mode: the article's method beside the true ones."""
    rows = []
    methods = [m for m in METHOD_LABELS if not stats.empty and m in set(stats["method"])]
    for method in methods:
        part = stats[stats["method"] == method].set_index("mode")["median_ms"]
        eager = float(part.get("eager", math.nan))
        graph = float(part.get("graph", math.nan))
        rows.append([method, METHOD_LABELS[method], eager, graph, eager / graph if graph else math.nan,
                     METHOD_MEANING[method]])
    if "article_no_sync" not in methods:
        eager, graph = number(headline, "article_eager_ms"), number(headline, "article_graph_ms")
        if finite(eager) or finite(graph):
            rows.append(["article_no_sync", METHOD_LABELS["article_no_sync"], eager, graph,
                         eager / graph if graph else math.nan, METHOD_MEANING["article_no_sync"]])
    return pd.DataFrame(rows, columns=TIMING_COLUMNS)


SPLIT_PARTS = ["cpu_launch_us", "cpu_other_us", "gpu_busy_us", "gpu_idle_us"]
SPLIT_MEDIAN_COLUMNS = ["mode", "iterations", "span_us", *SPLIT_PARTS, "launches", "kernels",
                        "launch_delay_us"]


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
    order = {m: i for i, m in enumerate(MODES)}
    out = out.sort_values("mode", key=lambda s: s.map(lambda m: order.get(m, 99)), kind="stable")
    return out[SPLIT_MEDIAN_COLUMNS].reset_index(drop=True)


@dataclass(frozen=True)
class Verdict:
    kind: str  # "launch-bound", "gpu-bound", "mixed", "unknown"
    title: str
    text: str


LAUNCH_BOUND_IDLE = 0.35  # eager GPU idle share at or above this: launch-bound
GPU_BOUND_IDLE = 0.15  # at or below this: GPU-bound


def verdict(headline: dict[str, Any], launch_split: pd.DataFrame, steps_per_graph: int = 1) -> Verdict:
    """Plain words: the timed speedup and medians (the headline method), and why, from the
    profiled window's launch split (is eager launch-bound or GPU-bound). Every figure says which
    measurement it comes from: the profiler adds CPU time to each launch, so its times are not
    the timed ones."""
    speedup = number(headline, "speedup")
    speedup_text = f"{speedup:.2f}x" if finite(speedup) else "unknown"
    eager_ms, graph_ms = number(headline, "eager_median_ms"), number(headline, "graph_median_ms")
    timed = (f"Timed in a training loop (steady state), an eager step took {eager_ms:.3f} ms and a "
             f"graph step {graph_ms:.3f} ms. " if finite(eager_ms) and finite(graph_ms) else "")
    medians = split_medians(launch_split).set_index("mode")
    if "eager" not in medians.index or not finite(float(medians.loc["eager", "span_us"])):
        return Verdict(
            "unknown", "No launch split in this run",
            f"{timed}The speedup is {speedup_text}, but this run has no profiled window (profiler "
            "off or not recorded), so it cannot say whether the eager step was waiting on the CPU "
            "or the GPU. Turn the profiler on to see why.")
    eager = medians.loc["eager"]
    span, busy, idle = float(eager["span_us"]), float(eager["gpu_busy_us"]), float(eager["gpu_idle_us"])
    launch, launches = float(eager["cpu_launch_us"]), float(eager["launches"])
    other = float(eager["cpu_other_us"])
    idle_share = idle / span if span > 0 else math.nan
    window = "In the profiled window (torch.profiler on, which slows every launch)"
    floor = ""
    if "graph" in medians.index and float(medians.loc["graph", "gpu_busy_us"]) > 0 and finite(graph_ms):
        busy_ms = float(medians.loc["graph", "gpu_busy_us"]) / 1000.0 / max(1, steps_per_graph)
        floor = (f" The graph step's {graph_ms:.3f} ms is {graph_ms / busy_ms:.2f}x the GPU's own "
                 f"work per step ({busy_ms:.3f} ms busy in the profiled window), which is the floor "
                 "no launch strategy can beat.")
    if idle_share >= LAUNCH_BOUND_IDLE:
        return Verdict(
            "launch-bound", f"Launch-bound: eager mode kept the GPU waiting ({speedup_text} speedup)",
            f"{timed}{window}, the GPU sat idle {idle_share:.0%} of each eager step ({idle:,.0f} of "
            f"{span:,.0f} us): the CPU needed {launch + other:,.0f} us to issue the step "
            f"({launch:,.0f} us in {launches:,.0f} launch calls, {other:,.0f} us in the framework "
            f"and Python code around them) while the GPU's work took only {busy:,.0f} us. The CPU "
            "sets the pace. A CUDA graph replays the whole step with one launch, which removes "
            f"that idle time.{floor}")
    if idle_share <= GPU_BOUND_IDLE:
        return Verdict(
            "gpu-bound", f"GPU-bound: the kernels set the pace ({speedup_text} speedup)",
            f"{timed}{window}, kernels kept the GPU busy {1 - idle_share:.0%} of each eager step "
            f"({busy:,.0f} of {span:,.0f} us). The CPU queued work faster than the GPU ran it, so "
            f"removing launch overhead can save at most the idle time; a speedup near 1x is the "
            "expected result. To go faster, shrink the GPU work first (TF32, bf16, smaller layers)."
            f"{floor}")
    return Verdict(
        "mixed", f"Partly launch-bound ({speedup_text} speedup)",
        f"{timed}{window}, the GPU was idle {idle_share:.0%} of each eager step ({idle:,.0f} of "
        f"{span:,.0f} us) and busy for {busy:,.0f} us; the CPU spent {launch:,.0f} us on "
        f"{launches:,.0f} launch calls and {other:,.0f} us in the framework and Python. "
        f"A graph removes the launch gaps but not the kernel time.{floor}")


# The article's lessons, one line each, keyed by words in the counter's phase name.
LESSON_LINES = (
    ("initial", "The counter starts at zero: nothing has run yet."),
    ("warm", "Warm-up runs the step eagerly on a side stream, so the counter counts it only if the "
             "step counts warm-up (lesson 2: when it does not, the counter stays 0)."),
    ("capture", "Capture records the kernels without running them, so the counter does not move "
                "(lesson 1)."),
    ("replay", "Every replay runs everything captured: the counter ends at replays x captured steps "
               "(lesson 3: 3 captured steps x 10 replays = 30)."),
)
COUNTER_LESSON_COLUMNS = ["phase", "predicted", "observed", "match", "why"]


def explain_phase(phase: str, rule: str = "") -> str:
    lowered = str(phase).lower()
    for word, line in LESSON_LINES:
        if word in lowered:
            return line
    return str(rule or "")


def _this_run(phase: str, config: RunConfig) -> str:
    lowered = str(phase).lower()
    if "warm" in lowered:
        counted = "counted" if config.count_warmup else "not counted"
        return f" Here: {config.warmup_iters} warm-up step(s), {counted}."
    if "replay" in lowered:
        total = config.replays * config.capture_iters
        return f" Here: {config.replays} replays x {config.capture_iters} captured = {total}."
    return ""


def counter_lessons(counters: pd.DataFrame, config: RunConfig | None = None) -> pd.DataFrame:
    """The lesson table: phase, predicted, observed, match and one line saying why
    (with this run's numbers when ``config`` is given)."""
    if counters.empty:
        return pd.DataFrame(columns=COUNTER_LESSON_COLUMNS)
    out = counters[["phase", "predicted", "observed", "match"]].copy()
    rules = counters["rule"] if "rule" in counters else pd.Series([""] * len(counters))
    out["match"] = out["match"].map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))
    out["why"] = [explain_phase(p, r) + (_this_run(p, config) if config else "")
                  for p, r in zip(counters["phase"], rules.fillna(""))]
    return out[COUNTER_LESSON_COLUMNS].reset_index(drop=True)


def config_table(config: RunConfig) -> pd.DataFrame:
    values = config.to_dict()
    values["eager_iters"] = (f"{config.total_eager_iters} (auto)" if config.eager_iters is None
                             else config.eager_iters)
    return pd.DataFrame({"setting": list(values), "value": [str(v) for v in values.values()]})


def config_diff(a: RunConfig, b: RunConfig) -> pd.DataFrame:
    """Settings that differ between two configs (columns: setting, a, b)."""
    left, right = a.to_dict(), b.to_dict()
    rows = [[k, str(left[k]), str(right[k])] for k in left if left[k] != right.get(k)]
    return pd.DataFrame(rows, columns=["setting", "a", "b"])


ENVIRONMENT_KEYS = ("gpu_name", "gpu_index", "device_type", "driver_version", "cuda_version",
                    "torch_version", "python_version", "started_at", "finished_at")


def environment_table(environment: dict[str, Any]) -> pd.DataFrame:
    keys = [k for k in ENVIRONMENT_KEYS if k in environment]
    keys += [k for k in environment if k not in keys]
    return pd.DataFrame({"item": keys, "value": [str(environment[k]) for k in keys]})


KERNEL_TABLE_COLUMNS = ["mode", "kernel", "calls_per_iter", "total_us", "mean_us", "min_us",
                        "max_us", "share_of_gpu_pct", "kernel_full"]


def kernel_table(kernels: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Kernels sorted by total time (one mode, or all), short name first."""
    frame = kernels if mode is None else kernels[kernels["mode"] == mode]
    frame = frame.sort_values(["mode", "total_us"], ascending=[True, False], kind="stable")
    return frame[KERNEL_TABLE_COLUMNS].reset_index(drop=True)


def one_time_costs(headline: dict[str, Any]) -> pd.DataFrame:
    """Capture cost, memory and parity in one table (quantity, value, unit)."""
    mib = 2**20
    rows = [
        ("capture time", number(headline, "capture_ms"), "ms"),
        ("batch copy into the static inputs, per step", number(headline, "graph_input_copy_ms"), "ms"),
        ("graph memory pool", number(headline, "graph_pool_bytes") / mib, "MiB"),
        ("peak memory, eager", number(headline, "eager_peak_bytes") / mib, "MiB"),
        ("peak memory, graph", number(headline, "graph_peak_bytes") / mib, "MiB"),
        ("break-even", number(headline, "break_even_iters"), "iterations"),
        ("parity: max abs diff", number(headline, "parity_max_abs_diff"), ""),
        ("parity: max rel diff", number(headline, "parity_max_rel_diff"), ""),
    ]
    for mode in ("", "eager_", "graph_"):
        if f"{mode}profiler_overhead_pct" in headline:
            rows.append((f"profiler overhead{', ' + mode[:-1] if mode else ''}",
                         number(headline, f"{mode}profiler_overhead_pct"), "%"))
    return pd.DataFrame(rows, columns=["quantity", "value", "unit"])
