"""One experiment end to end: every requested mode timed as a training loop runs, with the
article's counters, then profiled (:func:`run_experiment` says in which order, and why).

Scope: orchestration of the measuring; the tables and summary figures are assembled by
``storage.runtables``. ``--device cpu`` runs the modes that need no CUDA (eager, compile).
"""

from __future__ import annotations

import atexit
import functools
import gc
import math
import platform
import shutil
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import torch

from profiler_core.analysis import attribution, metrics
from profiler_core.analysis.figures import Figures
from profiler_core.analysis.trace import decompose_speedup
from profiler_core.engine.calibration import calibrate_and_predict
from profiler_core.engine.capture import refuse_after_failed_capture
from profiler_core.engine.counters import counters_table
from profiler_core.engine.memory import check_fits, freeze_startup_objects
from profiler_core.engine.modes import (
    REGISTRY,
    Preparation,
    Prepared,
    capture_graph,
    new_graphed_step,
    peak_added,
    preparation_baseline,
)
from profiler_core.engine.profiling import ProfiledWindow, kernels_were_recorded, profile_window
from profiler_core.engine.readiness import check_step
from profiler_core.engine.telemetry import (
    NVML_UTILISATION_CAVEAT,
    NvmlSamplerProcess,
    PhaseRecorder,
    driver_version,
)
from profiler_core.engine.user_workload import find_function
from profiler_core.engine.workloads import TrainingStep, make_batches, matmul_precision
from profiler_core.spec import hostinfo, schema
from profiler_core.spec.bytecode import bytecode_source
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import (
    ConfigError,
    CudaFaultError,
    GpuMemoryError,
    NoCudaError,
    ProfilerError,
)
from profiler_core.spec.modes import CUDA_ONLY_MODES
from profiler_core.spec.progress import ProgressCallback, ProgressCounter, ignore_progress
from profiler_core.spec.workload_kinds import BATCH_POOL_SIZE, workload_of
from profiler_core.storage import runtables
from profiler_core.storage.results import SCRATCH_PREFIX, RunResult, coerce_table, empty_table
from profiler_core.timing import stats
from profiler_core.timing import trials as timing
from profiler_core.timing.trials import Mode

# Untimed iterations per mode before the timed trials (module load, cuBLAS handles, caches).
TIMING_WARMUP_ITERS = 5
# Shortest block, in replays, for the article's loop timing (a block of 1 would measure nothing).
MIN_BLOCK_REPLAYS = 10


def resolve_device(config: RunConfig) -> torch.device:
    """The device to run on; a CUDA request without CUDA raises ``NoCudaError``."""
    if not config.is_cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise NoCudaError(
            "no CUDA device is present (torch.cuda.is_available() is False)",
            "run on a machine with an NVIDIA GPU and a CUDA build of torch, or pass --device cpu "
            "to try the pipeline on the CPU (eager half only)")
    count, index = torch.cuda.device_count(), config.device_index
    if index is not None and index >= count:
        raise ConfigError("device", f"device must be a CUDA index from 0 to {count - 1}; "
                          f"got {index}", "pick one of this machine's GPUs")
    return torch.device(config.device)


def describe_environment(device: torch.device, driver_version: str | None) -> dict[str, object]:
    environment: dict[str, object] = {
        "device_type": device.type,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "driver_version": driver_version,
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        # What moves a host-bound eager step between processes (None where it cannot be read).
        **hostinfo.host_environment(),
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "bytecode": bytecode_source(),  # whether this process compiled its imports from source
    }
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        environment.update(gpu_name=properties.name, gpu_index=device.index,
                           gpu_memory_bytes=int(properties.total_memory),
                           compute_capability=f"{properties.major}.{properties.minor}")
    else:
        environment.update(gpu_name=None, gpu_index=None)
    return environment


def _steady_trials(modes: list[Mode], iterations: dict[str, int], trials: int, clock: timing.Clock,
                   phases: PhaseRecorder, progress: ProgressCounter, rows: list[tuple],
                   host_issue: list[tuple],
                   wall_clock: Callable[[], float] = time.perf_counter) -> None:
    """The headline timing: each mode's iterations in ``trials`` back-to-back blocks, modes
    interleaved ABBA. Rows are appended to ``rows`` block by block, so an interrupted run keeps them;
    each block's host time to issue a step goes to ``host_issue`` as (mode, trial, ms).
    ``wall_clock`` is the host's clock (tests pass a simulated one, with a simulated ``clock``)."""
    sizes = {mode.name: timing.split_evenly(iterations[mode.name], trials) for mode in modes}
    next_index = {mode.name: 0 for mode in modes}
    for trial, mode in timing.interleaved(modes, trials):
        count = sizes[mode.name][trial]
        with phases.phase(f"{mode.name} timed"):
            issue_ms = timing.steady_block(mode, next_index[mode.name], count, trial, clock, rows,
                                           wall_clock)
        host_issue.append((mode.name, trial, issue_ms))
        next_index[mode.name] += count
        progress.advance(count * mode.steps, f"trial {trial + 1}/{trials}, {mode.name}")


