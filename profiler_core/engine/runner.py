"""One experiment end to end: every requested mode timed as a training loop runs, with the
article's counters, then profiled (:func:`run_experiment` says in which order, and why).

Scope: orchestration of the measuring; the tables and summary figures are assembled by
``storage.runtables``. ``--device cpu`` runs the modes that need no CUDA (eager, compile).
"""

from __future__ import annotations

import functools
import gc
import math
import platform
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from profiler_core.analysis.figures import Figures
from profiler_core.engine import pipeline
from profiler_core.engine.calibration import calibrate_and_predict
from profiler_core.engine.capture import refuse_after_failed_capture
from profiler_core.engine.memory import check_fits, freeze_startup_objects
from profiler_core.engine.modes import (
    REGISTRY,
    Preparation,
    Prepared,
    peak_added,
    preparation_baseline,
)
from profiler_core.engine.numerics import tool_precision
from profiler_core.engine.parity import ParityCheck, check_modes
from profiler_core.engine.profiling import ProfiledWindow, kernels_were_recorded, profile_window
from profiler_core.engine.readiness import check_training_step
from profiler_core.engine.shaped import run_shaped
from profiler_core.engine.shaped import units as shaped_units
from profiler_core.engine.telemetry import (
    NvmlSamplerProcess,
    PhaseRecorder,
    driver_version,
)
from profiler_core.engine.user_workload import find_function
from profiler_core.engine.workloads import TrainingStep, make_batches
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
from profiler_core.spec.progress import ProgressCallback, ProgressCounter, ignore_progress
from profiler_core.spec.workload_kinds import BATCH_POOL_SIZE, workload_of
from profiler_core.storage import runtables
from profiler_core.storage.results import RunResult
from profiler_core.timing import trials as timing
from profiler_core.timing.trials import Mode

TIMING_WARMUP_ITERS = pipeline.TIMING_WARMUP_ITERS


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


# GPU clock cycles the device is held busy while those copies are enqueued (a few milliseconds).
HOLD_DEVICE_CYCLES = 10_000_000


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


