"""The command line: ``python -m profiler_core {run,bench,trace-stats,predict}``.

Exit codes: 0 success, else the exit code its error class declares (``spec.errors``: 2 a refused
input, one line naming the option and what is allowed, or the user's own step failed, one line
naming their file, line and function; 124 ``run --timeout`` was reached; 130 interrupted). A run
that stops early keeps what it measured in its run directory, marked incomplete.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiler_core.cli import ddp
from profiler_core.cli import parser as cli
from profiler_core.cli.timings import WallTimings, format_parts
from profiler_core.engine.serve import RunRequest, serve
from profiler_core.engine.stopping import RunStopper
from profiler_core.spec import hostinfo
from profiler_core.spec.config import MAX_TIMEOUT_S, RunConfig, is_user_spec
from profiler_core.spec.distributed import rank_env
from profiler_core.spec.errors import (
    ConfigError,
    NoCudaError,
    ProfilerError,
    SaveError,
    TimeLimitReached,
    kind_and_exit_code,
)
from profiler_core.spec.events import DoneEvent, ErrorEvent
from profiler_core.spec.metrics import SHOWN_METHODS, STEP_METHOD_LABELS, TimingMethodSpec
from profiler_core.spec.numerics import ENVIRONMENT_KEY as NUMERICS_KEY
from profiler_core.spec.numerics import summary_line as numerics_summary_line
from profiler_core.spec.progress import LastPhase, ignore_progress
from profiler_core.spec.workload_kinds import workload_of

if TYPE_CHECKING:  # pandas and the run's reader are imported when a command needs them
    import pandas as pd

    from profiler_core.storage.results import RunResult


def _ms(value: float) -> str:
    return f"{value:.4f} ms" if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _ratio(value: float) -> str:
    return f"{value:.2f}x" if isinstance(value, (int, float)) and math.isfinite(value) else "n/a"


def _method_label(method: TimingMethodSpec, headline: str, cpu: bool) -> str:
    """A timing method's row label in the summary: its label (a CPU run's where it differs), the
    headline's marked, a part of a step (the batch copy) indented under the step."""
    label = (method.cpu_label if cpu and method.cpu_label else method.label) + (
        " (headline)" if method.name == headline else "")
    return label if method.whole_step else f"  of which: {label}"


def _workload_text(config) -> str:
    workload = workload_of(config)
    if workload is None:
        settings = ", ".join(f"{name}={value}" for name, value in config.workload_args)
        return (f"your step {config.workload}" + (f" ({settings})" if settings else "")
                + (f", {config.dtype} autocast" if config.dtype in ("bf16", "fp16") else "")
                + (f"; varying {config.vary}" if config.vary else ""))
    return (f"{workload.describe(config)}, {config.dtype}, {config.optimizer}"
            + (f"; varying {config.vary} (buckets {config.buckets})" if config.vary else ""))


