"""profiler_core.orchestration.bench on the CPU: the round schedule, the ratio intervals and the tables, with
fake processes in place of the tool's run and the bare loop."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import write_synthetic_run

from profiler_core.orchestration import bench


def test_roles_rotate_so_each_takes_each_position():
    orders = [bench.rotated_roles(r) for r in range(3)]
    assert orders[0] == ["tool", "bare", "bare_again"]
    for position in range(3):
        assert {order[position] for order in orders} == set(bench.ROLES)


def test_ratio_interval_is_a_geometric_mean_with_a_t_interval():
    interval = bench.ratio_interval([1.0, 1.1, 0.9, 1.05, 0.95, 1.0])
    logs = np.log([1.0, 1.1, 0.9, 1.05, 0.95, 1.0])
    assert interval.ratio == pytest.approx(math.exp(logs.mean()))
    half = 2.571 * logs.std(ddof=1) / math.sqrt(6)  # t(0.975, 5 degrees of freedom)
    assert interval.low == pytest.approx(math.exp(logs.mean() - half))
    assert interval.high == pytest.approx(math.exp(logs.mean() + half))
    one = bench.ratio_interval([1.2])
    assert one.ratio == pytest.approx(1.2) and math.isnan(one.low) and math.isnan(one.high)
    assert math.isnan(bench.ratio_interval([]).ratio)


def test_benchmark_tables_from_fake_processes():
    calls = []

    def tool(options):
        calls.append(("tool", tuple(options)))
        return {"eager": 1.10, "graph": 0.20, "graph_over_busy": 1.05, "input_copy_ms": 0.01,
                "cold_speedup": 4.0, "eager_profiler_overhead_pct": 30.0}

    def bare(options):
        calls.append(("bare", tuple(options)))
        return {"eager": 1.00, "graph": 0.20}

    tables = bench.run_benchmark(4, {"small": ["--batch", "8"]}, tool=tool, bare=bare)
    assert [c[0] for c in calls] == ["tool", "bare", "bare", "bare", "bare", "tool",
                                     "bare", "tool", "bare", "tool", "bare", "bare"]
    assert all(c[1] == ("--batch", "8") for c in calls)
    fidelity = tables["fidelity"].set_index("quantity")
    assert fidelity.loc["eager", "tool_over_bare"] == pytest.approx(1.1)
    assert fidelity.loc["eager", "ci_low"] == pytest.approx(1.1)  # no spread: a point interval
    assert fidelity.loc["graph", "tool_over_bare"] == pytest.approx(1.0)
    assert fidelity.loc["speedup", "tool"] == pytest.approx(5.5)
    assert fidelity.loc["speedup", "bare_over_bare"] == pytest.approx(1.0)
    assert (fidelity["rounds"] == 4).all()
    assert tables["tool"].loc[0, "graph_over_busy"] == pytest.approx(1.05)
    assert "fidelity" in bench.format_benchmark(tables) and "rounds\n" not in bench.format_benchmark(tables)


def test_the_quiet_tool_is_a_fourth_process_that_tells_where_a_gap_comes_from():
    calls = []

    def tool(options):
        calls.append(tuple(options))
        quiet = "--no-profile" in options
        return {"eager": 1.00 if quiet else 1.10, "graph": 0.20}

    tables = bench.run_benchmark(4, {"small": ["--batch", "8"]}, tool=tool,
                                 bare=lambda options: {"eager": 1.00, "graph": 0.20}, quiet_tool=True)
    assert calls.count(("--batch", "8")) == 4
    assert calls.count(("--batch", "8", *bench.QUIET_OPTIONS)) == 4
    orders = [bench.rotated_roles(r, (*bench.ROLES, bench.QUIET_ROLE)) for r in range(4)]
    assert [order[0] for order in orders] == ["tool", "bare", "bare_again", "tool_quiet"]
    eager = tables["fidelity"].set_index("quantity").loc["eager"]
    assert eager["tool_over_bare"] == pytest.approx(1.1)
    assert eager["quiet_over_bare"] == pytest.approx(1.0)  # the gap is the profiler's or NVML's
    assert tables["tool"].loc[0, "speedup"] == pytest.approx(5.5)  # the default run's figures only
    plain = bench.run_benchmark(2, {"small": []}, tool=tool, bare=lambda o: {"eager": 1.0, "graph": 0.2})
    assert plain["fidelity"]["quiet_over_bare"].isna().all()


def test_the_tools_process_is_the_default_run_with_the_bare_loops_options(monkeypatch):
    """orchestration.command builds the tool's command line: ``run --preset seed`` with the
    config's options as they are (the bare loop reads the same), its own default time limit, no
    progress; nothing else."""
    seen = []

    def fake_process(argv, timeout_s):  # a complete run where the command line says
        seen.append((list(argv), timeout_s))
        write_synthetic_run(Path(argv[argv.index("--out") + 1]))
        return ""

    monkeypatch.setattr(bench, "_run_process", fake_process)
    figures = bench.tool_process(bench.BENCH_CONFIGS["launch-bound-fp32"], timeout_s=60)
    ((argv, timeout_s),) = seen
    out = argv[argv.index("--out") + 1]
    assert argv == [sys.executable, "-m", "profiler_core", "run", "--preset", "seed",
                    *bench.BENCH_CONFIGS["launch-bound-fp32"], "--out", out, "--progress", "none"]
    assert timeout_s == 60 and "--timeout" not in argv
    assert figures["eager"] > figures["graph"] > 0  # read back from the run it wrote
