"""dashboard.charts and dashboard.analysis: pure functions from tidy tables to figures and words."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from dashboard import analysis, compare, kernel_tables, percentiles, run_facts
from dashboard.charts.attribution import (
    iteration_timeline,
    launch_count_bars,
    profiled_waterfall,
    profiled_waterfall_steps,
    speedup_waterfall,
    split_bars,
)
from dashboard.charts.common import (
    MODE_COLORS,
    SERIES_PALETTE,
    SPLIT_COLORS,
    TIMELINE_KIND_COLORS,
    escape,
    log_ticks,
    minmax_decimate,
    mode_color,
)
from dashboard.charts.comparison import compare_latency_ecdf, compare_medians, compare_speedups
from dashboard.charts.counters import counter_bars
from dashboard.charts.gpu import (
    NVML_MIN_SPAN,
    NVML_PAUSE_COLOR,
    PHASE_KIND_COLORS,
    nvml_timeseries,
    phase_kind,
    polling_gaps,
)
from dashboard.charts.kernels import kernel_diff_bars, kernel_top_bar
from dashboard.charts.sweep import sweep_medians
from dashboard.charts.timing import (
    latency_ecdf,
    latency_histogram,
    latency_series,
    median_bars,
    modes_speedup_bars,
    repeats_chart,
    timing_methods_bars,
)
from profiler_core.analysis.figures import Figures, Headline
from profiler_core.spec.schema import BREAKDOWN_COLUMNS, METRIC_COLUMNS, TABLE_FILES
from profiler_core.storage.results import RunResult, empty_table


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
    assert _types(median_bars(run.table("stats"), medians)) == ["bar", "bar", "scatter"]
    assert _types(latency_histogram(steps)) == ["bar", "bar"]
    assert _types(latency_ecdf(steps)) == ["scatter", "scatter"]
    assert _types(latency_series(steps)) == ["scattergl"] * 4
    timing = analysis.timing_comparison(run.table("stats"), run.figures)
    assert _types(timing_methods_bars(timing)) == ["bar", "bar"]
    assert _types(split_bars(medians)) == ["bar"] * 4
    assert _types(speedup_waterfall(run.table("attribution"))) == ["bar"]  # no host issue timed
    assert _types(profiled_waterfall(run.table("breakdown"))) == ["bar", "bar"]  # per timeline
    assert _types(launch_count_bars(medians)) == ["bar", "bar"]
    nvml = nvml_timeseries(run.table("nvml"), run.table("phases"))
    assert _types(nvml).count("scattergl") == 5  # 4 polled panels + the driver's samples
    assert len(nvml.layout.shapes) == 8  # every phase shaded, one band through all panels
    assert [a.title.text for a in (nvml.layout.yaxis, nvml.layout.yaxis4)] == ["GPU util (%)",
                                                                               "memory (MiB)"]
    assert _types(kernel_top_bar(run.table("kernels"), "graph", 5)) == ["bar"]
    assert _types(counter_bars(run_facts.counter_lessons(run.table("counters")))) == ["bar"] * 2
    assert _types(kernel_diff_bars(kernel_tables.kernel_diff(run.table("kernels")))) == ["bar"] * 2


@pytest.mark.parametrize("build", [
    lambda: median_bars(empty_table("stats")),
    lambda: latency_histogram(analysis.per_step_latency(empty_table("latency"))),
    lambda: latency_ecdf(analysis.per_step_latency(empty_table("latency"))),
    lambda: latency_series(analysis.per_step_latency(empty_table("latency"))),
    lambda: timing_methods_bars(analysis.timing_comparison(empty_table("stats"), Figures({}))),
    lambda: split_bars(analysis.split_medians(empty_table("launch_split"))),
    lambda: speedup_waterfall(empty_table("attribution")),
    lambda: profiled_waterfall(empty_table("breakdown")),
    lambda: launch_count_bars(analysis.split_medians(empty_table("launch_split"))),
    lambda: nvml_timeseries(empty_table("nvml"), empty_table("phases")),
    lambda: kernel_top_bar(empty_table("kernels"), "eager"),
    lambda: counter_bars(run_facts.counter_lessons(empty_table("counters"))),
    lambda: compare_medians(pd.DataFrame(columns=["run", "mode", "median_ms", "p10_ms", "p90_ms"])),
    lambda: kernel_diff_bars(kernel_tables.kernel_diff(empty_table("kernels"))),
    lambda: iteration_timeline(pd.DataFrame(columns=["lane", "kind", "name", "start_us",
                                                            "dur_us"]), "eager"),
])
def test_empty_tables_give_a_figure_that_says_so(build):
    fig = build()
    assert isinstance(fig, go.Figure) and not fig.data
    assert "no " in fig.layout.annotations[0].text


def test_histogram_bins_every_sample_up_to_the_clip():
    steps = analysis.per_step_latency(_latency(5000))
    steps.loc[steps.index[:3], "gpu_ms"] = 50.0  # three far outliers
    fig = latency_histogram(steps, bins=50)
    assert sum(int(np.sum(trace.y)) for trace in fig.data) + 3 >= len(steps) - 60
    assert len(fig.data[0].x) == 50


def test_histogram_has_a_panel_per_mode_so_the_graph_never_flattens_eager():
    """Each mode is binned on its own range in its own panel: eager's spread fills its panel
    however tall and narrow the graph's distribution is."""
    steps = analysis.per_step_latency(_latency(2000))
    fig = latency_histogram(steps)
    eager, graph = fig.data
    assert (eager.xaxis, graph.xaxis) == ("x", "x2") and (eager.yaxis, graph.yaxis) == ("y", "y2")
    for trace, median in ((eager, 1.2), (graph, 0.25)):
        x = np.asarray(trace.x)
        assert x.min() > median * 0.7 and x.max() < median * 1.3  # its own range, not shared
        assert np.count_nonzero(trace.y) >= 20  # spread over many bins, not one tall bar
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("eager: 2,000 steps, median 1.") and titles[1].startswith("graph:")


@pytest.mark.parametrize("samples, outliers, words", [(200, 1, "1 slower step beyond"),
                                                      (600, 3, "3 slower steps beyond")])
def test_histogram_says_how_many_slower_steps_it_leaves_out_in_its_panel_title(samples, outliers,
                                                                              words):
    steps = analysis.per_step_latency(_latency(samples))
    eager = steps.index[steps["mode"] == "eager"]
    values = np.linspace(1.0, 1.4, len(eager))  # 0.5% of the samples lie beyond the 99.5th pct
    values[-outliers:] = 50.0 + np.arange(outliers)  # ... and those are far: left out, and said so
    steps.loc[eager, "gpu_ms"] = values
    fig = latency_histogram(steps)
    eager_title = fig.layout.annotations[0].text  # a subplot title: above the bars, never on them
    assert f"<br>{words}" in eager_title
    assert eager_title.endswith("is not shown" if outliers == 1 else "are not shown")
    assert all(a.yref == "paper" and a.y >= 1 for a in fig.layout.annotations)


def test_ecdf_is_monotonic_and_ends_at_one():
    fig = latency_ecdf(analysis.per_step_latency(_latency(10_000)), points=300)
    for trace in fig.data:
        x, y = np.asarray(trace.x), np.asarray(trace.y)
        assert len(x) <= 300 and np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
        assert y[-1] == 1.0


def test_minmax_decimation_keeps_the_extremes():
    y = np.random.default_rng(1).normal(size=100_003)
    y[77_777] = 99.0
    y[12_345] = -99.0
    keep = minmax_decimate(y, 2000)
    assert len(keep) <= 2000 and np.all(np.diff(keep) > 0)
    assert 77_777 in keep and 12_345 in keep
    assert np.array_equal(minmax_decimate(y[:50], 2000), np.arange(50))


def test_100k_latency_samples_render_server_side_in_well_under_a_second():
    latency = _latency(100_000)  # 100,000 samples per mode
    started = time.perf_counter()
    steps = analysis.per_step_latency(latency)
    figures = [latency_histogram(steps), latency_ecdf(steps),
               latency_series(steps)]
    payload = sum(len(fig.to_json()) for fig in figures)
    percentiles.percentile_table(latency, steps)
    elapsed = time.perf_counter() - started
    print(f"\n100,000 samples per mode: latency charts built and serialised in {elapsed:.3f} s, "
          f"{payload / 1e3:.0f} kB of figure JSON")
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert payload < 1_000_000  # what goes to the browser stays small


def test_the_profiled_waterfall_walks_from_eager_to_graph_on_each_timeline(run):
    fig = profiled_waterfall(run.table("breakdown"))
    gpu, cpu = fig.data
    assert list(gpu.x) == ["eager", "busy", "idle", "graph"]
    assert list(gpu.y) == [1200, 5, -955, 250]
    assert list(gpu.base) == [0, 1200, 1205, 0]  # each step floats from the level before it
    assert list(gpu.text) == ["1,200", "+5", "-955", "250"]
    # The CPU worked 52 of the graph step's 250 us: the rest it waited for the GPU.
    assert list(cpu.x) == ["eager", "launch", "other", "waiting on GPU", "graph"]
    assert cpu.y[0] + sum(cpu.y[1:4]) == pytest.approx(250) and cpu.y[3] == pytest.approx(198)
    assert [a.text for a in fig.layout.annotations] == ["GPU timeline", "CPU timeline"]
    assert fig.layout.title.text.startswith("Under the profiler")
    steps = profiled_waterfall_steps(run.table("breakdown"))
    assert list(steps["GPU"]["measure"]) == ["absolute", "relative", "relative", "total"]
    unattributed = pd.DataFrame({"mode": "graph", "component": ["gpu_idle", "total_span"],
                                 "eager_us": [900, 1200], "mode_us": [20, 250],
                                 "saving_us": [880, 950], "share_of_saving_pct": [92.6, 100]})
    trace = profiled_waterfall(unattributed).data[0]
    assert list(trace.x) == ["eager", "idle", "not attributed", "graph"]
    assert trace.y[0] + sum(trace.y[1:3]) == pytest.approx(250)


def test_waterfall_labels_are_never_clipped(run):
    """Every bar's label is drawn outside its bar with clipping off, and the y axis reaches past
    the tallest bar and below the lowest one (the '-1,414' label was cut off), in the profiled
    waterfall and in the headline's."""
    figures = [profiled_waterfall(breakdown) for breakdown in (
        run.table("breakdown"),
        pd.DataFrame({"mode": "graph", "component": ["gpu_busy", "gpu_idle", "total_span"],
                      "eager_us": [100, 1500, 1600], "mode_us": [110, 76, 186],
                      "saving_us": [-10, 1424, 1414], "share_of_saving_pct": [-0.7, 100.7, 100]}))]
    figures += [speedup_waterfall(run.table("attribution")),
                speedup_waterfall(_attribution(**ADAMW6)),
                speedup_waterfall(_attribution(**FP32_B2048))]
    for fig in figures:
        low, high = fig.layout.yaxis.range
        for trace in fig.data:
            assert trace.cliponaxis is False and trace.textposition == "outside"
            ends = np.asarray(trace.base, dtype=float) + np.asarray(trace.y, dtype=float)
            top = max(np.max(ends), np.max(trace.base))
            assert high >= top * 1.1 and low <= min(0, np.min(ends))
        assert fig.layout.margin.t >= 60 and fig.layout.margin.b >= 50


def test_split_bars_separate_the_cpu_and_gpu_sides(run):
    fig = split_bars(analysis.split_medians(run.table("launch_split")))
    assert fig.layout.barmode == "stack"
    modes, sides = fig.data[0].x
    assert list(modes) == ["eager", "graph"] and list(sides) == ["CPU", "CPU"]
    assert list(fig.data[3].x[1]) == ["GPU", "GPU"]


def test_kernel_top_bar_is_sorted_and_limited(run):
    trace = kernel_top_bar(run.table("kernels"), "eager", top_n=3).data[0]
    assert len(trace.y) == 3 and list(trace.x) == sorted(trace.x)  # biggest drawn on top


def _attribution(eager_ms, graph_ms, eager_busy_us, graph_busy_us, copy_ms, eager_host_ms=np.nan,
                 graph_host_ms=np.nan, mode="graph") -> pd.DataFrame:
    """attribution.csv as the runner writes it (``profiler_core.analysis.attribution.build``) from a run's
    medians: the steady-state step, the profiled GPU busy time, the batch copy, the host issue."""
    from profiler_core.analysis import attribution
    stats = pd.DataFrame([["eager", "steady_trial", eager_ms], [mode, "steady_trial", graph_ms],
                          [mode, "input_copy", copy_ms], ["eager", "host_issue", eager_host_ms],
                          [mode, "host_issue", graph_host_ms]],
                         columns=["mode", "method", "median_ms"]).dropna()
    split = pd.DataFrame({"mode": ["eager", mode], "gpu_busy_us": [eager_busy_us, graph_busy_us]})
    latency = pd.DataFrame({"mode": ["eager", mode], "steps": [1, 1]})
    return attribution.build(stats, split, latency)


# Medians of real H200 runs (2026-12-01): the graphed 6-layer AdamW step runs 187 us more kernels
# than eager (a capturable optimizer); fp32 at batch 2048 is GPU-bound and the graph is slower.
ADAMW6 = {"eager_ms": 2.796500224816172, "graph_ms": 1.445986531282726,
          "eager_busy_us": 1239.216797, "graph_busy_us": 1426.317871, "copy_ms": 0.011487,
          "eager_host_ms": 2.837659325, "graph_host_ms": 0.044320225}
FP32_B2048 = {"eager_ms": 2.0163250408674545, "graph_ms": 2.028384836096513,
              "eager_busy_us": 1983.84375, "graph_busy_us": 1985.014648, "copy_ms": 0.026309,
              "eager_host_ms": 1.551690825, "graph_host_ms": 0.0774712}
FP32_B2048_FIGURES = {"eager": {"median_ms": FP32_B2048["eager_ms"]},
                      "graph": {"median_ms": FP32_B2048["graph_ms"], "speedup": 0.9940544836391764,
                                "warmup_ms": 11.899387, "capture_ms": 4.958399, "pays_back": 0.0,
                                "break_even_iters": float("nan")}}
FP32_B2048_FACTS = {"timing_method": "steady_trial"}
FP32_B2048_MODES = pd.DataFrame({"mode": ["eager", "graph"],
                                 "median_ms": [FP32_B2048["eager_ms"], FP32_B2048["graph_ms"]],
                                 "speedup": [1.0, 0.994], "speedup_ci_low": [0.99, 0.99],
                                 "speedup_ci_high": [1.01, 0.997], "one_time_ms": [0.0, 16.857786],
                                 "memory_bytes": [0.0, 320864256.0],
                                 "graphs_recorded": [np.nan, 1.0]})


def test_verdicts_explain_the_headline_from_its_attribution():
    """The verdict quotes the headline's steps (timed, no profiler) and attributes their saving:
    idle removed, kernel time changed, batch copy added; never a profiled span as the step."""
    launch = _attribution(eager_ms=1.2, graph_ms=0.25, eager_busy_us=220, graph_busy_us=225,
                          copy_ms=0.01, eager_host_ms=1.25, graph_host_ms=0.04)
    v = analysis.verdict(Figures({"graph": {"speedup": 4.8}}), launch)
    assert v.kind == "launch-bound" and "(4.80x speedup)" in v.title
    assert "an eager step took 1,200 us and a graph step 250 us: 4.80x, a saving of 950 us" in v.text
    assert "The GPU sat idle 980 of the eager step's 1,200 us (82%): its kernels ran 220 us" in v.text
    assert "the host needed 1,250 us to issue the step, so it set the pace" in v.text
    assert "The graph removed 965 us of idle (102% of the saving)" in v.text
    assert "its kernels took 5.0 us longer (-0.5% of the saving)" in v.text
    assert "its batch copy added 10 us (-1.1% of the saving)" in v.text
    assert "1.06x its GPU work (225 us of kernels + 10 us of batch copy)" in v.text
    assert "profiled window" not in v.text and "other GPU work" not in v.text
    adamw = analysis.verdict(Figures({}), _attribution(**ADAMW6))
    assert adamw.kind == "launch-bound"
    assert "its kernels took 187 us longer (-13.9% of the saving)" in adamw.text
    assert "runs other GPU work than eager's (1,426 vs 1,239 us of kernels per step)" in adamw.text
    gpu_bound = _attribution(eager_ms=0.93, graph_ms=0.92, eager_busy_us=900, graph_busy_us=900,
                             copy_ms=0.0)
    v = analysis.verdict(Figures({}), gpu_bound)
    assert v.kind == "gpu-bound" and "97%" in v.text and "1.01x" in v.title
    assert "a graph can save at most the 30 us of idle" in v.text
    mixed = _attribution(eager_ms=1.0, graph_ms=0.75, eager_busy_us=750, graph_busy_us=740,
                         copy_ms=0.0)
    assert analysis.verdict(Figures({}), mixed).kind == "mixed"
    no_window = _attribution(eager_ms=1.2, graph_ms=0.25, eager_busy_us=np.nan,
                             graph_busy_us=np.nan, copy_ms=0.01)
    none = analysis.verdict(Figures({"graph": {"speedup": 4.8}}), no_window, "the profiler was off for this run")
    assert none.kind == "unknown" and "profiler was off" in none.text
    assert "a saving of 950 us per step" in none.text  # the how-much still said
    cpu = analysis.verdict(Figures({"eager": {"median_ms": 2.0}}), empty_table("attribution"),
                           "a CPU run: the profiler's launch split ... need a CUDA GPU")
    assert cpu.title == "A CPU run: eager only, no graph and no launch split"
    assert "2.000 ms (wall clock)" in cpu.text
    nothing = analysis.verdict(Figures({}), empty_table("attribution"), "the run stopped before profiling")
    assert nothing.kind == "unknown" and nothing.title == "No graph timing in this run"


def test_a_graph_that_is_not_faster_never_pays_back_and_says_so_everywhere():
    """fp32 at batch 2048 on an H200: GPU-bound, the graph 12 us slower per step (its batch copy
    added more than the idle it removed). The verdict, the break-even in every table and the
    waterfall say so; no 'n/a', no number of steps."""
    attribution = _attribution(**FP32_B2048)
    pay = analysis.pay_back(Figures(FP32_B2048_FIGURES), FP32_B2048_MODES)
    assert (pay.pays_back, pay.text) == (0.0, "never (graph not faster)")
    assert pay.cost_text == "warm-up 11.9 ms + capture 5.0 ms = 16.9 ms"
    assert analysis.pay_back(Figures(FP32_B2048_FIGURES), empty_table("modes")).text == pay.text
    v = analysis.verdict(Figures(FP32_B2048_FIGURES), attribution, None, "graph", pay)
    assert v.kind == "gpu-bound"
    assert v.title == "GPU-bound: the graph is not faster (0.99x), so it never pays back"
    assert "0.99x, the graph step is 12 us slower" in v.text
    assert ("The graph removed 15 us of idle, but its kernels took 1.2 us longer and its batch "
            "copy added 26 us") in v.text
    assert "one-time cost (warm-up 11.9 ms + capture 5.0 ms = 16.9 ms) is never paid back" in v.text
    assert "the expected result" not in v.text
    costs = analysis.one_time_costs(Figures(FP32_B2048_FIGURES), FP32_B2048_FACTS,
                                    pay).set_index("quantity")["shown"]
    assert costs["break-even (see below)"] == "never (graph not faster)"
    assert costs["one-time cost (warm-up + capture)"] == "16.86 ms"
    shares = analysis.saving_table(attribution)["share_of_saving_pct"]
    assert shares.isna().all()  # no saving to share: a share of -12 us would flip every sign
    table = analysis.modes_table(FP32_B2048_MODES, Figures(FP32_B2048_FIGURES))
    assert table["break_even"].tolist() == ["", "never (graph not faster)"]
    from profiler_core.spec.config import PRESETS
    row = compare.compare_summary("A", "fp32-b2048", PRESETS["seed"], {"gpu_name": "H200"},
                                   Headline.of(Figures(FP32_B2048_FIGURES), FP32_B2048_FACTS), empty_table("stats"),
                                   v.title, True,
                                   pay.text)
    assert row["break_even"] == "never (graph not faster)"
    assert list(row) == compare.COMPARE_SUMMARY_COLUMNS
    # the waterfall walks up: eager's step, the parts (idle removed, copy added), the graph's step
    trace = speedup_waterfall(attribution).data[0]
    assert trace.y[0] == pytest.approx(2016.325, abs=0.01)
    assert trace.y[-1] == pytest.approx(2028.385, abs=0.01) and trace.y[-1] > trace.y[0]
    assert sum(trace.y[1:-1]) == pytest.approx(trace.y[-1] - trace.y[0], rel=0.01)


def _waterfall_sum(fig) -> tuple[float, float, float]:
    """(eager's bar, the parts' sum, the graph's bar) of the headline waterfall's figure JSON."""
    spec = json.loads(fig.to_json())
    trace = spec["data"][0]
    values = list(_numbers(trace["y"]))
    return values[0], sum(values[1:-1]), values[-1]


@pytest.mark.skipif(not (Path(__file__).resolve().parent.parent / "dashboard" / "sample_run").is_dir(),
                    reason="dashboard/sample_run/ is not in this checkout")
def test_the_bundled_samples_saving_is_attributed_to_the_headline_not_the_profiled_window():
    """Issue 17: the waterfall and the saving table explain the sample's headline (its two
    steady-state medians), not its profiled window, which runs eager far slower: their parts add
    up to the headline's saving (within 1%), the ends are the headline's medians, and no profiled
    span is quoted as the step."""
    run = RunResult.load(Path(__file__).resolve().parent.parent / "dashboard" / "sample_run")
    pair, figures = run.pair, run.figures
    eager_us, graph_us = pair.eager_ms * 1e3, pair.graph_ms * 1e3
    spans = run.table("breakdown").set_index(["mode", "component"])
    eager_span = float(spans.at[("graph", "total_span"), "eager_us"])
    graph_span = float(spans.at[("graph", "total_span"), "mode_us"])
    assert eager_span > 1.1 * eager_us  # the profiler slows eager: the reason for all this
    fig = speedup_waterfall(run.table("attribution"))
    first, parts, last = _waterfall_sum(fig)
    assert (first, last) == (pytest.approx(eager_us), pytest.approx(graph_us))
    assert -parts == pytest.approx(eager_us - graph_us, rel=0.01)
    assert list(fig.data[0].x) == ["eager step", "kernel time changed", "batch copy added",
                                   "GPU idle removed", "graph step"]
    assert f"{eager_span:,.0f}" not in fig.to_json() and f"{eager_span:.0f}" not in fig.to_json()
    table = analysis.saving_table(run.table("attribution")).set_index("component")
    assert table.loc[["gpu_kernels", "input_copy", "gpu_idle"], "saving_us"].sum() == pytest.approx(
        table.at["step", "saving_us"], rel=0.01)
    assert table.at["step", "saving_us"] == pytest.approx(eager_us - graph_us)
    assert table.loc[["gpu_kernels", "input_copy", "gpu_idle"], "share_of_saving_pct"].sum() == (
        pytest.approx(100, abs=1))
    assert table.at["input_copy", "share_of_saving_pct"] < 0  # the copy the graph added
    pay = analysis.pay_back(run.figures, run.table("modes"))
    v = analysis.verdict(run.figures, run.table("attribution"), None, "graph", pay)
    assert (f"an eager step took {eager_us:,.0f} us and a graph step {graph_us:,.0f} us: "
            f"{pair.speedup:.2f}x, a saving of {eager_us - graph_us:,.0f} us") in v.text
    assert f"{eager_span:,.0f} us" not in v.text and f"{graph_span:,.0f} us" not in v.text
    # break-even: the one-time cost (warm-up + capture) over the saving per step
    warmup, capture = figures.get("graph", "warmup_ms"), figures.get("graph", "capture_ms")
    expected = math.ceil((warmup + capture) / (pair.eager_ms - pair.graph_ms))
    assert pay.text == f"{expected} steps"
    assert pay.cost_text == (f"warm-up {warmup:.1f} ms + capture {capture:.1f} ms = "
                             f"{warmup + capture:.1f} ms")
    # the profiler's overhead against the headline, as the run recorded it
    overheads = analysis.profiler_overheads(run.table("metrics"), run.table("stats"),
                                            run.table("latency")).set_index("mode")
    recorded = run.table("metrics").set_index(["mode", "metric"])["value"]
    for mode in ("eager", "graph"):
        assert overheads.at[mode, "overhead_pct"] == pytest.approx(
            recorded[(mode, "profiler_overhead_pct")], abs=0.1)
    eager_pct = overheads.at["eager", "overhead_pct"]
    text = analysis.profiler_overhead_text(overheads.reset_index())
    assert text.startswith(f"Under the profiler, eager's median iteration took "
                           f"{overheads.at['eager', 'profiled_ms'] * 1e3:,.0f} us against the "
                           f"headline's {eager_us:,.0f} us: the profiled window ran eager "
                           f"{eager_pct:.0f}% slower")
    costs = analysis.one_time_costs(run.figures, run.headline, pay, overheads.reset_index())
    shown = costs.set_index("quantity")["shown"]
    assert shown["profiler overhead vs headline, eager"] == f"{eager_pct:.2f} %"
    floor = analysis.kernel_floor(run.table("attribution")).set_index("mode")["gpu_busy_us"]
    kernels = run.table("attribution").set_index(["mode", "component"])
    assert floor["eager"] == pytest.approx(kernels.at[("graph", "gpu_kernels"), "eager_us"])
    assert floor["graph"] == pytest.approx(kernels.at[("graph", "gpu_kernels"), "mode_us"])


def test_a_part_the_graph_added_is_drawn_as_an_increase_with_host_issue_beside():
    """The graphed AdamW step's kernels take 187 us more (a capturable optimizer): that part rises,
    the sum still lands on the headline's graph step, and the host's issue time is drawn beside,
    in its own panel, not as a step of the walk."""
    attribution = _attribution(**ADAMW6)
    fig = speedup_waterfall(attribution)
    walk, host = fig.data
    assert walk.y[1] == pytest.approx(187.1, abs=0.1) and walk.text[1] == "+187"
    assert walk.base[1] == pytest.approx(2796.5, abs=0.1)  # it starts at eager's step and rises
    first, parts, last = _waterfall_sum(fig)
    assert first + parts == pytest.approx(last, rel=1e-9)
    assert -parts == pytest.approx(1350.5, abs=0.1)
    assert list(host.x) == ["eager", "graph"] and list(host.y) == pytest.approx([2837.7, 44.3], abs=0.1)
    assert host.xaxis == "x2"
    titles = [a.text for a in fig.layout.annotations]
    assert "host time to issue a step<br>(not part of the sum)" in titles
    table = analysis.saving_table(attribution).set_index("component")
    assert table.at["gpu_kernels", "share_of_saving_pct"] == pytest.approx(-13.85, abs=0.01)
    assert table.at["host_issue", "in_the_sum"] == "not part of the sum: why the GPU waited"
    assert np.isnan(table.at["host_issue", "share_of_saving_pct"])  # outside the sum: no share
    assert list(table.index) == ["gpu_kernels", "input_copy", "gpu_idle", "step", "host_issue"]
    assert "negative share is time the graph added" in analysis.NEGATIVE_SHARE_TEXT
    # a mode beside the graph: its own block, its own labels
    other = _attribution(**ADAMW6, mode="compile_ro")
    trace = speedup_waterfall(other, other="compile_ro").data[0]
    assert trace.x[-1] == "compile_ro step"
    assert analysis.attribution_modes(pd.concat([attribution, other])) == ["graph", "compile_ro"]
    assert speedup_waterfall(attribution, "none here", other="compile_ro").layout.annotations[
        0].text == "none here"


def test_derived_tables_have_their_columns(run):
    assert list(percentiles.percentile_table(run.table("latency")).columns) == percentiles.PERCENTILE_COLUMNS
    assert list(percentiles.percentile_table(empty_table("latency")).columns) == percentiles.PERCENTILE_COLUMNS
    pct = percentiles.percentile_table(run.table("latency"))
    assert set(zip(pct["mode"], pct["timing"])) == {
        (m, t) for m in ("eager", "graph") for t in ("steady_event", "cold_event", "cold_wall")}
    assert (pct["count"] < 1000).all()  # so p99.9 is not shown: see the percentile rule
    assert (pct["p1_ms"] <= pct["p50_ms"]).all() and (pct["p50_ms"] <= pct["p99_ms"]).all()
    assert pct["p99_9_ms"].isna().all()
    timing = analysis.timing_comparison(run.table("stats"), run.figures)
    assert list(timing.columns) == analysis.TIMING_COLUMNS
    assert list(timing["method"]) == ["steady_trial", "steady_event", "cold_event", "cold_wall",
                                      "block_sync", "article_no_sync"]
    from_figures = analysis.timing_comparison(empty_table("stats"), run.figures)
    article = [run.figures.get(mode, "article_no_sync_median_ms") for mode in ("eager", "graph")]
    assert from_figures["speedup"].tolist() == [article[0] / article[1]]
    assert from_figures["speedup"].tolist() == pytest.approx([3.0], rel=0.01)
    medians = analysis.split_medians(run.table("launch_split"))
    assert list(medians.columns) == analysis.SPLIT_MEDIAN_COLUMNS
    assert list(medians["mode"]) == ["eager", "graph"]
    lessons = run_facts.counter_lessons(run.table("counters"))
    assert list(lessons.columns) == run_facts.COUNTER_LESSON_COLUMNS
    assert lessons["match"].all() and lessons["why"].str.len().min() > 20
    assert "lesson 1" in lessons.loc[lessons["phase"] == "after_capture", "why"].item()
    explained = run_facts.counter_lessons(run.table("counters"), run.config)
    assert explained.loc[explained["phase"] == "after_replay", "why"].item().endswith(
        "Here: 200 replays x 1 captured = 200.")
    kernels = kernel_tables.kernel_table(run.table("kernels"))
    assert list(kernels.columns) == kernel_tables.KERNEL_TABLE_COLUMNS
    assert kernels.groupby("mode")["total_us"].apply(lambda s: s.is_monotonic_decreasing).all()
    costs = analysis.one_time_costs(run.figures, run.headline)
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
    from profiler_core.spec.config import PRESETS

    diff = run_facts.configs_diff({"a": PRESETS["seed"], "b": PRESETS["lesson3"]})
    # the eager steps and trials both runs used (automatic: from the replays) differ too
    assert set(diff["setting"]) == {"capture_iters", "replays", "eager_iters", "trials", "preset"}
    table = run_facts.config_table(PRESETS["seed"])
    assert table.loc[table["setting"] == "eager_iters", "value"].item() == "200 (auto)"
    assert list(run_facts.environment_table({"gpu_name": "H200", "x": 1})["item"]) == ["gpu_name", "x"]


def test_schema_tables_all_have_a_chart_or_table():
    # Every table of the run directory is shown somewhere (guards against a new table nobody draws).
    shown = {"counters", "latency", "stats", "launch_split", "breakdown", "kernels", "nvml", "phases",
             "modes", "metrics", "repeats", "attribution", "rank_latency", "ranks", "strategies",
             "shape_steps"}
    assert shown == set(TABLE_FILES)


# ----------------------------------------------------------------------------- hardening

def _all_figures(run, transform=lambda name, frame: frame) -> dict[str, go.Figure]:
    """Every figure of the dashboard from ``run``'s tables (each table passed through
    ``transform(table name, frame)`` first)."""
    t = {name: transform(name, run.table(name)) for name in TABLE_FILES}
    steps = analysis.per_step_latency(t["latency"])
    steady, column = analysis.series_steps(steps, "steady_event")
    medians = analysis.split_medians(t["launch_split"])
    other = next(iter(analysis.decomposable_modes(t["breakdown"], medians)), "graph")
    compared = pd.concat([compare.compare_rows(tag, run.pair.timing_method, t["stats"], False)[0]
                         for tag in ("A", "B")])
    timeline = pd.DataFrame({"lane": ["CPU: ops, thread 1", "CPU: launch calls", "GPU: kernels, copies"],
                             "kind": ["CPU op", "launch call", "kernel"],
                             "name": ["aten::linear", "cudaLaunchKernel", "gemm"],
                             "start_us": [0.0, 5.0, 9.0], "dur_us": [20.0, 3.0, 12.0]})
    if "kernels" in t and len(t["kernels"]):  # the timeline's kernel takes the (odd) kernel name
        timeline.loc[2, "name"] = str(t["kernels"]["kernel_full"].iloc[0])
        timeline.loc[2, "dur_us"] = t["kernels"]["mean_us"].iloc[0]
    return {
        "median_bars": median_bars(t["stats"], medians),
        "histogram": latency_histogram(steady, column),
        "ecdf": latency_ecdf(steady, column),
        "series": latency_series(steady, column),
        "timing": timing_methods_bars(analysis.timing_comparison(t["stats"], run.figures)),
        "split": split_bars(medians),
        "waterfall": speedup_waterfall(t["attribution"], other=other),
        "profiled_waterfall": profiled_waterfall(
            analysis.breakdown_against(t["breakdown"], medians, other), other=other),
        "counts": launch_count_bars(medians),
        "nvml": nvml_timeseries(t["nvml"], t["phases"]),
        "nvml_zoomed": nvml_timeseries(t["nvml"], t["phases"], x_range=(0.5, 3.0)),
        "kernels_eager": kernel_top_bar(t["kernels"], "eager"),
        "kernel_diff": kernel_diff_bars(kernel_tables.kernel_diff(t["kernels"])),
        "counters": counter_bars(run_facts.counter_lessons(t["counters"])),
        "compare": compare_medians(compared),
        "compare_log": compare_medians(compared, log_scale=True),
        "timeline": iteration_timeline(timeline, "eager", 40.0),
        "repeats": repeats_chart(t["repeats"]),
    }


def _numbers(value):
    """Every number in a figure's JSON (decoding Plotly's base64 typed arrays)."""
    import base64

    if isinstance(value, dict):
        if set(value) >= {"dtype", "bdata"}:
            yield from np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
            return
        for item in value.values():
            yield from _numbers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _numbers(item)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


def _strings(value):
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


NON_FINITE_COLUMNS = {
    "latency": ("gpu_ms", "wall_ms"), "stats": ("median_ms", "p10_ms", "p90_ms"),
    "launch_split": ("span_us", "cpu_launch_us", "gpu_busy_us", "gpu_idle_us", "launches"),
    "breakdown": ("eager_us", "mode_us", "saving_us"), "nvml": ("value", "t_s"),
    "attribution": ("eager_us", "mode_us", "saving_us"),
    "kernels": ("total_us", "mean_us", "share_of_gpu_pct"), "phases": ("start_s", "end_s"),
    "counters": ("observed",),
}


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_every_chart_ignores_non_finite_values(run, bad):
    """A value that is not a finite number (a damaged or hand-edited run) is left out of every
    chart: no crash, no inf in the figure, the finite values still drawn."""
    def damage(name, frame):
        frame = frame.copy()
        for column in NON_FINITE_COLUMNS.get(name, ()):
            values = frame[column].astype(float)
            values.iloc[::3] = bad  # every third value
            frame[column] = values
        if name == "latency":  # and every graph sample of one method
            frame.loc[frame["mode"] == "graph", "gpu_ms"] = bad
        return frame

    for name, fig in _all_figures(run, damage).items():
        payload = fig.to_plotly_json()
        numbers = list(_numbers(payload))
        assert not any(np.isinf(v) for v in numbers if v is not None), name
        assert "Infinity" not in fig.to_json(), name
    figures = _all_figures(run, damage)
    hist = figures["histogram"]
    assert [t.name for t in hist.data] == ["eager"]  # graph's samples all bad: no panel, no crash
    assert all(np.isfinite(np.asarray(t.x, dtype=float)).all() for t in hist.data)


def test_a_mode_whose_times_are_all_infinite_does_not_break_the_latency_charts():
    steps = analysis.per_step_latency(_latency(300))
    steps.loc[steps["mode"] == "graph", "gpu_ms"] = np.inf
    for build in (latency_histogram, latency_ecdf, latency_series):
        fig = build(steps)
        assert {t.name for t in fig.data} == {"eager"}
        fig.to_json()
    steps["gpu_ms"] = np.inf
    assert "no " in latency_histogram(steps).layout.annotations[0].text


HOSTILE = '<a href="https://example.com/x?a=1&b=2">click</a><img src=x onerror=alert(1)>&amp;'
ESCAPED = ('&lt;a href="https://example.com/x?a=1&amp;b=2"&gt;click&lt;/a&gt;&lt;img src=x '
           'onerror=alert(1)&gt;&amp;amp;')


def test_escape_keeps_quotes_and_escapes_markup():
    assert escape(HOSTILE) == ESCAPED
    assert escape('say "hi" & <b>') == 'say "hi" &amp; &lt;b&gt;'  # quotes stay as they are


def test_labels_from_run_data_never_become_markup_in_any_chart(run):
    """Modes, kernel names, phases, counter phases, components and run labels reach Plotly
    escaped (Plotly renders <a href> in labels, legends and hover text as a live link)."""
    def hostile(name, frame):
        frame = frame.copy()
        if "mode" in frame:
            frame["mode"] = frame["mode"].map({"eager": "eager", "graph": HOSTILE})
        for column in ("kernel", "kernel_full", "phase"):
            if column in frame:
                frame[column] = HOSTILE + frame[column].astype(str)
        return frame

    figures = _all_figures(run, hostile)
    for name, fig in figures.items():
        texts = list(_strings(fig.to_plotly_json()))
        assert not [t for t in texts if "<a " in t or "<img" in t or "</a>" in t], name
    joined = {name: "\n".join(_strings(fig.to_plotly_json())) for name, fig in figures.items()}
    for name in ("median_bars", "histogram", "ecdf", "split", "waterfall", "profiled_waterfall", "counts",
                 "kernels_eager", "kernel_diff", "nvml", "counters"):
        assert ESCAPED in joined[name] or ESCAPED[:60] in joined[name], name
    # run labels and components of the comparison and the timeline
    frame = pd.DataFrame({"run": [HOSTILE], "mode": ["eager"], "method": [HOSTILE],
                          "median_ms": [1.0], "p10_ms": [0.9], "p90_ms": [1.1]})
    texts = list(_strings(compare_medians(frame).to_plotly_json()))
    assert not [t for t in texts if "<a " in t] and any(ESCAPED in t for t in texts)
    lanes = pd.DataFrame({"lane": [HOSTILE], "kind": [HOSTILE], "name": [HOSTILE],
                          "start_us": [0.0], "dur_us": [1.0]})
    texts = list(_strings(iteration_timeline(lanes, HOSTILE).to_plotly_json()))
    assert not [t for t in texts if "<a " in t] and any(ESCAPED in t for t in texts)
    # hover templates never hold run data (a '%{' in a name would be evaluated there)
    for fig in figures.values():
        for trace in fig.data:
            assert "example.com" not in str(getattr(trace, "hovertemplate", "") or "")


def test_one_colour_means_one_thing(run):
    """Green is the GPU's busy time wherever it appears, never 'a decrease'; eager and graph keep
    their mode colours, also as the waterfall's totals."""
    busy = SPLIT_COLORS["gpu_busy_us"]
    medians = analysis.split_medians(run.table("launch_split"))
    split = {t.name: t.marker.color for t in split_bars(medians).data}
    assert split["GPU busy"] == busy
    gpu, cpu = profiled_waterfall(run.table("breakdown")).data
    assert list(gpu.marker.color) == [MODE_COLORS["eager"], busy,
                                      SPLIT_COLORS["gpu_idle_us"], MODE_COLORS["graph"]]
    assert list(cpu.marker.color)[1:3] == [SPLIT_COLORS["cpu_launch_us"],
                                           SPLIT_COLORS["cpu_other_us"]]
    assert busy not in list(cpu.marker.color)  # a CPU saving is never green
    counts = {t.name: t.marker.color for t in launch_count_bars(medians).data}
    assert counts == {"launch calls (CPU)": SPLIT_COLORS["cpu_launch_us"],
                      "kernels (GPU)": busy}
    floor = median_bars(run.table("stats"), analysis.kernel_floor(run.table("attribution")))
    assert floor.data[-1].marker.color == busy
    headline = speedup_waterfall(run.table("attribution")).data[0]
    assert list(headline.marker.color) == [MODE_COLORS["eager"], busy,
                                           TIMELINE_KIND_COLORS["memcpy/memset"],
                                           SPLIT_COLORS["gpu_idle_us"],
                                           MODE_COLORS["graph"]]
    every = list(MODE_COLORS.values()) + list(SPLIT_COLORS.values())
    assert len(set(every)) == len(every)  # no colour stands for two things


# ----------------------------------------------------------------------------- derived tables

def test_breakdown_table_gives_shares_per_timeline_that_add_up_to_100(run):
    table = analysis.breakdown_table(run.table("breakdown"))
    assert list(table.columns) == analysis.BREAKDOWN_TABLE_COLUMNS
    assert list(table["timeline"]) == ["GPU", "GPU", "CPU", "CPU", "CPU", "both"]
    assert list(table["component"]) == ["gpu_busy", "gpu_idle", "cpu_launch", "cpu_other",
                                        "waiting on GPU", "total_span"]
    for timeline, share in table.groupby("timeline")["share_of_timeline_saving_pct"].sum().items():
        assert share == pytest.approx(100.0), timeline
    raw = run.table("breakdown")["share_of_saving_pct"].sum()
    assert raw > 250  # what breakdown.csv says: far over 100% with no timeline named
    assert analysis.breakdown_table(empty_table("breakdown")).columns.tolist() == \
        analysis.BREAKDOWN_TABLE_COLUMNS


def test_kernel_diff_pairs_kernels_across_modes_and_the_filter_is_plain_text():
    kernels = pd.DataFrame({
        "mode": ["eager", "eager", "graph", "graph"],
        "kernel": ["gemm", "fill", "gemm", "seed"], "kernel_full": ["gemm<1>", "fill<2>", "gemm<1>", "seed(x)"],
        "calls_per_iter": [2.0, 1.0, 2.0, 2.0], "total_us": [400.0, 10.0, 380.0, 8.0],
        "mean_us": [10.0, 0.5, 9.5, 0.2], "min_us": [1.0] * 4, "max_us": [20.0] * 4,
        "share_of_gpu_pct": [97.0, 3.0, 98.0, 2.0]})
    diff = kernel_tables.kernel_diff(kernels)
    assert list(diff.columns) == kernel_tables.KERNEL_DIFF_COLUMNS
    rows = diff.set_index("kernel_full")
    assert rows.loc["gemm<1>", "where"] == "both"
    assert rows.loc["gemm<1>", ["eager_us_per_iter", "graph_us_per_iter"]].tolist() == [20.0, 19.0]
    assert rows.loc["gemm<1>", "change_us_per_iter"] == pytest.approx(-1.0)
    assert rows.loc["fill<2>", "where"] == "eager only" and rows.loc["fill<2>", "graph_us_per_iter"] == 0
    assert rows.loc["seed(x)", "where"] == "graph only" and rows.loc["seed(x)", "eager_calls_per_iter"] == 0
    assert list(diff["kernel_full"])[0] == "gemm<1>"  # largest first
    assert list(kernel_tables.filter_by_name(kernels, " GEMM ")["kernel"]) == ["gemm", "gemm"]
    assert kernel_tables.filter_by_name(kernels, "(x)")["kernel"].tolist() == ["seed"]  # not a regex
    assert kernel_tables.filter_by_name(kernels, ".*").empty
    assert len(kernel_tables.filter_by_name(kernels, "")) == 4


def test_a_cpu_run_is_compared_by_wall_time_and_says_so(run):
    stats = pd.DataFrame({"mode": ["eager", "eager"], "method": ["steady_trial", "steady_wall"],
                          "count": [10, 190], "mean_ms": [1.1, 1.2], "median_ms": [1.0, 1.1],
                          "p10_ms": [0.9, 0.8], "p90_ms": [1.2, 1.5], "p99_ms": [1.3, 2.0],
                          "iqr_ms": [0.1, 0.2], "min_ms": [0.8, 0.7], "max_ms": [1.4, 3.0]})
    rows, text = compare.compare_rows("B", "steady_trial", stats, cpu=True)
    assert rows.to_dict("records") == [{"run": "B", "mode": "eager",
                                        "method": "steady state, per trial (wall clock)",
                                        "median_ms": 1.0, "p10_ms": 0.9, "p90_ms": 1.2}]
    assert "CPU run: no CUDA events, so it is compared by wall-clock time" in text
    gpu_rows, gpu_text = compare.compare_rows("A", run.pair.timing_method, run.table("stats"), cpu=False)
    assert set(gpu_rows["mode"]) == {"eager", "graph"}
    assert set(gpu_rows["method"]) == {"steady state, per trial (CUDA events)"}
    # a run whose headline method has no finite median falls back to one that has
    broken = stats.assign(median_ms=[np.inf, 1.1])
    rows, text = compare.compare_rows("C", "steady_trial", broken, cpu=False)
    assert list(rows["method"]) == ["steady state, every step (wall clock)"]
    assert "compared by wall-clock time" in text
    none, text = compare.compare_rows("D", "", empty_table("stats"), cpu=False)
    assert none.empty and "no bar" in text
    fig = compare_medians(pd.concat([gpu_rows, rows]))
    assert [t.name for t in fig.data] == ["eager", "graph"]
    runs, bars = fig.data[0].x  # a two-level axis: the run, then the mode with its median
    assert [r.replace("<br>", " ") for r in runs] == ["A steady state, per trial (CUDA events)",
                                                     "C steady state, every step (wall clock)"]
    assert list(bars)[1] == "eager<br>1.100 ms"


def test_phase_summary_and_the_default_zoom_skip_the_setup():
    phases = pd.DataFrame({"phase": ["setup", "warm-up", "eager timed", "graph timed", "eager timed",
                                     "graph timed", "parity"],
                           "start_s": [0.0, 3.6, 3.7, 3.8, 3.9, 4.0, 4.2],
                           "end_s": [3.6, 3.7, 3.8, 3.9, 4.0, 4.1, np.inf]})
    summary = run_facts.phase_summary(phases)
    assert list(summary.columns) == run_facts.PHASE_SUMMARY_COLUMNS
    assert list(summary["phase"]) == ["setup", "warm-up", "eager timed", "graph timed"]
    assert summary.set_index("phase").loc["eager timed", "blocks"] == 2
    first, last = run_facts.default_phase_range(summary)
    assert (first, last) == ("warm-up", "graph timed")
    low, high = run_facts.phase_window(summary, first, last, pad=0)
    assert (low, high) == pytest.approx((3.6, 4.1))
    assert run_facts.phase_window(summary, "graph timed", "warm-up", pad=0) == pytest.approx((3.6, 4.1))
    assert run_facts.phase_window(summary, "nope", "warm-up") is None
    nvml = pd.DataFrame({"t_s": np.arange(0, 4.2, 0.1), "metric": "gpu_util_pct", "value": 50.0,
                         "source": "poll"})
    fig = nvml_timeseries(nvml, phases, x_range=(low, high))
    assert tuple(fig.layout.xaxis.range) == pytest.approx((3.6, 4.1))
    shown = np.concatenate([np.asarray(t.x, dtype=float) for t in fig.data if t.x is not None
                            and len(t.x) and t.x[0] is not None and t.type != "bar"])
    lanes = [t for t in fig.data if t.type == "bar"]  # the phase lanes: bars from their start
    assert min(float(np.min(t.base)) for t in lanes) >= 3.6 - 1e-9
    assert shown.min() >= 3.6 - 1e-9 and shown.max() <= 4.1 + 1e-9  # samples outside left out
    assert len(fig.layout.shapes) == 5  # the setup band is outside the window


