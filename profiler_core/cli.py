"""Command-line parsing: options <-> ``RunConfig``, one-line errors, and the progress reporters.

Scope: turning argv into a validated ``RunConfig`` (and back, for the dashboard's worker process),
and showing progress as a text bar or as JSON lines. Running lives in ``__main__``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import IO, Any, Sequence

from profiler_core.config import (ALWAYS_MEASURED, DTYPES, MODE_NAMES, OPTIMIZERS, PRESETS,
                                  WORKLOADS, RunConfig, changed_from_preset, is_user_spec)

CUSTOM = "custom"  # the label of a run whose values are not a preset's
from profiler_core.errors import ConfigError
from profiler_core.progress import Progress

# The benchmark's reference configs (``bench.BENCH_CONFIGS``; named here so that parsing the
# command line imports no benchmark code).
BENCH_CONFIG_NAMES = ("seed-fp32", "seed-bf16", "launch-bound-fp32")

# RunConfig field -> command-line option.
OPTION_OF_FIELD = {
    "batch": "--batch", "d_in": "--d-in", "hidden": "--hidden", "d_out": "--d-out",
    "hidden_layers": "--hidden-layers", "dropout1": "--dropout", "dropout2": "--dropout",
    "dtype": "--dtype", "optimizer": "--optimizer", "warmup_iters": "--warmup-iters",
    "capture_iters": "--capture-iters", "replays": "--replays", "eager_iters": "--eager-iters",
    "count_warmup": "--count-warmup", "seed": "--seed", "device": "--device", "trials": "--trials",
    "profile": "--profile", "profile_iters": "--profile-iters", "nvml": "--nvml",
    "nvml_interval_ms": "--nvml-interval-ms", "parity_steps": "--parity-steps", "preset": "--preset",
    "workload": "--workload", "modes": "--modes", "heads": "--heads", "seq_len": "--seq-len",
    "channels": "--channels", "image_size": "--image-size",
}
_INT_FIELDS = ("batch", "d_in", "hidden", "d_out", "hidden_layers", "warmup_iters", "capture_iters",
               "replays", "eager_iters", "seed", "trials", "profile_iters", "parity_steps", "heads",
               "seq_len", "channels", "image_size")
_BOOL_FIELDS = ("count_warmup", "profile", "nvml")


class UsageError(Exception):
    """A command line that cannot be parsed; the message is one line naming the option."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage and exit
        raise UsageError(message)


def _int_text(text: str) -> int:
    try:
        return int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _float_text(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _modes_text(text: str) -> tuple[str, ...]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MODE_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"expected modes among {', '.join(MODE_NAMES)}, got "
                                         f"{unknown[0]!r}")
    return tuple(dict.fromkeys([*ALWAYS_MEASURED, *names]))


def _workload_text(text: str) -> str:
    if text in WORKLOADS or is_user_spec(text):
        return text
    raise argparse.ArgumentTypeError(f"expected one of {', '.join(WORKLOADS)} or "
                                     f"package.module:function, got {text!r}")


