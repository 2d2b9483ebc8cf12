"""The run's phases as one declared sequence: what a CUDA run and a CPU run do, in which order, and
how their tables and headline are assembled from what was measured (:func:`run_cuda`,
:func:`run_cpu`, :func:`finish`).

Scope: the order and the assembly only. Everything that touches a device goes through an injected
:class:`Backend`: preparing the modes on their replicas, the clocks, the batch copy and held
replay, the profiler, the capture twin and calibration, the parity check. ``engine.runner``
gives the real one (``runner.DeviceBackend``, CUDA or the CPU); the round-trip tests drive the
same sequence through a simulated one. Nothing that slows a launching thread runs while the
trials are timed: the profiler (whose CUPTI stays attached once started) comes after them, and
the backend keeps NVML quiet during them (``Backend.quiet``).
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from profiler_core.analysis import attribution, metrics
from profiler_core.analysis.figures import Figures
from profiler_core.analysis.trace import decompose_speedup
from profiler_core.engine.counters import counters_table
from profiler_core.engine.modes import REGISTRY, Prepared
from profiler_core.engine.numerics import read_flags
from profiler_core.engine.parity import ParityCheck
from profiler_core.engine.profiling import ProfiledWindow
from profiler_core.engine.telemetry import (
    NVML_UTILISATION_CAVEAT,
    NvmlSamplerProcess,
    PhaseRecorder,
)
from profiler_core.spec import hostinfo, numerics, schema
from profiler_core.spec.config import RunConfig
from profiler_core.spec.headline import written_facts
from profiler_core.spec.modes import CUDA_ONLY_MODES
from profiler_core.spec.progress import ProgressCounter
from profiler_core.storage import runtables
from profiler_core.storage.results import SCRATCH_PREFIX, RunResult, coerce_table, empty_table
from profiler_core.timing import stats
from profiler_core.timing import trials as timing
from profiler_core.timing.trials import Mode

# Untimed iterations per mode before the timed trials (module load, cuBLAS handles, caches).
TIMING_WARMUP_ITERS = 5
# Shortest block, in replays, for the article's loop timing (a block of 1 would measure nothing).
MIN_BLOCK_REPLAYS = 10


class Backend(Protocol):
    """What the sequence asks of the machine it runs on (``runner.DeviceBackend``, or a
    simulation). ``clock`` times the trials (CUDA events, or the host's clock on a CPU)."""

    clock: timing.Clock

    def wall_clock(self) -> float:
        """The host's clock, seconds."""

    def prepare(self, names: list[str], state: RunState) -> dict[str, Prepared]:
        """Every mode of ``names`` prepared on its replica, with its untimed iterations; the
        counters of preparation recorded in ``state.observed_counters`` (and a CPU run's
        warm-up), the user's step's readiness in its notes."""

    def reset_counters(self, prepared: dict[str, Prepared]) -> None:
        """Every replica's counter to zero, before the timed trials."""

    def counters_after_timing(self, prepared: dict[str, Prepared]) -> dict[str, float]:
        """The counters the timed trials leave (``after_replay``, ``eager_after_timed``)."""

    def quiet(self, notes: list[str]) -> AbstractContextManager:
        """Nothing else the run does (NVML) calls into the device while the block runs."""

    def input_copy_ms(self, graph: Mode, notes: list[str]) -> float:
        """The graph's batch copy timed alone, per iteration (NaN where it cannot be)."""

    def held_replay_ms(self, graph: Mode) -> float:
        """The graph's replay on the device alone, per iteration (NaN where it cannot be)."""

    def profile(self, prepared: dict[str, Prepared], state: RunState) -> dict[str, ProfiledWindow]:
        """A profiled window per mode (traces written where ``state.traces`` will point)."""

    def capture_twin(self) -> dict[str, float]:
        """The graphed replica's step profiled eagerly, for the prediction (may be empty)."""

    def calibrate(self, headline: dict[str, Any], figures: Figures) -> dict[str, Any]:
        """The prediction before capture, with this device's constants."""

    def release(self) -> None:
        """The timed replicas are no longer needed: free what they held."""

    def parity(self) -> list[ParityCheck]:
        """Every mode beside eager against two eager replicas."""


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
    return steps + _parity_units(config)


def _parity_units(config: RunConfig) -> int:
    """Training steps of the parity check: per mode beside eager, its replica and two eager ones."""
    return 3 * (len(config.modes) - 1) * config.parity_steps * config.capture_iters


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


def _timed_results(config: RunConfig, state: RunState, prepared: dict[str, Prepared],
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


def _profiled_results(state: RunState, prepared: dict[str, Prepared],
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
class RunState:
    """What a run has measured so far; kept (marked incomplete) when a run stops early."""

    headline: dict = field(default_factory=dict)
    figures: dict = field(default_factory=dict)  # mode -> metric -> value, until metrics.csv is built
    tables: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    traces: dict = field(default_factory=lambda: {"eager": None, "graph": None})  # mode -> path
    observed_counters: dict = field(default_factory=dict)
    latency_rows: list = field(default_factory=list)  # timed iterations, as they are measured
    host_issue: list = field(default_factory=list)  # (mode, trial, host ms per step) per block
    numerics: dict = field(default_factory=dict)  # the numerics flags as the step saw them


def finish(config: RunConfig, environment: dict, state: RunState, phases: PhaseRecorder,
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
        state.notes.append(f"incomplete: the run stopped during {phase}: {one_line(failure)}")
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
    environment[numerics.ENVIRONMENT_KEY] = state.numerics or read_flags()
    environment["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    environment["load_avg_end"] = hostinfo.load_average()
    return _detach_traces(RunResult(
        config=config, environment=environment, headline=written_facts(state.headline),
        tables=state.tables,
        notes=state.notes, complete=failure is None, trace_paths=state.traces))


def one_line(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt) and not str(error):  # a time limit says what it is
        return "interrupted (Ctrl-C, or SIGTERM: the dashboard's Cancel or its time limit)"
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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


def _cpu_results(config: RunConfig, state: RunState, prepared: dict[str, Prepared]) -> None:
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


def run_cuda(config: RunConfig, backend: Backend, phases: PhaseRecorder, progress: ProgressCounter,
             state: RunState) -> None:
    """A CUDA run: every mode prepared -> counters reset -> interleaved steady-state trials (the
    headline) -> the batch copy and held replay -> interleaved cold-start trials -> the article's
    loop (all with the device quiet) -> statistics -> profiled windows -> trace analysis -> the
    capture twin and calibration -> the replicas released -> parity."""
    headline, tables, observed = state.headline, state.tables, state.observed_counters
    prepared = backend.prepare(list(config.modes), state)
    state.numerics = read_flags()  # as the step saw them: its module imported, every mode built
    state.figures = {name: dict(ready.figures) for name, ready in prepared.items()}
    modes = [ready.mode for ready in prepared.values()]
    graph = prepared["graph"].mode
    clock, wall = backend.clock, backend.wall_clock

    # Steady-state trials: counters reset first, so after them they hold exactly that work.
    backend.reset_counters(prepared)
    iterations = {name: REGISTRY[name].timed_iterations(config) for name in prepared}
    trials = config.trial_count
    with backend.quiet(state.notes):
        progress.start_phase("timed trials", f"{trials} interleaved steady-state trials per mode")
        _steady_trials(modes, iterations, trials, clock, phases, progress, state.latency_rows,
                       state.host_issue, wall)
        observed.update(backend.counters_after_timing(prepared))
        with phases.phase("graph input copy"):
            copy_ms = backend.input_copy_ms(graph, state.notes)
            held_ms = backend.held_replay_ms(graph)
        progress.start_phase("cold-start trials", "a synchronise before every iteration")
        _cold_trials(modes, iterations, trials, clock, phases, progress, state.latency_rows, wall)
        tables["latency"] = runtables.latency_table(state.latency_rows)
        progress.start_phase("article loop", "no-sync loop timing, then synchronised")
        loops = _article_loops(modes, _article_block_iters(config, modes), trials, clock, phases,
                               progress, wall)
    with phases.phase("timing statistics"):
        stats_table, modes_table, figures = _timed_results(config, state, prepared, loops,
                                                           copy_ms, held_ms)
    windows: dict[str, ProfiledWindow] = {}
    if config.profile:  # after every timed trial: the profiler slows whatever runs after it
        windows = backend.profile(prepared, state)
        state.traces.update({mode: window.trace_path for mode, window in windows.items()})
    with phases.phase("trace analysis"):
        _profiled_results(state, prepared, windows, stats_table, modes_table, figures)
    if config.profile:
        with phases.phase("capture twin profiled"):
            headline.update(backend.capture_twin())
        with phases.phase("calibration"):
            headline.update(backend.calibrate(headline, Figures.from_table(state.tables["metrics"])))
    del graph, modes, prepared
    backend.release()
    if config.parity_steps:
        progress.start_phase("parity", f"{config.parity_steps} iterations per mode against two "
                                       "eager replicas")
        with phases.phase("parity"):
            _apply_parity(state, backend.parity(), stats_table, modes_table, figures)
        progress.advance(_parity_units(config))


def run_cpu(config: RunConfig, backend: Backend, phases: PhaseRecorder, progress: ProgressCounter,
            state: RunState) -> None:
    """The modes that run without CUDA, on the CPU: steady-state wall time between consecutive
    steps (on a CPU a step is finished when its call returns, so there is no cold start or no-sync
    pitfall to show)."""
    skipped = [name for name in config.extra_modes if REGISTRY[name].cuda_only]
    if skipped:
        state.notes.append(f"device cpu: {', '.join(skipped)} need a CUDA device and were skipped")
    prepared = backend.prepare(["eager", *[m for m in config.extra_modes if m not in skipped]],
                               state)
    state.numerics = read_flags()
    backend.reset_counters(prepared)
    modes = [ready.mode for ready in prepared.values()]
    progress.start_phase("timed trials", f"{config.total_eager_iters} steps per mode")
    _steady_trials(modes, {mode.name: config.total_eager_iters for mode in modes},
                   config.trial_count, backend.clock, phases, progress, state.latency_rows,
                   state.host_issue, backend.wall_clock)
    state.observed_counters.update(backend.counters_after_timing(prepared))
    _cpu_results(config, state, prepared)


def _apply_parity(state: RunState, checks: list[ParityCheck], stats_table: pd.DataFrame,
                  modes_table: pd.DataFrame, figures: dict[str, dict[str, float]]) -> None:
    """The parity checks into the run: the graph's in the headline, every other mode's in
    metrics.csv, a verdict per mode in the notes."""
    for check in checks:
        state.notes.append(f"parity: {check.verdict()}")
        if check.mode == "graph":
            state.headline.update(check.headline())
        else:
            figures.setdefault(check.mode, {}).update(check.figures())
    state.tables["metrics"] = coerce_table("metrics", metrics.build(modes_table, stats_table, figures))
