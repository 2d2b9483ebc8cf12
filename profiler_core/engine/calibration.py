"""The prediction's constants measured on the GPU in hand (``analysis.predict`` holds the model).

Scope: :func:`calibrate` times replays of trivial CUDA graphs and one profiled window of them to
fit the launch and per-node costs, and times the run's batch copy; :func:`cached_calibration`
keeps the fitted graph costs per (GPU, driver, torch, CUDA) in ``calibration_cache`` so later runs
time only the batch copy; :func:`default_costs` gives ``predict`` its constants when none are given
(the cache's for this GPU, else the bundled sample run's recorded calibration). The method is
described in docs/how-it-measures.md.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from profiler_core.analysis.figures import Figures
from profiler_core.analysis.predict import (
    MAX_CONSTANT_US,
    OPTION_HINT,
    Calibration,
    GraphCosts,
    calibrated_prediction,
    fit_graph_costs,
)
from profiler_core.engine.calibration_cache import CalibrationCache, GraphFit, cache_path
from profiler_core.engine.telemetry import driver_version
from profiler_core.spec.errors import ConfigError, NoCudaError, ProfilerError

# Calibration: graphs of this many dependent add kernels (at least two distinct counts).
CALIBRATION_NODE_COUNTS = (1, 32, 256)
CALIBRATION_REPLAYS = 100  # replays timed per graph, back to back, at most...
CALIBRATION_TIMED_NODES = 6400  # ...and at most this many kernels per graph's timed replays
CALIBRATION_UNTIMED_REPLAYS = 5  # per graph, before timing
CALIBRATION_PROFILED_REPLAYS = 3  # per graph, in one torch.profiler window, for the kernels' busy time
CALIBRATION_COPIES = 32  # batch copies timed together
# GPU clock cycles the device is held busy while a timed block is enqueued (about 5 ms at 2 GHz).
CALIBRATION_HOLD_CYCLES = 10_000_000
# Set to 1 to measure the graph costs again (and rewrite their cache entry) instead of reading them.
RECALIBRATE_ENV = "PROFILER_CORE_RECALIBRATE"


def calibrate(device: Any, batch: Sequence[Any] = (),
              node_counts: Sequence[int] = CALIBRATION_NODE_COUNTS,
              replays: int = CALIBRATION_REPLAYS) -> Calibration:
    """Measure the launch and per-node costs on ``device`` (never from the cache), and the copy of
    ``batch`` (its tensors, as a graph's static inputs would receive them) when given: a sequence
    of tensors, or of batches (tuples of tensors) copied in turn, as a training loop copies a new
    batch before every replay.

    Run it after every timed trial: it uses torch.profiler, which slows later launches of the
    process.
    """
    import torch

    started = time.perf_counter()
    fit, single = _measure_graph_costs(torch, device, node_counts, replays)
    return _with_batch_copy(torch, device, fit, single, batch, started, "measured")


def cached_calibration(device: Any, batch: Sequence[Any] = (),
                       cache: CalibrationCache | None = None) -> Calibration:
    """:func:`calibrate`, with the graph costs read from ``cache`` (the user's calibration cache
    by default) when it holds them for this GPU, driver, torch and CUDA, unless
    ``$PROFILER_CORE_RECALIBRATE`` is 1; measured (and written there) otherwise. The batch copy is
    always timed here. Without a driver version (NVML unreadable) nothing is read or written."""
    import torch

    started = time.perf_counter()
    cache = cache if cache is not None else CalibrationCache(cache_path())
    key = cache_key(torch, device)
    fit = None
    if key is not None and os.environ.get(RECALIBRATE_ENV, "").strip() != "1":
        fit = cache.read(key, CALIBRATION_NODE_COUNTS)
    if fit is not None:
        single = _trivial_graph(torch, device, fit.node_counts[0], fit.elements)
        return _with_batch_copy(torch, device, fit, single, batch, started, "cached",
                                cache_file=cache.path)
    fit, single = _measure_graph_costs(torch, device, CALIBRATION_NODE_COUNTS, CALIBRATION_REPLAYS)
    if key is not None:
        cache.write(key, fit)
    return _with_batch_copy(torch, device, fit, single, batch, started, "measured")


def cache_key(torch: Any, device: Any) -> dict[str, str] | None:
    """What the graph costs depend on: the GPU (its name and SM count, which tell MIG slices
    apart), driver version, torch and CUDA versions (None when the driver version cannot be
    read: a driver update must not go unnoticed)."""
    driver = driver_version()
    if not driver:
        return None
    return {"gpu": str(torch.cuda.get_device_name(device)),
            "sms": str(torch.cuda.get_device_properties(device).multi_processor_count),
            "driver": driver, "torch": str(torch.__version__), "cuda": str(torch.version.cuda)}


def calibrate_and_predict(device: Any, batch: Sequence[Any], steps_per_graph: int,
                          headline: dict[str, Any], figures: Figures) -> dict[str, Any]:
    """The runner's one call, after the profiled windows: calibrate on ``device`` with the run's
    own batch (graph costs from the cache where it has them), then predict from the eager
    window's ``figures`` (and the capture twin's in ``headline``). Returns
    ``predict.HEADLINE_KEYS``."""
    return calibrated_prediction(cached_calibration(device, batch), steps_per_graph, headline,
                                 figures)


def measured_costs() -> GraphCosts:
    """``predict --calibrate``: the constants measured now on the current CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise NoCudaError("--calibrate needs a CUDA device (torch.cuda.is_available() is False)",
                          "pass --launch-us and --per-node-us measured on the GPU you will use")
    return calibrate(torch.device("cuda", torch.cuda.current_device())).costs


