"""Command-line parsing: options <-> ``RunConfig``, one-line errors, and the progress reporters.

Scope: turning argv into a validated ``RunConfig`` (the other way round is
``profiler_core.orchestration.command``, for fresh run processes), and showing progress as a text
bar or as JSON lines. Running lives in ``profiler_core.cli.main``.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import IO, Any, NoReturn

from profiler_core.spec import fields
from profiler_core.spec.config import (
    PRESETS,
    RUN_TIMEOUT_S,
    RunConfig,
    changed_from_preset,
)
from profiler_core.spec.errors import ECHO_MAX_CHARS, ConfigError, UsageError, shown
from profiler_core.spec.events import Event, ProgressEvent
from profiler_core.spec.progress import Progress
from profiler_core.spec.workload_kinds import workload_of
from profiler_core.sweep.plan import PointTrials  # the sweep's shorter per-point trials

CUSTOM = fields.CUSTOM_PRESET  # the label of a run whose values are not a preset's

# The benchmark's reference configs (``bench.BENCH_CONFIGS``; named here so that parsing the
# command line imports no benchmark code).
BENCH_CONFIG_NAMES = ("seed-fp32", "seed-bf16", "launch-bound-fp32")

# RunConfig field -> command-line option (declared in ``fields``).
OPTION_OF_FIELD = {field.name: field.cli_option for field in fields.FIELDS}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print usage and exit
        raise UsageError(_short_values(message))


_LONG_QUOTED = re.compile(r"'([^'\s]{" + str(ECHO_MAX_CHARS + 1) + r",})'")
_LONG_BARE = re.compile(r"(?<!\S)[^\s']{" + str(ECHO_MAX_CHARS + 1) + r",}")


def _short_values(message: str) -> str:
    """argparse's message with each value it echoes from the command line ('quoted' or bare)
    shortened by ``errors.shown``: a 5,000-character argument is not printed whole."""
    message = _LONG_QUOTED.sub(lambda match: f"'{shown(match.group(1))}'", message)
    return _LONG_BARE.sub(lambda match: shown(match.group()), message)


def _argparse_type(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """argparse's ``type`` from a reader of ``fields`` (its ``ValueError`` says what was expected)."""
    def convert(text: str) -> Any:
        try:
            return read(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return convert


_int_text = _argparse_type(fields.read_whole_number)
_float_text = _argparse_type(fields.read_number)
_device_text = _argparse_type(fields.read_device)


MAX_INJECTED_DELAY_MS = 10_000.0


def read_delay(text: str) -> tuple[int, float]:
    """``RANK:MS`` (``--inject-delay-ms``) as (rank, milliseconds)."""
    rank_text, _, ms_text = text.partition(":")
    try:
        rank, ms = fields.read_whole_number(rank_text), fields.read_number(ms_text)
    except ValueError:
        raise ValueError(f"expected RANK:MS such as 1:2, got {shown(text)!r}") from None
    if rank < 0 or not 0 <= ms <= MAX_INJECTED_DELAY_MS:
        raise ValueError(f"expected a rank from 0 and milliseconds from 0 to "
                         f"{MAX_INJECTED_DELAY_MS:g}, got {shown(text)!r}")
    return rank, ms


_delay_text = _argparse_type(read_delay)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The run options, one per option of ``fields.FIELDS`` (fields sharing an option, such as
    ``--dropout P1 P2``, take their values together)."""
    for option, specs in fields.options().items():
        first = specs[0]
        if first.kind == fields.PRESET:
            # None: not given (the seed preset; on the CPU, see ``cpu_small_step``)
            parser.add_argument(option, choices=[*sorted(PRESETS), CUSTOM], default=None,
                                help=first.option_help)
        elif first.kind == fields.BOOL:
            parser.add_argument(option, action=argparse.BooleanOptionalAction, default=None,
                                help=first.option_help)
        elif first.kind == fields.CHOICE:
            parser.add_argument(option, choices=first.choices, help=first.option_help)
        elif first.kind == fields.SETTINGS:
            parser.add_argument(option, action="append", metavar=first.metavar,
                                type=_argparse_type(fields.read_setting), help=first.option_help)
        else:
            together = len(specs) > 1
            parser.add_argument(option, type=_argparse_type(partial(fields.read_text, first)),
                                nargs=len(specs) if together else None,
                                metavar=tuple(s.metavar or s.name.upper() for s in specs)
                                if together else first.metavar,
                                help=first.option_help)


def _dest(option: str) -> str:
    """The attribute argparse stores an option's value under."""
    return option[2:].replace("-", "_")


def _with_defaults(parser: argparse.ArgumentParser) -> None:
    """Say each run option's default (the seed preset's value) in its help."""
    defaults = RunConfig()
    fields_of_dest = {_dest(option): specs for option, specs in fields.options().items()}
    for action in parser._actions:
        specs = fields_of_dest.get(action.dest)
        if not specs or specs[0].kind in (fields.PRESET, fields.SETTINGS) or specs[0].empty:
            continue  # the preset's help names its default; an automatic field's says how it is found
        shown = " ".join(fields.format_value(s.name, getattr(defaults, s.name)) for s in specs)
        action.help = f"{action.help or ''} (default: {shown})"


def add_serve_command(commands) -> None:
    """``serve``: a warm worker that runs one ``run`` request (see ``profiler_core.engine.serve``)."""
    serve = commands.add_parser(
        "serve", help="warm worker: import torch, bring CUDA up on --device, then run the one "
                      'request read from stdin, {"config": {...}, "out": ..., "overwrite": ...} '
                      "(used by the launcher)")
    serve.add_argument("--device", type=_device_text, default=RunConfig().device,
                       help=f"CUDA device index, or cpu (default: {RunConfig().device})")


def add_sweep_command(commands) -> None:
    """``sweep``: one or two settings varied over values, one run per point (``profiler_core.sweep``)."""
    sweep = commands.add_parser(
        "sweep", help="vary one or two settings over a list or a log range, each point a full run "
                      "in its own process; finds where the speedup falls below a threshold")
    add_run_options(sweep)
    sweep.add_argument("--param", action="append", default=[], metavar="NAME=VALUES",
                       help="a swept setting and its values: a list (dtype=fp32,bf16; batch=1,8,64) "
                            "or a range (batch=1:1024:x2 multiplies by 2, hidden=256:1024:+256 adds); "
                            "once or twice. NAME: batch, width, d_in, hidden, d_out, hidden_layers, "
                            "seq_len, dtype, capture_iters, modes (graph, or extra modes joined by '+')")
    sweep.add_argument("--out", required=True,
                       help="the sweep folder (e.g. runs/sweep-batch): a new folder, one of this "
                            "tool's sweeps with --overwrite, or a stopped sweep with --resume")
    sweep.add_argument("--resume", action="store_true",
                       help="continue the stopped or crashed sweep in --out (its own plan), skipping "
                            "finished points")
    sweep.add_argument("--overwrite", action="store_true",
                       help="replace the sweep already in --out (only ever a sweep folder of this tool)")
    sweep.add_argument("--threshold", type=_float_text,
                       help="the speedup below which graphing no longer pays (default: 1.1)")
    sweep.add_argument("--point-timeout", type=_float_text, metavar="S",
                       help="stop a point still running after S seconds, record it as failed and go "
                            "on (default: no limit)")
    sweep.add_argument("--progress", choices=("bar", "none"), default="bar",
                       help="progress as a text bar on stderr, or nothing (default: bar)")
    for action in sweep._actions:
        if action.dest in PointTrials.__dataclass_fields__ and action.help:
            default = getattr(PointTrials(), action.dest)
            shown = default if not isinstance(default, bool) else ("on" if default else "off")
            action.help += f" (sweep default per point: {'automatic' if default is None else shown})"


def build_parser() -> _Parser:
    parser = _Parser(prog="python -m profiler_core",
                     description="How much do CUDA Graphs speed up my PyTorch training, and why?")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="run eager vs CUDA graph and write a run directory")
    add_run_options(run)
    run.add_argument("--out", required=True,
                     help="run folder to write (e.g. runs/seed): a new folder, or one of this "
                          "tool's earlier runs with --overwrite")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the run already in --out (only ever a run folder of this tool)")
    run.add_argument("--progress", choices=("bar", "jsonl", "none"), default="bar",
                     help="progress as a text bar (stderr), JSON lines (stdout) or nothing "
                          "(default: bar)")
    run.add_argument("--timeout", type=_float_text, default=RUN_TIMEOUT_S, metavar="S",
                     help="stop the run if it has no result after S seconds, loading your "
                          "--workload included: what it measured is kept, exit code 124; 0 for "
                          f"no limit (default: {RUN_TIMEOUT_S:g})")
    run.add_argument("--timings", action="store_true",
                     help="print where the command's wall time went on stderr (imports, the "
                          "run's phases, writing)")
    run.add_argument("--inject-delay-ms", type=_delay_text, action="append", default=[],
                     metavar="RANK:MS",
                     help="with --nproc-per-node: sleep MS milliseconds on the host before every "
                          "step of rank RANK, a straggler on purpose (repeat for several ranks)")
    _with_defaults(run)
    bench = commands.add_parser(
        "bench", help="the tool's default run vs a bare hand-written loop, fresh processes, on a GPU")
    bench.add_argument("--rounds", type=_int_text, default=6,
                       help="rounds of three processes (tool, bare, bare) per config (default: 6)")
    bench.add_argument("--configs", default=",".join(BENCH_CONFIG_NAMES),
                       help="comma-separated reference configs (default: all of "
                            f"{', '.join(BENCH_CONFIG_NAMES)})")
    bench.add_argument("--workload", metavar="package.module:function",
                       help="your own step instead of the reference configs: the tool's default "
                            "run of it against a bare loop over the same build function (its "
                            "whole step as it is, or the loop a user writes around its parts)")
    bench.add_argument("--workload-arg", action="append", metavar="NAME=VALUE",
                       type=_argparse_type(fields.read_setting),
                       help="a setting of your own step (a keyword parameter of its build "
                            "function); repeat for several")
    bench.add_argument("--vary", metavar="NAME=DIST",
                       help="with --workload: your step over a seeded sequence of shapes (as run "
                            "--vary), the tool's eager, pad_max and buckets strategies against a "
                            "bare loop padding the same way")
    bench.add_argument("--buckets", default="pow2",
                       help="with --vary: the sizes a graph per bucket pads up to (default: pow2)")
    bench.add_argument("--quiet-tool", action="store_true",
                       help="a fourth process per round: the tool with the profiler, NVML and "
                            "parity off, to tell where a gap to the bare loop comes from")
    bench.add_argument("--out", help="write the benchmark tables (CSV) into this folder: a new "
                                     "folder, or one of this tool's benchmarks with --overwrite")
    bench.add_argument("--overwrite", action="store_true",
                       help="replace the benchmark already in --out (only ever a benchmark folder "
                            "of this tool)")
    add_serve_command(commands)
    add_sweep_command(commands)
    stats = commands.add_parser("trace-stats", help="graph-aware launch split of a Chrome trace")
    stats.add_argument("trace", help="Chrome-trace JSON exported by torch.profiler (.json or .gz)")
    stats.add_argument("--out", help="write launch_split.csv and kernels.csv into this folder")
    stats.add_argument("--overwrite", action="store_true",
                       help="replace those two tables if an earlier trace-stats wrote them there")
    add_predict_command(commands)
    add_index_command(commands)
    return parser


