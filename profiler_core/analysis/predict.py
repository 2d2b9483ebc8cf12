"""Prediction before capture: a step's CUDA-graph time per training step, and so its speedup,
from an eager profiled window alone (the model: docs/how-it-measures.md#prediction-before-capture).

Scope: the model ``graph_us = gpu_busy_us + (launch_us + copy_us) / S + per_node_us * kernels``
per training step (S steps per graph), its fit from calibration timings, and the prediction from a
trace (``python -m profiler_core predict``) or from a run's headline (every run, every sweep
point). Pure: the calibration that measures the constants on a GPU is ``engine.calibration``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.analysis.figures import Figures
from profiler_core.analysis.trace import (
    API_NAME_SUFFIX_PATTERN,
    GRAPH_LAUNCH_API_NAMES,
    TraceAnalysis,
    analyse_trace,
    cut_iterations,
)
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.spec.errors import ConfigError, RunFormatError, shown
from profiler_core.spec.progress import ProgressCallback

MAX_CONSTANT_US = 1e6  # largest launch, per-node or copy cost accepted (one second)
MAX_STEPS_PER_ITERATION = 1_000_000

# Headline keys written by every CUDA run that profiled
# (``engine.calibration.calibrate_and_predict``).
HEADLINE_KEYS = (
    "prediction_launch_us", "prediction_per_node_us", "prediction_copy_us",
    "prediction_steps_per_graph", "prediction_constants_method", "prediction_calibration_ms",
    "prediction_node_counts", "prediction_replay_us", "prediction_replay_busy_us",
    "predicted_graph_ms", "predicted_speedup", "prediction_error_pct",
    "predicted_speedup_error_pct", "prediction_calibration_source", "prediction_calibrated_at",
)
# What ``prediction_from_headline`` returns.
PREDICTION_KEYS = ("predicted_graph_ms", "predicted_speedup", "prediction_error_pct",
                   "predicted_speedup_error_pct")

OPTION_HINT = "measure them on your GPU with --calibrate, or pass --launch-us and --per-node-us"


@dataclass(frozen=True)
class GraphCosts:
    """What a replay adds on the GPU beyond its kernels' own run time (microseconds)."""

    launch_us: float  # once per graph replay
    per_node_us: float  # per kernel node
    source: str  # how they were obtained, shown beside every prediction

    def fixed(self) -> GraphCosts:
        """These costs, as a source of constants that measures nothing."""
        return self


@dataclass(frozen=True)
class Calibration:
    """One calibration on a GPU: the fitted costs and the timings they came from."""

    costs: GraphCosts
    node_counts: tuple[int, ...]  # kernels per calibration graph
    replay_us: tuple[float, ...]  # CUDA events: time per replay, back to back
    busy_us: tuple[float, ...]  # torch.profiler: the kernels' busy time per replay
    copy_us: float  # one copy of the batch into static inputs; NaN without a batch
    wall_ms: float  # how long the calibration took
    source: str = "measured"  # "measured" in this process, or "cached" (the graph costs)
    measured_at: str = ""  # when the graph costs were measured (ISO 8601, UTC)


@dataclass(frozen=True)
class EagerStep:
    """What the prediction reads from an eager profiled window, per training step (medians)."""

    gpu_busy_us: float
    kernels: float
    span_us: float  # the iteration's span per step (profiled eager time)
    iterations: int  # iterations in the window
    steps_per_iteration: int
    iteration_source: str  # as in ``TraceAnalysis``


@dataclass(frozen=True)
class Prediction:
    """A predicted graph time per training step and its parts (microseconds)."""

    graph_us: float
    busy_us: float
    launch_us: float  # the launch cost's share of one step
    nodes_us: float  # per-node cost x kernels
    copy_us: float  # the batch copy's share of one step; 0 when not included
    copy_included: bool


def fit_graph_costs(node_counts: Sequence[float], overhead_us: Sequence[float]) -> tuple[float, float]:
    """(launch_us, per_node_us): the least-squares line through (kernels, replay time minus busy
    time) over the calibration graphs. Needs two distinct finite node counts and finite times."""
    counts = np.asarray(node_counts, dtype="float64")
    overhead = np.asarray(overhead_us, dtype="float64")
    if counts.shape != overhead.shape or len(np.unique(counts)) < 2:
        raise ValueError("the fit needs timings for at least two distinct node counts")
    if not (np.isfinite(counts).all() and np.isfinite(overhead).all()):
        raise ValueError("the fit needs finite node counts and timings")
    per_node_us, launch_us = np.polyfit(counts, overhead, 1)
    return float(launch_us), float(per_node_us)