def format_summary(result: RunResult) -> str:
    """The run's headline as plain text: counters, timing per method, one-time costs, split."""
    import pandas as pd

    from profiler_core.analysis.predict import headline_lines as prediction_lines
    from profiler_core.timing import stability
    from profiler_core.timing.stats import pay_back_text

    config, env, head = result.config, result.environment, result.headline
    figures, pair = result.figures, result.pair
    lines = [
        f"Device: {env.get('gpu_name') or 'CPU'} ({config.device}), torch {env.get('torch_version')}, "
        f"CUDA {env.get('cuda_version')}, driver {env.get('driver_version')}",
        f"Workload: {_workload_text(config)}; warm-up {config.warmup_iters}, "
        f"{config.capture_iters} step(s) per graph, {config.replays} replays, "
        f"{config.total_eager_iters} eager steps, {config.trial_count} interleaved trials",
        numerics_summary_line(env.get(NUMERICS_KEY) or {}),
    ]
    # a run of changing shapes says its figures in the strategies' table alone: its "graph" is
    # one strategy of several, and the one-shape lines below would read as the whole answer
    shaped = bool(config.vary)
    counters = result.table("counters")
    if len(counters):
        lines += ["", "Counters (the article's static_counter lessons)",
                  counters[["phase", "predicted", "observed", "match"]].to_string(index=False)]
    stats = result.table("stats")
    if len(stats) and not shaped:
        lines += ["", "Time per training step (median, p10-p90, n)"]
        table = []
        for timing in SHOWN_METHODS:
            method = timing.name
            row = {"method": _method_label(timing, pair.timing_method, not config.is_cuda)}
            for mode in ("eager", "graph"):
                match = stats[(stats["mode"] == mode) & (stats["method"] == method)]
                row[mode] = (f"{_ms(match['median_ms'].iloc[0])} ({match['p10_ms'].iloc[0]:.4f}-"
                             f"{match['p90_ms'].iloc[0]:.4f}, {int(match['count'].iloc[0])})"
                             if len(match) else "n/a")
            if row["eager"] != "n/a" or row["graph"] != "n/a":
                table.append(row)
        lines.append(pd.DataFrame(table).to_string(index=False))
    if figures.holds("graph", "speedup") and config.is_cuda and not shaped:
        lines += ["",
                  f"Speedup (median eager / median graph, "
                  f"{STEP_METHOD_LABELS.get(pair.timing_method, pair.timing_method)}): "
                  f"{_ratio(pair.speedup)} (95% bootstrap CI {_ratio(pair.speedup_ci_low)}-"
                  f"{_ratio(pair.speedup_ci_high)})",
                  f"Cold start of each step: {_ratio(figures.get('graph', 'cold_event_speedup'))}; "
                  f"loop synchronised at the end: {_ratio(figures.get('graph', 'block_sync_speedup'))}; "
                  f"the article's no-sync loop would claim "
                  f"{_ratio(figures.get('graph', 'article_no_sync_speedup'))}",
                  f"Copying a batch into the graph's static inputs: "
                  f"{_ms(figures.get('graph', 'input_copy_median_ms'))} per step (inside the graph's time)",
                  f"Capture {_ms(figures.get('graph', 'capture_ms'))}, graph pool "
                  f"{figures.get('graph', 'pool_bytes', 0) / 2**20:.1f} MiB, peak memory eager "
                  f"{figures.get('eager', 'peak_bytes', 0) / 2**20:.1f} MiB / graph "
                  f"{figures.get('graph', 'peak_bytes', 0) / 2**20:.1f} MiB, break-even "
                  f"{pay_back_text(pair.pays_back, pair.break_even_steps)}"]
        if "parity_verdict" in head:
            lines.append(f"Parity: {head['parity_verdict']}")
        elif "parity_max_abs_diff" in head:  # a run saved before the check had a control replica
            lines.append(f"Parity after {head['parity_steps']} steps (dropout off): max |diff| "
                         f"{head['parity_max_abs_diff']:.3g}, relative {head['parity_max_rel_diff']:.3g}")
        lines += prediction_lines(head, figures)
    modes = result.table("modes")
    if len(modes) > 1 and not shaped:
        lines += ["", "Every mode (steady state; speedup over eager with its 95% CI; one-time cost)"]
        shown = modes.assign(
            speedup=[f"{s:.2f}x ({lo:.2f}-{hi:.2f})" for s, lo, hi in
                     zip(modes["speedup"], modes["speedup_ci_low"], modes["speedup_ci_high"])],
            memory_mib=modes["memory_bytes"] / 2**20)
        lines.append(shown[["mode", "median_ms", "speedup", "one_time_ms", "memory_mib",
                            "graphs_recorded"]].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    lines += _strategy_lines(result.table("strategies"), head)
    lines += _attribution_lines(result.table("attribution"))
    breakdown = result.table("breakdown")
    graph_breakdown = breakdown[breakdown["mode"] == "graph"]
    if len(graph_breakdown):
        lines += ["", "Under the profiler (a slower program than the timed one: see each mode's "
                      "overhead below), per iteration, eager vs graph, medians of the profiled "
                      "window (us)"]
        shown = graph_breakdown.drop(columns="mode").rename(columns={"mode_us": "graph_us"})
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        for mode in ("eager", "graph"):
            if figures.holds(mode, "launches"):
                lines.append(f"{mode}: {figures.get(mode, 'launches'):.0f} launches, "
                             f"{figures.get(mode, 'kernels'):.0f} kernels per iteration; the "
                             f"profiled window ran {figures.get(mode, 'profiler_overhead_pct'):+.1f}% "
                             "against the headline's time")
    lines += _every_mode_split(breakdown)
    lines += [""] + [f"Warning: {text}" for text in stability.warnings(
        stats if stability.trials_are_alike(config.vary) else stats.iloc[0:0], head,
        (pair.speedup_ci_low, pair.speedup_ci_high), result.environment)]
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines)


