"""The dashboard on runs measured in several fresh processes and on unstable runs (issue 17,
item 3): the between-process interval beside the run's own CI, its warning and chart; the
unstable-measurement warning; the sidebar's repeats and CPU affinity controls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import figure_table
from streamlit.testing.v1 import AppTest

from dashboard import devices, state
from dashboard.charts.timing import repeats_chart
from profiler_core.orchestration import repeats
from profiler_core.spec.schema import REPEAT_COLUMNS, STATS_COLUMNS
from profiler_core.storage.results import RunResult, coerce_table

pytestmark = pytest.mark.usefixtures("fresh_app_state")
APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
ONE_GPU = (pd.DataFrame([{"device": "cuda:0", "index": 0, "name": "NVIDIA H200",
                          "memory_free_mib": 140_000.0, "memory_total_mib": 143_771.0,
                          "source": "nvml"}]), "")


def _app(runs_dir: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    return at.run()


def _texts(elements) -> str:
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


def _repeats_table(speedups: list[float], shown: int) -> pd.DataFrame:
    return pd.DataFrame({"repeat": range(1, len(speedups) + 1), "pid": range(100, 100 + len(speedups)),
                         "eager_median_ms": [1.2] * len(speedups),
                         "graph_median_ms": [1.2 / s for s in speedups], "speedup": speedups,
                         "speedup_ci_low": [s * 0.97 for s in speedups],
                         "speedup_ci_high": [s * 1.03 for s in speedups],
                         "run_wall_s": [12.0] * len(speedups),
                         "shown": [i == shown for i in range(len(speedups))]}, columns=REPEAT_COLUMNS)


def _repeats_run(path: Path) -> Path:
    """The synthetic GPU run (about 5x) as the median of three fresh processes, 3.9-6.62x."""
    from conftest import write_synthetic_run

    run = RunResult.load(write_synthetic_run(path))
    speedup = run.pair.speedup
    assert 3.9 < speedup < 6.62
    table = _repeats_table([3.9, speedup, 6.62], shown=1)
    run.tables["repeats"] = coerce_table("repeats", table)
    run.headline.update(repeats.between_headline(table))
    run.config = run.config.replace(repeats=3)
    return run.save(path, overwrite=True)


def test_the_overview_shows_the_between_process_interval_beside_the_runs_own_ci(tmp_path):
    path = _repeats_run(tmp_path / "runs" / "three-processes")
    at = _app(path.parent)
    assert not at.exception, [e.value for e in at.exception]
    assert "Between fresh processes" in _texts(at.subheader)
    metrics = {m.label: m for m in at.metric}
    pair = RunResult.load(path).pair
    low, high = pair.speedup_ci_low, pair.speedup_ci_high
    assert metrics["Within this process: 95% CI"].value == f"{low:.2f}x-{high:.2f}x"
    assert metrics["Between processes: speedup"].value == "3.90x-6.62x"
    assert metrics["Fresh processes"].value == "3"
    warning = _texts(at.warning)
    assert "Between 3 fresh processes the speedup moved from 3.9x to 6.62x" in warning
    assert "wider than this run's own 95% CI" in warning
    figures = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    chart = next(f for f in figures if f["layout"]["title"]["text"].startswith("Speedup in each"))
    assert [trace["name"] for trace in chart["data"]] == ["other processes",
                                                          "shown: the median process"]
    assert chart["data"][1]["x"] == ["#2"]
    tables = [list(df.value.columns) for df in at.dataframe]
    assert repeats.BETWEEN_COLUMNS in tables and REPEAT_COLUMNS in tables
    assert "Download repeats.csv" in {b.label for b in at.download_button}


def test_a_run_of_one_process_shows_no_repeats_section(tmp_path):
    from conftest import write_synthetic_run

    path = write_synthetic_run(tmp_path / "runs" / "one")
    at = _app(path.parent)
    assert "Between fresh processes" not in _texts(at.subheader)
    assert "Unstable measurement" not in _texts(at.warning)


def _unstable_cpu_run(path: Path) -> Path:
    """The issue's CPU run: trial means with a median of 21.0 ms, single steps of 6.43 ms."""
    from profiler_core.spec.config import PRESETS

    rng = np.random.default_rng(0)
    wall = 6.43 * rng.lognormal(0, 0.02, 40)
    wall[[3, 13, 23, 33]] = 150.0  # one very slow step in each trial
    trial = np.arange(40) // 10
    latency = pd.DataFrame({"mode": "eager", "method": "steady", "trial": trial,
                            "iteration": np.arange(40) % 10, "steps": 1, "gpu_ms": np.nan,
                            "wall_ms": wall})
    means = pd.Series(wall).groupby(trial).mean().to_numpy()
    rows = []
    for method, values in (("steady_trial", means), ("steady_wall", wall)):
        q = np.percentile(values, [10, 25, 50, 75, 90, 99])
        rows.append(["eager", method, values.size, values.mean(), q[2], q[0], q[4], q[5],
                     q[3] - q[1], values.min(), values.max()])
    config = PRESETS["seed"].replace(device="cpu", profile=False, nvml=False, parity_steps=0)
    return RunResult(config=config, environment={"device_type": "cpu", "cpu_model": "Test CPU",
                                                 "cpu_affinity": "0-1", "load_avg_start": [1.0, 0.5, 0.2]},
                     headline={"timing_method": "steady_trial"},
                     tables={"latency": coerce_table("latency", latency),
                             "stats": coerce_table("stats", pd.DataFrame(rows, columns=STATS_COLUMNS)),
                             "metrics": figure_table({"eager": {"median_ms": float(np.median(means))},
                                                      "graph": {"median_ms": float("nan"),
                                                                "speedup": float("nan")}})},
                     notes=["device cpu: only the eager half ran"]).save(path)