def run_experiment(config: RunConfig, progress: ProgressCallback = ignore_progress) -> RunResult:
    """Run ``config`` and return its result (not yet saved).

    The sequence is ``pipeline.run_cuda`` (or ``run_cpu``) on this device (:class:`DeviceBackend`):
    batches -> each mode prepared through ``modes.REGISTRY`` on its own replica (eager; the
    graph: side-stream warm-up, capture; the others: capture or compile), then its untimed
    iterations -> counters reset -> interleaved steady-state trials (the headline) -> interleaved
    cold-start trials -> the article's loop -> profiled windows -> numerical parity. Nothing that
    slows a launching thread runs while the trials are timed: torch.profiler (whose CUPTI stays
    attached once started) is first used after them, and NVML is sampled from a child process
    (``NvmlSamplerProcess``), which makes no NVML call during the timed trials. Progress is
    reported between blocks only.

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
    counter = ProgressCounter(shaped_units(config) if config.vary is not None
                              else pipeline.plan_units(config), progress)
    state = pipeline.RunState()
    if threads is not None and threads.worth_a_note:  # said with the run, as well as recorded
        state.notes.append(f"torch threads: {threads.reason}")
    failure: BaseException | None = None
    if sampler is not None:
        sampler.start()
    try:
        with tool_precision(config), tempfile.TemporaryDirectory() as trace_dir:
            backend = DeviceBackend(config, device, phases, counter, Path(trace_dir), sampler)
            try:
                if config.vary is not None:  # the step's shapes change: every strategy for them
                    run_shaped(config, device, phases, counter, state)
                elif device.type == "cuda":
                    pipeline.run_cuda(config, backend, phases, counter, state)
                else:
                    state.notes.append("device cpu: only the eager half ran; CUDA graphs need a CUDA "
                                       "device, so there is no graph timing, capture, profiler split "
                                       "or NVML data")
                    pipeline.run_cpu(config, backend, phases, counter, state)
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
            del backend  # its batches and replicas
            if failure is not None:
                _release_gpu_memory(device)
            result = pipeline.finish(config, environment, state, phases, sampler, failure,
                                     counter.phase)
    finally:
        if sampler is not None:
            sampler.stop()
    if failure is not None:
        failure.partial_result = result  # type: ignore[attr-defined]  # any exception (Ctrl-C too) carries what was measured
        raise failure
    counter.finish()
    return result


def _out_of_memory(config: RunConfig, phase: str, error: BaseException) -> GpuMemoryError:
    """A fresh error (holding no frames, so the run's tensors can be freed) naming the phase."""
    # torch's message runs on with allocator advice; its first three sentences say what failed.
    detail = ". ".join(pipeline.one_line(error).split(". ")[:3])
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
    return CudaFaultError(f"the GPU reported an error during {phase}: {pipeline.one_line(error)}",
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


def held_replay_ms(graph: Mode, clock: timing.Clock) -> float:
    """The graph's replay on the device alone (no batch copy, queued behind a few milliseconds of
    GPU work so that no replay waits for the host), per training step; NaN without
    ``torch.cuda._sleep``."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return math.nan
    return timing.held_replay_ms(graph, runtables.HELD_REPLAYS, clock, lambda: sleep(HOLD_DEVICE_CYCLES))


def input_copy_ms(graph: Mode, clock: timing.Clock, notes: list[str]) -> float:
    """The graph's batch copy timed alone, queued behind a few milliseconds of GPU work
    (``torch.cuda._sleep``) so that the copies run back to back; NaN where torch lacks it."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        notes.append("this PyTorch has no torch.cuda._sleep, so the batch copy was not timed apart")
        return math.nan
    return timing.input_copy_ms(graph, runtables.INPUT_COPIES, clock, lambda: sleep(HOLD_DEVICE_CYCLES))


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


def _note_readiness(config: RunConfig, step: TrainingStep, state: pipeline.RunState) -> None:
    """For the user's own step: what would break under capture, one note per finding."""
    if not is_user_spec(config.workload):
        return
    findings = check_training_step(find_function(config.workload), step)
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



class DeviceBackend:
    """The run's sequence (``pipeline.Backend``) on this process's device: the modes prepared on
    real replicas, CUDA events (or the host's clock on a CPU), torch.profiler, the calibration
    and the parity check."""

    def __init__(self, config: RunConfig, device: torch.device, phases: PhaseRecorder,
                 progress: ProgressCounter, trace_dir: Path,
                 sampler: NvmlSamplerProcess | None) -> None:
        self.config, self.device, self.phases, self.progress = config, device, phases, progress
        self.trace_dir, self.sampler = trace_dir, sampler
        self.clock: timing.Clock = timing.HostClock()
        self.batches: list = []

    def wall_clock(self) -> float:
        return time.perf_counter()

    def prepare(self, names: list[str], state: pipeline.RunState) -> dict[str, Prepared]:
        config, device = self.config, self.device
        if device.type != "cuda":
            return self._prepare_on_cpu(names, state)
        self.progress.start_phase("setup", f"{BATCH_POOL_SIZE} batches on {config.device}")
        with self.phases.phase("setup"):  # the first CUDA work of a process also loads its kernels
            self.batches = make_batches(config, BATCH_POOL_SIZE, device)
            self.clock = timing.CudaClock(device)
            torch.cuda.synchronize(device)
        return _prepare_modes(names, self._preparation(state))

    def _preparation(self, state: pipeline.RunState) -> Preparation:
        config = self.config
        return Preparation(config, self.device, self.batches, self.phases, self.progress,
                           state.observed_counters, state.notes,
                           before_capture=lambda step: _note_readiness(config, step, state))

    def _prepare_on_cpu(self, names: list[str], state: pipeline.RunState) -> dict[str, Prepared]:
        """Eager (its readiness noted, its warm-up counted as the article's counter counts it),
        then the other modes that run on a CPU."""
        config, batches = self.config, make_batches(
            self.config, min(BATCH_POOL_SIZE, self.config.total_eager_iters), self.device)
        self.batches = batches
        prep = self._preparation(state)
        eager = REGISTRY["eager"].prepare(prep)
        _note_readiness(config, eager.step, state)
        observed = state.observed_counters
        observed["initial"] = float(eager.step.counter.item())
        self.progress.start_phase("warm-up", f"{config.warmup_iters} eager steps")
        with self.phases.phase("warm-up"):
            for i in range(config.warmup_iters):
                eager.step.eager_step(*batches[i % len(batches)], count=config.count_warmup)
                self.progress.advance(1)
        observed["after_warmup"] = float(eager.step.counter.item())
        return {"eager": eager, **_prepare_modes([n for n in names if n != "eager"], prep)}

    def reset_counters(self, prepared: dict[str, Prepared]) -> None:
        for ready in prepared.values():
            ready.step.counter.zero_()

    def counters_after_timing(self, prepared: dict[str, Prepared]) -> dict[str, float]:
        counters = {"eager_after_timed": float(prepared["eager"].step.counter.item())}
        if "graph" in prepared:
            counters["after_replay"] = float(prepared["graph"].step.counter.item())
        return counters

    def quiet(self, notes: list[str]) -> AbstractContextManager:
        return _nvml_quiet(self.sampler, notes)

    def input_copy_ms(self, graph: Mode, notes: list[str]) -> float:
        return input_copy_ms(graph, self.clock, notes)

    def held_replay_ms(self, graph: Mode) -> float:
        return held_replay_ms(graph, self.clock)

    def profile(self, prepared: dict[str, Prepared],
                state: pipeline.RunState) -> dict[str, ProfiledWindow]:
        return _profile_modes(self.config, self.device, prepared, self.trace_dir, self.phases,
                              self.progress, state.notes)

    def capture_twin(self) -> dict[str, float]:
        return _capture_twin_figures(self.config, self.device, self.batches, self.trace_dir)

    def calibrate(self, headline: dict[str, Any], figures: Figures) -> dict[str, Any]:
        return calibrate_and_predict(self.device, self.batches, self.config.capture_iters,
                                     headline, figures)

    def release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def parity(self) -> list[ParityCheck]:
        return check_modes(self.config, self.device, self.batches, self.config.modes[1:])
