"""Runs generated through the writer's own code, for the round-trip tests (issue 17).

A run here is what ``profiler_core.engine.runner.run_experiment`` would have written on a machine that
measured the drawn numbers: the run's own sequence (``engine.pipeline.run_cuda``, ``run_cpu`` and
``finish``: the timed loops, the assembly of every table, ``predict.calibrated_prediction``, the
parity check's figures), the runner's batch copy and held replay, and the same trace analysis
(``trace.analyse_trace`` on a Chrome trace shaped like torch.profiler's), through the public
seam the real run uses (``pipeline.Backend``). Only the hardware is simulated: :class:`SimBackend`
on a :class:`SimMachine`, a device and a host clock (CUDA events or the CPU's wall clock) that
advance when a mode's step "runs", by the drawn times. What a run measures is drawn by hypothesis (:func:`raw_runs`); :func:`build_run`
turns it into a ``RunResult`` not yet saved.

Outcomes a :class:`Scenario` pins down (the rest is drawn): the graph faster than eager, slower
(it never pays back its capture), exactly as fast; CPU runs (eager, and compile); every mode of
``config.MODE_NAMES``; the profiler off; no batch copy or held replay timed (a PyTorch without
``torch.cuda._sleep``); runs stopped early (before timing, during the timed trials, before
profiling, before parity); tiny and huge times. Nothing here needs a GPU or imports Streamlit.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from hypothesis import strategies as st

from profiler_core.analysis import predict
from profiler_core.analysis.figures import Figures
from profiler_core.analysis.trace import analyse_trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.engine import pipeline, runner, telemetry
from profiler_core.engine.counters import predicted_counters
from profiler_core.engine.modes import REGISTRY, Prepared
from profiler_core.engine.parity import ParityCheck
from profiler_core.engine.profiling import ProfiledWindow
from profiler_core.engine.telemetry import NvmlCapability, PhaseRecorder
from profiler_core.spec import schema
from profiler_core.spec.config import (
    DTYPES,
    PRESETS,
    RunConfig,
    changed_from_preset,
)
from profiler_core.spec.modes import ALWAYS_MEASURED, MODE_NAMES
from profiler_core.spec.progress import ProgressCounter
from profiler_core.storage.results import RunResult
from profiler_core.timing.trials import Mode

SIM_GPU = "Simulated GPU (round-trip test)"
EXTRA_MODES = tuple(m for m in MODE_NAMES if m not in ALWAYS_MEASURED)
GRAPH_MODES = ("graph", "graphed_callables", "compile_ro")  # replayed as CUDA graphs
OUTCOMES = ("faster", "slower", "equal")
STOPS = ("preparation", "timed trials", "profiling", "parity")
# Typical per-step times (ms) of a run: tiny (a microsecond), small, a few ms, huge (a minute).
SCALES = (1e-3, 0.05, 2.0, 6e4)
# Kernel names as torch.profiler writes them: templates, commas, a wrapper, one that a
# spreadsheet would run as a formula (the zip download makes it inert), one not ASCII.
KERNEL_NAMES = (
    "ampere_sgemm_64x32_sliced1x4_tn",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
    "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(Params)",
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>",
    "=cmd|' /C calc'!A0",
    "kernel_é_ü",
)
_DYADIC = 2.0 ** -10  # times on this grid add and subtract exactly (the "equal" outcome)


@dataclass(frozen=True)
class Scenario:
    """What a generated run must be; None: drawn."""

    device: str = "cuda"  # "cuda" or "cpu"
    outcome: str | None = None  # the graph against eager: OUTCOMES
    extra_modes: tuple[str, ...] | None = None
    profile: bool | None = None
    sleep: bool | None = None  # torch.cuda._sleep present: batch copy and held replay timed
    stop: str | None = "never"  # STOPS, "never" (complete), or None (drawn)
    capture_iters: int | None = None
    scale: float | None = None
    nvml: bool | None = None
    # True: every timed block has two iterations or more, so every mode's steady state is
    # timed (a block keeps all but its first); False: the graph's blocks hold one replay each,
    # so its steady state is not measured (NaN); None: drawn.
    timed: bool | None = True


@dataclass
class ModeTimes:
    """A simulated mode: per training step, device time (cycled) and host time to issue it."""

    gpu_ms: list[float]
    host_ms: float
    one_time_ms: float = 0.0
    memory_bytes: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class WindowSpec:
    """One mode's profiled window, drawn: per iteration, its CPU time, launch calls and kernels."""

    cpu_us: float
    launch_us: float
    delay_us: float
    kernel_us: list[float]
    graph_launches: int  # 0: every kernel launched on its own
    wall_median_ms: float
    threads: int = 1  # launching threads (the autograd engine launches the backward on its own)


