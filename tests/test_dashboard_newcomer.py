"""What a new user met (issue 28), in the dashboard: the Overview's first screen, the host's load
and threads where a run was slow, charts that showed nothing or the wrong thing, and cut or raw
text. Through AppTest and the figures' JSON; the real browser's checks are in test_browser.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import analysis, compare, run_facts, rundata, state
from dashboard.charts import ranks as rank_charts
from dashboard.charts.counters import counter_bars
from dashboard.charts.timing import modes_speedup_bars
from profiler_core.spec.schema import TABLE_FILES
from profiler_core.storage.results import RunResult, coerce_table

pytestmark = pytest.mark.usefixtures("fresh_app_state")
APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"


def _app(runs_dir: Path, open_run: Path | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    if open_run is not None:
        at.session_state[state.OPEN_RUN] = str(open_run.resolve())
    return at.run()


def _texts(elements) -> str:
    """What the elements say: ui.escape_md's backslashes and word joiners removed."""
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


def _label(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text).replace("\u2060", "")


def _spec(at: AppTest, key: str) -> dict:
    return json.loads(at.get_by_key(key).proto.spec)


def _values(array) -> np.ndarray:
    """A figure JSON's array: Plotly 7 writes numbers as {"dtype", "bdata"} (base64)."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        return np.frombuffer(base64.b64decode(array["bdata"]), array["dtype"])
    return np.asarray(array, dtype=float).ravel()


def _keys(at: AppTest) -> set[str]:
    return {getattr(element, "key", None) for element in at.get("plotly_chart")}


def _unstable(path: Path, environment: dict | None = None) -> Path:
    """The synthetic run with both modes' steady-state trials far from their single steps (as the
    bundled sample's four modes were): the headline median 30% above the median step."""
    from conftest import write_synthetic_run

    run = RunResult.load(write_synthetic_run(path))
    stats = run.table("stats").copy()
    for mode in ("eager", "graph"):
        step = stats[(stats["mode"] == mode) & (stats["method"] == "steady_event")].iloc[0]
        trial = (stats["mode"] == mode) & (stats["method"] == "steady_trial")
        stats.loc[trial, "median_ms"] = step["median_ms"] * 1.3
        stats.loc[trial, "iqr_ms"] = step["median_ms"] * 0.25
    RunResult(config=run.config, environment={**run.environment, **(environment or {})},
              headline=run.headline, tables={**run.tables, "stats": stats}, notes=run.notes,
              complete=True).save(path, overwrite=True)
    return path


