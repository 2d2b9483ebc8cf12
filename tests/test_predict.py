"""Prediction before capture (issue 12): the fit of the calibration constants, the prediction on
the recorded H200 traces and the bundled sample run, the ``predict`` command (good and bad
traces), the headline keys through save and load, the run's text summary and the Overview; and,
on a GPU, the calibration and real runs with predicted against measured printed."""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import stored_figures

from profiler_core.analysis import metrics, predict
from profiler_core.analysis.figures import Figures
from profiler_core.analysis.trace import analyse_trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.cli.main import format_summary, main
from profiler_core.engine import calibration as engine_calibration
from profiler_core.storage.results import RunResult, coerce_table

ROOT = Path(__file__).resolve().parent.parent
LAUNCH_BOUND = ROOT / "tests" / "data" / "h200_launch_bound"
# The H200 sample run recorded before prediction existed (schema 2): its eager window and medians
SAMPLE = ROOT / "tests" / "data" / "h200_schema2_sample"
# Today's bundled sample, recorded with a prediction
RECORDED = ROOT / "dashboard" / "sample_run"
CONSTANTS = ["--launch-us", "3", "--per-node-us", "0.25"]


def _eager_step(path: Path, steps_per_iteration: int | None = None) -> predict.EagerStep:
    """An eager trace read and analysed as ``predict`` reads it."""
    analysis = analyse_trace(load_trace(path), mode="eager")
    return predict.eager_step_from_analysis(analysis, steps_per_iteration)


# ------------------------------------------------------------------------------ the fit


def test_the_fit_recovers_launch_and_per_node_costs_from_synthetic_timings():
    counts = np.array([1, 32, 256])
    rng = np.random.default_rng(0)
    overhead = 2.5 + 0.35 * counts + rng.normal(0, 0.01, counts.size)
    launch_us, per_node_us = predict.fit_graph_costs(counts, overhead)
    assert launch_us == pytest.approx(2.5, abs=0.05)
    assert per_node_us == pytest.approx(0.35, abs=0.001)
    # Two points: the line through them exactly.
    assert predict.fit_graph_costs([1, 256], [4.0, 259.0]) == pytest.approx((3.0, 1.0))


@pytest.mark.parametrize("counts, overhead", [([4, 4, 4], [1.0, 2.0, 3.0]), ([1], [2.0]),
                                              ([1, 2], [1.0, math.nan]), ([1, 2], [1.0])])
def test_the_fit_refuses_timings_it_cannot_fit(counts, overhead):
    with pytest.raises(ValueError):
        predict.fit_graph_costs(counts, overhead)


def test_the_model_adds_launch_and_copy_per_graph_and_a_cost_per_kernel():
    step = predict.EagerStep(gpu_busy_us=200.0, kernels=30, span_us=1500.0, iterations=4,
                             steps_per_iteration=1, iteration_source="profiler_steps")
    costs = predict.GraphCosts(4.0, 0.5, "test")
    one = predict.predict_graph(step, costs, 1, copy_us=10.0)
    assert one.graph_us == pytest.approx(200 + 4 + 10 + 15)
    assert (one.launch_us, one.nodes_us, one.copy_us, one.copy_included) == (4.0, 15.0, 10.0, True)
    four = predict.predict_graph(step, costs, 4)  # launch shared by 4 steps, no copy given
    assert four.graph_us == pytest.approx(200 + 1 + 15)
    assert four.copy_us == 0.0 and not four.copy_included


# ------------------------------------------------------------------------------ recorded traces


def test_the_eager_window_of_the_recorded_launch_bound_trace():
    step = _eager_step(LAUNCH_BOUND / "trace_eager.json.gz")
    assert step.gpu_busy_us == pytest.approx(61.74, abs=0.01)
    assert step.kernels == 21 and step.iterations == 4
    assert step.iteration_source == "profiler_steps"
    halved = _eager_step(LAUNCH_BOUND / "trace_eager.json.gz", 2)
    assert halved.gpu_busy_us == pytest.approx(step.gpu_busy_us / 2)
    assert halved.kernels == 10.5