@dataclass
class RawRun:
    """Everything a run measured, before the writer's code turns it into tables."""

    config: RunConfig
    scenario: Scenario
    times: dict[str, ModeTimes]
    copy_gpu_ms: float  # the graph's batch copy per replay (device)
    copy_host_ms: float
    hold_ms: float  # how long torch.cuda._sleep holds the device
    sleep: bool
    observed: dict[str, float]
    windows: dict[str, WindowSpec]
    calibration: predict.Calibration | None
    parity: tuple[float, float]  # (max abs diff, largest parameter)
    nvml: tuple[NvmlCapability, list[tuple]] | None
    stop: str  # STOPS or "never"
    stop_after_steps: int  # with stop "timed trials": steps run before Ctrl-C
    notes: list[str]


class SimMachine:
    """A device and a host under one clock (``timing.Clock`` and a host ``wall_clock``).

    A step enqueued by the host runs on the device once the device is free and the host has
    issued it; a mark records when the device reaches it. ``device_timestamps`` False: the CPU
    device, whose marks are host times (``timing.HostClock``)."""

    def __init__(self, device_timestamps: bool, hold_ms: float = 5.0,
                 stop_after_steps: int | None = None) -> None:
        self.device_timestamps = device_timestamps
        self.device_ms = 0.0
        self.host_ms = 0.0
        self.hold_ms = hold_ms
        self.steps = 0
        self.stop_after_steps = stop_after_steps

    # timing.Clock
    def marks(self, count: int) -> list[dict]:
        return [{"ms": math.nan} for _ in range(count)]

    def record(self, mark: dict) -> None:
        if self.device_timestamps:
            self.device_ms = max(self.device_ms, self.host_ms)
            mark["ms"] = self.device_ms
        else:
            mark["ms"] = self.host_ms

    def elapsed_ms(self, start: dict, end: dict) -> float:
        return end["ms"] - start["ms"]

    def synchronize(self) -> None:
        # both clocks meet, on an exact grid (a hair later), so that a block of times drawn on
        # that grid adds and subtracts exactly whatever ran before it (the "equal" outcome)
        now = max(self.host_ms, self.device_ms)
        self.host_ms = self.device_ms = math.ceil(now / _DYADIC) * _DYADIC

    def wall(self) -> float:
        """The host's clock in seconds (as ``time.perf_counter``)."""
        return self.host_ms / 1e3

    def hold(self, cycles: int = 0) -> None:
        """``torch.cuda._sleep``: the device busy for a while from now."""
        self.device_ms = max(self.device_ms, self.host_ms) + self.hold_ms

    def work(self, gpu_ms: float, host_ms: float) -> None:
        self.host_ms += host_ms
        if self.device_timestamps:
            self.device_ms = max(self.device_ms, self.host_ms) + gpu_ms
        else:
            self.host_ms += gpu_ms  # the CPU runs its own step

    def step(self) -> None:
        """One training step taken: Ctrl-C once ``stop_after_steps`` are done."""
        if self.stop_after_steps is not None and self.steps >= self.stop_after_steps:
            raise KeyboardInterrupt
        self.steps += 1


