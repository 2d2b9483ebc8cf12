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

from profiler_core.config import MODE_LABELS, MODE_NAMES, PRESETS, RunConfig, changed_from_preset
from profiler_core.schema import BREAKDOWN_COMPONENTS
from profiler_core.stats import pay_back_text
from profiler_core.trace import decompose_medians

MODES = ("eager", "graph")  # the article's pair: eager is every comparison's baseline

# Every timing method of stats.csv (see profiler_core.schema), in the order they are shown.
METHOD_LABELS = {
    "steady_trial": "steady state, per trial (CUDA events)",
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


# A CPU run has no CUDA events: its steady-state trials are timed by the host's wall clock.
CPU_METHOD_LABELS = {"steady_trial": "steady state, per trial (wall clock)"}


def is_cpu_run(config: RunConfig | None, environment: dict[str, Any] | None = None) -> bool:
    """Whether a run ran on the CPU (its config's device, else its environment's device type)."""
    if config is not None and isinstance(config.device, str):
        return config.device == "cpu"
    return str((environment or {}).get("device_type", "")).lower() == "cpu"


def method_label(method: str, cpu: bool = False) -> str:
    """A timing method in words; a CPU run's steady state says it is wall-clock time."""
    if cpu and method in CPU_METHOD_LABELS:
        return CPU_METHOD_LABELS[method]
    return METHOD_LABELS.get(method, method)


def no_profile_reason(config: RunConfig | None, environment: dict[str, Any] | None = None,
                      complete: bool = True) -> str:
    """Why a run has no profiled window, in words: a CPU run cannot have one (whatever its
    profiler setting says), a GPU run had the profiler off, stopped before profiling, or (a
    complete run with the profiler on) recorded none."""
    if is_cpu_run(config, environment):
        return ("a CPU run: the profiler's launch split, kernels and traces need a CUDA GPU, so a "
                "CPU run times the eager step only")
    if config is not None and not config.profile:
        return "the profiler was off for this run"
    if not complete:
        return "the run stopped before profiling"
    return "the run recorded none"


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
        for mode in ordered_modes(part):
            group = part[part["mode"].astype(str) == mode]
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


def breakdown_against(breakdown: pd.DataFrame, medians: pd.DataFrame, other: str) -> pd.DataFrame:
    """The speedup decomposed from eager to ``other``, as ``other``'s block of breakdown.csv (its
    columns; ``mode_us`` holds ``other``'s times): the run's own block when breakdown.csv has one,
    else worked out from the two modes' launch-split medians the same way
    (``trace.decompose_medians``); empty with those columns when neither is there."""
    own = breakdown[breakdown["mode"].astype(str) == other].reset_index(drop=True)
    if len(own) or medians.empty:
        return own
    rows = medians.set_index("mode")
    if "eager" not in rows.index or other not in rows.index:
        return own
    return decompose_medians(rows.loc["eager"].to_dict(), rows.loc[other].to_dict(), mode=other)


def decomposable_modes(breakdown: pd.DataFrame, medians: pd.DataFrame) -> list[str]:
    """The modes whose speedup over eager ``breakdown_against`` can decompose: those with a block
    in breakdown.csv, and those profiled beside eager (launch-split medians), in run order."""
    profiled = ordered_modes(medians) if "eager" in set(medians["mode"].astype(str)) else []
    present = pd.DataFrame({"mode": [*breakdown["mode"].astype(str), *profiled]})
    return [mode for mode in ordered_modes(present) if mode not in ("eager", "")]


def ordered_modes(frame: pd.DataFrame) -> list[str]:
    """The modes in a table, in the order a run measures them (eager, graph, then the others)."""
    present = list(pd.unique(frame["mode"].dropna().astype(str)))  # a row without a mode is skipped
    order = {mode: index for index, mode in enumerate(MODE_NAMES)}
    return sorted(present, key=lambda m: (order.get(m, len(order)), m))


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
    order = {m: i for i, m in enumerate(MODE_NAMES)}
    out = out.sort_values("mode", key=lambda s: s.map(lambda m: order.get(m, 99)), kind="stable")
    return out[SPLIT_MEDIAN_COLUMNS].reset_index(drop=True)


@dataclass(frozen=True)
class Verdict:
    kind: str  # "launch-bound", "gpu-bound", "mixed", "unknown"
    title: str
    text: str


LAUNCH_BOUND_IDLE = 0.35  # eager GPU idle share at or above this: launch-bound
GPU_BOUND_IDLE = 0.15  # at or below this: GPU-bound


def verdict(headline: dict[str, Any], launch_split: pd.DataFrame, steps_per_graph: int = 1,
            no_split_reason: str | None = None) -> Verdict:
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
        if no_split_reason and no_split_reason.startswith("a CPU run"):
            eager_text = (f"Timed in a training loop on the CPU, an eager step took {eager_ms:.3f} "
                          "ms (wall clock). " if finite(eager_ms) else "")
            return Verdict(
                "unknown", "A CPU run: eager only, no graph and no launch split",
                f"{eager_text}CUDA graphs, the graph timing and the profiler's launch split need "
                "a CUDA GPU, so a CPU run times the eager step only and cannot say what a graph "
                "would save. Run on a GPU (or open the bundled H200 sample) to see why.")
        reason = no_split_reason or "profiler off or not recorded"
        return Verdict(
            "unknown", "No launch split in this run",
            f"{timed}The speedup is {speedup_text}, but this run has no profiled window "
            f"({reason}), so it cannot say whether the eager step was waiting on the CPU or the "
            "GPU. Turn the profiler on to see why.")
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


def preset_label(config: RunConfig) -> str:
    """The preset a run's values are, in fact: its recorded preset when every setting equals that
    preset's, else "custom" (a run whose settings were changed from a preset, even if its
    summary names the preset it started from)."""
    if config.preset not in PRESETS or changed_from_preset(config):
        return "custom"
    return config.preset


def preset_text(config: RunConfig, limit: int = 3) -> str:
    """The preset label with what changed: 'seed', 'custom (seed with dtype bf16)', 'custom'."""
    label = preset_label(config)
    preset = PRESETS.get(config.preset)
    if label != "custom" or preset is None:
        return label
    changed = [f"{f} {getattr(config, f)}" for f in changed_from_preset(config)]
    shown = ", ".join(changed[:limit]) + (f" and {len(changed) - limit} more" if len(changed) > limit else "")
    return f"custom ({config.preset} with {shown})"


def config_table(config: RunConfig) -> pd.DataFrame:
    values = config.to_dict()
    values["eager_iters"] = (f"{config.total_eager_iters} (auto)" if config.eager_iters is None
                             else config.eager_iters)
    values["preset"] = preset_text(config)  # what the values are, not only what the run recorded
    return pd.DataFrame({"setting": list(values), "value": [str(v) for v in values.values()]})


def configs_diff(configs: dict[str, RunConfig]) -> pd.DataFrame:
    """Settings that differ between any of several configs: one row per setting, one column per
    config (named by its key), values as text."""
    values = {tag: {**config.to_dict(), "preset": preset_text(config)}
              for tag, config in configs.items()}
    fields = list(next(iter(values.values()))) if values else []
    rows = [[field, *(str(v.get(field)) for v in values.values())] for field in fields
            if len({str(v.get(field)) for v in values.values()}) > 1]
    return pd.DataFrame(rows, columns=["setting", *values])


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
    rank = {m: i for i, m in enumerate(MODE_NAMES)}
    frame = frame.assign(_rank=frame["mode"].astype(str).map(lambda m: rank.get(m, len(rank))))
    frame = frame.sort_values(["_rank", "mode", "total_us"], ascending=[True, True, False],
                              kind="stable")
    return frame[KERNEL_TABLE_COLUMNS].reset_index(drop=True)


def one_time_costs(headline: dict[str, Any]) -> pd.DataFrame:
    """Capture cost, memory and parity in one table (quantity, value, unit, and ``shown``: the
    value with its unit, as text)."""
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
    out = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    out["shown"] = [("n/a" if not finite(v) or not math.isfinite(v) else f"{v:.4g} {u}".strip())
                    for v, u in zip(out["value"], out["unit"])]
    # A graph that is not faster never pays its capture back: said so, not "n/a".
    if headline.get("graph_pays_back") == 0.0:
        out.loc[out["quantity"] == "break-even", "shown"] = pay_back_text(0.0, math.nan)
    return out


# ----------------------------------------------------------------------------- the breakdown per timeline

TOTAL_COMPONENT = "total_span"
# Each schema component's timeline: gpu_busy + gpu_idle make the GPU's span, cpu_launch +
# cpu_other (+ the time the CPU waited for the GPU) the CPU's.
TIMELINE_OF_COMPONENT = {c: c.split("_", 1)[0].upper() for c in BREAKDOWN_COMPONENTS
                         if c != TOTAL_COMPONENT}
RESIDUAL_COMPONENTS = {"CPU": "waiting on GPU", "GPU": "not attributed"}
BREAKDOWN_TABLE_COLUMNS = ["timeline", "component", "eager_us", "mode_us", "saving_us",
                           "share_of_timeline_saving_pct"]


def _float_column(frame: pd.DataFrame, column: str) -> pd.Series:
    values = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return values.where(np.isfinite(values))


def breakdown_table(breakdown: pd.DataFrame) -> pd.DataFrame:
    """One mode's block of the speedup decomposition (``breakdown_against``), one block per
    timeline, with shares that add up to 100% within each timeline (breakdown.csv's shares are all
    of the total saving, so the GPU rows and the CPU rows each add up to about 100% and together
    to far more, with nothing saying which is which). ``mode_us`` holds that mode's times.

    GPU: busy + idle = the span. CPU: launch calls + other work + time spent waiting on the GPU =
    the span (that last row is the rest of the span). A final row is the span itself (timeline
    "both"). Non-finite numbers count as missing.
    """
    if breakdown.empty:
        return pd.DataFrame(columns=BREAKDOWN_TABLE_COLUMNS)
    frame = breakdown.assign(component=breakdown["component"].astype(str),
                             eager_us=_float_column(breakdown, "eager_us"),
                             mode_us=_float_column(breakdown, "mode_us"))
    frame = frame[frame["component"].isin(BREAKDOWN_COMPONENTS)]
    total = frame[frame["component"] == TOTAL_COMPONENT]
    eager_total = float(total["eager_us"].iloc[0]) if len(total) else math.nan
    mode_total = float(total["mode_us"].iloc[0]) if len(total) else math.nan
    saving_total = eager_total - mode_total
    rows = []
    for timeline in ("GPU", "CPU"):
        parts = frame[frame["component"].map(TIMELINE_OF_COMPONENT.get) == timeline]
        if parts.empty:
            continue
        for row in parts.itertuples(index=False):
            rows.append([timeline, row.component, row.eager_us, row.mode_us])
        rest_eager = eager_total - float(parts["eager_us"].sum())
        rest_mode = mode_total - float(parts["mode_us"].sum())
        scale = 0.005 * max(abs(eager_total), 1e-9) if finite(eager_total) else math.inf
        if finite(rest_eager) and finite(rest_mode) and max(abs(rest_eager), abs(rest_mode)) > scale:
            rows.append([timeline, RESIDUAL_COMPONENTS[timeline], rest_eager, rest_mode])
    if len(total):
        rows.append(["both", TOTAL_COMPONENT, eager_total, mode_total])
    out = pd.DataFrame(rows, columns=BREAKDOWN_TABLE_COLUMNS[:4])
    out["saving_us"] = out["eager_us"] - out["mode_us"]
    share = out["saving_us"] / saving_total * 100 if finite(saving_total) and saving_total else math.nan
    out["share_of_timeline_saving_pct"] = share
    return out[BREAKDOWN_TABLE_COLUMNS].reset_index(drop=True)


# ----------------------------------------------------------------------------- kernels eager vs graph

def kernel_diff_columns(other: str = "graph") -> list[str]:
    """The columns of :func:`kernel_diff` against ``other`` (eager is always the baseline)."""
    return ["kernel", "where", "eager_calls_per_iter", f"{other}_calls_per_iter",
            "eager_us_per_iter", f"{other}_us_per_iter", "change_us_per_iter", "kernel_full"]


KERNEL_DIFF_COLUMNS = kernel_diff_columns("graph")


def kernel_diff(kernels: pd.DataFrame, other: str = "graph") -> pd.DataFrame:
    """Each kernel (by full name) eagerly and in mode ``other`` side by side, per iteration of the
    profiled windows: calls, GPU time (mean x calls per iteration) and the change from eager to
    ``other``; ``where`` says "both", "eager only" or "<other> only". Largest time first."""
    columns = kernel_diff_columns(other)
    if kernels.empty:
        return pd.DataFrame(columns=columns)
    frame = kernels.assign(
        mode=kernels["mode"].astype(str), kernel_full=kernels["kernel_full"].astype(str),
        calls=_float_column(kernels, "calls_per_iter"),
        us=_float_column(kernels, "mean_us") * _float_column(kernels, "calls_per_iter"))
    short = frame.drop_duplicates("kernel_full").set_index("kernel_full")["kernel"].astype(str)
    out = pd.DataFrame({"kernel_full": list(dict.fromkeys(frame["kernel_full"]))})
    for mode in ("eager", other):  # a kernel a mode never ran: 0 calls, 0 us in that mode
        part = frame[frame["mode"] == mode].groupby("kernel_full")[["calls", "us"]].sum(min_count=1)
        out[f"{mode}_calls_per_iter"] = out["kernel_full"].map(part["calls"])
        out[f"{mode}_us_per_iter"] = out["kernel_full"].map(part["us"])
        absent = ~out["kernel_full"].isin(part.index)
        out.loc[absent, [f"{mode}_calls_per_iter", f"{mode}_us_per_iter"]] = 0.0
    in_eager = out["kernel_full"].isin(frame.loc[frame["mode"] == "eager", "kernel_full"])
    in_other = out["kernel_full"].isin(frame.loc[frame["mode"] == other, "kernel_full"])
    out["where"] = np.select([in_eager & in_other, in_eager, in_other],
                             ["both", "eager only", f"{other} only"], default="neither")
    out = out[out["where"] != "neither"]
    out["kernel"] = out["kernel_full"].map(short)
    out["change_us_per_iter"] = (out[f"{other}_us_per_iter"].fillna(0)
                                 - out["eager_us_per_iter"].fillna(0))
    size = out[["eager_us_per_iter", f"{other}_us_per_iter"]].max(axis=1, skipna=True).fillna(0)
    out = out.assign(_size=size).sort_values(["_size", "kernel_full"], ascending=[False, True])
    return out[columns].reset_index(drop=True)


def filter_by_name(frame: pd.DataFrame, text: str, columns: tuple[str, ...] = ("kernel", "kernel_full")
                   ) -> pd.DataFrame:
    """Rows whose name contains ``text`` (plain text, not a pattern; case-insensitive); every
    row when ``text`` is blank."""
    needle = str(text or "").strip().lower()
    if not needle or frame.empty:
        return frame
    hit = pd.Series(False, index=frame.index)
    for column in columns:
        if column in frame:
            hit |= frame[column].astype(str).str.lower().str.contains(needle, regex=False)
    return frame[hit]


# ----------------------------------------------------------------------------- comparing runs

COMPARE_COLUMNS = ["run", "mode", "method", "median_ms", "p10_ms", "p90_ms"]
COMPARE_SUMMARY_COLUMNS = ["tag", "run", "device", "preset", "speedup", "eager_ms", "graph_ms",
                           "timed_by", "verdict", "complete"]
# When a run's headline method has no finite median (a damaged or very old run), compare by the
# first of these it has; the wall-clock ones need no CUDA events.
COMPARE_FALLBACKS = ("steady_trial", "steady_event", "steady_wall", "cold_event", "cold_wall",
                     "block_sync")


def compare_method(headline: dict[str, Any], stats: pd.DataFrame) -> str:
    """The method a run is compared by: its headline method if it has a finite median, else the
    first of ``COMPARE_FALLBACKS`` that has one ('' when none has)."""
    if stats.empty:
        return ""
    medians = pd.to_numeric(stats["median_ms"], errors="coerce")
    usable = set(stats.loc[np.isfinite(medians.astype(float)), "method"].astype(str))
    first = headline_method(headline, stats)
    for method in (first, *COMPARE_FALLBACKS):
        if method in usable:
            return method
    return ""


def compare_rows(tag: str, headline: dict[str, Any], stats: pd.DataFrame,
                 cpu: bool) -> tuple[pd.DataFrame, str]:
    """One run's bars for the comparison chart (``COMPARE_COLUMNS``) and a sentence saying how it
    was timed, or why it has no bar."""
    method = compare_method(headline, stats)
    if not method:
        return (pd.DataFrame(columns=COMPARE_COLUMNS),
                f"{tag} has no timing statistics (it stopped before the timed trials), so it has "
                "no bar.")
    label = method_label(method, cpu)
    part = stats[stats["method"].astype(str) == method]
    rows = pd.DataFrame({"run": tag, "mode": part["mode"].astype(str), "method": label,
                         "median_ms": _float_column(part, "median_ms"),
                         "p10_ms": _float_column(part, "p10_ms"),
                         "p90_ms": _float_column(part, "p90_ms")})
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


# ----------------------------------------------------------------------------- phases

PHASE_SUMMARY_COLUMNS = ["phase", "blocks", "first_start_s", "last_end_s", "total_s"]
# Phases that come before any measurement (loading, building the replicas): left out of the
# GPU view's default zoom, which starts where the run starts measuring.
SETUP_PHASES = ("setup",)


def phase_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """One row per phase name in order of first start: how many blocks it ran in (timed trials
    alternate, so a phase recurs), its first start, last end and total time. Rows whose times are
    not finite are left out."""
    if phases.empty:
        return pd.DataFrame(columns=PHASE_SUMMARY_COLUMNS)
    frame = phases.assign(phase=phases["phase"].astype(str),
                          start_s=_float_column(phases, "start_s"),
                          end_s=_float_column(phases, "end_s")).dropna(subset=["start_s", "end_s"])
    if frame.empty:
        return pd.DataFrame(columns=PHASE_SUMMARY_COLUMNS)
    frame = frame.assign(length=(frame["end_s"] - frame["start_s"]).clip(lower=0))
    grouped = frame.groupby("phase", sort=False).agg(
        blocks=("phase", "size"), first_start_s=("start_s", "min"), last_end_s=("end_s", "max"),
        total_s=("length", "sum")).reset_index()
    grouped = grouped.sort_values("first_start_s", kind="stable")
    return grouped[PHASE_SUMMARY_COLUMNS].reset_index(drop=True)


def phase_window(summary: pd.DataFrame, first: str, last: str, pad: float = 0.02
                 ) -> tuple[float, float] | None:
    """Seconds from the start of phase ``first`` to the end of phase ``last`` (either order),
    padded by ``pad`` of the window on each side; None when either is unknown."""
    rows = summary.set_index("phase")
    if first not in rows.index or last not in rows.index:
        return None
    low = min(float(rows.loc[first, "first_start_s"]), float(rows.loc[last, "first_start_s"]))
    high = max(float(rows.loc[first, "last_end_s"]), float(rows.loc[last, "last_end_s"]))
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return None
    margin = (high - low) * pad
    return low - margin, high + margin


def default_phase_range(summary: pd.DataFrame) -> tuple[str, str] | None:
    """(first, last) phase names of the GPU view's default zoom: from the first phase that is
    not a setup phase to the last phase (the whole run when it has only setup)."""
    if summary.empty:
        return None
    names = list(summary["phase"])
    measuring = [n for n in names if n.lower() not in SETUP_PHASES]
    return (measuring[0] if measuring else names[0]), names[-1]


def compare_summary(tag: str, label: str, config: RunConfig, environment: dict[str, Any],
                    headline: dict[str, Any], stats: pd.DataFrame, verdict_title: str,
                    complete: bool) -> dict[str, Any]:
    """One row of the comparison's summary table (``COMPARE_SUMMARY_COLUMNS``)."""
    cpu = is_cpu_run(config, environment)
    method = compare_method(headline, stats)
    return {"tag": tag, "run": label,
            "device": "CPU" if cpu else str(environment.get("gpu_name") or config.device),
            "preset": preset_text(config), "speedup": number(headline, "speedup"),
            "eager_ms": number(headline, "eager_median_ms"),
            "graph_ms": number(headline, "graph_median_ms"),
            "timed_by": method_label(method, cpu) if method else "no timing",
            "verdict": verdict_title, "complete": bool(complete)}


MODES_TABLE_COLUMNS = ["mode", "what", "median_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
                       "one_time_ms", "memory_mib", "graphs_recorded"]


def modes_table(modes: pd.DataFrame) -> pd.DataFrame:
    """modes.csv for people: what each mode is, memory in MiB."""
    if modes.empty:
        return pd.DataFrame(columns=MODES_TABLE_COLUMNS)
    out = modes.copy()
    out["what"] = [MODE_LABELS.get(str(mode), str(mode)) for mode in out["mode"]]
    out["memory_mib"] = pd.to_numeric(out["memory_bytes"], errors="coerce") / 2**20
    return out[MODES_TABLE_COLUMNS].reset_index(drop=True)


# ----------------------------------------------------------------------------- overlaying runs

SPEEDUP_ROW_COLUMNS = ["run", "mode", "speedup", "speedup_ci_low", "speedup_ci_high"]
OVERLAY_STEP_COLUMNS = ["run", "mode", "ms", "timed_by"]


def compare_speedup_rows(tag: str, headline: dict[str, Any], modes: pd.DataFrame) -> pd.DataFrame:
    """One run's speedups over eager with their 95% CI (``SPEEDUP_ROW_COLUMNS``): every mode of
    its modes table but eager, else the headline's graph speedup; rows without a finite speedup
    are left out (a CPU run has none)."""
    if not modes.empty and "speedup" in modes:
        part = modes[modes["mode"].astype(str) != "eager"]
        rows = pd.DataFrame({"run": tag, "mode": part["mode"].astype(str),
                             "speedup": _float_column(part, "speedup"),
                             "speedup_ci_low": _float_column(part, "speedup_ci_low"),
                             "speedup_ci_high": _float_column(part, "speedup_ci_high")})
    else:
        rows = pd.DataFrame([{"run": tag, "mode": "graph", "speedup": number(headline, "speedup"),
                              "speedup_ci_low": number(headline, "speedup_ci_low"),
                              "speedup_ci_high": number(headline, "speedup_ci_high")}])
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