def _strategy_lines(table: pd.DataFrame, head: Mapping[str, Any]) -> list[str]:
    """A run of changing shapes (``--vary``): every strategy over the same sequence, and the one
    that pays most for this distribution."""
    if table.empty:
        return []
    shown = table.assign(
        speedup=[f"{s:.2f}x" + (f" ({lo:.2f}-{hi:.2f})" if math.isfinite(lo) else "")
                 for s, lo, hi in zip(table["speedup"], table["speedup_ci_low"],
                                      table["speedup_ci_high"])],
        padded=[f"{v:.0%}" for v in table["padded_share"]],
        pool_mib=table["pool_bytes"] / 2**20,
        break_even=[("never" if not math.isfinite(b) and s != "eager" else
                     ("" if s == "eager" else f"{b:,.0f}"))
                    for s, b in zip(table["strategy"], table["break_even_steps"])],
        parity=[("" if not math.isfinite(m) else "matches" if m else "differs")
                for m in table["parity_matches"]],
        predicted=[f"{v:.2f}x" if math.isfinite(v) else "" for v in table["predicted_speedup"]])
    return ["", f"Every strategy over one sequence of {head.get('shapes_steps', '?')} steps "
                f"({head.get('shapes_vary', '')}: {head.get('shapes_distribution', '')}; "
                f"{head.get('shapes_distinct', '?')} distinct; buckets "
                f"{head.get('shapes_buckets', '')}); ms per step, speedup over eager (sums, "
                "95% CI), one-time cost, pool",
            shown[["strategy", "median_ms", "p90_ms", "p99_ms", "sum_ms", "speedup", "predicted",
                   "padded", "one_time_ms", "graphs", "pool_mib", "break_even", "parity"]].to_string(
                index=False, float_format=lambda v: f"{v:.4g}"),
            *([f"Verdict: {head['shapes_verdict']}."] if head.get("shapes_verdict") else [])]


def _attribution_lines(table: pd.DataFrame) -> list[str]:
    """The headline's saving per step attributed to its parts, per mode (attribution.csv): the
    parts add up to the step saving; host issue time is shown beside them."""
    import pandas as pd

    lines: list[str] = []
    for mode, block in table.groupby("mode", sort=False):
        step = block.loc[block["component"] == "step", "saving_us"]
        if not (len(step) and pd.notna(step.iloc[0])):
            continue
        lines += ["", f"Why, {mode} against eager: the headline's time per step in parts (us; "
                      "step = GPU kernels + batch copy + GPU idle; kernels from the profiled "
                      "window, the rest timed without the profiler)"]
        shown = block.drop(columns=["mode", "source"]).rename(
            columns={"mode_us": f"{mode}_us", "share_of_saving_pct": "share_pct"})
        lines.append(shown.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        lines.append("A negative saving is time the mode added (its batch copy, the extra kernels "
                     "of a capturable optimizer); host_issue is the host's time to issue a step, "
                     "why the GPU waited, not part of the sum.")
    return lines


def _every_mode_split(breakdown: pd.DataFrame) -> list[str]:
    """With modes beside the graph: each mode's profiled iteration next to eager's, component by
    component (breakdown.csv's blocks side by side; the dashboard's Launch split draws them)."""
    import pandas as pd

    if breakdown["mode"].nunique() < 2:
        return []
    wide = breakdown.pivot_table(index="component", columns="mode", values="mode_us", sort=False)
    eager = breakdown.drop_duplicates("component").set_index("component")["eager_us"]
    wide.insert(0, "eager", eager.reindex(wide.index))
    wide = wide[["eager", *pd.unique(breakdown["mode"])]]
    return ["", "Every mode's iteration under the profiler, medians of the profiled window (us; "
                "each mode's saving over eager is in breakdown.csv)",
            wide.rename_axis(None, axis=1).reset_index().to_string(
                index=False, float_format=lambda v: f"{v:.1f}")]


MAX_BENCH_ROUNDS = 100
# Characters that would break a one-line message (line and paragraph breaks, other controls).
_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7f, 0xa0))}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", 0x2028: "\\u2028",
                 0x2029: "\\u2029"})


def _one_line(text: str) -> str:
    """``text`` on one line: control characters echoed from the input are shown escaped."""
    return str(text).translate(_CONTROL)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _command_run(args, stopper: RunStopper | None = None) -> int:
    """``run``: Ctrl-C, SIGTERM (the dashboard's Cancel) and ``--timeout`` stop it through
    ``stopper`` (``stopping.RunStopper``, entered by ``main``), keeping what it measured."""
    if stopper is None:
        with RunStopper() as own:
            return _command_run(args, own)
    timings = WallTimings()
    if not 0 <= args.timeout <= MAX_TIMEOUT_S:
        raise ConfigError("timeout", f"timeout must be from 0 to {MAX_TIMEOUT_S:,.0f} seconds; "
                                     f"got {args.timeout:g}", "0 means no limit")
    from profiler_core.storage.results import check_output

    config = cli.config_from_args(args)
    ddp.check_delays(config, args.inject_delay_ms)
    small = cli.cpu_small_step(args, config)
    env = rank_env()  # a rank of a data-parallel run: only rank 0 writes, and checks the folder
    if env is None:
        check_output(args.out, args.overwrite)  # before anything runs: nothing is lost at the end
    if small is not None:
        if env is None or env.rank == 0:
            print(cli.small_step_line(config, small), file=sys.stderr)
        config = small
    output = RunOutput(args.out, args.overwrite, args.progress, args.timeout, args.timings,
                       tuple(args.inject_delay_ms))
    return _run_config(config, output, stopper, timings, small_step=small is not None)


@dataclass(frozen=True)
class RunOutput:
    """Where and how a run reports: ``run``'s --out, --overwrite, --progress and --timeout."""

    out: str
    overwrite: bool
    progress: str
    timeout: float
    timings: bool = False
    inject_delay_ms: tuple[tuple[int, float], ...] = ()  # a data-parallel run's (rank, ms) sleeps


def serve_request(request: RunRequest) -> int:
    """A warm worker's run (``profiler_core.engine.serve``): what ``run --timeout 0 --progress
    jsonl`` of the request's config does, errors reported the same way."""
    from profiler_core.storage.results import check_output

    # from the request, not the process's start: a spare may wait minutes for its run, and that
    # wait is no part of the run's start-up (its imports and CUDA were done before it)
    timings = WallTimings(started_s=time.time())
    output = RunOutput(request.out, request.overwrite, "jsonl", 0.0)

    def run(stopper: RunStopper) -> int:
        check_output(output.out, output.overwrite)
        return _run_config(request.config, output, stopper, timings, small_step=False)

    with RunStopper() as stopper:
        return _reported(lambda: run(stopper), jsonl=True)