def _cold_trials(modes: list[Mode], iterations: dict[str, int], trials: int, clock: timing.Clock,
                 phases: PhaseRecorder, progress: ProgressCounter, rows: list[tuple],
                 wall_clock: Callable[[], float] = time.perf_counter) -> None:
    """Each iteration from an idle device (synchronise first), modes interleaved ABBA."""
    sizes = {mode.name: timing.split_evenly(iterations[mode.name], trials) for mode in modes}
    next_index = {mode.name: 0 for mode in modes}
    for trial, mode in timing.interleaved(modes, trials):
        count = sizes[mode.name][trial]
        with phases.phase(f"{mode.name} cold start"):
            for i in range(next_index[mode.name], next_index[mode.name] + count):
                rows.append(timing.cold_iteration(mode, i, trial, clock, wall_clock))
        next_index[mode.name] += count
        progress.advance(count * mode.steps, f"cold start {trial + 1}/{trials}, {mode.name}")


def _article_loops(modes: list[Mode], block_iters: dict[str, int], trials: int,
                   clock: timing.Clock, phases: PhaseRecorder, progress: ProgressCounter,
                   wall_clock: Callable[[], float] = time.perf_counter) -> pd.DataFrame:
    """The article's loop timing, modes interleaved ABBA: one row per block and method."""
    rows = []
    for trial, mode in timing.interleaved(modes, trials):
        count = block_iters[mode.name]
        with phases.phase(f"{mode.name} article loop"):
            loop = timing.article_loop(mode, count, clock, wall_clock)
        rows.append((mode.name, "article_no_sync", loop.enqueue_ms))
        rows.append((mode.name, "block_sync", loop.synchronised_ms))
        progress.advance(count * mode.steps, f"article loop {trial + 1}/{trials}, {mode.name}")
    return pd.DataFrame(rows, columns=["mode", "method", "ms_per_step"])


# GPU clock cycles the device is held busy while those copies are enqueued (a few milliseconds).
HOLD_DEVICE_CYCLES = 10_000_000


