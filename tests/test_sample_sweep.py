"""The bundled sample sweep (dashboard/sample_sweeps: seed fp32, batch 64 to 2,048, measured on an
H200): it loads through the sweep reader, shows the crossover where the graph stops paying, and
the Sweep page offers it in a runs folder with no sweep of its own."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from dashboard import rundata, state
from profiler_core.sweep import store as sweep

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "dashboard" / "app.py"


def test_the_sample_sweep_loads_and_shows_a_crossover():
    listed = sweep.list_sweeps(rundata.SAMPLE_SWEEPS_DIR)
    assert len(listed) >= 1 and not listed["problem"].astype(bool).any()
    data = sweep.load_sweep(Path(listed["path"].iloc[0]))
    assert data.status == "done" and (data.points["status"] == "done").all()
    speedups = data.points.set_index("batch")["speedup"]
    assert speedups.loc[64] > 2 and speedups.loc[2048] < 1.05  # the graph stops paying


def test_the_sweep_page_offers_the_sample_in_an_empty_runs_folder(tmp_path):
    at = AppTest.from_file(str(APP), default_timeout=90)
    at.session_state[state.RUNS_DIR] = str(tmp_path / "runs")
    at.run()
    at.switch_page("views/sweep.py").run()
    assert not at.exception
    options = at.selectbox(key="sweep_open").options
    assert any(str(o).startswith(rundata.SAMPLE_SWEEP_PREFIX) for o in options)
    assert any("bundled with the tool" in str(i.value) for i in at.info)
