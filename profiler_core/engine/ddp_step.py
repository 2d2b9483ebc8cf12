"""One rank of a data-parallel run: the training step under DistributedDataParallel, prepared in
every requested mode, timed, profiled and checked, the same way on every rank.

Scope: the per-rank worker that ``python -m profiler_core run`` becomes under torchrun (ours,
started by ``orchestration.torchrun``, or a multi-node torchrun or srun the user starts). It
reads only RANK, LOCAL_RANK and WORLD_SIZE (and torchrun's rendezvous variables through
``init_process_group``); rank 0 gathers every rank's measurements over the process group and
builds the run (``ddp_result``), so no shared file system is needed. Rank 0 alone reports
progress (``measure_rank``'s callback: ``RANK_PHASES`` and their work units, for the dashboard's
bar). The modes (``RANK_PREPARATION``: one entry per mode ``spec.modes`` declares), as PyTorch's
CUDA notes ("Usage with DistributedDataParallel") describe them:

- ``eager``: the step with its model wrapped in DDP;
- ``graph``: the whole step captured, all-reduce inside: DDP built in a side-stream context, at
  least ``MIN_EAGER_BEFORE_CAPTURE`` eager iterations there, barrier and synchronise before the
  capture (``capture_error_mode="thread_local"``) and after it;
- ``graphed_callables``: ``make_graphed_callables`` on the model before DDP wraps it (the
  all-reduce runs outside the graphs);
- ``compile`` and ``compile_ro``: ``torch.compile`` of the DDP model (DDPOptimizer splits the
  graph at bucket boundaries: the all-reduce stays outside the CUDA graphs).

Timing follows the single-process run (``timing.trials``): untimed iterations first, then
steady-state blocks interleaved ABBA, with no profiler or NVML in the process until every trial
is done. A rank told to stop (``should_stop``: Ctrl-C, SIGTERM, a time limit) stops where every
rank does: after each mode's preparation, timed block and profiled window the ranks combine
their wishes (one all-reduce, outside the timed blocks), so they all leave the loop at the same
point and still gather what they measured (``RankOutcome.stopped`` says where). Checks made
every time: the all-reduce kernels in every profiled replay, parameters across ranks after the
timed steps, the graph against eager, and the graphs released before ``destroy_process_group``
(NCCL 2.26+ can hang otherwise).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from profiler_core.analysis import ranks as rank_analysis
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.engine.capture import GraphedStep, diagnose_capture_failure
from profiler_core.engine.memory import freeze_startup_objects
from profiler_core.engine.profiling import kernels_were_recorded, profile_window
from profiler_core.engine.workloads import TrainingStep, make_batches
from profiler_core.spec.config import INT_LIMITS, RunConfig
from profiler_core.spec.distributed import RankEnv, announce_phase
from profiler_core.spec.errors import NoCudaError
from profiler_core.spec.modes import CPU_MODES, per_mode
from profiler_core.spec.progress import ProgressCallback, ProgressCounter, ignore_progress
from profiler_core.timing import trials as timing

# DDP times its first 10 iterations for its logging (``kDDPRuntimeLoggingSampleRate``): a capture
# must come after them.
MIN_EAGER_BEFORE_CAPTURE = 11
UNTIMED_ITERS = 3  # per mode, before its first timed block
PREPARE_ITERS = 3  # compile and graphed-callables warm-up iterations
BATCHES = 8  # distinct batches per rank
NOT_CAPTURED = "all-reduce not captured"
NOT_CAPTURED_ONE_RANK = "all-reduce not captured (one rank: nothing to reduce)"
# Set for a capture of NCCL work unless the user set it (PyTorch's CUDA notes name the older
# NCCL_ASYNC_ERROR_HANDLING; torch 2.2 renamed it).
NCCL_CAPTURE_SETTINGS = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}


@dataclass
class RankMode:
    """A mode ready to time on this rank."""

    mode: timing.Mode
    step: TrainingStep  # the replica it trains
    one_time_ms: float  # preparation: capture or compile with its warm-up, synchronised wall time
    graphs: list = field(default_factory=list)  # CUDA graphs to release before teardown


@dataclass
class RankContext:
    """What every mode's preparation on this rank is given, and what the rank records."""

    config: RunConfig
    env: RankEnv
    device: torch.device
    batches: list
    delay_ms: float  # injected host sleep before every step or replay (a straggler on purpose)
    notes: list[str] = field(default_factory=list)
    capture_log: list[str] = field(default_factory=list)  # the capture's steps, in order
    collective_nodes: float = math.nan  # NCCL kernel nodes in the last graph captured
    phase_name: str = ""
    progress: ProgressCounter = field(default_factory=lambda: ProgressCounter(1))
    should_stop: Callable[[], bool] = lambda: False  # whether this rank was told to stop
    stopped: str = ""  # where every rank agreed to stop ("" while they go on)

    def agreed_stop(self, where: str) -> bool:
        """Whether any rank was told to stop, every rank's wish combined (one all-reduce: every
        rank calls this at the same points); when so, ``stopped`` is ``where``."""
        wish = torch.tensor([1.0 if self.should_stop() else 0.0], device=self.device)
        dist.all_reduce(wish, op=dist.ReduceOp.MAX)
        if float(wish.item()) > 0:
            self.stopped = where
        return bool(self.stopped)

    def phase(self, name: str, message: str = "") -> None:
        """Enter a phase: said to the launcher (``RANK_PHASES``) and to the progress callback."""
        self.phase_name = name
        announce_phase(self.env.rank, name)
        if name == "done":
            self.progress.finish(message or "done")
        else:
            self.progress.start_phase(name, message)

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def ddp(self, model: torch.nn.Module) -> DistributedDataParallel:
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)

    def delayed(self, run: Callable[[int], None]) -> Callable[[int], None]:
        if self.delay_ms <= 0:
            return run
        seconds = self.delay_ms / 1e3

        def late(i: int) -> None:
            time.sleep(seconds)
            run(i)
        return late

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[i % len(self.batches)]


