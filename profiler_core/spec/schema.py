"""The run directory's data contract: file names and the columns of every table.

One place for the names that ``results`` writes, ``trace`` and ``telemetry`` produce and the
dashboard reads. Units live in column names (``_ms``, ``_us``, ``_pct``, ``_mib``, ``_w``...).
An empty table keeps its columns.
"""

from __future__ import annotations

import re

SCHEMA_VERSION = 5
# Older versions this tool still reads (``storage.runfolder`` and ``results.RunResult.load`` bring
# them up to date).
# Version 1 timed every iteration from an idle device only (today's cold start). Version 2 had no
# metrics.csv (derived on load from modes.csv, stats.csv and the headline's ``<mode>_`` keys) and
# decomposed only the graph's speedup, in columns eager_us and graph_us. Versions 1 to 3 also kept
# eager's and the graph's figures in summary.json's headline (``metrics.split_headline`` moves
# them out); from version 4 every per-mode figure is in metrics.csv only, and the headline holds
# the run's other facts. Version 5 added a run whose shapes change (``--vary``):
# strategies.csv and shape_steps.csv, empty in every other run (and absent from older ones).
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5)

SUMMARY_FILE = "summary.json"
INDEX_FILE = ".profiler_index.sqlite"  # a runs folder's run index (``storage.index``)

# Per timed iteration. ``method`` is "steady" (back to back, a CUDA event between consecutive
# iterations: time in ``gpu_ms``, or in ``wall_ms`` on the CPU) or "cold" (a synchronise before
# the iteration: CUDA events around the step in ``gpu_ms``, synchronised host time in ``wall_ms``).
# Times are for the whole iteration (one eager step, or one replay covering ``steps`` captured
# training steps, the copy of its batch included); statistics divide by ``steps``.
LATENCY_COLUMNS = ["mode", "method", "trial", "iteration", "steps", "gpu_ms", "wall_ms"]
LATENCY_METHODS = ("steady", "cold")

# Per mode and timing method, all per training step. Methods: steady_trial (the headline: each
# steady-state trial's mean time per step, the figure a training loop gets; its median over
# trials is the headline), steady_event (every steady-state iteration on its own, CUDA events),
# steady_wall (the same on the CPU, wall clock), input_copy (the graph's batch copy alone, part
# of its steady iteration), cold_event, cold_wall, block_sync (the article's loop closed by a
# synchronise), article_no_sync (the article's loop without one: CPU enqueue time only),
# host_issue (each steady-state trial's host time to issue its steps, per step: the launching
# thread's cost, not a duration of the step; its median is over the trials), held_replay (a
# graph's replays queued behind held GPU work, so none waits for the host: its kernels' time as
# replayed, with no profiler; the check on the profiled window's kernel time).
STATS_COLUMNS = [
    "mode", "method", "count", "mean_ms", "median_ms", "p10_ms", "p90_ms", "p99_ms",
    "iqr_ms", "min_ms", "max_ms",
]

# The article's static-counter lessons: one row per phase.
COUNTER_COLUMNS = ["phase", "observed", "predicted", "match", "rule"]

# Per mode and profiled iteration (torch.profiler window).
LAUNCH_SPLIT_COLUMNS = [
    "mode", "iteration", "span_us", "cpu_launch_us", "cpu_other_us", "gpu_busy_us",
    "gpu_idle_us", "launches", "kernels", "launch_delay_us",
]

# The speedup of every profiled mode over eager decomposed, in long form: one block of components
# per mode (per iteration, medians over the profiled windows; ``mode_us`` is that mode's time).
# Components: gpu_busy + gpu_idle = total_span exactly (the GPU timeline); cpu_launch and
# cpu_other describe the CPU side and do not add into the span. Shares are of the mode's
# total_span saving.
BREAKDOWN_COLUMNS = ["mode", "component", "eager_us", "mode_us", "saving_us", "share_of_saving_pct"]
BREAKDOWN_COMPONENTS = ["gpu_busy", "gpu_idle", "total_span", "cpu_launch", "cpu_other"]