def _sim_mode(machine: SimMachine, name: str, steps: int, times: ModeTimes,
              copy: tuple[float, float] | None) -> Mode:
    def run(i: int) -> None:
        machine.step()
        gpu = sum(times.gpu_ms[(i * steps + k) % len(times.gpu_ms)] for k in range(steps))
        machine.work(gpu, times.host_ms * steps)

    load = None if copy is None else (lambda i: machine.work(copy[0], copy[1]))
    return Mode(name, steps, run, load)


# ----------------------------------------------------------------------------- drawing


def _grid(value: float) -> float:
    return max(_DYADIC, round(value / _DYADIC) * _DYADIC)


@st.composite
def configs(draw, scenario: Scenario) -> RunConfig:
    """A valid RunConfig for the scenario (few iterations: the simulation times every one)."""
    base = PRESETS[draw(st.sampled_from(["seed", "lesson1", "lesson2", "lesson3", "transformer",
                                         "conv"]))]
    capture_iters = scenario.capture_iters or draw(st.integers(1, 3))
    dtype = draw(st.sampled_from([d for d in DTYPES if d != "fp16" or capture_iters == 1]))
    if scenario.timed is None:
        replays = draw(st.integers(1, 16))
        trials = draw(st.none() | st.integers(1, replays))
        eager_iters = draw(st.none() | st.integers(max(1, trials or 1), 40))
    elif scenario.timed:
        trials = draw(st.integers(1, 5))
        replays = draw(st.integers(2 * trials, 16))
        eager_iters = draw(st.none() | st.integers(2 * trials, 40))
    else:
        replays = trials = draw(st.integers(1, 5))
        eager_iters = None
    extras = scenario.extra_modes
    if extras is None:
        extras = tuple(m for m in EXTRA_MODES if draw(st.booleans()))
    profile = scenario.profile if scenario.profile is not None else draw(st.booleans())
    nvml = scenario.nvml if scenario.nvml is not None else draw(st.booleans())
    config = base.replace(
        device="cpu" if scenario.device == "cpu" else draw(st.sampled_from(["cuda:0", "cuda:1"])),
        capture_iters=capture_iters, dtype=dtype, replays=replays, trials=trials,
        eager_iters=eager_iters, modes=ALWAYS_MEASURED + extras, profile=profile,
        profile_iters=draw(st.integers(1, 4)), nvml=nvml, parity_steps=draw(st.integers(0, 5)),
        warmup_iters=draw(st.integers(1, 4)), count_warmup=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)))
    if changed_from_preset(config):
        config = config.replace(preset="custom")  # as the run command labels it
    return config


def _samples(draw, low: float, high: float, scale: float, equal: bool) -> list[float]:
    if equal:
        return [_grid(draw(st.floats(low, high)) * scale)]
    return draw(st.lists(st.floats(low, high), min_size=1, max_size=6).map(
        lambda values: [v * scale for v in values]))