def test_the_sample_run_prediction_reads_the_same_figures_the_run_recorded():
    headline = json.loads((SAMPLE / "summary.json").read_text())["headline"]
    step = _eager_step(SAMPLE / "trace_eager.json.gz")
    assert step.gpu_busy_us == pytest.approx(headline["eager_gpu_busy_us"])
    assert step.kernels == headline["eager_kernels"] == 29
    # The floor alone (no launch or node cost) plus the measured batch copy: the graph's
    # measured 0.2366 ms is 8.7% above it; the calibrated constants must account for the rest.
    floor = predict.prediction_from_headline({
        **headline, "prediction_launch_us": 0.0, "prediction_per_node_us": 0.0,
        "prediction_copy_us": headline["graph_input_copy_ms"] * 1e3,
        "prediction_steps_per_graph": 1}, stored_figures(headline))
    assert floor["predicted_graph_ms"] == pytest.approx(0.2161, abs=1e-4)
    assert floor["prediction_error_pct"] == pytest.approx(-8.70, abs=0.01)
    assert floor["predicted_speedup"] == pytest.approx(1.5926 / 0.2161, rel=1e-3)
    assert floor["predicted_speedup_error_pct"] == pytest.approx(9.53, abs=0.01)


def test_a_headline_without_the_eager_window_or_constants_predicts_nothing():
    headline = json.loads((SAMPLE / "summary.json").read_text())["headline"]
    assert all(math.isnan(v) for v in predict.prediction_from_headline(headline, stored_figures(headline)).values())
    assert all(math.isnan(v) for v in predict.prediction_from_headline({}, Figures({})).values())
    figures = stored_figures(headline)
    assert predict.prediction_table(headline, figures).empty
    assert list(predict.constants_table(headline, figures).columns) == predict.CONSTANTS_TABLE_COLUMNS
    assert predict.headline_lines(headline, figures) == []


# ------------------------------------------------------------------------------ the command


def _one_line_refusal(capsys, argv, *fragments, code=2) -> str:
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err and not captured.out
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def test_predict_command_on_the_recorded_eager_trace(capsys):
    assert main(["predict", str(LAUNCH_BOUND / "trace_eager.json.gz"), *CONSTANTS,
                 "--copy-us", "3.9", "--eager-ms", "1.016"]) == 0
    out = capsys.readouterr().out
    expected_us = 61.744 + 3 + 21 * 0.25 + 3.9
    assert re.search(rf"= graph +{expected_us:.2f} us", out)
    assert "21 kernels x 0.25 us" in out
    assert "(given on the command line)" in out
    assert re.search(rf"Predicted speedup: +{1016 / expected_us:.2f}x", out)
    assert "given with --eager-ms" in out