def _article_block_replays(config: RunConfig) -> int:
    return max(MIN_BLOCK_REPLAYS, config.replays // config.trial_count)


def plan_units(config: RunConfig) -> int:
    """Work units (training steps) the run will do, for the progress bar."""
    per_extra = TIMING_WARMUP_ITERS + config.total_eager_iters  # untimed, then steady state
    if not config.is_cuda:
        cpu_extras = [m for m in config.extra_modes if m not in CUDA_ONLY_MODES]
        return config.warmup_iters + config.total_eager_iters + len(cpu_extras) * per_extra
    extras = len(config.extra_modes)
    steps = TIMING_WARMUP_ITERS + config.total_eager_iters
    block = _article_block_replays(config) * config.capture_iters
    steps += config.total_eager_iters  # cold start
    steps += config.warmup_iters + config.capture_iters + TIMING_WARMUP_ITERS * config.capture_iters
    steps += 2 * config.replays * config.capture_iters + 2 * config.trial_count * block
    steps += extras * (per_extra + config.total_eager_iters + 2 * config.trial_count * block)
    if config.profile:
        steps += config.profile_iters * (1 + config.capture_iters + extras)
    return steps + 2 * config.parity_steps * config.capture_iters


def _parity(config: RunConfig, device: torch.device, batches) -> dict[str, float]:
    """Parameters after K eager steps vs K replays, dropout off, same seed and batches.

    Both replicas get the graphed replica's optimizer settings (``capturable=True`` for Adam), so
    the comparison isolates replay against eager execution of the same arithmetic.
    """
    quiet = config.replace(dropout1=0.0, dropout2=0.0)
    eager = TrainingStep(quiet, device, graphed=True)
    for i in range(quiet.warmup_iters):
        eager.eager_step(*batches[i % len(batches)])
    graphed = new_graphed_step(quiet, device, batches)
    capture_graph(graphed, quiet, batches)
    for replay in range(quiet.parity_steps):
        x, y = batches[replay % len(batches)]
        graphed.load(x, y)
        graphed.replay()
        for _ in range(quiet.capture_iters):
            eager.eager_step(x, y)
    torch.cuda.synchronize(device)
    reference, candidate = eager.parameters_flat(), graphed.step.parameters_flat()
    return _parity_figures(quiet, float((reference - candidate).abs().max()),
                           float(reference.abs().max()))


def _parity_figures(config: RunConfig, max_abs: float, scale: float) -> dict[str, float]:
    """The headline's parity figures: training steps compared, the largest absolute difference
    of a parameter and that difference relative to the largest parameter (NaN when all are 0)."""
    return {"parity_steps": config.parity_steps * config.capture_iters,
            "parity_max_abs_diff": max_abs,
            "parity_max_rel_diff": max_abs / scale if scale > 0 else math.nan}


def _profile_modes(config: RunConfig, device: torch.device, prepared: dict[str, Prepared],
                   trace_dir: Path, phases: PhaseRecorder, progress: ProgressCounter,
                   notes: list[str]) -> dict[str, ProfiledWindow]:
    """A profiled window per mode, after every timed trial. If a graph window recorded its
    launches but none of the replay's kernels (a graph captured before the profiler's first use,
    in some PyTorch versions), the mode is prepared again now, with the profiler initialised, and
    profiled instead."""
    windows = {}
    for name, ready in prepared.items():
        mode = ready.mode
        progress.start_phase(f"profiling {name}", f"{config.profile_iters} iterations")
        with phases.phase(f"{name} profiled"):
            window = profile_window(mode, config.profile_iters, device,
                                    trace_dir / schema.trace_file(name),
                                    functools.partial(progress.advance, mode.steps))
            if ready.prepare_again is not None and not kernels_were_recorded(window.analysis):
                notes.append(f"the {name} mode prepared before profiling showed no kernels in the "
                             "profiler (a known issue of some PyTorch versions), so it was prepared "
                             "again after the profiler's first use and profiled instead")
                window = profile_window(ready.prepare_again(), config.profile_iters, device,
                                        trace_dir / schema.trace_file(name))
        windows[name] = window
    return windows


def _window_figures(windows: dict[str, ProfiledWindow], prepared: dict[str, Prepared],
                    table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Each mode's split medians and the profiler's overhead: the profiled window's median
    iteration (synchronised each) over the headline's steady-state time of an iteration, so it
    says how far the profiled program is from the one the headline timed."""
    figures: dict[str, dict[str, float]] = {}
    for name, window in windows.items():
        headline_ms = runtables.median(table, name, "steady_trial") * prepared[name].mode.steps
        figures[name] = {**window.analysis.summary(),
                         "profiled_wall_median_ms": window.wall_median_ms,
                         "profiler_overhead_pct": (window.wall_median_ms / headline_ms - 1) * 100}
    return figures


def _article_block_iters(config: RunConfig, modes: list[Mode]) -> dict[str, int]:
    """Iterations per block of the article's loop: as many training steps for every mode."""
    block_steps = _article_block_replays(config) * config.capture_iters
    return {mode.name: block_steps // mode.steps for mode in modes}


def _timed_results(config: RunConfig, state: _RunState, prepared: dict[str, Prepared],
                   loops: pd.DataFrame, copy_ms: float, held_ms: float
                   ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, dict[str, float]]]:
    """A CUDA run's statistics, modes table, timing headline and pay-back from its timed trials
    (``state.tables["latency"]``, host issue times and counters), the article's loops, the graph's
    batch copy and held replay (per iteration, NaN when not timed). Returns (stats.csv, modes.csv,
    each mode's figures so far)."""
    headline, tables = state.headline, state.tables
    latency = tables["latency"]
    stats_table = tables["stats"] = runtables.stats_table(latency, loops,
                                                 {"graph": copy_ms / config.capture_iters},
                                                 state.host_issue, {"graph": held_ms})
    headline.update(runtables.headline_facts({}))
    modes_table = tables["modes"] = _modes_table(config, latency, stats_table, prepared)
    figures = state.figures = {name: dict(ready.figures) for name, ready in prepared.items()}
    runtables.add_pay_back(figures, modes_table)
    # metrics.csv goes in now: a run stopped while profiling still says whether it pays back
    tables["metrics"] = coerce_table("metrics", metrics.build(modes_table, stats_table, figures))
    headline.update(modes=list(prepared),
                    counters_match=bool(counters_table(config, state.observed_counters)
                                        ["match"].all()))
    return stats_table, modes_table, figures


def _profiled_results(state: _RunState, prepared: dict[str, Prepared],
                      windows: dict[str, ProfiledWindow], stats_table: pd.DataFrame,
                      modes_table: pd.DataFrame, figures: dict[str, dict[str, float]]) -> None:
    """A CUDA run's tables from its profiled windows (none when the profiler was off): the launch
    split, kernels and breakdown, the attribution of the headline's saving, how each window
    found its iterations and metrics.csv."""
    headline, tables = state.headline, state.tables
    latency = tables["latency"]
    if windows:
        for name, extra in _window_figures(windows, prepared, stats_table).items():
            figures[name].update(extra)
        tables["launch_split"] = coerce_table("launch_split", pd.concat(
            [w.analysis.launch_split for w in windows.values()], ignore_index=True))
        tables["kernels"] = coerce_table("kernels", pd.concat(
            [w.analysis.kernels for w in windows.values()], ignore_index=True))
        tables["breakdown"] = coerce_table("breakdown", pd.concat(
            [decompose_speedup(windows["eager"].analysis, window.analysis)
             for name, window in windows.items() if name != "eager"], ignore_index=True))
    tables["attribution"] = coerce_table("attribution", attribution.build(
        stats_table, tables.get("launch_split", empty_table("launch_split")), latency))
    state.notes.extend(attribution.stretched_kernel_notes(tables["attribution"]))
    headline.update(runtables.headline_facts(
        {name: window.analysis.iteration_source for name, window in windows.items()}))
    tables["metrics"] = coerce_table("metrics", metrics.build(modes_table, stats_table, figures))


@dataclass
class _RunState:
    """What a run has measured so far; kept (marked incomplete) when a run stops early."""

    headline: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)  # mode -> metric -> value, until metrics.csv is built
    tables: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    traces: dict = field(default_factory=lambda: {"eager": None, "graph": None})  # mode -> path
    observed_counters: dict = field(default_factory=dict)
    latency_rows: list = field(default_factory=list)  # timed iterations, as they are measured
    host_issue: list = field(default_factory=list)  # (mode, trial, host ms per step) per block


def run_experiment(config: RunConfig, progress: ProgressCallback = ignore_progress) -> RunResult:
    """Run ``config`` and return its result (not yet saved).

    The order of a CUDA run: batches -> each mode prepared through ``modes.REGISTRY`` on its own
    replica (eager; the graph: side-stream warm-up, capture; the others: capture or compile),
    then its untimed iterations -> counters reset -> interleaved steady-state trials (the
    headline) -> interleaved cold-start trials -> the article's loop -> profiled windows ->
    numerical parity. Nothing that slows a launching thread runs while the trials are timed:
    torch.profiler (whose CUPTI stays attached once started) is first used after them, and NVML
    is sampled from a child process (``NvmlSamplerProcess``), which makes no NVML call during
    the timed trials. Progress is reported between blocks only.

    If the run stops early (out of memory, a step that cannot be captured, a GPU fault, Ctrl-C),
    the exception raised carries ``partial_result``: what was measured, marked incomplete.
    """
    checking_s = time.time()
    freeze_startup_objects()
    device = resolve_device(config)
    if device.type == "cuda":
        refuse_after_failed_capture()
    check_fits(config, device)
    origin_s = time.time()
    phases = PhaseRecorder(origin_s)
    sampler = (NvmlSamplerProcess(device.index, interval_s=config.nvml_interval_ms / 1e3,
                                  origin_s=origin_s)
               if config.nvml and device.type == "cuda" else None)
    # a CPU run's threads fitted to the CPUs the host's load leaves free (a count the user set
    # is kept), before the environment records the count
    threads = (hostinfo.fit_cpu_threads(torch, pinned=config.cpu_affinity is not None)
               if device.type == "cpu" else None)
    environment = describe_environment(device, driver_version() if device.type == "cuda" else None)
    if threads is not None:
        environment["cpu_threads"] = asdict(threads)
    environment["device_check_s"] = origin_s - checking_s  # before phases.csv's origin
    counter = ProgressCounter(plan_units(config), progress)
    state = _RunState()
    if threads is not None and threads.worth_a_note:  # said with the run, as well as recorded
        state.notes.append(f"torch threads: {threads.reason}")
    failure: BaseException | None = None
    if sampler is not None:
        sampler.start()
    try:
        with matmul_precision(config.dtype), tempfile.TemporaryDirectory() as trace_dir:
            try:
                if device.type == "cuda":
                    _run_cuda(config, device, phases, counter, Path(trace_dir), state, sampler)
                else:
                    state.notes.append("device cpu: only the eager half ran; CUDA graphs need a CUDA "
                                       "device, so there is no graph timing, capture, profiler split "
                                       "or NVML data")
                    _run_cpu(config, device, phases, counter, state)
            except torch.cuda.OutOfMemoryError as error:
                # Drop the locals of the failed frames (the run's tensors) whoever keeps the error.
                traceback.clear_frames(error.__traceback__)
                failure = _out_of_memory(config, counter.phase, error)
            except MemoryError as error:
                traceback.clear_frames(error.__traceback__)
                failure = _out_of_memory(config, counter.phase, error)
            except RuntimeError as error:
                if _is_host_out_of_memory(error):
                    traceback.clear_frames(error.__traceback__)
                    failure = _out_of_memory(config, counter.phase, error)
                else:
                    failure = _cuda_fault(counter.phase, error) if _is_cuda_fault(error) else error
            except (ProfilerError, KeyboardInterrupt) as error:
                failure = error
            if failure is not None:
                _release_gpu_memory(device)
            result = _finish(config, environment, state, phases, sampler, failure, counter.phase)
    finally:
        if sampler is not None:
            sampler.stop()
    if failure is not None:
        failure.partial_result = result  # type: ignore[attr-defined]  # any exception (Ctrl-C too) carries what was measured
        raise failure
    counter.finish()
    return result


def _finish(config: RunConfig, environment: dict, state: _RunState, phases: PhaseRecorder,
            sampler: NvmlSamplerProcess | None, failure: BaseException | None,
            phase: str) -> RunResult:
    """The run's result from what it measured, complete or (``failure``) stopped during
    ``phase``: the counters, NVML samples (``sampler`` stopped first) and phases added, the
    traces moved out of the run's temporary folder."""
    if failure is not None:
        if "latency" not in state.tables and state.latency_rows:
            state.tables["latency"] = runtables.latency_table(state.latency_rows)
        if "metrics" not in state.tables and state.figures:  # what preparation measured
            state.tables["metrics"] = coerce_table("metrics", metrics.build(
                empty_table("modes"), empty_table("stats"), state.figures))
        state.notes.append(f"incomplete: the run stopped during {phase}: {_one_line(failure)}")
    if state.observed_counters:
        state.tables["counters"] = counters_table(config, state.observed_counters)
    if sampler is not None:
        sampler.stop()
        state.tables["nvml"] = coerce_table("nvml", sampler.frame())
        capability = sampler.capability
        state.headline["nvml_available"] = capability.available
        if not capability.available:
            state.notes.append(f"NVML unavailable: {capability.reason}")
        elif capability.unsupported_metrics:
            state.notes.append("NVML metrics not supported on this GPU: "
                               + ", ".join(capability.unsupported_metrics))
        state.notes.append(NVML_UTILISATION_CAVEAT)
    state.tables["phases"] = coerce_table("phases", phases.frame())
    environment["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    environment["load_avg_end"] = hostinfo.load_average()
    return _detach_traces(RunResult(
        config=config, environment=environment, headline=state.headline, tables=state.tables,
        notes=state.notes, complete=failure is None, trace_paths=state.traces))


def _one_line(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt) and not str(error):  # a time limit says what it is
        return "interrupted (Ctrl-C, or SIGTERM: the dashboard's Cancel or its time limit)"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _out_of_memory(config: RunConfig, phase: str, error: BaseException) -> GpuMemoryError:
    """A fresh error (holding no frames, so the run's tensors can be freed) naming the phase."""
    # torch's message runs on with allocator advice; its first three sentences say what failed.
    detail = ". ".join(_one_line(error).split(". ")[:3])
    where = "CUDA" if config.is_cuda else "the CPU (host memory)"
    workload = workload_of(config)
    shrink = (workload.shrink_hint(config) if workload is not None
              else "shrink the batch or the model your step builds")
    return GpuMemoryError(f"{where} ran out of memory during {phase} ({detail})",
                          f"{shrink}, or free memory used by other processes")


def _is_host_out_of_memory(error: RuntimeError) -> bool:
    return "DefaultCPUAllocator" in str(error) or "can't allocate memory" in str(error)


def _is_cuda_fault(error: RuntimeError) -> bool:
    text = str(error)
    return "CUDA error" in text or "CUBLAS_STATUS" in text or "cudaError" in text


def _cuda_fault(phase: str, error: RuntimeError) -> CudaFaultError:
    return CudaFaultError(f"the GPU reported an error during {phase}: {_one_line(error)}",
                          "the CUDA context of this process is unusable: start a new run (the "
                          "dashboard starts each run in a fresh worker process)")


def _release_gpu_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        except RuntimeError:
            pass  # a faulted context cannot synchronise; the process must end anyway


def _detach_traces(result: RunResult) -> RunResult:
    """Move traces out of the run's temporary directory into a private scratch folder that
    outlives the run until the result is saved (``RunResult.release_scratch``; at the latest when
    the process exits). A run without traces makes no folder."""
    present = {mode: path for mode, path in result.trace_paths.items()
               if path is not None and Path(path).exists()}
    if not present:
        result.trace_paths = {mode: None for mode in result.trace_paths}
        return result
    keep = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    _SCRATCH_DIRS.append(keep)
    result.trace_paths = {mode: None for mode in result.trace_paths}
    for mode, path in present.items():
        target = keep / Path(path).name
        Path(path).replace(target)
        result.trace_paths[mode] = target
    result.scratch_dir = keep
    return result


# Scratch folders of this process's runs, removed at exit if nobody released them earlier.
_SCRATCH_DIRS: list[Path] = []


@atexit.register
def _remove_scratch_dirs() -> None:
    for folder in _SCRATCH_DIRS:
        shutil.rmtree(folder, ignore_errors=True)


def _run_cpu(config: RunConfig, device: torch.device, phases: PhaseRecorder,
             progress: ProgressCounter, state: _RunState) -> None:
    """The modes that run without CUDA, on the CPU: steady-state wall time between consecutive
    steps (on a CPU a step is finished when its call returns, so there is no cold start or no-sync
    pitfall to show)."""
    batches = make_batches(config, min(BATCH_POOL_SIZE, config.total_eager_iters), device)
    skipped = [name for name in config.extra_modes if REGISTRY[name].cuda_only]
    if skipped:
        state.notes.append(f"device cpu: {', '.join(skipped)} need a CUDA device and were skipped")
    prep = _preparation(config, device, batches, phases, progress, state)
    eager = REGISTRY["eager"].prepare(prep)
    _note_readiness(config, eager.step, state)
    observed = state.observed_counters
    observed["initial"] = float(eager.step.counter.item())
    progress.start_phase("warm-up", f"{config.warmup_iters} eager steps")
    with phases.phase("warm-up"):
        for i in range(config.warmup_iters):
            eager.step.eager_step(*batches[i % len(batches)], count=config.count_warmup)
            progress.advance(1)
    observed["after_warmup"] = float(eager.step.counter.item())
    prepared = {"eager": eager}
    prepared.update(_prepare_modes([name for name in config.extra_modes if name not in skipped],
                                   prep))
    eager.step.counter.zero_()
    modes = [ready.mode for ready in prepared.values()]
    progress.start_phase("timed trials", f"{config.total_eager_iters} steps per mode")
    _steady_trials(modes, {mode.name: config.total_eager_iters for mode in modes},
                   config.trial_count, timing.HostClock(), phases, progress, state.latency_rows,
                   state.host_issue)
    observed["eager_after_timed"] = float(eager.step.counter.item())
    _cpu_results(config, state, prepared)


def _cpu_results(config: RunConfig, state: _RunState, prepared: dict[str, Prepared]) -> None:
    """A CPU run's tables and headline from what it measured (``state``'s timed rows, host issue
    times and counters; each prepared mode's one-time cost and figures)."""
    latency = state.tables["latency"] = runtables.latency_table(state.latency_rows)
    stats_table = state.tables["stats"] = runtables.stats_table(latency, pd.DataFrame(
        columns=["mode", "method", "ms_per_step"]), host_issue=state.host_issue)
    state.headline.update(runtables.headline_facts({}))
    modes_table = state.tables["modes"] = _modes_table(config, latency, stats_table, prepared)
    figures = state.figures = {name: dict(ready.figures) for name, ready in prepared.items()}
    runtables.add_pay_back(figures, modes_table)
    state.tables["metrics"] = coerce_table("metrics", metrics.build(modes_table, stats_table, figures))
    state.tables["attribution"] = coerce_table("attribution", attribution.build(
        stats_table, empty_table("launch_split"), latency))
    state.headline["modes"] = list(prepared)
    state.headline["counters_match"] = bool(counters_table(config, state.observed_counters)
                                            ["match"].all())


def _preparation(config: RunConfig, device: torch.device, batches, phases: PhaseRecorder,
                 progress: ProgressCounter, state: _RunState) -> Preparation:
    return Preparation(config, device, batches, phases, progress, state.observed_counters,
                       state.notes, before_capture=lambda step: _note_readiness(config, step, state))


def _prepare_modes(names: list[str], prep: Preparation) -> dict[str, Prepared]:
    """Each mode in turn: prepared on its own replica (the registry's recipe), then its untimed
    iterations. The mode's ``peak_bytes`` is the memory both needed above what was allocated
    before (earlier modes' garbage collected first): the larger of the peak allocation and the
    reservation kept, which holds CUDA graph pools the allocator's peak does not see;
    ``device_bytes`` is the device memory they took by the driver's count (``mem_get_info``:
    also what lives outside torch's allocator, such as compiled kernels and graph objects)."""
    device = prep.device
    prepared = {}
    for name in names:
        baseline = preparation_baseline(device)
        free_before = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ready = prepared[name] = REGISTRY[name].prepare(prep)
            _untimed_iterations(ready.mode, prep.phases, prep.progress)
        if device.type == "cuda":
            ready.figures["peak_bytes"] = peak_added(device, baseline)
            # The driver's view: everything the mode holds, inside the allocator or not.
            ready.figures["device_bytes"] = max(0, free_before - torch.cuda.mem_get_info(device)[0])
        prep.notes.extend(_warning_notes(name, caught))
    return prepared


def _warning_notes(mode: str, caught: list[warnings.WarningMessage]) -> list[str]:
    """What torch warned about while a mode was prepared and first run, one note per warning
    (its first sentence): make_graphed_callables, for one, leaves the parameters' gradient
    accumulation on its warm-up stream, which torch says may cost synchronisation."""
    notes = []
    for warning in caught:
        if not issubclass(warning.category, UserWarning):
            continue
        first = str(warning.message).strip().split(". ")[0].splitlines()[0][:300]
        note = f"{mode}: torch warned while preparing it: {first}"
        if note not in notes:
            notes.append(note)
    return notes


def _held_replay_ms(graph: Mode, clock: timing.Clock) -> float:
    """The graph's replay on the device alone (no batch copy, queued behind a few milliseconds of
    GPU work so that no replay waits for the host), per training step; NaN without
    ``torch.cuda._sleep``."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return math.nan
    return timing.held_replay_ms(graph, runtables.HELD_REPLAYS, clock, lambda: sleep(HOLD_DEVICE_CYCLES))


def _input_copy_ms(graph: Mode, clock: timing.Clock, notes: list[str]) -> float:
    """The graph's batch copy timed alone, queued behind a few milliseconds of GPU work
    (``torch.cuda._sleep``) so that the copies run back to back; NaN where torch lacks it."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        notes.append("this PyTorch has no torch.cuda._sleep, so the batch copy was not timed apart")
        return math.nan
    return timing.input_copy_ms(graph, runtables.INPUT_COPIES, clock, lambda: sleep(HOLD_DEVICE_CYCLES))


def _modes_table(config: RunConfig, latency: pd.DataFrame, table: pd.DataFrame,
                 prepared: dict[str, Prepared]) -> pd.DataFrame:
    """modes.csv: every mode's steady-state median, speedup over eager (bootstrap CI over the
    trials), one-time cost (preparation's wall time) and the memory preparation added."""
    eager_trials = runtables.per_step(latency, "eager", "steady_trial")
    rows = []
    for name, ready in prepared.items():
        speedup, low, high = stats.median_ratio_ci(eager_trials, runtables.per_step(latency, name, "steady_trial"),
                                                   seed=config.seed)
        rows.append({"mode": name, "median_ms": runtables.median(table, name, "steady_trial"),
                     "speedup": speedup, "speedup_ci_low": low, "speedup_ci_high": high,
                     "one_time_ms": ready.one_time_ms, "memory_bytes": float(ready.memory_bytes),
                     "graphs_recorded": ready.graphs_recorded})
    return coerce_table("modes", pd.DataFrame(rows, columns=schema.MODES_COLUMNS))


# Optimizers whose graphed replica is built differently from the eager one (``capturable=True``
# keeps their step count on the device, and runs more kernels per step).
CAPTURABLE_OPTIMIZERS = ("adam", "adamw")


def _capture_twin_figures(config: RunConfig, device: torch.device, batches,
                          trace_dir: Path) -> dict[str, float]:
    """For the prediction before capture: the GPU busy time and kernels per step of the step the
    graph will capture, run eagerly (a replica built as the graphed one is, ``capturable=True``
    for Adam and AdamW), profiled for ``profile_iters`` steps after a few untimed ones. Empty
    where the graphed replica's step is the eager one's (SGD) or the step is the user's own."""
    if is_user_spec(config.workload) or config.optimizer not in CAPTURABLE_OPTIMIZERS:
        return {}
    twin = TrainingStep(config, device, graphed=True)
    for i in range(TIMING_WARMUP_ITERS):
        twin.eager_step(*batches[i % len(batches)])
    mode = Mode("capture_twin", 1, lambda i: twin.eager_step(*batches[i % len(batches)]))
    window = profile_window(mode, config.profile_iters, device, trace_dir / "trace_capture_twin.json")
    medians = window.analysis.summary()
    return {"capture_twin_gpu_busy_us": medians["gpu_busy_us"],
            "capture_twin_kernels": medians["kernels"]}


def _note_readiness(config: RunConfig, step: TrainingStep, state: _RunState) -> None:
    """For the user's own step: what would break under capture, one note per finding."""
    if not is_user_spec(config.workload):
        return
    findings = check_step(find_function(config.workload), step.model, step.loss_fn, step.optimizer)
    state.headline["readiness_findings"] = len(findings)
    state.notes.extend(f"capture readiness: {finding.one_line()}" for finding in findings)


def _untimed_iterations(mode: Mode, phases: PhaseRecorder, progress: ProgressCounter) -> None:
    """The first iterations of a mode, run but not timed (phase "<mode> warm-up")."""
    phase = f"{mode.name} warm-up"
    progress.start_phase(phase, f"{TIMING_WARMUP_ITERS} untimed iterations")
    with phases.phase(phase):
        for i in range(TIMING_WARMUP_ITERS):
            if mode.load is not None:
                mode.load(i)
            mode.run(i)
            progress.advance(mode.steps)


@contextmanager
def _nvml_quiet(sampler: NvmlSamplerProcess | None, notes: list[str]) -> Iterator[None]:
    """No NVML call while the block runs (the driver's buffered samples cover it)."""
    if sampler is not None and not sampler.pause():
        notes.append("the NVML sampler did not confirm its pause before the timed trials, so it "
                     "was stopped there: NVML data ends before them")
    try:
        yield
    finally:
        if sampler is not None:
            sampler.resume()


def _run_cuda(config: RunConfig, device: torch.device, phases: PhaseRecorder,
              progress: ProgressCounter, trace_dir: Path, state: _RunState,
              sampler: NvmlSamplerProcess | None) -> None:
    headline, tables, observed = state.headline, state.tables, state.observed_counters
    progress.start_phase("setup", f"{BATCH_POOL_SIZE} batches on {config.device}")
    with phases.phase("setup"):  # the first CUDA work of a process also loads its kernels
        batches = make_batches(config, BATCH_POOL_SIZE, device)
        clock = timing.CudaClock(device)
        torch.cuda.synchronize(device)
    prepared = _prepare_modes(list(config.modes),
                              _preparation(config, device, batches, phases, progress, state))
    state.figures = {name: dict(ready.figures) for name, ready in prepared.items()}
    modes = [ready.mode for ready in prepared.values()]
    graph = prepared["graph"].mode

    # Steady-state trials: counters reset first, so after them they hold exactly that work.
    for ready in prepared.values():
        ready.step.counter.zero_()
    iterations = {name: REGISTRY[name].timed_iterations(config) for name in prepared}
    trials = config.trial_count
    with _nvml_quiet(sampler, state.notes):
        progress.start_phase("timed trials", f"{trials} interleaved steady-state trials per mode")
        _steady_trials(modes, iterations, trials, clock, phases, progress, state.latency_rows,
                       state.host_issue)
        observed["after_replay"] = float(prepared["graph"].step.counter.item())
        observed["eager_after_timed"] = float(prepared["eager"].step.counter.item())
        with phases.phase("graph input copy"):
            copy_ms = _input_copy_ms(graph, clock, state.notes)
            held_ms = _held_replay_ms(graph, clock)
        progress.start_phase("cold-start trials", "a synchronise before every iteration")
        _cold_trials(modes, iterations, trials, clock, phases, progress, state.latency_rows)
        tables["latency"] = runtables.latency_table(state.latency_rows)
        progress.start_phase("article loop", "no-sync loop timing, then synchronised")
        loops = _article_loops(modes, _article_block_iters(config, modes), trials, clock, phases,
                               progress)
    with phases.phase("timing statistics"):
        stats_table, modes_table, figures = _timed_results(config, state, prepared, loops,
                                                           copy_ms, held_ms)
    windows: dict[str, ProfiledWindow] = {}
    if config.profile:  # after every timed trial: the profiler slows whatever runs after it
        windows = _profile_modes(config, device, prepared, trace_dir, phases, progress, state.notes)
        state.traces.update({mode: window.trace_path for mode, window in windows.items()})
    with phases.phase("trace analysis"):
        _profiled_results(state, prepared, windows, stats_table, modes_table, figures)
    if config.profile:
        with phases.phase("capture twin profiled"):
            headline.update(_capture_twin_figures(config, device, batches, trace_dir))
        with phases.phase("calibration"):
            headline.update(calibrate_and_predict(
                device, batches, config.capture_iters, headline,
                Figures.from_table(state.tables["metrics"])))

    del graph, modes, prepared
    torch.cuda.empty_cache()
    if config.parity_steps:
        progress.start_phase("parity", f"{config.parity_steps} replays vs eager steps, dropout off")
        with phases.phase("parity"):
            headline.update(_parity(config, device, batches))
        progress.advance(2 * config.parity_steps * config.capture_iters)