# The headline's saving per training step attributed to its parts, one block per mode other
# than eager (``profiler_core.analysis.attribution``): components step = gpu_kernels + input_copy +
# gpu_idle exactly, then host_issue (shown beside, not part of the sum). Times in microseconds
# per training step; ``source`` says which measurement each figure comes from.
ATTRIBUTION_COLUMNS = ["mode", "component", "eager_us", "mode_us", "saving_us",
                       "share_of_saving_pct", "source"]

# ``kernel`` is the readable name (``kernel_names.kernel_label``: the function, and for a generic
# kernel the functor it runs), ``kernel_full`` the trace's own; ``operator`` the CPU op that
# launched it (``trace.OPERATOR_CATEGORY``: "aten::addmm"; "CUDA graph replay" in a graph's
# window; "" when not known).
KERNEL_COLUMNS = [
    "mode", "kernel", "kernel_full", "operator", "calls_per_iter", "total_us", "mean_us",
    "min_us", "max_us", "share_of_gpu_pct",
]

# NVML samples in long form. ``t_s`` is seconds since the run started (same clock as phases).
NVML_COLUMNS = ["t_s", "metric", "value", "source"]
NVML_METRICS = [
    "gpu_util_pct", "mem_util_pct", "mem_used_mib", "sm_clock_mhz", "mem_clock_mhz",
    "power_w", "temperature_c",
]

PHASE_COLUMNS = ["phase", "start_s", "end_s"]

# One row per mode the run timed: its steady-state median per training step, its speedup over
# eager (median over median, with the bootstrap CI over the trials), the one-time cost of making
# it (capture or compile, with their warm-up), the memory that kept, and for graph modes the
# number of CUDA graphs recorded (NaN where not known).
MODES_COLUMNS = ["mode", "median_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
                 "one_time_ms", "memory_bytes", "graphs_recorded"]

# Every per-mode figure of a run in long form (the engine's per-mode headline): one row per mode
# and metric, with eager's value of the same metric and value / eager_value. Metrics: the columns
# of modes.csv; ``<method>_median_ms`` and ``<method>_speedup`` (eager's median over the mode's)
# for every other timing method of stats.csv; ``peak_bytes`` (the memory the mode's preparation
# and its untimed iterations needed above what was allocated before: the larger of the peak
# allocation and the reservation kept, which holds CUDA graph pools); ``device_bytes`` (the
# device memory they took by the driver's count, torch.cuda.mem_get_info: also what lives outside
# torch's allocator; other processes on the GPU move it); the profiled
# window's split medians (``span_us``, ``cpu_launch_us``... as in launch_split.csv),
# ``profiled_wall_median_ms`` and ``profiler_overhead_pct``; the graph's warmup_ms, capture_ms,
# pool_bytes, pool_allocated_bytes; for every mode but eager ``pays_back`` (1 when the mode is
# faster than eager per step, 0 when it is not, NaN when not measured) and ``break_even_iters``
# (training steps until its one-time cost, warm-up and capture or compile, is paid back by the
# per-step saving; NaN when it never is: see ``pays_back``).
METRIC_COLUMNS = ["mode", "metric", "value", "eager_value", "ratio_to_eager"]

# A run measured in several fresh processes (``--repeats N``): one row per process, in the order
# they ran (``repeat`` from 1), with its headline figures, how long it took (``run_wall_s``, start
# to exit) and whether it is the one whose tables the run folder holds (``shown``: the median
# speedup). Empty for a run of one process.
REPEAT_COLUMNS = ["repeat", "pid", "eager_median_ms", "graph_median_ms", "speedup",
                  "speedup_ci_low", "speedup_ci_high", "run_wall_s", "shown"]