def _run_config(config, args: RunOutput, stopper: RunStopper, timings: WallTimings,
                small_step: bool) -> int:
    """Run ``config`` (its output checked) and write it as ``args`` says; ``timings`` marks the
    moments of the command (``run --timings``)."""
    if ddp.is_data_parallel(config):  # --nproc-per-node, or this process is a torchrun rank
        return ddp.run_data_parallel(config, args, stopper)
    says_time = config.device == "cpu" and not small_step and args.progress != "jsonl"
    if config.repeats > 1:
        if says_time:
            _say_cpu_time(config, config.repeats)
        return _command_repeats(config, args, stopper)
    if config.cpu_affinity is not None:
        hostinfo.pin(config.cpu_affinity)  # before torch is imported: its threads follow it
    from profiler_core.engine.runner import run_experiment

    stopper.limit(args.timeout)  # loading the user's step included
    user_step = is_user_spec(config.workload)
    reporter = cli.JsonlProgress() if args.progress == "jsonl" else (
        cli.BarProgress() if args.progress == "bar" else None)
    loading = True
    reported = LastPhase(reporter or ignore_progress)  # where it was, should it stop
    try:
        if user_step:
            config = _check_user_step(config)
        loading = False
        if says_time:
            _say_cpu_time(config)
        timings.mark("run start")
        result = run_experiment(config, progress=reported)
        timings.mark("run end")
        timings.record(result.environment)
    except BaseException as error:
        if reporter is not None:
            reporter.close()  # the bar's line ends before the messages
            reporter = None
        partial = getattr(error, "partial_result", None)
        if partial is not None:
            stopper.saving()
            _keep_partial(partial, args)
        explained = _explained(error, config, loading, reported.phase)
        if explained is error:
            raise
        raise explained from None
    finally:
        if reporter is not None:
            reporter.close()
    stopper.saving()  # measured: a Ctrl-C from now on waits until the run is written
    try:
        out = _save(result, args)
    finally:
        result.release_scratch()
    timings.mark("saved")
    if args.progress == "jsonl":
        cli.JsonlProgress().emit(DoneEvent(str(out)))
    else:
        print(format_summary(result))
        print(f"\nWrote {out}")
    timings.mark("printed")
    if args.timings:
        print(format_parts(timings.parts(result.environment, result.table("phases")),
                           result.environment.get("bytecode")), file=sys.stderr)
    return 0


def _say_cpu_time(config, processes: int = 1) -> None:
    """Before a CPU run larger than the small step: one line with the time it will take, from a
    few of its steps timed (``cpu_time``); nothing for a quick run. A step too large for memory
    is refused here, as the run would refuse it; any other failure leaves it to the run to
    report."""
    from profiler_core.engine.cpu_time import WORTH_SAYING_S, estimate_line, measure

    try:
        estimate = measure(config)
    except (ProfilerError, KeyboardInterrupt):
        raise
    except Exception:  # the run itself reports whatever its step raises
        return
    if estimate is not None and estimate.total_s * processes >= WORTH_SAYING_S:
        print(estimate_line(estimate, processes), file=sys.stderr, flush=True)


def _command_repeats(config, args, stopper: RunStopper) -> int:
    """``run --repeats N``: N fresh processes of the config, the median one saved with every
    process's figures (``profiler_core.orchestration.repeats``); ``--timeout`` counts for the
    whole (each process gets none of its own), and a stop keeps the processes that finished."""
    from profiler_core.orchestration.repeats import run_repeats, summary_lines

    if config.cpu_affinity is not None:
        hostinfo.check_cpus(config.cpu_affinity)  # refused here, before any process starts
    reporter = cli.JsonlProgress() if args.progress == "jsonl" else (
        cli.BarProgress() if args.progress == "bar" else None)
    stopper.limit(args.timeout)
    try:
        result = run_repeats(config, args.out, overwrite=args.overwrite,
                             progress=reporter or ignore_progress, on_saving=stopper.saving)
    except BaseException as error:
        kept = getattr(error, "kept", None)
        if reporter is not None:
            reporter.close()  # the bar's line ends before the messages
            reporter = None
        if kept is not None:
            print(f"The processes that finished were kept in {kept} (marked incomplete).",
                  file=sys.stderr)
        if isinstance(error, TimeLimitReached):
            during = getattr(error, "during", "")
            raise TimeLimitReached(f"{error} (--timeout)" + (f"; it stopped during {during}"
                                                             if during else "")) from None
        raise
    finally:
        if reporter is not None:
            reporter.close()
    if args.progress == "jsonl":
        cli.JsonlProgress().emit(DoneEvent(str(args.out)))
    else:
        print(format_summary(result))
        print("\n".join(summary_lines(result.headline)))
        print(f"\nWrote {args.out}")
    return 0