def test_predict_without_constants_uses_the_bundled_samples_calibration_and_says_so(
        capsys, tmp_path, monkeypatch):
    """Issue 28: `predict` said "H200 defaults (launch 1.08 us, 0.067 us per node)" and
    predicted 206.4 us while the sample's Overview used 9.347 us and 0.2554 us (measured) and
    predicted 231.2 us. The defaults are the bundled sample's recorded calibration (whatever
    sample is there), and with its batch copy `predict` gives the Overview's prediction."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))  # no calibration cache here
    head = RunResult.load(RECORDED).headline
    assert main(["predict", str(RECORDED / "trace_eager.json.gz"), "--eager-ms", "1.5",
                 "--copy-us", str(head["prediction_copy_us"])]) == 0
    out = capsys.readouterr().out
    launch, per_node = head["prediction_launch_us"], head["prediction_per_node_us"]
    assert (f"Constants: launch {launch:.4g} us per graph, {per_node:.4g} us per node (the "
            f"calibration recorded with the bundled sample run ({RECORDED}: ") in out
    assert "as this machine's calibration cache holds none for a GPU here" in out
    assert "H200 defaults" not in out and "1.08" not in out
    predicted = float(re.search(r"= graph +([0-9.]+) us", out).group(1))
    assert predicted == pytest.approx(head["predicted_graph_ms"] * 1e3, rel=0.002)


def test_predict_says_so_when_it_has_no_constants_at_all(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "no-cache"))
    monkeypatch.setattr(engine_calibration, "SAMPLE_RUN", tmp_path / "no-sample")
    _one_line_refusal(capsys, ["predict", str(LAUNCH_BOUND / "trace_eager.json.gz")],
                      "no constants to predict with", "--calibrate", code=2)


def test_predict_reads_this_gpus_calibration_cache_where_it_has_an_entry(tmp_path, monkeypatch):
    """With a GPU whose setup the cache holds (faked here: no GPU on CI), the cache's constants
    are used, and named with the file and when they were measured."""
    import torch

    from profiler_core.engine.calibration_cache import CalibrationCache, GraphFit

    key = {"gpu": "NVIDIA H200", "sms": "132", "driver": "580.1", "torch": "2.x", "cuda": "13.0"}
    fit = GraphFit(launch_us=1.5, per_node_us=0.3, node_counts=(1, 32, 256), timed=(100, 100, 25),
                   replay_us=(2.0, 11.0, 78.0), busy_us=(0.4, 0.4, 0.4), recorded=True,
                   elements=8_650_752, held="held", device_name="NVIDIA H200",
                   measured_at="2026-12-01T10:00:00+00:00")
    cache = CalibrationCache(tmp_path / "calibration.json")
    assert cache.write(key, fit)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(engine_calibration, "cache_key", lambda torch_, device: key)
    costs = engine_calibration.default_costs(cache=cache)
    assert (costs.launch_us, costs.per_node_us) == (1.5, 0.3)
    assert costs.source.startswith(f"this machine's calibration cache ({cache.path}): measured on "
                                   "NVIDIA H200 at 2026-12-01T10:00:00+00:00")
    other = CalibrationCache(tmp_path / "other.json")  # no entry for this GPU: the sample's
    assert other.write({**key, "driver": "575.0"}, fit)
    assert "bundled sample run" in engine_calibration.default_costs(cache=other).source


def _adamw_trace(path: Path, capturable: bool) -> Path:
    """Two eager steps of a model and an AdamW step (as torch.profiler marks it): 2 forward and
    backward kernels of 50 us, then the optimizer's 3 kernels of 4 us; a capturable one also
    runs aten::_foreach_pow on the device (its bias corrections)."""
    events, correlation = [], 0
    for step in range(2):
        base = step * 1000.0
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": base, "dur": 900})
        events.append({"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#AdamW.step",
                       "pid": 1, "tid": 1, "ts": base + 500, "dur": 300})
        if capturable:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_pow", "pid": 1,
                           "tid": 1, "ts": base + 510, "dur": 20})
        for start, dur in ((10, 50), (100, 50), (520, 4), (600, 4), (700, 4)):
            correlation += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                           "tid": 1, "ts": base + start, "dur": 5,
                           "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{start}", "pid": 0,
                           "tid": 7, "ts": base + start + 8, "dur": dur,
                           "args": {"correlation": correlation}})
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_predict_says_what_a_non_capturable_adamw_leaves_out(tmp_path, capsys):
    """Issue 28: on an eager trace of an AdamW step (not capturable, as users train) predict
    missed by -19.8%: the graphed twin's capturable optimizer runs kernels the trace lacks."""
    plain = _adamw_trace(tmp_path / "adamw.json", capturable=False)
    optimizer = predict.optimizer_step(predict.load_trace(plain))
    assert optimizer == predict.OptimizerStep("AdamW", False, 3.0, 12.0)
    assert optimizer.misses_kernels
    assert main(["predict", str(plain), *CONSTANTS]) == 0
    out = capsys.readouterr().out
    assert ("Left out: this trace's AdamW is not capturable (its steps ran 3 kernels, 12.0 us of "
            "GPU time per training step") in out
    assert "so the graph will be slower than predicted: " + predict.CAPTURABLE_MEASURED in out
    assert "profile the step with capturable=True and predict from that trace" in out
    capturable = _adamw_trace(tmp_path / "capturable.json", capturable=True)
    assert predict.optimizer_step(predict.load_trace(capturable)).capturable
    assert main(["predict", str(capturable), *CONSTANTS]) == 0
    assert "Left out" not in capsys.readouterr().out
    sgd = predict.optimizer_step(predict.load_trace(LAUNCH_BOUND / "trace_eager.json.gz"))
    assert sgd is not None and sgd.name == "SGD" and sgd.kernels > 0
    assert not sgd.misses_kernels  # SGD graphs as it is: nothing left out


def test_predict_without_a_copy_or_eager_time_says_what_it_used(capsys):
    assert main(["predict", str(SAMPLE / "trace_eager.json.gz"), *CONSTANTS,
                 "--steps-per-graph", "4"]) == 0
    out = capsys.readouterr().out
    assert "not included: pass --copy-us" in out
    assert "profiled, so slower than your loop runs" in out
    assert re.search(r"\+ launch +0\.75 us", out)  # 3 us shared by 4 captured steps


@pytest.mark.parametrize("argv, fragments, code", [
    (["--launch-us", "3"], ["--per-node-us: pass --launch-us and --per-node-us together"], 2),
    (["--launch-us", "nan", "--per-node-us", "1"], ["--launch-us: must be a number", "got nan"], 2),
    (["--launch-us", "-1", "--per-node-us", "1"], ["--launch-us: must be a number"], 2),
    (["--launch-us", "1", "--per-node-us", "inf"], ["--per-node-us: must be a number"], 2),
    ([*CONSTANTS, "--steps-per-graph", "0"], ["--steps-per-graph: must be a whole number"], 2),
    ([*CONSTANTS, "--steps-per-iteration", "-3"], ["--steps-per-iteration: must be"], 2),
    ([*CONSTANTS, "--copy-us", "1e400"], ["--copy-us: must be a number"], 2),
    ([*CONSTANTS, "--eager-ms", "0"], ["--eager-ms: must be a positive number"], 2),
    ([*CONSTANTS, "--calibrate"], ["--calibrate measures the constants"], 2),
    ([*CONSTANTS, "--launch-us", "abc"], ["expected a number, got 'abc'"], 2),
])
def test_predict_refuses_bad_options_in_one_line(capsys, argv, fragments, code):
    _one_line_refusal(capsys, ["predict", str(LAUNCH_BOUND / "trace_eager.json.gz"), *argv],
                      *fragments, code=code)