@pytest.mark.parametrize("page", ["views/overview.py", "views/latency.py"])
def test_an_unstable_run_says_so_naming_both_figures(tmp_path, page):
    path = _unstable_cpu_run(tmp_path / "runs" / "unstable")
    at = _app(path.parent)
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    # one line (issue 28: four stacked warnings pushed the charts down) that opens into the figures
    lines = [e.label for e in at.expander if "Unstable measurement" in e.label]
    assert len(lines) == 1 and not at.warning
    assert "Unstable measurement in this run (eager): trials spread" in lines[0].replace("\\", "")
    warning = _texts(at.markdown)
    assert "not the host's load (load average 1.0 at the start on 2 CPU(s)" in warning
    assert "the median of the 4 trials' mean step times" in warning
    assert "while the median single step is 6.4" in warning
    if page == "views/overview.py":  # the host's figures are in the environment table
        env = next(df.value for df in at.dataframe if list(df.value.columns) == ["item", "value"])
        assert {"cpu_model", "cpu_affinity", "load_avg_start"} <= set(env["item"])


def test_the_sidebar_offers_repeats_and_cpu_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)  # on a GPU the seed preset stays
    at = _app(tmp_path / "runs")
    repeats_input = at.sidebar.number_input(key="cfg_repeats")
    assert repeats_input.value == 1 and "from 1 to 15" in repeats_input.help
    affinity = at.sidebar.text_input(key="cfg_cpu_affinity")
    assert affinity.value in ("", None) and "taskset" in affinity.help
    repeats_input.set_value(3).run()
    at.sidebar.text_input(key="cfg_cpu_affinity").input("2,3").run()
    assert not at.sidebar.error
    assert "labelled 'custom'" not in _texts(at.sidebar.caption)  # how it measures: still seed
    at.sidebar.selectbox(key="cfg_preset").select("lesson3").run()
    assert at.sidebar.number_input(key="cfg_repeats").value == 3  # a preset keeps it
    at.sidebar.text_input(key="cfg_cpu_affinity").input("5-2").run()
    assert "runs backwards" in _texts(at.sidebar.error)
    assert at.sidebar.button(key="run_button").disabled


def test_the_repeats_chart_falls_back_to_eager_times_and_to_a_message():
    cpu = _repeats_table([1.0, 1.0], shown=0).assign(speedup=np.nan, speedup_ci_low=np.nan,
                                                     speedup_ci_high=np.nan,
                                                     eager_median_ms=[0.9, 1.4])
    figure = repeats_chart(cpu)
    assert figure.layout.title.text == "Eager time per step in each fresh process"
    assert figure.data[1].y[0] == 0.9 and figure.data[0].error_y.array is None
    empty = repeats_chart(coerce_table("repeats", pd.DataFrame(columns=REPEAT_COLUMNS)))
    assert "measured in one process" in empty.layout.annotations[0].text


def test_the_sweep_page_makes_every_point_a_repeats_run(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from profiler_core.sweep import runner as sweep
    started = []

    class Launcher:  # every point ends at once, failed: only its config matters here
        def start(self, config, out_dir, **_):
            started.append(config)
            ending = SimpleNamespace(status="crashed", error=None, stderr_tail="", returncode=1,
                                     message="stand-in")
            return SimpleNamespace(wait=lambda timeout=None: ending, cancel=lambda: None)

        def close(self):
            pass

    monkeypatch.setattr(sweep, "_default_launcher", lambda pending, device=None: Launcher())
    at = _app(tmp_path / "runs")
    at.switch_page("views/sweep.py").run()
    at.text_input(key="sweep_v1_batch").set_value("8,16").run()
    at.number_input(key="sweep_repeats").set_value(3).run()
    at.button(key="sweep_start").click().run()
    assert at.session_state["sweep_job"].wait(30)
    assert [config.repeats for config in started] == [3, 3]


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_the_repeats_chart_leaves_out_values_that_are_not_finite(bad):
    table = _repeats_table([4.8, 5.5, 6.2], shown=1)
    table.loc[0, "speedup"] = bad
    table.loc[2, "speedup_ci_high"] = bad
    figure = repeats_chart(table)
    assert "Infinity" not in figure.to_json()
    assert [list(trace.x) for trace in figure.data] == [["#3"], ["#2"]]