def predict_graph(step: EagerStep, costs: GraphCosts, steps_per_graph: int = 1,
                  copy_us: float = math.nan) -> Prediction:
    """The model (module docstring) for one eager step; ``copy_us`` is per replay (NaN: left out)."""
    copy_included = math.isfinite(copy_us)
    launch_share = costs.launch_us / steps_per_graph
    copy_share = copy_us / steps_per_graph if copy_included else 0.0
    nodes_us = costs.per_node_us * step.kernels
    return Prediction(graph_us=step.gpu_busy_us + launch_share + nodes_us + copy_share,
                      busy_us=step.gpu_busy_us, launch_us=launch_share, nodes_us=nodes_us,
                      copy_us=copy_share, copy_included=copy_included)


def eager_step_from_analysis(analysis: TraceAnalysis, steps_per_iteration: int | None = None,
                             where: str = "the trace") -> EagerStep:
    """The per-step medians of an analysed eager window (``steps_per_iteration`` training steps
    in each iteration; None: one, and not given). A window that cannot be one (no iterations,
    graph replays, no GPU kernels, a whole trace without a step count) is refused."""
    split = analysis.launch_split
    if split.empty:
        raise RunFormatError(f"{where} holds no events to analyse (no complete 'X' events with a "
                             "timestamp)", "export the trace after the profiled steps ran, with "
                                           "prof.export_chrome_trace(path)")
    if any(API_NAME_SUFFIX_PATTERN.sub("", name) in GRAPH_LAUNCH_API_NAMES
           for name in analysis.launch_api_names):
        raise RunFormatError(f"{where} holds CUDA graph replays (cudaGraphLaunch), not an eager "
                             "window", "profile the step without CUDA graphs: the prediction is "
                                       "for a step not yet captured")
    medians = analysis.summary()
    if not medians["kernels"] > 0:
        raise RunFormatError(f"{where} holds no GPU kernels in its iterations (a CPU-only "
                             "profile?)", "profile with activities=[ProfilerActivity.CPU, "
                                          "ProfilerActivity.CUDA] on a GPU")
    if analysis.iteration_source == "whole_trace" and steps_per_iteration is None:
        raise RunFormatError(f"{where} has no ProfilerStep# markers, so its training steps cannot "
                             "be told apart", "profile with a schedule and call prof.step() each "
                                              "step, or pass --steps-per-iteration with the "
                                              "number of steps the trace holds")
    steps_per_iteration = steps_per_iteration or 1
    return EagerStep(gpu_busy_us=medians["gpu_busy_us"] / steps_per_iteration,
                     kernels=medians["kernels"] / steps_per_iteration,
                     span_us=medians["span_us"] / steps_per_iteration,
                     iterations=len(split), steps_per_iteration=steps_per_iteration,
                     iteration_source=analysis.iteration_source)


# torch.optim marks each optimizer step in a profiled trace ("Optimizer.step#AdamW.step"). Adam
# and AdamW are captured only with capturable=True, which computes their bias corrections on the
# GPU (torch.pow of the step count there): an eager step without that ran fewer kernels than the
# graph will.
OPTIMIZER_MARK = "Optimizer.step#"
CAPTURABLE_ONLY = ("Adam", "AdamW")
DEVICE_STEP_OPS = ("aten::pow", "aten::_foreach_pow")
# What that leaves out, as measured on a GPU (the capturable twin against the eager window of the
# same steps): the note quotes the measurement with its source.
CAPTURABLE_MEASURED = ("on an H200 (2026-12-01, docs/h200-2026-12-01.md) the capturable AdamW "
                       "ran 37 more kernels and 187 us more GPU time per step than the eager "
                       "one in a 6-layer MLP step, 122 kernels and 201 us in a 4-layer "
                       "transformer's")


@dataclass(frozen=True)
class OptimizerStep:
    """The optimizer's part of an eager trace, per training step (medians over iterations)."""

    name: str  # as torch.optim names it: "AdamW", "SGD"...
    capturable: bool  # it ran its step count's arithmetic on the GPU
    kernels: float  # kernels launched inside its steps
    busy_us: float  # their summed run time

    @property
    def misses_kernels(self) -> bool:
        """Whether a graph of this step runs optimizer kernels the trace lacks."""
        return self.name in CAPTURABLE_ONLY and not self.capturable


