"""Every outcome the engine can write is read back by every reader (issue 17, item 1).

Runs are generated through the writer's own code (``generated_runs``: the runner's timed loops
on a simulated machine, its table builders, the trace analysis, ``RunResult.save``) and each one
is read back by: ``RunResult.load``; the dashboard (``runfolder.read_summary`` / ``open_run`` and
the data shaping and charts every view calls); an upload (the zip the dashboard's download gives,
through ``uploads.SessionUploads``); the run index (``record_run``, ``read_run``, the listing and
``--where`` filters); a sweep (a point measured through a fake launcher, ``load_sweep``, its
tables, a resume); ``predict`` (the run's headline and its eager trace); the CLI's summary. One
AppTest opens a few generated runs on every page of the dashboard. A GPU test runs the issue's
config (seed fp32, batch 2048), where the graph does not pay back.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import tempfile
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from generated_runs import EXTRA_MODES, RawRun, Scenario, WindowSpec, build_run, raw_runs
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dashboard import analysis, compare, kernel_tables, percentiles, run_facts, rundata, uploads
from profiler_core.analysis import attribution, metrics, predict
from profiler_core.analysis.figures import Figures
from profiler_core.analysis.timeline import iteration_timeline
from profiler_core.analysis.trace import analyse_trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.cli.main import format_summary
from profiler_core.spec import schema
from profiler_core.spec.events import ErrorEvent
from profiler_core.storage import index, index_query, index_rows, runfolder
from profiler_core.storage.results import RunResult, coerce_table
from profiler_core.sweep import analysis as sweep_analysis
from profiler_core.sweep import plan as sweep_plan
from profiler_core.sweep import runner as sweep_runner
from profiler_core.sweep import store as sweep_store
from profiler_core.timing import stats

# Deterministic and short; no shrinking (a generated run is built and read by every reader, so
# shrinking one takes minutes): a failure prints the whole drawn run instead. ROUNDTRIP_EXAMPLES
# raises the examples per scenario for a longer search (600 random ones found nothing more).
EXAMPLES = int(os.environ.get("ROUNDTRIP_EXAMPLES", "1"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    phases=(Phase.explicit, Phase.generate),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SCENARIOS = {
    # the run: the graph slower than eager, so its capture never pays back
    "graph-slower-never-pays-back": Scenario(outcome="slower", extra_modes=(), profile=True),
    "every-mode-graph-slower-huge-times": Scenario(outcome="slower", extra_modes=EXTRA_MODES,
                                                   scale=6e4),
    "every-mode-graph-faster-3-steps-per-graph-tiny-times": Scenario(
        outcome="faster", extra_modes=EXTRA_MODES, capture_iters=3, scale=1e-3),
    "graph-exactly-as-fast": Scenario(outcome="equal"),
    "not-measured-no-steady-state-no-profile-no-copy-no-nvml": Scenario(
        timed=False, profile=False, sleep=False, nvml=False),
    "no-batch-copy-timed-with-profile": Scenario(profile=True, sleep=False),
    "stopped-before-timing": Scenario(stop="preparation"),
    "stopped-during-timed-trials": Scenario(stop="timed trials"),
    "stopped-before-profiling": Scenario(stop="profiling", profile=True),
    "stopped-before-parity": Scenario(stop="parity"),
    "cpu-eager-only": Scenario(device="cpu", extra_modes=()),
    "cpu-compile-and-cuda-modes-skipped": Scenario(device="cpu", extra_modes=EXTRA_MODES),
}
# Drawn with their charts too (the others: the views' data without drawing it).
DRAWN = ("graph-slower-never-pays-back", "every-mode-graph-faster-3-steps-per-graph-tiny-times",
         "not-measured-no-steady-state-no-profile-no-copy-no-nvml", "cpu-eager-only",
         "stopped-during-timed-trials")


class _NoCharts:
    """``charts`` when the figures are not drawn: every builder does nothing."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


class _Charts:
    """Every figure builder of ``dashboard.charts``'s modules under one name."""

    def __init__(self, *modules) -> None:
        self.modules = modules

    def __getattr__(self, name: str):
        return next(getattr(module, name) for module in self.modules if hasattr(module, name))