def _explained(error: BaseException, config, loading: bool, phase: str = "") -> BaseException:
    """The error to report for a run that failed: the time limit says where it stopped (the
    ``phase`` last reported, or the user's code it was in); anything
    the user's own step raised (an exception, ``sys.exit``, any ``BaseException``) becomes one
    line naming their file, line and function (exit 2), never a traceback or an exit code that
    means something else. Ctrl-C and the tool's own errors are reported as they are."""
    from profiler_core.engine.user_workload import user_code_error, user_frame

    user_step = is_user_spec(config.workload)
    if isinstance(error, TimeLimitReached):
        where = user_frame(error) if user_step else None
        doing = (f"; it was loading your step {config.workload}" if loading and user_step else
                 f"; it stopped during {phase}" if phase else "")
        inside = f"; it was in your code at {where}" if where else ""
        return TimeLimitReached(f"{error} (--timeout){doing}{inside}")
    if isinstance(error, (KeyboardInterrupt, ProfilerError)) or not user_step:
        return error
    return user_code_error(config.workload, error)


def _check_user_step(config):
    """Load the user's step once before running: its settings checked against the build
    function's signature and converted to their kinds (the config returned holds them), one
    batch drawn (a bad module, function, setting, return value or batch is a one-line error,
    exit 2), then what would break under capture printed. The random number generators are left
    as they were."""
    import torch

    from profiler_core.engine.readiness import check_step
    from profiler_core.engine.runner import resolve_device
    from profiler_core.engine.user_workload import (
        build_parts,
        draw_batch,
        find_function,
        with_checked_settings,
    )
    from profiler_core.engine.workloads import check_whole_step

    config = with_checked_settings(config)
    device = resolve_device(config)
    parts = build_parts(config.workload, device, config.settings)
    if parts.whole_step:
        check_whole_step(config)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        generator = torch.Generator(device=device).manual_seed(config.seed)
        draw_batch(config.workload, parts, generator, device)
    for finding in check_step(find_function(config.workload), parts.model, parts.loss,
                              parts.optimizer, parts.step, parts.after_step):
        print(f"capture readiness: {finding.one_line()}", file=sys.stderr)
    del parts
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return config


def _save(result: RunResult, args) -> Path:
    """Save a run into ``--out``. The folder was checked before the run: if it is refused now
    (it changed while the run went on), the run is kept elsewhere and ``SaveError`` says where."""
    try:
        return result.save(args.out, overwrite=args.overwrite)
    except ConfigError as error:
        raise result.keep_elsewhere(args.out, f"refused: {error.message}") from None


def _keep_partial(partial: RunResult, args) -> None:
    """Save what a run that stopped early measured; a failure to do so is said, not raised (the
    run's own error is the one to report)."""
    try:
        kept = _save(partial, args)
        print(f"The incomplete run was kept in {kept} (marked incomplete).", file=sys.stderr)
    except SaveError as error:  # kept elsewhere (it says where), or lost (it says why)
        print(f"The incomplete run (marked incomplete): {_one_line(str(error))}", file=sys.stderr)
    except (ProfilerError, OSError) as error:
        print(f"The incomplete run could not be kept: {_one_line(str(error))}", file=sys.stderr)
    finally:
        partial.release_scratch()


def _command_bench(args) -> int:
    from profiler_core.orchestration.bench import format_benchmark, run_benchmark

    if not 1 <= args.rounds <= MAX_BENCH_ROUNDS:
        raise ConfigError("rounds", f"rounds must be a whole number from 1 to {MAX_BENCH_ROUNDS}; "
                                    f"got {args.rounds:,}", "6 rounds give a usable interval")
    from profiler_core.orchestration.bench import BENCH_CONFIGS

    configs = _bench_configs(args, BENCH_CONFIGS)
    from profiler_core.storage.bench_output import check_bench_output, write_bench_tables

    if args.out is not None:
        check_bench_output(args.out, args.overwrite)  # before it runs: nothing is lost at the end
    import torch

    if not torch.cuda.is_available():
        raise NoCudaError("the benchmark needs a CUDA device (torch.cuda.is_available() is False)",
                          "run it on a machine with an NVIDIA GPU and a CUDA build of torch")
    from profiler_core.orchestration.bench import BenchmarkStopped

    # SIGTERM (a time limit's) stops it like Ctrl-C: the processes that finished are kept
    signal.signal(signal.SIGTERM, _interrupt)
    bar = cli.BarProgress()
    try:
        tables = run_benchmark(args.rounds, configs, progress=bar, quiet_tool=args.quiet_tool)
        stopped = None
    except BenchmarkStopped as error:
        tables, stopped = error.tables, error
    bar.close()
    if stopped is not None:
        print(f"Benchmark {stopped}: what they measured follows", file=sys.stderr)
    print(format_benchmark(tables))
    if args.out is not None and len(tables["rounds"]):
        print(f"\nWrote {write_bench_tables(tables, args.out, args.overwrite)}")
    return 130 if stopped is not None else 0


