"""Every per-mode figure a run writes into metrics.csv, each declared once: its name, unit and
words, which modes have it, and what a run of several processes (``--repeats``) or of several
data-parallel ranks holds of it.

Scope: facts only, no measuring and no tables. The figures' reader (``analysis.figures.Figures``)
and writer (``analysis.metrics.build``) refuse a name declared nowhere here
(:class:`UndeclaredMetricError`); the index's ``--where`` names, the command line's summary and
docs/cli.md's list of figures are derived from these declarations. The timing methods of
stats.csv are declared here too (:data:`TIMING_METHODS`): each adds its own figures
(``<method>_median_ms`` and, against eager, ``<method>_speedup``).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Literal

from profiler_core.spec.modes import MODE_NAMES

# What a ``--repeats`` run's folder holds of a figure: the shown process's own value (the process
# with the median speedup), or that value and, for eager's and the graph's, the spread between
# processes in the headline (``<figure>_between_*``, ``orchestration.repeats``).
RepeatsRule = Literal["shown_process", "shown_process_with_spread"]
# What a data-parallel run's metrics.csv holds of a figure (every rank's own is in ranks.csv): the
# mode's slowest rank's value (the rank that sets the job's pace), the largest over the ranks, the
# spread between the ranks, or nothing (not measured in a data-parallel run).
RanksRule = Literal["slowest_rank", "largest_over_ranks", "spread_over_ranks", "not_measured"]

REPEATS_WORDS: dict[str, str] = {
    "shown_process": "the shown process's",
    "shown_process_with_spread": "the shown process's; the article's pair's also as the spread "
                                 "between processes",
}
RANKS_WORDS: dict[str, str] = {
    "slowest_rank": "the mode's slowest rank's",
    "largest_over_ranks": "the largest over the ranks",
    "spread_over_ranks": "the spread between the ranks",
    "not_measured": "not measured",
}

ALL_MODES = MODE_NAMES
BESIDE_EAGER = tuple(name for name in MODE_NAMES if name != "eager")
GRAPH_ONLY = ("graph",)
# The modes whose parity check goes to metrics.csv (the graph's goes to the headline).
PARITY_IN_METRICS = tuple(name for name in BESIDE_EAGER if name != "graph")


@dataclass(frozen=True)
class MetricSpec:
    """One figure of metrics.csv (``mode, metric, value``)."""

    name: str  # the ``metric`` column's value; its unit is also its suffix where it has one
    unit: str  # "ms", "us", "x" (a ratio), "bytes", "pct", "steps", "count", "flag" (1/0), "" (none)
    label: str  # what it is, in the words shown beside it
    modes: tuple[str, ...]  # the modes a run may hold it for
    repeats: RepeatsRule = "shown_process"
    ranks: RanksRule = "not_measured"
    short: str = ""  # its name in a chart's legend, where a chart draws it ("GPU busy")


@dataclass(frozen=True)
class TimingMethodSpec:
    """One timing method of stats.csv (its ``method`` column), named in every reader (the
    command line's summary, the dashboard's tables and charts) by its ``label``."""

    name: str
    label: str  # what it times, in the words every reader shows beside it
    modes: tuple[str, ...]  # the modes a run may time by it
    shown: bool = True  # a row of the summary's and the dashboard's timing tables
    whole_step: bool = True  # False: a part of a step timed alone (the graph's batch copy)
    cpu_label: str = ""  # on a CPU run, where it differs (no CUDA events: the wall clock)
    has_speedup: bool = True  # eager's median over the mode's is a figure (``<method>_speedup``)
    ranks: RanksRule = "not_measured"


# The headline's method: its median and speedup are modes.csv's columns, not ``<method>_`` figures.
HEADLINE_METHOD = "steady_trial"

TIMING_METHODS: tuple[TimingMethodSpec, ...] = (  # in the order every reader shows them
    TimingMethodSpec(HEADLINE_METHOD, "steady state, per trial (CUDA events)", ALL_MODES,
                     cpu_label="steady state, per trial (wall clock)", ranks="slowest_rank"),
    TimingMethodSpec("steady_event", "steady state, every step (CUDA events)", ALL_MODES,
                     ranks="slowest_rank"),
    TimingMethodSpec("steady_wall", "steady state, every step (wall clock)", ALL_MODES,
                     ranks="slowest_rank"),
    TimingMethodSpec("input_copy", "batch copy into the static inputs (timed alone)",
                     GRAPH_ONLY, whole_step=False, has_speedup=False),
    TimingMethodSpec("cold_event", "cold start (CUDA events)", ALL_MODES),
    TimingMethodSpec("cold_wall", "cold start (wall clock)", ALL_MODES),
    TimingMethodSpec("block_sync", "loop closed by one sync", ALL_MODES),
    TimingMethodSpec("article_no_sync", "article's method: no sync", ALL_MODES),
    TimingMethodSpec("host_issue", "host time to issue a step (the launching thread's cost)",
                     ALL_MODES, shown=False, has_speedup=False, ranks="slowest_rank"),
    TimingMethodSpec("held_replay", "the graph's replay queued behind held GPU work, no profiler",
                     GRAPH_ONLY, shown=False, has_speedup=False),
)
# The methods the timing tables show, in their order.
SHOWN_METHODS = tuple(method for method in TIMING_METHODS if method.shown)
# The shown methods that time a whole step (eager's against the graph's), name -> label.
STEP_METHOD_LABELS = {m.name: m.label for m in SHOWN_METHODS if m.whole_step}
# A CPU run's labels where they differ, name -> label.
CPU_METHOD_LABELS = {m.name: m.cpu_label for m in TIMING_METHODS if m.cpu_label}


def _timing_method_figures() -> tuple[MetricSpec, ...]:
    """Each timing method's figures beside the headline's: its median and its speedup."""
    specs = []
    for method in (spec for spec in TIMING_METHODS if spec.name != HEADLINE_METHOD):
        specs.append(MetricSpec(f"{method.name}_median_ms", "ms",
                                f"median time per step, {method.label}", method.modes,
                                ranks=method.ranks))
        if method.has_speedup:
            specs.append(MetricSpec(f"{method.name}_speedup", "x",
                                    f"speedup over eager, {method.label}", method.modes,
                                    ranks=method.ranks))
    return tuple(specs)


# The profiled window's medians per iteration (launch_split.csv's columns, ``trace.SUMMARY_FIELDS``):
# (name, unit, label, its name in a chart's legend).
_WINDOW = (("span_us", "us", "profiled iteration's span on the GPU timeline", ""),
           ("cpu_launch_us", "us", "host time in launch calls, per profiled iteration",
            "CPU launch"),
           ("cpu_other_us", "us", "other host time, per profiled iteration", "CPU other"),
           ("gpu_busy_us", "us", "GPU busy, per profiled iteration", "GPU busy"),
           ("gpu_idle_us", "us", "GPU idle within the span, per profiled iteration", "GPU idle"),
           ("launches", "count", "launches per profiled iteration", ""),
           ("kernels", "count", "kernels per profiled iteration", ""),
           ("launch_delay_us", "us", "launch to kernel start, median per profiled iteration", ""))

METRICS: tuple[MetricSpec, ...] = (
    # modes.csv's columns
    MetricSpec("median_ms", "ms", "median time per training step (the headline's timing)",
               ALL_MODES, repeats="shown_process_with_spread", ranks="slowest_rank"),
    MetricSpec("speedup", "x", "speedup over eager (eager's median over the mode's)", ALL_MODES,
               repeats="shown_process_with_spread", ranks="slowest_rank"),
    MetricSpec("speedup_ci_low", "x", "speedup's 95% bootstrap interval, low end", ALL_MODES,
               ranks="slowest_rank"),
    MetricSpec("speedup_ci_high", "x", "speedup's 95% bootstrap interval, high end", ALL_MODES,
               ranks="slowest_rank"),
    MetricSpec("one_time_ms", "ms", "one-time cost (warm-up and capture, or compile)", ALL_MODES,
               ranks="largest_over_ranks"),
    MetricSpec("memory_bytes", "bytes", "memory the preparation added", ALL_MODES),
    MetricSpec("graphs_recorded", "count", "CUDA graphs recorded", ALL_MODES,
               ranks="slowest_rank"),
    *_timing_method_figures(),
    # what preparing the mode took beyond its time
    MetricSpec("peak_bytes", "bytes", "peak memory", ALL_MODES),
    MetricSpec("device_bytes", "bytes", "device memory taken (the driver's count)", ALL_MODES),
    MetricSpec("warmup_ms", "ms", "warm-up time", GRAPH_ONLY),
    MetricSpec("capture_ms", "ms", "capture time", GRAPH_ONLY),
    MetricSpec("pool_bytes", "bytes", "graph memory pool", GRAPH_ONLY),
    MetricSpec("pool_allocated_bytes", "bytes", "graph memory pool, allocated", GRAPH_ONLY),
    # the one-time cost against the saving per step
    MetricSpec("pays_back", "flag", "pays back its one-time cost (1 yes, 0 never)", BESIDE_EAGER),
    MetricSpec("break_even_iters", "steps", "training steps until the one-time cost is paid back",
               BESIDE_EAGER),
    # the profiled window
    *(MetricSpec(name, unit, label, ALL_MODES, short=short) for name, unit, label, short in _WINDOW),
    MetricSpec("profiled_wall_median_ms", "ms", "profiled iteration's wall time, median",
               ALL_MODES),
    MetricSpec("profiler_overhead_pct", "pct", "profiler overhead vs headline",
               ALL_MODES),
    # the parity check of a mode other than the graph (the graph's is in the headline)
    MetricSpec("parity_steps", "steps", "parity check: training steps compared",
               PARITY_IN_METRICS),
    MetricSpec("parity_max_abs_diff", "", "parity: max abs diff", PARITY_IN_METRICS),
    MetricSpec("parity_max_rel_diff", "", "parity: max rel diff", PARITY_IN_METRICS),
    MetricSpec("parity_noise_abs_diff", "", "parity: eager against a second eager replica",
               PARITY_IN_METRICS),
    MetricSpec("parity_matches", "flag", "parity: matches eager (1 yes, 0 no)", PARITY_IN_METRICS),
    # a data-parallel run's job
    MetricSpec("arrival_skew_us", "us", "spread of the ranks' arrival at the all-reduce",
               ALL_MODES, ranks="spread_over_ranks"),
)

SPECS: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}
METRIC_NAMES = tuple(SPECS)


class UndeclaredMetricError(LookupError):
    """A figure's name that no :class:`MetricSpec` declares: a misspelt name in the tool's own code
    (figures of a run on disk are read whatever their names; only the tool asks by name)."""

    def __init__(self, name: object) -> None:
        close = difflib.get_close_matches(str(name), METRIC_NAMES, n=3, cutoff=0.6)
        self.name = name
        self.hint = ((f"did you mean {' or '.join(close)}? " if close else "")
                     + "declare a new figure with a MetricSpec in profiler_core/spec/metrics.py")
        super().__init__(f"no figure is named {name!r} ({self.hint})")


def spec_of(name: str) -> MetricSpec:
    """The declaration of the figure ``name``; :class:`UndeclaredMetricError` when there is none."""
    spec = SPECS.get(name)
    if spec is None:
        raise UndeclaredMetricError(name)
    return spec