def test_predict_calibrate_without_cuda_is_exit_3(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the GPU test calibrates")
    _one_line_refusal(capsys, ["predict", str(LAUNCH_BOUND / "trace_eager.json.gz"),
                               "--calibrate"], "--calibrate needs a CUDA device", code=3)


def _no_markers_trace(tmp_path):
    trace = json.loads(gzip.decompress((LAUNCH_BOUND / "trace_eager.json.gz").read_bytes()))
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not str(e.get("name", "")).startswith("ProfilerStep#")]
    path = tmp_path / "no_markers.json"
    path.write_text(json.dumps(trace))
    return path


def _cpu_only_trace(tmp_path):
    path = tmp_path / "cpu_only.json"
    path.write_text(json.dumps({"traceEvents": [
        {"name": "ProfilerStep#0", "cat": "user_annotation", "ph": "X", "ts": 0, "dur": 50},
        {"name": "aten::mm", "cat": "cpu_op", "ph": "X", "ts": 1, "dur": 40}]}))
    return path


def _hostile_name(tmp_path):
    path = tmp_path / "two\nlines\x1b[31m.json"
    path.write_text("{not json")
    return path


@pytest.mark.parametrize("build, fragments", [
    (lambda tmp: LAUNCH_BOUND / "trace_graph.json", ["holds CUDA graph replays", "not an eager"]),
    (lambda tmp: tmp / "absent.json", ["cannot read trace", "No such file"]),
    (lambda tmp: tmp, ["is a folder, not a regular file"]),
    (lambda tmp: (tmp / "bad.json").write_text("[1, 2") and tmp / "bad.json",
     ["is not valid (gzipped) JSON"]),
    (lambda tmp: (tmp / "list.json").write_text("[]") and tmp / "list.json",
     ["has no 'traceEvents' list"]),
    (lambda tmp: (tmp / "empty.json").write_text('{"traceEvents": []}') and tmp / "empty.json",
     ["holds no events to analyse"]),
    (lambda tmp: (tmp / "neg.json").write_text(json.dumps({"traceEvents": [
        {"name": "k", "cat": "kernel", "ph": "X", "ts": 0, "dur": -5}]})) and tmp / "neg.json",
     ["negative duration"]),
    (_cpu_only_trace, ["holds no GPU kernels"]),
    (_no_markers_trace, ["has no ProfilerStep# markers", "--steps-per-iteration"]),
    (_hostile_name, ["two\\nlines\\x1b", "is not valid (gzipped) JSON"]),
], ids=["graph-trace", "missing", "folder", "not-json", "not-an-object", "no-events",
        "negative-dur", "cpu-only", "no-markers", "hostile-name"])
def test_predict_refuses_bad_traces_in_one_line(tmp_path, capsys, build, fragments):
    _one_line_refusal(capsys, ["predict", str(build(tmp_path)), *CONSTANTS], *fragments)


def test_a_trace_without_markers_is_read_with_its_step_count(tmp_path, capsys):
    path = _no_markers_trace(tmp_path)
    assert main(["predict", str(path), *CONSTANTS, "--steps-per-iteration", "4"]) == 0
    out = capsys.readouterr().out
    assert "from the whole trace (no ProfilerStep# markers); 4 training step(s)" in out
    assert "21 kernels x" in out  # 84 kernels in the window, 4 steps


def test_the_bad_options_are_refused_before_the_trace_is_read(tmp_path, capsys):
    _one_line_refusal(capsys, ["predict", str(tmp_path / "absent.json"), "--launch-us", "-2",
                               "--per-node-us", "1"], "--launch-us: must be a number")


# ------------------------------------------------------------------------------ a run's headline


class _FakeGraph:
    def __init__(self, nodes: int, replayed: list) -> None:
        self.nodes, self.replayed = nodes, replayed

    def replay(self) -> None:
        self.replayed.append(self.nodes)


def _fake_gpu(monkeypatch, busy_per_node_us: float,
              after_copy_extra_us: float = 0.0) -> tuple[list, list]:
    """calibrate() on fakes: a replay of k nodes takes 2 + 1.5 k us on the 'GPU', of which the
    profiler sees ``busy_per_node_us`` x k as kernel time; a batch copy takes 11 us; a one-node
    replay right after a copy takes ``after_copy_extra_us`` more than the two apart."""
    import torch

    from profiler_core.engine import profiling
    class Window:
        def __init__(self, busy_us: list[float]) -> None:
            split = pd.DataFrame({"iteration": range(len(busy_us)), "gpu_busy_us": busy_us})
            self.analysis = type("Analysis", (), {"launch_split": split})()

    copied, profiled, replayed = [], [], []

    def held_mean_us(action, count, clock, hold):
        graph = getattr(action, "__self__", None)
        if isinstance(graph, _FakeGraph):
            return 2.0 + 1.5 * graph.nodes
        if action.__name__ == "copy_then_replay":  # a copy, then a one-node graph's replay
            return 11.0 + (2.0 + 1.5 * 1) + after_copy_extra_us
        action()
        copied.append(count)
        return 11.0

    def profile_window(mode, iterations, device, trace_path):
        """Each iteration runs ``mode`` (a graph's replay): its busy time from its node count."""
        start = len(replayed)
        for i in range(iterations):
            mode.run(i)
        profiled.append(replayed[start:])
        return Window([busy_per_node_us * nodes for nodes in replayed[start:]])

    monkeypatch.setattr(engine_calibration, "_trivial_graph",
                        lambda torch, device, nodes, elements: (_FakeGraph(nodes, replayed), None))
    monkeypatch.setattr(engine_calibration, "_calibration_elements", lambda torch, device: 1024)
    monkeypatch.setattr(engine_calibration, "_held_mean_us", held_mean_us)
    monkeypatch.setattr(profiling, "profile_window", profile_window)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Fake GPU")
    return copied, profiled


def test_calibration_subtracts_the_kernels_busy_time_and_fits_the_rest(monkeypatch):
    import torch

    copied, profiled = _fake_gpu(monkeypatch, busy_per_node_us=1.2)
    calibration = engine_calibration.calibrate("cuda:0", (torch.zeros(4, 3), "not a tensor"))
    assert calibration.node_counts == engine_calibration.CALIBRATION_NODE_COUNTS
    assert calibration.replay_us == tuple(2.0 + 1.5 * k for k in engine_calibration.CALIBRATION_NODE_COUNTS)
    assert calibration.busy_us == pytest.approx([1.2 * k for k in engine_calibration.CALIBRATION_NODE_COUNTS])
    assert calibration.costs.launch_us == pytest.approx(2.0)
    assert calibration.costs.per_node_us == pytest.approx(0.3)
    assert calibration.copy_us == 11.0 and copied == [engine_calibration.CALIBRATION_COPIES]
    # One profiled window: each graph replayed CALIBRATION_PROFILED_REPLAYS times, in turn.
    assert profiled == [[k for k in engine_calibration.CALIBRATION_NODE_COUNTS
                         for _ in range(engine_calibration.CALIBRATION_PROFILED_REPLAYS)]]
    assert calibration.costs.source.startswith("measured on Fake GPU in this process: CUDA events")
    assert "minus their kernels' busy time from torch.profiler" in calibration.costs.source
    assert "1,024 elements" in calibration.costs.source


def test_a_replay_after_a_copy_sets_the_launch_cost_when_it_costs_more(monkeypatch):
    """A loop's replay waits for its batch copy: what a one-node replay adds after a copy, beyond
    the copy, its kernel and its node, is the launch cost when above the fitted intercept."""
    import torch

    _fake_gpu(monkeypatch, busy_per_node_us=1.2, after_copy_extra_us=3.0)
    batches = [(torch.zeros(4, 3), torch.zeros(4)), (torch.ones(4, 3), torch.ones(4))]
    calibration = engine_calibration.calibrate("cuda:0", batches)
    # after copy: 11 + 3.5 + 3 = 17.5 us; minus copy 11, kernel 1.2, one node 0.3 -> 5.0 us
    assert calibration.costs.launch_us == pytest.approx(5.0)
    assert calibration.costs.per_node_us == pytest.approx(0.3)
    assert calibration.copy_us == 11.0


def test_calibration_says_so_when_the_profiler_saw_no_kernels(monkeypatch):
    _fake_gpu(monkeypatch, busy_per_node_us=0.0)
    calibration = engine_calibration.calibrate("cuda:0")
    assert calibration.costs.per_node_us == pytest.approx(1.5)  # the kernels' own time included
    assert "nothing subtracted" in calibration.costs.source
    assert math.isnan(calibration.copy_us)  # no batch given


