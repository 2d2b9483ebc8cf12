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

METHOD_LABELS = {
    "cuda_event": "CUDA events (GPU time)",
    "sync_wall": "wall clock, synchronised",
    "block_sync": "block timed with one sync",
    "article_no_sync": "article: perf_counter, no sync",
}
METHOD_MEANING = {
    "cuda_event": "true: GPU time between events recorded around each step",
    "sync_wall": "true: host time with torch.cuda.synchronize() after each step",
    "block_sync": "true: a whole block of steps between two synchronize() calls",
    "article_no_sync": "wrong: CPU enqueue time only - the GPU may still be working",
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
    """The timing method the speedup uses (CUDA events on a GPU, synchronised wall time on a CPU)."""
    method = headline.get("timing_method")
    present = set(stats["method"].dropna()) if not stats.empty else set()
    if method in present or (method and not present):
        return str(method)
    for candidate in ("cuda_event", "sync_wall", "block_sync"):
        if candidate in present:
            return candidate
    return "cuda_event"


def latency_column(method: str) -> str:
    """The latency.csv column a timing method reads."""
    return "wall_ms" if method == "sync_wall" else "gpu_ms"


PER_STEP_COLUMNS = ["mode", "seq", "trial", "iteration", "gpu_ms", "wall_ms"]


def per_step_latency(latency: pd.DataFrame) -> pd.DataFrame:
    """Per training step (``gpu_ms``/``wall_ms`` divided by ``steps``), ``seq`` = order in mode."""
    if latency.empty:
        return pd.DataFrame({c: pd.Series(dtype="object" if c == "mode" else "float64")
                             for c in PER_STEP_COLUMNS})
    codes, names = pd.factorize(latency["mode"], sort=True)
    mode = np.asarray(names.astype(str), dtype=object)[codes]
    trial = pd.to_numeric(latency["trial"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    iteration = pd.to_numeric(latency["iteration"], errors="coerce").to_numpy(dtype=float,
                                                                               na_value=np.nan)
    order = np.lexsort((iteration, trial, codes))  # by mode, then trial, then iteration
    steps = pd.to_numeric(latency["steps"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    steps = np.where(np.isfinite(steps) & (steps >= 1), steps, 1.0)[order]
    mode = mode[order]
    out = pd.DataFrame({
        "mode": mode,
        "trial": trial[order],
        "iteration": iteration[order],
        "gpu_ms": pd.to_numeric(latency["gpu_ms"], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan)[order] / steps,
        "wall_ms": pd.to_numeric(latency["wall_ms"], errors="coerce").to_numpy(
            dtype=float, na_value=np.nan)[order] / steps,
    })
    sorted_codes = codes[order]
    starts = np.r_[0, np.flatnonzero(sorted_codes[1:] != sorted_codes[:-1]) + 1]  # each mode's first
    index = np.arange(len(mode))
    out.insert(1, "seq", index - np.repeat(starts, np.diff(np.r_[starts, len(mode)])))
    return out[PER_STEP_COLUMNS]


PERCENTILES = (1, 10, 25, 50, 75, 90, 99, 99.9)
PERCENTILE_COLUMNS = (["mode", "timing", "count"]
                      + [f"p{str(p).replace('.', '_')}_ms" for p in PERCENTILES]
                      + ["max_ms", "mean_ms"])


def percentile_table(latency: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Percentiles of the per-step time per mode, for CUDA-event and synchronised wall timing
    (``steps``: the ``per_step_latency`` of ``latency`` when already computed)."""
    steps = per_step_latency(latency) if steps is None else steps
    rows = []
    for mode, group in steps.groupby("mode", sort=True):
        for column, timing in (("gpu_ms", "cuda_event"), ("wall_ms", "sync_wall")):
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


def verdict(headline: dict[str, Any], launch_split: pd.DataFrame) -> Verdict:
    """Plain words from the launch split: is eager launch-bound or GPU-bound, and why."""
    speedup = number(headline, "speedup")
    speedup_text = f"{speedup:.2f}x" if finite(speedup) else "unknown"
    medians = split_medians(launch_split).set_index("mode")
    if "eager" not in medians.index or not finite(float(medians.loc["eager", "span_us"])):
        return Verdict(
            "unknown", "No launch split in this run",
            f"The speedup is {speedup_text}, but this run has no profiled window (profiler off or "
            "not recorded), so it cannot say whether the eager step was waiting on the CPU or the "
            "GPU. Turn the profiler on to see why.")
    eager = medians.loc["eager"]
    span, busy, idle = float(eager["span_us"]), float(eager["gpu_busy_us"]), float(eager["gpu_idle_us"])
    launch, launches = float(eager["cpu_launch_us"]), float(eager["launches"])
    other = float(eager["cpu_other_us"])
    idle_share = idle / span if span > 0 else math.nan
    floor = ""
    if "graph" in medians.index and float(medians.loc["graph", "gpu_busy_us"]) > 0:
        g_span, g_busy = float(medians.loc["graph", "span_us"]), float(medians.loc["graph", "gpu_busy_us"])
        floor = (f" Graph replay took {g_span:,.0f} us per step against {g_busy:,.0f} us of GPU "
                 f"work ({g_span / g_busy:.2f}x the GPU busy time, which is the floor no launch "
                 "strategy can beat).")
    if idle_share >= LAUNCH_BOUND_IDLE:
        return Verdict(
            "launch-bound", f"Launch-bound: eager mode kept the GPU waiting ({speedup_text} speedup)",
            f"In eager mode the GPU sat idle {idle_share:.0%} of each step ({idle:,.0f} of "
            f"{span:,.0f} us): the CPU needed {launch + other:,.0f} us to issue the step "
            f"({launch:,.0f} us in {launches:,.0f} launch calls, {other:,.0f} us in the framework "
            f"and Python code around them) while the GPU's work took only {busy:,.0f} us. The CPU "
            "sets the pace. A CUDA graph replays the whole step with one launch, which removes "
            f"that idle time.{floor}")
    if idle_share <= GPU_BOUND_IDLE:
        return Verdict(
            "gpu-bound", f"GPU-bound: the kernels set the pace ({speedup_text} speedup)",
            f"Kernels kept the GPU busy {1 - idle_share:.0%} of each eager step ({busy:,.0f} of "
            f"{span:,.0f} us). The CPU queued work faster than the GPU ran it, so removing launch "
            f"overhead can save at most the {idle:,.0f} us of idle time; a speedup near 1x is the "
            "expected result. To go faster, shrink the GPU work first (TF32, bf16, smaller layers)."
            f"{floor}")
    return Verdict(
        "mixed", f"Partly launch-bound ({speedup_text} speedup)",
        f"In eager mode the GPU was idle {idle_share:.0%} of each step ({idle:,.0f} of {span:,.0f} us) "
        f"and busy for {busy:,.0f} us; the CPU spent {launch:,.0f} us on {launches:,.0f} launch "
        f"calls and {other:,.0f} us in the framework and Python. "
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
