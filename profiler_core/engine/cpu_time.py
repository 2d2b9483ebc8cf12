"""How long a CPU run will take, said before it starts: a few of its training steps timed.

For ``run --device cpu`` of a step larger than the small CPU step: one line with the time to expect,
from a replica built from the run's own config, the random number generators restored afterwards.
The user's own step is not timed here (its code would run an extra time).
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass

from profiler_core.spec.config import RunConfig
from profiler_core.spec.modes import COMPILED_MODES
from profiler_core.spec.workload_kinds import workload_of

# Measuring stops after this many timed steps, or once they took this long together.
MAX_TIMED_STEPS = 3
BUDGET_S = 1.0
# Below this, a CPU run is quick enough to need no line about its time.
WORTH_SAYING_S = 10.0
# What a run spends besides its training steps (setup, saving), on a 2-core machine.
OVERHEAD_S = 2.0


@dataclass(frozen=True)
class CpuEstimate:
    step_s: float  # median time of one training step, as timed here
    timed_steps: int  # how many steps were timed (after one untimed step)
    steps: int  # training steps the run does (``pipeline.plan_units``)
    compiles: bool  # a torch.compile mode will compile first (not in ``total_s``)

    @property
    def total_s(self) -> float:
        return self.step_s * self.steps + OVERHEAD_S


def measure(config: RunConfig) -> CpuEstimate | None:
    """Time up to ``MAX_TIMED_STEPS`` eager training steps of ``config`` on the CPU, after one
    untimed step; None for the user's own step. A step too large for the host's memory is
    refused here as the run would refuse it (``GpuMemoryError``, before anything is allocated)."""
    if workload_of(config) is None:
        return None
    import torch

    from profiler_core.engine.memory import check_fits
    from profiler_core.engine.numerics import tool_precision
    from profiler_core.engine.pipeline import plan_units
    from profiler_core.engine.workloads import TrainingStep, make_batches

    device = torch.device("cpu")
    check_fits(config, device)
    times: list[float] = []
    with torch.random.fork_rng(devices=[]), tool_precision(config):
        step = TrainingStep(config, device, graphed=False)
        batch = make_batches(config, 1, device)[0]
        step.eager_step(*batch, count=False)  # first allocations, not timed
        while len(times) < MAX_TIMED_STEPS and sum(times) < BUDGET_S:
            started = time.perf_counter()
            step.eager_step(*batch, count=False)
            times.append(time.perf_counter() - started)
        del step, batch
    compiles = any(mode in COMPILED_MODES for mode in config.extra_modes)
    return CpuEstimate(statistics.median(times), len(times), plan_units(config), compiles)


def duration(seconds: float) -> str:
    """"45 s", "3.2 min", "1.5 h"."""
    if not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_line(estimate: CpuEstimate, processes: int = 1) -> str:
    """The line printed before a long CPU run."""
    total = estimate.total_s * processes
    each = f" in each of {processes} processes" if processes > 1 else ""
    compiled = "; compiling the torch.compile modes comes on top" if estimate.compiles else ""
    return (f"Expected time on this CPU: about {duration(total)} ({estimate.step_s:.3g} s per "
            f"training step, timed over {estimate.timed_steps} steps, x {estimate.steps:,} steps"
            f"{each}{compiled}). Ctrl-C stops it and keeps what it measured; --device cpu without "
            "--preset or size options runs a small step in seconds.")
