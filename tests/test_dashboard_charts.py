"""dashboard.charts and dashboard.analysis: pure functions from tidy tables to figures and words."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard import analysis, charts
from profiler_core.results import RunResult, empty_table
from profiler_core.schema import TABLE_FILES


@pytest.fixture
def run(synthetic_run):
    return RunResult.load(synthetic_run)


def _types(fig):
    return [trace.type for trace in fig.data]


def _latency(per_mode: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frames = []
    for mode, median in (("eager", 1.2), ("graph", 0.25)):
        gpu = median * rng.lognormal(0, 0.05, per_mode)
        frames.append(pd.DataFrame({"mode": mode, "method": "steady",
                                    "trial": np.arange(per_mode) // 1000,
                                    "iteration": np.arange(per_mode) % 1000, "steps": 1,
                                    "gpu_ms": gpu, "wall_ms": np.nan}))
    return pd.concat(frames, ignore_index=True)


def test_every_chart_from_the_run(run):
    steps, _ = analysis.series_steps(analysis.per_step_latency(run.table("latency")), "steady_event")
    medians = analysis.split_medians(run.table("launch_split"))
    assert _types(charts.median_bars(run.table("stats"), medians)) == ["bar", "bar", "scatter"]
    assert _types(charts.latency_histogram(steps)) == ["bar", "bar"]
    assert _types(charts.latency_ecdf(steps)) == ["scatter", "scatter"]
    assert _types(charts.latency_series(steps)) == ["scattergl"] * 4
    timing = analysis.timing_comparison(run.table("stats"), run.headline)
    assert _types(charts.timing_methods_bars(timing)) == ["bar", "bar"]
    assert _types(charts.split_bars(medians)) == ["bar"] * 4
    assert _types(charts.speedup_waterfall(run.table("breakdown"))) == ["waterfall", "waterfall"]
    assert _types(charts.launch_count_bars(medians)) == ["bar", "bar"]
    nvml = charts.nvml_timeseries(run.table("nvml"), run.table("phases"))
    assert _types(nvml).count("scattergl") == 5  # 4 polled panels + the driver's samples
    assert len(nvml.layout.shapes) == 8  # every phase shaded, one band through all panels
    assert [a.title.text for a in (nvml.layout.yaxis, nvml.layout.yaxis4)] == ["GPU util (%)",
                                                                               "memory (MiB)"]
    assert _types(charts.kernel_top_bar(run.table("kernels"), "graph", 5)) == ["bar"]
    assert _types(charts.counter_bars(analysis.counter_lessons(run.table("counters")))) == ["bar"] * 2


@pytest.mark.parametrize("build", [
    lambda: charts.median_bars(empty_table("stats")),
    lambda: charts.latency_histogram(analysis.per_step_latency(empty_table("latency"))),
    lambda: charts.latency_ecdf(analysis.per_step_latency(empty_table("latency"))),
    lambda: charts.latency_series(analysis.per_step_latency(empty_table("latency"))),
    lambda: charts.timing_methods_bars(analysis.timing_comparison(empty_table("stats"), {})),
    lambda: charts.split_bars(analysis.split_medians(empty_table("launch_split"))),
    lambda: charts.speedup_waterfall(empty_table("breakdown")),
    lambda: charts.launch_count_bars(analysis.split_medians(empty_table("launch_split"))),
    lambda: charts.nvml_timeseries(empty_table("nvml"), empty_table("phases")),
    lambda: charts.kernel_top_bar(empty_table("kernels"), "eager"),
    lambda: charts.counter_bars(analysis.counter_lessons(empty_table("counters"))),
    lambda: charts.compare_medians(pd.DataFrame(columns=["run", "mode", "median_ms", "p10_ms", "p90_ms"])),
])
def test_empty_tables_give_a_figure_that_says_so(build):
    fig = build()
    assert isinstance(fig, go.Figure) and not fig.data
    assert "no " in fig.layout.annotations[0].text


def test_histogram_bins_every_sample_up_to_the_clip():
    steps = analysis.per_step_latency(_latency(5000))
    steps.loc[steps.index[:3], "gpu_ms"] = 50.0  # three far outliers
    fig = charts.latency_histogram(steps, bins=50)
    assert sum(int(np.sum(trace.y)) for trace in fig.data) + 3 >= len(steps) - 60
    assert "not shown" in fig.layout.annotations[0].text
    assert len(fig.data[0].x) == 50


def test_ecdf_is_monotonic_and_ends_at_one():
    fig = charts.latency_ecdf(analysis.per_step_latency(_latency(10_000)), points=300)
    for trace in fig.data:
        x, y = np.asarray(trace.x), np.asarray(trace.y)
        assert len(x) <= 300 and np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
        assert y[-1] == 1.0


def test_minmax_decimation_keeps_the_extremes():
    y = np.random.default_rng(1).normal(size=100_003)
    y[77_777] = 99.0
    y[12_345] = -99.0
    keep = charts.minmax_decimate(y, 2000)
    assert len(keep) <= 2000 and np.all(np.diff(keep) > 0)
    assert 77_777 in keep and 12_345 in keep
    assert np.array_equal(charts.minmax_decimate(y[:50], 2000), np.arange(50))


def test_100k_latency_samples_render_server_side_in_well_under_a_second():
    latency = _latency(100_000)  # 100,000 samples per mode
    started = time.perf_counter()
    steps = analysis.per_step_latency(latency)
    figures = [charts.latency_histogram(steps), charts.latency_ecdf(steps),
               charts.latency_series(steps)]
    payload = sum(len(fig.to_json()) for fig in figures)
    analysis.percentile_table(latency, steps)
    elapsed = time.perf_counter() - started
    print(f"\n100,000 samples per mode: latency charts built and serialised in {elapsed:.3f} s, "
          f"{payload / 1e3:.0f} kB of figure JSON")
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert payload < 1_000_000  # what goes to the browser stays small


def test_waterfall_walks_from_eager_to_graph_on_each_timeline(run):
    fig = charts.speedup_waterfall(run.table("breakdown"))
    gpu, cpu = fig.data
    assert list(gpu.x) == ["eager", "busy", "idle", "graph"]
    assert list(gpu.measure) == ["absolute", "relative", "relative", "total"]
    assert list(gpu.y) == [1200, 5, -955, 250]
    # The CPU worked 52 of the graph step's 250 us: the rest it waited for the GPU.
    assert list(cpu.x) == ["eager", "launch", "other", "waiting on GPU", "graph"]
    assert cpu.y[0] + sum(cpu.y[1:4]) == pytest.approx(250) and cpu.y[3] == pytest.approx(198)
    assert [a.text for a in fig.layout.annotations] == ["GPU timeline", "CPU timeline"]
    unattributed = pd.DataFrame({"component": ["gpu_idle", "total_span"], "eager_us": [900, 1200],
                                 "graph_us": [20, 250], "saving_us": [880, 950],
                                 "share_of_saving_pct": [92.6, 100]})
    trace = charts.speedup_waterfall(unattributed).data[0]
    assert list(trace.x) == ["eager", "idle", "not attributed", "graph"]
    assert trace.y[0] + sum(trace.y[1:3]) == pytest.approx(250)


def test_split_bars_separate_the_cpu_and_gpu_sides(run):
    fig = charts.split_bars(analysis.split_medians(run.table("launch_split")))
    assert fig.layout.barmode == "stack"
    modes, sides = fig.data[0].x
    assert list(modes) == ["eager", "graph"] and list(sides) == ["CPU", "CPU"]
    assert list(fig.data[3].x[1]) == ["GPU", "GPU"]


def test_kernel_top_bar_is_sorted_and_limited(run):
    trace = charts.kernel_top_bar(run.table("kernels"), "eager", top_n=3).data[0]
    assert len(trace.y) == 3 and list(trace.x) == sorted(trace.x)  # biggest drawn on top


def test_verdicts():
    launch = pd.DataFrame({"mode": ["eager", "graph"], "iteration": [0, 0], "span_us": [1200, 250],
                           "cpu_launch_us": [700, 22], "cpu_other_us": [450, 30],
                           "gpu_busy_us": [220, 225], "gpu_idle_us": [980, 25],
                           "launches": [45, 1], "kernels": [40, 40], "launch_delay_us": [15, 9]})
    v = analysis.verdict({"speedup": 4.8}, launch)
    assert v.kind == "launch-bound" and "82%" in v.text and "700 us in 45 launch calls" in v.text
    assert "the CPU needed 1,150 us" in v.text and "only 220 us" in v.text
    assert "1.11x the GPU busy time" not in v.text  # no timed graph median: no floor claimed
    v = analysis.verdict({"speedup": 4.8, "eager_median_ms": 1.2, "graph_median_ms": 0.25}, launch)
    assert "an eager step took 1.200 ms and a graph step 0.250 ms" in v.text
    assert "profiled window" in v.text
    assert "is 1.11x the GPU's own work per step (0.225 ms busy" in v.text
    v = analysis.verdict({"speedup": 4.8, "eager_median_ms": 1.2, "graph_median_ms": 0.25}, launch,
                         steps_per_graph=3)  # a replay holds three steps: busy per step is a third
    assert "(0.075 ms busy" in v.text
    gpu_bound = launch.assign(span_us=[930, 920], gpu_busy_us=[900, 900], gpu_idle_us=[30, 20])
    v = analysis.verdict({"speedup": 1.01}, gpu_bound)
    assert v.kind == "gpu-bound" and "97%" in v.text and "1.01x" in v.title
    mixed = launch.assign(span_us=[1000, 700], gpu_busy_us=[750, 680], gpu_idle_us=[250, 20])
    assert analysis.verdict({}, mixed).kind == "mixed"
    none = analysis.verdict({"speedup": 2.0}, empty_table("launch_split"))
    assert none.kind == "unknown" and "profiler" in none.text


def test_derived_tables_have_their_columns(run):
    assert list(analysis.percentile_table(run.table("latency")).columns) == analysis.PERCENTILE_COLUMNS
    assert list(analysis.percentile_table(empty_table("latency")).columns) == analysis.PERCENTILE_COLUMNS
    pct = analysis.percentile_table(run.table("latency"))
    assert set(zip(pct["mode"], pct["timing"])) == {
        (m, t) for m in ("eager", "graph") for t in ("steady_event", "cold_event", "cold_wall")}
    assert (pct["p1_ms"] <= pct["p50_ms"]).all() and (pct["p50_ms"] <= pct["p99_9_ms"]).all()
    timing = analysis.timing_comparison(run.table("stats"), run.headline)
    assert list(timing.columns) == analysis.TIMING_COLUMNS
    assert list(timing["method"]) == ["steady_trial", "steady_event", "cold_event", "cold_wall",
                                      "block_sync", "article_no_sync"]
    from_headline = analysis.timing_comparison(empty_table("stats"), run.headline)
    assert from_headline["speedup"].tolist() == [3.0]
    medians = analysis.split_medians(run.table("launch_split"))
    assert list(medians.columns) == analysis.SPLIT_MEDIAN_COLUMNS
    assert list(medians["mode"]) == ["eager", "graph"]
    lessons = analysis.counter_lessons(run.table("counters"))
    assert list(lessons.columns) == analysis.COUNTER_LESSON_COLUMNS
    assert lessons["match"].all() and lessons["why"].str.len().min() > 20
    assert "lesson 1" in lessons.loc[lessons["phase"] == "after_capture", "why"].item()
    explained = analysis.counter_lessons(run.table("counters"), run.config)
    assert explained.loc[explained["phase"] == "after_replay", "why"].item().endswith(
        "Here: 200 replays x 1 captured = 200.")
    kernels = analysis.kernel_table(run.table("kernels"))
    assert list(kernels.columns) == analysis.KERNEL_TABLE_COLUMNS
    assert kernels.groupby("mode")["total_us"].apply(lambda s: s.is_monotonic_decreasing).all()
    costs = analysis.one_time_costs(run.headline)
    assert costs.loc[costs["quantity"] == "graph memory pool", "value"].item() == 64


def test_per_step_latency_divides_replays_of_several_steps():
    latency = pd.DataFrame({"mode": ["graph"] * 4, "method": ["steady", "steady", "cold", "cold"],
                            "trial": [0] * 4, "iteration": [1, 0, 0, 1], "steps": [3] * 4,
                            "gpu_ms": [0.9, 0.6, 1.5, 1.2], "wall_ms": [np.nan, np.nan, 1.8, 1.5]})
    steps = analysis.per_step_latency(latency)
    steady, column = analysis.series_steps(steps, "steady_event")
    assert column == "gpu_ms"
    assert steady["gpu_ms"].tolist() == pytest.approx([0.2, 0.3])  # ordered by iteration
    assert steady["seq"].tolist() == [0, 1]
    cold, column = analysis.series_steps(steps, "cold_wall")
    assert column == "wall_ms" and cold["wall_ms"].tolist() == pytest.approx([0.6, 0.5])
    assert cold["seq"].tolist() == [0, 1]  # numbered within its own method
    assert analysis.series_available(steps) == ["steady_event", "cold_event", "cold_wall"]


def test_config_diff_and_tables():
    from profiler_core.config import PRESETS

    diff = analysis.config_diff(PRESETS["seed"], PRESETS["lesson3"])
    assert set(diff["setting"]) == {"capture_iters", "replays", "preset"}
    table = analysis.config_table(PRESETS["seed"])
    assert table.loc[table["setting"] == "eager_iters", "value"].item() == "200 (auto)"
    assert list(analysis.environment_table({"gpu_name": "H200", "x": 1})["item"]) == ["gpu_name", "x"]


def test_schema_tables_all_have_a_chart_or_table():
    # Every table of the run directory is shown somewhere (guards against a new table nobody draws).
    shown = {"counters", "latency", "stats", "launch_split", "breakdown", "kernels", "nvml", "phases"}
    assert shown == set(TABLE_FILES)