@st.composite
def mode_times(draw, config: RunConfig, scale: float, outcome: str) -> dict[str, ModeTimes]:
    """Each mode's simulated step. The graph's outcome against eager holds by construction:
    faster (every step shorter than eager's shortest), slower (longer than eager's longest, by
    a little or a lot), equal (the same constant times on an exact grid)."""
    equal, cuda = outcome == "equal", config.is_cuda
    eager = ModeTimes(_samples(draw, 0.5, 2.0, scale, equal),
                      _grid(draw(st.floats(0.05, 3.0)) * scale) if equal
                      else draw(st.floats(0.05, 3.0)) * scale)
    times = {"eager": eager}
    # Eager's time per step lies between its shortest device time and its longest device time
    # plus its host time (the device may wait for the host once per step).
    eager_low, eager_high = min(eager.gpu_ms), max(eager.gpu_ms) + eager.host_ms
    memory = st.floats(0, 1.4e11)
    if cuda:
        warmup_ms, capture_ms = draw(st.floats(0.01, 5e4)), draw(st.floats(0.01, 5e3))
        if outcome == "faster":
            factor = draw(st.floats(0.05, 0.9))
            graph = ModeTimes([eager_low * factor * draw(st.floats(0.9, 1.0))
                               for _ in range(draw(st.integers(1, 4)))], eager_low * factor * 0.01)
        elif outcome == "slower":
            factor = draw(st.sampled_from([1.0001, 1.006, 1.5, 40.0]))
            graph = ModeTimes([eager_high * factor * draw(st.floats(1.0, 1.1))
                               for _ in range(draw(st.integers(1, 4)))], eager_high * 0.01)
        else:
            graph = ModeTimes(list(eager.gpu_ms), eager.host_ms)
        graph.one_time_ms = warmup_ms + capture_ms
        graph.memory_bytes = draw(memory)
        pool = draw(st.floats(0, 1.4e11))
        graph.figures = {"warmup_ms": warmup_ms, "capture_ms": capture_ms, "pool_bytes": pool,
                         "pool_allocated_bytes": draw(st.floats(0, 1.0)) * pool}
        graph.details = {"graphs_recorded": 1.0}
        times["graph"] = graph
    for name in config.extra_modes:
        if not cuda and REGISTRY[name].cuda_only:
            continue
        factor = draw(st.floats(0.2, 3.0))
        extra = ModeTimes([g * factor for g in eager.gpu_ms], eager.host_ms * draw(
            st.floats(0.01, 1.0)), one_time_ms=draw(st.floats(0.0, 1e6)),
            memory_bytes=draw(memory) if cuda else 0.0)
        if name == "compile_ro":
            extra.details = {"graphs_recorded": draw(st.sampled_from([0.0, 1.0, 3.0, math.nan])),
                             "skip_reasons": draw(st.lists(st.sampled_from([
                                 "skipping cudagraphs due to mutated inputs (1 instances)",
                                 "skipping cudagraphs due to cpu device (x)"]), max_size=2,
                                 unique=True))}
        times[name] = extra
    if cuda:
        for mode in times.values():  # what _prepare_modes adds on a CUDA device
            mode.figures["peak_bytes"] = float(draw(st.integers(0, 2**37)))
            mode.figures["device_bytes"] = float(draw(st.integers(0, 2**37)))
    return times


@st.composite
def windows(draw, times: dict[str, ModeTimes]) -> dict[str, WindowSpec]:
    """A profiled window per timed mode; its kernels need not match the timed steps (the
    profiler stretches them, and a window may record no kernel at all)."""
    out = {}
    for name, mode in times.items():
        kernels = draw(st.lists(st.floats(0.01, 2.0), min_size=0 if name != "eager" else 1,
                                max_size=5))
        step_us = max(mode.gpu_ms) * 1e3
        out[name] = WindowSpec(
            cpu_us=draw(st.floats(0.1, 3.0)) * mode.host_ms * 1e3 + 1.0,
            launch_us=draw(st.floats(0.5, 20.0)), delay_us=draw(st.floats(-0.9, 50.0)),
            kernel_us=[k * step_us / max(1, len(kernels)) for k in kernels],
            graph_launches=(draw(st.integers(1, 2)) if name in GRAPH_MODES else 0),
            wall_median_ms=max(mode.gpu_ms) * draw(st.floats(0.9, 2.0)) * draw(
                st.sampled_from([1, 3])),
            threads=1 if name in GRAPH_MODES else draw(st.integers(1, 2)))
    return out


