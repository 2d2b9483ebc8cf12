"""Size limits of a run folder's tables (issue 18), all in temporary folders.

Every table has a size that a run of its config never exceeds (``profiler_core.storage.tablelimits``);
a table past it is refused before pandas parses it, in one line naming the file and the limit.
Before: a breakdown.csv of a million rows kept the Launch split page busy over 600 s, counters
and phases of a million rows kept their pages busy over 120 s (phases once ending in a fatal
stack overflow), and a 200 MB NUL-filled nvml.csv cost 3.8 GB and 21 s before it was refused.
The GPU chart shades a bounded number of phase bands, whatever the table holds.
"""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import write_synthetic_run
from streamlit.testing.v1 import AppTest

from dashboard import rundata, state
from dashboard.charts.gpu import MAX_PHASE_BANDS, MAX_PHASE_LEGEND, nvml_timeseries
from profiler_core.spec import schema
from profiler_core.spec.errors import RunFormatError
from profiler_core.storage import tablelimits
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "dashboard" / "sample_run"
MILLION = 1_000_000


def _header(path: Path) -> bytes:
    return path.read_bytes().split(b"\n", 1)[0] + b"\n"


def _rows(row: bytes, count: int):
    def build(path: Path) -> None:
        path.write_bytes(_header(path) + row * count)
    return build


