"""What the verdict says a run is, before any words: the step's account per training step of the
headline (eager's time and the mode's, and the attribution's parts of each), and its kind
(launch-bound, GPU-bound, mixed, or unknown and why).

Scope: pure functions of a run's figures and attribution.csv (no Streamlit, no Plotly, no
text); ``verdict_text`` words what this decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from dashboard.analysis.frames import finite
from dashboard.analysis.saving import attribution_parts
from profiler_core.analysis.figures import Figures

LAUNCH_BOUND_IDLE = 0.35  # eager GPU idle share at or above this: launch-bound
GPU_BOUND_IDLE = 0.15  # at or below this: GPU-bound
# A change in kernel time worth its own sentence: above this share of eager's and this many us.
KERNEL_CHANGE_SHARE, KERNEL_CHANGE_US = 0.05, 10.0
# A change in kernel time said at all (us per step): smaller ones are rounding.
KERNEL_CHANGE_SAID_US = 0.05

# The kinds a verdict can have.
LAUNCH_BOUND, GPU_BOUND, MIXED, UNKNOWN = "launch-bound", "gpu-bound", "mixed", "unknown"
# Why a verdict is unknown: what the run lacks.
CPU_RUN, NO_TIMING, NO_SPLIT = "cpu run", "no timing", "no launch split"


@dataclass(frozen=True)
class StepAccount:
    """One mode's step against eager's, per training step of the headline, in us: the steps'
    times (the attribution's, else for the graph the figures' medians) and the attribution's parts
    of each (NaN where not recorded; the batch copies 0 once the launch split is known)."""

    mode: str
    eager_us: float
    mode_us: float
    speedup: float  # eager's time over the mode's (for the graph, its figure when not timed)
    eager_kernels_us: float
    mode_kernels_us: float
    eager_copy_us: float
    mode_copy_us: float
    eager_idle_us: float
    mode_idle_us: float
    eager_host_us: float  # the host's time to issue eager's step

    @property
    def timed(self) -> bool:
        """Whether both steps were timed."""
        return finite(self.eager_us) and finite(self.mode_us)

    @property
    def split(self) -> bool:
        """Whether the attribution has both steps' kernel time (a profiled window)."""
        return finite(self.eager_kernels_us) and finite(self.mode_kernels_us)

    @property
    def saving_us(self) -> float:
        return self.eager_us - self.mode_us

    @property
    def idle_share(self) -> float:
        """The share of eager's step the GPU sat idle (NaN without a step)."""
        return self.eager_idle_us / self.eager_us if self.eager_us > 0 else math.nan

    @property
    def idle_removed_us(self) -> float:
        return self.eager_idle_us - self.mode_idle_us

    @property
    def kernel_change_us(self) -> float:
        """How much longer the mode's kernels ran than eager's (negative: shorter)."""
        return self.mode_kernels_us - self.eager_kernels_us

    @property
    def kernels_differ(self) -> bool:
        """Whether the mode runs other GPU work than eager's: its kernel time changed by more
        than ``KERNEL_CHANGE_SHARE`` of eager's and ``KERNEL_CHANGE_US``."""
        return abs(self.kernel_change_us) > max(KERNEL_CHANGE_SHARE * abs(self.eager_kernels_us),
                                                KERNEL_CHANGE_US)

    @property
    def host_paced(self) -> bool:
        """Whether the host needed at least eager's GPU work to issue the step (it set the
        pace)."""
        return finite(self.eager_host_us) and \
            self.eager_host_us >= self.eager_kernels_us + self.eager_copy_us


def step_account(figures: Figures, attribution: pd.DataFrame, mode: str = "graph") -> StepAccount:
    """``mode``'s step against eager's from the attribution of its saving; for the graph, the
    figures' medians and speedup where the attribution has no steps."""
    parts = attribution_parts(attribution, mode)
    eager, other = parts["step"]
    if mode == "graph" and not (finite(eager) and finite(other)):
        eager = figures.get("eager", "median_ms") * 1e3
        other = figures.get(mode, "median_ms") * 1e3
    speedup = eager / other if finite(eager) and finite(other) and other > 0 else (
        figures.get(mode, "speedup") if mode == "graph" else math.nan)
    (e_kernels, m_kernels), (e_copy, m_copy) = parts["gpu_kernels"], parts["input_copy"]
    if finite(e_kernels) and finite(m_kernels):
        e_copy = e_copy if finite(e_copy) else 0.0
        m_copy = m_copy if finite(m_copy) else 0.0
    (e_idle, m_idle), e_host = parts["gpu_idle"], parts["host_issue"][0]
    return StepAccount(mode, eager, other, speedup, e_kernels, m_kernels, e_copy, m_copy,
                       e_idle, m_idle, e_host)


@dataclass(frozen=True)
class Classification:
    """A verdict's kind (``LAUNCH_BOUND``, ``GPU_BOUND``, ``MIXED`` or ``UNKNOWN``) and, when
    unknown, what the run lacks (``CPU_RUN``, ``NO_TIMING``, ``NO_SPLIT``; else empty)."""

    kind: str
    missing: str = ""


def classify(account: StepAccount, cpu: bool = False) -> Classification:
    """The kind of ``account``'s run (``cpu``: a CPU run, which times eager only): unknown without
    both steps timed or without a launch split; otherwise by the share of eager's step the GPU sat
    idle (at least ``LAUNCH_BOUND_IDLE``: launch-bound; at most ``GPU_BOUND_IDLE``: GPU-bound;
    between them, or not known: mixed)."""
    if cpu:
        return Classification(UNKNOWN, CPU_RUN)
    if not account.timed:
        return Classification(UNKNOWN, NO_TIMING)
    if not account.split:
        return Classification(UNKNOWN, NO_SPLIT)
    if account.idle_share >= LAUNCH_BOUND_IDLE:
        return Classification(LAUNCH_BOUND)
    if account.idle_share <= GPU_BOUND_IDLE:
        return Classification(GPU_BOUND)
    return Classification(MIXED)