@st.composite
def raw_runs(draw, scenario: Scenario = Scenario()) -> RawRun:
    """What one run measured, for the scenario."""
    config = draw(configs(scenario))
    cuda = config.is_cuda
    scale = scenario.scale or draw(st.sampled_from(SCALES))
    outcome = scenario.outcome or draw(st.sampled_from(OUTCOMES))
    times = draw(mode_times(config, scale, outcome))
    equal = outcome == "equal"
    sleep = scenario.sleep if scenario.sleep is not None else draw(st.booleans())
    copy_gpu = 0.0 if equal else draw(st.floats(0.0, 0.01)) * scale
    predicted = predicted_counters(config).set_index("phase")["predicted"].astype(float)
    phases = (["initial", "after_warmup", "after_capture", "after_replay", "eager_after_timed"]
              if cuda else ["initial", "after_warmup", "eager_after_timed"])
    observed = {p: float(predicted[p]) + (draw(st.sampled_from([0.0, 0.0, 1.0]))) for p in phases}
    stop = scenario.stop if scenario.stop is not None else draw(st.sampled_from(
        ("never",) * 3 + STOPS))
    notes = draw(st.lists(st.sampled_from([
        "graphed_callables: torch warned while preparing it: AccumulateGrad stream mismatch",
        "a note with *markdown*, <html> & a \"quote\", ünïcode, a comma, and 50% of $x$"]),
        max_size=2, unique=True))
    nvml = None
    if cuda and config.nvml:
        available = draw(st.booleans())
        unsupported = tuple(draw(st.lists(st.sampled_from(schema.NVML_METRICS), max_size=2,
                                          unique=True))) if available else ()
        rows = []
        if available:
            for k in range(draw(st.integers(0, 12))):
                t_s = k * 0.02
                for metric in schema.NVML_METRICS:
                    value = math.nan if metric in unsupported else draw(st.floats(0, 2000))
                    rows.append((t_s, metric, value, "poll"))
            rows += [(k * 0.17, "gpu_util_pct", float(draw(st.integers(0, 100))), "driver")
                     for k in range(draw(st.integers(0, 3)))]
        nvml = (NvmlCapability(available, "" if available else "NVML Shared Library Not Found",
                               unsupported, available), rows)
    calibration = None
    if cuda and config.profile:
        replay = tuple(draw(st.floats(1.0, 40.0)) for _ in range(3))
        calibration = predict.Calibration(
            costs=predict.GraphCosts(draw(st.floats(-1.0, 30.0)), draw(st.floats(-0.01, 0.2)),
                                     "simulated calibration"),
            node_counts=(1, 32, 256), replay_us=replay, busy_us=tuple(r / 2 for r in replay),
            copy_us=draw(st.sampled_from([math.nan, 26.3])), wall_ms=draw(st.floats(1, 500)))
    return RawRun(
        config=config, scenario=scenario, times=times, copy_gpu_ms=copy_gpu,
        copy_host_ms=0.0 if equal else copy_gpu * 0.1, hold_ms=max(5.0, 3 * scale), sleep=sleep,
        observed=observed,
        windows=draw(windows(times)) if config.profile and cuda else {},
        calibration=calibration,
        parity=(draw(st.sampled_from([0.0, 1e-7, 0.25])), draw(st.sampled_from([0.0, 1.0, 3e3]))),
        nvml=nvml, stop=stop,
        stop_after_steps=draw(st.integers(0, 6)), notes=notes)


# ----------------------------------------------------------------------------- building


class _Sampler:
    """``NvmlSamplerProcess`` as ``pipeline.finish`` reads it, holding drawn samples."""

    def __init__(self, capability: NvmlCapability, rows: list[tuple]) -> None:
        self.capability = capability
        self._rows = rows

    def stop(self) -> None:
        pass

    def frame(self):
        return telemetry.nvml_frame(self._rows)


