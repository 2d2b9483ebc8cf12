"""Profiled windows: a few iterations of one mode under ``torch.profiler``, exported as a Chrome
trace and analysed by ``trace``.

Scope: recording. A run profiles only after all of its timed trials: once started, the profiler
leaves CUPTI attached to the process and every later launch is slower, so no timed iteration may
follow it. The profiler's own overhead is the window's median iteration time over the cold-start
median. Each iteration is marked with ``record_function(ITERATION_MARKER + index)`` around the
step alone (not the synchronisation after it), so the CPU side of an iteration is the step's own
work; the batch copy of a graph runs before the mark.
"""

from __future__ import annotations

import gzip
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from profiler_core.analysis.trace import TraceAnalysis, analyse_trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.timing.trials import Mode

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


def kernels_were_recorded(analysis: TraceAnalysis) -> bool:
    """Whether the window saw any GPU kernel (a graph captured before the profiler's first use
    shows only its launches in some PyTorch versions)."""
    return bool(analysis.launch_split["kernels"].fillna(0).sum() > 0)


def profile_window(mode: Mode, iterations: int, device: torch.device, trace_path: Path,
                   on_iteration: Callable[[], None] = lambda: None) -> ProfiledWindow:
    """Profile ``iterations`` of ``mode`` (each loaded, then synchronised), export and analyse."""

    def synchronize() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    wall_ms = []
    with warnings.catch_warnings():
        # torch warns that a profiler without a schedule clears events per cycle: one cycle here.
        warnings.filterwarnings("ignore", message="Profiler clears events")
        with profile(activities=_activities()) as profiler:
            for i in range(iterations):
                if mode.load is not None:
                    mode.load(i)
                synchronize()
                started = time.perf_counter()
                with record_function(f"{ITERATION_MARKER}{i}"):
                    mode.run(i)
                synchronize()
                wall_ms.append((time.perf_counter() - started) * 1e3)
                on_iteration()
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        profiler.export_chrome_trace(str(trace_path))
    analysis = analyse_trace(load_trace(trace_path), mode=mode.name)
    if trace_path.stat().st_size > COMPRESS_ABOVE_BYTES:
        packed = trace_path.with_name(trace_path.name + ".gz")
        with open(trace_path, "rb") as source, gzip.open(packed, "wb") as target:
            shutil.copyfileobj(source, target)
        trace_path.unlink()
        trace_path = packed
    return ProfiledWindow(mode.name, trace_path, analysis, float(np.median(wall_ms)))
