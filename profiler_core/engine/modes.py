"""The mode registry: how each mode (declared in ``spec.modes``) is prepared on its own replica
and what that preparation cost once (wall time, memory), plus the figures only that mode has.

Every replica is built from the same seed, so every mode starts from identical weights and sees
identical batches; all are timed the same way (``timing``, driven by ``runner``). ``graph`` is the
article's whole-step capture (``capture.GraphedStep``): one iteration replays ``capture_iters``
steps; ``graphed_callables`` graphs the model's forward and backward; ``compile`` and
``compile_ro`` run ``torch.compile`` (the latter's CUDA graph trees report the graphs recorded
and every "skipping cudagraphs" reason).
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch

from profiler_core.engine.batches import Batch
from profiler_core.engine.capture import CaptureCosts, GraphedStep
from profiler_core.engine.model_calls import graphable_call
from profiler_core.engine.telemetry import PhaseRecorder
from profiler_core.engine.workloads import TrainingStep
from profiler_core.spec.config import RunConfig
from profiler_core.spec.modes import SPECS, ModeSpec, per_mode
from profiler_core.spec.progress import ProgressCounter
from profiler_core.timing.trials import Mode

# Iterations run once before timing: compilation, autotuning and graph recording happen here.
PREPARE_ITERS = 3
Batches = list[Batch]  # each the step's arguments, ``make_batches``


@dataclass
class Prepared:
    """A mode ready to time."""

    mode: Mode
    step: TrainingStep  # the replica it trains (its counter holds the article's lesson)
    one_time_ms: float  # preparation (compile or capture, with its warm-up), synchronised wall time
    memory_bytes: int  # memory the preparation added (``peak_added``); 0 for eager
    details: dict[str, Any] = field(default_factory=dict)  # graphs_recorded, skip_reasons
    # Figures only this mode has, for metrics.csv (the graph's capture_ms, pool_bytes...).
    figures: dict[str, float] = field(default_factory=dict)
    # The mode prepared afresh (the graph: captured again after the profiler's first use).
    prepare_again: Callable[[], Mode] | None = None

    @property
    def graphs_recorded(self) -> float:
        return float(self.details.get("graphs_recorded", math.nan))


@dataclass
class Preparation:
    """What every mode's preparation is given: the run's config, device and batches, where it
    records its phases and progress, the article's counters observed so far, the run's notes,
    and the check to run on a step before capturing it (the user's step's readiness)."""

    config: RunConfig
    device: torch.device
    batches: Batches
    phases: PhaseRecorder
    progress: ProgressCounter
    observed: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    before_capture: Callable[[TrainingStep], None] = lambda step: None

    @contextmanager
    def phase(self, name: str, message: str) -> Iterator[None]:
        self.progress.start_phase(name, message)
        with self.phases.phase(name):
            yield


@dataclass(frozen=True)
class ModeImplementation:
    """One entry of the registry: how the mode named ``name`` in ``spec.modes`` runs."""

    name: str
    prepare: Callable[[Preparation], Prepared]
    # Timed iterations per run: as many training steps as every other mode, in iterations.
    timed_iterations: Callable[[RunConfig], int] = lambda config: config.total_eager_iters

    @property
    def spec(self) -> ModeSpec:
        """Its declaration: label, colour, whether it needs a CUDA device..."""
        return SPECS[self.name]

    @property
    def label(self) -> str:
        return self.spec.label

    @property
    def cuda_only(self) -> bool:
        return self.spec.cuda_only


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
    raising this process's peak allocation)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    allocated, reserved = baseline
    return max(0, torch.cuda.max_memory_allocated(device) - allocated,
               torch.cuda.memory_reserved(device) - reserved)


def _step_mode(name: str, step: TrainingStep, batches: Batches) -> Mode:
    return Mode(name, 1, lambda i: step.eager_step(*batches[i % len(batches)]))


COMPILE_LOGGERS = ("torch._inductor", "torch._dynamo")
# what torch.compile says when it gives fewer graphs than asked for
FEWER_GRAPHS_MESSAGES = ("skipping cudagraphs", "hit config.", "distinct sizes")


def cut_reason(text: str) -> str:
    """A quoted reason as a run keeps it: Inductor's many-sizes warning without the count it
    warns at (its warning limit's, not the run's: the graphs are counted)."""
    return text.split(" We have observed")[0]


class SkipReasons(logging.Handler):
    """Collects what torch.compile says when it gives fewer CUDA graphs than asked for:
    Inductor's "skipping cudagraphs due to ...", Dynamo's "hit config.recompile_limit" (the
    function runs eagerly from then on; its name kept) and Inductor's warning that it records a
    graph for each of many distinct sizes. They propagate to ``torch._inductor`` and
    ``torch._dynamo`` whatever artifact logger emits them in a given torch version."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not any(marker in message for marker in FEWER_GRAPHS_MESSAGES):
            return
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        reason = cut_reason("; ".join(lines[:2] if "hit config." in message else lines[:1]))[:300]
        if reason not in self.reasons:
            self.reasons.append(reason)

    @contextmanager
    def watching(self) -> Iterator[SkipReasons]:
        """The handler on the compile loggers for the block's duration."""
        loggers = [logging.getLogger(name) for name in COMPILE_LOGGERS]
        for log in loggers:
            log.addHandler(self)
        try:
            yield self
        finally:
            for log in loggers:
                log.removeHandler(self)