def _bench_configs(args, known: dict[str, list[str]]) -> dict[str, list[str] | RunConfig]:
    """The configs ``bench`` compares: the named reference configs, or the user's own step
    (``--workload`` with its ``--workload-arg`` settings, checked against its signature), which
    the bare loop builds from the same function and runs as a user's loop does."""
    if args.workload is not None:
        if not is_user_spec(args.workload):
            raise ConfigError("workload", f"bench --workload takes your own step, "
                                          f"package.module:function; got {args.workload!r}",
                              "the built-in steps are the reference configs (--configs)")
        from profiler_core.engine.user_workload import check_settings

        settings = check_settings(args.workload, dict(args.workload_arg or []))
        options = ["--workload", args.workload]
        for name, value in settings:
            options += ["--workload-arg", f"{name}={value}"]
        label = " ".join([args.workload, *(f"{name}={value}" for name, value in settings)])
        if args.vary is not None:  # checked here, before anything runs
            from profiler_core.orchestration.bench import SHAPED_STRATEGIES

            label += f" vary {args.vary} buckets {args.buckets}"
            # the tool times the strategies the bare loop has, not compile's minutes of compiling
            return {label: cli.config_from_args(cli.parse(
                ["run", "--preset", "seed", *options, "--vary", args.vary, "--buckets",
                 args.buckets, "--strategies", ",".join(SHAPED_STRATEGIES.values()),
                 "--out", "bench"]))}
        return {label: options}
    if args.vary is not None:
        raise ConfigError("vary", "bench --vary takes your own step (--workload "
                                  "package.module:function): its batch function draws the shapes",
                          "add --workload, or run --vary for a built-in workload")
    names = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise ConfigError("configs", f"configs must name some of {', '.join(known)}; got "
                                     f"{args.configs!r}", "separate several with commas")
    return {name: known[name] for name in names}


def _command_serve(args) -> int:
    return serve(args.device, serve_request)


def _command_trace_stats(args) -> int:
    from profiler_core.analysis.trace import analyse_trace, format_report
    from profiler_core.analysis.trace_reading import load_trace
    from profiler_core.spec.errors import RunFormatError, shown
    from profiler_core.storage.outputs import output_path
    from profiler_core.storage.trace_tables import check_table_folder, write_tables

    out = output_path(args.out) if args.out else None
    if out is not None:
        check_table_folder(out, args.overwrite)  # before any work: nothing is lost
    bar = cli.LateBar()  # a bar on stderr once reading has taken a second
    try:
        events = load_trace(args.trace, progress=bar)
    finally:
        bar.close()
    analysis = analyse_trace(events, mode=Path(args.trace).name)
    if analysis.launch_split.empty:
        raise RunFormatError(f"trace {shown(args.trace)} holds no events to analyse (no complete "
                             "'X' events with a timestamp)",
                             "export the trace after the profiled steps ran, with "
                             "prof.export_chrome_trace(path)")
    print(format_report(analysis))
    if out is not None:
        try:
            written = write_tables(analysis, out)
        except OSError as error:
            raise ConfigError("out", f"cannot write the tables into {shown(args.out)}: "
                                     f"{shown(error.strerror or str(error), 200)}",
                              "pick a folder you can write to") from None
        for path in written:
            print(f"Wrote {path}")
    return 0


