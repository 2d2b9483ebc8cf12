"""What kind of run a run is, in the words every view uses: whether it ran on the CPU, and why it
has no profiled window.

Scope: pure functions of a run's config and environment (no Streamlit, no Plotly).
"""

from __future__ import annotations

from typing import Any

from profiler_core.spec.config import RunConfig

CPU_REASON_START = "a CPU run"  # how the reason of a CPU run starts (the verdict reads it)
CPU_RUN_REASON = (f"{CPU_REASON_START}: the profiler's launch split, kernels and traces need a "
                  "CUDA GPU, so a CPU run times the eager step only")


def is_cpu_run(config: RunConfig | None, environment: dict[str, Any] | None = None) -> bool:
    """Whether a run ran on the CPU (its config's device, else its environment's device type)."""
    if config is not None and isinstance(config.device, str):
        return config.device == "cpu"
    return str((environment or {}).get("device_type", "")).lower() == "cpu"


def no_profile_reason(config: RunConfig | None, environment: dict[str, Any] | None = None,
                      complete: bool = True) -> str:
    """Why a run has no profiled window, in words: a CPU run cannot have one (whatever its
    profiler setting says), a GPU run had the profiler off, stopped before profiling, or (a
    complete run with the profiler on) recorded none."""
    if is_cpu_run(config, environment):
        return CPU_RUN_REASON
    if config is not None and not config.profile:
        return "the profiler was off for this run"
    if not complete:
        return "the run stopped before profiling"
    return "the run recorded none"
