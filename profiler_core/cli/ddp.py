"""``run`` for a data-parallel run: the launcher's side (``--nproc-per-node N``: torchrun started
and watched, ``orchestration.torchrun``) and a rank's side (this process started by torchrun,
ours or the user's: RANK, LOCAL_RANK and WORLD_SIZE set; ``engine.ddp_step``).

Scope: the command line's part only: which side to take, the argv handed to the ranks, rank 0
saving the run and printing its summary (or, with ``--progress jsonl``, reporting progress: rank 0
only), a stopped run's ranks keeping what they measured, and every rank's error said on a line the
launcher reads (under the tool's own launcher, that line only: the launcher reports it).
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from profiler_core.cli import parser as cli
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec import hostinfo
from profiler_core.spec.config import RunConfig
from profiler_core.spec.distributed import (
    RANK_ENV_NAMES,
    RankEnv,
    RankFailure,
    announce,
    is_peer_lost,
    launched_by_the_tool,
    missing_rendezvous,
    rank_env,
)
from profiler_core.spec.errors import (
    ConfigError,
    GpuMemoryError,
    NoCudaError,
    ProfilerError,
    TimeLimitReached,
    kind_and_exit_code,
)
from profiler_core.spec.events import DoneEvent
from profiler_core.spec.progress import ignore_progress

if TYPE_CHECKING:  # the run's reader is imported when a command needs it
    from profiler_core.storage.results import RunResult


def run_data_parallel(config: RunConfig, output: Any, stopper: Any) -> int:
    """``run`` of a data-parallel config (``output``: ``main.RunOutput``): the launcher outside
    torchrun, a rank inside it (its time limit set on ``stopper``: under our launcher it is 0,
    the launcher keeps it)."""
    env = rank_env()
    if env is None:
        return launch(config, output)
    stopper.cooperate()  # the ranks stop together, where they agree (engine.ddp_step)
    check_rendezvous(env)
    stopper.limit(output.timeout)
    progress = cli.JsonlProgress() if output.progress == "jsonl" and env.rank == 0 else None
    return run_rank(config, output, env, progress, stopper)


def check_rendezvous(env: RankEnv) -> None:
    """A rank needs torchrun's rendezvous (MASTER_ADDR and MASTER_PORT): RANK, LOCAL_RANK and
    WORLD_SIZE alone (a SLURM or torchrun shell) are refused with ``ConfigError``, before
    ``init_process_group`` would fail with a traceback."""
    missing = missing_rendezvous()
    if missing:
        given = ", ".join(f"{name}={value}" for name, value in zip(
            RANK_ENV_NAMES, (env.rank, env.local_rank, env.world_size)))
        raise ConfigError("nproc_per_node",
                          f"this process has {given}, as a rank of a data-parallel job, but "
                          f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                          "set as torchrun sets them, so it was not started by torchrun",
                          f"start it under torchrun, or unset {', '.join(RANK_ENV_NAMES)} to run "
                          "one process (--nproc-per-node N starts the ranks itself)")


def is_data_parallel(config: RunConfig) -> bool:
    """Whether ``run`` takes the data-parallel path: asked for, or started as a rank."""
    return config.nproc_per_node is not None or rank_env() is not None


def _refuse_combinations(config: RunConfig) -> None:
    if config.repeats > 1:
        raise ConfigError("nproc_per_node", "--nproc-per-node cannot be combined with --repeats",
                          "measure one data-parallel run at a time (run it again for another)")
    if config.cpu_affinity is not None:
        raise ConfigError("nproc_per_node", "--nproc-per-node cannot be combined with "
                          "--cpu-affinity (every rank would be pinned to the same CPUs)",
                          "leave --cpu-affinity out; torchrun places the ranks")


# A rank's own process before its step (Python, torch, gloo or NCCL, DDP): its imports alone took
# 377 MiB of resident memory on the 2-core CPU machine (torch 2.13), rounded up for DDP's buckets.
RANK_PROCESS_BYTES = 512 * 2**20


def check_delays(config: RunConfig, delays: Sequence[tuple[int, float]]) -> None:
    """``--inject-delay-ms`` slows a rank of a data-parallel run: refused (``ConfigError``) for a
    run without ranks, and for a rank the run started here will not have."""
    if not delays:
        return
    if not is_data_parallel(config):
        raise ConfigError("inject_delay_ms", "it delays a rank of a data-parallel run, and this "
                                             "run has no ranks",
                          "add --nproc-per-node N, or leave --inject-delay-ms out")
    ranks = config.nproc_per_node
    if ranks is None or rank_env() is not None:  # a rank: the job's size is torchrun's
        return
    missing = sorted({rank for rank, _ in delays if rank >= ranks})
    if missing:
        raise ConfigError("inject_delay_ms", f"rank {missing[0]} is not one of this run's {ranks} "
                                             f"rank(s), 0 to {ranks - 1}",
                          "name a rank below --nproc-per-node")


def _gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def check_ranks_fit(config: RunConfig) -> None:
    """Before torchrun starts ``--nproc-per-node`` ranks on this machine: each needs a GPU of its
    own (a CUDA run; ``ConfigError``, or ``NoCudaError`` with none), or a CPU core of its own (gloo
    ranks; ``ConfigError``), and all of them the host memory of a rank's process and its step
    (``GpuMemoryError``, as the single-process estimate refuses a run)."""
    from profiler_core.engine import memory
    from profiler_core.spec.workload_kinds import workload_of

    ranks = config.nproc_per_node or 1
    if config.is_cuda:
        import torch

        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise NoCudaError("a data-parallel CUDA run needs a GPU per rank, and this machine has "
                              "no CUDA device", "pass --device cpu for gloo ranks on the CPU")
        if ranks > gpus:
            raise ConfigError("nproc_per_node", f"{ranks} ranks need a GPU each, and this machine "
                                                f"has {gpus} GPU{'s' if gpus > 1 else ''}",
                              f"pass --nproc-per-node {gpus} or fewer")
    else:
        cpus = hostinfo.available_cpus()
        if cpus is not None and ranks > len(cpus):
            raise ConfigError("nproc_per_node", f"{ranks} gloo ranks need a CPU core each, and this "
                                                f"process may use {len(cpus)} "
                                                f"CPU{'s' if len(cpus) > 1 else ''}",
                              f"pass --nproc-per-node {len(cpus)} or fewer: ranks sharing a core "
                              "time each other")
    step = (memory.cpu_estimate(config).total_bytes
            if not config.is_cuda and workload_of(config) is not None else 0)
    needed = ranks * (RANK_PROCESS_BYTES + step)
    available = memory.host_memory_available()
    if available is not None and needed > available:
        raise GpuMemoryError(f"{ranks} ranks need about {_gib(needed)} of the host's memory "
                             f"({_gib(needed / ranks)} each: the rank's process and its step), and "
                             f"this machine has about {_gib(available)} available",
                             "pass a smaller --nproc-per-node, or a smaller step")


def rank_argv(config: RunConfig, args: Any) -> list[str]:
    """The ``run`` command every rank gets: the same settings (the config written out in full,
    so every rank builds exactly it), the same folder, no time limit of its own (the launcher
    keeps it) and no progress bar."""
    argv = ["run", *config_to_argv(config), "--out", str(args.out), "--timeout", "0",
            "--progress", "jsonl" if args.progress == "jsonl" else "none"]
    if args.overwrite:
        argv.append("--overwrite")
    for rank, ms in args.inject_delay_ms:
        argv += ["--inject-delay-ms", f"{rank}:{ms:g}"]
    return argv


def launch(config: RunConfig, args: Any) -> int:
    """``run --nproc-per-node N`` outside torchrun: start torchrun with N ranks on this node."""
    from profiler_core.orchestration.torchrun import run_torchrun
    from profiler_core.storage.results import check_output

    _refuse_combinations(config)
    check_delays(config, args.inject_delay_ms)
    check_ranks_fit(config)
    check_output(args.out, args.overwrite)  # before anything runs
    nproc = config.nproc_per_node or 1
    return run_torchrun(nproc, ["-m", "profiler_core", *rank_argv(config, args)],
                        timeout_s=args.timeout)


def _error_record(env: RankEnv, error: BaseException) -> RankFailure:
    """The line a rank says its error on: its kind as the command line reports it
    (``errors.kind_and_exit_code``), a refused setting's field (the launcher names its option,
    as for its own refusals), and whether it only says that another rank had ended
    (``peer_lost``: a collective failing then)."""
    kind = kind_and_exit_code(error)[0]
    field = None
    if isinstance(error, ConfigError):
        message, hint, field = error.message, error.hint, error.field
    elif isinstance(error, ProfilerError):
        message, hint = error.message, error.hint
    elif isinstance(error, KeyboardInterrupt):  # the time limit too
        message, hint = str(error) or "interrupted", ""
    else:
        text = str(error).strip().splitlines()
        frames = traceback.extract_tb(error.__traceback__)
        where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" \
            if frames else ""
        message, hint = f"{type(error).__name__}: {text[0] if text else ''}{where}", ""
    return RankFailure(env.rank, kind, message[:2000], hint[:500], field,
                       not isinstance(error, ProfilerError) and is_peer_lost(message))


def _stop_error(stopper: Any, stopped: str) -> KeyboardInterrupt:
    """What a rank that stopped early raises once what it measured is kept: its time limit
    (``run --timeout`` under a torchrun of the user's), or Ctrl-C."""
    if stopper.reason == "time limit":
        return TimeLimitReached(f"no result within the time limit of {stopper.time_limit_s:g} s "
                                f"(--timeout); the ranks stopped during {stopped}")
    return KeyboardInterrupt()


def _as_reported(config: RunConfig, error: BaseException) -> BaseException:
    """A rank's error as the command line reports it: one raised through the user's own code
    (``--workload``) names their file, line and function (``WorkloadError``, as in one process);
    one that did not pass through it (a collective failing when another rank ended) is as it is."""
    from profiler_core.engine.user_workload import user_code_error, user_frame
    from profiler_core.spec.config import is_user_spec

    if isinstance(error, (KeyboardInterrupt, ProfilerError)) or not is_user_spec(config.workload) \
            or is_peer_lost(str(error)) or user_frame(error) is None:
        return error
    return user_code_error(config.workload, error)


def run_rank(config: RunConfig, args: Any, env: RankEnv,
             progress: cli.JsonlProgress | None, stopper: Any) -> int:
    """This process as one rank; rank 0 saves the run and prints (or emits) its summary.
    ``progress``: rank 0's JSON-lines reporter with ``--progress jsonl`` (its phases and the
    ``done`` record reach the launcher's stdout through torchrun), None on every other rank.

    Told to stop (``stopper``, cooperating: Ctrl-C, SIGTERM, the time limit), the ranks stop
    together where they agree; rank 0 keeps what they measured, marked incomplete, then each
    raises the stop. Any error is said on a line the launcher reads (:func:`_as_reported`); under
    the tool's own launcher that line is all the rank says, and it returns the error's exit code
    (the launcher reports it in one line); elsewhere it is raised as usual."""
    from profiler_core.storage.results import check_output

    try:
        _refuse_combinations(config)
        if env.rank == 0:
            check_output(args.out, args.overwrite)
        from profiler_core.engine.ddp_result import build_result, started_now
        from profiler_core.engine.user_workload import with_checked_settings

        config = with_checked_settings(config)
        from profiler_core.engine.ddp_step import measure_rank

        started = started_now()
        outcome = measure_rank(config, env, dict(args.inject_delay_ms),
                               progress if progress is not None else ignore_progress,
                               should_stop=lambda: stopper.reason is not None)
        stopped = outcome.stopped
        if outcome.payloads is None:
            if stopped and env.rank == 0:
                print(f"The ranks stopped during {stopped}, before any timed step: no run folder "
                      "was written.", file=sys.stderr)
            if stopped:
                raise _stop_error(stopper, stopped)
            return 0
        why = ("no result within its time limit" if stopper.reason == "time limit" else
               "interrupted (Ctrl-C, or SIGTERM: the dashboard's Cancel or its time limit)")
        result = build_result(config, outcome.payloads, started,
                              f"{stopped}: {why}" if stopped else "")
        stopper.saving()
        try:
            out = result.save(args.out, overwrite=args.overwrite)
        finally:
            result.release_scratch()
        if stopped:
            print(f"The incomplete run was kept in {out} (marked incomplete).", file=sys.stderr)
            raise _stop_error(stopper, stopped)
    except BaseException as error:
        reported = _as_reported(config, error)
        announce(_error_record(env, reported))
        if launched_by_the_tool():
            return kind_and_exit_code(reported)[1]
        if reported is error:
            raise
        raise reported from None
    if progress is not None:
        progress.emit(DoneEvent(str(out)))
    else:
        print("\n".join(summary_lines(result)))
        print(f"\nWrote {out}")
    return 0


def _ms(value: float) -> str:
    return f"{value:.3f} ms" if math.isfinite(value) else "n/a"


def summary_lines(result: RunResult) -> list[str]:
    """The data-parallel run in a few lines: every rank's step times and own speedup, the job's
    speedup (its slowest rank), the straggler, and the run's notes."""
    table, headline = result.table("ranks"), result.headline
    lines = [f"Data-parallel run, {headline.get('world_size', '?')} rank(s), "
             f"{result.environment.get('backend', '?')}:"]
    from profiler_core.analysis.ranks import by_rank

    for rank in sorted(table["rank"].dropna().unique()):
        def value(mode: str, metric: str, rank: Any = rank) -> float:
            return float(by_rank(table, mode, metric).get(rank, math.nan))
        parts = [f"{mode} {_ms(value(mode, 'step_median_ms'))}"
                 for mode in table[table["rank"] == rank]["mode"].drop_duplicates()]
        own = value("graph", "speedup")
        speedup = f", own speedup {own:.2f}x" if math.isfinite(own) else ""
        lines.append(f"  rank {int(rank)}: " + ", ".join(parts) + speedup)
    job_speedup = result.pair.speedup
    if math.isfinite(job_speedup):
        lines.append(f"Job speedup (slowest rank): {job_speedup:.2f}x")
    if headline.get("eager_bound"):
        lines.append(f"Eager step: {headline['eager_bound']}")
    straggler = headline.get("straggler_rank", math.nan)
    lines.append(f"Straggler: rank {int(straggler)}" if isinstance(straggler, float)
                 and math.isfinite(straggler) else "Straggler: none named")
    lines += [f"Note: {note}" for note in result.notes]
    return lines