def _graph_tree_manager(device: torch.device) -> Any:
    """Inductor's graph-tree manager of the device; None where it has none yet, AttributeError
    where this torch does not say."""
    try:
        from torch._inductor import cudagraph_trees

        index = device.index if device.index is not None else torch.cuda.current_device()
        return cudagraph_trees.get_manager(index, create_if_none_exists=False)
    except (ImportError, TypeError, RuntimeError, AssertionError) as error:
        raise AttributeError(str(error)) from error


def graph_functions(device: torch.device) -> frozenset[Any] | None:
    """The functions Inductor's graph trees know for the device so far (the ids of compiled
    forwards and backwards, one per distinct size with dynamic shapes); None where this torch
    does not say. Taken before and after a compilation, they tell its functions apart."""
    try:
        manager = _graph_tree_manager(device)
        return frozenset() if manager is None else frozenset(manager.ids_to_funcs)
    except AttributeError:
        return None


def cuda_graphs_recorded(device: torch.device, functions: frozenset[Any] | None = None) -> float:
    """CUDA graphs in Inductor's graph trees for the device (those whose tree starts at one of
    ``functions``, where given); NaN where this torch does not say."""
    try:
        manager = _graph_tree_manager(device)
        if manager is None:
            return 0.0

        def count(nodes) -> int:
            return sum(1 + sum(count(children) for children in node.children.values())
                       for node in nodes)

        return float(sum(count(nodes) for function, nodes in manager.roots.items()
                         if functions is None or function in functions))
    except AttributeError:
        return math.nan


def prepare_compiled(config: RunConfig, device: torch.device, batches: Batches,
                     reduce_overhead: bool) -> Prepared:
    """``torch.compile`` on the model (forward and backward; loss and optimizer stay eager), or
    on the user's whole step function."""
    name = "compile_ro" if reduce_overhead else "compile"
    step = TrainingStep(config, device, graphed=False)
    step.compile("reduce-overhead" if reduce_overhead else None)
    with SkipReasons().watching() as watcher:
        baseline, started = preparation_baseline(device), time.perf_counter()
        for i in range(PREPARE_ITERS):
            step.eager_step(*batches[i % len(batches)], count=False)
        _synchronize(device)
        one_time_ms = (time.perf_counter() - started) * 1e3
    details: dict[str, Any] = {}
    if reduce_overhead:
        details = {"graphs_recorded": cuda_graphs_recorded(device) if device.type == "cuda" else 0.0,
                   "skip_reasons": watcher.reasons}
    return Prepared(_step_mode(name, step, batches), step, one_time_ms,
                    peak_added(device, baseline), details)


def prepare_graphed_callables(config: RunConfig, device: torch.device,
                              batches: Batches) -> Prepared:
    """``torch.cuda.make_graphed_callables`` on the model, under the step's autocast (whose
    weight cache is off: a cached cast would outlive the capture). With a whole step, the model
    it returned is graphed in place, with the arguments and autocast its first call saw
    (``model_calls.graphable_call``), so the user's step calls the graphed forward."""
    step = TrainingStep(config, device, graphed=False)
    if step.whole_step is not None:
        call = graphable_call(step, batches[0])
        sample, autocast = call.arguments, call.autocast()
    else:
        sample, autocast = (batches[0][0].clone(),), step.autocast()
    baseline, started = preparation_baseline(device), time.perf_counter()
    with autocast:
        # given a Module, make_graphed_callables graphs its forward in place and returns it
        step.model = cast(torch.nn.Module, torch.cuda.make_graphed_callables(
            step.require_model("graphed_callables"), sample, num_warmup_iters=PREPARE_ITERS))
    for i in range(PREPARE_ITERS):
        step.eager_step(*batches[i % len(batches)], count=False)
    _synchronize(device)
    one_time_ms = (time.perf_counter() - started) * 1e3
    return Prepared(_step_mode("graphed_callables", step, batches), step, one_time_ms,
                    peak_added(device, baseline))