try:
    from dashboard.charts import attribution as attribution_charts
    from dashboard.charts import comparison as comparison_charts
    from dashboard.charts import counters as counters_charts
    from dashboard.charts import gpu as gpu_charts
    from dashboard.charts import kernels as kernels_charts
    from dashboard.charts import sweep as sweep_charts
    from dashboard.charts import timing as timing_charts
    _real_charts = _Charts(timing_charts, attribution_charts, gpu_charts, kernels_charts,
                           counters_charts, comparison_charts, sweep_charts)
except ImportError:  # no plotly (the GPU machine's image): the figures are not drawn there
    _real_charts = _NoCharts()


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN, lists element by element."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _numeric(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[[c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])
                  and not pd.api.types.is_bool_dtype(frame[c])]].astype(float)


# ----------------------------------------------------------------------------- the readers


def check_loaded(result: RunResult, loaded: RunResult) -> None:
    """``RunResult.load`` gives back what was saved: config, completeness, every headline figure
    and every table; the pay-back is stored as the reader accepts it (finite or NaN)."""
    assert loaded.config == result.config and loaded.complete == result.complete
    assert loaded.notes == result.notes
    for key, value in result.headline.items():
        assert _same(loaded.headline[key], value), key
    for name in schema.TABLE_FILES:
        pd.testing.assert_frame_equal(loaded.table(name), coerce_table(name, result.table(name)),
                                      check_exact=True, obj=name)
    check_pay_back(loaded)
    check_figures(result, loaded)


def check_stored_once(saved: Path) -> None:
    """A saved run is of schema 4: its summary.json's headline holds no per-mode figure (neither
    a ``<mode>_<metric>`` key nor an older name of one); metrics.csv holds them all."""
    stored = json.loads((saved / schema.SUMMARY_FILE).read_text())
    assert stored["schema_version"] == schema.SCHEMA_VERSION == 5
    facts, figures = metrics.split_headline(stored["headline"])
    assert figures == {} and facts == stored["headline"], stored["headline"]
    written = Figures.from_table(pd.read_csv(saved / schema.TABLE_FILES["metrics"][0]))
    assert not {metrics.headline_key(mode, metric) for mode, metric, _ in written.items()} & set(
        stored["headline"])


def check_figures(result: RunResult, loaded: RunResult) -> None:
    """The typed run model reads back what the writer measured: every figure of metrics.csv by
    mode and metric (``Figures.get``), the article's pair (``Headline``) as the writer's own, and
    the figures the summary's headline keeps under their stored names agree with metrics.csv
    (each figure is held once, in metrics.csv: the headline holds none, under any name)."""
    written, read = result.figures, loaded.figures
    for mode, metric, value in written.items():
        if math.isfinite(value):
            assert _same(read.get(mode, metric), value), (mode, metric)
    assert set(read.modes()) >= {m for m, _, v in written.items() if math.isfinite(v)}
    assert all(_same(a, b) for a, b in zip(dataclasses.astuple(loaded.pair),
                                           dataclasses.astuple(result.pair))), loaded.pair
    assert metrics.split_headline(loaded.headline)[1] == {}, loaded.headline
    assert not {metrics.headline_key(mode, metric) for mode, metric, _ in read.items()} & set(
        loaded.headline)
    pair = loaded.pair
    if "eager" in set(loaded.table("modes")["mode"]):
        eager = loaded.table("modes").set_index("mode").loc["eager", "median_ms"]
        assert _same(pair.eager_ms, float(eager))