def _calibration() -> predict.Calibration:
    costs = predict.GraphCosts(3.5, 0.3, "measured on Fake GPU in this process: test")
    return predict.Calibration(costs=costs, node_counts=(1, 32, 256),
                               replay_us=(5.5, 21.0, 150.0), busy_us=(1.9, 8.0, 70.0),
                               copy_us=11.0, wall_ms=60.0)


def test_the_runner_call_adds_every_headline_key(monkeypatch):
    headline = json.loads((SAMPLE / "summary.json").read_text())["headline"]
    seen = {}

    def fake_calibrate(device, batch):
        seen.update(device=device, batch=batch)
        return _calibration()

    monkeypatch.setattr(engine_calibration, "cached_calibration", fake_calibrate)
    added = engine_calibration.calibrate_and_predict("cuda:0", ("x", "y"), 1, headline,
                                                     stored_figures(headline))
    assert seen == {"device": "cuda:0", "batch": ("x", "y")}
    assert set(added) == set(predict.HEADLINE_KEYS)
    expected_ms = (204.8999 + 3.5 + 29 * 0.3 + 11.0) / 1e3
    assert added["predicted_graph_ms"] == pytest.approx(expected_ms, rel=1e-6)
    assert added["prediction_error_pct"] == pytest.approx(
        (expected_ms - headline["graph_median_ms"]) / headline["graph_median_ms"] * 100)
    assert added["prediction_replay_busy_us"] == [1.9, 8.0, 70.0]


def _set_eager_kernels(run: RunResult, kernels: float) -> None:
    """The run's eager window counted ``kernels`` per step (its figure in metrics.csv)."""
    table = run.table("metrics")
    table = table[~((table["mode"] == "eager") & (table["metric"] == "kernels"))]
    run.tables["metrics"] = coerce_table("metrics", metrics.with_figures(
        table, {"eager": {"kernels": kernels}}))


def test_the_prediction_keys_round_trip_through_save_and_load(tmp_path, monkeypatch):
    from conftest import write_synthetic_run

    run = RunResult.load(write_synthetic_run(tmp_path / "runs" / "base"))
    monkeypatch.setattr(engine_calibration, "cached_calibration", lambda device, batch: _calibration())
    _set_eager_kernels(run, 15.0)
    run.headline.update(parity_steps=5)
    run.headline.update(engine_calibration.calibrate_and_predict("cuda:0", (), 2, run.headline,
                                                                 run.figures))
    run.headline["prediction_copy_us"] = math.nan  # a run whose batch copy was not timed
    run.headline.update(predict.prediction_from_headline(run.headline, run.figures))
    saved = run.save(tmp_path / "runs" / "with-prediction")
    reloaded = RunResult.load(saved)
    loaded = reloaded.headline
    for key in predict.HEADLINE_KEYS:
        value, back = run.headline[key], loaded[key]
        if isinstance(value, float) and math.isnan(value):
            assert isinstance(back, float) and math.isnan(back), key
        else:
            assert back == value, key
    assert loaded["prediction_steps_per_graph"] == 2
    assert loaded["predicted_graph_ms"] == pytest.approx((220.0 + 3.5 / 2 + 15 * 0.3) / 1e3)
    text = format_summary(RunResult.load(saved))
    assert re.search(r"Predicted before capture: graph 0\.226\d ms per step, measured", text)
    assert "batch copy not timed" in text
    assert "measured on Fake GPU in this process: test" in text
    table = predict.prediction_table(loaded, reloaded.figures)
    assert list(table["quantity"]) == ["graph time per step", "speedup"]
    assert table["error_pct"].notna().all()