def _device_text(text: str) -> str:
    text = text.strip().lower()
    if text == "cpu":
        return "cpu"
    index = text[5:] if text.startswith("cuda:") else ("0" if text == "cuda" else text)
    if not index.isdigit():
        raise argparse.ArgumentTypeError(f"expected 'cpu' or a CUDA index such as 0, got {text!r}")
    return f"cuda:{int(index)}"


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The workload options shared by ``run`` and ``bench``."""
    parser.add_argument("--preset", choices=[*sorted(PRESETS), CUSTOM], default="seed",
                        help="start from a preset (default: seed); other options override it, "
                             f"and a run whose values differ from its preset is labelled {CUSTOM}")
    parser.add_argument("--batch", type=_int_text, help="batch size N")
    parser.add_argument("--d-in", type=_int_text, help="input features")
    parser.add_argument("--hidden", type=_int_text, help="hidden width H")
    parser.add_argument("--d-out", type=_int_text, help="output features")
    parser.add_argument("--hidden-layers", type=_int_text,
                        help="mlp: hidden layers; transformer: encoder layers; conv: conv blocks")
    parser.add_argument("--heads", type=_int_text, help="transformer: attention heads")
    parser.add_argument("--seq-len", type=_int_text, help="transformer: tokens per sequence")
    parser.add_argument("--channels", type=_int_text, help="conv: channels of every convolution")
    parser.add_argument("--image-size", type=_int_text, help="conv: image height and width")
    parser.add_argument("--dropout", type=_float_text, nargs=2, metavar=("P1", "P2"),
                        help="dropout after the first and the last Linear")
    parser.add_argument("--dtype", choices=DTYPES, help="precision")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, help="optimizer")
    parser.add_argument("--warmup-iters", type=_int_text, help="side-stream warm-up iterations")
    parser.add_argument("--capture-iters", type=_int_text, help="training steps captured per graph")
    parser.add_argument("--replays", type=_int_text, help="timed graph replays")
    parser.add_argument("--eager-iters", type=_int_text,
                        help="timed eager steps (default: replays x capture-iters)")
    parser.add_argument("--count-warmup", action=argparse.BooleanOptionalAction, default=None,
                        help="let the static counter count warm-up steps (lesson 2: no)")
    parser.add_argument("--seed", type=_int_text, help="random seed")
    parser.add_argument("--device", type=_device_text, help="CUDA device index, or cpu")
    parser.add_argument("--trials", type=_int_text,
                        help="interleaved eager/graph blocks (default: up to 10, at least 2 "
                             "iterations per block)")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=None,
                        help="record a torch.profiler window per mode")
    parser.add_argument("--profile-iters", type=_int_text, help="iterations per profiled window")
    parser.add_argument("--nvml", action=argparse.BooleanOptionalAction, default=None,
                        help="sample GPU utilisation with NVML")
    parser.add_argument("--nvml-interval-ms", type=_float_text, help="NVML polling period")
    parser.add_argument("--parity-steps", type=_int_text, help="steps compared for parity (0: skip)")
    parser.add_argument("--modes", type=_modes_text, metavar="MODE,MODE",
                        help="modes to time beside eager and the article's graph (always measured): "
                             "graphed_callables, compile, compile_ro (reduce-overhead)")
    parser.add_argument("--workload", type=_workload_text, metavar="NAME|package.module:function",
                        help=f"the article's MLP (mlp), a deliberately broken step that cannot be "
                             f"captured ({', '.join(w for w in WORKLOADS if w != 'mlp')}), or your own "
                             "step: a function build(device) returning model, batch, loss, optimizer "
                             "(see README)")


def _with_defaults(parser: argparse.ArgumentParser) -> None:
    """Say each run option's default (the seed preset's value) in its help."""
    defaults = RunConfig()
    for action in parser._actions:
        name = action.dest
        if name == "dropout":
            action.help += f" (default: {defaults.dropout1} {defaults.dropout2})"
        elif name == "modes":
            action.help += f" (default: {','.join(defaults.modes)})"
        elif name in ("trials", "eager_iters"):
            continue  # their help already says how the default is worked out
        elif hasattr(defaults, name) and name != "preset" and action.help:
            value = getattr(defaults, name)
            shown = value if not isinstance(value, bool) else ("on" if value else "off")
            action.help += f" (default: {shown})"


def add_serve_command(commands) -> None:
    """``serve``: a warm worker that runs one ``run`` request (see ``profiler_core.serve``)."""
    serve = commands.add_parser(
        "serve", help="warm worker: import torch, bring CUDA up on --device, then run the one "
                      'request read from stdin, {"argv": ["run", ...]} (used by the launcher)')
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
    from profiler_core.sweep import PointTrials  # the shorter per-point trials' defaults

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
    _with_defaults(run)
    bench = commands.add_parser(
        "bench", help="the tool's default run vs a bare hand-written loop, fresh processes, on a GPU")
    bench.add_argument("--rounds", type=_int_text, default=6,
                       help="rounds of three processes (tool, bare, bare) per config (default: 6)")
    bench.add_argument("--configs", default=",".join(BENCH_CONFIG_NAMES),
                       help="comma-separated reference configs (default: all of "
                            f"{', '.join(BENCH_CONFIG_NAMES)})")
    bench.add_argument("--out", help="write the benchmark tables (CSV) into this folder")
    add_serve_command(commands)
    add_sweep_command(commands)
    stats = commands.add_parser("trace-stats", help="graph-aware launch split of a Chrome trace")
    stats.add_argument("trace", help="Chrome-trace JSON exported by torch.profiler (.json or .gz)")
    stats.add_argument("--out", help="write launch_split.csv and kernels.csv into this folder")
    stats.add_argument("--overwrite", action="store_true",
                       help="replace those two tables if an earlier trace-stats wrote them there")
    add_predict_command(commands)
    return parser


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
    for name in _INT_FIELDS + _BOOL_FIELDS + ("dtype", "optimizer", "device", "nvml_interval_ms",
                                              "workload", "modes"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "dropout", None) is not None:
        overrides["dropout1"], overrides["dropout2"] = args.dropout
    base = PRESETS["seed"] if args.preset == CUSTOM else PRESETS[args.preset]
    config = base.replace(**overrides) if overrides else base
    if args.preset == CUSTOM or changed_from_preset(config):
        config = config.replace(preset=CUSTOM)
    return config


def config_to_argv(config: RunConfig) -> list[str]:
    """Options that ``run`` turns back into exactly ``config`` (used by the dashboard's worker)."""
    argv = ["--preset", config.preset]
    for name in _INT_FIELDS:
        value = getattr(config, name)
        if value is not None:
            argv += [OPTION_OF_FIELD[name], str(value)]
    for name in _BOOL_FIELDS:
        flag = OPTION_OF_FIELD[name]
        argv.append(flag if getattr(config, name) else "--no-" + flag[2:])
    argv += ["--dropout", repr(config.dropout1), repr(config.dropout2), "--dtype", config.dtype,
             "--optimizer", config.optimizer, "--device", config.device,
             "--nvml-interval-ms", repr(config.nvml_interval_ms), "--workload", config.workload,
             "--modes", ",".join(config.modes)]
    return argv


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
        self.emit({"event": "progress", "phase": progress.phase, "done": progress.done,
                   "total": progress.total, "fraction": round(progress.fraction, 4),
                   "message": progress.message})

    def emit(self, record: dict[str, Any]) -> None:
        self.stream.write(json.dumps(record) + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass
