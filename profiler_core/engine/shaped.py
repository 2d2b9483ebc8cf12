"""Steps whose shapes change (``--vary``): every strategy for them measured side by side on one
seeded sequence of shapes, so that the comparison is paired (``STRATEGIES``):

- ``eager``: the exact shapes, the baseline;
- ``pad_max``: one graph at the largest bucket, every batch padded to it;
- ``buckets``: one graph per bucket (``spec.shapes.bucket_edges``), each batch padded up to its
  bucket, every graph in one shared memory pool (``torch.cuda.graph(pool=...)``);
- ``buckets_own_pools``: the same graphs, each in a pool of its own;
- ``compile_ro``: ``torch.compile(mode="reduce-overhead")`` on the exact shapes (its recordings
  counted, its skip reasons quoted);
- ``compile_dynamic``: the same with ``dynamic=True``.

On a CPU the graph strategies run their padded batches eagerly and the compile strategy without
graphs (``CPU_STRATEGIES``). Padding does not change the answer: a built-in workload's loss
counts the real positions only and its attention ignores padded tokens (``workload_models``); an
own step's ``batch(generator, NAME=value, pad_to=P)`` returns the padded batch and its step masks
it. Each strategy's one-time cost (captures, recordings) is timed apart; the sequence is then
timed in blocks, strategies interleaved ABBA, an event after every step; a parity check trains
each strategy beside two eager replicas on the same steps.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from profiler_core.engine import parity
from profiler_core.engine.batches import Batch, copy_into, static_copy
from profiler_core.engine.modes import SkipReasons, cuda_graphs_recorded, graph_functions
from profiler_core.engine.user_workload import build_parts, check_step_batch
from profiler_core.engine.workload_models import MODELS
from profiler_core.engine.workloads import TrainingStep
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import ConfigError, WorkloadError
from profiler_core.spec.progress import ProgressCounter
from profiler_core.spec.shapes import (
    STRATEGY_NAMES,
    Vary,
    beats_eager,
    bucket_edges,
    bucket_of,
    padded_share,
    parse_strategies,
    parse_vary,
)
from profiler_core.timing import stats
from profiler_core.timing.trials import Clock, CudaClock, HostClock, interleaved, split_evenly

STRATEGIES = STRATEGY_NAMES
CPU_STRATEGIES = ("eager", "pad_max", "buckets", "compile_dynamic")
LABELS = {
    "eager": "eager, exact shapes",
    "pad_max": "one graph, padded to the largest bucket",
    "buckets": "a graph per bucket, one shared pool",
    "buckets_own_pools": "a graph per bucket, a pool each",
    "compile_ro": "torch.compile reduce-overhead, exact shapes",
    "compile_dynamic": "torch.compile dynamic=True, exact shapes",
}
GRAPHED = ("pad_max", "buckets", "buckets_own_pools")
PADDED = ("pad_max", "buckets", "buckets_own_pools")  # strategies that pad the batch
POOL_BATCHES = 4  # distinct batches at the largest shape, sliced for every step
MAX_OWN_SHAPES = 256  # distinct shapes an own step's batches are drawn for, at most


@dataclass
class Strategy:
    """One strategy ready to time: how it runs step ``i`` of the sequence, what preparing it
    cost, and what it holds."""

    name: str
    run: Callable[[int], None]
    step: TrainingStep | None  # None once released (its figures kept)
    one_time_ms: float = 0.0
    graphs: float = math.nan  # graphs captured or recorded (NaN: none to count)
    pool_bytes: float = math.nan  # the graphs' pools (shared: the one pool)
    pool_bytes_per_bucket: dict[int, float] = field(default_factory=dict)
    peak_bytes: float = math.nan
    skip_reasons: list[str] = field(default_factory=list)
    # where the graphs are recorded as it runs (torch.compile): counts them, after the timing
    count_graphs: Callable[[], float] | None = None
    # the batches its preparation trained on, in order (warm-ups, a compile's first pass): the
    # parity check's eager replicas train on them too
    pre_steps: list[Batch] = field(default_factory=list)


class ShapeSource:
    """Each step's batch, exact or padded, for the built-in workloads: sliced from a few batches
    drawn once at the largest bucket (the rest of a padded batch zeros, its weights 0)."""

    def __init__(self, config: RunConfig, vary: Vary, sequence: list[int], top: int,
                 device: torch.device) -> None:
        self.config, self.vary, self.sequence, self.device = config, vary, sequence, device
        self.model = MODELS[config.workload]
        generator = torch.Generator(device=device).manual_seed(config.seed)
        largest = config.replace(**{vary.dimension: top})
        self.pool = [self.model.random_batch(largest, device, generator)
                     for _ in range(POOL_BATCHES)]
        self.key = self.model.padding_key(vary.dimension)
        self.axis = 1 if vary.dimension == "seq_len" else 0

    def _sliced(self, tensor: torch.Tensor, length: int) -> torch.Tensor:
        return tensor.narrow(self.axis, 0, length)

    def exact(self, i: int) -> Batch:
        x, y = self.pool[i % POOL_BATCHES]
        length = self.sequence[i]
        return self._sliced(x, length).contiguous(), self._sliced(y, length).contiguous()

    def padded_example(self, size: int) -> Batch:
        """A batch padded to ``size`` (its static inputs: x, y, weights[, key_padding])."""
        x, y = self.pool[0]
        weights = torch.ones(x.shape[:self.model.POSITION_DIMENSIONS], device=self.device)
        parts: list[torch.Tensor] = [self._sliced(x, size).clone(), self._sliced(y, size).clone(),
                                     self._sliced(weights, size).clone()]
        if self.key:
            parts.append(torch.zeros(parts[2].shape, dtype=torch.bool, device=self.device))
        return tuple(parts)

    def load_padded(self, static: Batch, i: int, size: int) -> None:
        """Step ``i``'s batch into ``static`` (padded to ``size``): the real part copied, the
        padding zeroed, the weights 1 on the real positions, the key mask True on the padding."""
        x, y = self.pool[i % POOL_BATCHES]
        length = self.sequence[i]
        for target, source in zip(static[:2], (x, y)):
            self._sliced(target, length).copy_(self._sliced(source, length))
            target.narrow(self.axis, length, target.shape[self.axis] - length).zero_()
        weights = static[2]
        self._sliced(weights, length).fill_(1.0)
        weights.narrow(self.axis, length, weights.shape[self.axis] - length).zero_()
        if self.key:
            mask = static[3]
            self._sliced(mask, length).fill_(False)
            mask.narrow(self.axis, length, mask.shape[self.axis] - length).fill_(True)

    def padded(self, i: int, size: int) -> Batch:
        batch = self.padded_example(size)
        self.load_padded(batch, i, size)
        return batch


class OwnShapeSource(ShapeSource):
    """The user's own step: ``batch(generator, NAME=value)`` for the exact shape and
    ``batch(generator, NAME=value, pad_to=P)`` for a padded one (whose mask their step applies),
    each drawn once per distinct shape from the run's seed."""

    def __init__(self, config: RunConfig, vary: Vary, sequence: list[int], top: int,
                 device: torch.device) -> None:
        self.config, self.vary, self.sequence, self.device = config, vary, sequence, device
        if len(set(sequence)) > MAX_OWN_SHAPES:
            raise ConfigError("vary", f"your step would be given {len(set(sequence)):,} distinct "
                                      f"shapes (at most {MAX_OWN_SHAPES})",
                              "vary over a list of values or a lengths file with fewer distinct "
                              "lengths")
        self.draw = build_parts(config.workload, device, config.settings).batch
        self._cache: dict[tuple[int, int | None], Batch] = {}

    def _drawn(self, value: int, pad_to: int | None) -> Batch:
        key = (value, pad_to)
        if key not in self._cache:
            generator = torch.Generator(device=self.device).manual_seed(self.config.seed + value)
            extra = {} if pad_to is None else {"pad_to": pad_to}
            try:
                batch = self.draw(generator, **{self.vary.dimension: value}, **extra)
            except TypeError as error:
                raise WorkloadError(f"{self.config.workload}'s batch(generator, "
                                    f"{self.vary.dimension}=..." + (", pad_to=...)" if extra else ")")
                                    + f" failed: {str(error).splitlines()[0]}",
                                    f"give batch a keyword parameter {self.vary.dimension}"
                                    + (" and pad_to (the length to pad to; your step masks the "
                                       "padding)" if extra else "")) from None
            self._cache[key] = check_step_batch(self.config.workload, batch, self.device)
        return self._cache[key]

    def exact(self, i: int) -> Batch:
        return self._drawn(self.sequence[i], None)

    def padded_example(self, size: int) -> Batch:
        return static_copy(self._drawn(min(self.sequence), size))

    def load_padded(self, static: Batch, i: int, size: int) -> None:
        copy_into(static, self._drawn(self.sequence[i], size))

    def padded(self, i: int, size: int) -> Batch:
        return self._drawn(self.sequence[i], size)


