"""RunResult save/load: lossless round trip, atomic replace, and clear errors for bad directories."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from profiler_core.analysis import metrics
from profiler_core.spec import schema
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import RunFormatError
from profiler_core.storage.results import RunResult, coerce_table, empty_table


def _result(tmp_path):
    trace = tmp_path / "trace_eager.json"
    trace.write_text(json.dumps({"traceEvents": []}))
    latency = pd.DataFrame({"mode": ["eager", "graph"], "method": ["steady", "cold"],
                            "trial": [0, 0], "iteration": [0, 0], "steps": [1, 3],
                            "gpu_ms": [1.25, math.nan], "wall_ms": [math.nan, 0.3]})
    counters = pd.DataFrame({"phase": ["initial", "after_replay"], "observed": [0.0, 30.0],
                             "predicted": [0, 30], "match": [True, True],
                             "rule": ["starts at zero", "replays x captured, with a, comma"]})
    return RunResult(
        config=RunConfig(dtype="bf16", capture_iters=3, preset="lesson3"),
        environment={"gpu_name": "NVIDIA H200", "torch_version": "2.11.0"},
        headline={"timing_method": "steady_trial", "parity_max_rel_diff": math.nan},
        tables={"latency": coerce_table("latency", latency),
                "counters": coerce_table("counters", counters),
                "metrics": coerce_table("metrics", metrics.build(
                    empty_table("modes"), empty_table("stats"),
                    {"graph": {"speedup": 4.5, "break_even_iters": math.inf}}))},
        notes=["a note"], trace_paths={"eager": trace, "graph": None})


def test_round_trip_is_lossless(tmp_path):
    original = _result(tmp_path)
    saved = original.save(tmp_path / "runs" / "one")
    loaded = RunResult.load(saved)
    assert loaded.config == original.config
    assert loaded.environment == original.environment
    assert loaded.figures.get("graph", "speedup") == loaded.pair.speedup == 4.5
    # "never pays back" was once stored as an infinite break-even: it reads as pays_back 0
    assert math.isnan(loaded.pair.break_even_steps)
    assert loaded.pair.pays_back == loaded.figures.get("graph", "pays_back") == 0.0
    assert math.isnan(loaded.headline["parity_max_rel_diff"])
    assert loaded.headline == {"timing_method": "steady_trial", "parity_max_rel_diff": loaded.headline["parity_max_rel_diff"]}
    assert loaded.notes == ["a note"] and loaded.complete
    pd.testing.assert_frame_equal(loaded.table("latency"), original.table("latency"))
    pd.testing.assert_frame_equal(loaded.table("counters"), original.table("counters"))
    assert loaded.trace_paths["eager"].name == "trace_eager.json"
    assert loaded.trace_paths["graph"] is None
    for name, (file_name, columns) in schema.TABLE_FILES.items():
        assert list(pd.read_csv(saved / file_name).columns) == columns  # empty tables keep columns
        assert list(loaded.table(name).columns) == columns


def test_no_pickle_only_json_and_csv(tmp_path):
    saved = _result(tmp_path).save(tmp_path / "run")
    suffixes = {path.suffix for path in saved.iterdir()}
    assert suffixes <= {".json", ".csv"}
    json.loads((saved / "summary.json").read_text())  # plain JSON, NaN/inf written as strings


def test_save_replaces_an_existing_run_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "run"
    _result(tmp_path).save(target)
    second = _result(tmp_path)
    second.notes = ["second"]
    second.save(target, overwrite=True)
    assert RunResult.load(target).notes == ["second"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace_eager.json"]


def test_missing_directory_or_summary(tmp_path):
    with pytest.raises(RunFormatError) as raised:
        RunResult.load(tmp_path / "nothing")
    assert raised.value.hint


@pytest.mark.parametrize("damage", ["bad_json", "wrong_version", "bad_config", "missing_column",
                                    "text_in_number", "complete_as_text", "notes_as_text",
                                    "deep_json"])
def test_damaged_runs_raise_run_format_error(tmp_path, damage):
    saved = _result(tmp_path).save(tmp_path / "run")
    summary = json.loads((saved / "summary.json").read_text())
    if damage == "bad_json":
        (saved / "summary.json").write_text("{not json")
    elif damage == "wrong_version":
        summary["schema_version"] = 99
        (saved / "summary.json").write_text(json.dumps(summary))
    elif damage == "bad_config":
        summary["config"]["batch"] = -1
        (saved / "summary.json").write_text(json.dumps(summary))
    elif damage in ("complete_as_text", "notes_as_text"):
        summary["complete" if damage == "complete_as_text" else "notes"] = "false"
        (saved / "summary.json").write_text(json.dumps(summary))
    elif damage == "deep_json":
        (saved / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    elif damage == "missing_column":
        pd.read_csv(saved / "latency.csv").drop(columns=["gpu_ms"]).to_csv(saved / "latency.csv")
    else:
        frame = pd.read_csv(saved / "latency.csv")
        frame["wall_ms"] = frame["wall_ms"].astype(object)
        frame.loc[0, "wall_ms"] = "fast"
        frame.to_csv(saved / "latency.csv", index=False)
    with pytest.raises(RunFormatError):
        RunResult.load(saved)


def test_empty_table_keeps_columns_and_dtypes():
    table = empty_table("stats")
    assert list(table.columns) == schema.STATS_COLUMNS and len(table) == 0
    assert table["median_ms"].dtype == np.float64


def test_a_schema_1_run_still_opens_as_cold_start_timing(tmp_path):
    """Runs saved before steady-state timing existed keep opening; their figures are labelled."""
    saved = _result(tmp_path).save(tmp_path / "old")
    summary = json.loads((saved / "summary.json").read_text())
    summary["schema_version"] = 1
    summary["headline"]["timing_method"] = "cuda_event"
    (saved / "summary.json").write_text(json.dumps(summary))
    pd.DataFrame({"mode": ["eager"], "trial": [0], "iteration": [0], "steps": [1],
                  "gpu_ms": [1.2], "wall_ms": [1.3]}).to_csv(saved / "latency.csv", index=False)
    pd.DataFrame({"mode": ["eager", "eager"], "method": ["cuda_event", "sync_wall"], "count": [1, 1],
                  **{c: [1.2, 1.3] for c in schema.STATS_COLUMNS[3:]}}).to_csv(saved / "stats.csv",
                                                                               index=False)
    loaded = RunResult.load(saved)
    latency = loaded.table("latency")
    assert list(latency.columns) == schema.LATENCY_COLUMNS
    assert latency["method"].tolist() == ["cold"]
    assert loaded.table("stats")["method"].tolist() == ["cold_event", "cold_wall"]
    assert loaded.headline["timing_method"] == "cold_event"
    assert any("schema 1" in note and "cold start" in note for note in loaded.notes)


@pytest.mark.parametrize("version", [0, 6, 1.0, 3.0, 4.0, 5.0, True, "5", None])
def test_unknown_schema_versions_are_refused(tmp_path, version):
    saved = _result(tmp_path).save(tmp_path / "run")
    summary = json.loads((saved / "summary.json").read_text())
    summary["schema_version"] = version
    (saved / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RunFormatError) as raised:
        RunResult.load(saved)
    assert "schema_version" in raised.value.message and raised.value.hint


def test_a_schema_2_run_gets_its_breakdown_and_every_figure_per_mode_in_long_form(tmp_path):
    """Schema 2 decomposed only the graph's speedup (graph_us) and kept per-mode figures in the
    headline as <mode>_<metric> keys; loading brings both into today's long-form tables."""
    saved = _result(tmp_path).save(tmp_path / "old")
    summary = json.loads((saved / "summary.json").read_text())
    summary["schema_version"] = 2
    summary["headline"].update(eager_span_us=900.0, graph_span_us=300.0,
                               graphed_callables_span_us=450.0, capture_ms=12.5,
                               article_graph_ms=0.05, eager_iteration_source="ProfilerStep")
    (saved / "summary.json").write_text(json.dumps(summary))
    (saved / "metrics.csv").unlink(missing_ok=True)
    pd.DataFrame({"component": ["gpu_busy", "total_span"], "eager_us": [200.0, 900.0],
                  "graph_us": [190.0, 300.0], "saving_us": [10.0, 600.0],
                  "share_of_saving_pct": [1.7, 100.0]}).to_csv(saved / "breakdown.csv", index=False)
    pd.DataFrame({"mode": ["eager", "graph"], "median_ms": [1.2, 0.3], "speedup": [1.0, 4.0],
                  "speedup_ci_low": [1.0, 3.5], "speedup_ci_high": [1.0, 4.5],
                  "one_time_ms": [0.0, 20.0], "memory_bytes": [0.0, 1e6],
                  "graphs_recorded": [math.nan, 1.0]}).to_csv(saved / "modes.csv", index=False)
    loaded = RunResult.load(saved)
    breakdown = loaded.table("breakdown")
    assert list(breakdown.columns) == schema.BREAKDOWN_COLUMNS
    assert breakdown["mode"].tolist() == ["graph", "graph"]
    assert breakdown["mode_us"].tolist() == [190.0, 300.0]
    figures = loaded.table("metrics").set_index(["mode", "metric"])
    assert list(loaded.table("metrics").columns) == schema.METRIC_COLUMNS
    assert figures.loc[("graph", "median_ms"), "ratio_to_eager"] == pytest.approx(0.25)
    assert figures.loc[("graph", "speedup"), "value"] == 4.0  # modes.csv, not the headline's 4.5
    assert figures.loc[("graphed_callables", "span_us"), "value"] == 450.0  # not graph's
    assert figures.loc[("graphed_callables", "span_us"), "eager_value"] == 900.0
    assert figures.loc[("graph", "capture_ms"), "value"] == 12.5
    assert figures.loc[("graph", "article_no_sync_median_ms"), "value"] == 0.05
    assert ("eager", "iteration_source") not in figures.index  # text is not a figure


def test_metrics_repeat_nothing_and_compare_every_method_with_eager():
    modes = pd.DataFrame({"mode": ["eager", "compile"], "median_ms": [2.0, 1.0], "speedup": [1.0, 2.0],
                          "speedup_ci_low": [1.0, 1.8], "speedup_ci_high": [1.0, 2.2],
                          "one_time_ms": [0.0, 900.0], "memory_bytes": [0.0, 5.0],
                          "graphs_recorded": [math.nan, math.nan]})
    stats = pd.DataFrame({"mode": ["eager", "compile", "eager", "compile"],
                          "method": ["steady_trial", "steady_trial", "cold_event", "cold_event"],
                          "median_ms": [2.0, 1.0, 3.0, 2.0]})
    table = metrics.build(modes, stats, {"compile": {"peak_bytes": 64, "one_time_ms": 1.0}})
    assert not table.duplicated(["mode", "metric"]).any()
    figures = table.set_index(["mode", "metric"])["value"]
    assert figures[("compile", "one_time_ms")] == 900.0  # modes.csv's value comes first
    assert figures[("compile", "cold_event_median_ms")] == 2.0
    assert figures[("compile", "cold_event_speedup")] == pytest.approx(1.5)
    assert figures[("eager", "cold_event_speedup")] == 1.0
    assert ("compile", "steady_trial_median_ms") not in figures.index  # that is median_ms
    assert figures[("compile", "peak_bytes")] == 64.0
    assert ("eager", "peak_bytes") not in figures.index  # eager measured none


def test_the_headline_names_eager_and_graph_figures_as_older_runs_did():
    """One mapping serves both ways: the index's filters name the pair's figures with it (as the
    headlines of schema 1 to 3 did) and loading a schema-2 run reads them back with it."""
    assert metrics.headline_key("graph", "pool_bytes") == "graph_pool_bytes"
    assert metrics.headline_key("graph", "capture_ms") == "capture_ms"
    assert metrics.headline_key("graph", "break_even_iters") == "break_even_iters"
    assert metrics.headline_key("eager", "span_us") == "eager_span_us"
    figures = {("graph", "pool_bytes"): 5.0, ("graph", "break_even_iters"): 3.0,
               ("eager", "peak_bytes"): 7.0}
    headline = {metrics.headline_key(*figure): value for figure, value in figures.items()}
    facts, stored = metrics.split_headline(headline)  # the schema upgrade, as loading does
    assert facts == {}
    back = metrics.build(pd.DataFrame(columns=schema.MODES_COLUMNS),
                         pd.DataFrame(columns=["mode", "method", "median_ms"]), stored)
    assert {(r.mode, r.metric): r.value for r in back.itertuples()} == figures


def test_a_run_recorded_before_the_operator_column_still_loads_and_uploads(tmp_path):
    """kernels.csv gained ``operator`` (schema.LATER_COLUMNS): a run written without it loads
    with the column empty, from its folder and as an uploaded zip."""
    from conftest import write_synthetic_run

    from dashboard import rundata

    path = write_synthetic_run(tmp_path / "old")
    kernels = pd.read_csv(path / "kernels.csv").drop(columns=["operator"])
    kernels.to_csv(path / "kernels.csv", index=False)
    loaded = RunResult.load(path).table("kernels")
    assert list(loaded.columns) == schema.KERNEL_COLUMNS and len(loaded) == len(kernels)
    assert (loaded["operator"] == "").all()
    opened = rundata.unpack_run(rundata.run_zip_bytes(path), tmp_path / "upload")
    assert (opened.table("kernels")["operator"].fillna("") == "").all()
    # another missing column is still refused
    kernels.drop(columns=["mean_us"]).to_csv(path / "kernels.csv", index=False)
    with pytest.raises(RunFormatError, match="mean_us"):
        RunResult.load(path)
