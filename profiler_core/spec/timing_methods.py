"""The timing methods of stats.csv as every reader names them: the command line's summary and
the dashboard's tables and charts read their labels and their order from here.

Scope: declarations only (what each method times is in ``schema``'s note on stats.csv).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingMethod:
    """One timing method of stats.csv, in words."""

    name: str  # as stats.csv's ``method`` column holds it
    label: str  # in every reader
    whole_step: bool = True  # False: a part of a step timed alone (the graph's batch copy)
    cpu_label: str = ""  # on a CPU run, where it differs (no CUDA events: the wall clock)


# In the order every reader shows them.
TIMING_METHODS = (
    TimingMethod("steady_trial", "steady state, per trial (CUDA events)",
                 cpu_label="steady state, per trial (wall clock)"),
    TimingMethod("steady_event", "steady state, every step (CUDA events)"),
    TimingMethod("steady_wall", "steady state, every step (wall clock)"),
    TimingMethod("input_copy", "batch copy into the static inputs (timed alone)", whole_step=False),
    TimingMethod("cold_event", "cold start (CUDA events)"),
    TimingMethod("cold_wall", "cold start (wall clock)"),
    TimingMethod("block_sync", "loop closed by one sync"),
    TimingMethod("article_no_sync", "article: perf_counter, no sync"),
)
# The methods that time a whole step (eager's against the graph's), name -> label.
STEP_METHOD_LABELS = {m.name: m.label for m in TIMING_METHODS if m.whole_step}
# A CPU run's labels where they differ, name -> label.
CPU_METHOD_LABELS = {m.name: m.cpu_label for m in TIMING_METHODS if m.cpu_label}

