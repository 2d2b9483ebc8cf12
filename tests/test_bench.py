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


def test_a_stopped_benchmark_keeps_what_its_finished_processes_measured():
    """On an H200 a benchmark stopped by its time limit in its ninth process of nine wrote
    nothing: the rounds that finished are its tables now, and the interruption says how far it
    got."""
    done = []

    def tool(options):
        if "tool" in done:  # round 2's third process (roles rotate: bare, bare, tool)
            raise KeyboardInterrupt
        done.append("tool")
        return {"eager": 1.10, "graph": 0.20}

    def bare(options):
        done.append("bare")
        return {"eager": 1.00, "graph": 0.20}

    with pytest.raises(bench.BenchmarkStopped) as stopped:
        bench.run_benchmark(3, {"small": ["--batch", "8"]}, tool=tool, bare=bare)
    assert (stopped.value.done, stopped.value.total) == (5, 9)
    assert str(stopped.value) == "stopped after 5 of 9 processes"
    tables = stopped.value.tables
    assert len(tables["rounds"]) == 5
    fidelity = tables["fidelity"].set_index("quantity")
    assert fidelity.loc["eager", "tool_over_bare"] == pytest.approx(1.1)
    assert fidelity.loc["graph", "rounds"] == 1
    # stopped before any process finished: the rounds table alone, empty
    with pytest.raises(bench.BenchmarkStopped) as nothing:
        bench.run_benchmark(1, {"small": []}, tool=lambda o: (_ for _ in ()).throw(KeyboardInterrupt),
                            bare=bare)
    assert list(nothing.value.tables) == ["rounds"] and nothing.value.tables["rounds"].empty


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


def _shaped_config(*options: str):
    from profiler_core.cli import parser as cli

    return cli.config_from_args(cli.parse(["run", "--preset", "seed", *options, "--out", "x"]))


SHAPED_OPTIONS = ["--workload", "tests.own_steps:shaped", "--workload-arg", "width=8",
                  "--device", "cpu", "--replays", "12", "--vary", "seq_len=uniform:3:20",
                  "--buckets", "pow2"]


def test_a_benchmark_of_changing_shapes_compares_every_padding_strategy():
    """bench --workload ... --vary: the tool's run of the config against the bare loop given its
    sequence, eager, pad_max and buckets (``graph``) each with its interval and the bare loop's
    own noise."""
    given = []

    def tool(options):
        given.append(("tool", list(options)))
        return {"eager": 2.0, "graph": 0.5, "pad_max": 0.8}

    def bare(options):
        given.append(("bare", list(options)))
        return {"eager": 2.0, "graph": 0.49, "pad_max": 0.8}

    tables = bench.run_benchmark(3, {"own": _shaped_config(*SHAPED_OPTIONS)}, tool=tool, bare=bare)
    assert all(("--vary" in options) == (role == "tool") for role, options in given)
    assert all(("--sequence" in options) == (role == "bare") for role, options in given)
    fidelity = tables["fidelity"].set_index("quantity")
    assert list(fidelity.index) == ["eager", "graph", "speedup", "pad_max"]
    assert fidelity.loc["graph", "tool_over_bare"] == pytest.approx(0.5 / 0.49)
    assert fidelity.loc["pad_max", "bare_over_bare"] == pytest.approx(1.0)
    assert fidelity.loc["speedup", "tool"] == pytest.approx(4.0)


def test_the_bare_loop_is_given_the_sequence_and_buckets_the_tools_run_times(tmp_path):
    """The bare loop pads the same seeded sequence into the same buckets, in as many blocks and
    after as many warm-up steps as the tool's run of the same config (a real CPU run here)."""
    import subprocess

    from profiler_core.orchestration.command import config_to_argv
    from profiler_core.storage.results import RunResult

    config = _shaped_config(*SHAPED_OPTIONS)
    argv = bench.shaped_bare_options(config, tmp_path / "sequence.txt")
    given = dict(zip(argv[::2], argv[1::2]))
    assert given["--workload"] == "tests.own_steps:shaped" and given["--workload-arg"] == "width=8"
    assert given["--dimension"] == "seq_len" and given["--device"] == "cpu"
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "profiler_core", "run", "--preset", "seed",
                           *config_to_argv(config), "--progress", "none", "--parity-steps", "0",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr
    run = RunResult.load(out)
    steps = run.table("shape_steps")
    eager = steps[steps["strategy"] == "eager"].sort_values("step")
    sequence = [int(v) for v in (tmp_path / "sequence.txt").read_text().split()]
    assert sequence == [int(v) for v in eager["shape"]] and len(sequence) == 12
    assert given["--buckets"] == run.headline["shapes_buckets"]
    assert given["--blocks"] == str(run.config.trial_count)
    assert given["--warmup-iters"] == str(run.config.warmup_iters)
