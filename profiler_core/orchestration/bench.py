"""``python -m profiler_core bench``: does the tool's default run time what a bare training loop
times?

The project's benchmark, on a GPU: rounds of fresh processes, the tool's default run against two
hand-written loops (``timing/bare_loop.py``) in rotating order, with tool/bare and bare/bare ratios
and their intervals (:func:`run_benchmark`). Nothing here is a test: it prints and writes figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.orchestration.command import config_to_argv, run_options_argv
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ProfilerError
from profiler_core.spec.progress import ProgressCallback, ProgressCounter, ignore_progress
from profiler_core.storage.results import RunResult

# name -> options shared by the tool's ``run`` and the bare loop (seed: the article's step); the
# names are listed in ``cli.BENCH_CONFIG_NAMES`` too.
BENCH_CONFIGS: dict[str, list[str]] = {
    "seed-fp32": [],
    "seed-bf16": ["--dtype", "bf16"],
    "launch-bound-fp32": ["--batch", "64", "--d-in", "512", "--hidden", "512", "--d-out", "256"],
}
ROLES = ("tool", "bare", "bare_again")
QUIET_ROLE = "tool_quiet"
QUIET_OPTIONS = ["--no-profile", "--no-nvml", "--parity-steps", "0"]
QUANTITIES = ("eager", "graph", "speedup")
# A run of changing shapes: the quantity -> the strategy it is (eager/graph stays the speedup).
SHAPED_STRATEGIES = {"eager": "eager", "graph": "buckets", "pad_max": "pad_max"}
BARE_LOOP = Path(__file__).resolve().parent.parent / "timing" / "bare_loop.py"
# Two-sided 95% Student-t quantiles by degrees of freedom (1-30); 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042)

# One process: the config's options -> its figures ("eager" and "graph": ms per training step).
Runner = Callable[[Sequence[str]], dict[str, float]]


@dataclass(frozen=True)
class Interval:
    """Geometric mean of per-round ratios, with a 95% t-interval (NaN bounds with one round)."""

    ratio: float
    low: float
    high: float


def t95(degrees_of_freedom: int) -> float:
    return _T95[degrees_of_freedom - 1] if 1 <= degrees_of_freedom <= len(_T95) else 1.96


def ratio_interval(ratios: Sequence[float]) -> Interval:
    logs = np.log(np.asarray(ratios, dtype=float))
    logs = logs[np.isfinite(logs)]
    if logs.size == 0:
        return Interval(math.nan, math.nan, math.nan)
    mean = float(logs.mean())
    if logs.size == 1:
        return Interval(math.exp(mean), math.nan, math.nan)
    half = t95(logs.size - 1) * float(logs.std(ddof=1)) / math.sqrt(logs.size)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def rotated_roles(round_index: int, roles: Sequence[str] = ROLES) -> list[str]:
    """The order of a round's processes: rotated each round."""
    roles = tuple(roles)
    shift = round_index % len(roles)
    return list(roles[shift:] + roles[:shift])


def _run_process(argv: Sequence[str], timeout_s: float) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ProfilerError(f"a benchmark process failed (exit {done.returncode}): {tail}",
                            f"run it alone to see why: {' '.join(argv)}")
    return done.stdout


def tool_process(options: Sequence[str], timeout_s: float = 600.0) -> dict[str, float]:
    """The tool's default run in a fresh process (``run --preset seed <options>``, as users run
    it: its own default time limit, no progress shown); its headline figures. A run of changing
    shapes (``--vary`` in ``options``): each compared strategy's mean time per step over the
    sequence (``graph``: a graph per bucket)."""
    with tempfile.TemporaryDirectory(prefix="profiler_core_bench_") as folder:
        out = Path(folder) / "run"
        _run_process(run_options_argv(["--preset", "seed", *options], out, progress="none"),
                     timeout_s)
        run = RunResult.load(out)
    if "--vary" in options:
        strategies = run.table("strategies").set_index("strategy")
        return {quantity: float(strategies.at[name, "sum_ms"] / strategies.at[name, "steps"])
                for quantity, name in SHAPED_STRATEGIES.items()}
    figures, pair = run.figures, run.pair
    busy_ms = figures.get("graph", "gpu_busy_us") / 1e3
    return {"eager": pair.eager_ms, "graph": pair.graph_ms,
            "graph_over_busy": pair.graph_ms / busy_ms if busy_ms > 0 else math.nan,
            "input_copy_ms": figures.get("graph", "input_copy_median_ms"),
            "cold_speedup": figures.get("graph", "cold_event_speedup"),
            "eager_profiler_overhead_pct": figures.get("eager", "profiler_overhead_pct")}