def _measure_graph_costs(torch: Any, device: Any, node_counts: Sequence[int],
                         replays: int) -> tuple[GraphFit, Any]:
    """The graph costs fitted from timed replays and one profiled window, and the first (one-node)
    graph with its tensor (``_trivial_graph``), kept for the batch copy's timing."""
    from profiler_core.engine.profiling import profile_window
    from profiler_core.timing.trials import CudaClock, Mode

    clock = CudaClock(device)
    hold = getattr(torch.cuda, "_sleep", None)
    held = "queued behind a held GPU (torch.cuda._sleep)" if hold else (
        "back to back (this PyTorch has no torch.cuda._sleep to hold the GPU, so the host's "
        "launch time may be included)")
    elements = _calibration_elements(torch, device)
    graphs = [_trivial_graph(torch, device, count, elements) for count in node_counts]
    timed = [max(1, min(replays, CALIBRATION_TIMED_NODES // count)) for count in node_counts]
    replay_us = []
    for (graph, _), count in zip(graphs, timed):
        for _ in range(CALIBRATION_UNTIMED_REPLAYS):
            graph.replay()
        replay_us.append(_held_mean_us(graph.replay, count, clock, hold))
    # One profiled window for all graphs (the profiler's start and export cost most of the
    # calibration's time): iterations 0..P-1 replay the first graph, P..2P-1 the second, ...
    profiled = CALIBRATION_PROFILED_REPLAYS
    replays_in_turn = [graph for graph, _ in graphs]
    with tempfile.TemporaryDirectory(prefix="profiler_core-calibration-") as folder:
        window = profile_window(
            Mode("calibration", 1, lambda i: replays_in_turn[i // profiled].replay()),
            profiled * len(graphs), device, Path(folder) / "trace_calibration.json")
    split = window.analysis.launch_split.sort_values("iteration")
    per_graph = split["gpu_busy_us"].groupby(split["iteration"].to_numpy() // profiled).median()
    busy_us = [float(per_graph.get(index, math.nan)) for index in range(len(graphs))]
    recorded = all(math.isfinite(busy) and busy > 0 for busy in busy_us)
    subtracted = busy_us if recorded else [0.0] * len(busy_us)
    launch_us, per_node_us = fit_graph_costs(
        node_counts, [replay - busy for replay, busy in zip(replay_us, subtracted)])
    fit = GraphFit(launch_us=launch_us, per_node_us=per_node_us,
                   node_counts=tuple(int(c) for c in node_counts), timed=tuple(timed),
                   replay_us=tuple(replay_us), busy_us=tuple(busy_us), recorded=recorded,
                   elements=elements, held=held, device_name=str(torch.cuda.get_device_name(device)),
                   measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    return fit, graphs[0]


def _with_batch_copy(torch: Any, device: Any, fit: GraphFit, single: tuple[Any, Any],
                     batch: Sequence[Any], started: float, source: str,
                     cache_file: Path | None = None) -> Calibration:
    """The calibration from the graph costs ``fit`` and the batch copy timed now: a loop copies
    a batch, then replays, so what a one-node replay (``single``: the graph and its tensor) adds
    after a copy beyond the copy and its own node is the launch cost when larger than the fitted
    intercept."""
    from profiler_core.timing.trials import CudaClock

    clock = CudaClock(device)
    hold = getattr(torch.cuda, "_sleep", None)
    launch_us, copy_us = fit.launch_us, math.nan
    from profiler_core.engine.batches import tensors as tensors_of

    many = bool(batch) and all(isinstance(item, (tuple, list)) for item in batch)
    batches = [list(tensors_of(item)) for item in batch] if many else [list(tensors_of(tuple(batch)))]
    batches = [tensors for tensors in batches if tensors]
    if batches:
        targets = [torch.empty_like(tensor) for tensor in batches[0]]
        turn = [0]

        def copy_batch() -> None:
            tensors = batches[turn[0] % len(batches)]
            turn[0] += 1
            for target, tensor in zip(targets, tensors):
                target.copy_(tensor)

        copy_batch()
        copy_us = _held_mean_us(copy_batch, CALIBRATION_COPIES, clock, hold)

        def copy_then_replay() -> None:
            copy_batch()
            single[0].replay()

        after_copy_us = _held_mean_us(copy_then_replay, CALIBRATION_COPIES, clock, hold)
        after_copy_launch = (after_copy_us - copy_us - fit.busy_us[0] * (1.0 if fit.recorded else 0.0)
                             - fit.per_node_us * fit.node_counts[0])
        if math.isfinite(after_copy_launch) and after_copy_launch > launch_us:
            launch_us = after_copy_launch
    where = ("in this process" if cache_file is None else
             f"at {fit.measured_at}, read from the calibration cache {cache_file} (the batch copy "
             "timed in this process)")
    costs = GraphCosts(launch_us, fit.per_node_us,
                       f"measured on {fit.device_name} {where}: {_method(fit)}")
    return Calibration(costs=costs, node_counts=fit.node_counts, replay_us=fit.replay_us,
                       busy_us=fit.busy_us, copy_us=copy_us,
                       wall_ms=(time.perf_counter() - started) * 1e3, source=source,
                       measured_at=fit.measured_at)


def _method(fit: GraphFit) -> str:
    minus = (f"minus their kernels' busy time from torch.profiler ({CALIBRATION_PROFILED_REPLAYS} "
             "replays each)" if fit.recorded else
             "with nothing subtracted: torch.profiler recorded none of their kernels, so the "
             "per-node cost includes a one-element kernel's own run time and is overstated")
    return (f"CUDA events around {'/'.join(str(t) for t in fit.timed)} replays of graphs of "
            f"{'/'.join(str(c) for c in fit.node_counts)} dependent add kernels over "
            f"{fit.elements:,} elements (enough to fill every SM), {fit.held}, {minus}; "
            "least-squares line: per node = slope; launch = the larger of the intercept and "
            "what a one-node replay adds after a batch copy, as a loop runs it")


def _calibration_elements(torch: Any, device: Any) -> int:
    """Elements of the calibration kernels' tensor: 64 Ki per SM, so each add fills the GPU as a
    training step's kernels do (one-element adds leave far smaller gaps between graph nodes than
    real steps' kernels: docs/h200-history.md)."""
    return int(torch.cuda.get_device_properties(device).multi_processor_count) * 65536


def _trivial_graph(torch: Any, device: Any, kernels: int, elements: int = 1) -> tuple[Any, Any]:
    """A graph of ``kernels`` dependent adds over ``elements`` values, and the tensor it reads
    and writes (kept alive beside it). Warmed up on a side stream before capture, as PyTorch
    advises."""
    value = torch.zeros(elements, device=device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            value.add_(1.0)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            value.add_(1.0)
    return graph, value


def _held_mean_us(action: Callable[[], None], count: int, clock: Any,
                  hold: Callable[[int], None] | None) -> float:
    """Device time of ``action`` per call, in microseconds: ``timing.held_mean_ms`` behind a GPU
    held for ``CALIBRATION_HOLD_CYCLES`` (when ``hold`` exists)."""
    from profiler_core.timing.trials import held_mean_ms

    hold_device = (lambda: hold(CALIBRATION_HOLD_CYCLES)) if hold is not None else None
    return held_mean_ms(action, count, clock, hold_device) * 1e3



# The run that ships with the dashboard: its recorded calibration is the constants ``predict``
# uses where this machine's calibration cache has none for its GPU.
SAMPLE_RUN = Path(__file__).resolve().parents[2] / "dashboard" / "sample_run"


def default_costs(sample_run: Path | None = None, cache: CalibrationCache | None = None) -> GraphCosts:
    """``predict`` without constants or ``--calibrate``: the graph costs this machine's
    calibration cache holds for its current CUDA device (GPU, driver, torch and CUDA), else the
    calibration recorded with the bundled sample run; each says which it is, and when and where
    it was measured. ``ConfigError`` when there is neither."""
    cached = _cached_costs(cache if cache is not None else CalibrationCache(cache_path()))
    if cached is not None:
        return cached
    sample_run = SAMPLE_RUN if sample_run is None else sample_run
    recorded = sample_costs(sample_run)
    if recorded is None:
        raise ConfigError("launch_us", "no constants to predict with: this machine's calibration "
                          f"cache has none for its GPU and the bundled sample run ({sample_run}) "
                          "is missing or records none", OPTION_HINT)
    return recorded


def sample_costs(sample_run: Path = SAMPLE_RUN) -> GraphCosts | None:
    """The launch and per-node costs recorded by the run in ``sample_run`` (its in-run
    calibration), named with its GPU and date; None when it has none or cannot be read."""
    from profiler_core.storage.runfolder import read_summary

    try:
        summary = read_summary(sample_run)
    except ProfilerError:
        return None
    head, env = summary.headline, summary.environment
    launch, per_node = head.get("prediction_launch_us"), head.get("prediction_per_node_us")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               and 0 <= v <= MAX_CONSTANT_US for v in (launch, per_node)):
        return None
    gpu = str(env.get("gpu_name") or "its GPU")
    when = str(env.get("started_at") or "")[:10] or "an unrecorded date"
    return GraphCosts(float(launch), float(per_node),  # type: ignore[arg-type]  # checked above
                      f"the calibration recorded with the bundled sample run ({sample_run}: "
                      f"{gpu}, {when}), as this machine's calibration cache holds none for a GPU "
                      "here; --calibrate on the GPU you will use measures its own")


def _cached_costs(cache: CalibrationCache) -> GraphCosts | None:
    """The cached graph costs for this machine's current CUDA device; None without a cache
    file, a CUDA device, a driver version or an entry (torch is imported only when the file
    exists)."""
    if not cache.path.is_file():
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    device = torch.device("cuda", torch.cuda.current_device())
    key = cache_key(torch, device)
    fit = cache.read(key, CALIBRATION_NODE_COUNTS) if key is not None else None
    if fit is None:
        return None
    return GraphCosts(fit.launch_us, fit.per_node_us,
                      f"this machine's calibration cache ({cache.path}): measured on "
                      f"{fit.device_name} at {fit.measured_at} with this driver, torch and CUDA; "
                      "launch is the fitted intercept (a run's own calibration also times the "
                      "replay after a batch copy, which can raise it)")