def check_pay_back(run: RunResult) -> None:
    """Every mode but eager has pays_back 1/0/NaN from its own saving, and a break-even that is
    finite exactly when it pays back; 'never' is pays_back 0 (issue 17)."""
    modes, figures = run.table("modes"), run.table("metrics")
    if "eager" not in set(modes["mode"]):
        return
    eager_ms = float(modes.set_index("mode").loc["eager", "median_ms"])
    for row in modes[modes["mode"] != "eager"].itertuples():
        expected = stats.pay_back(float(row.one_time_ms), eager_ms, float(row.median_ms))
        if row.mode == "graph":
            assert _same(run.pair.pays_back, expected["pays_back"])
            assert _same(run.pair.break_even_steps, expected["break_even_iters"])
        got = figures[figures["mode"] == row.mode].set_index("metric")["value"]
        if got.empty:  # stopped before metrics.csv was built
            continue
        assert _same(float(got["pays_back"]), expected["pays_back"]), row.mode
        assert _same(float(got["break_even_iters"]), expected["break_even_iters"]), row.mode
        if float(row.median_ms) >= eager_ms:  # slower or equal: never pays back
            assert got["pays_back"] == 0.0 and math.isnan(got["break_even_iters"]), row.mode
    graph = figures[(figures["mode"] == "graph") & (figures["metric"] == "pays_back")]["value"]
    if len(graph) and not math.isnan(graph.iloc[0]):
        assert run.pair.pays_back == graph.iloc[0]
        if graph.iloc[0] == 0.0:
            assert math.isnan(run.pair.break_even_steps)
    for mode, block in run.table("attribution").groupby("mode"):
        error = attribution.parts_sum_error(block)
        assert math.isnan(error) or error < 1e-6, mode


def check_dashboard(run: rundata.OpenedRun, draw: bool = False) -> None:
    """What every view computes from a run, as the views call it (no Streamlit); with ``draw``
    the charts too."""
    charts = _real_charts if draw else _NoCharts()
    h, figures, pair, config, env = run.headline, run.figures, run.pair, run.config, run.environment
    cpu = analysis.is_cpu_run(config, env)
    stats_table, split = run.table("stats"), run.table("launch_split")
    reason = analysis.no_profile_reason(config, env, run.complete)
    method = analysis.headline_method(pair.timing_method, stats_table)
    label = analysis.method_label(method, cpu)
    attribution = run.table("attribution")
    pay = analysis.pay_back(figures, run.table("modes"), "graph")
    verdict = analysis.verdict(figures, attribution, reason, "graph", pay)
    assert verdict.title and verdict.text
    medians = analysis.split_medians(split)
    charts.median_bars(stats_table, analysis.kernel_floor(attribution), method=method,
                       method_label=label)
    overheads = analysis.profiler_overheads(run.table("metrics"), stats_table,
                                            run.table("latency"))
    costs = analysis.one_time_costs(figures, h, pay, overheads)
    assert not costs["shown"].astype(str).str.contains("nan|inf", case=False).any(), costs
    if pair.pays_back == 0.0:  # "never" on screen (issue 17)
        assert pay.text.startswith("never")
        assert costs.set_index("quantity").loc["break-even (see below)", "shown"].startswith("never")
    if predict.has_prediction(h):
        charts.prediction_bars(predict.prediction_parts(h, figures))
        predict.prediction_table(h, figures), predict.constants_table(h, figures)
    modes = run.table("modes")
    if len(modes) > 2:
        charts.modes_speedup_bars(modes)
        analysis.modes_table(modes, figures)
    run_facts.environment_table(env), run_facts.config_table(config)
    # latency
    steps = analysis.per_step_latency(run.table("latency"))
    for series in analysis.series_available(steps) or ["steady_event"]:
        shown, column = analysis.series_steps(steps, series)
        charts.latency_histogram(shown, column), charts.latency_ecdf(shown, column)
        charts.latency_series(shown, column)
    percentiles.percentile_table(run.table("latency"), steps)
    charts.timing_methods_bars(analysis.timing_comparison(stats_table, figures))
    # launch split
    charts.split_bars(medians, "none"), charts.launch_count_bars(medians, "none")
    for other in analysis.decomposable_modes(run.table("breakdown"), medians) or ["graph"]:
        breakdown = analysis.breakdown_against(run.table("breakdown"), medians, other)
        charts.profiled_waterfall(breakdown, "none", other)
        assert not charts.unknown_components(breakdown)
        analysis.breakdown_table(breakdown)
    for other in sorted(set(attribution["mode"])) or ["graph"]:
        charts.speedup_waterfall(attribution, "none", other)
        analysis.saving_table(attribution, other)
    for mode, path in run.trace_paths.items():
        if path is not None:
            timeline = iteration_timeline(load_trace(path))
            charts.iteration_timeline(timeline.events, mode, timeline.span_us)
    # counters
    lessons = run_facts.counter_lessons(run.table("counters"), config)
    if len(lessons):
        charts.counter_bars(lessons)
    # GPU
    summary = run_facts.phase_summary(run.table("phases"))
    window = run_facts.default_phase_range(summary)
    x_range = run_facts.phase_window(summary, *window) if window else None
    charts.nvml_timeseries(run.table("nvml"), run.table("phases"), x_range=x_range,
                           empty_message="none")
    # kernels
    kernels = run.table("kernels")
    if len(kernels):
        for other in [m for m in analysis.ordered_modes(kernels) if m != "eager"] or ["graph"]:
            charts.kernel_diff_bars(kernel_tables.kernel_diff(kernels, other), 10)
        for mode in analysis.ordered_modes(kernels):
            charts.kernel_top_bar(kernels, mode, 10)
        kernel_tables.kernel_table(kernel_tables.filter_by_name(kernels, "kernel"))
    # runs: the comparison, this run beside itself
    compare.compare_summary("A", run.label, config, env, pair, stats_table, verdict.title,
                             run.complete)
    rows, _ = compare.compare_rows("A", pair.timing_method, stats_table, cpu)
    charts.compare_medians(rows, True)
    charts.compare_speedups(compare.compare_speedup_rows("A", pair, modes))
    charts.compare_latency_ecdf(compare.overlay_steps("A", run.table("latency")), False)


def check_upload(saved: Path, loaded: RunResult, where: Path) -> None:
    """The zip the dashboard's download gives opens again through the upload code with the same
    headline and numbers (text a spreadsheet would run is made inert in the zip)."""
    data = rundata.run_zip_bytes(saved)
    assert zipfile.ZipFile(io.BytesIO(data)).testzip() is None
    store = uploads.UploadStore(base=where)
    try:
        session = store.session()  # its folder lives as long as the session object
        uploaded, removed = session.add(data, f"{saved.name}.zip")
        assert removed == [] and uploaded.source == "upload"
        assert uploaded.config == loaded.config and uploaded.complete == loaded.complete
        assert ({m for m, p in uploaded.trace_paths.items() if p is not None}
                == {m for m, p in loaded.trace_paths.items() if p is not None})  # every mode's
        for key, value in loaded.headline.items():
            assert _same(uploaded.headline[key], value), key
        for name in schema.TABLE_FILES:
            pd.testing.assert_frame_equal(_numeric(uploaded.result.table(name)),
                                          _numeric(loaded.table(name)), check_exact=True, obj=name)
    finally:
        store.close()


def check_sweep(result: RunResult, runs: Path) -> Path:
    """The run as the one point of a sweep: measured (a fake launcher saves it as the worker
    would), never marked failed for what it holds, read back by ``load_sweep`` and every sweep
    table, listed, and left alone by a resume."""
    config = result.config
    plan = sweep_plan.SweepPlan((sweep_plan.SweepAxis("batch", (config.batch,)),), config,
                           sweep_plan.PointTrials(replays=config.replays, trials=config.trials,
                                             profile=config.profile,
                                             profile_iters=config.profile_iters, nvml=config.nvml,
                                             parity_steps=config.parity_steps))
    assert plan.points()[0].config == config

    class Ending:
        def __init__(self, status: str, error: ErrorEvent | None = None) -> None:
            self.status, self.error, self.stderr_tail, self.returncode = status, error, "", 0

    class Process:
        pid = 1

        def __init__(self, out: Path, overwrite: bool) -> None:
            self.out, self.overwrite = out, overwrite

        def cancel(self) -> None:
            pass

        def wait(self, timeout=None):
            result.save(self.out, overwrite=self.overwrite)  # as the worker saves a run
            if result.complete:
                return Ending("done")
            return Ending("error", ErrorEvent("Interrupted", None, "interrupted", ""))

    class Launcher:
        started = 0

        def start(self, config, out_dir, *, overwrite=False, timeout_s=None, on_event=None):
            Launcher.started += 1
            return Process(Path(out_dir), overwrite)

        def close(self) -> None:
            pass

    folder = runs / "sweep-a"
    outcome = sweep_runner.SweepRunner.create(plan, folder, launcher=Launcher()).run()
    point = outcome.points.iloc[0]
    assert point["status"] == ("done" if result.complete else "failed"), point.to_dict()
    if not result.complete:
        assert point["error_kind"] == "Interrupted"
    data = sweep_store.load_sweep(folder)
    row = data.points.iloc[0]
    if result.complete:
        pair = result.pair
        for column, value in (("speedup", pair.speedup), ("eager_median_ms", pair.eager_ms),
                              ("graph_median_ms", pair.graph_ms),
                              ("break_even_steps", pair.break_even_steps)):
            assert _same(float(row[column]), value), column
        modes = data.point_modes.set_index("mode")
        for mode_row in result.table("modes").itertuples():
            assert _same(float(modes.loc[mode_row.mode, "median_ms"]), float(mode_row.median_ms))
    axis_names = data.plan.axis_names
    table = sweep_analysis.speedup_table(data.points, data.point_modes, axis_names, "batch")
    found = sweep_analysis.crossovers(table, "batch", plan.threshold, True)
    sweep_analysis.break_even_table(table, axis_names), sweep_analysis.amortisation_table(table, axis_names)
    sweep_analysis.format_sweep(data.points, data.point_modes, data.plan)
    _real_charts.sweep_speedup(table, "batch", plan.threshold, found, True, False)
    _real_charts.sweep_medians(table, "batch", True, False, False)
    listed = sweep_store.list_sweeps(runs)
    assert list(listed["problem"]) == [""]
    Launcher.started = 0
    resumed = sweep_runner.SweepRunner.resume(folder, launcher=Launcher())
    assert resumed.rerun_damaged == ()  # the point's run folder is not taken for damaged
    resumed.run()
    assert Launcher.started == 0  # a measured or failed point is finished
    return folder


def check_index(saved: Path, runs: Path, loaded: RunResult) -> None:
    """The run index lists the run and the sweep's point with their figures; ``--where`` on
    the speedup and on the pay-back finds exactly them; the dashboard's list agrees."""
    # the index holds every figure under its filter name (speedup, capture_ms, <mode>_<metric>)
    head = {metrics.headline_key(mode, metric): value
            for mode, metric, value in loaded.figures.items()}
    with index.open_index(runs) as built:
        rows = {row["folder"]: row for row in built.runs(headline=True)}
        assert set(rows) == {saved.name, f"sweep-a/{sweep_plan.point_folder_name(0)}"}
        for row in rows.values():
            assert row["problem"] == "" and row["complete"] == loaded.complete
            for key in index_rows.HEADLINE_COLUMNS:
                assert _same(float(row[key]), float(head.get(key, math.nan))), key
        speedup = float(head.get("speedup", math.nan))
        matching = index_query.parse_where(f"speedup={speedup!r}..{speedup!r}") if math.isfinite(
            speedup) else index_query.parse_where("speedup=0..")
        assert len(built.runs([matching])) == (2 if math.isfinite(speedup) else 0)
        pays = head.get("graph_pays_back")
        if pays is not None and not math.isnan(pays):
            found = built.runs([index_query.parse_where(f"graph_pays_back={pays:g}")])
            assert len(found) == 2
        index.format_listing(built, [matching])
    assert index.record_run(saved) == ""
    assert index_rows.read_run(runs, saved.name)["run"]["problem"] == ""
    listed = rundata.list_runs(runs)
    assert list(listed["problem"]) == [""] and _same(float(listed["speedup"].iloc[0]),
                                                     float(head.get("speedup", math.nan)))


def check_predict(saved: Path, loaded: RunResult) -> None:
    """``predict`` reads a run's headline and its eager trace."""
    head = loaded.headline
    predict.prediction_from_headline(head, loaded.figures)
    predict.headline_lines(head, loaded.figures)
    eager_trace = loaded.trace_paths.get("eager")
    if eager_trace is not None:
        step = predict.eager_step_from_analysis(analyse_trace(load_trace(eager_trace), mode="eager"))
        costs = predict.GraphCosts(9.35, 0.255, "the round trip's constants")
        prediction = predict.predict_graph(step, costs, loaded.config.capture_iters)
        assert math.isfinite(prediction.graph_us)


def check_outcome(scenario: Scenario, loaded: RunResult) -> None:
    """The run is what its scenario asked for (the generator's own check)."""
    pair = loaded.pair
    if not (loaded.complete and loaded.config.is_cuda):
        return
    if scenario.outcome == "slower":
        assert pair.speedup < 1 and pair.pays_back == 0.0
    if scenario.outcome == "faster":
        assert pair.speedup > 1 and pair.pays_back == 1.0
        assert pair.break_even_steps >= 1
    if scenario.outcome == "equal":
        assert pair.speedup == 1.0 and pair.pays_back == 0.0
    if scenario.timed is False:
        assert math.isnan(pair.speedup) and math.isnan(pair.pays_back)
    if scenario.sleep is False:
        assert math.isnan(loaded.figures.get("graph", "input_copy_median_ms"))


def check_every_reader(raw: RawRun, root: Path, draw: bool = False) -> None:
    result = build_run(raw, root)
    runs = root / "runs"
    try:
        saved = result.save(runs / "run-a")
    finally:
        result.release_scratch()
    loaded = RunResult.load(saved)
    check_stored_once(saved)
    check_loaded(result, loaded)
    check_outcome(raw.scenario, loaded)
    summary = format_summary(loaded)
    if loaded.pair.pays_back == 0.0 and loaded.config.is_cuda:
        assert "break-even never" in summary  # issue 17: "never", not "after nan steps"
    runfolder.read_summary(saved)
    check_dashboard(rundata.open_run(saved, "folder"), draw)
    check_upload(saved, loaded, root / "uploads")
    check_predict(saved, loaded)
    check_sweep(result, runs)
    check_index(saved, runs, loaded)


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_every_outcome_opens_in_every_reader(scenario, request):
    draw = request.node.callspec.id in DRAWN

    @SETTINGS
    @given(raw_runs(scenario))
    def round_trip(raw):
        with tempfile.TemporaryDirectory() as folder:
            check_every_reader(raw, Path(folder), draw)
    round_trip()


@settings(SETTINGS, max_examples=4 * EXAMPLES)
@given(raw_runs(Scenario(stop=None, timed=None)))
def test_any_generated_run_opens_in_every_reader(raw):
    with tempfile.TemporaryDirectory() as folder:
        check_every_reader(raw, Path(folder))


@settings(SETTINGS)
@given(raw_runs(Scenario(outcome="equal", extra_modes=(), profile=True)))
def test_figures_at_the_edges_are_read_back(raw):
    """What the writer produces at the edges, read back everywhere: a graph faster by a
    nanosecond per step against a capture of days (a break-even of some 10^14 steps, beyond the
    bound of any measured time), and an eager window whose two launching threads' calls add up
    to more than the window (negative other CPU time in breakdown.csv)."""
    eager, graph = raw.times["eager"], raw.times["graph"]
    graph.gpu_ms = [eager.gpu_ms[0] - 2.0 ** -20]  # exact on the simulation's grid
    graph.host_ms = eager.host_ms - 2.0 ** -20
    graph.one_time_ms = 4e8  # ms: within a measurement's bound (1e9 ms)
    graph.figures.update(warmup_ms=1e8, capture_ms=3e8)
    raw.windows["eager"] = WindowSpec(cpu_us=10.0, launch_us=20.0, delay_us=1.0,
                                      kernel_us=[5.0] * 6, graph_launches=0, wall_median_ms=1.0,
                                      threads=2)
    raw.scenario = dataclasses.replace(raw.scenario, outcome=None)
    with tempfile.TemporaryDirectory() as folder:
        check_every_reader(raw, Path(folder))
        loaded = RunResult.load(Path(folder) / "runs" / "run-a")
    assert loaded.pair.pays_back == 1.0 and loaded.pair.break_even_steps > 1e12
    breakdown = loaded.table("breakdown").set_index("component")
    assert breakdown.loc["cpu_other", "eager_us"] < 0


# ----------------------------------------------------------------------------- the pages


@pytest.mark.usefixtures("fresh_app_state")
@settings(SETTINGS, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])
@given(raws=st.tuples(*(raw_runs(SCENARIOS[name]) for name in (
    "graph-slower-never-pays-back", "cpu-compile-and-cuda-modes-skipped",
    "stopped-during-timed-trials"))))
def test_the_dashboard_pages_show_generated_runs(raws, tmp_path):
    """Through Streamlit (AppTest): the run that never pays back on every page, saying "never";
    a CPU run and a run stopped early on the Overview."""
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    # under pytest's temporary folder: the runs folders the dashboard allows (fresh_app_state)
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        runs = Path(folder) / "runs"
        saved = []
        for number, raw in enumerate(raws):
            result = build_run(raw, Path(folder))
            saved.append(result.save(runs / f"run-{number}"))
            result.release_scratch()
        for number, path in enumerate(saved):
            at = AppTest.from_file(str(app), default_timeout=60)
            at.session_state[state.RUNS_DIR] = str(runs)
            at.session_state[state.OPEN_RUN] = str(path.resolve())
            at.run()
            assert not at.exception, [e.value for e in at.exception]
            assert not at.error, [e.value for e in at.error]
            if number == 0:  # the graph never pays back: said in words
                costs = next(df.value for df in at.dataframe if "quantity" in df.value.columns)
                shown = costs.set_index("quantity").loc["break-even (see below)", "shown"]
                assert shown.startswith("never"), shown
                for page in ("views/counters.py", "views/latency.py", "views/launch_split.py",
                             "views/gpu.py", "views/kernels.py", "views/runs.py"):
                    at.switch_page(page).run()
                    assert not at.exception, (page, [e.value for e in at.exception])
                    assert not at.error, (page, [e.value for e in at.error])


def test_the_generator_reaches_the_engine_through_public_names_only():
    """``generated_runs`` drives the run's own sequence through ``pipeline``'s public seams: it
    imports no private name of ``profiler_core`` and reads no ``_name`` of anything it imported
    from there (a module or a class), so the order of phases lives in ``engine/pipeline.py``
    alone."""
    import ast

    tree = ast.parse((Path(__file__).parent / "generated_runs.py").read_text())
    imported: set[str] = set()
    private: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("profiler_core"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    private.append(f"from {node.module} import {alias.name}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            imported.update(a.asname or a.name for a in node.names if a.name.startswith("profiler_core"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in imported and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            private.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    assert {"pipeline", "runner"} <= imported  # the check looks where the sequence is reached
    assert private == []


# ----------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_run_whose_graph_does_not_pay_back_opens_in_every_reader(tmp_path):
    """Issue 17: ``run --preset seed --dtype fp32 --batch 2048`` (GPU-bound on an H200: the
    graph is no faster, 0.99x) exits 0 and its run opens everywhere, saying "never"."""
    import subprocess
    import sys

    runs = tmp_path / "runs"
    out = runs / "fp32-b2048"
    completed = subprocess.run(
        [sys.executable, "-m", "profiler_core", "run", "--preset", "seed", "--dtype", "fp32",
         "--batch", "2048", "--replays", "60", "--trials", "6", "--profile-iters", "5",
         "--no-nvml", "--parity-steps", "0", "--progress", "none", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parents[1])
    assert completed.returncode == 0, completed.stderr
    check_run_that_does_not_pay(out, completed.stdout, tmp_path)


def check_run_that_does_not_pay(out: Path, summary: str, where: Path) -> None:
    """A real run of seed fp32 at batch 2048 (``out``, in a runs folder of its own; ``summary``
    what the CLI printed) read back by every reader."""
    runs = out.parent
    loaded = RunResult.load(out)
    pair = loaded.pair
    assert loaded.complete and loaded.config.batch == 2048 and loaded.config.dtype == "fp32"
    pays = pair.pays_back
    assert pays == 0.0 or pair.speedup_ci_low <= 1.0 <= pair.speedup_ci_high, pair
    figures = loaded.table("metrics").set_index(["mode", "metric"])["value"]
    assert figures[("graph", "pays_back")] == pays
    check_stored_once(out)  # schema 4: the figures are in metrics.csv only
    if pays == 0.0:  # never pays back: stored as NaN, said as "never"
        assert math.isnan(pair.break_even_steps)
        assert math.isnan(figures[("graph", "break_even_iters")])
        assert "break-even never" in summary
    check_pay_back(loaded)
    runfolder.read_summary(out)
    check_dashboard(rundata.open_run(out, "folder"), draw=True)
    check_upload(out, loaded, where / "uploads")
    check_predict(out, loaded)
    check_sweep(loaded, runs)
    check_index(out, runs, loaded)