def test_the_overview_shows_predicted_against_measured_with_its_constants(tmp_path,
                                                                         monkeypatch):
    import streamlit as st
    from conftest import write_synthetic_run
    from streamlit.testing.v1 import AppTest

    from dashboard import devices, rundata, state

    st.cache_data.clear()
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", tmp_path / "no-sample-here")
    monkeypatch.setattr(rundata, "SAMPLE_RUNS_DIR", tmp_path / "no-samples-here")
    monkeypatch.setattr(devices, "list_devices",
                        lambda: (pd.DataFrame(columns=["device", "index", "name", "memory_free_mib",
                                                       "memory_total_mib", "source"]), "test"))
    monkeypatch.setenv(rundata.RUNS_ROOT_ENV, str(tmp_path))
    run = RunResult.load(write_synthetic_run(tmp_path / "runs" / "base"))
    monkeypatch.setattr(engine_calibration, "cached_calibration", lambda device, batch: _calibration())
    _set_eager_kernels(run, 15.0)
    run.headline.update(engine_calibration.calibrate_and_predict("cuda:0", (), 1, run.headline,
                                                                 run.figures))
    run.save(tmp_path / "runs" / "base", overwrite=True)
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(tmp_path / "runs")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    figures = [json.loads(element.proto.spec) for element in at.get("plotly_chart")]
    drawn = [f for f in figures if "predicted before capture" in f["layout"]["title"]["text"]]
    assert len(drawn) == 1
    bars = {trace["name"]: trace["x"] for trace in drawn[0]["data"] if trace["type"] == "bar"}
    assert list(bars) == ["GPU busy (eager)", "launch", "per-node cost", "batch copy",
                          "graph, steady state"]
    per_node = bars["per-node cost"]  # Plotly sends arrays as typed binary
    if isinstance(per_node, dict):
        per_node = np.frombuffer(base64.b64decode(per_node["bdata"]), dtype=per_node["dtype"])
    assert list(per_node) == pytest.approx([0.3 * 15])
    tables = {tuple(df.value.columns): df.value for df in at.dataframe}
    shown = tables[tuple(predict.PREDICTION_TABLE_COLUMNS)]
    assert shown.loc[0, "predicted"] == pytest.approx(run.headline["predicted_graph_ms"])
    assert shown.loc[0, "error_pct"] == pytest.approx(run.headline["prediction_error_pct"])
    assert tuple(predict.CONSTANTS_TABLE_COLUMNS) in tables
    labels = {b.label for b in at.download_button}
    assert {"Download prediction CSV", "Download constants CSV"} <= labels
    captions = "\n".join(str(c.value) for c in at.caption).replace("\\", "").replace("\u2060", "")
    assert "Predicted from the eager profiled window alone" in captions
    assert "measured on Fake GPU in this process: test" in captions


def test_the_prediction_parts_add_up_and_the_chart_draws_only_finite_numbers():
    from dashboard.charts.timing import prediction_bars

    headline = json.loads((SAMPLE / "summary.json").read_text())["headline"]
    figures = stored_figures(headline)
    assert predict.prediction_parts(headline, figures).empty
    assert "no prediction" in prediction_bars(predict.prediction_parts(headline, figures)) \
        .layout.annotations[0].text
    headline.update(prediction_launch_us=8.0, prediction_per_node_us=0.5, prediction_copy_us=12.0,
                    prediction_steps_per_graph=4, prediction_constants_method="test")
    headline.update(predict.prediction_from_headline(headline, figures))
    parts = predict.prediction_parts(headline, figures)
    predicted = parts[parts["bar"] == "predicted"].set_index("part")["us"]
    assert predicted.sum() == pytest.approx(headline["predicted_graph_ms"] * 1e3)
    assert predicted["launch"] == 2.0 and predicted["batch copy"] == 3.0
    parts.loc[parts["part"] == "launch", "us"] = math.inf  # a damaged figure is left out
    figure = prediction_bars(parts)
    drawn = [x for trace in figure.data if trace.type == "bar" for x in trace.x]
    assert all(math.isfinite(x) for x in drawn) and len(drawn) == 4


# ------------------------------------------------------------------------------ on a GPU


GPU_CONFIGS = {  # name -> options of python -m profiler_core run (NVML and parity off: not needed)
    "seed bf16": ["--preset", "seed", "--dtype", "bf16"],
    "seed fp32": ["--preset", "seed", "--dtype", "fp32"],
    "launch-bound fp32": ["--preset", "seed", "--dtype", "fp32", "--batch", "64", "--d-in", "512",
                          "--hidden", "512", "--d-out", "256"],
}