def _command_predict(args) -> int:
    from profiler_core.analysis.predict import trace_report
    from profiler_core.engine.calibration import (  # import torch when called
        default_costs,
        measured_costs,
    )

    bar = cli.LateBar()  # a bar on stderr once reading the trace has taken a second
    try:
        report = trace_report(args.trace, args.launch_us, args.per_node_us,
                              measured_costs if args.calibrate else None,
                              args.steps_per_iteration, args.steps_per_graph, args.copy_us,
                              args.eager_ms, progress=bar, defaults=default_costs)
    finally:
        bar.close()
    print(report)
    return 0


COMMANDS: dict[str, Callable[..., int]] = {
    "run": _command_run, "bench": _command_bench, "serve": _command_serve,
    "trace-stats": _command_trace_stats, "predict": _command_predict}


def _command_sweep(args) -> int:
    from profiler_core.cli.sweep_command import command_sweep

    # SIGTERM stops the sweep like Ctrl-C: finished points are kept and --resume continues it.
    signal.signal(signal.SIGTERM, _interrupt)
    return command_sweep(args)


COMMANDS["sweep"] = _command_sweep


def _command_index(args) -> int:
    from profiler_core.spec.errors import RunFormatError
    from profiler_core.spec.progress import Progress
    from profiler_core.storage.index import format_listing, open_index
    from profiler_core.storage.index_query import parse_where

    if not Path(args.runs).is_dir():
        raise RunFormatError(f"the runs folder {str(args.runs)!r} does not exist",
                             "pass --runs with the folder your runs are saved in")
    filters = [parse_where(text) for text in args.where]
    bar = cli.BarProgress()
    shown = []

    def progress(done: int, total: int) -> None:
        shown.append(done)
        bar(Progress("index", done, total, f"{done} of {total} folders read"))

    with open_index(args.runs, rebuild=args.rebuild, progress=progress) as index:
        if shown:
            bar.close()
        print(format_listing(index, filters))
    return 0


COMMANDS["index"] = _command_index


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    jsonl = "--progress" in argv and argv[argv.index("--progress") + 1:][:1] == ["jsonl"]

    def command(stopper: RunStopper | None) -> int:
        args = cli.parse(argv)
        if args.command == "run":
            return _command_run(args, stopper)
        return COMMANDS[args.command](args)

    # A run's stop signals are handled until its error is reported (stopping.RunStopper).
    with (RunStopper() if argv[:1] == ["run"] else contextlib.nullcontext()) as stopper:
        return _reported(lambda: command(stopper), jsonl=jsonl)


def _reported(command: Callable[[], int], jsonl: bool) -> int:
    """``command``'s exit code; an error it raises is reported in one line (and as a JSON error
    record with ``jsonl``) and becomes its exit code."""
    def fail(error: BaseException, message: str, hint: str = "", field: str | None = None) -> int:
        """Report ``error`` (an error record with --progress jsonl, a line on stderr); its exit code."""
        kind, code = kind_and_exit_code(error)
        message, hint = _one_line(message), _one_line(hint)
        if jsonl:
            cli.JsonlProgress().emit(ErrorEvent(kind, field, message, hint))
        print(f"error: {message}" + (f" ({hint})" if hint else ""), file=sys.stderr)
        return code

    try:
        return command()
    except ConfigError as error:
        return fail(error, cli.describe_config_error(error), error.hint, error.field)
    except ProfilerError as error:
        return fail(error, error.message, error.hint)
    except TimeLimitReached as error:
        return fail(error, str(error), "pass a larger --timeout, or --timeout 0 for no limit")
    except KeyboardInterrupt as error:
        return fail(error, "interrupted")


def exit_now(code: int) -> None:
    """End the process with ``code`` once everything is written: the atexit handlers run and the
    standard streams are flushed, but the interpreter's own teardown is skipped (with torch and
    pandas loaded it took 1.5 s on a 2-core machine, during which a caller waits for the exit).
    Any other live non-daemon thread gets the ordinary exit, which waits for it."""
    import atexit
    import threading

    others = [thread for thread in threading.enumerate()
              if thread is not threading.main_thread() and not thread.daemon and thread.is_alive()]
    if others:
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_from_command_line() -> None:
    """The ``python -m profiler_core`` entry point: run the command and exit with its code."""
    exit_now(main())
