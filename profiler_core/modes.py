"""The ways a run can execute one training step, beside eager (the baseline) and the article's
whole-step capture (``capture.GraphedStep``, prepared in ``runner``).

Scope: preparing the extra modes, each on its own replica built from the same seed, and what that
preparation cost once: ``torch.cuda.make_graphed_callables`` on the model (forward and backward
replayed as graphs; loss, optimizer and zero_grad eager), ``torch.compile`` without CUDA graphs
(the compiler's own share), and ``torch.compile(mode="reduce-overhead")`` (CUDA graph trees) with
the graphs it recorded and every "skipping cudagraphs" reason it gave. Timing them is ``timing``'s
job, like any mode.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from profiler_core.timing import Mode
from profiler_core.workloads import TrainingStep

CUDA_ONLY_MODES = ("graph", "graphed_callables", "compile_ro")
# Iterations run once before timing: compilation, autotuning and graph recording happen here.
PREPARE_ITERS = 3


@dataclass
class Prepared:
    """An extra mode, ready to time."""

    mode: Mode
    step: TrainingStep
    one_time_ms: float  # preparation (compile or capture, with its warm-up), synchronised wall time
    memory_bytes: int  # peak memory the preparation needed above what was allocated before it
    details: dict[str, Any] = field(default_factory=dict)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def preparation_baseline(device: torch.device) -> tuple[int, int]:
    """Start measuring a preparation's memory: garbage from earlier steps collected and the cache
    emptied (so their freeing does not look like a saving), the peak reset; returns the bytes
    allocated and reserved now."""
    if device.type != "cuda":
        return 0, 0
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


def peak_added(device: torch.device, baseline: tuple[int, int]) -> int:
    """The memory a preparation added since ``preparation_baseline`` (never negative): the larger
    of the allocator's peak allocation above the baseline and the reservation it kept, which
    holds the private pools of CUDA graphs (Inductor's graph trees allocate there without
    raising this process's peak allocation: 0 bytes on the H200 for the seed step)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    allocated, reserved = baseline
    return max(0, torch.cuda.max_memory_allocated(device) - allocated,
               torch.cuda.memory_reserved(device) - reserved)


def _step_mode(name: str, step: TrainingStep, batches) -> Mode:
    return Mode(name, 1, lambda i: step.eager_step(*batches[i % len(batches)]))


class _SkipReasons(logging.Handler):
    """Collects Inductor's "skipping cudagraphs due to ..." messages (they propagate to the
    ``torch._inductor`` logger whatever artifact logger emits them in a given torch version)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "skipping cudagraphs" in message and message not in self.reasons:
            self.reasons.append(message.strip().splitlines()[0][:300])


def _graphs_recorded(device: torch.device) -> float:
    """CUDA graphs in Inductor's graph trees for the device; NaN where this torch does not say."""
    try:
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(device.index, create_if_none_exists=False)
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return math.nan
    if manager is None:
        return 0.0

    def count(nodes) -> int:
        return sum(1 + sum(count(children) for children in node.children.values())
                   for node in nodes)

    try:
        return float(sum(count(nodes) for nodes in manager.roots.values()))
    except AttributeError:
        return math.nan


def prepare_compiled(config, device: torch.device, batches, reduce_overhead: bool) -> Prepared:
    """``torch.compile`` on the model (forward and backward); loss and optimizer stay eager."""
    name = "compile_ro" if reduce_overhead else "compile"
    step = TrainingStep(config, device, graphed=False)
    step.model = torch.compile(step.model, mode="reduce-overhead" if reduce_overhead else None)
    watcher = _SkipReasons()
    inductor_log = logging.getLogger("torch._inductor")
    inductor_log.addHandler(watcher)
    try:
        baseline, started = preparation_baseline(device), time.perf_counter()
        for i in range(PREPARE_ITERS):
            step.eager_step(*batches[i % len(batches)], count=False)
        _synchronize(device)
        one_time_ms = (time.perf_counter() - started) * 1e3
    finally:
        inductor_log.removeHandler(watcher)
    details: dict[str, Any] = {}
    if reduce_overhead:
        details = {"graphs_recorded": _graphs_recorded(device) if device.type == "cuda" else 0.0,
                   "skip_reasons": watcher.reasons}
    return Prepared(_step_mode(name, step, batches), step, one_time_ms,
                    peak_added(device, baseline), details)


def prepare_graphed_callables(config, device: torch.device, batches) -> Prepared:
    """``torch.cuda.make_graphed_callables`` on the model, under the step's autocast (whose
    weight cache is off: a cached cast would outlive the capture)."""
    step = TrainingStep(config, device, graphed=False)
    sample = batches[0][0].clone()
    baseline, started = preparation_baseline(device), time.perf_counter()
    with step.autocast():
        step.model = torch.cuda.make_graphed_callables(step.model, (sample,),
                                                       num_warmup_iters=PREPARE_ITERS)
    for i in range(PREPARE_ITERS):
        step.eager_step(*batches[i % len(batches)], count=False)
    _synchronize(device)
    one_time_ms = (time.perf_counter() - started) * 1e3
    return Prepared(_step_mode("graphed_callables", step, batches), step, one_time_ms,
                    peak_added(device, baseline))


def prepare(name: str, config, device: torch.device, batches) -> Prepared:
    """One extra mode (not eager or the article's graph, which ``runner`` builds itself)."""
    if name == "graphed_callables":
        return prepare_graphed_callables(config, device, batches)
    if name in ("compile", "compile_ro"):
        return prepare_compiled(config, device, batches, reduce_overhead=name == "compile_ro")
    raise ValueError(f"no extra mode named {name!r}")