@dataclass(frozen=True)
class ShapePlan:
    """A shaped run's sequence and buckets."""

    vary: Vary
    sequence: list[int]
    edges: tuple[int, ...]

    @property
    def top(self) -> int:
        return self.edges[-1]


def plan(config: RunConfig) -> ShapePlan:
    """The run's varying dimension (its lengths file read now), the seeded sequence of
    ``config.total_eager_iters`` shapes, and the bucket edges."""
    assert config.vary is not None
    vary = parse_vary(config.vary)
    sequence = vary.distribution.sample(config.total_eager_iters, config.seed)
    return ShapePlan(vary, sequence, bucket_edges(config.buckets, vary.distribution, sequence))


def _reserved(device: torch.device) -> float:
    return float(torch.cuda.memory_reserved(device)) if device.type == "cuda" else math.nan


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Preparer:
    """Builds each strategy on its own replica from the run's seed."""

    def __init__(self, config: RunConfig, shape_plan: ShapePlan, device: torch.device) -> None:
        self.config, self.plan, self.device = config, shape_plan, device
        source_class = OwnShapeSource if is_user_spec(config.workload) else ShapeSource
        self.source = source_class(config, shape_plan.vary, shape_plan.sequence, shape_plan.top,
                                   device)
        self.rehearsal_ms: float | None = None  # the untimed captures before the first graph

    def prepare(self, name: str) -> Strategy:
        if name == "eager":
            step = TrainingStep(self.config, self.device, graphed=False)
            source = self.source
            warm = self._warmed(step, source.exact)
            return Strategy(name, lambda i: step.eager_step(*source.exact(i)), step,
                            pre_steps=warm)
        if name in GRAPHED:
            edges = (self.plan.top,) if name == "pad_max" else self.plan.edges
            if self.device.type != "cuda":
                return self._padded_eagerly(name, edges)
            if self.rehearsal_ms is None:
                self.rehearsal_ms = self._rehearse()
            return self._graphs(name, edges, shared=name != "buckets_own_pools")
        return self._compiled(name)

    def _rehearse(self) -> float:
        """Every bucket warmed up and captured once, untimed, on a replica then dropped, before
        the first graph strategy (ms). A process's first warm-up and capture of a shape load its
        kernels and make handles, seconds where the same captures take tens of milliseconds
        later; charged to whichever strategy came first, they would decide the break-even
        between strategies by their order. Each is measured in the same warmed state instead."""
        _synchronize(self.device)
        started = time.perf_counter()
        rehearsal = self._graphs("rehearsal", self.plan.edges, shared=True)
        del rehearsal
        gc.collect()  # the graphs and their pool go with the last reference to the replica
        _synchronize(self.device)
        torch.cuda.empty_cache()
        return (time.perf_counter() - started) * 1e3

    def _padded_eagerly(self, name: str, edges: tuple[int, ...]) -> Strategy:
        """On a CPU: the padded batches, run eagerly (what padding costs, without graphs)."""
        step = TrainingStep(self.config, self.device, graphed=False)
        source, sequence = self.source, self.plan.sequence

        def padded(i: int) -> Batch:
            return source.padded(i, bucket_of(sequence[i], edges))
        warm = self._warmed(step, padded)
        return Strategy(name, lambda i: step.eager_step(*padded(i)), step, pre_steps=warm)

    def _warmed(self, step: TrainingStep, batch_of: Callable[[int], Batch]) -> list[Batch]:
        """An eager strategy's untimed warm-up, as any loop has (the first steps load kernels
        and make handles): ``warmup_iters`` steps on the sequence's first batches, returned."""
        warm = [batch_of(i) for i in range(min(self.config.warmup_iters, len(self.plan.sequence)))]
        for batch in warm:
            step.eager_step(*batch, count=False)
        _synchronize(self.device)
        return warm

    def _graphs(self, name: str, edges: tuple[int, ...], shared: bool) -> Strategy:
        """One replica, a graph per bucket: warmed up on a side stream and captured as the
        article does, into one shared pool or a pool each."""
        config, device, source = self.config, self.device, self.source
        step = TrainingStep(config, device, graphed=True)
        pool = torch.cuda.graph_pool_handle() if shared else None
        graphs: dict[int, tuple[torch.cuda.CUDAGraph, Batch]] = {}
        per_bucket: dict[int, float] = {}
        _synchronize(device)
        started, before_all = time.perf_counter(), _reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        pre_steps: list[Batch] = []
        for edge in edges:
            static = source.padded_example(edge)
            pre_steps += [static_copy(static)] * config.warmup_iters
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(config.warmup_iters):
                    step.eager_step(*static, count=False)
            torch.cuda.current_stream(device).wait_stream(side)
            step.zero_grad(set_to_none=True)
            _synchronize(device)
            before = _reserved(device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                step.captured_step(*static, index=0)
            _synchronize(device)
            per_bucket[edge] = _reserved(device) - before
            graphs[edge] = (graph, static)
        one_time_ms = (time.perf_counter() - started) * 1e3
        sequence = self.plan.sequence

        def run(i: int) -> None:
            size = bucket_of(sequence[i], edges)
            graph, static = graphs[size]
            source.load_padded(static, i, size)
            graph.replay()
            step.finish_step()
        return Strategy(name, run, step, one_time_ms, float(len(graphs)),
                        _reserved(device) - before_all, per_bucket,
                        float(torch.cuda.max_memory_allocated(device)), pre_steps=pre_steps)

    def _compiled(self, name: str) -> Strategy:
        """torch.compile on the exact shapes, as a user writes it (``dynamic`` left to torch for
        ``compile_ro``, ``True`` for ``compile_dynamic``): before timing, every distinct shape of
        the sequence once to compile and, with reduce-overhead, once more to record (Inductor's
        graph trees warm a function up on its first call and record on its next): the one-time
        cost. Its graphs are counted after the timing (``count_graphs``), as the run left them."""
        config, device, source = self.config, self.device, self.source
        step = TrainingStep(config, device, graphed=False)
        reduce_overhead = device.type == "cuda"
        step.compile("reduce-overhead" if reduce_overhead else None,
                     dynamic=True if name == "compile_dynamic" else None)
        first_of: dict[int, int] = {}
        for i, value in enumerate(self.plan.sequence):
            first_of.setdefault(value, i)
        passes = 2 if reduce_overhead else 1
        known_before = graph_functions(device) if reduce_overhead else None
        with SkipReasons().watching() as watcher:
            _synchronize(device)
            started = time.perf_counter()
            for _ in range(passes):
                for i in first_of.values():
                    step.eager_step(*source.exact(i), count=False)
            _synchronize(device)
            one_time_ms = (time.perf_counter() - started) * 1e3
        known_after = graph_functions(device) if reduce_overhead else None
        own = (known_after - known_before
               if known_before is not None and known_after is not None else None)

        def count_graphs() -> float:
            return cuda_graphs_recorded(device, own) if own is not None else math.nan
        return Strategy(name, lambda i: step.eager_step(*source.exact(i)), step, one_time_ms,
                        skip_reasons=watcher.reasons,
                        count_graphs=count_graphs if reduce_overhead else None,
                        pre_steps=[source.exact(i) for i in first_of.values()] * passes)


@dataclass
class ShapedTiming:
    """Per strategy, per step of the sequence: its time (ms)."""

    ms: dict[str, list[float]]
    blocks: dict[str, list[float]]  # each block's total, for the interval


def time_strategies(strategies: list[Strategy], steps: int, trials: int, clock: Clock,
                    progress: ProgressCounter) -> ShapedTiming:
    """The sequence in ``trials`` blocks, strategies interleaved ABBA, a mark after every step:
    each step's time is its mark minus the previous one's (the first step of a block from the
    idle device: its time is that from the block's start)."""
    from profiler_core.timing.trials import Mode

    ms = {s.name: [math.nan] * steps for s in strategies}
    sizes = split_evenly(steps, trials)
    starts = np.cumsum([0, *sizes[:-1]])
    modes = [Mode(s.name, 1, s.run) for s in strategies]
    for trial, mode in interleaved(modes, trials):
        first, count = int(starts[trial]), sizes[trial]
        marks = clock.marks(count + 1)
        clock.synchronize()
        clock.record(marks[0])
        for k in range(count):
            mode.run(first + k)
            clock.record(marks[k + 1])
        clock.synchronize()
        times = [clock.elapsed_ms(marks[k], marks[k + 1]) for k in range(count)]
        ms[mode.name][first:first + count] = times
        progress.advance(count, f"trial {trial + 1}/{trials}, {mode.name}")
    return ShapedTiming(ms, {name: block_totals(values, trials) for name, values in ms.items()})


def block_totals(ms: list[float], trials: int) -> list[float]:
    """Each block's total of a strategy's per-step times, the sequence cut into ``trials``
    blocks as ``time_strategies`` times it (NaN for a block not timed)."""
    sizes = split_evenly(len(ms), trials)
    starts = np.cumsum([0, *sizes[:-1]])
    return [float(np.sum(ms[start:start + size])) for start, size in zip(starts, sizes)]


def speedup_interval(eager_blocks: list[float], blocks: list[float],
                     seed: int) -> tuple[float, float, float]:
    """A strategy's speedup over eager from the blocks' totals: the 95% interval of the sums'
    ratio (the blocks resampled in pairs) and the ratio of the blocks' medians, as
    (low, high, blocks_speedup)."""
    _, low, high = stats.paired_sum_ratio_ci(eager_blocks, blocks, seed=seed)
    blocks_speedup = float(np.nanmedian(eager_blocks) / np.nanmedian(blocks)) \
        if np.isfinite(blocks).any() and np.isfinite(eager_blocks).any() else math.nan
    return low, high, blocks_speedup


def strategy_rows(strategies: list[Strategy], timing: ShapedTiming, shape_plan: ShapePlan,
                  checks: dict[str, parity.ParityCheck], seed: int,
                  predictions: dict[int, float]) -> list[dict[str, Any]]:
    """strategies.csv: per strategy its time per step over the sequence (median, p90, p99, the
    sum), the padded share, one-time cost, graphs, memory, speedup over eager (the sums' ratio,
    with a bootstrap interval over the blocks), break-even, and for a graph strategy the sum its
    buckets' predictions (``bucket_predictions``) give over the sequence."""
    eager_blocks = timing.blocks["eager"]
    eager_sum = float(np.nansum(timing.ms["eager"]))
    steps = len(shape_plan.sequence)
    rows = []
    for strategy in strategies:
        values = np.asarray(timing.ms[strategy.name], dtype=float)
        summary = stats.summarize(values)
        total = float(np.nansum(values))
        low, high, blocks_speedup = speedup_interval(eager_blocks, timing.blocks[strategy.name],
                                                     seed)
        saving_per_step = (eager_sum - total) / steps if steps else math.nan
        pays = (strategy.one_time_ms / saving_per_step if saving_per_step > 0 else math.inf)
        edges = ((shape_plan.top,) if strategy.name == "pad_max" else shape_plan.edges) \
            if strategy.name in GRAPHED else ()
        check = checks.get(strategy.name)
        predicted_sum = (sum(predictions[bucket_of(v, edges)] for v in shape_plan.sequence)
                         if edges and predictions and strategy.name in GRAPHED else math.nan)
        rows.append({
            "strategy": strategy.name, "label": LABELS[strategy.name], "steps": steps,
            "median_ms": summary["median_ms"], "p90_ms": summary["p90_ms"],
            "p99_ms": summary["p99_ms"], "sum_ms": total, "mean_ms": summary["mean_ms"],
            "speedup": eager_sum / total if total > 0 else math.nan,
            "speedup_ci_low": low if strategy.name != "eager" else math.nan,
            "speedup_ci_high": high if strategy.name != "eager" else math.nan,
            "blocks_speedup": blocks_speedup,
            "padded_share": padded_share(shape_plan.sequence, edges) if edges else 0.0,
            "buckets": len(edges) if edges else math.nan,
            "one_time_ms": strategy.one_time_ms, "graphs": strategy.graphs,
            "pool_bytes": strategy.pool_bytes, "peak_bytes": strategy.peak_bytes,
            "break_even_steps": math.ceil(pays) if math.isfinite(pays) and pays >= 0 else math.nan,
            "pays_back": float(saving_per_step > 0) if strategy.name != "eager" else math.nan,
            "parity_max_abs_diff": check.max_abs_diff if check else math.nan,
            "parity_noise_abs_diff": check.noise_abs_diff if check else math.nan,
            "parity_matches": float(check.matches) if check else math.nan,
            "predicted_sum_ms": predicted_sum,
            "predicted_speedup": eager_sum / predicted_sum if predicted_sum > 0 else math.nan,
        })
    return rows


def parity_checks(config: RunConfig, shape_plan: ShapePlan, device: torch.device,
                  names: list[str]) -> dict[str, parity.ParityCheck]:
    """Each strategy against eager on the exact shapes, on the first ``parity_steps`` steps of
    the sequence, every replica from the run's seed (dropout off for the built-in workloads) and
    first trained on what the strategy's preparation trained on. The difference it is judged
    against: for a strategy that pads, eager on the same padded batches against eager on the
    exact shapes (padding reorders a step's reductions: what that alone moves is rounding); for
    the others, a second eager replica."""
    quiet = config if is_user_spec(config.workload) else config.replace(dropout1=0.0, dropout2=0.0)
    steps = min(quiet.parity_steps, len(shape_plan.sequence))
    preparer = Preparer(quiet.replace(warmup_iters=1), shape_plan, device)
    source, sequence = preparer.source, shape_plan.sequence
    checks = {}
    for name in names:
        if name == "eager":
            continue
        candidate = preparer.prepare(name)
        padded = name in PADDED
        edges = (shape_plan.top,) if name == "pad_max" else shape_plan.edges
        reference, control = (TrainingStep(preparer.config, device, graphed=name in GRAPHED)
                              for _ in range(2))
        for replica in (reference, control):
            for batch in candidate.pre_steps:
                replica.eager_step(*batch, count=False)
        for i in range(steps):
            parity._reseed(i)
            candidate.run(i)
            parity._reseed(i)
            reference.eager_step(*source.exact(i), count=False)
            parity._reseed(i)
            control.eager_step(*(source.padded(i, bucket_of(sequence[i], edges)) if padded
                                 else source.exact(i)), count=False)
        _synchronize(device)
        assert candidate.step is not None, "a prepared strategy holds its replica"
        difference, worst = parity._difference(reference, candidate.step)
        noise, _ = parity._difference(reference, control)
        scale = parity._scale(reference)
        check = parity.ParityCheck(name, steps, difference,
                                   difference / scale if scale > 0 else math.nan, noise, worst,
                                   scale)
        if padded:
            check = dataclasses.replace(
                check, noise_label="eager on the padded batches against eager on the exact shapes",
                within="on the exact shapes within what padding alone moves eager")
        checks[name] = check
    return checks


def clock_for(device: torch.device) -> Clock:
    return CudaClock(device) if device.type == "cuda" else HostClock()



def bucket_predictions(config: RunConfig, shape_plan: ShapePlan, device: torch.device,
                       source: ShapeSource) -> dict[int, float]:
    """Before any capture: the graph's time per step at each bucket predicted from one eager
    profiled window at that bucket's padded shape (``analysis.predict``: its GPU busy time, plus
    the launch, the per-node cost and the batch copy, this GPU's constants), ms by bucket. After
    the timed trials (the profiler slows later launches); CUDA only."""
    import tempfile
    from pathlib import Path

    from profiler_core.analysis.predict import eager_step_from_analysis, predict_graph
    from profiler_core.engine.calibration import cached_calibration
    from profiler_core.engine.profiling import profile_window
    from profiler_core.timing.trials import Mode

    step = TrainingStep(config, device, graphed=True)
    predicted: dict[int, float] = {}
    examples = {edge: source.padded_example(edge) for edge in shape_plan.edges}
    calibration = cached_calibration(device, [examples[shape_plan.top]])
    with tempfile.TemporaryDirectory(prefix="profiler_core_buckets_") as folder:
        for edge, example in examples.items():
            for _ in range(2):  # untimed: the shape's first kernels loaded
                step.eager_step(*example, count=False)
            mode = Mode(f"eager_{edge}", 1, _eager_on(step, example))
            window = profile_window(mode, max(2, config.profile_iters), device,
                                    Path(folder) / f"trace_bucket_{edge}.json")
            eager = eager_step_from_analysis(window.analysis)
            predicted[edge] = predict_graph(eager, calibration.costs, 1, calibration.copy_us).graph_us / 1e3
    return predicted


def _eager_on(step: TrainingStep, batch: Batch) -> Callable[[int], None]:
    return lambda i: step.eager_step(*batch)


def units(config: RunConfig) -> int:
    """Steps a shaped run times (for the progress bar): the sequence once per strategy."""
    return len(timed_strategies(config)) * config.total_eager_iters


def timed_strategies(config: RunConfig) -> tuple[str, ...]:
    """The strategies the run times: those it asked for (``strategies``; every one by default)
    that its device has."""
    asked = parse_strategies(config.strategies)
    return tuple(name for name in (STRATEGIES if config.is_cuda else CPU_STRATEGIES)
                 if name in asked)


def run_shaped(config: RunConfig, device: torch.device, phases: Any, progress: ProgressCounter,
               state: Any) -> None:
    """A run of changing shapes into ``state`` (``pipeline.RunState``): the plan, every strategy
    prepared (each its phase), the sequence timed, the replicas released, the tables
    (``shaped_tables``) from the timing, then again with each bucket's prediction (CUDA) and with
    the parity check, so that a run stopped after its timing keeps it."""
    from profiler_core.engine.numerics import read_flags

    shape_plan = plan(config)
    names = list(timed_strategies(config))
    preparer = Preparer(config, shape_plan, device)
    strategies = []
    for name in names:
        progress.start_phase(f"{name} preparation", LABELS[name])
        with phases.phase(f"{name} preparation"):
            strategies.append(preparer.prepare(name))
        state.notes.extend(f"{name}: {reason}" for reason in strategies[-1].skip_reasons)
    if preparer.rehearsal_ms is not None:
        state.notes.append(
            f"before the graph strategies every bucket was warmed up and captured once, untimed, "
            f"on a replica then dropped ({preparer.rehearsal_ms:.0f} ms): a process's first "
            "capture of a shape loads kernels and makes handles, which would be charged to "
            "whichever strategy came first; a training process pays it once, whichever strategy "
            "it uses")
    state.numerics = read_flags()
    if shape_plan.vary.dimension == "batch" and any(
            isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
            for s in strategies if s.step is not None and s.step.model is not None
            for module in s.step.model.modules()):
        state.notes.append("the model has BatchNorm, whose batch statistics see a padded batch's "
                           "rows: padding the batch trains another model (the parity check "
                           "says by how much), so the verdict picks no padded strategy then")
    progress.start_phase("timed trials", f"{config.trial_count} interleaved blocks of the sequence")
    with phases.phase("shapes timed"):
        timing = time_strategies(strategies, len(shape_plan.sequence), config.trial_count,
                                 clock_for(device), progress)
    # the figures stay; the replicas and graphs go before the prediction's and parity's own
    costs = [dataclasses.replace(s, run=_no_step, step=None, pre_steps=[], count_graphs=None,
                                 graphs=s.count_graphs() if s.count_graphs else s.graphs)
             for s in strategies]
    source = preparer.source
    del strategies, preparer
    if device.type == "cuda":
        torch.cuda.empty_cache()
    predictions: dict[int, float] = {}
    checks: dict[str, parity.ParityCheck] = {}
    # what was timed is in the run from here on: a run stopped later keeps it
    _record(state, config, shape_plan, costs, timing, checks, predictions)
    if device.type == "cuda" and config.profile:
        progress.start_phase("prediction", "an eager profiled window per bucket")
        with phases.phase("bucket prediction"):
            predictions = bucket_predictions(config, shape_plan, device, source)
        _record(state, config, shape_plan, costs, timing, checks, predictions)
    if config.parity_steps:
        progress.start_phase("parity", f"{config.parity_steps} steps per strategy")
        with phases.phase("parity"):
            checks = parity_checks(config, shape_plan, device, names)
        state.notes.extend(f"parity: {check.verdict()}" for check in checks.values())
        _record(state, config, shape_plan, costs, timing, checks, predictions)


def _record(state: Any, config: RunConfig, shape_plan: ShapePlan, costs: list[Strategy],
            timing: ShapedTiming, checks: dict[str, parity.ParityCheck],
            predictions: dict[int, float]) -> None:
    """The run's tables and shape facts from what is measured so far (written again as the
    prediction and the parity check add theirs)."""
    for key in [key for key in state.headline if key.startswith("shapes_")]:
        del state.headline[key]  # a verdict the parity check overturned is not kept
    state.tables.update(shaped_tables(config, shape_plan, costs, timing, checks, predictions))
    state.headline.update(shaped_headline(config, shape_plan, state.tables["strategies"]))


def _no_step(i: int) -> None:
    raise RuntimeError("a strategy's replica was released after timing")


def shaped_tables(config: RunConfig, shape_plan: ShapePlan, costs: list[Strategy],
                  timing: ShapedTiming, checks: dict[str, parity.ParityCheck],
                  predictions: dict[int, float]) -> dict[str, Any]:
    """strategies.csv and shape_steps.csv; latency.csv, stats.csv, modes.csv and metrics.csv for
    eager against the graph per bucket (on a CPU: eager alone), so every page reads the pair."""
    import pandas as pd

    from profiler_core.analysis import metrics
    from profiler_core.spec import schema
    from profiler_core.storage import runtables
    from profiler_core.storage.results import coerce_table

    rows = strategy_rows(costs, timing, shape_plan, checks, config.seed, predictions)
    strategies = coerce_table("strategies", pd.DataFrame(rows, columns=schema.STRATEGY_COLUMNS))
    steps = []
    for name, values in timing.ms.items():
        edges = ((shape_plan.top,) if name == "pad_max" else shape_plan.edges) if name in GRAPHED else ()
        for i, (shape, ms) in enumerate(zip(shape_plan.sequence, values)):
            steps.append((i, shape, bucket_of(shape, edges) if edges else shape, name, ms))
    shape_steps = coerce_table("shape_steps", pd.DataFrame(steps, columns=schema.SHAPE_STEP_COLUMNS))
    pair = {"eager": "eager", "graph": "buckets"}
    cuda = config.is_cuda
    latency_rows = []
    sizes = split_evenly(len(shape_plan.sequence), config.trial_count)
    trial_of = np.repeat(np.arange(len(sizes)), sizes)
    for mode, name in pair.items():
        if name not in timing.ms or (mode == "graph" and not cuda):
            continue
        for i, ms in enumerate(timing.ms[name]):
            latency_rows.append((mode, "steady", int(trial_of[i]), i, 1,
                                 ms if cuda else math.nan, math.nan if cuda else ms))
    latency = runtables.latency_table(latency_rows)
    stats_table = runtables.stats_table(latency, pd.DataFrame(columns=["mode", "method",
                                                                       "ms_per_step"]))
    by_name = strategies.set_index("strategy")
    modes_rows = []
    for mode, name in pair.items():
        if name not in by_name.index or (mode == "graph" and not cuda):
            continue
        row = by_name.loc[name]
        modes_rows.append({"mode": mode, "median_ms": row["median_ms"],
                           "speedup": row["speedup"],
                           "speedup_ci_low": row["speedup_ci_low"] if mode == "graph" else math.nan,
                           "speedup_ci_high": row["speedup_ci_high"] if mode == "graph" else math.nan,
                           "one_time_ms": row["one_time_ms"],
                           "memory_bytes": row["pool_bytes"] if mode == "graph" else 0.0,
                           "graphs_recorded": row["graphs"]})
    modes_table = coerce_table("modes", pd.DataFrame(modes_rows, columns=schema.MODES_COLUMNS))
    figures: dict[str, dict[str, float]] = {}
    if cuda and "buckets" in by_name.index:  # the graph per bucket's capture and pool
        figures["graph"] = {"capture_ms": float(by_name.at["buckets", "one_time_ms"]),
                            "pool_bytes": float(by_name.at["buckets", "pool_bytes"])}
    runtables.add_pay_back(figures, modes_table)
    return {"strategies": strategies, "shape_steps": shape_steps, "latency": latency,
            "stats": stats_table, "modes": modes_table,
            "metrics": coerce_table("metrics", metrics.build(modes_table, stats_table, figures))}


def shaped_headline(config: RunConfig, shape_plan: ShapePlan, strategies: Any) -> dict[str, Any]:
    """The run's shape facts and its verdict: the strategy that pays most for this distribution
    (the largest speedup whose parity matched, or was not checked) and after how many steps it
    pays back its one-time cost."""
    # a padded strategy whose parity differs trains another model (BatchNorm sees the padding)
    wrong = strategies["strategy"].isin(PADDED) & (strategies["parity_matches"] == 0.0)
    candidates = strategies[(strategies["strategy"] != "eager") & ~wrong]
    best = _least_costly_of_the_fastest(candidates)
    facts: dict[str, Any] = {
        "shapes_vary": shape_plan.vary.text,
        "shapes_distribution": shape_plan.vary.distribution.describe(),
        "shapes_buckets": ",".join(str(edge) for edge in shape_plan.edges),
        "shapes_steps": len(shape_plan.sequence),
        "shapes_distinct": len(set(shape_plan.sequence)),
    }
    if len(best) and math.isfinite(float(best["speedup"].iloc[0])):
        row = best.iloc[0]
        speedup, steps = float(row["speedup"]), row["break_even_steps"]
        pays = (f"pays back its one-time cost of {row['one_time_ms']:,.0f} ms after "
                f"{int(steps):,} steps" if math.isfinite(float(steps)) else "never pays back")
        if float(row["parity_matches"]) == 0.0:
            pays += " (its parity check differs from eager: see the notes)"
        low, high = float(row["speedup_ci_low"]), float(row["speedup_ci_high"])
        interval = f" (95% CI {low:.2f}x-{high:.2f}x)" if math.isfinite(low) and math.isfinite(high) else ""
        described = f"{shape_plan.vary.dimension} {shape_plan.vary.distribution.describe()}"
        if beats_eager(speedup, low):
            verdict = (f"For {described}, {row['label']} pays most: {speedup:.2f}x eager over the "
                       f"sequence{interval} ({row['padded_share']:.0%} of its work padding); it "
                       f"{pays}{_also_as_fast(candidates, row)}")
        elif speedup > 1:  # faster, but within what eager's own blocks move
            verdict = (f"No strategy beats eager beyond the run's noise for {described}: the "
                       f"best, {row['label']}, runs at {speedup:.2f}x{interval}")
        else:
            verdict = (f"No strategy beats eager for {described}: the best, {row['label']}, runs "
                       f"at {speedup:.2f}x{interval}")
        facts.update(shapes_best=str(row["strategy"]), shapes_best_speedup=speedup,
                     shapes_verdict=verdict)
    return facts


def _least_costly_of_the_fastest(candidates: Any) -> Any:
    """The strategy that pays most, as a one-row frame: of those as fast as the fastest within
    its interval (its upper end at least the fastest's speedup), the one holding the least pool
    memory, then the one with the least one-time cost; a strategy whose pool is not measured
    (torch.compile's) after those whose pool is."""
    if candidates.empty:
        return candidates
    fastest = float(candidates["speedup"].max())
    if not math.isfinite(fastest):
        return candidates.sort_values("speedup", ascending=False).head(1)
    close = candidates[(candidates["speedup"] == fastest)
                       | (candidates["speedup_ci_high"] >= fastest)]
    ranked = close.assign(_pool=close["pool_bytes"].fillna(math.inf),
                          _once=close["one_time_ms"].fillna(math.inf))
    return ranked.sort_values(["_pool", "_once", "speedup"],
                              ascending=[True, True, False]).head(1).drop(columns=["_pool", "_once"])


def _also_as_fast(candidates: Any, chosen: Any) -> str:
    """The verdict's clause naming a faster point estimate it passed over for less memory."""
    faster = candidates[candidates["speedup"] > float(chosen["speedup"])]
    if faster.empty:
        return ""
    other = faster.sort_values("speedup", ascending=False).iloc[0]
    saved = float(other["pool_bytes"]) - float(chosen["pool_bytes"])
    memory = (f", {saved / 2**20:,.0f} MiB less pool memory" if math.isfinite(saved) and saved > 0
              else "")
    return (f"; {other['label']} measured {float(other['speedup']):.2f}x, the same within this "
            f"run's interval{memory}")