def bare_process(options: Sequence[str], timeout_s: float = 600.0) -> dict[str, float]:
    """The bare loop in a fresh process; its medians (over a sequence of shapes, ``--sequence``:
    each strategy's mean per step)."""
    output = _run_process([sys.executable, str(BARE_LOOP), *options], timeout_s)
    figures = json.loads(output.strip().splitlines()[-1])
    if "--sequence" in options:
        return {quantity: float(figures[f"{name}_ms"])
                for quantity, name in SHAPED_STRATEGIES.items()}
    return {"eager": float(figures["eager_ms"]), "graph": float(figures["graph_ms"])}


def shaped_bare_options(config: RunConfig, sequence_file: Path) -> list[str]:
    """The bare loop's options for the tool's run of ``config`` (an own step with ``vary``): its
    workload and settings, the same seeded sequence of shapes (written to ``sequence_file``),
    buckets, warm-up steps and blocks (the run's trials)."""
    from profiler_core.engine.shaped import plan

    shape_plan = plan(config)
    sequence_file.write_text("".join(f"{value}\n" for value in shape_plan.sequence), "utf-8")
    argv = ["--workload", str(config.workload), "--sequence", str(sequence_file),
            "--dimension", shape_plan.vary.dimension,
            "--buckets", ",".join(str(edge) for edge in shape_plan.edges),
            "--warmup-iters", str(config.warmup_iters), "--blocks", str(config.trial_count),
            "--seed", str(config.seed), "--device", config.device]
    for name, value in config.workload_args:
        argv += ["--workload-arg", f"{name}={value}"]
    return argv


def run_benchmark(rounds: int = 6, configs: Mapping[str, Sequence[str] | RunConfig] | None = None,
                  progress: ProgressCallback = ignore_progress,
                  tool: Runner = tool_process, bare: Runner = bare_process,
                  quiet_tool: bool = False) -> dict[str, pd.DataFrame]:
    """Tables ``rounds`` (every process's figures), ``fidelity`` (ratios with intervals) and
    ``tool`` (the tool's own extra figures, medians over rounds).

    the project's benchmark, on a GPU. For each reference config it runs rounds of three fresh
    processes: the tool's default run exactly as users run it (``python -m profiler_core run``,
    profiler and NVML on) and two bare loops (``profiler_core/timing/bare_loop.py``, a hand-written training
    loop that imports nothing from this tool). The order rotates every round, so each role takes each
    position. Per round it forms tool/bare ratios of the eager median, the graph median and the
    speedup, and bare/bare for the same quantities (the host's own noise from one process to the
    next). Across rounds it reports the geometric mean of each ratio with a 95% Student-t interval on
    the log ratios. It also reports, from the tool's runs, the floor (graph time over GPU busy time),
    the batch-copy cost and the cold-start speedup beside the steady-state one. With
    ``quiet_tool`` a fourth process per round runs the tool with the profiler, NVML and the parity
    check off (``tool_quiet``): set against the default run and the bare loop, it tells whether a gap
    between the tool and the bare loop comes from those (present in the process, though never used
    during the timed trials) or from the tool's timed loop itself. Nothing here is a test: it prints
    and writes figures.
    """
    configs = BENCH_CONFIGS if configs is None else configs
    roles = (*ROLES, QUIET_ROLE) if quiet_tool else ROLES
    processes = len(configs) * rounds * len(roles)
    counter = ProgressCounter(processes, progress)
    rows: list[dict[str, Any]] = []
    try:
        _run_rounds(rows, rounds, configs, roles, counter, tool, bare)
    except KeyboardInterrupt:
        raise BenchmarkStopped(benchmark_tables(rows), len(rows), processes) from None
    counter.finish()
    return benchmark_tables(rows)