def _chrome_trace(name: str, spec: WindowSpec, iterations: int) -> dict:
    """A Chrome trace as torch.profiler exports a window: ``ProfilerStep#N`` marks around each
    iteration's step, launch calls linked to their GPU work by correlation ids (one
    ``cudaGraphLaunch`` for a graph's kernels)."""
    events: list[dict] = []
    correlation = 0
    t = 1_000_000.0
    gpu_free = t
    names = [KERNEL_NAMES[(len(name) + k) % len(KERNEL_NAMES)] for k in range(len(spec.kernel_us))]

    def kernel(start: float, duration: float, k: int, corr: int) -> float:
        events.append({"name": names[k], "cat": "kernel", "ph": "X", "ts": start,
                       "dur": duration, "pid": 0, "tid": 7, "args": {"correlation": corr}})
        return start + duration

    def launch(api: str, call: float, duration: float, tid: int, corr: int) -> float:
        """A launch call; returns when its GPU work may start (possibly before it returns)."""
        events.append({"name": api, "cat": "cuda_runtime", "ph": "X", "ts": call,
                       "dur": duration, "pid": 1, "tid": tid, "args": {"correlation": corr}})
        return max(gpu_free, call + duration + max(spec.delay_us, -0.9 * duration))

    for i in range(iterations):
        events.append({"name": f"ProfilerStep#{i}", "cat": "user_annotation", "ph": "X",
                       "ts": t, "dur": spec.cpu_us, "pid": 1, "tid": 1})
        # calls per thread, spread over the window; one thread's calls never overlap, but a
        # second thread's run beside the first's (their launch time can exceed the window)
        calls = spec.graph_launches or math.ceil(len(spec.kernel_us) / spec.threads)
        spacing = spec.cpu_us / (calls + 1)
        duration = min(spec.launch_us, spacing * (0.9 if spec.threads > 1 else 0.5))
        if spec.graph_launches:
            per_launch = max(1, math.ceil(len(spec.kernel_us) / spec.graph_launches))
            for g in range(spec.graph_launches):
                correlation += 1
                start = launch("cudaGraphLaunch", t + (g + 1) * spacing, duration, 1, correlation)
                for k in range(g * per_launch, min(len(spec.kernel_us), (g + 1) * per_launch)):
                    start = kernel(start, spec.kernel_us[k], k, correlation)
                gpu_free = max(gpu_free, start)
        else:
            for k, length in enumerate(spec.kernel_us):
                correlation += 1
                start = launch("cudaLaunchKernel", t + (k // spec.threads + 1) * spacing,
                               duration, 1 + k % spec.threads, correlation)
                gpu_free = kernel(start, length, k, correlation)
        t = max(t + spec.cpu_us, gpu_free) + 3.0
    return {"traceEvents": events}


def _environment(config: RunConfig) -> dict[str, Any]:
    environment = runner.describe_environment(torch.device("cpu"), None)
    environment["started_at"] = "2026-12-01T15:10:39+00:00"
    if config.is_cuda:
        environment.update(device_type="cuda", driver_version="580.159.04", gpu_name=SIM_GPU,
                           gpu_index=config.device_index, gpu_memory_bytes=150109880320,
                           compute_capability="9.0", cuda_version="13.0")
    return environment


def build_run(raw: RawRun, trace_dir: Path) -> RunResult:
    """The RunResult ``run_experiment`` returns for ``raw`` (not saved; traces in a scratch
    folder until saved, as a real run's are): the run's own sequence (``pipeline.run_cuda``,
    ``run_cpu``, ``finish``) on a :class:`SimBackend`."""
    config = raw.config
    machine = SimMachine(config.is_cuda, raw.hold_ms,
                         raw.stop_after_steps if raw.stop == "timed trials" else None)
    origin_s = time.time()
    phases = PhaseRecorder(origin_s, clock=lambda: origin_s + machine.wall())
    progress = ProgressCounter(pipeline.plan_units(config))
    state = pipeline.RunState()
    state.notes.extend(raw.notes)
    environment = _environment(config)
    sampler = _Sampler(*raw.nvml) if raw.nvml is not None else None
    backend = SimBackend(raw, machine, phases, progress, trace_dir)
    failure: BaseException | None = None
    try:
        if config.is_cuda:
            pipeline.run_cuda(config, backend, phases, progress, state)
        else:
            state.notes.append("device cpu: only the eager half ran; CUDA graphs need a CUDA "
                               "device, so there is no graph timing, capture, profiler split "
                               "or NVML data")
            pipeline.run_cpu(config, backend, phases, progress, state)
    except KeyboardInterrupt as error:
        failure = error
    return pipeline.finish(config, environment, state, phases, sampler, failure, progress.phase)


class SimBackend:
    """``pipeline.Backend`` on the simulated machine: the modes' steps advance its clocks by the
    drawn times, the profiled windows are Chrome traces shaped like torch.profiler's (analysed by
    the tool's own trace analysis), the calibration and parity are the drawn ones; a drawn stop
    raises Ctrl-C where it falls."""

    def __init__(self, raw: RawRun, machine: SimMachine, phases: PhaseRecorder,
                 progress: ProgressCounter, trace_dir: Path) -> None:
        self.raw, self.machine, self.phases, self.progress = raw, machine, phases, progress
        self.trace_dir = trace_dir
        self.clock = machine

    def wall_clock(self) -> float:
        return self.machine.wall()

    def prepare(self, names: list[str], state: pipeline.RunState) -> dict[str, Prepared]:
        """The preparation's phases and counters (``modes.capture_graph``)."""
        raw, machine = self.raw, self.machine
        for key in ("initial", "after_warmup", "after_capture"):
            if key in raw.observed:
                state.observed_counters[key] = raw.observed[key]
        for name in names:
            self.progress.start_phase(f"{name} preparation")
            with self.phases.phase(f"{name} preparation" if name != "graph" else "capture"):
                machine.work(0.0, raw.times[name].one_time_ms)
            for reason in raw.times[name].details.get("skip_reasons", []):
                state.notes.append(f"{name}: {reason}")
        if raw.stop == "preparation":
            raise KeyboardInterrupt
        return _prepared(raw, machine, names)

    def reset_counters(self, prepared: dict[str, Prepared]) -> None:
        pass  # the drawn counters are those after the timed trials

    def counters_after_timing(self, prepared: dict[str, Prepared]) -> dict[str, float]:
        keys = ("after_replay", "eager_after_timed") if "graph" in prepared else ("eager_after_timed",)
        return {key: self.raw.observed[key] for key in keys}

    def quiet(self, notes: list[str]) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def _sleep(self) -> Any:
        return mock.patch.object(torch.cuda, "_sleep", self.machine.hold if self.raw.sleep else None,
                                 create=True)

    def input_copy_ms(self, graph: Mode, notes: list[str]) -> float:
        with self._sleep():
            return runner.input_copy_ms(graph, self.machine, notes)

    def held_replay_ms(self, graph: Mode) -> float:
        with self._sleep():
            return runner.held_replay_ms(graph, self.machine)

    def profile(self, prepared: dict[str, Prepared],
                state: pipeline.RunState) -> dict[str, ProfiledWindow]:
        raw = self.raw
        self.progress.start_phase("profiling eager")
        if raw.stop == "profiling":
            raise KeyboardInterrupt
        windows = {}
        for name in prepared:
            path = self.trace_dir / schema.trace_file(name)
            path.write_text(json.dumps(_chrome_trace(name, raw.windows[name],
                                                     raw.config.profile_iters)))
            windows[name] = ProfiledWindow(name, path, analyse_trace(load_trace(path), mode=name),
                                           raw.windows[name].wall_median_ms)
        return windows

    def capture_twin(self) -> dict[str, float]:
        return {}

    def calibrate(self, headline: dict[str, Any], figures: Figures) -> dict[str, Any]:
        return predict.calibrated_prediction(self.raw.calibration, self.raw.config.capture_iters,
                                             headline, figures)

    def release(self) -> None:
        pass

    def parity(self) -> list[ParityCheck]:
        config = self.raw.config
        if self.raw.stop == "parity":
            raise KeyboardInterrupt
        max_abs, scale = self.raw.parity
        return [ParityCheck("graph", config.parity_steps * config.capture_iters, max_abs,
                            max_abs / scale if scale > 0 else math.nan, 0.0, "0.weight", scale)]


def _prepared(raw: RawRun, machine: SimMachine, names: list[str]) -> dict[str, Prepared]:
    config = raw.config
    prepared = {}
    for name in names:
        times = raw.times[name]
        steps = config.capture_iters if name == "graph" else 1
        copy = (raw.copy_gpu_ms, raw.copy_host_ms) if name == "graph" else None
        prepared[name] = Prepared(_sim_mode(machine, name, steps, times, copy), step=None,
                                  one_time_ms=times.one_time_ms,
                                  memory_bytes=int(times.memory_bytes),
                                  details=dict(times.details), figures=dict(times.figures))
    return prepared