def _cpu_run(path: Path, environment: dict) -> Path:
    """A finished CPU run as the engine writes one (eager only, wall clock), in ``environment``."""
    from conftest import figure_table

    from profiler_core.spec.config import PRESETS

    rng = np.random.default_rng(3)
    wall = 3.0 * rng.lognormal(0, 0.05, 40)
    latency = pd.DataFrame({"mode": "eager", "method": "steady", "trial": np.arange(40) // 10,
                            "iteration": np.arange(40) % 10, "steps": 1, "gpu_ms": np.nan,
                            "wall_ms": wall})
    trial = pd.Series(wall).groupby(np.arange(40) // 10).mean().to_numpy()
    stats = pd.DataFrame([["eager", method, v.size, v.mean(), np.median(v),
                           *np.percentile(v, [10, 90, 99]), 0.1, v.min(), v.max()]
                          for method, v in (("steady_trial", trial), ("steady_wall", wall))],
                         columns=TABLE_FILES["stats"][1])
    config = PRESETS["seed"].replace(device="cpu", preset="custom", batch=64, d_in=512, hidden=512,
                                     d_out=128, profile=False, nvml=False, parity_steps=0)
    return RunResult(config=config, environment={"device_type": "cpu", "torch_version": "2.13.0",
                                                 "started_at": "2026-12-01T12:00:00",
                                                 **environment},
                     headline={"timing_method": "steady_trial"},
                     tables={"latency": coerce_table("latency", latency),
                             "stats": coerce_table("stats", stats),
                             "metrics": figure_table({"eager": {"median_ms": float(np.median(trial))},
                                                      "graph": {"median_ms": float("nan"),
                                                                "speedup": float("nan")}})},
                     notes=["device cpu: only the eager half ran"], complete=True).save(path)


# ----------------------------------------------------------------------------- item 3: the first screen


def test_the_overview_opens_with_the_answer_and_at_most_one_line_of_warning(tmp_path):
    """The bundled sample opened with four stacked "Unstable measurement" warnings that pushed the
    charts 500 px down: the tiles (speedup with its CI, both medians), one line for every unstable
    mode that opens into their figures, and the verdict in one sentence come first."""
    path = _unstable(tmp_path / "runs" / "unstable")
    at = _app(path.parent, path)
    assert not at.exception, [e.value for e in at.exception]
    assert not at.warning  # no stacked warnings
    lines = [_label(e.label) for e in at.expander if "Unstable" in e.label]
    assert lines == ["Unstable measurement in 2 of 2 modes (eager, graph): trials spread "
                     f"{lines[0].split('spread ')[1]}"]
    details = _texts(at.markdown)
    assert "eager: the headline's" in details and "graph: the headline's" in details
    labels = [m.label for m in at.metric]
    assert labels == ["Speedup", "Eager median per step", "Graph median per step", "Break-even"]
    assert next(m for m in at.metric if m.label == "Speedup").proto.delta.startswith("95% CI ")
    run = RunResult.load(path)
    pay = analysis.pay_back(run.figures, run.table("modes"), "graph")
    verdict = analysis.verdict(run.figures, run.table("attribution"), None, "graph", pay)
    assert [_label(s.value) for s in at.success] == [f"**{verdict.title}.**"]  # one sentence
    assert verdict.text.split(". ")[0] in details  # and its figures, one click away


def test_a_tile_label_is_never_cut_and_the_articles_figure_is_no_tile(tmp_path):
    """'The article's 'speedup' (n...' was cut, and its 33.46x as large as the real speedup."""
    from conftest import write_synthetic_run

    path = write_synthetic_run(tmp_path / "runs" / "run")
    at = _app(path.parent, path)
    assert all(len(m.label) <= 24 for m in at.metric), [m.label for m in at.metric]
    article = RunResult.load(path).figures.get("graph", "article_no_sync_speedup")
    assert f"would say {article:.2f}x: CPU enqueue time, not training time" in _texts(at.caption)


# ----------------------------------------------------------------------------- item 5: the host


LOADED = {"logical_cores": 2, "cpu_affinity": "0-1", "load_avg_start": [9.7, 6.0, 3.0],
          "load_avg_end": [14.5, 9.0, 4.0], "torch_num_threads": 2}


def test_the_warning_names_the_hosts_load_against_its_cpus_and_the_threads(tmp_path):
    path = _unstable(tmp_path / "runs" / "loaded", LOADED)
    at = _app(path.parent, path)
    line = next(_label(e.label) for e in at.expander if "Unstable" in e.label)
    assert line.endswith("; the host was loaded")
    assert ("a loaded host: load average 9.7 at the start and 14.5 at the end on 2 CPU(s), 2 torch "
            "thread(s)") in _texts(at.markdown)
    assert "another process on the host" not in _texts(at.markdown)


def test_compare_names_the_threads_of_runs_with_the_same_settings(tmp_path):
    """A 2-rank CPU run (torchrun sets one thread per rank) beside a single process of 2 threads
    read "All these runs used the same settings": the host's part is named, with its load."""
    runs = tmp_path / "runs"
    ranks = _cpu_run(runs / "two-ranks", {"world_size": 2, "logical_cores": 2,
                                          "load_avg_start": [0.4, 0.3, 0.2],
                                          "ranks": [{"rank": 0, "torch_num_threads": 1},
                                                    {"rank": 1, "torch_num_threads": 1}]})
    single = _cpu_run(runs / "one-process", LOADED)
    at = _app(runs)
    at.switch_page("views/runs.py").run()
    at.multiselect(key="compare_runs").set_value([str(ranks.resolve()), str(single.resolve())]).run()
    assert not at.exception, [e.value for e in at.exception]
    said = _texts(at.caption)
    assert ("All these runs used the same settings, but the host did not run them alike: threads: "
            "A ran 2 processes of 1 torch thread(s) each, B ran 2 torch thread(s); B ran on a "
            "loaded host.") in said
    hosts = next(f.value for f in at.dataframe if list(f.value.columns) == compare.HOST_COLUMNS)
    assert hosts["processes"].tolist() == [2, 1] and hosts["torch_threads"].tolist() == [1, 2]
    assert hosts["load_start"].tolist() == [0.4, 9.7]
    assert hosts["loaded"].tolist() == [False, True]


# ----------------------------------------------------------------------------- item 6: empty or wrong charts


def test_two_cpu_runs_say_why_there_is_no_speedup_instead_of_an_empty_axis(tmp_path):
    runs = tmp_path / "runs"
    paths = [_cpu_run(runs / "cpu-a", {}), _cpu_run(runs / "cpu-b", {})]
    at = _app(runs)
    at.switch_page("views/runs.py").run()
    at.multiselect(key="compare_runs").set_value([str(p.resolve()) for p in paths]).run()
    at.radio(key="compare_chart").set_value("speedup").run()
    assert not at.exception
    assert "compare_speedups" not in _keys(at)
    assert ("No speedup to draw: none of these runs timed a graph. A: a CPU run times eager only. "
            "B: a CPU run times eager only.") in _texts(at.info)


def _cpu_ddp_run(path: Path) -> Path:
    """A 2-rank gloo run on the CPU, not profiled (as `run --device cpu --nproc-per-node 2`): rank
    medians 38.290 and 38.259 ms, no straggler named, no profiled window."""
    from conftest import write_synthetic_run

    base = RunResult.load(write_synthetic_run(path.parent / f"{path.name}-base"))
    rows = [[rank, "eager", metric, value] for rank, values in
            ((0, (38.290, 38.1, 40.2, 38.4)), (1, (38.259, 38.0, 40.9, 38.3)))
            for metric, value in zip(("step_median_ms", "step_p50_ms", "step_p99_ms",
                                      "host_issue_ms"), values)]
    ranks = pd.DataFrame(rows, columns=TABLE_FILES["ranks"][1])
    config = base.config.replace(device="cpu", profile=False, nvml=False, parity_steps=0)
    return RunResult(config=config, environment={"device_type": "cpu", "world_size": 2,
                                                 "backend": "gloo"},
                     headline={"timing_method": "steady_trial", "world_size": 2,
                               "slowest_eager_rank": 0, "straggler_rank": float("nan"),
                               "eager_bound": ""},
                     tables={"latency": base.table("latency")[base.table("latency")["mode"] == "eager"],
                             "stats": base.table("stats")[base.table("stats")["mode"] == "eager"],
                             "ranks": coerce_table("ranks", ranks)},
                     notes=[], complete=True).save(path)


def test_the_ranks_page_of_a_cpu_run_shows_its_step_and_says_what_it_cannot(tmp_path):
    path = _cpu_ddp_run(tmp_path / "runs" / "ddp-cpu")
    at = _app(path.parent, path)
    at.switch_page("views/ranks.py").run()
    assert not at.exception, [e.value for e in at.exception]
    tile = next(m for m in at.metric if m.label.startswith("Eager step"))
    assert (tile.label, tile.value) == ("Eager step (slowest rank)", "38.290 ms")  # was "n/a"
    assert tile.proto.delta == "rank 0; pace: not profiled"
    stack = _spec(at, "ranks_stack")  # was an empty chart with no word
    said = stack["layout"]["annotations"][0]["text"].replace("<br>", " ")
    assert not stack["data"] and rank_charts.NOT_PROFILED in said
    grid = _spec(at, "ranks_grid")["data"][0]
    slower = _values(grid["z"])
    # 38.290 against 38.259 ms (0.08%): pale, not navy against white
    assert slower.max() < 0.001 and grid["zmin"] == 0 and grid["zmax"] >= rank_charts.GRID_FULL_SLOWER
    assert "38.290 ms (+0.1%)" in str(grid["text"])
    summary = next(f for f in at.dataframe if "step_median_ms" in f.value.columns)
    # a speedup not measured: an empty cell, not "None"
    assert summary.proto.HasField("placeholder") and summary.proto.placeholder == ""


def test_the_counters_3_to_3_bars_are_seen_beside_200():
    lessons = pd.DataFrame({"phase": ["initial", "after_warmup", "after_capture", "after_replays"],
                            "predicted": [0, 3, 3, 200], "observed": [0, 3, 3, 200]})
    fig = counter_bars(lessons)
    assert fig.layout.yaxis.type == "log"  # 3 is a bar one sees next to 200
    assert list(fig.data[1].text) == ["0", "3", "3", "200"]
    assert [a.text for a in fig.layout.annotations] == ["0"]  # a zero is written, not drawn
    small = counter_bars(lessons.assign(predicted=[0, 3, 3, 30], observed=[0, 3, 3, 30]))
    assert small.layout.yaxis.type != "log"  # lesson 3's 0/3/3/30 reads on a linear axis


# ----------------------------------------------------------------------------- item 9: cut and raw text


def test_environment_values_are_formatted_not_printed_raw():
    table = run_facts.environment_table({
        "wall_startup_s": 132.73000955581665, "device_check_s": 0.0014410018920898438,
        "gpu_memory_bytes": 150109880320, "load_avg_start": [0.28, 0.07, 0.02],
        "cpu_governor": None, "cpu_threads": {"threads": 1, "reason": "1 thread(s) instead of 2"}})
    shown = dict(zip(table["item"], table["value"]))
    assert shown == {"wall_startup_s": "132.7 s", "device_check_s": "1.44 ms",
                     "gpu_memory_bytes": "139.8 GiB",
                     "load_avg_start": "0.28, 0.07, 0.02 (1, 5 and 15 min)",
                     "cpu_governor": "", "cpu_threads": "1 thread(s) instead of 2"}


def test_text_columns_are_as_wide_as_their_longest_value(tmp_path):
    """The stats table's mode column was cut to 'graphed_callabl': the table sized it from its
    first rows, all 'eager'."""
    from dashboard import ui

    frame = pd.DataFrame({"mode": ["eager"] * 12 + ["graphed_callables"], "value": np.arange(13.0)})
    config = ui.text_widths(frame, None)
    assert set(config) == {"mode"} and config["mode"]["width"] >= ui.CHAR_PX * len("graphed_callables")
    assert ui.text_widths(frame, {"mode": {"label": "given"}}) == {"mode": {"label": "given"}}
    # a column whose first rows hold its longest value keeps the table's own sizing
    assert ui.text_widths(frame.iloc[::-1].reset_index(drop=True), None) == {}
    assert ui.text_widths(frame.head(5), None) == {}


def test_the_1x_label_stands_beside_the_bars_not_on_the_last():
    modes = pd.DataFrame({"mode": ["eager", "graph", "compile_ro"], "median_ms": [1.5, 0.24, 1.53],
                          "speedup": [1.0, 6.29, 0.98], "speedup_ci_low": [1.0, 5.4, 0.9],
                          "speedup_ci_high": [1.0, 7.1, 1.1], "one_time_ms": [0.0, 14.6, 900.0]})
    fig = modes_speedup_bars(modes)
    label = next(a for a in fig.layout.annotations if "eager" in a.text)
    assert (label.xref, label.x, label.xanchor) == ("paper", 1.0, "left")
    assert fig.layout.margin.r >= 70  # room for it right of the plot


def test_break_even_says_never_in_one_word_everywhere(tmp_path):
    """The sweep's break-even table said "Infinity" in its steps column and "never" beside it."""
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(rundata.SAMPLE_SWEEPS_DIR / "seed-fp32-batch", runs / "sweep")
    at = _app(runs)
    at.switch_page("views/sweep.py").run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(f.value for f in at.dataframe if "pays_back" in f.value.columns)
    never = table["pays_back"].str.startswith("never")
    assert never.any()  # the sample sweep's batch 2,048: the graph is not faster
    assert table.loc[never, "break_even_steps"].isna().all()
    assert np.isfinite(table["break_even_steps"].dropna().astype(float)).all()


def test_every_table_shows_an_empty_cell_for_a_value_not_measured(tmp_path):
    from conftest import write_synthetic_run

    path = write_synthetic_run(tmp_path / "runs" / "run")
    at = _app(path.parent, path)
    for page in ("views/overview.py", "views/latency.py", "views/launch_split.py"):
        at.switch_page(page).run()
        assert at.dataframe and all(frame.proto.HasField("placeholder")
                                    and frame.proto.placeholder == "" for frame in at.dataframe), page

