"""The headline's saving attributed to its parts (profiler_core.analysis.attribution): the parts add up to
the headline on synthetic tables and on recorded H200 runs, a negative part is kept, a mode whose
profiled kernels exceed its unprofiled step is noted, and a run without a profile keeps NaN."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.analysis import attribution
from profiler_core.spec.schema import ATTRIBUTION_COLUMNS, LATENCY_COLUMNS, STATS_COLUMNS
from profiler_core.storage.results import RunResult

REPO = Path(__file__).resolve().parents[1]


def _stats(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    frame = pd.DataFrame([{"mode": m, "method": k, "median_ms": v} for m, k, v in rows])
    return frame.reindex(columns=STATS_COLUMNS)


def _split(rows: list[tuple[str, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"mode": m, "iteration": i, "gpu_busy_us": b}
                         for i, (m, b) in enumerate(rows)])


def _latency(steps: dict[str, int]) -> pd.DataFrame:
    return pd.DataFrame([{"mode": m, "method": "steady", "trial": 0, "iteration": 1, "steps": s,
                          "gpu_ms": 1.0, "wall_ms": math.nan} for m, s in steps.items()],
                        columns=LATENCY_COLUMNS)


def _by_component(table: pd.DataFrame, mode: str = "graph") -> pd.DataFrame:
    return table[table["mode"] == mode].set_index("component")


def test_parts_add_up_to_the_headline_saving():
    stats = _stats([("eager", "steady_trial", 1.6), ("graph", "steady_trial", 0.24),
                    ("graph", "input_copy", 0.011), ("eager", "host_issue", 1.5),
                    ("graph", "host_issue", 0.05)])
    split = _split([("eager", 205.0), ("eager", 204.0), ("eager", 206.0), ("graph", 208.0)])
    table = attribution.build(stats, split, _latency({"eager": 1, "graph": 1}))
    assert list(table.columns) == ATTRIBUTION_COLUMNS
    rows = _by_component(table)
    assert rows.loc["step", "saving_us"] == pytest.approx(1360.0)
    assert rows.loc["gpu_kernels", "eager_us"] == pytest.approx(205.0)
    assert rows.loc["input_copy", "saving_us"] == pytest.approx(-11.0)  # time the graph added
    assert rows.loc["gpu_idle", "mode_us"] == pytest.approx(240.0 - 208.0 - 11.0)
    parts = rows.loc[list(attribution.PARTS), "saving_us"].sum()
    assert parts == pytest.approx(rows.loc["step", "saving_us"], rel=1e-9)
    assert attribution.parts_sum_error(table[table["mode"] == "graph"]) < 1e-9
    assert rows.loc["host_issue", "saving_us"] == pytest.approx(1450.0)
    assert math.isnan(rows.loc["host_issue", "share_of_saving_pct"])  # not a part of the sum


def test_a_graph_of_several_steps_is_divided_per_step_and_a_slower_graph_keeps_its_signs():
    stats = _stats([("eager", "steady_trial", 2.0), ("graph", "steady_trial", 2.03),
                    ("graph", "input_copy", 0.026)])
    split = _split([("eager", 1980.0), ("graph", 4 * 1985.0)])
    table = attribution.build(stats, split, _latency({"eager": 1, "graph": 4}))
    rows = _by_component(table)
    assert rows.loc["gpu_kernels", "mode_us"] == pytest.approx(1985.0)
    assert rows.loc["step", "saving_us"] == pytest.approx(-30.0)
    assert rows.loc[list(attribution.PARTS), "saving_us"].sum() == pytest.approx(-30.0)


def test_without_a_profiled_window_the_parts_are_not_measured():
    stats = _stats([("eager", "steady_trial", 1.0), ("graph", "steady_trial", 0.5)])
    table = attribution.build(stats, _split([]).reindex(columns=["mode", "gpu_busy_us"]),
                              _latency({"eager": 1, "graph": 1}))
    rows = _by_component(table)
    assert rows.loc["step", "saving_us"] == pytest.approx(500.0)
    assert rows.loc[["gpu_kernels", "gpu_idle"], "saving_us"].isna().all()
    assert math.isnan(attribution.parts_sum_error(table))


def test_an_eager_only_run_has_no_block():
    stats = _stats([("eager", "steady_trial", 1.0)])
    assert attribution.build(stats, _split([]), _latency({"eager": 1})).empty
    assert attribution.build(_stats([]), _split([]), _latency({})).empty


def test_profiled_kernels_longer_than_the_unprofiled_step_are_noted():
    stats = _stats([("eager", "steady_trial", 1.0), ("graph", "steady_trial", 0.2)])
    split = _split([("eager", 300.0), ("graph", 260.0)])
    table = attribution.build(stats, split, _latency({"eager": 1, "graph": 1}))
    notes = attribution.stretched_kernel_notes(table)
    assert len(notes) == 1 and notes[0].startswith("graph:") and "stretched" in notes[0]


RECORDED_RUNS = sorted(str(p.parent.relative_to(REPO)) for p in [
    *REPO.glob("dashboard/sample*/**/summary.json"), *REPO.glob("tests/data/**/summary.json")])


@pytest.mark.parametrize("folder", RECORDED_RUNS)
def test_recorded_runs_explain_their_headline(folder):
    run = RunResult.load(REPO / folder)
    table = run.table("attribution")
    block = table[table["mode"] == "graph"]
    if block.empty:
        pytest.skip(f"{folder} has no eager/graph pair")
    rows = block.set_index("component")
    headline_saving_us = (run.pair.eager_ms - run.pair.graph_ms) * 1e3
    assert rows.loc["step", "saving_us"] == pytest.approx(headline_saving_us, rel=1e-9)
    assert attribution.parts_sum_error(block) < 0.01
