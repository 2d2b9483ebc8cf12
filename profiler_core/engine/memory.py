"""GPU memory: what a run will need, checked against what is free before anything is allocated.

Scope: a deliberately simple, slightly generous estimate (weights, gradients, optimizer state,
activations, the graph's private pool, the batch pool) and the refusal that names what to shrink.
A run that still runs out of memory is caught in ``runner``. Also the host side of collecting a
run's garbage (``freeze_startup_objects``).
"""

from __future__ import annotations

import functools
import gc
import os
from dataclasses import dataclass

import torch

from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import GpuMemoryError
from profiler_core.spec.modes import ALWAYS_MEASURED
from profiler_core.spec.workload_kinds import BATCH_POOL_SIZE, declared_workload, workload_of

FP32_BYTES = 4
# cuBLAS workspaces, the CUDA context's own allocations, allocator rounding.
FIXED_OVERHEAD_BYTES = 512 * 2**20


@dataclass(frozen=True)
class MemoryEstimate:
    parameters_bytes: int  # one replica's weights
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int  # one step's saved activations and backward temporaries
    batches_bytes: int
    total_bytes: int  # a replica per mode, activations, batches and fixed overhead


def parameter_count(config: RunConfig) -> int:
    """The declared workload's parameters (``workload_kinds``)."""
    return declared_workload(config).parameter_count(config)


def replicas(config: RunConfig) -> int:
    """Replicas a run builds: eager, the graphed one, and one per extra mode."""
    return len(ALWAYS_MEASURED) + len(config.extra_modes)


def estimate(config: RunConfig) -> MemoryEstimate:
    workload = declared_workload(config)
    parameters = workload.parameter_count(config) * FP32_BYTES
    optimizer = 2 * parameters if config.optimizer in ("adam", "adamw") else 0
    # Autocast adds low-precision copies of weights and activations; counted at fp32 for margin.
    activations = workload.activation_elements(config) * FP32_BYTES + parameters // 2
    batches = BATCH_POOL_SIZE * workload.batch_elements(config) * FP32_BYTES
    replica = 2 * parameters + optimizer  # weights and gradients, optimizer state
    total = replicas(config) * replica + 2 * activations + batches + FIXED_OVERHEAD_BYTES
    return MemoryEstimate(parameters, parameters, optimizer, activations, batches, total)


def _gib(value: int) -> str:
    return f"{value / 2**30:.1f} GiB"


def cpu_estimate(config: RunConfig) -> MemoryEstimate:
    """A CPU run: one eager replica (no graph, no second replica) and its batches."""
    full = estimate(config)
    batches = (min(BATCH_POOL_SIZE, config.total_eager_iters)
               * declared_workload(config).batch_elements(config) * FP32_BYTES)
    total = (2 * full.parameters_bytes + full.optimizer_bytes + full.activations_bytes + batches
             + FIXED_OVERHEAD_BYTES // 2)
    return MemoryEstimate(full.parameters_bytes, full.gradients_bytes, full.optimizer_bytes,
                          full.activations_bytes, batches, total)


def host_memory_available() -> int | None:
    """Bytes this process may still allocate: the kernel's MemAvailable, lowered by an address-space
    limit (``ulimit -v``) when one is set; None when neither can be read."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            with open("/proc/self/statm", encoding="ascii") as statm:
                used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            headroom = max(0, soft - used)
            available = headroom if available is None else min(available, headroom)
    except (ImportError, OSError, ValueError, IndexError):
        pass
    return available


def check_fits(config: RunConfig, device: torch.device) -> MemoryEstimate | None:
    """Refuse a config that clearly needs more than the device's free memory (the host's memory
    for a CPU run). Every built-in workload has an estimate; the user's own step has none (None),
    and a real out-of-memory error is still caught and named."""
    workload = workload_of(config)
    if workload is None:
        return None
    if device.type == "cpu":
        needed = cpu_estimate(config)
        free_bytes = host_memory_available()
        if free_bytes is not None and needed.total_bytes > free_bytes:
            raise GpuMemoryError(
                f"this config needs about {_gib(needed.total_bytes)} of the CPU's memory (weights "
                f"{_gib(needed.parameters_bytes)}, activations {_gib(needed.activations_bytes)}, "
                f"batches {_gib(needed.batches_bytes)}); this process may use about "
                f"{_gib(free_bytes)}", workload.shrink_hint(config) + " for a CPU run")
        return needed
    needed = estimate(config)
    free_bytes, _ = torch.cuda.mem_get_info(device)
    if needed.total_bytes > free_bytes:
        raise GpuMemoryError(
            f"this config needs about {_gib(needed.total_bytes)} of GPU memory "
            f"(weights {_gib(needed.parameters_bytes)} per replica x{replicas(config)}, activations "
            f"{_gib(needed.activations_bytes)}, batches {_gib(needed.batches_bytes)}); "
            f"{config.device} has {_gib(free_bytes)} free",
            f"{workload.shrink_hint(config)}, time fewer modes, or free memory used by "
            "other processes")
    return needed


@functools.cache
def freeze_startup_objects() -> None:
    """Once per process, before its first run: every object alive now (mostly what importing
    torch, torch._dynamo, sympy and pandas created, millions of objects kept for the process's
    life) is moved out of the garbage collector's reach (``gc.freeze``). A run collects about
    eight times (before each memory baseline and capture, and ``torch.cuda.graph`` on entering),
    and each full collection walked all of them again (what that cost: docs/how-it-measures.md,
    "Start-up: a fresh run's first seconds"). Later runs of a warm worker are not frozen, so
    nothing a run leaves behind is kept."""
    gc.freeze()
