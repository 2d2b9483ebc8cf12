"""The bundled sample sweeps (dashboard/sample_sweeps, measured on an H200: seed fp32, batch 64 to
2,048; torchvision's ResNet-50 as an own whole step, fp32, its batch setting 1 to 64): each loads
through the sweep reader and shows the crossover where the graph stops paying, and the Sweep page
offers them in a runs folder with no sweep of its own."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from dashboard import rundata, state
from profiler_core.sweep import store as sweep

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "dashboard" / "app.py"


def _sample(name: str):
    listed = sweep.list_sweeps(rundata.SAMPLE_SWEEPS_DIR).set_index("name")
    assert not listed["problem"].astype(bool).any()
    data = sweep.load_sweep(Path(listed.at[name, "path"]))
    assert data.status == "done" and (data.points["status"] == "done").all()
    return data


def test_the_sample_sweep_loads_and_shows_a_crossover():
    speedups = _sample("seed-fp32-batch").points.set_index("batch")["speedup"]
    assert speedups.loc[64] > 2 and speedups.loc[2048] < 1.05  # the graph stops paying


def test_the_resnet50_sample_sweeps_an_own_steps_batch_setting():
    """pytorch/benchmark#706's question on an H200: ResNet-50 training, fp32, batch 1 to 64."""
    data = _sample("resnet50-fp32-batch")
    assert data.plan.base.workload == "profiler_core.examples.resnet50_step:build"
    assert [axis.to_dict() for axis in data.plan.axes] == [
        {"name": "batch", "values": [1, 2, 4, 8, 16, 32, 64], "setting": True}]
    speedups = data.points.set_index("batch")["speedup"]
    assert speedups.loc[1] > 4 and speedups.loc[64] < 1.1  # launch-bound at 1, GPU-bound at 64
    assert (speedups.diff().dropna() < 0).all()  # falling with the batch
    predicted = data.points.set_index("batch")["predicted_speedup"]
    assert ((predicted / speedups - 1).abs() < 0.05).all()  # predicted before capture


def test_the_sweep_page_offers_the_sample_in_an_empty_runs_folder(tmp_path):
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.session_state[state.RUNS_DIR] = str(tmp_path / "runs")
    at.run()
    at.switch_page("views/sweep.py").run()
    assert not at.exception
    options = at.selectbox(key="sweep_open").options
    assert any(str(o).startswith(rundata.SAMPLE_SWEEP_PREFIX) for o in options)
    assert any("bundled with the tool" in str(i.value) for i in at.info)