def optimizer_step(trace: Any, steps_per_iteration: int = 1) -> OptimizerStep | None:
    """The trace's optimizer steps (``OPTIMIZER_MARK``): its name, whether it is capturable, and
    its kernels per training step (those whose launch call starts inside a step's mark); None
    when the trace marks none."""
    events, _, gpu_events, _, _ = cut_iterations(trace)
    names = events["name"].astype(str)
    marks = events[names.str.startswith(OPTIMIZER_MARK).to_numpy()
                   & (events["cat"].astype(str) == "user_annotation").to_numpy()]
    if marks.empty:
        return None
    name = str(marks["name"].iloc[0])[len(OPTIMIZER_MARK):].split(".")[0]
    starts, ends = marks["ts"].to_numpy(dtype=float), marks["end"].to_numpy(dtype=float)

    def inside(times: np.ndarray) -> np.ndarray:
        return ((times[:, None] >= starts[None, :]) & (times[:, None] <= ends[None, :])).any(axis=1)

    ops = events[names.isin(DEVICE_STEP_OPS).to_numpy()]
    capturable = bool(len(ops) and inside(ops["ts"].to_numpy(dtype=float)).any())
    kernels = gpu_events[(gpu_events["cat"].astype(str) == "kernel").to_numpy()
                         & (gpu_events["iteration"] >= 0).to_numpy()]
    mine = kernels[inside(kernels["call_ts"].to_numpy(dtype=float))] if len(kernels) else kernels
    iterations = max(1, int(gpu_events.loc[gpu_events["iteration"] >= 0, "iteration"].nunique()))
    per_iteration = mine.groupby("iteration")["dur"].agg(["size", "sum"]) if len(mine) else None
    if per_iteration is None:
        count = busy = 0.0
    else:
        per_iteration = per_iteration.reindex(range(iterations), fill_value=0)
        count, busy = float(per_iteration["size"].median()), float(per_iteration["sum"].median())
    return OptimizerStep(name, capturable, count / steps_per_iteration, busy / steps_per_iteration)


def check_constant(field: str, value: float | None) -> None:
    """A constant given on the command line: finite, from 0 to ``MAX_CONSTANT_US``."""
    if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_CONSTANT_US):
        raise ConfigError(field, f"must be a number of microseconds from 0 to {MAX_CONSTANT_US:g}; "
                                 f"got {shown(value)}", OPTION_HINT)


def given_costs(launch_us: float | None, per_node_us: float | None) -> GraphCosts | None:
    """The constants given on the command line: both options, or neither (None: the defaults,
    ``engine.calibration.default_costs``)."""
    check_constant("launch_us", launch_us)
    check_constant("per_node_us", per_node_us)
    if launch_us is not None and per_node_us is not None:
        return GraphCosts(launch_us, per_node_us, "given on the command line")
    if (launch_us is None) != (per_node_us is None):
        missing = "launch_us" if launch_us is None else "per_node_us"
        raise ConfigError(missing, "pass --launch-us and --per-node-us together",
                          "or use --calibrate to measure both on this GPU")
    return None


# ------------------------------------------------------------------------------ a run's headline


def calibrated_prediction(calibration: Calibration, steps_per_graph: int,
                          headline: dict[str, Any], figures: Figures) -> dict[str, Any]:
    """``engine.calibration.calibrate_and_predict`` once calibrated: the calibration's constants
    (and whether they were measured or cached, and when) and the prediction from ``headline``
    and ``figures`` (pure)."""
    constants = {
        "prediction_launch_us": calibration.costs.launch_us,
        "prediction_per_node_us": calibration.costs.per_node_us,
        "prediction_copy_us": calibration.copy_us,
        "prediction_steps_per_graph": int(steps_per_graph),
        "prediction_constants_method": calibration.costs.source,
        "prediction_calibration_ms": calibration.wall_ms,
        "prediction_calibration_source": calibration.source,
        "prediction_calibrated_at": calibration.measured_at,
        "prediction_node_counts": list(calibration.node_counts),
        "prediction_replay_us": list(calibration.replay_us),
        "prediction_replay_busy_us": list(calibration.busy_us),
    }
    return {**constants, **prediction_from_headline({**headline, **constants}, figures)}