def _distinct_rows(pattern: bytes, count: int):
    def build(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.write(_header(path))
            for start in range(0, count, 100_000):
                handle.write(b"".join(pattern % ((i,) * pattern.count(b"%"))
                                      for i in range(start, min(count, start + 100_000))))
    return build


def _nul_filled(size: int):
    def build(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.truncate(size)  # sparse: no disk written
    return build


def _one_line(size: int):
    def build(path: Path) -> None:
        with open(path, "wb") as handle:
            handle.write(_header(path).rstrip(b"\n") + b"," * size)
    return build


HOSTILE_TABLES = {
    "breakdown-1m-rows": ("breakdown.csv", _rows(b"graph,gpu_busy,220,225,-5,-0.5\n", MILLION),
                          "breakdown.csv has more than 84 rows"),
    "breakdown-1m-modes": ("breakdown.csv", _distinct_rows(b"m%d,gpu_busy,220,225,-5,-0.5\n",
                                                           MILLION),
                           "breakdown.csv has more than 84 rows"),
    "counters-1m-rows": ("counters.csv", _distinct_rows(b"after_replay%d,200,200,True,rule\n",
                                                        MILLION),
                         "counters.csv has more than 96 rows"),
    "phases-1m-rows": ("phases.csv", _distinct_rows(b"phase %d,%d.25,%d.5\n", MILLION),
                       "phases.csv has more than 248 rows"),
    "nvml-200mb-nul": ("nvml.csv", _nul_filled(200 * 10**6),
                       "nvml.csv holds NUL bytes, so it is not a table written by this tool"),
    "latency-one-50mb-line": ("latency.csv", _one_line(50 * 10**6),
                              "latency.csv has a line over 1,024 KiB"),
}


@pytest.mark.parametrize("case", HOSTILE_TABLES)
def test_a_table_past_its_limit_is_refused_before_it_is_parsed(tmp_path, case):
    file, build, message = HOSTILE_TABLES[case]
    run = write_synthetic_run(tmp_path / "runs" / case)
    build(run / file)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(RunFormatError) as caught:
            rundata.open_run(run, "folder")  # the dashboard's loader: RunResult.load
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message in caught.value.message and str(run / file) in caught.value.message
    assert caught.value.hint and "\n" not in str(caught.value)
    assert elapsed < 5 and peak < 64 * 2**20, (elapsed, peak / 2**20)  # 0.1 s, 3 MiB here


def test_a_table_at_its_limit_opens_and_one_row_more_is_refused(tmp_path):
    run = write_synthetic_run(tmp_path / "run")
    result = RunResult.load(run)
    limit = tablelimits.table_row_limit("counters", result.config, result.environment)
    assert limit == 96
    row = (run / "counters.csv").read_bytes().splitlines(keepends=True)[1]
    _rows(row, limit)(run / "counters.csv")
    assert len(RunResult.load(run).table("counters")) == limit
    _rows(row, limit + 1)(run / "counters.csv")
    with pytest.raises(RunFormatError, match="counters.csv has more than 96 rows"):
        RunResult.load(run)
    (run / "counters.csv").write_bytes(_header(run / "counters.csv") + row.rstrip(b"\n") * 2)
    assert len(RunResult.load(run).table("counters")) == 1  # a last line without its break


def test_real_runs_stay_well_under_every_limit(tmp_path):
    if not SAMPLE.exists():
        pytest.skip("the bundled sample run is not in this checkout")
    for path in (SAMPLE, write_synthetic_run(tmp_path / "run")):
        result = RunResult.load(path)
        for name in schema.TABLE_FILES:
            limit = tablelimits.table_row_limit(name, result.config, result.environment)
            assert len(result.table(name)) <= limit / 2, (path.name, name)


def test_limits_follow_the_config_and_the_run_time():
    result = RunResult.load(SAMPLE) if SAMPLE.exists() else None
    config = result.config if result else None
    if config is None:
        pytest.skip("the bundled sample run is not in this checkout")
    limit = tablelimits.table_row_limit
    longer = config.replace(replays=100_000, eager_iters=100_000)
    assert limit("latency", longer) > 100 * limit("latency", config)
    assert limit("phases", config.replace(trials=100)) > limit("phases", config)
    assert limit("launch_split", config.replace(profile_iters=1000)) > 2 * 2 * 1000
    hour = {"started_at": "2026-12-01T04:00:00+00:00", "finished_at": "2026-12-01T05:00:00+00:00"}
    assert limit("nvml", config, hour) > 2 * 7 * 3600 / 0.02  # polled every 20 ms for an hour
    assert limit("nvml", config, {}) == 2 * tablelimits.MAX_NVML_ROWS + tablelimits.ROOM
    unreadable = {"started_at": "x", "finished_at": "2026"}
    assert limit("nvml", config, unreadable) == limit("nvml", config)


def _app(runs: Path, opened: Path) -> AppTest:
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs)
    at.session_state[state.OPEN_RUN] = str(opened.resolve())
    return at.run()


@pytest.mark.usefixtures("fresh_app_state")
def test_the_launch_split_page_refuses_a_million_row_breakdown_in_one_line(tmp_path):
    run = write_synthetic_run(tmp_path / "runs" / "big")
    HOSTILE_TABLES["breakdown-1m-rows"][1](run / "breakdown.csv")
    started = time.perf_counter()
    at = _app(tmp_path / "runs", run)
    at.switch_page("views/launch_split.py").run()
    assert not at.exception
    shown = [re.sub(r"\\(.)", r"\1", e.value).replace("\u2060", "") for e in at.error]
    assert any("breakdown.csv has more than 84 rows" in text for text in shown), shown
    assert time.perf_counter() - started < 30  # over 600 s before


@pytest.mark.usefixtures("fresh_app_state")
def test_the_gpu_page_with_as_many_phases_as_a_run_may_hold_stays_quick(tmp_path):
    run = write_synthetic_run(tmp_path / "runs" / "phases")
    result = RunResult.load(run)
    limit = tablelimits.table_row_limit("phases", result.config, result.environment)
    starts = np.arange(limit) * 0.02
    pd.DataFrame({"phase": [f"phase {i}" for i in range(limit)], "start_s": starts,
                  "end_s": starts + 0.01}).to_csv(run / "phases.csv", index=False)
    started = time.perf_counter()
    at = _app(tmp_path / "runs", run)
    at.switch_page("views/gpu.py").run()
    assert not at.exception
    shown = [re.sub(r"\\(.)", r"\1", c.value).replace("\u2060", "") for c in at.caption]
    assert any(f"This run has {limit:,} phase names, too many" in text for text in shown)
    assert time.perf_counter() - started < 30


def test_the_gpu_chart_shades_a_bounded_number_of_phase_bands():
    count = MILLION  # 20,000 phases took 43 s to draw (a legend entry each); a million crashed
    starts = np.arange(count) * 1e-3
    phases = pd.DataFrame({"phase": [f"phase {i % 50_000}" for i in range(count)],
                           "start_s": starts, "end_s": starts + 5e-4 + (np.arange(count) == 7)})
    nvml = pd.DataFrame({"t_s": [0.0, 1.0], "metric": "gpu_util_pct", "value": [1.0, 2.0],
                         "source": "poll"})
    started = time.perf_counter()
    fig = nvml_timeseries(nvml, phases)
    fig.to_json()
    assert time.perf_counter() - started < 10  # 0.4 s here
    assert len(fig.layout.shapes) == MAX_PHASE_BANDS
    assert phases["end_s"].iloc[7] in {shape.x1 for shape in fig.layout.shapes}  # the longest
    legend = [trace.name for trace in fig.data if trace.type == "bar"]  # a lane trace per kind
    assert len(legend) == MAX_PHASE_LEGEND + 1
    assert legend[-1].endswith("other kinds of phase")
    assert sum(len(trace.base) for trace in fig.data if trace.type == "bar") == \
        MAX_PHASE_BANDS  # the lanes draw the bands shaded, no more
    assert "400 of 1,000,000 phase blocks shaded" in fig.layout.title.subtitle.text
    few = nvml_timeseries(nvml, phases.head(30))
    assert len(few.layout.shapes) == 30 and not few.layout.title.subtitle.text