@pytest.mark.gpu
def test_gpu_calibration_and_predicted_against_measured_on_real_runs(tmp_path):
    """Prints, for three configs, predicted against measured graph time and speedup (each run in
    a fresh process, as users run it), then a calibration on its own and the bundled sample run
    predicted with it. Run: .venv/bin/python -m pytest -m gpu tests/test_predict.py -s -q"""
    import subprocess
    import sys

    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    errors = {}
    for name, options in GPU_CONFIGS.items():
        out = tmp_path / name.replace(" ", "-")
        subprocess.run([sys.executable, "-m", "profiler_core", "run", *options, "--no-nvml",
                        "--parity-steps", "0", "--progress", "none", "--out", str(out)],
                       check=True, timeout=300, stdout=subprocess.DEVNULL, cwd=ROOT)
        run = RunResult.load(out)
        assert set(predict.HEADLINE_KEYS) <= set(run.headline)
        # the headline's facts and every figure by its index-filter name (metrics.headline_key)
        head = {**run.headline, **{metrics.headline_key(mode, metric): value
                                   for mode, metric, value in run.figures.items()}}
        errors[name] = (head["prediction_error_pct"], head["predicted_speedup_error_pct"])
        print(f"\nRUN {name}: eager busy {head['eager_gpu_busy_us']:.1f} us, "
              f"{head['eager_kernels']:g} kernels; graph predicted {head['predicted_graph_ms']:.4f} "
              f"ms, measured {head['graph_median_ms']:.4f} ms ({head['prediction_error_pct']:+.1f}%); "
              f"speedup predicted {head['predicted_speedup']:.2f}x, measured {head['speedup']:.2f}x "
              f"({head['predicted_speedup_error_pct']:+.1f}%); launch "
              f"{head['prediction_launch_us']:.3f} us, per node {head['prediction_per_node_us']:.4f} "
              f"us, copy {head['prediction_copy_us']:.2f} us (measured "
              f"{head['graph_input_copy_ms'] * 1e3:.2f}), calibration "
              f"{head['prediction_calibration_ms']:.0f} ms; replays "
              f"{[round(v, 2) for v in head['prediction_replay_us']]} us, their kernels busy "
              f"{[round(v, 2) for v in head['prediction_replay_busy_us']]} us for "
              f"{head['prediction_node_counts']} nodes")
    graph_errors = [abs(graph) for graph, _ in errors.values()]
    speedup_errors = [abs(speedup) for _, speedup in errors.values()]
    print(f"MEDIAN |ERROR| graph time {float(np.median(graph_errors)):.1f}%, speedup "
          f"{float(np.median(speedup_errors)):.1f}%")

    device = torch.device("cuda", 0)
    batch = (torch.randn(640, 4096, device=device), torch.randn(640, 1024, device=device))
    calibration = engine_calibration.calibrate(device, batch)
    print(f"CALIBRATION {torch.cuda.get_device_name(device)}, torch {torch.__version__}: launch "
          f"{calibration.costs.launch_us:.3f} us, per node {calibration.costs.per_node_us:.4f} us, "
          f"seed batch copy {calibration.copy_us:.2f} us, took {calibration.wall_ms:.0f} ms")
    for count, replay, busy in zip(calibration.node_counts, calibration.replay_us,
                                   calibration.busy_us):
        print(f"  {count:>4} nodes: replay {replay:8.2f} us, kernels busy {busy:8.2f} us, "
              f"left {replay - busy:7.2f} us")
    sample = _eager_step(SAMPLE / "trace_eager.json.gz")
    sample_run = RunResult.load(SAMPLE)
    recorded = {metrics.headline_key(mode, metric): value
                for mode, metric, value in sample_run.figures.items()}
    sample_ms = predict.predict_graph(sample, calibration.costs, 1,
                                      recorded["graph_input_copy_ms"] * 1e3).graph_us / 1e3
    print(f"SAMPLE RUN (recorded earlier): predicted {sample_ms:.4f} ms, measured "
          f"{recorded['graph_median_ms']:.4f} ms, error "
          f"{(sample_ms / recorded['graph_median_ms'] - 1) * 100:+.1f}%")
    command = subprocess.run(
        [sys.executable, "-m", "profiler_core", "predict", str(SAMPLE / "trace_eager.json.gz"),
         "--calibrate", "--copy-us", f"{recorded['graph_input_copy_ms'] * 1e3:.3f}",
         "--eager-ms", f"{recorded['eager_median_ms']:.4f}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    print(f"PREDICT --calibrate on the sample trace (exit {command.returncode}):\n"
          f"{command.stdout}{command.stderr}")
    assert command.returncode == 0 and "measured on" in command.stdout
    assert all(math.isfinite(graph) and math.isfinite(speedup) for graph, speedup in errors.values())
    # Its wall time is printed above (CALIBRATION ... took): a benchmark figure, not a test's
    # limit (on a VM compiling torch from source, the profiler's first use alone took seconds).
    assert math.isfinite(calibration.wall_ms) and calibration.wall_ms > 0
    assert list(calibration.replay_us) == sorted(calibration.replay_us)
    assert all(replay > busy > 0 for replay, busy in zip(calibration.replay_us, calibration.busy_us))
    assert math.isfinite(calibration.copy_us) and calibration.copy_us > 0


def test_the_bundled_samples_recorded_prediction_is_what_its_headline_gives():
    """The prediction is a pure function of the headline: the bundled sample's recorded figures
    (made on the H200 by the run itself) come back from its headline alone."""
    recorded = RunResult.load(RECORDED)
    headline = recorded.headline
    again = predict.prediction_from_headline(headline, recorded.figures)
    for key in predict.PREDICTION_KEYS:
        assert again[key] == pytest.approx(headline[key], rel=1e-9), key
    assert abs(headline["prediction_error_pct"]) < 5  # within the 5%
