"""Issue 17 and 20 in the views (AppTest): the "why" adds up to the "how much". The Overview's and
the Launch split's verdict, waterfall and saving table explain the headline's saving (timed, no
profiler); the profiled window's figures are labelled "under the profiler", with the profiler's
overhead against the headline; break-even has one definition and a graph that is not faster
"never" pays back; a CPU run says why it has none of this."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import figure_table

from dashboard import rundata, state
from profiler_core.analysis import attribution
from profiler_core.spec.config import PRESETS
from profiler_core.spec.schema import TABLE_FILES
from profiler_core.storage.results import RunResult, coerce_table
from tests.test_dashboard import _app, _cpu_run, _texts
from tests.test_dashboard_charts import (
    FP32_B2048,
    FP32_B2048_FACTS,
    FP32_B2048_FIGURES,
    FP32_B2048_MODES,
    _numbers,
)

pytestmark = pytest.mark.usefixtures("fresh_app_state")
SAMPLE = Path(__file__).resolve().parent.parent / "dashboard" / "sample_run"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason="dashboard/sample_run/ is not here")


def _spec(at, key: str) -> dict:
    return json.loads(at.get_by_key(key).proto.spec)


def _title(spec: dict) -> str:
    return spec["layout"]["title"]["text"]


@needs_sample
def test_the_samples_overview_explains_the_headline_not_the_profiled_window(monkeypatch, tmp_path):
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", SAMPLE)
    at = _app(tmp_path / "runs")
    assert at.session_state[state.OPEN_RUN] == state.SAMPLE and not at.exception
    assert "Launch-bound" in _texts(at.success)  # the verdict in one sentence; its figures under it
    verdict = _texts(at.success) + "\n" + _texts(at.markdown)
    run = RunResult.load(SAMPLE)
    pair, parts = run.pair, run.table("attribution").set_index(["mode", "component"])
    eager, graph = pair.eager_ms * 1e3, pair.graph_ms * 1e3
    assert (f"an eager step took {eager:,.0f} us and a graph step {graph:,.0f} us: "
            f"{pair.speedup:.2f}x, a saving of {eager - graph:,.0f} us") in verdict
    idle = parts.at[("graph", "gpu_idle"), "saving_us"]
    assert f"The graph removed {idle:,.0f} us of idle ({idle / (eager - graph) * 100:.0f}% of the saving)" in verdict
    spans = run.table("breakdown").set_index(["mode", "component"])
    for span in spans.loc[("graph", "total_span"), ["eager_us", "mode_us"]]:
        assert f"{span:,.0f} us" not in verdict  # the profiled window is not the headline
    warmup, capture = run.figures.get("graph", "warmup_ms"), run.figures.get("graph", "capture_ms")
    steps = math.ceil((warmup + capture) / (pair.eager_ms - pair.graph_ms))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Break-even"] == f"{steps} steps"  # warm-up + capture over the saving
    tile = next(m for m in at.metric if m.label == "Break-even")
    assert tile.proto.delta == f"one-time cost {warmup + capture:.1f} ms"
    costs = next(df.value for df in at.dataframe if "quantity" in df.value.columns)
    shown = costs.set_index("quantity")["shown"]
    assert shown["break-even (see below)"] == f"{steps} steps"
    overhead = run.table("metrics").set_index(["mode", "metric"]).at[
        ("eager", "profiler_overhead_pct"), "value"]
    assert shown["profiler overhead vs headline, eager"] == f"{overhead:.2f} %"
    captions = _texts(at.caption)
    assert ("Break-even: steps until the one-time cost (warm-up + capture) is paid back by the "
            "saving per step") in captions
    assert f"the profiled window ran eager {overhead:.0f}% slower than the timed trials" in captions
    floor = _spec(at, "overview_medians")["data"][-1]
    assert floor["name"] == "GPU kernel time (floor)"


@needs_sample
def test_the_samples_launch_split_attributes_the_headline_and_labels_the_profiled_window(
        monkeypatch, tmp_path):
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", SAMPLE)
    at = _app(tmp_path / "runs")
    at.switch_page("views/launch_split.py").run()
    assert not at.exception, [e.value for e in at.exception]
    verdict = _texts(at.info[:1])
    run = RunResult.load(SAMPLE)
    eager, graph = run.pair.eager_ms * 1e3, run.pair.graph_ms * 1e3
    span = run.table("breakdown").set_index(["mode", "component"]).at[("graph", "total_span"),
                                                                        "eager_us"]
    assert f"an eager step took {eager:,.0f} us and a graph step {graph:,.0f} us" in verdict
    assert f"{span:,.0f}" not in verdict
    walk = _spec(at, "split_waterfall")
    values = list(_numbers(walk["data"][0]["y"]))
    assert values[0] == pytest.approx(eager) and values[-1] == pytest.approx(graph)
    assert -sum(values[1:-1]) == pytest.approx(eager - graph, rel=0.01)  # the saving, within 1%
    saving = next(df.value for df in at.dataframe if "in_the_sum" in df.value.columns)
    assert saving.set_index("component").at["step", "saving_us"] == pytest.approx(eager - graph)
    captions = _texts(at.caption)
    assert "A negative share is time the graph added, e.g. its batch copy or extra kernels" in captions
    overhead = run.table("metrics").set_index(["mode", "metric"]).at[
        ("eager", "profiler_overhead_pct"), "value"]
    assert f"the profiled window ran eager {overhead:.0f}% slower than the timed trials" in captions
    assert "Under the profiler" in [h.value for h in at.header]
    assert {h.value for h in at.subheader} >= {
        "Under the profiler: medians per profiled iteration",
        "Under the profiler: the profiled iteration decomposed, per timeline",
        "Under the profiler: one profiled iteration, lane by lane"}
    # every chart of a profiled total says so; only the headline's waterfall is not profiled
    for element in at.get("plotly_chart"):
        title = _title(json.loads(element.proto.spec))
        if element.key == "split_waterfall":
            assert title.startswith("The headline's saving per step, attributed")
        elif element.key != "split_counts":  # counts of launches, no time
            assert "under the profiler" in title.lower(), (element.key, title)
    breakdown = next(df for df in at.dataframe if "share_of_timeline_saving_pct" in df.value.columns)
    assert "under the profiler" in json.dumps(json.loads(breakdown.proto.columns))


def _never_pays_back_run(path: Path) -> Path:
    """A run with the medians of fp32 at batch 2048 on an H200 (2026-12-01): GPU-bound, the graph
    12 us slower per step than eager."""
    stats = pd.DataFrame([["eager", "steady_trial", FP32_B2048["eager_ms"]],
                          ["graph", "steady_trial", FP32_B2048["graph_ms"]],
                          ["graph", "input_copy", FP32_B2048["copy_ms"]],
                          ["eager", "host_issue", FP32_B2048["eager_host_ms"]],
                          ["graph", "host_issue", FP32_B2048["graph_host_ms"]]],
                         columns=["mode", "method", "median_ms"])
    stats = stats.reindex(columns=TABLE_FILES["stats"][1]).assign(count=10)
    for column in ("mean_ms", "p10_ms", "p90_ms", "p99_ms", "min_ms", "max_ms"):
        stats[column] = stats["median_ms"]
    stats["iqr_ms"] = 0.0
    split = pd.DataFrame({"mode": ["eager", "graph"], "iteration": [0, 0],
                          "span_us": [2282.0, 2090.0], "cpu_launch_us": [300.0, 20.0],
                          "cpu_other_us": [1200.0, 60.0],
                          "gpu_busy_us": [FP32_B2048["eager_busy_us"], FP32_B2048["graph_busy_us"]],
                          "gpu_idle_us": [298.0, 105.0], "launches": [30, 3], "kernels": [29, 31],
                          "launch_delay_us": [1.0, 1.0]})
    latency = pd.DataFrame({"mode": ["eager", "graph"], "method": "steady", "trial": 0,
                            "iteration": 0, "steps": 1,
                            "gpu_ms": [FP32_B2048["eager_ms"], FP32_B2048["graph_ms"]],
                            "wall_ms": np.nan})
    tables = {"stats": stats, "launch_split": split, "latency": latency, "modes": FP32_B2048_MODES,
              "metrics": figure_table(FP32_B2048_FIGURES)}
    tables["attribution"] = attribution.build(stats, split, latency)
    return RunResult(config=PRESETS["seed"].replace(preset="custom", dtype="fp32", batch=2048),
                     environment={"gpu_name": "NVIDIA H200", "device_type": "cuda"},
                     headline=dict(FP32_B2048_FACTS), notes=[], complete=True,
                     tables={k: coerce_table(k, v) for k, v in tables.items()}).save(path)


def test_a_graph_that_is_not_faster_says_never_on_the_overview_launch_split_and_runs(tmp_path):
    from conftest import write_synthetic_run

    runs = tmp_path / "runs"
    never = _never_pays_back_run(runs / "fp32-b2048")
    other = write_synthetic_run(runs / "synthetic", started_at="2026-11-30T10:00:00")
    at = _app(runs)
    at.session_state[state.OPEN_RUN] = str(never.resolve())
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    verdict = _texts(at.info) + "\n" + _texts(at.markdown)
    assert "GPU-bound: the graph is not faster (0.99x), so it never pays back" in _texts(at.info)
    assert "the graph step is 12 us slower" in verdict and "n/a" not in verdict
    tile = next(m for m in at.metric if m.label == "Break-even")
    assert (tile.value, tile.proto.delta) == ("never", "graph not faster")
    costs = next(df.value for df in at.dataframe if "quantity" in df.value.columns)
    assert "never (graph not faster)" in set(costs["shown"])
    at.switch_page("views/launch_split.py").run()
    assert not at.exception, [e.value for e in at.exception]
    walk = list(_numbers(_spec(at, "split_waterfall")["data"][0]["y"]))
    assert walk[-1] > walk[0] and sum(walk[1:-1]) == pytest.approx(walk[-1] - walk[0], rel=0.01)
    host = _spec(at, "split_waterfall")["data"][1]  # host issue beside the sum
    assert host["x"] == ["eager", "graph"]
    at.switch_page("views/runs.py").run()
    at.multiselect(key="compare_runs").set_value([str(never.resolve()), str(other.resolve())]).run()
    assert not at.exception, [e.value for e in at.exception]
    summary = next(df.value for df in at.dataframe if "break_even" in df.value.columns)
    assert summary.set_index("run")["break_even"].tolist() == ["never (graph not faster)", "50 steps"]


def test_a_cpu_run_says_why_it_has_no_attribution_and_never_crashes(tmp_path):
    path = _cpu_run(tmp_path / "runs" / "cpu")
    assert RunResult.load(path).table("attribution").empty
    at = _app(tmp_path / "runs")
    assert not at.exception, [e.value for e in at.exception]
    assert "A CPU run: eager only, no graph and no launch split" in _texts(at.info)
    tile = next(m for m in at.metric if m.label == "Break-even")
    assert (tile.value, tile.proto.delta) == ("n/a", "CPU run: no graph")
    at.switch_page("views/launch_split.py").run()
    assert not at.exception, [e.value for e in at.exception]
    infos = _texts(at.info)
    assert "No attribution in this run: a CPU run times the eager step only" in infos
    assert "No profiled window in this run: a CPU run" in infos
    assert not at.get("plotly_chart")