def prediction_from_headline(headline: dict[str, Any], figures: Figures) -> dict[str, float]:
    """The prediction and its errors from a run's headline and figures alone (``PREDICTION_KEYS``;
    NaN where the run lacks the eager window or the constants). Pure: for sweeps, per point.

    Reads eager's ``gpu_busy_us`` and ``kernels`` (the eager window, per step; the capturable
    twin's ``capture_twin_gpu_busy_us`` and ``capture_twin_kernels`` of the headline instead where
    the run has them), the headline's ``prediction_launch_us``, ``prediction_per_node_us``,
    ``prediction_copy_us`` and ``prediction_steps_per_graph`` (the calibration), and eager's and
    the graph's ``median_ms`` (measured). Errors are (predicted - measured) / measured in percent.
    """
    number = _numbers(headline)
    steps_per_graph = number("prediction_steps_per_graph")
    if not (steps_per_graph >= 1):
        steps_per_graph = 1.0
    twin_busy, twin_kernels = number("capture_twin_gpu_busy_us"), number("capture_twin_kernels")
    busy, kernels = ((twin_busy, twin_kernels) if math.isfinite(twin_busy) and twin_busy > 0
                     and math.isfinite(twin_kernels) else
                     (figures.get("eager", "gpu_busy_us"), figures.get("eager", "kernels")))
    step = EagerStep(gpu_busy_us=busy, kernels=kernels,
                     span_us=math.nan, iterations=0, steps_per_iteration=1,
                     iteration_source="headline")
    costs = GraphCosts(number("prediction_launch_us"), number("prediction_per_node_us"), "headline")
    predicted_ms = predict_graph(step, costs, int(steps_per_graph),
                                 number("prediction_copy_us")).graph_us / 1e3
    eager_ms, graph_ms = figures.get("eager", "median_ms"), figures.get("graph", "median_ms")
    predicted_speedup = eager_ms / predicted_ms if predicted_ms > 0 else math.nan
    measured_speedup = eager_ms / graph_ms if graph_ms > 0 else math.nan
    return {
        "predicted_graph_ms": predicted_ms,
        "predicted_speedup": predicted_speedup,
        "prediction_error_pct": _error_pct(predicted_ms, graph_ms),
        "predicted_speedup_error_pct": _error_pct(predicted_speedup, measured_speedup),
    }


PREDICTION_TABLE_COLUMNS = ["quantity", "predicted", "measured", "error_pct", "unit"]
CONSTANTS_TABLE_COLUMNS = ["quantity", "value", "unit"]


def has_prediction(headline: Mapping[str, Any]) -> bool:
    """Whether a run's headline holds a prediction (CUDA runs with a profiled eager window)."""
    value = headline.get("predicted_graph_ms")
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def prediction_table(headline: dict[str, Any], figures: Figures) -> pd.DataFrame:
    """Predicted against measured, graph time per step and speedup, with the error in percent
    of the measurement (PREDICTION_TABLE_COLUMNS; empty without a prediction)."""
    if not has_prediction(headline):
        return pd.DataFrame(columns=PREDICTION_TABLE_COLUMNS)
    number = _numbers(headline)
    rows = [("graph time per step", number("predicted_graph_ms"), figures.get("graph", "median_ms"),
             number("prediction_error_pct"), "ms"),
            ("speedup", number("predicted_speedup"), figures.get("graph", "speedup"),
             number("predicted_speedup_error_pct"), "x")]
    return pd.DataFrame(rows, columns=PREDICTION_TABLE_COLUMNS)


def constants_table(headline: dict[str, Any], figures: Figures) -> pd.DataFrame:
    """What the prediction used: the eager window's figures and the calibrated constants
    (CONSTANTS_TABLE_COLUMNS; empty without a prediction)."""
    if not has_prediction(headline):
        return pd.DataFrame(columns=CONSTANTS_TABLE_COLUMNS)
    number = _numbers(headline)
    rows = [("eager GPU busy per step", figures.get("eager", "gpu_busy_us"), "us"),
            ("eager kernels per step", figures.get("eager", "kernels"), "kernels"),
            ("launch cost per graph replay", number("prediction_launch_us"), "us"),
            ("cost per kernel node", number("prediction_per_node_us"), "us"),
            ("batch copy per replay", number("prediction_copy_us"), "us"),
            ("training steps per graph", number("prediction_steps_per_graph"), "steps"),
            ("calibration time", number("prediction_calibration_ms"), "ms")]
    return pd.DataFrame(rows, columns=CONSTANTS_TABLE_COLUMNS)


