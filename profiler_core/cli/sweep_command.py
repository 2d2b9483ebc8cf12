"""``python -m profiler_core sweep``: a sweep planned from the command line, run with a progress bar.

Scope: the sweep's options as a :class:`~profiler_core.sweep.plan.SweepPlan`, the checks before
the first point (the machine's CPUs, CUDA), the expected time, the run, the table and crossover
printed, and the exit code.
"""

from __future__ import annotations

import argparse
import sys

from profiler_core.cli import parser as cli
from profiler_core.spec import hostinfo
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import ERROR_KINDS, ConfigError, NoCudaError
from profiler_core.spec.progress import Progress
from profiler_core.sweep.analysis import format_sweep
from profiler_core.sweep.plan import (
    DEFAULT_THRESHOLD,
    PointTrials,
    SweepAxis,
    SweepPlan,
    parse_param,
)
from profiler_core.sweep.runner import (
    ProgressCallback,
    SweepProgress,
    SweepRunner,
    expected_seconds,
    sweep_spares,
    usable_cores,
)
from profiler_core.sweep.store import FINISHED, check_sweep_output, saved_plan


def plan_from_args(args: argparse.Namespace) -> SweepPlan:
    """``python -m profiler_core sweep``'s options as a plan: the axes from ``--param``, the base
    from ``--preset`` and the run options, the per-point trials from the options given (the
    sweep's shorter defaults otherwise)."""
    if not args.param:
        raise ConfigError("param", "a sweep needs at least one --param NAME=VALUES",
                          "e.g. --param batch=1:1024:x2")
    base = cli.config_from_args(args)
    axes = tuple(parse_param(text, base.workload) for text in args.param)
    if is_user_spec(base.workload):
        axes, base = _typed_settings(axes, base)
    defaults = PointTrials()
    trials = PointTrials(**{name: getattr(args, name) if getattr(args, name, None) is not None
                            else getattr(defaults, name) for name in defaults.to_dict()})
    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    return SweepPlan(axes, base, trials, threshold)


def _typed_settings(axes: tuple[SweepAxis, ...], base: RunConfig
                    ) -> tuple[tuple[SweepAxis, ...], RunConfig]:
    """The own step's swept and given settings checked against its build function's signature
    and converted to their kinds, before the plan is made (every point's config then holds
    exactly what its run records)."""
    from profiler_core.engine.user_workload import check_settings, with_checked_settings  # torch

    typed = []
    for axis in axes:
        if axis.setting:
            values = tuple(check_settings(base.workload, {axis.name: value})[0][1]
                           for value in axis.values)
            axis = SweepAxis(axis.name, values, setting=True)
        typed.append(axis)
    return tuple(typed), with_checked_settings(base)


def _check_machine(plan: SweepPlan) -> None:
    """What the plan asks of this machine, checked before the first point: its CPUs
    (``--cpu-affinity``), the user's own step (it must load, as ``run`` checks), then CUDA."""
    if plan.base.cpu_affinity is not None:
        hostinfo.check_cpus(plan.base.cpu_affinity)  # a CPU this machine lacks: one line, exit 2
    if is_user_spec(plan.base.workload):
        from profiler_core.engine.user_workload import find_function  # imports torch

        find_function(plan.base.workload)  # a WorkloadError: one line, exit 2, no point run
    _check_cuda(plan)


def _check_cuda(plan: SweepPlan) -> None:
    if not plan.base.is_cuda:
        return
    import torch

    if not torch.cuda.is_available():
        raise NoCudaError("no CUDA device is present (torch.cuda.is_available() is False)",
                          "run the sweep on a machine with an NVIDIA GPU and a CUDA build of "
                          "torch, or pass --device cpu to try it on the CPU (eager half only)")


def _bar_callback(bar: cli.BarProgress) -> ProgressCallback:
    def report(progress: SweepProgress) -> None:
        where = (f"point {progress.index + 1}/{progress.points_total} ({progress.label})"
                 if progress.index is not None else
                 f"{progress.points_finished}/{progress.points_total} points")
        bar(Progress(where, round(progress.fraction * 1000), 1000, progress.phase))

    return report