# A data-parallel run (``--nproc-per-node``, ``profiler_core.engine.ddp_step``): every rank's
# timed iterations, as latency.csv with the rank first (latency.csv itself holds the slowest
# rank's, the one that sets the job's pace), and every rank's figures per mode in long form
# (``analysis.ranks.RANK_METRICS``: step times, host issue, GPU busy, communication exposed and
# hidden, the all-reduce's arrival wait, each rank's own speedup beside the job's). Empty for a
# run of one process.
RANK_LATENCY_COLUMNS = ["rank", *LATENCY_COLUMNS]
RANK_COLUMNS = ["rank", "mode", "metric", "value"]

# A run whose step's shapes change (``--vary``, ``engine.shaped``): per strategy its time per
# step over the seeded sequence of shapes (median, p90, p99, the sum and the mean), the speedup
# over eager (the sums' ratio; the interval: a bootstrap of the blocks' medians' ratio), the
# padded share of the work, the buckets and graphs, the one-time cost, the graphs' pool (a
# shared one, or the pools summed) and the peak allocation, break-even, and the parity check
# beside two eager replicas, and for a graph strategy the sum over the sequence that each
# bucket's prediction before capture gives (and the speedup it predicts); and every step of the sequence: its shape, its bucket, and each
# strategy's time. Empty for a run of fixed shapes.
STRATEGY_COLUMNS = ["strategy", "label", "steps", "median_ms", "p90_ms", "p99_ms", "sum_ms",
                    "mean_ms", "speedup", "speedup_ci_low", "speedup_ci_high", "blocks_speedup",
                    "padded_share", "buckets", "one_time_ms", "graphs", "pool_bytes",
                    "peak_bytes", "break_even_steps", "pays_back", "parity_max_abs_diff",
                    "parity_noise_abs_diff", "parity_matches", "predicted_sum_ms",
                    "predicted_speedup"]
SHAPE_STEP_COLUMNS = ["step", "shape", "bucket", "strategy", "ms"]

# Columns added to a table after runs were written without them: such a run still loads, the
# column empty ("" for text, NaN for numbers). Table -> columns.
LATER_COLUMNS = {"kernels": ("operator",)}

TABLE_FILES = {
    "counters": ("counters.csv", COUNTER_COLUMNS),
    "latency": ("latency.csv", LATENCY_COLUMNS),
    "stats": ("stats.csv", STATS_COLUMNS),
    "launch_split": ("launch_split.csv", LAUNCH_SPLIT_COLUMNS),
    "breakdown": ("breakdown.csv", BREAKDOWN_COLUMNS),
    "kernels": ("kernels.csv", KERNEL_COLUMNS),
    "nvml": ("nvml.csv", NVML_COLUMNS),
    "phases": ("phases.csv", PHASE_COLUMNS),
    "modes": ("modes.csv", MODES_COLUMNS),
    "metrics": ("metrics.csv", METRIC_COLUMNS),
    "attribution": ("attribution.csv", ATTRIBUTION_COLUMNS),
    "repeats": ("repeats.csv", REPEAT_COLUMNS),
    "rank_latency": ("rank_latency.csv", RANK_LATENCY_COLUMNS),
    "ranks": ("ranks.csv", RANK_COLUMNS),
    "strategies": ("strategies.csv", STRATEGY_COLUMNS),
    "shape_steps": ("shape_steps.csv", SHAPE_STEP_COLUMNS),
}


def trace_file(mode: str) -> str:
    """The Chrome trace of a mode's profiled window, one per profiled mode: ``trace_<mode>.json``
    (``.gz`` when large; ``storage.runfolder`` lists a run folder's files)."""
    return f"trace_{mode}.json"


def rank_trace_key(mode: str, rank: int) -> str:
    """A data-parallel run's trace of one rank's mode, as its trace key: ``<mode>_rank<R>``
    (written as ``trace_<mode>_rank<R>.json``)."""
    return f"{mode}_rank{rank}"


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Text read from a run's files (or a folder's name) fit for SQLite, pyarrow, Streamlit and a
    terminal: each lone surrogate (a byte of a folder name that is not UTF-8, as ``os.fsdecode``
    gives it, or a ``\\udcff`` escape in a JSON string) becomes U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)
