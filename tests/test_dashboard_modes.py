"""The sidebar's workload and mode controls (AppTest): each built-in workload shows its own size
controls, modes beside eager and the graph are chosen in one place, and the field for your own
step exists only when the server was started with PROFILER_ALLOW_USER_CODE=1."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import controls, devices, state
from profiler_core.storage.results import RunResult
from tests.test_dashboard import ONE_GPU

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
pytestmark = pytest.mark.usefixtures("fresh_app_state")


@pytest.fixture(autouse=True)
def one_gpu(fresh_app_state, monkeypatch):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)


def _app(tmp_path: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(tmp_path)
    return at.run()


def _inputs(at: AppTest) -> set[str]:
    return {widget.key for widget in at.sidebar.number_input}


def test_each_workload_shows_its_own_size_controls(tmp_path):
    at = _app(tmp_path)
    assert {"cfg_d_in", "cfg_hidden"} <= _inputs(at) and "cfg_heads" not in _inputs(at)
    at.sidebar.selectbox(key="cfg_workload").select("transformer").run()
    assert {"cfg_heads", "cfg_seq_len", "cfg_hidden"} <= _inputs(at) and "cfg_d_in" not in _inputs(at)
    at.sidebar.selectbox(key="cfg_workload").select("conv").run()
    assert {"cfg_channels", "cfg_image_size"} <= _inputs(at) and "cfg_seq_len" not in _inputs(at)
    assert not at.exception


def test_a_preset_of_another_workload_fills_its_controls(tmp_path):
    at = _app(tmp_path)
    at.sidebar.selectbox(key=controls.PRESET_KEY).select("transformer").run()
    assert at.sidebar.selectbox(key="cfg_workload").value == "transformer"
    assert at.sidebar.number_input(key="cfg_heads").value == 8
    assert not at.sidebar.error and not at.exception


def test_modes_are_chosen_beside_eager_and_the_graph(tmp_path):
    at = _app(tmp_path)
    at.sidebar.multiselect(key="cfg_modes").select("compile_ro").select("compile").run()
    modes = at.session_state["cfg_modes"]
    assert list(modes) == ["compile_ro", "compile"]
    caption = " ".join(c.value for c in at.sidebar.caption)
    assert "Changed from seed (labelled 'custom')" in caption and "also timed" in caption
    assert not at.exception


def test_your_own_step_needs_the_servers_opt_in(tmp_path, monkeypatch):
    at = _app(tmp_path)
    assert not [w for w in at.sidebar.text_input if w.key == "cfg_user_workload"]
    monkeypatch.setenv(controls.USER_CODE_ENV, "1")
    at = _app(tmp_path)
    field = at.sidebar.text_input(key="cfg_user_workload")
    field.set_value("profiler_core.examples.user_step:build").run()
    assert not at.sidebar.error and not at.exception, [e.value for e in at.sidebar.error]
    field.set_value("not a module").run()
    assert "package.module:function" in " ".join(e.value for e in at.sidebar.error)


def _three_mode_run(tmp_path: Path) -> Path:
    """The synthetic run with a third mode (compile_ro) in every table, as a run with --modes has;
    its breakdown block differs from what its launch split (the graph's) would give."""
    import pandas as pd

    from profiler_core.analysis import attribution
    from profiler_core.storage.results import RunResult, coerce_table
    from tests.conftest import write_synthetic_run

    path = write_synthetic_run(tmp_path / "runs" / "three")
    run = RunResult.load(path)
    for name in ("latency", "stats", "launch_split", "kernels"):
        frame = run.table(name)
        extra = frame[frame["mode"] == "graph"].assign(mode="compile_ro")
        run.tables[name] = coerce_table(name, pd.concat([frame, extra], ignore_index=True))
    graph = run.table("breakdown")  # compile_ro's own block: 1.2 times the graph's times
    own = graph.assign(mode="compile_ro", mode_us=graph["mode_us"] * 1.2,
                       saving_us=graph["eager_us"] - graph["mode_us"] * 1.2)
    run.tables["breakdown"] = coerce_table("breakdown", pd.concat([graph, own], ignore_index=True))
    run.tables["modes"] = coerce_table("modes", pd.DataFrame({
        "mode": ["eager", "graph", "compile_ro"], "median_ms": [1.2, 0.25, 0.26],
        "speedup": [1.0, 4.8, 4.6], "speedup_ci_low": [1.0, 4.7, 4.4],
        "speedup_ci_high": [1.0, 4.9, 4.8], "one_time_ms": [0.0, 40.0, 9_000.0],
        "memory_bytes": [0.0, 2**24, 2**25], "graphs_recorded": [float("nan"), 1.0, 2.0]}))
    run.tables["attribution"] = coerce_table("attribution", attribution.build(
        run.table("stats"), run.table("launch_split"), run.table("latency")))
    run.config = run.config.replace(modes=("eager", "graph", "compile_ro"))
    return run.save(path, overwrite=True)


def test_every_view_shows_a_third_mode(tmp_path):
    import json

    path = _three_mode_run(tmp_path)
    at = _app(path.parent)
    at.session_state[state.OPEN_RUN] = str(path.resolve())
    seen = {}
    for view in ("overview", "latency", "launch_split", "kernels", "counters", "gpu"):
        at.switch_page(f"views/{view}.py").run()
        assert not at.exception, (view, [e.value for e in at.exception])
        specs = " ".join(element.proto.spec for element in at.get("plotly_chart"))
        frames = " ".join(df.value.to_csv() for df in at.dataframe)
        seen[view] = "compile_ro" in specs or "compile_ro" in frames
    assert seen["overview"] and seen["latency"] and seen["launch_split"] and seen["kernels"], seen
    at.switch_page("views/overview.py").run()
    charts = [json.loads(element.proto.spec) for element in at.get("plotly_chart")]
    assert any(c["layout"]["title"]["text"].startswith("Speedup over eager, mode by mode")
               for c in charts)


def test_the_waterfall_of_a_mode_beside_the_graph_draws_its_own_breakdown_block(tmp_path):
    """Launch split, 'Explain the speedup of' compile_ro: the headline's waterfall and saving table
    come from compile_ro's block of attribution.csv (its steady-state step); under the profiler,
    the waterfall and the table come from compile_ro's block of breakdown.csv (total span 300 us),
    not from its launch-split medians (about 250 us, the graph's), and the table's column is
    labelled compile_ro_us."""
    import json

    path = _three_mode_run(tmp_path)
    at = _app(path.parent)
    at.session_state[state.OPEN_RUN] = str(path.resolve())
    at.switch_page("views/launch_split.py").run()
    assert at.radio(key="split_other").value == "graph"  # the first of graph, compile_ro
    at.radio(key="split_other").set_value("compile_ro").run()
    assert not at.exception, [e.value for e in at.exception]
    headline = json.loads(at.get_by_key("split_waterfall").proto.spec)["data"][0]
    assert headline["x"][0] == "eager step" and headline["x"][-1] == "compile_ro step"
    saving = next(df for df in at.dataframe if "in_the_sum" in df.value.columns).value
    assert saving.set_index("component").at["step", "mode_us"] == pytest.approx(
        RunResult.load(path).table("stats").query(
            "mode == 'compile_ro' and method == 'steady_trial'")["median_ms"].item() * 1e3)
    assert "compile_ro" in at.info[0].value  # the verdict follows the mode picked
    waterfall = json.loads(at.get_by_key("split_profiled_waterfall").proto.spec)
    gpu = waterfall["data"][0]
    assert gpu["x"][0] == "eager" and gpu["x"][-1] == "compile_ro"
    assert gpu["y"][-1] == pytest.approx(300.0)
    table = next(df for df in at.dataframe if "share_of_timeline_saving_pct" in df.value.columns)
    assert table.value.set_index("component").at["total_span", "mode_us"] == pytest.approx(300.0)
    assert "compile_ro_us" in json.dumps(json.loads(table.proto.columns))