def _duration(seconds: float) -> str:
    """"45 s", "12 min", "2.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def command_sweep(args: argparse.Namespace) -> int:
    """``python -m profiler_core sweep``: plan (or resume), run with a progress bar, print the
    table and the crossover. Exit codes: 0 every point measured; 2 a refused plan or folder;
    3 no CUDA device; 130 stopped (Ctrl-C, SIGTERM: finished points kept, ``--resume``
    continues); a point failed: the exit code of its error kind (4 capture, 5 memory, 6 GPU
    fault; 1 crashed or timed out), after every other point was measured."""
    if args.point_timeout is not None and not 0 < args.point_timeout <= 86_400:
        raise ConfigError("point_timeout", f"point-timeout must be from 0 to 86,400 seconds; got "
                                           f"{args.point_timeout:g}", "leave it out for no limit")
    if args.resume and args.overwrite:
        raise ConfigError("resume", "--resume continues a sweep and --overwrite replaces it",
                          "pass one of them")
    options = dict(point_timeout_s=args.point_timeout)
    bar = cli.BarProgress() if args.progress == "bar" else None
    if bar is not None:
        options["on_progress"] = _bar_callback(bar)
    if args.resume:
        plan = saved_plan(args.out)
        given = [cli.OPTION_OF_FIELD[name] for name in cli.OPTION_OF_FIELD
                 if name not in ("preset", "dropout1", "dropout2") and getattr(args, name, None) is not None]
        if args.param or given or args.dropout is not None:
            option = "--param" if args.param else (given[0] if given else "--dropout")
            raise ConfigError("resume", f"it continues the plan saved in {args.out!r}, so {option} "
                                        "cannot change it",
                              "drop the sweep and run options (--threshold may change), or start a "
                              "new sweep in another folder")
        _check_machine(plan)
        runner = SweepRunner.resume(args.out, threshold=args.threshold, **options)
    else:
        plan = plan_from_args(args)
        _check_machine(plan)  # before the folder is made: a refused plan leaves nothing
        check_sweep_output(args.out, overwrite=args.overwrite)
        runner = SweepRunner.create(plan, args.out, overwrite=args.overwrite, **options)
    plan = runner.plan
    finished = runner.finished_points
    print(f"Sweep of {' x '.join(plan.axis_names)}: {len(plan.points())} points"
          + (f" ({finished} already finished)" if finished else "") + f", into {runner.folder}",
          file=sys.stderr)
    pending = len(plan.points()) - finished
    spares = sweep_spares(pending, plan.base.device)
    print(f"Expected time: about {_duration(expected_seconds(pending, plan.base.device, spares))} "
          f"for {pending:,} point(s), {spares} warm worker(s) at once ({usable_cores()} cores); a rough "
          f"estimate from a {'small CPU' if plan.base.device == 'cpu' else 'seed-size H200'} point"
          ": larger steps take longer, and the progress bar's ETA follows the real pace",
          file=sys.stderr)
    for name in runner.rerun_damaged:
        print(f"{name}: its folder was damaged, moved aside ({name}.damaged-N) and is measured "
              "again", file=sys.stderr)
    try:
        outcome = runner.run()
    finally:
        if bar is not None:
            bar.close()
    print(format_sweep(outcome.points, outcome.point_modes, plan))
    print(f"\nWrote {outcome.folder}")
    if outcome.fatal:
        kind = outcome.fatal["kind"]
        print(f"error: {outcome.fatal['message']}", file=sys.stderr)
        return ERROR_KINDS.get(kind, 1)
    if outcome.status == "stopped":
        done = int(outcome.points["status"].isin(FINISHED).sum())
        print(f"Stopped: {done} of {len(outcome.points)} points finished and kept; continue with "
              f"python -m profiler_core sweep --out {outcome.folder} --resume", file=sys.stderr)
        return ERROR_KINDS["Interrupted"]
    failed = outcome.failed
    if len(failed):
        print(f"{len(failed)} point(s) failed; each is recorded in points.csv with its error",
              file=sys.stderr)
        return ERROR_KINDS.get(str(failed["error_kind"].iloc[0]), 1)
    return 0
