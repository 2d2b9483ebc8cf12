"""The typed run model (issue 19, item 1): one reader of the run folder (``storage.runfolder``)
with one set of limits, every mode's trace, and the figures held once behind ``Figures`` and
``Headline``."""

from __future__ import annotations

import io
import json
import math
import zipfile

import pandas as pd
import pytest

from dashboard import rundata
from profiler_core.analysis.figures import Figures, Headline
from profiler_core.spec.errors import RunFormatError
from profiler_core.storage import index_rows, runfolder
from profiler_core.storage.results import RunResult


def test_figures_are_read_by_mode_and_metric():
    table = pd.DataFrame({"mode": ["eager", "graph", "graph", "compile"],
                          "metric": ["median_ms", "median_ms", "speedup", "speedup"],
                          "value": [2.0, 0.5, 4.0, "not a number"]})
    figures = Figures.from_table(table)
    assert figures.get("graph", "speedup") == 4.0 and figures.has("graph", "speedup")
    assert math.isnan(figures.get("compile", "speedup")) and not figures.has("compile", "speedup")
    assert math.isnan(figures.get("nosuchmode", "median_ms"))
    assert figures.modes() == ["eager", "graph", "compile"]
    assert figures.of_mode("graph") == {"median_ms": 0.5, "speedup": 4.0}
    assert list(figures.frame().columns) == ["mode", "metric", "value"]


def test_a_stored_headline_is_upgraded_into_figures_and_metrics_csv_wins():
    """The summary's older names (capture_ms, speedup, <mode>_<metric>) are the schema's only:
    read as figures; where metrics.csv holds the same figure, its value is the one read."""
    headline = {"timing_method": "steady_trial", "speedup": 3.0, "capture_ms": 9.0,
                "eager_median_ms": 3.0, "graph_median_ms": 1.0, "break_even_iters": 7.0,
                "graph_pays_back": 1.0, "predicted_speedup": 2.9, "counters_match": True}
    stored = Figures.from_headline(headline)
    assert stored.get("graph", "capture_ms") == 9.0 and stored.get("graph", "speedup") == 3.0
    assert "predicted_speedup" not in stored.of_mode("graph")  # a fact, not a mode's figure
    table = pd.DataFrame({"mode": ["graph"], "metric": ["speedup"], "value": [3.1]})
    assert Figures.of_run(table, headline).get("graph", "speedup") == 3.1
    pair = Headline.from_stored(headline)
    assert (pair.timing_method, pair.eager_ms, pair.graph_ms, pair.speedup,
            pair.break_even_steps, pair.pays_back) == ("steady_trial", 3.0, 1.0, 3.0, 7.0, 1.0)
    assert math.isnan(pair.speedup_ci_low)
    assert Headline.from_stored({"timing_method": {"a": 1}}).timing_method == ""


def test_every_reader_takes_the_same_summary_limit(tmp_path, synthetic_run):
    saved_run = synthetic_run
    assert runfolder.size_limit("summary.json") == runfolder.MAX_SUMMARY_BYTES
    big = tmp_path / "big"
    big.mkdir()
    content = json.loads((saved_run / "summary.json").read_text())
    text = json.dumps(content)
    padding = runfolder.MAX_SUMMARY_BYTES - len(text) + 10
    (big / "summary.json").write_text(text[:-1] + ', "padding": "' + "x" * padding + '"}')
    with pytest.raises(RunFormatError, match="over the 16 MiB limit"):
        runfolder.read_summary(big)
    with pytest.raises(RunFormatError, match="over the 16 MiB limit"):
        RunResult.load(big)
    assert not runfolder.is_tool_run(big)
    assert "over the 16 MiB limit" in index_rows.read_run(tmp_path, "big")["run"]["problem"]
    assert runfolder.read_summary(saved_run).config == RunResult.load(saved_run).config


def test_every_modes_trace_is_a_run_file_and_an_upload_keeps_it(tmp_path, synthetic_run):
    """The runner writes trace_<mode>.json for every profiled mode: each is a run file, travels
    in an uploaded zip and is found again on loading."""
    saved_run = synthetic_run
    for mode in ("eager", "graph", "compile", "compile_ro", "graphed_callables"):
        assert f"trace_{mode}.json" in runfolder.KNOWN_FILES
        assert runfolder.is_run_file_name(f"trace_{mode}.json.gz")
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as zf:
        for file in saved_run.iterdir():
            if file.name != "manifest.json":
                zf.write(file, f"run/{file.name}")
        zf.writestr("run/trace_compile.json", json.dumps({"traceEvents": []}))
    members = rundata.validate_run_zip(packed.getvalue())
    assert "trace_compile.json" in members
    opened = rundata.unpack_run(packed.getvalue(), tmp_path / "unpacked")
    assert (opened.path / "trace_compile.json").is_file()
    traces = runfolder.trace_paths(opened.path, ["eager", "compile"])
    assert traces["compile"] == opened.path / "trace_compile.json"
