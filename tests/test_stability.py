"""Unstable measurements said so (``profiler_core.timing.stability``; issue 17, item 3): a headline far
from the median single step, trials that spread."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from profiler_core.spec.config import PRESETS
from profiler_core.storage.results import RunResult
from profiler_core.timing import stability


def _stats(rows):
    from profiler_core.spec.schema import STATS_COLUMNS

    return pd.DataFrame([[mode, method, count, median, median, median * 0.9, median * 1.1,
                          median * 1.2, iqr, median * 0.8, median * 1.3]
                         for mode, method, count, median, iqr in rows], columns=STATS_COLUMNS)


def test_a_headline_far_from_the_median_step_is_flagged_naming_both():
    """The issue's CPU run: 21.0 ms on the Overview (median of trial means), 6.43 ms in the
    Latency view (median of single steps), with no warning."""
    found = stability.unstable_timing(_stats([("eager", "steady_trial", 4, 21.0, 0.5),
                                              ("eager", "steady_wall", 76, 6.43, 0.3)]))
    assert len(found) == 1 and found[0].mode == "eager" and found[0].step_method == "steady_wall"
    text = found[0].text()
    assert "21 ms per step is the median of the 4 trials' mean step times" in text
    assert "the median single step is 6.43 ms (+227%)" in text and "unstable" in text


def test_trials_that_spread_are_flagged_and_steady_ones_are_not():
    spread = stability.unstable_timing(_stats([("graph", "steady_trial", 10, 0.25, 0.05),
                                               ("graph", "steady_event", 190, 0.25, 0.01)]))
    assert [f.mode for f in spread] == ["graph"] and spread[0].trial_iqr_pct == pytest.approx(20.0)
    steady = _stats([("eager", "steady_trial", 10, 1.20, 0.02), ("eager", "steady_event", 190, 1.18, 0.1),
                     ("graph", "steady_trial", 2, 0.25, 0.05), ("graph", "steady_event", 190, 0.25, 0.01)])
    assert stability.unstable_timing(steady) == []  # 2 trials: their IQR says too little
    assert stability.unstable_timing(_stats([])) == []
    assert stability.unstable_timing(_stats([("eager", "cold_event", 10, 1.0, 0.5)])) == []


def test_the_cli_summary_warns_about_an_unstable_run():
    from profiler_core.cli.main import format_summary

    result = RunResult(config=PRESETS["seed"].replace(device="cpu"), environment={},
                       headline={"timing_method": "steady_trial"},
                       tables={"stats": _stats([("eager", "steady_trial", 4, 21.0, 0.5),
                                                ("eager", "steady_wall", 76, 6.43, 0.3)])})
    assert "Warning: eager: the headline's 21 ms per step" in format_summary(result)


def test_a_spread_between_processes_is_compared_with_the_runs_own_ci():
    head, ci = {"repeats": 3, "speedup_between_min": 5.35, "speedup_between_max": 5.6}, (5.3, 5.7)
    assert stability.spread_beyond_ci(head, ci) is None  # 0.25x apart, inside a 0.4x-wide CI
    wider = stability.spread_beyond_ci({**head, "speedup_between_max": 6.62}, ci)
    assert (wider.figure, wider.low, wider.high) == ("speedup", 5.35, 6.62)
    assert (wider.within_low, wider.within_high) == ci
    assert stability.spread_beyond_ci({**head, "repeats": 1, "speedup_between_max": 6.62},
                                      ci) is None
    cpu = {"repeats": 3, "eager_between_min_ms": 0.21, "eager_between_max_ms": 0.91,
           "eager_between_median_ms": 0.22}  # no speedup on the CPU: eager against its median
    no_ci = (math.nan, math.nan)
    assert stability.spread_beyond_ci(cpu, no_ci).figure == "eager median"
    assert "0.21 ms to 0.91 ms, over 10% of its median" in stability.spread_beyond_ci(
        cpu, no_ci).text()
    assert stability.spread_beyond_ci({**cpu, "eager_between_max_ms": 0.225}, no_ci) is None
    assert stability.warnings(pd.DataFrame(), {}, no_ci) == []


# ----------------------------------------------------------------------------- issue 28: the host named


def test_an_unstable_run_on_a_loaded_host_names_the_load_against_the_cpus_and_the_threads():
    """The issue's host: load 9.7 at the start and 14.5 at the end on 2 logical cores, torch on 2
    threads; the warning said only "another process on the host"."""
    stats = _stats([("eager", "steady_trial", 4, 21.0, 0.5), ("eager", "steady_wall", 76, 6.43, 0.3)])
    loaded = {"logical_cores": 2, "cpu_affinity": "0-1", "load_avg_start": [9.7, 5.0, 2.0],
              "load_avg_end": [14.5, 8.0, 3.0], "torch_num_threads": 2}
    [text] = stability.warnings(stats, {}, (math.nan, math.nan), loaded)
    assert ("(a loaded host: load average 9.7 at the start and 14.5 at the end on 2 CPU(s), 2 torch "
            "thread(s), so the run's threads waited for the CPUs other processes held)") in text
    idle = {**loaded, "load_avg_start": [0.1, 0.1, 0.1], "load_avg_end": [0.9, 0.3, 0.1],
            "torch_num_threads": 1}
    [text] = stability.warnings(stats, {}, (math.nan, math.nan), idle)
    assert "(not the host's load (load average 0.1 at the start and 0.9 at the end on 2 CPU(s), 1 torch" in text
    # two threads on a 2-CPU host already one process busy: loaded, though the load is below 2
    assert stability.HostLoad.of({**idle, "load_avg_start": [1.0, 1, 1], "torch_num_threads": 2}).loaded
    # a data-parallel run: rank 0's threads (torchrun sets 1), times its ranks
    ranks = stability.HostLoad.of({"logical_cores": 2, "load_avg_end": [1.9, 1, 1], "world_size": 2,
                                   "ranks": [{"torch_num_threads": 1}, {"torch_num_threads": 1}]})
    assert (ranks.threads, ranks.ranks, ranks.loaded) == (1, 2, False)
    assert ranks.threads_text() == "2 ranks of 1 torch thread(s) each"
    assert not stability.HostLoad.of({}).known  # an older run: said as before
    assert "another process on the host" in stability.unstable_timing(stats)[0].text()