def _device(config: RunConfig, env: RankEnv) -> torch.device:
    if not config.is_cuda:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise NoCudaError("no CUDA device is present on this rank",
                          "run every rank on a machine with NVIDIA GPUs, or pass --device cpu "
                          "(gloo ranks on the CPU)")
    if env.local_rank >= torch.cuda.device_count():
        raise NoCudaError(f"local rank {env.local_rank} has no GPU of its own (this node has "
                          f"{torch.cuda.device_count()})",
                          "start at most one rank per GPU: lower --nproc-per-node")
    torch.cuda.set_device(env.local_rank)
    return torch.device("cuda", env.local_rank)


def _prepare_eager(ctx: RankContext) -> RankMode:
    step = TrainingStep(ctx.config, ctx.device, graphed=False)
    step.model = ctx.ddp(step.require_model('a data-parallel run'))
    capture_iters = ctx.config.capture_iters
    run = ctx.delayed(lambda i: step.eager_step(*ctx.batch(i // capture_iters)))
    return RankMode(timing.Mode("eager", 1, run), step, 0.0)


def capture_ddp_step(ctx: RankContext, config: RunConfig) -> tuple[GraphedStep, float]:
    """The whole DDP step captured, all-reduce inside, as PyTorch's CUDA notes require; returns
    the graphed step and its one-time cost (warm-up and capture, synchronised wall ms)."""
    device, log = ctx.device, ctx.capture_log
    step = TrainingStep(config, device, graphed=True)
    graphed = GraphedStep(step, ctx.batch(0))
    ctx.synchronize()
    started = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    eager_before = max(MIN_EAGER_BEFORE_CAPTURE, config.warmup_iters)
    with torch.cuda.stream(side):
        step.model = ctx.ddp(step.require_model('a data-parallel run'))
        log.append("DDP built in a side-stream context")
        for i in range(eager_before):
            graphed.load(*ctx.batch(i))
            step.eager_step(*graphed.static, count=config.count_warmup)
        log.append(f"{eager_before} eager DDP iterations on the side stream")
    torch.cuda.current_stream(device).wait_stream(side)
    step.zero_grad(set_to_none=True)  # grads allocated from the graph's pool
    ctx.barrier()
    ctx.synchronize()
    log.append("barrier and synchronize before capture")
    graph = torch.cuda.CUDAGraph()
    graph.enable_debug_mode()  # keeps the graph's nodes, to look for the all-reduce in them
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for index in range(config.capture_iters):
                step.captured_step(*graphed.static, index=index)
    except RuntimeError as error:
        raise diagnose_capture_failure(error) from error
    log.append(f"capture of {config.capture_iters} step(s)")
    ctx.synchronize()
    ctx.barrier()
    log.append("synchronize and barrier after capture")
    graphed.graph = graph
    ctx.collective_nodes = collective_nodes(graph)
    return graphed, (time.perf_counter() - started) * 1e3


def collective_nodes(graph: torch.cuda.CUDAGraph) -> float:
    """The graph's kernel nodes that run an NCCL collective, from its debug dump (the graph
    itself, no profiler); NaN where the dump cannot be made."""
    with tempfile.TemporaryDirectory(prefix="profiler_core_graph_") as folder:
        path = Path(folder) / "graph.dot"
        try:
            graph.debug_dump(str(path))
            text = path.read_text(encoding="utf-8", errors="replace")
        except (RuntimeError, OSError):
            return math.nan
    return float(len(rank_analysis.GPU_COMM_KERNEL_IN_TEXT.findall(text)))


def _prepare_graph(ctx: RankContext) -> RankMode:
    graphed, one_time_ms = capture_ddp_step(ctx, ctx.config)
    mode = timing.Mode("graph", ctx.config.capture_iters, ctx.delayed(lambda i: graphed.replay()),
                       load=lambda i: graphed.load(*ctx.batch(i)))
    return RankMode(mode, graphed.step, one_time_ms, graphs=[graphed])


def _prepare_graphed_callables(ctx: RankContext) -> RankMode:
    step = TrainingStep(ctx.config, ctx.device, graphed=False)
    ctx.synchronize()
    started = time.perf_counter()
    with step.autocast():
        graphed = torch.cuda.make_graphed_callables(step.require_model('graphed_callables'), (ctx.batch(0)[0].clone(),),
                                                    num_warmup_iters=PREPARE_ITERS)
    # Given a module, make_graphed_callables returns that module (its forward graphed).
    step.model = ctx.ddp(cast(torch.nn.Module, graphed))
    for i in range(PREPARE_ITERS):
        step.eager_step(*ctx.batch(i), count=False)
    ctx.synchronize()
    run = ctx.delayed(lambda i: step.eager_step(*ctx.batch(i)))
    return RankMode(timing.Mode("graphed_callables", 1, run), step,
                    (time.perf_counter() - started) * 1e3)


def _prepare_compiled(ctx: RankContext, reduce_overhead: bool) -> RankMode:
    name = "compile_ro" if reduce_overhead else "compile"
    step = TrainingStep(ctx.config, ctx.device, graphed=False)
    # torch.compile of a module is a module (OptimizedModule); its stubs say only "callable".
    step.model = cast(torch.nn.Module, torch.compile(
        ctx.ddp(step.require_model('a data-parallel run')), mode="reduce-overhead" if reduce_overhead else None))
    ctx.synchronize()
    started = time.perf_counter()
    for i in range(PREPARE_ITERS):
        step.eager_step(*ctx.batch(i), count=False)
    ctx.synchronize()
    if reduce_overhead:
        from torch._dynamo import config as dynamo_config

        split = bool(getattr(dynamo_config, "optimize_ddp", False))
        ctx.notes.append(
            "compile_ro: " + ("DDPOptimizer splits the compiled graph at DDP's bucket boundaries "
                              "(torch._dynamo.config.optimize_ddp), so the all-reduce runs "
                              "outside the CUDA graphs" if split else
                              "torch._dynamo.config.optimize_ddp is off: the graph is not split "
                              "at DDP's buckets"))
    run = ctx.delayed(lambda i: step.eager_step(*ctx.batch(i)))
    return RankMode(timing.Mode(name, 1, run), step, (time.perf_counter() - started) * 1e3)


# How each declared mode is prepared on a rank, in run order. A mode declared in ``spec.modes``
# without an entry here (or an entry for a mode it does not declare) stops the import with an
# error saying what to add.
RANK_PREPARATION: dict[str, Callable[[RankContext], RankMode]] = per_mode({
    "eager": _prepare_eager,
    "graph": _prepare_graph,
    "graphed_callables": _prepare_graphed_callables,
    "compile": lambda ctx: _prepare_compiled(ctx, reduce_overhead=False),
    "compile_ro": lambda ctx: _prepare_compiled(ctx, reduce_overhead=True),
}, "engine/ddp_step.py's RANK_PREPARATION", "a function RankContext -> RankMode")


def rank_modes(config: RunConfig) -> list[str]:
    """The modes every rank runs: the requested ones the device can run (the CPU: eager and
    compile)."""
    return [m for m in config.modes if config.is_cuda or m in CPU_MODES]


def _timed_trials(ctx: RankContext, prepared: dict[str, RankMode]) -> tuple[list, list]:
    """Untimed iterations, then every mode's steady-state blocks interleaved ABBA (the same
    order on every rank, so the collectives match). Returns latency rows and host issue times."""
    config = ctx.config
    modes = [ready.mode for ready in prepared.values()]
    for mode in modes:
        for i in range(UNTIMED_ITERS):
            if mode.load is not None:
                mode.load(i)
            mode.run(i)
    ctx.synchronize()
    iterations = {m.name: config.replays if m.name == "graph" else config.total_eager_iters
                  for m in modes}
    trials = config.trial_count
    sizes = {name: timing.split_evenly(count, trials) for name, count in iterations.items()}
    clock: timing.Clock = timing.CudaClock(ctx.device) if ctx.device.type == "cuda" else timing.HostClock()
    rows: list[tuple] = []
    host_issue: list[tuple] = []
    next_index = dict.fromkeys(iterations, 0)
    blocks = list(timing.interleaved(modes, trials))
    for number, (trial, mode) in enumerate(blocks, 1):
        count = sizes[mode.name][trial]
        issue_ms = timing.steady_block(mode, next_index[mode.name], count, trial, clock, rows)
        host_issue.append((mode.name, trial, issue_ms))
        next_index[mode.name] += count
        ctx.progress.advance(message=f"{mode.name}: block {trial + 1} of {trials}")
        if number < len(blocks) and ctx.agreed_stop(f"timed trials (after block {number} of "
                                                    f"{len(blocks)})"):
            break
    return rows, host_issue


def _profiled(ctx: RankContext, prepared: dict[str, RankMode], folder: Path) -> dict[str, Any]:
    """Each mode's profiled window on this rank (after every timed trial): its trace's bytes,
    per-iteration figures and collectives."""
    windows: dict[str, Any] = {}
    for name, ready in prepared.items():
        key = f"{name}_rank{ctx.env.rank}"
        window = profile_window(ready.mode, ctx.config.profile_iters, ctx.device,
                                folder / f"trace_{key}.json")
        figures, instances = rank_analysis.window_figures(load_trace(window.trace_path).events)
        windows[name] = {"figures": figures.to_dict("list"), "instances": instances.to_dict("list"),
                         "kernels_seen": kernels_were_recorded(window.analysis),
                         "launch_split": window.analysis.launch_split.to_dict("list"),
                         "kernels": window.analysis.kernels.to_dict("list"),
                         "trace_name": window.trace_path.name,
                         "trace": window.trace_path.read_bytes()}
        ctx.progress.advance(message=f"{name} profiled")
        if ctx.agreed_stop(f"profiled windows (after {name}'s)"):
            break
    return windows


def _capture_check(ctx: RankContext, nodes: float, windows: dict[str, Any]) -> float:
    """The whole-step graph: 1 when every profiled replay held a collective kernel (without a
    profiled window that saw kernels: when the graph's nodes hold one), 0 when not (the run says
    "all-reduce not captured"), NaN when not known (one rank: nothing to reduce)."""
    window = windows.get("graph")
    calls = window["figures"]["comm_calls"] if window and window["kernels_seen"] else []
    if ctx.env.world_size == 1:
        ctx.notes.append(f"graph: {NOT_CAPTURED_ONE_RANK}")
        return math.nan
    if calls:
        captured, where = min(calls) > 0, "a profiled replay"
    elif not math.isnan(nodes):
        captured, where = nodes > 0, "the captured graph"
    else:
        ctx.notes.append("graph: the all-reduce's capture was not checked (no profiled kernels, "
                         "no graph dump)")
        return math.nan
    if not captured:
        ctx.notes.append(f"graph: {NOT_CAPTURED}: {where} on rank {ctx.env.rank} held no "
                         "all-reduce kernel")
    return float(captured)


def _params_against_rank0(ctx: RankContext, prepared: dict[str, RankMode]) -> dict[str, float]:
    """Each mode's largest parameter difference from rank 0's after the timed steps (0.0:
    bit-identical)."""
    differences = {}
    for name, ready in prepared.items():
        mine = ready.step.parameters_flat()
        reference = mine.clone()
        dist.broadcast(reference, src=0)
        differences[name] = float((mine - reference).abs().max()) if mine.numel() else 0.0
    return differences


def _parity(ctx: RankContext, released: list) -> float:
    """The graph's parameters against eager DDP's after the same steps, dropout off: both warmed
    up alike, then ``parity_steps`` replays against as many eager steps."""
    quiet = ctx.config.replace(dropout1=0.0, dropout2=0.0)
    eager = TrainingStep(quiet, ctx.device, graphed=True)
    eager.model = ctx.ddp(eager.require_model('a data-parallel run'))
    for i in range(max(MIN_EAGER_BEFORE_CAPTURE, quiet.warmup_iters)):
        eager.eager_step(*ctx.batch(i))
    graphed, _ = capture_ddp_step(ctx, quiet)
    released.append(graphed)
    for replay in range(quiet.parity_steps):
        graphed.load(*ctx.batch(replay))
        graphed.replay()
        for _ in range(quiet.capture_iters):
            eager.eager_step(*ctx.batch(replay))
    ctx.synchronize()
    return float((eager.parameters_flat() - graphed.step.parameters_flat()).abs().max())


def _release(graphs: list, device: torch.device) -> int:
    """Reset every captured graph (before ``destroy_process_group``); returns how many."""
    count = 0
    for graphed in graphs:
        graph = getattr(graphed, "graph", graphed)
        if graph is not None:
            graph.reset()
            count += 1
        if hasattr(graphed, "graph"):
            graphed.graph = None
    graphs.clear()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return count


@contextlib.contextmanager
def _process_group(ctx: RankContext, graphs: list) -> Iterator[None]:
    """The process group for the rank's life; on the way out, every graph released first."""
    backend = "nccl" if ctx.device.type == "cuda" else "gloo"
    options: dict[str, Any] = {"timeout": timedelta(minutes=10)}
    if backend == "nccl":
        options["device_id"] = ctx.device  # the communicator made now, not at the first capture
    dist.init_process_group(backend, **options)
    try:
        yield
    finally:
        _release(graphs, ctx.device)  # a rank that failed half way: its graphs go first too
        dist.destroy_process_group()


def _environment(ctx: RankContext) -> dict[str, Any]:
    environment: dict[str, Any] = {"rank": ctx.env.rank, "local_rank": ctx.env.local_rank,
                                   "host": socket.gethostname(), "device": str(ctx.device),
                                   "torch_version": torch.__version__,
                                   "torch_num_threads": torch.get_num_threads()}
    if ctx.device.type == "cuda":
        environment["nccl_settings"] = {name: os.environ.get(name) for name in NCCL_CAPTURE_SETTINGS}
        environment["gpu_name"] = torch.cuda.get_device_name(ctx.device)
        nccl = getattr(torch.cuda, "nccl", None)
        with contextlib.suppress(Exception):
            environment["nccl_version"] = ".".join(map(str, nccl.version())) if nccl else None
    return environment


def progress_units(config: RunConfig) -> int:
    """The work units of a rank's progress: each mode prepared, each timed block, each profiled
    window, the checks (and the parity check) and the gather."""
    modes = rank_modes(config)
    parity = 1 if "graph" in modes and config.parity_steps else 0
    return len(modes) * (1 + config.trial_count + (1 if config.profile else 0)) + 1 + parity + 1


@dataclass(frozen=True)
class RankOutcome:
    """What :func:`measure_rank` ends with: every rank's payload on rank 0 (rank order; None on
    the other ranks, and everywhere when the ranks stopped before any timed block), and where
    the ranks agreed to stop ("" for a whole run)."""

    payloads: list[dict] | None
    stopped: str = ""


def measure_rank(config: RunConfig, env: RankEnv, delays: Mapping[int, float],
                 progress: ProgressCallback = ignore_progress,
                 should_stop: Callable[[], bool] = lambda: False) -> RankOutcome:
    """Everything this rank measures, gathered on rank 0. ``progress`` hears the rank's phases
    and work units (the launcher gives it to rank 0 only); ``should_stop`` says whether this
    rank was told to stop (the ranks stop together, keeping what they measured: see the module
    docstring)."""
    freeze_startup_objects()
    device = _device(config, env)
    if device.type == "cuda" and "graph" in config.modes:
        for name, value in NCCL_CAPTURE_SETTINGS.items():
            os.environ.setdefault(name, value)
    # every rank its own data, as a data-parallel loader gives (the weights stay the same)
    batch_seed = (config.seed + env.rank) % (INT_LIMITS["seed"][1] + 1)
    ctx = RankContext(config, env, device,
                      make_batches(config.replace(seed=batch_seed), BATCHES, device),
                      delay_ms=float(delays.get(env.rank, 0.0)),
                      progress=ProgressCounter(progress_units(config), progress),
                      should_stop=should_stop)
    graphs: list = []
    payload: dict[str, Any] = {"rank": env.rank}
    with _process_group(ctx, graphs):
        ctx.phase("prepare")
        prepared: dict[str, RankMode] = {}
        for name in rank_modes(config):
            prepared[name] = RANK_PREPARATION[name](ctx)
            graphs.extend(prepared[name].graphs)
            ctx.progress.advance(message=f"{name} ready")
            if ctx.agreed_stop(f"prepare (after {name})"):
                return RankOutcome(None, ctx.stopped)  # nothing timed: nothing to keep
        graph_nodes = ctx.collective_nodes  # the timed graph's (parity captures one more)
        ctx.phase("timed trials")
        rows, host_issue = _timed_trials(ctx, prepared)
        windows: dict[str, Any] = {}
        if config.profile and not ctx.stopped:
            ctx.phase("profiled windows")
            with tempfile.TemporaryDirectory(prefix="profiler_core_ddp_") as folder:
                windows = _profiled(ctx, prepared, Path(folder))
        ctx.phase("checks")
        checks: dict[str, Any] = {"captured": {}, "graph_nodes": {},
                                  "params_to_rank0": _params_against_rank0(ctx, prepared)}
        if "graph" in prepared:
            checks["graph_nodes"]["graph"] = graph_nodes
            checks["captured"]["graph"] = _capture_check(ctx, graph_nodes, windows)
        ctx.progress.advance(message="parameters compared across ranks")
        if "graph" in prepared and config.parity_steps and not (
                ctx.stopped or ctx.agreed_stop("checks (before the parity check)")):
            checks["parity"] = {"graph": _parity(ctx, graphs)}
            ctx.progress.advance(message="graph against eager compared")
        payload.update(rows=rows, host_issue=host_issue, windows=windows, checks=checks,
                       one_time_ms={name: ready.one_time_ms for name, ready in prepared.items()},
                       environment=_environment(ctx), delay_ms=ctx.delay_ms, stopped=ctx.stopped)
        prepared.clear()
        released = _release(graphs, device)
        if released:  # a CPU run (or one without graph modes) captured none: nothing to say
            ctx.capture_log.append(f"{released} graph(s) released before destroy_process_group")
        ctx.phase("gather")
        gathered: list | None = [None] * env.world_size if env.rank == 0 else None
        payload["notes"], payload["capture_log"] = ctx.notes, ctx.capture_log
        dist.gather_object(payload, gathered, dst=0)
        ctx.progress.advance(message="every rank's measurements gathered")
    ctx.phase("done", "measured; rank 0 saves the run" if env.rank == 0 else "measured")
    return RankOutcome(gathered, ctx.stopped)