def _run_rounds(rows: list[dict[str, Any]], rounds: int,
                configs: Mapping[str, Sequence[str] | RunConfig], roles: tuple[str, ...],
                counter: ProgressCounter, tool: Runner, bare: Runner) -> None:
    """Every config's rounds, each process's figures appended to ``rows`` as it ends."""
    with tempfile.TemporaryDirectory(prefix="profiler_core_bench_") as folder:
        for index, (name, given) in enumerate(configs.items()):
            if isinstance(given, RunConfig):  # a run of changing shapes: the bare loop is told it
                options = config_to_argv(given)
                bare_options = shaped_bare_options(given, Path(folder) / f"sequence-{index}.txt")
            else:
                options = bare_options = list(given)
            for round_index in range(rounds):
                for role in rotated_roles(round_index, roles):
                    counter.start_phase(f"{name}: round {round_index + 1}/{rounds}, {role}")
                    if role == QUIET_ROLE:
                        figures = tool([*options, *QUIET_OPTIONS])
                    elif role == "tool":
                        figures = tool(options)
                    else:
                        figures = bare(bare_options)
                    figures["speedup"] = figures["eager"] / figures["graph"]
                    rows.append({"config": name, "round": round_index, "role": role, **figures})
                    counter.advance()


def benchmark_tables(rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """The benchmark's tables from its processes' figures so far (a round's ratios need the
    round's tool and bare processes)."""
    table = pd.DataFrame(rows)
    if table.empty:
        return {"rounds": table}
    return {"rounds": table, "fidelity": fidelity_table(table), "tool": tool_figures(table)}


class BenchmarkStopped(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the benchmark: ``tables`` from the processes that finished
    (``done`` of ``total``)."""

    def __init__(self, tables: dict[str, pd.DataFrame], done: int, total: int) -> None:
        super().__init__(f"stopped after {done} of {total} processes")
        self.tables, self.done, self.total = tables, done, total


def fidelity_table(rounds: pd.DataFrame) -> pd.DataFrame:
    """Per config and quantity: medians over rounds of tool and bare, and the tool/bare and
    bare/bare ratios (geometric mean over rounds, 95% interval); with the quiet tool's rounds,
    its ratio to the bare loop too (NaN without them)."""
    rows = []
    for name, group in rounds.groupby("config", sort=False):
        by_role = {role: part.set_index("round") for role, part in group.groupby("role")}
        shaped = "pad_max" in group.columns and bool(group["pad_max"].notna().any())
        for quantity in (*QUANTITIES, "pad_max") if shaped else QUANTITIES:
            tool, bare, again = (_by_round(by_role, r, quantity) for r in ROLES)
            tool_vs_bare = ratio_interval((tool / bare).dropna())
            bare_vs_bare = ratio_interval((again / bare).dropna())
            quiet_vs_bare = ratio_interval((_by_round(by_role, QUIET_ROLE, quantity) / bare).dropna())
            rows.append({
                "config": name, "quantity": quantity, "rounds": int(len(tool)),
                "tool": float(tool.median()), "bare": float(bare.median()),
                "tool_over_bare": tool_vs_bare.ratio, "ci_low": tool_vs_bare.low,
                "ci_high": tool_vs_bare.high, "bare_over_bare": bare_vs_bare.ratio,
                "bare_ci_low": bare_vs_bare.low, "bare_ci_high": bare_vs_bare.high,
                "quiet_over_bare": quiet_vs_bare.ratio, "quiet_ci_low": quiet_vs_bare.low,
                "quiet_ci_high": quiet_vs_bare.high,
            })
    return pd.DataFrame(rows)


def _by_round(by_role: Mapping[str, pd.DataFrame], role: str, quantity: str) -> pd.Series:
    """A role's figure by round (none where a stopped benchmark never ran that role)."""
    part = by_role.get(role)
    return part[quantity] if part is not None else pd.Series(dtype=float)


def tool_figures(rounds: pd.DataFrame) -> pd.DataFrame:
    """The tool runs' own figures per config, medians over rounds."""
    columns = ["graph_over_busy", "input_copy_ms", "cold_speedup", "speedup",
               "eager_profiler_overhead_pct"]
    tool = rounds[rounds["role"] == "tool"]
    present = [c for c in columns if c in tool.columns]
    return tool.groupby("config", sort=False)[present].median().reset_index()


def format_benchmark(tables: dict[str, pd.DataFrame]) -> str:
    def show(frame: pd.DataFrame) -> str:
        return frame.to_string(index=False, float_format=lambda v: f"{v:.4f}" if math.isfinite(v) else "nan")
    return "\n\n".join(f"{name}\n{show(frame)}" for name, frame in tables.items()
                       if name != "rounds")