def prepare_eager(prep: Preparation) -> Prepared:
    """The baseline replica. Its iteration ``i`` uses the batch replay ``i // capture_iters`` of
    the graph uses, so eager and the graph see the same data."""
    config, batches = prep.config, prep.batches
    with prep.phase("setup", f"the eager replica on {config.device}"):
        step = TrainingStep(config, prep.device, graphed=False)

    def run(i: int) -> None:
        step.eager_step(*batches[(i // config.capture_iters) % len(batches)])
    return Prepared(Mode("eager", 1, run), step, one_time_ms=0.0, memory_bytes=0)


def new_graphed_step(config: RunConfig, device: torch.device, batches: Batches) -> GraphedStep:
    """A graphed replica (its optimizer capturable), not yet captured."""
    return GraphedStep(TrainingStep(config, device, graphed=True), batches[0])


def capture_graph(graphed: GraphedStep, config: RunConfig, batches: Batches,
                  prep: Preparation | None = None) -> CaptureCosts:
    """Warm ``graphed`` up on a side stream and capture it, as in the article; with ``prep``,
    the readiness check runs first and phases, progress and the counters are recorded."""
    warm_up = [batches[i % len(batches)] for i in range(config.warmup_iters)]
    if prep is None:
        return graphed.capture(config.capture_iters, graphed.warm_up(warm_up, count=config.count_warmup))
    prep.before_capture(graphed.step)
    counter = graphed.step.counter
    prep.observed["initial"] = float(counter.item())
    with prep.phase("warm-up", f"{config.warmup_iters} side-stream iterations"):
        warmup_ms = graphed.warm_up(warm_up, count=config.count_warmup)
    prep.progress.advance(config.warmup_iters)
    prep.observed["after_warmup"] = float(counter.item())
    with prep.phase("capture", f"{config.capture_iters} step(s) into one graph"):
        costs = graphed.capture(config.capture_iters, warmup_ms)
    prep.progress.advance(config.capture_iters)
    prep.observed["after_capture"] = float(counter.item())
    return costs


def _replay_mode(graphed: GraphedStep, batches: Batches, steps_per_graph: int) -> Mode:
    return Mode("graph", steps_per_graph, lambda i: graphed.replay(),
                load=lambda i: graphed.load(*batches[i % len(batches)]))


def prepare_graph(prep: Preparation) -> Prepared:
    """The article's whole-step graph: one iteration is a replay of ``capture_iters`` steps, its
    batch copied into the static inputs first."""
    config, device, batches = prep.config, prep.device, prep.batches
    graphed = new_graphed_step(config, device, batches)
    baseline = preparation_baseline(device)
    costs = capture_graph(graphed, config, batches, prep)

    def prepare_again() -> Mode:
        again = new_graphed_step(config, device, batches)
        capture_graph(again, config, batches)
        return _replay_mode(again, batches, config.capture_iters)
    return Prepared(
        _replay_mode(graphed, batches, config.capture_iters), graphed.step,
        one_time_ms=costs.warmup_ms + costs.capture_ms, memory_bytes=peak_added(device, baseline),
        details={"graphs_recorded": 1.0},
        figures={"warmup_ms": costs.warmup_ms, "capture_ms": costs.capture_ms,
                 "pool_bytes": costs.pool_reserved_bytes,
                 "pool_allocated_bytes": costs.pool_allocated_bytes},
        prepare_again=prepare_again)


def _prepare_extra(name: str, prepare: Callable[[RunConfig, torch.device, Batches], Prepared]
                   ) -> Callable[[Preparation], Prepared]:
    """A mode beside eager and the graph: ``prepare`` in its own phase, its skip reasons noted."""
    def run(prep: Preparation) -> Prepared:
        with prep.phase(f"{name} preparation", SPECS[name].label):
            prepared = prepare(prep.config, prep.device, prep.batches)
        prep.notes.extend(f"{name}: {reason}" for reason in prepared.details.get("skip_reasons", []))
        return prepared
    return run


_IMPLEMENTATIONS = {mode.name: mode for mode in (
    ModeImplementation("eager", prepare_eager),
    ModeImplementation("graph", prepare_graph, timed_iterations=lambda config: config.replays),
    ModeImplementation("graphed_callables",
                       _prepare_extra("graphed_callables", prepare_graphed_callables)),
    ModeImplementation("compile",
                       _prepare_extra("compile", partial(prepare_compiled, reduce_overhead=False))),
    ModeImplementation("compile_ro",
                       _prepare_extra("compile_ro", partial(prepare_compiled, reduce_overhead=True))),
)}
# Every declared mode in run order; a declared mode without an implementation here (or one here
# that ``spec.modes`` does not declare) stops the import with an error saying what to add.
REGISTRY: dict[str, ModeImplementation] = per_mode(
    _IMPLEMENTATIONS, "engine/modes.py's _IMPLEMENTATIONS", "a ModeImplementation")