def add_index_command(commands) -> None:
    """``index``: the runs of a runs folder from its run index (``profiler_core.storage.index``)."""
    index = commands.add_parser(
        "index", help="list the runs and sweeps of a runs folder from its run index, filtered")
    index.add_argument("--runs", default="runs", help="the runs folder (default: runs)")
    index.add_argument("--rebuild", action="store_true",
                       help="rebuild the index from the run folders (it is brought up to date "
                            "on every use anyway)")
    index.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                       help="keep runs whose FIELD (a run setting such as batch or dtype, gpu, "
                            "date, or a headline figure such as speedup) is VALUE, one of "
                            "V1,V2, or within LOW..HIGH (either end may be left out); repeat "
                            "to combine")


def add_predict_command(commands) -> None:
    """``predict``: the graph time per step, and the speedup, from an eager trace alone."""
    predict = commands.add_parser(
        "predict", help="predict the CUDA-graph time per step and the speedup from an eager "
                        "torch.profiler trace, before any capture")
    predict.add_argument("trace", help="eager Chrome-trace JSON exported by torch.profiler "
                                       "(.json or .gz), one ProfilerStep# per training step")
    predict.add_argument("--launch-us", type=_float_text,
                         help="GPU cost of one graph launch, microseconds (with --per-node-us)")
    predict.add_argument("--per-node-us", type=_float_text,
                         help="GPU cost per kernel node, microseconds (with --launch-us)")
    predict.add_argument("--calibrate", action="store_true",
                         help="measure both constants on this machine's GPU (under a second)")
    predict.add_argument("--steps-per-iteration", type=_int_text,
                         help="training steps in each ProfilerStep# iteration (default: 1), or in "
                              "the whole trace when it has no markers")
    predict.add_argument("--steps-per-graph", type=_int_text, default=1,
                         help="training steps you would capture in one graph (default: 1)")
    predict.add_argument("--copy-us", type=_float_text,
                         help="copying a batch into the graph's static inputs, microseconds per "
                              "replay (default: left out)")
    predict.add_argument("--eager-ms", type=_float_text,
                         help="your measured eager time per step, unprofiled (default: the "
                              "trace's median iteration span, which is profiled)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The preset, overridden by every option given; labelled ``custom`` when an option changed
    one of the preset's values (``--preset custom`` starts from the seed values)."""
    overrides: dict[str, Any] = {}
    for option, specs in fields.options().items():
        value = getattr(args, _dest(option), None)
        if value is not None and specs[0].kind == fields.SETTINGS:
            overrides[specs[0].name] = tuple(value)  # text values: the run converts them
        elif value is not None and specs[0].kind != fields.PRESET:
            overrides.update(zip((s.name for s in specs), value if len(specs) > 1 else [value]))
    name = args.preset or "seed"
    base = PRESETS["seed"] if name == CUSTOM else PRESETS[name]
    config = base.replace(**overrides) if overrides else base
    if name == CUSTOM or changed_from_preset(config):
        config = config.replace(preset=CUSTOM)
    return config


def sizes_given(args: argparse.Namespace, config: RunConfig) -> list[str]:
    """The options of the command line that choose the step's size: ``--preset`` and each option
    setting a field of the workload's small CPU step (``--batch``, ``--eager-iters``...)."""
    given = ["--preset"] if getattr(args, "preset", None) is not None else []
    for name in fields.cpu_step_values(config.workload):
        option = OPTION_OF_FIELD[name]
        if name not in fields.CPU_FIXED and getattr(args, _dest(option), None) is not None:
            given.append(option)
    return given


def cpu_small_step(args: argparse.Namespace, config: RunConfig) -> RunConfig | None:
    """``run --device cpu`` with neither ``--preset`` nor a size option: the workload's small CPU
    step (the dashboard's CPU sizes, declared on the workload), which runs in seconds where the
    seed step takes minutes on a CPU. None when the sizes were asked for, off the CPU, or for the
    user's own step."""
    if config.device != "cpu" or not fields.cpu_step_values(config.workload) or sizes_given(args, config):
        return None
    return fields.small_cpu_step(config)


def small_step_line(full: RunConfig, small: RunConfig) -> str:
    """One line saying that ``run --device cpu`` runs the small step, and how to run the full one."""
    kind = workload_of(small)
    assert kind is not None, "a small CPU step exists only for a built-in workload"
    preset_name = full.preset if full.preset != CUSTOM else "seed"
    return (f"--device cpu: running a small step ({kind.describe(small)}, "
            f"{small.total_eager_iters} eager steps), seconds on a CPU, labelled {small.preset}. "
            f"For the {preset_name} preset's own step ({kind.describe(full)}), minutes on a CPU, "
            f"pass --preset {preset_name} (or size options such as --batch): the time it will "
            "take is printed first.")


def describe_config_error(error: ConfigError) -> str:
    """One line naming the command-line option and what is allowed."""
    option = OPTION_OF_FIELD.get(error.field, "--" + error.field.replace("_", "-"))
    return f"{option}: {error.message}"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


class BarProgress:
    """A one-line text progress bar on a terminal stream (redrawn in place)."""

    def __init__(self, stream: IO[str] | None = None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self.started = time.perf_counter()
        self._last_line = ""

    def __call__(self, progress: Progress) -> None:
        filled = int(self.width * progress.fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.perf_counter() - self.started
        line = (f"\r[{bar}] {progress.fraction:6.1%} {elapsed:6.1f}s {eta_text(elapsed, progress.fraction)}"
                f"  {progress.phase}: {progress.message}")
        if line != self._last_line:
            self.stream.write(line.ljust(100)[:160])
            self.stream.flush()
            self._last_line = line

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


class LateBar:
    """A :class:`BarProgress` for work that is usually quick (reading a trace), on a terminal
    only: nothing is drawn until the work has taken ``after_s`` seconds, then at most every
    ``every_s`` seconds. :meth:`close` ends the bar's line, if it drew one, so that a message
    printed next starts on its own line. A stream that is not a terminal (a log, a pipe) gets
    no bar unless ``always``."""

    def __init__(self, after_s: float = 1.0, stream: IO[str] | None = None,
                 always: bool = False, every_s: float = 0.1) -> None:
        self._bar = BarProgress(stream)
        self._after_s, self._every_s = after_s, every_s
        self._last = -math.inf
        try:
            self._on = always or self._bar.stream.isatty()
        except (AttributeError, ValueError):
            self._on = False
        self.drawn = False

    def __call__(self, progress: Progress) -> None:
        now = time.perf_counter()
        if (not self._on or now - self._bar.started < self._after_s
                or now - self._last < self._every_s):
            return
        self.drawn, self._last = True, now
        self._bar(progress)

    def close(self) -> None:
        if self.drawn:
            self._bar.close()
            self.drawn = False


def eta_text(elapsed_s: float, fraction: float) -> str:
    """"ETA 12s" from the time spent and the fraction done (blank before 2%: too early to say)."""
    if fraction < 0.02 or fraction >= 1.0:
        return " " * 9
    remaining = elapsed_s / fraction * (1.0 - fraction)
    return f"ETA {remaining:4.0f}s" if remaining < 10_000 else "ETA >2h  "


class JsonlProgress:
    """Progress as JSON lines on stdout, for the dashboard's worker process."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def __call__(self, progress: Progress) -> None:
        self.emit(ProgressEvent.of(progress))

    def emit(self, event: Event) -> None:
        """One record, on a line of its own, flushed at once."""
        self.stream.write(event.to_line() + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass
