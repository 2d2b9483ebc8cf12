"""One profiled iteration drawn lane by lane: ``profiler_core.analysis.timeline.iteration_timeline`` on a
synthetic trace, on traces recorded on an H200, and in the Launch split view (AppTest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import synthetic_trace, write_synthetic_run
from streamlit.testing.v1 import AppTest

from dashboard import state
from dashboard.charts.attribution import iteration_timeline
from profiler_core.analysis import timeline as trace_timeline
from profiler_core.analysis import trace, trace_reading

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
RECORDED = ROOT / "tests" / "data" / "h200_launch_bound"
SAMPLE = ROOT / "dashboard" / "sample_run"
pytestmark = pytest.mark.usefixtures("fresh_app_state")


def test_an_eager_iteration_has_cpu_op_lanes_per_thread_launches_and_the_kernels_they_enqueued():
    timeline = trace_timeline.iteration_timeline(synthetic_trace("eager"))
    assert (timeline.iteration, timeline.iterations) == (1, 4)  # the median span, not the slow one
    assert timeline.span_us == pytest.approx(1100.0) and timeline.iteration_source == "profiler_steps"
    events = timeline.events
    assert list(events.columns) == trace_timeline.TIMELINE_COLUMNS
    lanes = events.groupby("lane")["name"].apply(list).to_dict()
    assert lanes["CPU: ops, thread 1"] == ["aten::linear"]  # the nested aten::addmm is inside it
    assert lanes["CPU: ops, thread 2"] == ["autograd::engine::evaluate_function: AddmmBackward0"]
    assert lanes[trace_timeline.LAUNCH_LANE] == ["cudaLaunchKernel"] * 3
    assert lanes[trace_timeline.GPU_LANE] == ["ampere_sgemm_64x32_sliced1x4_tn", "copy_kernel",
                                     "sgd_update_kernel"]  # short kernel names
    assert events["start_us"].min() >= 0 and events["start_us"].is_monotonic_increasing
    gpu = events[events["lane"] == trace_timeline.GPU_LANE]
    launches = events[events["lane"] == trace_timeline.LAUNCH_LANE]
    assert (gpu["start_us"].to_numpy() - launches["start_us"].to_numpy() == 15).all()


def test_a_graph_iteration_is_one_launch_and_all_its_kernels():
    timeline = trace_timeline.iteration_timeline(synthetic_trace("graph"))
    lanes = timeline.events.groupby("lane").size().to_dict()
    assert lanes == {trace_timeline.LAUNCH_LANE: 1, trace_timeline.GPU_LANE: 3}
    assert set(timeline.events["kind"]) == {"launch call", "kernel"}


def test_any_iteration_can_be_picked_and_an_index_out_of_range_is_clamped():
    raw = synthetic_trace("eager")
    slow = trace_timeline.iteration_timeline(raw, 2)
    assert slow.iteration == 2 and slow.span_us == pytest.approx(2400.0)
    assert trace_timeline.iteration_timeline(raw, 99).iteration == 3
    assert trace_timeline.iteration_timeline(raw, -5).iteration == 0
    empty = trace_timeline.iteration_timeline({"traceEvents": []})
    assert empty.iterations == 0 and empty.events.empty
    assert list(empty.events.columns) == trace_timeline.TIMELINE_COLUMNS


def test_a_long_iteration_keeps_its_longest_events_under_the_limit():
    timeline = trace_timeline.iteration_timeline(synthetic_trace("eager"), max_events=4)
    assert len(timeline.events) == 4 and timeline.dropped == 4
    assert "aten::linear" in set(timeline.events["name"])  # the longest events stay


@pytest.mark.parametrize("mode, source", [("eager", RECORDED / "trace_eager.json.gz"),
                                          ("graph", RECORDED / "trace_graph.json"),
                                          ("eager", SAMPLE / "trace_eager.json.gz"),
                                          ("graph", SAMPLE / "trace_graph.json.gz")])
def test_recorded_h200_iterations_match_the_launch_split(mode, source):
    """On real traces, the lanes of an iteration hold exactly the launch calls and kernels that
    the launch split counts for that iteration."""
    if not source.exists():
        pytest.skip(f"{source} is not in this checkout")
    raw = trace_reading.load_trace(source)
    split = trace.analyse_trace(raw, mode).launch_split.set_index("iteration")
    timeline = trace_timeline.iteration_timeline(raw)
    assert timeline.iterations == len(split)
    row = split.loc[timeline.iteration]
    events = timeline.events
    assert (events["lane"] == trace_timeline.LAUNCH_LANE).sum() == row["launches"]
    assert ((events["lane"] == trace_timeline.GPU_LANE) & (events["kind"] == "kernel")).sum() == row["kernels"]
    assert timeline.span_us == pytest.approx(row["span_us"])
    spans = split["span_us"].iloc[1:]
    assert row["span_us"] == pytest.approx(np.sort(spans)[(len(spans) - 1) // 2])
    fig = iteration_timeline(events, mode, timeline.span_us)
    assert [t.type for t in fig.data] and fig.to_json()
    lanes = list(fig.layout.yaxis.categoryarray)[::-1]  # drawn top to bottom
    assert lanes[-1] == trace_timeline.GPU_LANE and lanes[-2] == trace_timeline.LAUNCH_LANE


def _app(runs: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs)
    return at.run()


def test_the_launch_split_view_draws_one_iteration_per_mode_and_another_on_request(tmp_path):
    run = write_synthetic_run(tmp_path / "runs" / "synthetic-seed")
    at = _app(run.parent)
    at.switch_page("views/launch_split.py").run()
    assert not at.exception, [e.value for e in at.exception]
    figures = {e.key: json.loads(e.proto.spec) for e in at.get("plotly_chart")}
    eager, graph = figures["split_timeline_eager"], figures["split_timeline_graph"]
    assert eager["layout"]["title"]["text"].startswith("eager: iteration 2 of 4, 1,100 us")
    assert graph["layout"]["title"]["text"].startswith("graph: iteration 3 of 4, 300 us")
    assert {t["name"] for t in eager["data"]} == {"CPU op", "launch call", "kernel"}
    picker = at.selectbox(key="split_iteration_eager")
    assert picker.value == 1 and picker.format_func(1) == "iteration 2 of 4 (median span)"
    picker.select(2).run()
    spec = json.loads(at.get_by_key("split_timeline_eager").proto.spec)
    assert spec["layout"]["title"]["text"].startswith("eager: iteration 3 of 4, 2,400 us")


def test_a_trace_that_cannot_be_read_is_said_and_the_view_still_works(tmp_path):
    run = write_synthetic_run(tmp_path / "runs" / "synthetic-seed")
    (run / "trace_graph.json").write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": "soon"}]}')
    at = _app(run.parent)
    at.switch_page("views/launch_split.py").run()
    assert not at.exception
    warnings = re.sub(r"\\(.)", r"\1", " ".join(w.value for w in at.warning))  # escape_md undone
    assert "The graph trace cannot be drawn" in warnings and "non-numeric" in warnings
    assert at.get_by_key("split_timeline_eager") is not None


def test_a_cpu_run_says_why_it_has_no_timeline(tmp_path):
    from profiler_core.spec.config import PRESETS
    from profiler_core.storage.results import RunResult

    RunResult(config=PRESETS["seed"].replace(device="cpu", preset="custom", batch=64),
              environment={"device_type": "cpu"}, headline={}, tables={}, notes=[],
              complete=True).save(tmp_path / "runs" / "cpu-run")
    at = _app(tmp_path / "runs")
    at.switch_page("views/launch_split.py").run()
    assert not at.exception
    infos = " ".join(i.value for i in at.info)
    assert "No profiled window in this run: a CPU run" in infos


def test_a_lone_surrogate_in_a_kernel_name_is_drawn_as_a_replacement_character(tmp_path):
    # issue 18: the JSON escape "\ud800" in a name failed in pyarrow (UnicodeEncodeError)
    run = write_synthetic_run(tmp_path / "runs" / "synthetic-seed")
    text = json.dumps(synthetic_trace("eager", kernel_names=["PLACEHOLDER"]))
    (run / "trace_eager.json").write_text(text.replace("PLACEHOLDER", "bad\\ud800kernel"))
    at = _app(run.parent)
    at.switch_page("views/launch_split.py").run()
    assert not at.exception, [e.value for e in at.exception]
    spec = json.loads(at.get_by_key("split_timeline_eager").proto.spec)
    kernels = next(t for t in spec["data"] if t["name"] == "kernel")
    assert [row[0] for row in kernels["customdata"]] == ["bad\ufffdkernel"]


def test_a_trace_past_the_event_limit_is_said_and_the_view_still_works(tmp_path, monkeypatch):
    monkeypatch.setenv(trace_reading.MAX_TRACE_EVENTS_ENV, "10")
    run = write_synthetic_run(tmp_path / "runs" / "synthetic-seed")
    at = _app(run.parent)
    at.switch_page("views/launch_split.py").run()
    assert not at.exception
    warnings = re.sub(r"\\(.)", r"\1", " ".join(w.value for w in at.warning))
    assert "The eager trace cannot be drawn" in warnings and "holds more than 10 events" in warnings
    assert trace_reading.MAX_TRACE_EVENTS_ENV in warnings
