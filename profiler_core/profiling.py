"""Profiled windows: a few iterations of one mode under ``torch.profiler``, exported as a Chrome
trace and analysed by ``trace``.

Scope: recording. The window is separate from the timed trials, so the profiler never touches
the latency figures; its own overhead is the window's median iteration time over the trials'.
Each iteration is marked with ``record_function(ITERATION_MARKER + index)`` around the step alone
(not the synchronisation after it), so the CPU side of an iteration is the step's own work.
"""

from __future__ import annotations

import gzip
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from profiler_core.trace import TraceAnalysis, analyse_trace, load_trace

# Iteration marks use the name torch.profiler gives its own steps, so every reader of step
# markers (``trace``, Holistic Trace Analysis, Perfetto queries) finds them.
ITERATION_MARKER = "ProfilerStep#"
# Traces larger than this are stored gzip-compressed (Perfetto opens .json.gz directly).
COMPRESS_ABOVE_BYTES = 8 * 2**20


@dataclass(frozen=True)
class ProfiledWindow:
    mode: str
    trace_path: Path  # Chrome trace (.json or .json.gz)
    analysis: TraceAnalysis
    wall_median_ms: float  # synchronised wall time per iteration while profiling


def _activities() -> list[ProfilerActivity]:
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    return activities


def initialise_profiler() -> None:
    """Start and stop the profiler once before any graph is captured.

    Some PyTorch versions lose the kernels of graphs captured before the profiler's (CUPTI's)
    first use; an empty window first avoids that hazard.
    """
    with profile(activities=_activities()):
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def profile_window(mode: str, prepare: Callable[[int], None], run: Callable[[int], None],
                   iterations: int, timer, trace_path: Path,
                   on_iteration: Callable[[], None] = lambda: None) -> ProfiledWindow:
    """Profile ``iterations`` of ``run`` (after an untimed ``prepare``), export and analyse."""
    wall_ms = []
    with warnings.catch_warnings():
        # torch warns that a profiler without a schedule clears events per cycle: one cycle here.
        warnings.filterwarnings("ignore", message="Profiler clears events")
        with profile(activities=_activities()) as profiler:
            for i in range(iterations):
                prepare(i)
                timer.synchronize()
                started = time.perf_counter()
                with record_function(f"{ITERATION_MARKER}{i}"):
                    run(i)
                timer.synchronize()
                wall_ms.append((time.perf_counter() - started) * 1e3)
                on_iteration()
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(trace_path))
    analysis = analyse_trace(load_trace(trace_path), mode=mode)
    if trace_path.stat().st_size > COMPRESS_ABOVE_BYTES:
        packed = trace_path.with_name(trace_path.name + ".gz")
        with open(trace_path, "rb") as source, gzip.open(packed, "wb") as target:
            shutil.copyfileobj(source, target)
        trace_path.unlink()
        trace_path = packed
    return ProfiledWindow(mode, trace_path, analysis, float(np.median(wall_ms)))
