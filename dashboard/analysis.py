"""Tables and words derived from a run: per-step latency, the timing comparison, the launch-split
medians, the attribution of the saving, the break-even, the verdict and the one-time costs.

Scope: pure functions of DataFrames and a run's ``Figures`` (no Streamlit, no Plotly); every
function returns its documented columns also when the input is empty. Siblings: ``percentiles``,
``kernel_tables``, ``compare`` (runs side by side), ``run_facts`` (counters, config, phases).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_core import MODE_LABELS, MODE_NAMES
from profiler_core.analysis.attribution import stretched_kernel_notes
from profiler_core.analysis.figures import Figures, as_number
from profiler_core.analysis.trace import decompose_medians
from profiler_core.spec.config import (  # noqa: F401 (the labels:
    RunConfig,
    preset_label,  # one rule, in config)
    preset_text,
)
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS

MODES = ("eager", "graph")  # the article's pair: eager is every comparison's baseline

# Every timing method of stats.csv (see profiler_core.spec.schema), in the order they are shown.
METHOD_LABELS = {
    "steady_trial": "steady state, per trial (CUDA events)",
    "steady_event": "steady state, every step (CUDA events)",
    "steady_wall": "steady state, every step (wall clock)",
    "cold_event": "cold start (CUDA events)",
    "cold_wall": "cold start (wall clock)",
    "block_sync": "loop closed by one sync",
    "article_no_sync": "article: perf_counter, no sync",
}
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


def number(values: Mapping[str, Any], key: str) -> float:
    """``values[key]`` as a float (a fact of the summary's headline, such as the parity); NaN when
    missing, None, not a number (text, true/false, a JSON object or list) or too large for a
    float."""
    return as_number(values.get(key))


def finite(value: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


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


# ----------------------------------------------------------------------------- the headline's saving

# One definition of break-even wherever it is shown (Overview, modes table, Runs page), the one the
# sweep's break-even table uses for runs that record warm-up + capture as the one-time cost.
BREAK_EVEN_DEFINITION = ("steps until the one-time cost (warm-up + capture) is paid back by the "
                         "saving per step")
# What a negative share of the saving means (the saving table, the waterfall's caption).
NEGATIVE_SHARE_TEXT = ("A negative share is time the graph added, e.g. its batch copy or extra "
                       "kernels of a capturable optimizer; the other parts then add up to more "
                       "than 100%.")
# The attribution's components in words (profiler_core.analysis.attribution: the three parts add up to the
# step; host issue is shown beside them).
ATTRIBUTION_LABELS = {
    "gpu_kernels": "GPU kernels",
    "input_copy": "batch copy into the static inputs",
    "gpu_idle": "GPU idle",
    "step": "step (the headline: timed, no profiler)",
    "host_issue": "host time to issue a step",
}
ATTRIBUTION_ROLES = {
    "gpu_kernels": "part of the sum",
    "input_copy": "part of the sum",
    "gpu_idle": "part of the sum",
    "step": "the sum: the headline's saving",
    "host_issue": "not part of the sum: why the GPU waited",
}
SAVING_TABLE_COLUMNS = ["component", "what", "eager_us", "mode_us", "saving_us",
                        "share_of_saving_pct", "in_the_sum", "source"]


def attribution_modes(attribution: pd.DataFrame) -> list[str]:
    """The modes with a block in attribution.csv, in the order a run measures them."""
    if attribution.empty:
        return []
    return [m for m in ordered_modes(attribution) if m != "eager"]


def attribution_block(attribution: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """One mode's block of attribution.csv, its times as floats (non-finite ones NaN), in the
    order step, the three parts, host issue; empty with the columns when the run has none."""
    columns = list(attribution.columns) if len(attribution.columns) else [
        "mode", "component", "eager_us", "mode_us", "saving_us", "share_of_saving_pct", "source"]
    if attribution.empty:
        return pd.DataFrame(columns=columns)
    block = attribution[attribution["mode"].astype(str) == mode]
    block = block.assign(component=block["component"].astype(str),
                         **{c: float_column(block, c) for c in
                            ("eager_us", "mode_us", "saving_us", "share_of_saving_pct")})
    order = {c: i for i, c in enumerate(ATTRIBUTION_LABELS)}
    block = block[block["component"].isin(order)]
    block = block.iloc[block["component"].map(order).argsort(kind="stable")]
    return block.drop_duplicates("component").reset_index(drop=True)


def attribution_parts(attribution: pd.DataFrame, mode: str = "graph") -> dict[str, tuple[float, float]]:
    """component -> (eager_us, mode_us) of one mode's block; NaN pairs for what is missing."""
    block = attribution_block(attribution, mode).set_index("component") if len(attribution) else None
    out = {}
    for component in ATTRIBUTION_LABELS:
        if block is not None and component in block.index:
            out[component] = (float(block.at[component, "eager_us"]),
                              float(block.at[component, "mode_us"]))
        else:
            out[component] = (math.nan, math.nan)
    return out


def saving_table(attribution: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    """The headline's saving per step by component (``SAVING_TABLE_COLUMNS``): the three parts
    (GPU kernels, batch copy, GPU idle), whose savings add up to the step's, the step itself, and
    the host's time to issue a step, marked as not part of the sum. Times in us per training step;
    a share is of the step's saving (negative: time the mode added); none for host issue (outside
    the sum) nor when the mode is not faster (no saving to share). The host issue row is left
    out when the run did not time it (runs recorded before 2026-12-01)."""
    block = attribution_block(attribution, mode)
    if block.empty:
        return pd.DataFrame(columns=SAVING_TABLE_COLUMNS)
    untimed = (block["component"] == "host_issue") & block[["eager_us", "mode_us"]].isna().all(axis=1)
    block = block[~untimed]
    step_saving = block.loc[block["component"] == "step", "saving_us"]
    no_saving = not len(step_saving) or not finite(float(step_saving.iloc[0])) or float(
        step_saving.iloc[0]) <= 0
    # a share of a saving that is not there, or of a time outside the sum, means nothing
    block = block.assign(share_of_saving_pct=block["share_of_saving_pct"].where(
        (block["component"] != "host_issue") & (not no_saving)))
    out = block.assign(what=block["component"].map(ATTRIBUTION_LABELS),
                       in_the_sum=block["component"].map(ATTRIBUTION_ROLES))
    order = ["gpu_kernels", "input_copy", "gpu_idle", "step", "host_issue"]
    out = out.iloc[out["component"].map(order.index).argsort(kind="stable")]
    return out[SAVING_TABLE_COLUMNS].reset_index(drop=True)


def kernel_floor(attribution: pd.DataFrame) -> pd.DataFrame:
    """Each mode's GPU kernel time per training step (columns mode, gpu_busy_us): the floor a
    launch strategy cannot beat, from the attribution (eager's from any block)."""
    rows = {}
    for mode in attribution_modes(attribution):
        kernels = attribution_parts(attribution, mode)["gpu_kernels"]
        rows.setdefault("eager", kernels[0])
        rows[mode] = kernels[1]
    frame = pd.DataFrame({"mode": list(rows), "gpu_busy_us": list(rows.values())})
    return frame[np.isfinite(frame["gpu_busy_us"].astype(float))].reset_index(drop=True)


PROFILER_OVERHEAD_COLUMNS = ["mode", "profiled_ms", "headline_ms", "overhead_pct"]


def _steps_of(latency: pd.DataFrame, mode: str) -> float:
    if latency.empty:
        return 1.0
    steps = pd.to_numeric(latency.loc[latency["mode"].astype(str) == mode, "steps"],
                          errors="coerce").dropna()
    return float(steps.iloc[0]) if len(steps) and float(steps.iloc[0]) >= 1 else 1.0


def profiler_overheads(metrics: pd.DataFrame, stats: pd.DataFrame,
                       latency: pd.DataFrame) -> pd.DataFrame:
    """How much slower each mode ran under the profiler than in the headline: the profiled
    window's median iteration (wall clock, ``profiled_wall_median_ms``) against the headline's
    steady-state time of an iteration (the median per step x the steps of an iteration).
    Worked out here for every run, so a run recorded when the overhead was stored against the
    cold start says the same thing as today's. Columns ``PROFILER_OVERHEAD_COLUMNS``."""
    if metrics.empty or stats.empty:
        return pd.DataFrame(columns=PROFILER_OVERHEAD_COLUMNS)
    wall = metrics[metrics["metric"].astype(str) == "profiled_wall_median_ms"]
    rows = []
    for mode in ordered_modes(wall):
        profiled = float(float_column(wall[wall["mode"].astype(str) == mode], "value").iloc[0])
        median = stats[(stats["mode"].astype(str) == mode)
                       & (stats["method"].astype(str) == "steady_trial")]
        per_step = float(float_column(median, "median_ms").iloc[0]) if len(median) else math.nan
        headline_ms = per_step * _steps_of(latency, mode)
        if finite(profiled) and finite(headline_ms) and headline_ms > 0:
            rows.append([mode, profiled, headline_ms, (profiled / headline_ms - 1) * 100])
    return pd.DataFrame(rows, columns=PROFILER_OVERHEAD_COLUMNS)


def profiler_overhead_text(overheads: pd.DataFrame) -> str:
    """One sentence: how far the profiled window is from the headline (empty without figures)."""
    if overheads.empty:
        return ""
    rows = overheads.set_index("mode")
    first = "eager" if "eager" in rows.index else str(rows.index[0])
    row = rows.loc[first]
    text = (f"Under the profiler, {first}'s median iteration took {row['profiled_ms'] * 1e3:,.0f} us "
            f"against the headline's {row['headline_ms'] * 1e3:,.0f} us: the profiled window ran "
            f"{first} {row['overhead_pct']:.0f}% slower than the timed trials")
    others = [f"{mode} {r['overhead_pct']:.0f}% slower ({r['profiled_ms'] * 1e3:,.0f} vs "
              f"{r['headline_ms'] * 1e3:,.0f} us)" for mode, r in rows.iterrows() if mode != first]
    if others:
        text += ", and the " + ", the ".join(others)
    return text + ", so its totals are not the headline."


@dataclass(frozen=True)
class PayBack:
    """A mode's one-time cost against its saving per step (``BREAK_EVEN_DEFINITION``)."""
    mode: str
    one_time_ms: float  # warm-up + capture (or compilation); NaN when not recorded
    warmup_ms: float  # NaN when the one-time cost is not split (modes.csv only)
    capture_ms: float
    saving_ms: float  # eager's median step minus the mode's; NaN when not timed
    pays_back: float  # 1: faster per step; 0: not faster (never pays back); NaN: not measured
    steps: float  # steps until paid back; NaN unless it pays back and the cost is known

    @property
    def short(self) -> str:
        """'13 steps', 'never' or 'n/a' (a tile's value; ``note`` says why)."""
        if self.pays_back == 0:
            return "never"
        if finite(self.steps):
            return f"{self.steps:,.0f} step" + ("" if self.steps == 1 else "s")
        return "n/a"

    @property
    def note(self) -> str:
        """Why ``short`` says what it says: 'one-time cost 16.3 ms', 'graph not faster', ..."""
        if self.pays_back == 0:
            return f"{self.mode} not faster"
        if finite(self.steps):
            return f"one-time cost {self.one_time_ms:,.1f} ms"
        return "one-time cost not recorded" if self.pays_back == 1 else "not measured"

    @property
    def text(self) -> str:
        """'13 steps', 'never (graph not faster)', or 'n/a (...)' saying what is missing."""
        return self.short if finite(self.steps) else f"{self.short} ({self.note})"

    @property
    def cost_text(self) -> str:
        """The one-time cost in words: 'warm-up 11.6 ms + capture 4.7 ms = 16.3 ms'."""
        if finite(self.warmup_ms) and finite(self.capture_ms):
            return (f"warm-up {self.warmup_ms:,.1f} ms + capture {self.capture_ms:,.1f} ms = "
                    f"{self.one_time_ms:,.1f} ms")
        return f"{self.one_time_ms:,.1f} ms" if finite(self.one_time_ms) else "not recorded"


def pay_back(figures: Figures, modes: pd.DataFrame, mode: str = "graph") -> PayBack:
    """``mode``'s break-even by ``BREAK_EVEN_DEFINITION``, worked out here for every run: modes.csv's
    one-time cost and medians when it has them, else (the graph of a run recorded before
    modes.csv) its figures' warm-up + capture and medians. A run recorded when break-even counted
    the capture alone thus says the same as today's; one not faster never pays back."""
    table = modes.set_index(modes["mode"].astype(str)) if len(modes) else pd.DataFrame()

    def from_modes(row: str, column: str) -> float:
        if row not in table.index or column not in table.columns:
            return math.nan
        value = pd.to_numeric(pd.Series([table.at[row, column]]), errors="coerce").iloc[0]
        return float(value) if pd.notna(value) and math.isfinite(float(value)) else math.nan

    eager_ms, mode_ms = from_modes("eager", "median_ms"), from_modes(mode, "median_ms")
    warmup, capture = (figures.get(mode, "warmup_ms"), figures.get(mode, "capture_ms")) if (
        mode == "graph") else (math.nan, math.nan)
    if mode == "graph" and not (finite(eager_ms) and finite(mode_ms)):
        eager_ms, mode_ms = figures.get("eager", "median_ms"), figures.get(mode, "median_ms")
    one_time = from_modes(mode, "one_time_ms")
    if not finite(one_time) and finite(warmup) and finite(capture):
        one_time = warmup + capture
    if not (finite(one_time) and finite(warmup) and finite(capture)
            and abs(warmup + capture - one_time) <= 0.01 * max(one_time, 1e-9)):
        warmup = capture = math.nan  # only a split that adds up to the cost is shown
    saving = eager_ms - mode_ms if finite(eager_ms) and finite(mode_ms) else math.nan
    pays = math.nan if not finite(saving) else (1.0 if saving > 0 else 0.0)
    if not finite(pays) and mode == "graph" and figures.get(mode, "pays_back") == 0:
        pays = 0.0  # recorded as never paying back, medians not kept
    steps = (float(math.ceil(one_time / saving)) if pays == 1 and finite(one_time)
             else math.nan)
    return PayBack(mode, one_time, warmup, capture, saving, pays, steps)


@dataclass(frozen=True)
class Verdict:
    kind: str  # "launch-bound", "gpu-bound", "mixed", "unknown"
    title: str
    text: str


LAUNCH_BOUND_IDLE = 0.35  # eager GPU idle share at or above this: launch-bound
GPU_BOUND_IDLE = 0.15  # at or below this: GPU-bound
# A change in kernel time worth its own sentence: above this share of eager's and this many us.
KERNEL_CHANGE_SHARE, KERNEL_CHANGE_US = 0.05, 10.0


def _us(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 else f"{value:,.1f}"


def _share(part: float, saving: float) -> str:
    """' (101% of the saving)'; nothing when there is no saving to share (a mode not faster)."""
    if not finite(saving) or saving <= 0:
        return ""
    pct = part / saving * 100
    return f" ({pct:.0f}% of the saving)" if abs(pct) >= 100 else f" ({pct:.1f}% of the saving)"


def verdict(figures: Figures, attribution: pd.DataFrame,
            no_split_reason: str | None = None, mode: str = "graph",
            pay: PayBack | None = None) -> Verdict:
    """Plain words: how much ``mode`` saves per step (the headline, timed with no profiler) and
    why, from the attribution of that saving (``profiler_core.analysis.attribution``): how long the eager
    GPU sat idle, how much idle the mode removed, and what it added (its batch copy, a change in
    kernel time). Every figure is per training step of the headline; the profiled window's totals
    (slower: the profiler slows every launch) are never quoted as the step. ``pay``: the mode's
    break-even, said when the mode is not faster."""
    parts = attribution_parts(attribution, mode)
    (eager, other), (e_kernels, m_kernels) = parts["step"], parts["gpu_kernels"]
    (e_copy, m_copy), (e_idle, m_idle) = parts["input_copy"], parts["gpu_idle"]
    e_host = parts["host_issue"][0]
    if mode == "graph" and not (finite(eager) and finite(other)):
        eager = figures.get("eager", "median_ms") * 1e3
        other = figures.get(mode, "median_ms") * 1e3
    speedup = eager / other if finite(eager) and finite(other) and other > 0 else (
        figures.get(mode, "speedup") if mode == "graph" else math.nan)
    speedup_text = f"{speedup:.2f}x" if finite(speedup) else "unknown"
    saving = eager - other
    net = (f"a saving of {_us(saving)} us per step" if saving > 0 else
           f"the {mode} step is {_us(-saving)} us slower")
    timed = (f"Timed in a training loop with no profiler, an eager step took {_us(eager)} us and a "
             f"{mode} step {_us(other)} us: {speedup_text}, {net}. "
             if finite(eager) and finite(other) else "")
    if no_split_reason and no_split_reason.startswith("a CPU run"):
        eager_ms = figures.get("eager", "median_ms")
        eager_text = (f"Timed in a training loop on the CPU, an eager step took {eager_ms:.3f} "
                      "ms (wall clock). " if finite(eager_ms) else "")
        return Verdict(
            "unknown", "A CPU run: eager only, no graph and no launch split",
            f"{eager_text}CUDA graphs, the graph timing and the profiler's launch split need "
            "a CUDA GPU, so a CPU run times the eager step only and cannot say what a graph "
            "would save. Run on a GPU (or open the bundled H200 sample) to see why.")
    if not (finite(eager) and finite(other)):
        return Verdict(
            "unknown", f"No {mode} timing in this run",
            f"This run has no steady-state timing of both eager and {mode} "
            f"({no_split_reason or 'not recorded'}), so it cannot say what the {mode} saves.")
    if not (finite(e_kernels) and finite(m_kernels)):
        reason = no_split_reason or "profiler off or not recorded"
        return Verdict(
            "unknown", "No launch split in this run",
            f"{timed}This run has no profiled window ({reason}), so it cannot say how much of the "
            "saving was GPU idle time removed and how much a change in kernel time. Turn the "
            "profiler on to see why.")
    e_copy = e_copy if finite(e_copy) else 0.0
    m_copy = m_copy if finite(m_copy) else 0.0
    idle_share = e_idle / eager if eager > 0 else math.nan
    idle_removed = e_idle - m_idle
    if finite(e_host) and e_host >= e_kernels + e_copy:
        host = (f"; the host needed {_us(e_host)} us to issue the step, so it set the pace and the "
                "GPU waited for it")
    elif finite(e_host):
        host = f"; the host needed only {_us(e_host)} us to issue the step"
    else:
        host = ""
    added = []
    kernel_change = m_kernels - e_kernels
    if abs(kernel_change) >= 0.05:
        added.append(f"its kernels took {_us(abs(kernel_change))} us "
                     f"{'longer' if kernel_change > 0 else 'less'}{_share(-kernel_change, saving)}")
    if m_copy - e_copy > 0:
        added.append(f"its batch copy added {_us(m_copy - e_copy)} us"
                     f"{_share(e_copy - m_copy, saving)}")
    added_text = ((", but " if saving <= 0 else "; ") + " and ".join(added)) if added else ""
    kernels_differ = ""
    if abs(kernel_change) > max(KERNEL_CHANGE_SHARE * abs(e_kernels), KERNEL_CHANGE_US):
        kernels_differ = (f" The {mode} step runs other GPU work than eager's ({_us(m_kernels)} vs "
                          f"{_us(e_kernels)} us of kernels per step): a capturable optimizer, for "
                          "one, adds kernels (see Kernels).")
    work = m_kernels + m_copy
    floor = (f" The {mode} step is {other / work:.2f}x its GPU work ({_us(m_kernels)} us of kernels"
             + (f" + {_us(m_copy)} us of batch copy" if m_copy else "")
             + "), the floor no launch strategy can beat." if work > 0 else "")
    removed = (f"The {mode} removed {_us(idle_removed)} us of idle{_share(idle_removed, saving)}"
               f"{added_text}.")
    never = ""
    if saving <= 0:
        cost = f" ({pay.cost_text})" if pay is not None and finite(pay.one_time_ms) else ""
        never = f" Its one-time cost{cost} is never paid back."
    stretched = ""
    notes = [] if attribution.empty else stretched_kernel_notes(
        attribution[attribution["mode"].astype(str) == mode])
    if notes:
        stretched = " Note: " + "; ".join(notes) + "."
    if idle_share >= LAUNCH_BOUND_IDLE:
        kind, title = "launch-bound", f"Launch-bound: eager mode kept the GPU waiting ({speedup_text} speedup)"
        text = (f"{timed}The GPU sat idle {_us(e_idle)} of the eager step's {_us(eager)} us "
                f"({idle_share:.0%}): its kernels ran {_us(e_kernels)} us{host}. A CUDA graph "
                f"replays the whole step with one launch. {removed}{kernels_differ}{floor}")
    elif idle_share <= GPU_BOUND_IDLE:
        kind, title = "gpu-bound", f"GPU-bound: the kernels set the pace ({speedup_text} speedup)"
        text = (f"{timed}The GPU was busy {1 - idle_share:.0%} of the eager step "
                f"({_us(eager - e_idle)} of {_us(eager)} us){host}, so a graph can save at most "
                f"the {_us(e_idle)} us of idle. {removed}{kernels_differ}")
        if saving > 0:
            text += (" A speedup near 1x is the expected result. To go faster, shrink the GPU work "
                     "first (TF32, bf16, smaller layers).")
    else:
        kind, title = "mixed", f"Partly launch-bound ({speedup_text} speedup)"
        text = (f"{timed}The GPU sat idle {_us(e_idle)} of the eager step's {_us(eager)} us "
                f"({idle_share:.0%}) and ran kernels for {_us(e_kernels)} us{host}. {removed} A "
                f"graph removes the launch gaps but not the kernel time.{kernels_differ}{floor}")
    if saving <= 0:
        title = (f"{title.split(':')[0]}: the {mode} is not faster ({speedup_text}), so it never "
                 "pays back" if kind != "mixed" else
                 f"Partly launch-bound, but the {mode} is not faster ({speedup_text}): it never "
                 "pays back")
    return Verdict(kind, title, text + never + stretched)


def one_time_costs(figures: Figures, facts: Mapping[str, Any], pay: PayBack | None = None,
                   overheads: pd.DataFrame | None = None) -> pd.DataFrame:
    """Capture cost, memory and parity in one table (quantity, value, unit, and ``shown``: the
    value with its unit, as text); ``facts``: the summary's headline, for the parity. ``pay``: the
    graph's break-even (``pay_back``; worked out from the figures alone when not given), shown as 'never (graph not faster)' when it never pays
    back. ``overheads`` (``profiler_overheads``): the profiler's overhead per mode against the
    headline; without it no overhead is shown (a run's stored figure may be against the cold
    start)."""
    mib = 2**20
    pay = pay if pay is not None else pay_back(figures, pd.DataFrame(), "graph")
    rows = [
        ("warm-up time", figures.get("graph", "warmup_ms"), "ms"),
        ("capture time", figures.get("graph", "capture_ms"), "ms"),
        ("one-time cost (warm-up + capture)", pay.one_time_ms, "ms"),
        ("batch copy into the static inputs, per step",
         figures.get("graph", "input_copy_median_ms"), "ms"),
        ("graph memory pool", figures.get("graph", "pool_bytes") / mib, "MiB"),
        ("peak memory, eager", figures.get("eager", "peak_bytes") / mib, "MiB"),
        ("peak memory, graph", figures.get("graph", "peak_bytes") / mib, "MiB"),
        ("break-even (see below)", pay.steps, "steps"),
        ("parity: max abs diff", number(facts, "parity_max_abs_diff"), ""),
        ("parity: max rel diff", number(facts, "parity_max_rel_diff"), ""),
        ("parity: eager against a second eager replica", number(facts, "parity_noise_abs_diff"),
         ""),
    ]
    for row in (overheads if overheads is not None else pd.DataFrame(
            columns=PROFILER_OVERHEAD_COLUMNS)).itertuples():
        rows.append((f"profiler overhead vs headline, {row.mode}",
                     float(row.overhead_pct), "%"))
    out = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    out["shown"] = [("n/a" if not finite(v) or not math.isfinite(v) else f"{v:.4g} {u}".strip())
                    for v, u in zip(out["value"], out["unit"])]
    out.loc[out["quantity"].str.startswith("break-even"), "shown"] = pay.text
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


def float_column(frame: pd.DataFrame, column: str) -> pd.Series:
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
                             eager_us=float_column(breakdown, "eager_us"),
                             mode_us=float_column(breakdown, "mode_us"))
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


MODES_TABLE_COLUMNS = ["mode", "what", "median_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
                       "one_time_ms", "break_even", "memory_mib", "graphs_recorded"]


def modes_table(modes: pd.DataFrame, figures: Figures | None = None) -> pd.DataFrame:
    """modes.csv for people: what each mode is, its break-even (``BREAK_EVEN_DEFINITION``, as
    text: '13 steps', 'never (graph not faster)'; '' for eager), memory in MiB."""
    if modes.empty:
        return pd.DataFrame(columns=MODES_TABLE_COLUMNS)
    out = modes.copy()
    out["what"] = [MODE_LABELS.get(str(mode), str(mode)) for mode in out["mode"]]
    out["break_even"] = ["" if str(mode) == "eager" else pay_back(figures or Figures({}), modes, str(mode)).text
                         for mode in out["mode"]]
    out["memory_mib"] = pd.to_numeric(out["memory_bytes"], errors="coerce") / 2**20
    return out[MODES_TABLE_COLUMNS].reset_index(drop=True)