def test_preset_label_says_custom_when_values_differ():
    from profiler_core.spec.config import PRESETS

    assert analysis.preset_label(PRESETS["seed"]) == "seed"
    assert analysis.preset_label(PRESETS["seed"].replace(device="cpu")) == "seed"
    assert analysis.preset_label(PRESETS["seed"].replace(batch=64)) == "custom"
    # the seed step in another precision is still the seed step (issue 28: "preset custom, bf16")
    assert analysis.preset_label(PRESETS["seed"].replace(dtype="bf16")) == "seed"
    assert analysis.preset_text(PRESETS["seed"].replace(dtype="bf16")) == "seed step in bf16"
    assert analysis.preset_text(PRESETS["lesson3"]) == "lesson3 preset, fp32"
    assert analysis.preset_text(PRESETS["seed"].replace(batch=64)) == "custom (seed with batch 64)"
    assert analysis.preset_text(PRESETS["seed"].replace(preset="custom", batch=8)) == "custom, fp32"


def test_the_modes_chart_and_table():
    modes = pd.DataFrame({"mode": ["eager", "graph", "compile_ro"], "median_ms": [1.2, 0.25, 0.3],
                          "speedup": [1.0, 4.8, 4.0], "speedup_ci_low": [1.0, 4.6, 3.8],
                          "speedup_ci_high": [1.0, 5.0, 4.2], "one_time_ms": [0.0, 40.0, 9000.0],
                          "memory_bytes": [0.0, 2**21, 2**20], "graphs_recorded": [np.nan, 1, 3]})
    fig = modes_speedup_bars(modes)
    assert list(fig.data[0].x) == ["eager", "graph", "compile_ro"]
    assert list(fig.data[0].y) == [1.0, 4.8, 4.0]
    table = analysis.modes_table(modes)
    assert list(table.columns) == analysis.MODES_TABLE_COLUMNS
    assert table["memory_mib"].tolist() == [0.0, 2.0, 1.0]
    assert "reduce-overhead" in table.loc[2, "what"]
    assert not modes_speedup_bars(empty_table("modes")).data


def test_five_modes_keep_the_latency_charts_readable():
    """Every mode gets its own colour (none the launch split's green), the run's mode order, at
    most three histogram panels per row, and one legend entry per mode in the series chart."""
    frames = []
    for mode in ("compile_ro", "eager", "compile", "graph", "graphed_callables"):
        part = _latency(60).query("mode == 'eager'").assign(mode=mode)
        frames.append(part)
    steps = analysis.per_step_latency(pd.concat(frames, ignore_index=True))
    hist = latency_histogram(steps)
    assert [t.name for t in hist.data] == ["eager", "graph", "graphed_callables", "compile",
                                           "compile_ro"]
    assert [t.xaxis for t in hist.data] == ["x", "x2", "x3", "x4", "x5"]
    assert hist.layout.xaxis4.domain == hist.layout.xaxis.domain  # the fourth panel starts row 2
    colours = [t.marker.color for t in hist.data]
    assert len(set(colours)) == 5 and SPLIT_COLORS["gpu_busy_us"] not in colours
    series = latency_series(steps)
    shown = [t.name for t in series.data if t.showlegend is not False]
    assert shown == ["eager", "graph", "graphed_callables", "compile", "compile_ro"]


# The H200 sample as recorded before schema 3 (the bundled one was re-recorded since)
SAMPLE_RUN = Path(__file__).resolve().parent / "data" / "h200_schema2_sample"


def test_a_schema_2_run_loads_with_the_graphs_breakdown_block_and_every_figure_per_mode():
    """The bundled sample (schema 2: breakdown.csv in eager_us/graph_us, no metrics.csv) opens as
    today's schema: its breakdown is the graph's block with mode_us = the file's graph_us, and its
    metrics table (what the Overview offers as every figure per mode) holds eager and graph."""
    assert json.loads((SAMPLE_RUN / "summary.json").read_text())["schema_version"] == 2
    assert not (SAMPLE_RUN / "metrics.csv").exists()
    saved = pd.read_csv(SAMPLE_RUN / "breakdown.csv")
    run = RunResult.load(SAMPLE_RUN)
    breakdown = run.table("breakdown")
    assert list(breakdown.columns) == BREAKDOWN_COLUMNS
    assert set(breakdown["mode"]) == {"graph"}
    assert breakdown["component"].tolist() == saved["component"].tolist()
    assert breakdown["mode_us"].tolist() == pytest.approx(saved["graph_us"].tolist())
    assert analysis.breakdown_against(breakdown, analysis.split_medians(run.table("launch_split")),
                                      "graph")["mode_us"].tolist() == pytest.approx(
        saved["graph_us"].tolist())
    figures = run.table("metrics")
    assert list(figures.columns) == METRIC_COLUMNS and len(figures)
    assert set(figures["mode"]) == {"eager", "graph"}
    median = figures[figures["metric"] == "median_ms"].set_index("mode")
    assert median.at["graph", "value"] < median.at["eager", "value"]  # 0.237 ms vs 1.593 ms
    assert median.at["graph", "ratio_to_eager"] == pytest.approx(
        median.at["graph", "value"] / median.at["eager", "value"])
    assert median.at["graph", "ratio_to_eager"] < 1
    assert median.at["eager", "ratio_to_eager"] == pytest.approx(1.0)


def test_a_modes_own_breakdown_block_is_decomposed_not_its_launch_split_medians(run):
    """breakdown.csv holds one block per mode: the waterfall and the table of a mode beside the
    graph come from that mode's own block; a mode without one is worked out from the launch
    split's medians; a mode with neither has an empty decomposition."""
    graph = run.table("breakdown")
    own = graph.assign(mode="compile_ro", mode_us=graph["mode_us"] * 2,
                       saving_us=graph["eager_us"] - graph["mode_us"] * 2)
    breakdown = pd.concat([graph, own], ignore_index=True)
    split = run.table("launch_split")
    medians = analysis.split_medians(pd.concat(
        [split, split[split["mode"] == "graph"].assign(mode="compile_ro"),
         split[split["mode"] == "graph"].assign(mode="compile")], ignore_index=True))
    assert analysis.decomposable_modes(breakdown, medians) == ["graph", "compile", "compile_ro"]

    picked = analysis.breakdown_against(breakdown, medians, "compile_ro")
    assert set(picked["mode"]) == {"compile_ro"}
    assert picked["mode_us"].tolist() == (graph["mode_us"] * 2).tolist()
    gpu, _ = profiled_waterfall(picked, other="compile_ro").data
    assert list(gpu.x) == ["eager", "busy", "idle", "compile_ro"]
    assert gpu.y[-1] == 500  # the block's total_span (2 x 250), not the medians' (about 250)
    assert profiled_waterfall(breakdown, other="compile_ro").data[0].y[-1] == 500
    table = analysis.breakdown_table(picked).set_index("component")
    assert table.at["total_span", "mode_us"] == 500

    worked_out = analysis.breakdown_against(breakdown, medians, "compile")
    assert set(worked_out["mode"]) == {"compile"} and list(worked_out.columns) == BREAKDOWN_COLUMNS
    expected = medians.set_index("mode").loc["compile"]
    assert worked_out.set_index("component").at["total_span", "mode_us"] == expected["span_us"]
    assert analysis.breakdown_against(breakdown, medians, "graphed_callables").empty
    assert analysis.breakdown_against(graph.iloc[0:0], medians.iloc[0:0], "graph").empty


# ----------------------------------------------------------------------------- issue 20: what a new user meets


def _lab(color: str) -> tuple[float, float, float]:
    """A #RRGGBB colour in CIELAB (D65), to say how far apart two colours look."""
    def linear(c):
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(int(color[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(v):
        return v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _apart(a: str, b: str) -> float:
    return float(np.linalg.norm(np.subtract(_lab(a), _lab(b))))


def _cpu_stats() -> pd.DataFrame:
    """A CPU run's stats.csv as the issue saw it: 10 trials, p10-p90 5-33 ms around 21 ms."""
    return pd.DataFrame({"mode": ["eager", "eager"], "method": ["steady_trial", "steady_wall"],
                         "count": [10, 190], "mean_ms": [19.0, 12.0], "median_ms": [21.001, 6.43],
                         "p10_ms": [5.0, 4.9], "p90_ms": [33.0, 30.0], "p99_ms": [40.0, 60.0],
                         "iqr_ms": [10.0, 8.0], "min_ms": [4.0, 4.0], "max_ms": [41.0, 70.0]})


def test_a_cpu_runs_timing_chart_says_wall_clock_and_draws_no_empty_graph_entry():
    figures = Figures({"eager": {"median_ms": 21.001}})
    timing = analysis.timing_comparison(_cpu_stats(), figures, cpu=True)
    assert list(timing["label"]) == ["steady state, per trial (wall clock)",
                                     "steady state, every step (wall clock)"]
    assert not timing["label"].str.contains("CUDA").any()
    fig = timing_methods_bars(timing)
    assert [trace.name for trace in fig.data] == ["eager"]  # no 'graph' legend entry, empty
    assert not any("CUDA" in str(label) for label in fig.data[0].x)
    # a GPU run keeps both modes and its CUDA-event label
    gpu = analysis.timing_comparison(_cpu_stats().assign(mode=["graph", "graph"]).pipe(
        lambda g: pd.concat([_cpu_stats(), g])), figures)
    assert [t.name for t in timing_methods_bars(gpu).data] == ["eager", "graph"]
    assert gpu["label"].iloc[0] == "steady state, per trial (CUDA events)"


def test_the_median_label_is_under_its_bar_never_crossed_by_the_whisker():
    fig = median_bars(_cpu_stats(), method="steady_trial")
    bar = fig.data[0]
    assert not bar.text  # nothing written on the bar, where the p10-p90 whisker runs
    assert list(fig.layout.xaxis.ticktext) == ["eager<br><b>21.001 ms</b>"]
    assert list(fig.layout.xaxis.tickvals) == ["eager"] == list(bar.x)
    modes = pd.DataFrame({"mode": ["eager", "graph", "graphed_callables"], "median_ms": [1.5, 0.24, 1.0],
                          "speedup": [1.0, 6.29, 1.44], "speedup_ci_low": [0.8, 5.4, 1.1],
                          "speedup_ci_high": [1.2, 7.1, 1.7], "one_time_ms": [0.0, 14.6, 500.0]})
    every = modes_speedup_bars(modes)  # the Overview's 'Every mode': the same rule
    assert not every.data[0].text
    assert list(every.layout.xaxis.ticktext) == ["eager<br><b>1.00x</b>", "graph<br><b>6.29x</b>",
                                                 "graphed_<br>callables<br><b>1.44x</b>"]
    rows, _ = compare.compare_rows("B", "steady_trial", _cpu_stats(), cpu=True)
    medians = compare_medians(rows)
    assert not medians.data[0].text
    runs, bars = medians.data[0].x
    assert list(bars) == ["eager<br>21.001 ms"]  # the value, under the bar on the axis
    assert medians.layout.barmode == "overlay"  # one bar per place: none pushed off its label


def test_percentiles_are_shown_only_where_the_sample_count_supports_them():
    assert [percentiles.percentile_min_count(p) for p in percentiles.PERCENTILES] == \
        [100, 10, 4, 1, 4, 10, 100, 1000]
    latency = pd.DataFrame({"mode": "eager", "method": "steady", "trial": 0,
                            "iteration": np.arange(190), "steps": 1, "gpu_ms": np.nan,
                            "wall_ms": np.linspace(5, 33, 190)})
    table = percentiles.percentile_table(latency).iloc[0]
    assert table["count"] == 190
    assert np.isnan(table["p99_9_ms"])  # 190 samples cannot say where the slowest 0.1% begins
    assert np.isfinite(table[["p1_ms", "p10_ms", "p50_ms", "p90_ms", "p99_ms"]].astype(float)).all()
    few = percentiles.percentile_table(latency.head(50)).iloc[0]
    assert np.isnan(few["p99_ms"]) and np.isnan(few["p1_ms"]) and np.isfinite(few["p90_ms"])
    stats = percentiles.supported_percentiles(_cpu_stats())  # stats.csv shown under the same rule
    assert np.isnan(stats.loc[0, "p99_ms"]) and stats.loc[0, "p10_ms"] == 5.0  # 10 trials
    assert stats.loc[1, "p99_ms"] == 60.0  # 190 steps
    assert "p99.9 needs 1,000" in percentiles.PERCENTILE_RULE


def _nvml_with_a_pause() -> pd.DataFrame:
    times = np.r_[np.arange(5.0, 5.56, 0.02), np.arange(6.8, 7.5, 0.02)]  # polling paused between
    frames = [pd.DataFrame({"t_s": times, "metric": metric, "value": value, "source": "poll"})
              for metric, value in (("gpu_util_pct", np.linspace(0, 20, times.size)),
                                    ("sm_clock_mhz", np.full(times.size, 1980.0)),
                                    ("power_w", np.linspace(130, 200, times.size)),
                                    ("mem_used_mib", np.linspace(1500, 2000, times.size)))]
    driver = pd.DataFrame({"t_s": np.arange(5.0, 7.5, 1 / 6), "metric": "power_w", "value": 250.0,
                           "source": "driver"})
    return pd.concat([*frames, driver], ignore_index=True)


def test_nvml_lines_break_where_polling_paused_and_the_pause_is_shaded():
    assert polling_gaps(np.r_[np.arange(0, 1, 0.02), np.arange(3, 4, 0.02)]) == \
        [(pytest.approx(0.98), pytest.approx(3.0))]
    assert polling_gaps(np.arange(0, 4, 0.02)) == []  # steady polling: no gap
    fig = nvml_timeseries(_nvml_with_a_pause(), empty_table("phases"))
    polled = [t for t in fig.data if t.type == "scattergl" and "polled" in t.name]
    assert len(polled) == 4
    for trace in polled:
        x, y = np.asarray(trace.x, dtype=float), np.asarray(trace.y, dtype=float)
        inside = (x > 5.56) & (x < 6.8)
        assert inside.sum() == 1 and np.isnan(y[inside]).all()  # a break, not a ramp
        assert trace.connectgaps is False
    pause = [s for s in fig.layout.shapes if s.fillcolor == NVML_PAUSE_COLOR]
    assert len(pause) == 1 and pause[0].x0 == pytest.approx(5.54) and pause[0].x1 == pytest.approx(6.8)
    assert any(t.name.startswith("polling paused") for t in fig.data)
    driver = next(t for t in fig.data if "driver" in t.name)  # the driver's samples cover it
    assert ((np.asarray(driver.x) > 5.6) & (np.asarray(driver.x) < 6.7)).any()


def test_a_flat_nvml_panel_shows_whole_numbers_around_its_value():
    fig = nvml_timeseries(_nvml_with_a_pause(), empty_table("phases"))
    clock = fig.layout.yaxis2  # SM clock locked at 1,980 MHz
    low, high = clock.range
    assert high - low >= NVML_MIN_SPAN and low < 1980 < high
    assert clock.tickformat == ",.0f"  # no "1,980.5"
    assert fig.layout.yaxis.range is None  # a panel that moves keeps Plotly's own range


def test_phase_bands_are_coloured_by_kind_and_drawn_in_lanes_by_mode(run):
    assert phase_kind("eager timed") == ("eager", "timed")
    assert phase_kind("graph warm-up") == ("graph", "warm-up")
    assert phase_kind("compile_ro timed") == ("compile_ro", "timed")
    assert phase_kind("setup") == ("", "setup")
    colors = PHASE_KIND_COLORS
    assert _apart(colors["setup"], colors["parity"]) > 30  # the issue: they looked alike
    kinds = list(colors.values())
    assert len(set(kinds)) == len(kinds)
    assert min(_apart(a, b) for i, a in enumerate(kinds) for b in kinds[i + 1:]) > 15
    phases = pd.DataFrame({"phase": ["setup", "eager warm-up", "capture", "eager timed",
                                     "graph timed", "eager timed", "parity"],
                           "start_s": [0.0, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
                           "end_s": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]})
    fig = nvml_timeseries(run.table("nvml"), phases)
    fills = {s.x0: s.fillcolor for s in fig.layout.shapes}
    assert fills[0.0] == colors["setup"] and fills[3.5] == colors["parity"]
    assert fills[2.0] == fills[2.5] == fills[3.0] == colors["timed"]  # eager and graph alike
    lanes = {t.name: list(t.y) for t in fig.data if t.type == "bar"}
    assert lanes["timed"] == ["eager", "graph", "eager"] and lanes["setup"] == ["run"]
    assert lanes["warm-up"] == ["eager"]
    assert all(s.y0 > 0 for s in fig.layout.shapes)  # bands behind the panels, not the lanes


def test_log_axes_write_every_tick_in_full():
    assert log_ticks(1, 170)["ticktext"] == ["1", "2", "5", "10", "20", "50", "100", "200"]
    assert log_ticks(0.2, 29)["ticktext"][:3] == ["0.2", "0.5", "1"]
    assert len(log_ticks(1e-3, 1e5)["ticktext"]) <= 12  # many decades: powers of ten
    assert log_ticks(0.22, 0.3) == {}  # within one step: Plotly's own, written in full
    steps = pd.DataFrame({"run": ["A"] * 50 + ["B"] * 50, "mode": "eager",
                          "ms": np.r_[np.linspace(1, 2, 50), np.linspace(5, 150, 50)],
                          "timed_by": "x"})
    axis = compare_latency_ecdf(steps, log_scale=True).layout.xaxis
    assert axis.type == "log"
    assert list(axis.ticktext) == ["1", "2", "5", "10", "20", "50", "100", "200"]


def test_one_colour_one_meaning_the_palettes_share_no_colour():
    """Issue 28: brown was graphed_callables and the preparation phase, green GPU busy and the
    timed phase, grey GPU idle, a graph's launch, the per-node cost and "waiting on GPU". The
    palettes (modes, parts of a step, phases) are declared once; no two of their colours, in one
    palette or across two, look alike, and each reads on both themes."""
    from dashboard.charts import palette

    every = [(name, meaning, color) for name, colors in palette.PALETTES.items()
             for meaning, color in colors.items()]
    assert {name for name, _, _ in every} == {"modes", "parts of a step", "phases"}
    for i, (name, meaning, color) in enumerate(every):
        for other_name, other_meaning, other in every[i + 1:]:
            assert _apart(color, other) >= palette.MIN_APART, (name, meaning, other_name, other_meaning)
        assert min(_apart(color, "#FFFFFF"), _apart(color, "#0E1117")) >= 25, (meaning, color)
    for color in palette.SERIES_COLORS:  # lines with no meaning of their own look like none
        assert min(_apart(color, other) for _, _, other in every) >= palette.MIN_APART, color
    # the issue's pairs, now told apart
    assert _apart(MODE_COLORS["graphed_callables"], PHASE_KIND_COLORS["preparation"]) >= 20
    assert _apart(SPLIT_COLORS["gpu_busy_us"], PHASE_KIND_COLORS["timed"]) >= 20
    greys = [palette.STEP_PART_COLORS[p] for p in ("gpu_idle", "graph_launch", "per_node",
                                                   "cpu_waiting")]
    assert min(_apart(a, b) for i, a in enumerate(greys) for b in greys[i + 1:]) >= 20


def test_chart_modules_take_every_colour_from_the_palettes():
    """Declared once: no chart module writes a colour of its own (a hex literal); they all come
    from dashboard/charts/palette.py (the modes' from profiler_core/spec/modes.py)."""
    import re

    charts = Path(__file__).resolve().parent.parent / "dashboard" / "charts"
    literal = re.compile(r"[\"']#[0-9A-Fa-f]{3,8}[\"']")
    found = {path.name: literal.findall(path.read_text()) for path in charts.glob("*.py")
             if path.name != "palette.py"}
    assert {name: hits for name, hits in found.items() if hits} == {}
    from dashboard.charts.palette import SERIES_COLORS, STEP_PART_COLORS
    from dashboard.charts.ranks import STACK_PARTS
    from dashboard.charts.ranks import percentiles as rank_percentiles

    assert {colour for _, _, colour in STACK_PARTS} <= set(STEP_PART_COLORS.values())
    ranks = pd.DataFrame({"rank": [0, 0], "mode": "eager", "metric": ["step_p50_ms", "step_p99_ms"],
                          "value": [1.0, 2.0]})
    assert [bar.marker.color for bar in rank_percentiles(ranks, "eager").data] == \
        [SERIES_COLORS[0], SERIES_COLORS[3]]


def test_run_colours_never_look_like_a_mode_or_a_part_of_a_step():
    meaning = [*MODE_COLORS.values(), *SPLIT_COLORS.values()]
    for color in SERIES_PALETTE:
        assert min(_apart(color, other) for other in meaning) >= 25, color
        # and a line of it reads on both themes' backgrounds (Streamlit's light and dark)
        assert min(_apart(color, "#FFFFFF"), _apart(color, "#0E1117")) >= 50, color
    steps = pd.DataFrame({"run": np.repeat([f"R{i}" for i in range(8)], 10), "mode": "eager",
                          "ms": np.tile(np.linspace(1, 2, 10), 8), "timed_by": "x"})
    lines = compare_latency_ecdf(steps).data
    assert not {t.line.color for t in lines} & set(MODE_COLORS.values())
    # past the palette a run changes its dash, so no two of the eight look the same
    assert len({(t.line.color, t.line.dash) for t in lines}) == 8
    assert mode_color("some_new_mode", 1) in SERIES_PALETTE


def test_each_modes_colour_is_its_declaration_and_none_is_a_part_of_a_step():
    from profiler_core import MODES

    assert MODE_COLORS == {mode.name: mode.color for mode in MODES}
    assert len(set(MODE_COLORS.values())) == len(MODES)
    assert not set(MODE_COLORS.values()) & set(SPLIT_COLORS.values())


def test_the_speedup_overlay_holds_every_marker_and_says_why_a_run_has_none():
    frame = pd.DataFrame({"run": ["A"], "mode": ["graph"], "speedup": [6.73],
                          "speedup_ci_low": [6.51], "speedup_ci_high": [6.85]})
    fig = compare_speedups(frame, {"B": "a CPU run times eager only"}, order=["B", "A"])
    assert fig.layout.scattermode == "group"  # a run's modes side by side, labels apart
    assert list(fig.layout.xaxis.categoryarray) == ["B", "A"]
    assert fig.layout.yaxis.range[1] > 6.85 * 1.1  # the marker, its CI and its label inside
    assert fig.layout.yaxis.range[1] % fig.layout.yaxis.dtick == 0  # closed by a gridline
    assert fig.data[0].cliponaxis is False
    note = next(a for a in fig.layout.annotations if a.x == "B")
    assert "no speedup: a CPU run times eager only" in note.text.replace("<br>", " ")
    # issue 28: runs with no speedup at all drew an empty axis (-0.5 to 1.5, "run") and notes;
    # the figure says why instead, with no axis
    only_cpu = compare_speedups(frame.iloc[0:0], {"A": "a CPU run times eager only",
                                                   "B": "a CPU run times eager only"})
    assert only_cpu.layout.xaxis.visible is False and not only_cpu.data
    assert [a.text.replace("<br>", " ") for a in only_cpu.layout.annotations] == [
        "none of these runs has a speedup (A: a CPU run times eager only; B: a CPU run times "
        "eager only)"]


def test_a_cpu_sweep_draws_eager_medians():
    from profiler_core.sweep import analysis as sweep
    points = pd.DataFrame({"index": [0, 1, 2], "batch": [8, 16, 32], "status": "done",
                           "floor_ms": np.nan})
    point_modes = pd.DataFrame({"index": [0, 1, 2], "mode": "eager", "median_ms": [0.2, 0.3, 0.5],
                                "speedup": 1.0, "speedup_ci_low": 0.9, "speedup_ci_high": 1.1,
                                "one_time_ms": 0.0, "memory_bytes": 0.0})
    assert sweep.speedup_table(points, point_modes, ["batch"], "batch").empty  # no graph timing
    eager = sweep.eager_table(points, point_modes, ["batch"], "batch")
    assert list(eager.columns) == ["batch", *sweep.SPEEDUP_COLUMNS]
    assert eager["eager_ms"].tolist() == [0.2, 0.3, 0.5] and eager["mode_ms"].isna().all()
    fig = sweep_medians(eager, "batch", log_x=True)
    assert [t.name for t in fig.data] == ["eager"]
    assert list(fig.data[0].y) == [0.2, 0.3, 0.5]
    assert fig.layout.title.text.startswith("Eager's median time per step")


def test_kernels_are_named_apart_with_their_operator(run):
    from profiler_core.analysis.kernel_names import kernel_label

    names = {
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)":
            "vectorized_elementwise_kernel<FillFunctor>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
        "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, "
        "2ul>)": "vectorized_elementwise_kernel<CUDAFunctorOnSelf_add>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::mse_kernel_cuda(at::Tensor"
        "IteratorBase&)::{lambda()#1}::operator()() const::{lambda(float, float)#1}, std::array<"
        "char*, 3ul> >(int, ...)": "vectorized_elementwise_kernel<mse_kernel_cuda>",
        "void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::"
        "masked_scale_kernel<bool, c10::BFloat16, float>(at::Tensor&, at::Tensor const&, "
        "at::Tensor const&, float)::{lambda(c10::BFloat16, bool)#1}, std::array<char*, 3ul> >"
        "(int, ...)": "vectorized_elementwise_kernel<masked_scale_kernel>",
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)":
            "vectorized_elementwise_kernel<bfloat16_copy_kernel_cuda>",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
        "float, float, float, float>, unsigned int, float, 4, 4> >(...)": "reduce_kernel<MeanOps>",
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
        "unsigned int, 1, 8, bool>(...)": "fused_dropout_kernel_vec",  # types only: its own name
        "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN": "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN",
    }
    for full, label in names.items():
        assert kernel_label(full) == label
        assert len(kernel_label(full)) <= 60
    # a run recorded before the labels: kernels of a mode that share a name are named apart from
    # their full names; a unique name is shown as the run wrote it (no operator column: empty)
    old = run.table("kernels").drop(columns=["operator"])
    assert kernel_tables.readable_kernels(old)["kernel"].tolist() == old["kernel"].tolist()
    clash = pd.DataFrame({"mode": "eager", "kernel": "vectorized_elementwise_kernel",
                          "kernel_full": list(names), "calls_per_iter": 1.0, "total_us": 1.0,
                          "mean_us": 1.0, "min_us": 1.0, "max_us": 1.0, "share_of_gpu_pct": 1.0})
    readable = kernel_tables.readable_kernels(clash)  # five rows alike, as the issue saw them
    assert readable["kernel"].tolist() == list(names.values())
    assert (readable["operator"] == "").all()
    assert list(kernel_tables.kernel_table(readable).columns) == kernel_tables.KERNEL_TABLE_COLUMNS
    # the comparison takes the operator that launched the kernel eagerly
    kernels = pd.DataFrame({"mode": ["eager", "graph"], "kernel": "k", "kernel_full": "k<F>",
                            "operator": ["aten::fill_", "CUDA graph replay"],
                            "calls_per_iter": 1.0, "total_us": 1.0, "mean_us": 1.0, "min_us": 1.0,
                            "max_us": 1.0, "share_of_gpu_pct": 100.0})
    diff = kernel_tables.kernel_diff(kernels)
    assert list(diff.columns) == kernel_tables.KERNEL_DIFF_COLUMNS and diff["operator"].tolist() == ["aten::fill_"]
    assert len(kernel_tables.filter_by_name(kernels, "FILL_")) == 1  # found by its operator
    hover = kernel_diff_bars(diff).data[0].customdata[0]
    assert list(hover) == ["k&lt;F&gt;", "aten::fill_"]
    assert kernel_top_bar(kernels, "eager").layout.title.text.startswith("Under the profiler")
    # a run without the column: the operators read from its traces fill the empty cells only
    filled = kernel_tables.with_operators(readable, {"eager": {n: "aten::x" for n in clash["kernel_full"]}})
    assert set(filled.loc[filled["mode"] == "eager", "operator"]) == {"aten::x"}
    assert (filled.loc[filled["mode"] == "graph", "operator"] == "").all()
    assert kernel_tables.with_operators(kernels, {"eager": {"k<F>": "other"}})["operator"].tolist() == \
        ["aten::fill_", "CUDA graph replay"]  # a recorded operator is kept