PARTS_COLUMNS = ["bar", "part", "us"]


def prediction_parts(headline: dict[str, Any], figures: Figures) -> pd.DataFrame:
    """The predicted graph time per step in its parts beside the measured one, for drawing
    (PARTS_COLUMNS, microseconds per training step; empty without a prediction). Bar
    "predicted": "GPU busy (eager)", "launch", "per-node cost", "batch copy"; bar "measured":
    "graph, steady state"."""
    if not has_prediction(headline):
        return pd.DataFrame(columns=PARTS_COLUMNS)
    number = _numbers(headline)
    steps = number("prediction_steps_per_graph")
    steps = steps if steps >= 1 else 1.0
    copy_us = number("prediction_copy_us")
    rows = [("predicted", "GPU busy (eager)", figures.get("eager", "gpu_busy_us")),
            ("predicted", "launch", number("prediction_launch_us") / steps),
            ("predicted", "per-node cost",
             number("prediction_per_node_us") * figures.get("eager", "kernels")),
            ("predicted", "batch copy", copy_us / steps if math.isfinite(copy_us) else 0.0),
            ("measured", "graph, steady state", figures.get("graph", "median_ms") * 1e3)]
    return pd.DataFrame(rows, columns=PARTS_COLUMNS)


def _numbers(headline: dict[str, Any]) -> Callable[[str], float]:
    """A reader of the headline's numbers: NaN for what is missing or not a number."""
    def number(key: str) -> float:
        value = headline.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return math.nan
        return float(value)
    return number


def headline_lines(headline: Mapping[str, Any], figures: Figures) -> list[str]:
    """The prediction against the measurement, for a run's text summary (nothing when the run
    has no prediction: no profiled eager window, or not a CUDA run)."""
    if not has_prediction(headline):
        return []
    predicted = headline["predicted_graph_ms"]
    copy_us = headline.get("prediction_copy_us", math.nan)
    copy = f"batch copy {copy_us:.2f} us" if math.isfinite(copy_us) else "batch copy not timed"
    return [
        f"Predicted before capture: graph {predicted:.4f} ms per step, measured "
        f"{figures.get('graph', 'median_ms'):.4f} ms ({headline['prediction_error_pct']:+.1f}%); "
        f"speedup {headline['predicted_speedup']:.2f}x, measured {figures.get('graph', 'speedup'):.2f}x "
        f"({headline['predicted_speedup_error_pct']:+.1f}%)",
        f"  from the eager window's GPU busy {figures.get('eager', 'gpu_busy_us'):.1f} us and "
        f"{figures.get('eager', 'kernels'):g} kernels per step; launch {headline['prediction_launch_us']:.2f} "
        f"us, {headline['prediction_per_node_us']:.3f} us per node, {copy}, per replay of "
        f"{headline['prediction_steps_per_graph']} step(s); constants "
        f"{headline['prediction_constants_method']}",
    ]


def _error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100 if measured and math.isfinite(measured) else math.nan


# ------------------------------------------------------------------------------ the command


def check_count(field: str, value: int | None) -> None:
    """A step count given on the command line: a whole number from 1 to
    ``MAX_STEPS_PER_ITERATION``."""
    if value is not None and not 1 <= value <= MAX_STEPS_PER_ITERATION:
        raise ConfigError(field, f"must be a whole number from 1 to {MAX_STEPS_PER_ITERATION:,}; "
                                 f"got {value:,}", "a number of training steps, such as 1")


def trace_report(path: str | Path, launch_us: float | None = None,
                 per_node_us: float | None = None,
                 calibrate_here: Callable[[], GraphCosts] | None = None,
                 steps_per_iteration: int | None = None, steps_per_graph: int = 1,
                 copy_us: float | None = None, eager_ms: float | None = None,
                 progress: ProgressCallback | None = None,
                 defaults: Callable[[], GraphCosts] | None = None) -> str:
    """``python -m profiler_core predict``: options checked, then the trace read (refused in
    one line when it cannot be an eager window; ``progress`` hears how the reading goes), then
    the constants (given; measured here by ``calibrate_here``: ``engine.calibration
    .measured_costs``; else ``defaults``: ``engine.calibration.default_costs``, this machine's
    calibration cache or the bundled sample's recorded calibration), then the report."""
    check_count("steps_per_iteration", steps_per_iteration)
    check_count("steps_per_graph", steps_per_graph)
    check_constant("copy_us", copy_us)
    if eager_ms is not None and not (math.isfinite(eager_ms) and 0 < eager_ms <= MAX_CONSTANT_US):
        raise ConfigError("eager_ms", f"must be a positive number of milliseconds up to "
                                      f"{MAX_CONSTANT_US:g}; got {shown(eager_ms)}",
                          "give your eager step's measured time, unprofiled")
    if calibrate_here is not None and (launch_us is not None or per_node_us is not None):
        raise ConfigError("calibrate", "--calibrate measures the constants, so it cannot be "
                                       "combined with --launch-us or --per-node-us",
                          "use one or the other")
    # the constants' options refused before the trace is read
    given = given_costs(launch_us, per_node_us) if calibrate_here is None else None
    constants = calibrate_here or (given.fixed if given is not None else defaults)
    if constants is None:
        raise ConfigError("launch_us", "no constants to predict with", OPTION_HINT)
    trace = load_trace(path, progress)
    step = eager_step_from_analysis(analyse_trace(trace, mode="eager"), steps_per_iteration,
                                    f"trace {shown(path)}")
    optimizer = optimizer_step(trace, step.steps_per_iteration)
    costs = constants()
    prediction = predict_graph(step, costs, steps_per_graph,
                               math.nan if copy_us is None else copy_us)
    if eager_ms is not None:
        eager_us, eager_source = eager_ms * 1e3, "given with --eager-ms"
    else:
        eager_us, eager_source = step.span_us, (
            "the trace's median iteration span: profiled, so slower than your loop runs; pass "
            "--eager-ms with the unprofiled time")
    return format_prediction(step, prediction, costs, eager_us, eager_source, shown(path),
                             optimizer)


# ------------------------------------------------------------------------------ the report


def format_prediction(step: EagerStep, prediction: Prediction, costs: GraphCosts,
                      eager_us: float, eager_source: str, where: str,
                      optimizer: OptimizerStep | None = None) -> str:
    """The ``predict`` command's report: inputs, constants (with their source), the parts of the
    predicted graph time per step, the predicted speedup, and what the model leaves out (a
    non-capturable Adam or AdamW's extra kernels, when ``optimizer`` is one)."""
    source = {"profiler_steps": "its ProfilerStep# markers",
              "whole_trace": "the whole trace (no ProfilerStep# markers)"}.get(
        step.iteration_source, step.iteration_source)
    copy_line = (f"  + batch copy           {prediction.copy_us:>10.2f} us" if prediction.copy_included
                 else "  + batch copy                 n/a    (not included: pass --copy-us)")
    speedup = eager_us / prediction.graph_us if prediction.graph_us > 0 else math.nan
    left_out = [] if optimizer is None or not optimizer.misses_kernels else [
        "",
        f"Left out: this trace's {optimizer.name} is not capturable (its steps ran "
        f"{optimizer.kernels:g} kernels, {optimizer.busy_us:.1f} us of GPU time per training "
        "step, with the step count's arithmetic on the host). A graph captures it only with "
        "capturable=True, which runs more kernels on the GPU than this trace holds, so the "
        "graph will be slower than predicted: " + CAPTURABLE_MEASURED + ". To include them, "
        "profile the step with capturable=True and predict from that trace.",
    ]
    return "\n".join([
        f"Prediction before capture, from the eager trace {where}",
        f"Iterations: {step.iterations}, from {source}; {step.steps_per_iteration} training "
        "step(s) per iteration",
        f"Constants: launch {costs.launch_us:.4g} us per graph, {costs.per_node_us:.4g} us per "
        f"node ({costs.source})",
        "",
        "Predicted graph time per training step:",
        f"    GPU busy (eager)     {prediction.busy_us:>10.2f} us",
        f"  + launch               {prediction.launch_us:>10.2f} us",
        f"  + nodes                {prediction.nodes_us:>10.2f} us ({step.kernels:g} kernels x "
        f"{costs.per_node_us:.4g} us)",
        copy_line,
        f"  = graph                {prediction.graph_us:>10.2f} us",
        f"Eager time per step:     {eager_us:>10.2f} us ({eager_source})",
        f"Predicted speedup:       {speedup:>10.2f}x",
        "",
        "The model assumes the GPU is the bottleneck once graphed: a replay also costs the host "
        "about 10-25 us, so a step with less GPU work than that will be slower than predicted.",
        *left_out,
    ])
