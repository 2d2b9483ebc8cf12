"""Sweeps: one or two settings varied over a list or a log range, each point a full measurement.

Scope, in the order of the file:

- **The plan**: :class:`SweepPlan` (frozen): one or two :class:`SweepAxis` (batch, width, d_in,
  hidden, d_out, hidden_layers, seq_len, dtype, capture_iters, modes), the base ``RunConfig``,
  the shorter trials every point runs (:class:`PointTrials`) and the crossover threshold. Every
  point's ``RunConfig`` is built when the plan is, so a plan that exists is one whose every point
  can run; a bad value raises ``ConfigError`` naming the point and what to change.
- **The sweep folder**: ``sweep.json`` (the plan and the sweep's status), ``points.csv`` (one
  row per planned point: its values, status, run folder, error, headline figures),
  ``point_modes.csv`` (each measured point's modes.csv, one row per mode) and one ordinary run
  folder per point (``point-000``, ...), and ``manifest.json`` listing the sweep's own files
  with their sizes and its point folders (rewritten after each of those files). Only a new
  folder is written, or (``overwrite``) one holding one of this tool's sweeps and nothing else
  (:func:`sweep_files`), whose files exactly are removed; ``resume`` continues one.
- **Running it**: :class:`SweepRunner` measures every point in its own process through
  ``profiler_core.orchestration.launcher.Launcher`` (warm workers), reports progress through a callback, keeps
  every finished point when stopped (``stop()``, Ctrl-C), records a failed point and goes on, and
  on resume skips finished points (re-running a point whose folder is damaged or incomplete,
  replacing only that point's folder). :class:`BackgroundSweep` runs one on a thread for the
  dashboard, behind a caller's device lock.
- **Reading one back**: :func:`load_sweep`, :func:`list_sweeps`.
- **Analysis**, pure functions on DataFrames: :func:`speedup_table` (speedup with its CI, eager
  and mode medians, the GPU-busy floor, per point and mode), :func:`crossovers` (where the
  speedup falls below the threshold, interpolated on a log scale), :func:`break_even_table`
  (one-time cost and memory against the per-step saving), :func:`amortisation_table` (time per
  step against iterations per graph, beside the floor).

No Streamlit or Plotly here.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.config import (
    ALWAYS_MEASURED,
    DTYPES,
    INT_LIMITS,
    MODE_NAMES,
    RunConfig,
    changed_from_preset,
    is_user_spec,
)
from profiler_core.spec.errors import (
    ConfigError,
    NoCudaError,
    ProfilerError,
    RunFormatError,
    quoted,
    shown,
    shown_int,
)
from profiler_core.spec.fields import read_text, read_whole_number, spec
from profiler_core.spec.schema import clean_text
from profiler_core.storage.outputs import (
    TOOL_NAME,
    NotOwned,
    Owned,
    is_version,
    output_path,
    owned_folder,
    read_folder_json,
    replace_file,
    replace_folder,
    write_manifest,
)
from profiler_core.storage.results import RunResult, check_writable, run_files
from profiler_core.storage.runfolder import is_tool_run
from profiler_core.timing import stats

# ----------------------------------------------------------------------------- the plan

# Parameter -> what it changes, in words (the CLI's help and the dashboard's choices).
PARAMETERS = {
    "batch": "batch size N",
    "width": "every layer width: d_in, hidden and d_out (mlp); hidden and d_out (transformer); "
             "channels (conv)",
    "d_in": "input features (mlp)",
    "hidden": "hidden width (mlp, transformer)",
    "d_out": "output features",
    "hidden_layers": "hidden layers (mlp), encoder layers (transformer), conv blocks (conv)",
    "seq_len": "tokens per sequence (transformer)",
    "dtype": "precision: " + ", ".join(DTYPES),
    "capture_iters": "training steps captured per graph (iterations per graph)",
    "modes": "modes timed beside eager and graph: graph (none), or extra modes joined by '+', "
             "e.g. compile_ro or graphed_callables+compile",
}
ALIASES = {"d-in": "d_in", "d-out": "d_out", "hidden-layers": "hidden_layers", "layers":
           "hidden_layers", "seq-len": "seq_len", "capture-iters": "capture_iters",
           "iters-per-graph": "capture_iters", "precision": "dtype", "mode": "modes"}
TEXT_PARAMETERS = ("dtype", "modes")
# The RunConfig fields a size parameter sets, per built-in workload (absent: it changes nothing).
_FIELDS = {
    "mlp": {"batch": ("batch",), "width": ("d_in", "hidden", "d_out"), "d_in": ("d_in",),
            "hidden": ("hidden",), "d_out": ("d_out",), "hidden_layers": ("hidden_layers",)},
    "transformer": {"batch": ("batch",), "width": ("hidden", "d_out"), "hidden": ("hidden",),
                    "d_out": ("d_out",), "hidden_layers": ("hidden_layers",),
                    "seq_len": ("seq_len",)},
    "conv": {"batch": ("batch",), "width": ("channels",), "d_out": ("d_out",),
             "hidden_layers": ("hidden_layers",)},
}
_ANY_WORKLOAD = {"dtype": ("dtype",), "capture_iters": ("capture_iters",), "modes": ("modes",)}
MAX_AXES = 2
MAX_POINTS = 2_000  # about 100 minutes at 20 points a minute
DEFAULT_THRESHOLD = 1.1
THRESHOLD_LIMITS = (1.0, 100.0)
RANGE_EXAMPLE = "a list such as 1,8,64 or a range such as 1:1024:x2 (x: multiply, +: add)"


def parameter_name(text: str) -> str:
    """A parameter's canonical name (``seq-len`` -> ``seq_len``); ``ConfigError`` if unknown."""
    name = ALIASES.get(str(text).strip().lower(), str(text).strip().lower())
    if name not in PARAMETERS:
        raise ConfigError("param", f"cannot sweep {str(text)[:40]!r}",
                          f"choose among {', '.join(PARAMETERS)}")
    return name


def _refuse(name: str, message: str, hint: str = RANGE_EXAMPLE) -> ConfigError:
    return ConfigError("param", f"{name}: {message}", hint)


def _limits(name: str) -> tuple[int, int]:
    """The whole numbers a numeric parameter may take (``width`` sets the layer widths)."""
    return INT_LIMITS.get(name, INT_LIMITS["hidden"])


def _whole(name: str, text: str) -> int:
    try:
        return read_whole_number(text.strip())
    except ValueError:
        raise _refuse(name, f"expected a whole number, got {quoted(text.strip())}") from None


def _within(name: str, value: int) -> int:
    """``value`` if the parameter may take it; checked before any arithmetic (a 400-digit bound
    would overflow a float)."""
    low, high = _limits(name)
    if not low <= value <= high:
        raise _refuse(name, f"{shown_int(value)} is outside {low:,} to {high:,}",
                      f"keep every value from {low:,} to {high:,}")
    return value


def _int_value(name: str, text: str) -> int:
    """A whole number of the value grammar, within the parameter's own limits."""
    return _within(name, _whole(name, text))


def _range_values(name: str, text: str) -> list[int]:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise _refuse(name, f"a range is start:stop or start:stop:step; got {quoted(text)}")
    start, stop = _whole(name, parts[0]), _whole(name, parts[1])
    step = parts[2].strip().lower() if len(parts) == 3 else "+1"
    if start < 1 or stop < start:
        raise _refuse(name, f"a range must run upwards from 1 or more; got {shown_int(start)} "
                            f"to {shown_int(stop)}")
    _within(name, start), _within(name, stop)
    if step[:1] in ("x", "*"):
        try:
            factor = float(step[1:])
        except ValueError:
            raise _refuse(name, f"the step {quoted(step)} must be x followed by a number, "
                                "e.g. x2") from None
        if not math.isfinite(factor) or factor <= 1.0:
            raise _refuse(name, f"a multiplying step must be above 1 (and finite); got "
                                f"{quoted(step)}")
        count = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
        if count > MAX_POINTS:
            raise _refuse(name, f"{shown(text)} gives {count:,} values (at most {MAX_POINTS:,})",
                          "use a larger step or a narrower range")
        values, value = [], float(start)
        while round(value) <= stop:
            if not values or round(value) != values[-1]:
                values.append(round(value))
            value *= factor
        return values
    step_text = step[1:] if step[:1] == "+" else step
    try:
        increment = read_whole_number(step_text.strip())
    except ValueError:
        raise _refuse(name, f"the step {quoted(step)} must be a whole number, e.g. +64") from None
    if not 1 <= increment <= _limits(name)[1]:
        raise _refuse(name, f"an adding step must be from 1 to {_limits(name)[1]:,}; got "
                            f"{quoted(step)}")
    count = (stop - start) // increment + 1
    if count > MAX_POINTS:
        raise _refuse(name, f"{shown(text)} gives {count:,} values (at most {MAX_POINTS:,})",
                      "use a larger step (or x2 for log steps) or a narrower range")
    return list(range(start, stop + 1, increment))


def _modes_value(name: str, text: str) -> tuple[str, ...]:
    """One point's modes: names joined by '+' (commas separate points), read as --modes reads
    them; "graph" alone is eager and the graph."""
    try:
        return read_text(spec("modes"), text.replace("+", ","))
    except ValueError:
        unknown = next(m.strip() for m in text.split("+") if m.strip() and m.strip() not in MODE_NAMES)
        allowed = ", ".join(m for m in MODE_NAMES if m not in ALWAYS_MEASURED)
        raise _refuse(name, f"unknown mode {unknown[:40]!r}",
                      f"use graph (eager and graph only) or some of {allowed} joined by '+'") from None


def mode_set_label(modes: Sequence[str]) -> str:
    """The value naming a mode set in a sweep: ``graph``, or its extra modes joined by '+'."""
    extras = [m for m in modes if m not in ALWAYS_MEASURED]
    return "+".join(extras) if extras else "graph"


def parse_values(name: str, text: str) -> tuple:
    """The values of parameter ``name`` from a list (``1,8,64``, ``fp32,bf16``) or a range of
    whole numbers (``1:1024:x2`` multiplies by 2, ``64:512:+64`` adds 64; stop included when hit)."""
    name = parameter_name(name)
    text = str(text).strip()
    if not text:
        raise _refuse(name, "no values given")
    if name in TEXT_PARAMETERS:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if name == "dtype":
            unknown = [item for item in items if item not in DTYPES]
            if unknown:
                raise _refuse(name, f"unknown precision {unknown[0][:40]!r}",
                              f"choose among {', '.join(DTYPES)}")
            return tuple(dict.fromkeys(items))
        return tuple(dict.fromkeys(mode_set_label(_modes_value(name, item)) for item in items))
    if ":" in text:
        return tuple(_range_values(name, text))
    values = [_int_value(name, item) for item in text.split(",") if item.strip()]
    return tuple(dict.fromkeys(values))


def parse_param(text: str) -> SweepAxis:
    """``--param NAME=VALUES`` as an axis."""
    name, sep, values = str(text).partition("=")
    if not sep:
        raise ConfigError("param", f"expected NAME=VALUES, got {str(text)[:60]!r}",
                          "e.g. --param batch=1:1024:x2 or --param dtype=fp32,bf16")
    name = parameter_name(name)
    return SweepAxis(name, parse_values(name, values))


@dataclass(frozen=True)
class SweepAxis:
    """One swept parameter and its values, in the order they are measured."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        if self.name not in PARAMETERS:
            raise ConfigError("param", f"cannot sweep {self.name!r}",
                              f"choose among {', '.join(PARAMETERS)}")
        if not self.values:
            raise _refuse(self.name, "no values given")
        if len(set(self.values)) != len(self.values):
            raise _refuse(self.name, "a value is given twice", "name each value once")
        if self.numeric:
            low, high = _limits(self.name)
            for value in self.values:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise _refuse(self.name, f"expected whole numbers, got {quoted(value)}")
                if not low <= value <= high:
                    raise _refuse(self.name, f"{shown_int(value)} is outside {low:,} to {high:,}",
                                  f"keep every value from {low:,} to {high:,}")

    @property
    def numeric(self) -> bool:
        return self.name not in TEXT_PARAMETERS

    @property
    def log_scale(self) -> bool:
        """Whether its values are best shown on a log axis (numbers spanning 8x or more)."""
        return self.numeric and min(self.values) > 0 and max(self.values) / min(self.values) >= 8

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values)}


@dataclass(frozen=True)
class PointTrials:
    """The shorter measurement every point runs, over the base config's values: enough replays
    and trials for a confidence interval, a short profiled window for the GPU-busy floor, no NVML
    and no parity check (a seed-size point times in about a second)."""

    replays: int = 100  # timed graph replays per point (eager: replays x iterations per graph)
    trials: int | None = None  # interleaved eager/graph blocks; None: automatic (up to 10)
    profile: bool = True  # a profiled window per mode: the GPU-busy floor per point
    profile_iters: int = 5  # iterations per profiled window
    nvml: bool = False  # NVML sampling per point
    parity_steps: int = 0  # parity check per point (0: skipped)

    def to_dict(self) -> dict[str, Any]:
        return {"replays": self.replays, "trials": self.trials, "profile": self.profile,
                "profile_iters": self.profile_iters, "nvml": self.nvml,
                "parity_steps": self.parity_steps}


@dataclass(frozen=True)
class SweepPoint:
    """One planned measurement: its index, the swept values and the config it runs."""

    index: int
    values: tuple[tuple[str, Any], ...]  # (parameter, value) per axis
    config: RunConfig

    @property
    def run_name(self) -> str:
        return point_folder_name(self.index)

    @property
    def label(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.values)


def point_folder_name(index: int) -> str:
    return f"point-{index:03d}"


def _fields_for(axis: str, workload: str) -> tuple[str, ...]:
    if axis in _ANY_WORKLOAD:
        return _ANY_WORKLOAD[axis]
    if is_user_spec(workload):
        return ()
    return _FIELDS.get(workload, _FIELDS["mlp"]).get(axis, ())


def _point_changes(axis: str, value: Any, workload: str) -> dict[str, Any]:
    if axis == "modes":
        return {"modes": _modes_value(axis, value)}
    return {name: value for name in _fields_for(axis, workload)}


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep measures: every combination of the axes' values (the first axis outermost),
    each as ``base`` with those values and the ``point_trials`` settings. Built only valid:
    ``ConfigError`` (field ``param``) names the problem and what to change."""

    axes: tuple[SweepAxis, ...]
    base: RunConfig = field(default_factory=RunConfig)
    point_trials: PointTrials = field(default_factory=PointTrials)
    threshold: float = DEFAULT_THRESHOLD  # the speedup below which graphing no longer pays

    def __post_init__(self) -> None:
        if not 1 <= len(self.axes) <= MAX_AXES:
            raise ConfigError("param", f"a sweep varies one or two parameters; got {len(self.axes)}",
                              "give --param once or twice, e.g. --param batch=1:1024:x2")
        names = [axis.name for axis in self.axes]
        if len(set(names)) != len(names):
            raise ConfigError("param", f"{names[0]} is swept twice", "give each parameter once")
        workload = self.base.workload
        touched: dict[str, str] = {}
        for axis in self.axes:
            fields = _fields_for(axis.name, workload)
            if not fields:
                where = "your own step sets its own sizes" if is_user_spec(workload) else (
                    f"the {workload} workload has no {axis.name}")
                raise ConfigError("param", f"{axis.name} changes nothing here: {where}",
                                  "sweep batch, width, hidden_layers, dtype, capture_iters or "
                                  "modes, or pick the workload it belongs to (--preset transformer "
                                  "for seq_len)")
            for name in fields:
                if name in touched:
                    raise ConfigError("param", f"{axis.name} and {touched[name]} both set {name}",
                                      "sweep only one of them")
                touched[name] = axis.name
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) or \
                not THRESHOLD_LIMITS[0] <= self.threshold <= THRESHOLD_LIMITS[1]:
            raise ConfigError("threshold", f"threshold must be a speedup from "
                                           f"{THRESHOLD_LIMITS[0]:g} to {THRESHOLD_LIMITS[1]:g}; "
                                           f"got {self.threshold!r}", "1.1 is the usual choice")
        self.base.replace(**self.point_trials.to_dict())  # the per-point trials alone are valid
        count = math.prod(len(axis.values) for axis in self.axes)
        if count > MAX_POINTS:
            raise ConfigError("param", f"the sweep has {count:,} points (at most {MAX_POINTS:,})",
                              "use fewer values: a log range (x2) or a shorter list")
        self._point_list  # every point's config is validated now (and kept)

    @cached_property
    def _point_list(self) -> tuple[SweepPoint, ...]:
        points = []
        combos: list[tuple[tuple[str, Any], ...]] = [()]
        for axis in self.axes:
            combos = [combo + ((axis.name, value),) for combo in combos for value in axis.values]
        trials = self.point_trials.to_dict()
        for index, combo in enumerate(combos):
            changes: dict[str, Any] = dict(trials)
            for name, value in combo:
                changes.update(_point_changes(name, value, self.base.workload))
            label = ", ".join(f"{n}={v}" for n, v in combo)
            try:
                config = self.base.replace(**changes)
            except ConfigError as error:
                option = error.field if error.field not in trials else f"the sweep's {error.field}"
                raise ConfigError(
                    "param", f"point {index} ({label}) is refused: {error.message}",
                    (error.hint + "; or " if error.hint else "") +
                    f"drop that value from the sweep or change {option}") from None
            if config.preset != "custom" and changed_from_preset(config):
                config = config.replace(preset="custom")  # labelled as the run command labels it
            points.append(SweepPoint(index, combo, config))
        return tuple(points)

    def points(self) -> list[SweepPoint]:
        """Every point, in the order they are measured."""
        return list(self._point_list)

    @property
    def axis_names(self) -> list[str]:
        return [axis.name for axis in self.axes]

    def axis(self, name: str) -> SweepAxis:
        return next(axis for axis in self.axes if axis.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {"axes": [axis.to_dict() for axis in self.axes], "base": self.base.to_dict(),
                "point_trials": self.point_trials.to_dict(), "threshold": self.threshold}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SweepPlan:
        """A plan saved in sweep.json; ``RunFormatError`` if it is not one."""
        try:
            axes = tuple(SweepAxis(str(a["name"]), tuple(a["values"])) for a in values["axes"])
            trials = PointTrials(**values["point_trials"])
            return cls(axes, RunConfig.from_dict(values["base"]), trials, float(values["threshold"]))
        except ConfigError as error:
            raise RunFormatError(f"the saved sweep plan is refused: {error}",
                                 "the sweep.json was edited; start a new sweep") from None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
            raise RunFormatError(f"the saved sweep plan is malformed ({type(error).__name__})",
                                 "the sweep.json was edited; start a new sweep") from None


# ----------------------------------------------------------------------------- the sweep folder

SWEEP_FILE = "sweep.json"
POINTS_FILE = "points.csv"
POINT_MODES_FILE = "point_modes.csv"
SWEEP_SCHEMA_VERSION = 1
SWEEP_STATUSES = ("running", "stopped", "done")
# pending: not measured yet; running: being measured (or the sweep crashed there); stopped: the
# sweep was stopped during it; done: measured; failed: it ended with an error, recorded.
POINT_STATUSES = ("pending", "running", "stopped", "done", "failed")
FINISHED = ("done", "failed")
POINT_FIGURES = ["eager_median_ms", "graph_median_ms", "speedup", "speedup_ci_low",
                 "speedup_ci_high", "eager_gpu_busy_ms", "graph_gpu_busy_ms", "floor_ms",
                 "capture_ms", "graph_pool_bytes", "break_even_steps", "predicted_speedup",
                 "predicted_speedup_error_pct", "elapsed_s"]
POINT_TEXT = ["status", "run", "error_kind", "error_message"]
POINT_MODE_COLUMNS = ["index", "mode", "median_ms", "speedup", "speedup_ci_low",
                      "speedup_ci_high", "one_time_ms", "memory_bytes"]
SWEEP_KIND = "sweep"  # a sweep folder's manifest kind
_SWEEP_FILES = (SWEEP_FILE, POINTS_FILE, POINT_MODES_FILE)
_POINT_FOLDER = re.compile(r"point-[0-9]{3,}")
_MAX_SWEEP_JSON_BYTES = 4 * 2**20
_MAX_TABLE_BYTES = 64 * 2**20
_MAX_MESSAGE = 400


def point_columns(axis_names: Sequence[str]) -> list[str]:
    return ["index", *axis_names, *POINT_TEXT, *POINT_FIGURES]


def _read_sweep_json(path: Path) -> dict | None:
    """sweep.json's content if ``path`` is a real folder holding one of this tool's sweeps."""
    content = read_folder_json(path, SWEEP_FILE, _MAX_SWEEP_JSON_BYTES)
    if isinstance(content, dict) and content.get("tool") == TOOL_NAME and \
            content.get("kind") == "sweep" and is_version(content.get("schema_version"),
                                                          (SWEEP_SCHEMA_VERSION,)):
        return content
    return None


def is_tool_sweep(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a real folder holding one of this tool's sweeps (its sweep.json says so)."""
    return _read_sweep_json(Path(path)) is not None


def sweep_files(path: Path) -> Owned:
    """What ``--overwrite`` removes from the sweep folder ``path``; ``NotOwned`` (naming the
    entry) when the folder is not wholly one sweep of this tool.

    The rule: ``path`` is a real folder holding one of this tool's sweeps (:func:`is_tool_sweep`)
    and nothing else: the sweep's own files (sweep.json, points.csv, point_modes.csv,
    manifest.json: regular files, no links) and point folders (``point-NNN``), each holding
    nothing but one run of this tool (``results.run_files``). With a manifest (this version on)
    the files must have the sizes it lists and the point folders be among those it lists; a sweep
    written by an earlier version has none, and the names decide. A point folder moved aside as
    damaged (``point-NNN.damaged-K``), a temporary file left by a crash or anything else refuses
    the folder."""
    if not is_tool_sweep(path):
        raise NotOwned("", "is not a sweep folder of this tool")
    return owned_folder(Path(path), SWEEP_KIND, lambda name: name in _SWEEP_FILES,
                        subfolder=run_files,
                        folder_ok=lambda name: _POINT_FOLDER.fullmatch(name) is not None)


def check_sweep_output(directory: str | os.PathLike, overwrite: bool = False,
                       resume: bool = False) -> Path:
    """The sweep folder, checked before anything runs: a new folder whose parent can be written;
    with ``resume`` one of this tool's sweeps; with ``overwrite`` a new folder or one holding one
    of this tool's sweeps and nothing else (:func:`sweep_files`; replaced). Anything else is
    refused (``ConfigError`` on ``out``), untouched. The path is read as
    ``outputs.output_path`` reads it (``~`` expanded, ``..`` taken lexically)."""
    text = os.fspath(directory)
    shown = repr(text)
    target = output_path(text)
    if not text.strip() or Path(text).name in ("", ".", "..") or \
            os.path.basename(text.rstrip(os.sep)) in ("", ".", "..") or \
            target.name in ("", ".", ".."):
        raise ConfigError("out", f"out must name a folder for the sweep; got {shown}",
                          "give a folder name such as runs/sweep-batch")
    exists = os.path.lexists(target)
    ours = is_tool_sweep(target)
    if resume:
        if not ours:
            raise ConfigError("out", f"{shown} is not a sweep folder of this tool, so there is "
                                     "nothing to resume", "name the folder of a sweep that was "
                                                          "stopped, or start a new one without --resume")
        return target
    if exists and not ours:
        what = "a run folder of this tool, not a sweep" if is_tool_run(target) else \
            "not a sweep folder of this tool"
        raise ConfigError("out", f"{shown} already exists and is {what}, so nothing was written "
                                 "there", "choose a new folder name")
    if exists and not overwrite:
        raise ConfigError("out", f"{shown} already holds a sweep",
                          "pass --resume to continue it, --overwrite to replace it, or choose a "
                          "new folder")
    if exists:
        try:
            sweep_files(target)
        except (NotOwned, OSError) as why:
            raise _not_replaced(shown, why) from None
    check_writable(target, f"the sweep folder {shown}")
    return target


def _not_replaced(shown: str, why: NotOwned | OSError) -> ConfigError:
    reason = f"cannot be read ({why.strerror})" if isinstance(why, OSError) else f"holds more: {why}"
    return ConfigError("out", f"{shown} holds a sweep of this tool but {reason}, so nothing was "
                              "written there",
                       "move what you keep out of it, or choose a new folder name; --overwrite "
                       "replaces only a folder holding nothing but files this tool wrote")


def _write_atomic(path: Path, text: str) -> None:
    replace_file(path, text.encode("utf-8"))


def _one_line(text: object, limit: int = _MAX_MESSAGE) -> str:
    flat = " ".join(str(text or "").split())
    flat = "".join(ch if ch.isprintable() else " " for ch in flat)
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def _number(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer of 400 digits
        return math.nan
    return number


def point_figures(result: RunResult) -> tuple[dict[str, float], pd.DataFrame]:
    """A measured point's headline figures (points.csv) and its modes (point_modes.csv rows).

    The GPU-busy floor per training step is the graph's profiled busy time per replay divided by
    the steps it holds (the graph's own floor), or eager's busy time per step when the graph has
    no profiled window; NaN without a profiled window."""
    figures, pair, steps = result.figures, result.pair, result.config.capture_iters
    eager_busy = figures.get("eager", "gpu_busy_us") / 1e3
    graph_busy = figures.get("graph", "gpu_busy_us") / 1e3 / steps
    point = {
        "eager_median_ms": pair.eager_ms, "graph_median_ms": pair.graph_ms,
        "speedup": pair.speedup, "speedup_ci_low": pair.speedup_ci_low,
        "speedup_ci_high": pair.speedup_ci_high,
        "eager_gpu_busy_ms": eager_busy, "graph_gpu_busy_ms": graph_busy,
        "floor_ms": graph_busy if math.isfinite(graph_busy) else eager_busy,
        "capture_ms": figures.get("graph", "capture_ms"),
        "graph_pool_bytes": figures.get("graph", "pool_bytes"),
        "break_even_steps": pair.break_even_steps,
        "predicted_speedup": _number(result.headline.get("predicted_speedup")),
        "predicted_speedup_error_pct": _number(result.headline.get("predicted_speedup_error_pct")),
    }
    modes = result.table("modes")
    if modes.empty:  # a run from before modes.csv: eager and graph from its figures
        warmup = figures.get("graph", "warmup_ms")
        modes = pd.DataFrame([
            {"mode": "eager", "median_ms": pair.eager_ms, "speedup": 1.0,
             "speedup_ci_low": math.nan, "speedup_ci_high": math.nan, "one_time_ms": 0.0,
             "memory_bytes": 0.0},
            {"mode": "graph", "median_ms": pair.graph_ms, "speedup": pair.speedup,
             "speedup_ci_low": pair.speedup_ci_low, "speedup_ci_high": pair.speedup_ci_high,
             # the one-time cost as every run states it: warm-up and capture
             "one_time_ms": point["capture_ms"] + (warmup if math.isfinite(warmup) else 0.0),
             "memory_bytes": point["graph_pool_bytes"]}])
    rows = pd.DataFrame({column: modes[column] for column in POINT_MODE_COLUMNS[1:]})
    rows["mode"] = rows["mode"].astype(str)
    return point, rows


class _SweepFolder:
    """The files of one sweep folder (written atomically, one at a time)."""

    def __init__(self, path: Path, plan: SweepPlan) -> None:
        self.path = path
        self.plan = plan
        self.points = pd.DataFrame(columns=point_columns(plan.axis_names))
        self.point_modes = pd.DataFrame(columns=POINT_MODE_COLUMNS)
        self.info: dict[str, Any] = {}

    def blank_points(self) -> pd.DataFrame:
        rows = []
        for point in self.plan.points():
            row = {"index": point.index, **dict(point.values), "status": "pending",
                   "run": point.run_name, "error_kind": "", "error_message": ""}
            row.update({name: math.nan for name in POINT_FIGURES})
            rows.append(row)
        return pd.DataFrame(rows, columns=point_columns(self.plan.axis_names))

    def write_info(self, status: str, **extra: Any) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.info.setdefault("created_at", now)
        self.info.update(extra)
        self.info.update(tool=TOOL_NAME, kind="sweep", schema_version=SWEEP_SCHEMA_VERSION,
                         status=status, updated_at=now, plan=self.plan.to_dict(),
                         points=len(self.points), files={"points": POINTS_FILE,
                                                         "point_modes": POINT_MODES_FILE})
        ordered = {key: self.info[key] for key in ("tool", "kind", "schema_version", "status")}
        ordered.update(self.info)
        _write_atomic(self.path / SWEEP_FILE, json.dumps(ordered, indent=2))
        self.write_manifest()

    def write_points(self) -> None:
        _write_atomic(self.path / POINTS_FILE, self.points.to_csv(index=False))
        _write_atomic(self.path / POINT_MODES_FILE, self.point_modes.to_csv(index=False))
        self.write_manifest()

    def write_manifest(self) -> None:
        """List the sweep's own files (their sizes now) and the plan's point folders."""
        write_manifest(self.path, SWEEP_KIND, _SWEEP_FILES,
                       [point.run_name for point in self.plan.points()])


# ----------------------------------------------------------------------------- running a sweep


@dataclass(frozen=True)
class SweepProgress:
    """Where a sweep is: points finished (measured or failed, counting those kept from before a
    resume) out of all, and the point being measured with its own progress."""

    points_total: int
    points_finished: int
    index: int | None = None  # the point being measured (None: between points)
    label: str = ""
    point_fraction: float = 0.0
    phase: str = ""
    message: str = ""

    @property
    def fraction(self) -> float:
        if not self.points_total:
            return 1.0
        current = self.point_fraction if self.index is not None else 0.0
        return min(1.0, (self.points_finished + current) / self.points_total)


@dataclass(frozen=True)
class SweepOutcome:
    """How a sweep's execution ended: ``status`` done or stopped; ``fatal`` the error that stopped
    it when no point could run (no CUDA device), else None."""

    folder: Path
    status: str
    points: pd.DataFrame
    point_modes: pd.DataFrame
    fatal: dict | None = None
    rerun_damaged: tuple[str, ...] = ()

    @property
    def failed(self) -> pd.DataFrame:
        return self.points[self.points["status"] == "failed"]


# Worker errors after which no later point can run either: stop the sweep, keep the point pending.
FATAL_KINDS = ("NoCudaError", "UsageError")
ProgressCallback = Callable[[SweepProgress], None]


# Sweep folders that a runner of this process measures now (the dashboard may hold several).
_ACTIVE_FOLDERS: set[str] = set()
_ACTIVE_GUARD = threading.Lock()


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux clock ticks, from /proc), so that a pid reused by
    another process is not taken for the sweep's; None when unknown or not running."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError, ValueError):
        return None


MAX_PID = 2**22  # Linux's largest process id (PID_MAX_LIMIT)


def _runner_pid(runner: Any) -> int | None:
    """The process id that sweep.json's runner record names: a whole number from 1 to MAX_PID
    (not a boolean, not Infinity, not a list), else None: an edited or damaged record names no
    process."""
    pid = runner.get("pid") if isinstance(runner, dict) else None
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= MAX_PID:
        return None
    return pid


def _runner_record() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid())}


def _claim(target: Path, info: Mapping[str, Any] | None) -> str:
    """Refuse a sweep folder that a runner measures now (of this process, or a live process of
    this host named in its sweep.json); otherwise mark it as this process's until released."""
    shown = repr(str(target))
    runner = (info or {}).get("runner")
    pid = _runner_pid(runner)
    if (info or {}).get("status") == "running" and pid is not None and \
            runner.get("host") == socket.gethostname() and pid != os.getpid():
        start = _process_start(pid)
        if start is not None and start == runner.get("start"):
            raise ConfigError("out", f"{shown} is being measured by process {pid}",
                              "stop that sweep first (Ctrl-C there), or wait for it to end")
    key = str(target.resolve())
    with _ACTIVE_GUARD:
        if key in _ACTIVE_FOLDERS:
            raise ConfigError("out", f"{shown} is being measured now (a sweep of this process)",
                              "stop that sweep first, or wait for it to end")
        _ACTIVE_FOLDERS.add(key)
    return key


def measured_now(directory: str | os.PathLike) -> bool:
    """Whether a runner measures the sweep in ``directory`` now (this process, or a live process
    of this host that its sweep.json names)."""
    target = Path(directory)
    with _ACTIVE_GUARD:
        if str(target.resolve()) in _ACTIVE_FOLDERS:
            return True
    info = _read_sweep_json(target) or {}
    runner = info.get("runner")
    pid = _runner_pid(runner)
    if info.get("status") != "running" or pid is None or runner.get("host") != socket.gethostname():
        return False
    start = _process_start(pid)
    return start is not None and start == runner.get("start") and pid != os.getpid()


def _release(key: str) -> None:
    with _ACTIVE_GUARD:
        _ACTIVE_FOLDERS.discard(key)


# Warm workers a sweep keeps ready at once: they warm up together between two points, so the
# sweep waits for one warm-up per this many points (on the H200 one warm-up took about 10 s and a
# seed-size point about 1.5 s, so with one spare a sweep managed only 4.4 points per minute).
SWEEP_SPARES = 8
# A point's cost for the up-front estimate (rough, and said to be): seconds per point, and per
# warm-up of the pool. CUDA: a seed-size point and a warm-up on the H200 (above). CPU: a small
# point on a warm worker (0.7 s, README "Fast repeated runs") and a warm-up on a 2-core machine
# (about 3 s); larger steps take longer.
POINT_SECONDS = {"cuda": 1.5, "cpu": 0.7}
WARM_UP_SECONDS = {"cuda": 10.0, "cpu": 3.0}


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sweep_spares(pending_points: int, device: str, cores: int | None = None) -> int:
    """Warm workers for a sweep's remaining points: one per point after the first (which runs in a
    fresh process), at most ``SWEEP_SPARES``, at most one per two cores (they warm up together,
    each importing torch on a core), and one for the CPU device, whose points use every core."""
    cores = _cores() if cores is None else cores
    limit = 1 if device == "cpu" else min(SWEEP_SPARES, max(1, cores // 2))
    return max(1, min(limit, pending_points - 1))


def expected_seconds(points: int, device: str, spares: int) -> float:
    """A sweep's expected time before it starts: ``POINT_SECONDS`` a point and a pool warm-up
    (``WARM_UP_SECONDS``) per ``spares`` points."""
    kind = "cpu" if device == "cpu" else "cuda"
    return points * POINT_SECONDS[kind] + math.ceil(points / max(1, spares)) * WARM_UP_SECONDS[kind]


def _default_launcher(pending_points: int, device: str = "cuda:0") -> Any:
    from profiler_core.orchestration.launcher import Launcher

    # The first point runs in a fresh process; each later one takes a spare.
    return Launcher(warm=True, spares=sweep_spares(pending_points, device))


class SweepRunner:
    """Measure every point of a sweep, each in its own process (``launcher``: an object with the
    ``profiler_core.orchestration.launcher.Launcher`` interface; a warm one by default, closed at the end).

    Build it with :meth:`create` (a new sweep) or :meth:`resume` (a stopped or crashed one), then
    call :meth:`run` once. ``on_progress`` is called from the launcher's reader thread as well as
    the caller's; :meth:`stop` may be called from any thread (the point being measured is
    cancelled, kept incomplete, and measured again on resume). A point that fails is recorded
    (``error_kind``, ``error_message``) and the sweep goes on.
    """

    def __init__(self, folder: _SweepFolder, *, launcher: Any = None,
                 on_progress: ProgressCallback | None = None, point_timeout_s: float | None = None,
                 rerun_damaged: Sequence[str] = (), claim: str = "") -> None:
        self._folder = folder
        self._claim = claim  # released when run() ends
        self._launcher = launcher
        self._own_launcher = launcher is None
        self.on_progress = on_progress or (lambda progress: None)  # may be set before run()
        self._point_timeout_s = point_timeout_s
        self._stop = threading.Event()
        self._process_guard = threading.Lock()
        self._process: Any = None
        self.rerun_damaged = tuple(rerun_damaged)

    @property
    def plan(self) -> SweepPlan:
        return self._folder.plan

    @property
    def folder(self) -> Path:
        return self._folder.path

    @classmethod
    def create(cls, plan: SweepPlan, directory: str | os.PathLike, *, overwrite: bool = False,
               **options: Any) -> SweepRunner:
        """A new sweep in ``directory`` (checked by :func:`check_sweep_output`; an earlier sweep
        of this tool there is replaced only with ``overwrite``)."""
        target = check_sweep_output(directory, overwrite=overwrite)
        claim = _claim(target, _read_sweep_json(target))
        try:
            if os.path.lexists(target):  # one of our sweeps, replaced as asked: its files only
                try:
                    replace_folder(target, sweep_files)  # checked again once moved aside
                except NotOwned as why:
                    raise _not_replaced(repr(str(target)), why) from None
            target.mkdir(parents=True)
            folder = _SweepFolder(target, plan)
            folder.points = folder.blank_points()
            folder.write_points()
            folder.write_info("running", runner=_runner_record())
        except BaseException:
            _release(claim)
            raise
        return cls(folder, claim=claim, **options)

    @classmethod
    def resume(cls, directory: str | os.PathLike, *, threshold: float | None = None,
               **options: Any) -> SweepRunner:
        """Continue the sweep in ``directory``: its plan from sweep.json; a point counts as
        finished when its folder holds a complete run of its config (measured) or points.csv
        recorded its failure. A point folder that is damaged or was left by a different config
        is moved aside (``point-NNN.damaged-K``, nothing deleted) and measured again."""
        target = check_sweep_output(directory, resume=True)
        info = _read_sweep_json(target) or {}
        plan = SweepPlan.from_dict(info.get("plan") or {})
        if threshold is not None:
            plan = replace(plan, threshold=threshold)
        _check_resumable(target)
        claim = _claim(target, info)
        try:
            return cls._resumed(target, plan, info, claim=claim, **options)
        except OSError as error:  # written to while resuming: a disk that filled or went away
            _release(claim)
            raise _unwritable(target, error) from None
        except BaseException:
            _release(claim)
            raise

    @classmethod
    def _resumed(cls, target: Path, plan: SweepPlan, info: Mapping[str, Any],
                 **options: Any) -> SweepRunner:
        folder = _SweepFolder(target, plan)
        folder.info = {key: value for key, value in info.items() if key in ("created_at",)}
        recorded = _read_points_quietly(target, plan)
        folder.points = folder.blank_points()
        modes_rows, damaged = [], []
        for point in plan.points():
            figures, modes, state = _reconcile(target, point, recorded.get(point.index))
            if state == "damaged":
                damaged.append(point.run_name)
                _move_aside(target / point.run_name)
                state = "pending"
            _set_row(folder.points, point.index, state=state, figures=figures,
                     error=(recorded.get(point.index) or {}) if state == "failed" else None)
            if modes is not None:
                modes_rows.append(modes.assign(index=point.index))
        if modes_rows:
            folder.point_modes = pd.concat(modes_rows, ignore_index=True)[POINT_MODE_COLUMNS]
        folder.write_points()
        folder.write_info("running", runner=_runner_record(), resumed_at=time.strftime(
            "%Y-%m-%dT%H:%M:%S"))
        return cls(folder, rerun_damaged=damaged, **options)

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop after cancelling the point being measured; every finished point is kept."""
        self._stop.set()
        with self._process_guard:
            process = self._process
        if process is not None:
            process.cancel()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- running ---------------------------------------------------------------------------------

    def _finished_count(self) -> int:
        return int(self._folder.points["status"].isin(FINISHED).sum())

    def _report(self, **current: Any) -> None:
        self.on_progress(SweepProgress(len(self._folder.points), self._finished_count(), **current))

    def run(self) -> SweepOutcome:
        """Measure every point not finished yet; returns how it ended (Ctrl-C: stopped)."""
        try:
            fatal = self._run_points()
            running = self._folder.points["status"] == "running"
            self._folder.points.loc[running, "status"] = "stopped"
            finished = bool(self._folder.points["status"].isin(FINISHED).all())
            status = "done" if finished else "stopped"
            self._folder.write_points()
            self._folder.write_info(status, **({"fatal": fatal} if fatal else {}))
        finally:
            _release(self._claim)  # only once the folder says how it ended
        self._report()
        return SweepOutcome(self.folder, status, self._folder.points.copy(),
                            self._folder.point_modes.copy(), fatal, self.rerun_damaged)

    def _run_points(self) -> dict | None:
        """Measure the points left, in order, until done, stopped or a fatal error (returned)."""
        fatal = None
        try:
            if self._launcher is None:
                pending = int((~self._folder.points["status"].isin(FINISHED)).sum())
                self._launcher = _default_launcher(pending, self.plan.base.device)
            self._report()
            for point in self.plan.points():
                if self._stop.is_set():
                    break
                if self._folder.points.at[point.index, "status"] in FINISHED:
                    continue
                fatal = self._measure(point)
                if fatal is not None:
                    break
        except KeyboardInterrupt:
            self.stop()
        finally:
            with self._process_guard:
                process, self._process = self._process, None
            if process is not None:  # interrupted while a point ran: let it keep what it measured
                process.cancel()
                process.wait(30)
            if self._own_launcher and self._launcher is not None:
                self._launcher.close()
        return fatal

    def _measure(self, point: SweepPoint) -> dict | None:
        """Run one point to its end and record it; returns a fatal error record, else None."""
        out = self.folder / point.run_name
        overwrite = False
        if os.path.lexists(out):
            try:
                run_files(out)  # this point's own earlier, incomplete run, and nothing else
                overwrite = True
            except (NotOwned, OSError):
                _move_aside(out)
        points = self._folder.points
        points.at[point.index, "status"] = "running"
        self._folder.write_points()
        self._report(index=point.index, label=point.label, phase="starting")
        started = time.monotonic()

        def on_event(event: dict) -> None:
            if not isinstance(event, dict) or event.get("event") != "progress":
                return
            fraction = _number(event.get("fraction"))
            self._report(index=point.index, label=point.label,
                         point_fraction=min(1.0, max(0.0, fraction)) if math.isfinite(fraction) else 0.0,
                         phase=_one_line(event.get("phase"), 60),
                         message=_one_line(event.get("message"), 120))

        process = self._launcher.start(point.config, out, overwrite=overwrite,
                                       timeout_s=self._point_timeout_s, on_event=on_event)
        with self._process_guard:
            self._process = process
        if self._stop.is_set():
            process.cancel()
        ending = None
        while ending is None:
            try:
                ending = process.wait(0.2)
            except KeyboardInterrupt:
                self.stop()
        with self._process_guard:
            self._process = None
        return self._record(point, out, ending, time.monotonic() - started)

    def _record(self, point: SweepPoint, out: Path, ending: Any, elapsed_s: float) -> dict | None:
        error = dict(ending.error) if getattr(ending, "error", None) else None
        state, figures, kind, message, fatal = "failed", None, "", "", None
        if ending.status == "done":
            try:
                result = RunResult.load(out)
                figures, modes = point_figures(result)
                state = "done"
                self._add_modes(point.index, modes)
            except (ProfilerError, OSError) as exc:
                kind, message = "RunFormatError", f"the point's run folder cannot be read: {exc}"
        elif ending.status == "error" and error is not None:
            kind = str(error.get("kind") or "error")
            message = str(error.get("message") or "")
            if error.get("hint"):
                message += f" ({error['hint']})"
            if kind == "Interrupted" and self._stop.is_set():
                state = "stopped"
            elif kind in FATAL_KINDS:
                state, fatal = "pending", {"kind": kind, "message": _one_line(message)}
                self._stop.set()
        elif ending.status == "cancelled" and self._stop.is_set():
            state = "stopped"
        elif ending.status == "timeout":
            kind, message = "Timeout", f"no result after {self._point_timeout_s or 0:g} s: stopped"
        else:
            tail = [line for line in str(getattr(ending, "stderr_tail", "") or "").splitlines()
                    if line.strip()]
            kind = "Crashed" if ending.status != "cancelled" else "Cancelled"
            message = (f"the run process ended ({ending.status}, exit code "
                       f"{getattr(ending, 'returncode', None)})"
                       + (f": {tail[-1]}" if tail else ""))
        figures = dict(figures or {})
        figures["elapsed_s"] = elapsed_s
        _set_row(self._folder.points, point.index, state=state, figures=figures,
                 error={"error_kind": kind, "error_message": message} if state == "failed" else None)
        self._folder.write_points()
        self._report()
        return fatal

    def _add_modes(self, index: int, modes: pd.DataFrame) -> None:
        kept = self._folder.point_modes
        kept = kept[kept["index"] != index] if len(kept) else kept
        frames = [frame for frame in (kept, modes.assign(index=index)[POINT_MODE_COLUMNS])
                  if len(frame)]
        self._folder.point_modes = pd.concat(frames, ignore_index=True) if frames else kept


def _check_resumable(target: Path) -> None:
    """Refuse (``ConfigError`` on ``out``) to resume a sweep whose folder cannot be written (a
    read-only mount): resuming rewrites points.csv and sweep.json there. A file is made and
    removed to find out."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".resume-check.", dir=target)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise _unwritable(target, error) from None


def _unwritable(target: Path, error: OSError) -> ConfigError:
    return ConfigError("out", f"cannot resume the sweep in {quoted(str(target))}: the folder "
                              f"cannot be written ({error.strerror or type(error).__name__})",
                       "copy the sweep folder to a writable disk and resume it there")


def _set_row(points: pd.DataFrame, index: int, *, state: str, figures: dict | None,
             error: Mapping[str, Any] | None) -> None:
    points.at[index, "status"] = state
    for name in POINT_FIGURES:
        if figures is not None and name in figures:
            points.at[index, name] = _number(figures[name])
    error = error or {}
    points.at[index, "error_kind"] = _one_line(error.get("error_kind", ""), 40)
    points.at[index, "error_message"] = _one_line(error.get("error_message", ""))


def _move_aside(path: Path) -> Path:
    """Rename a damaged point folder beside itself (``point-NNN.damaged-K``); nothing is deleted."""
    for suffix in range(1, 1000):
        aside = path.with_name(f"{path.name}.damaged-{suffix}")
        if not os.path.lexists(aside):
            os.replace(path, aside)
            return aside
    raise RunFormatError(f"{path} is damaged and 999 damaged copies are already kept beside it",
                         "remove the point-NNN.damaged-K folders you do not need")


def _read_points_quietly(folder: Path, plan: SweepPlan) -> dict[int, dict[str, Any]]:
    """points.csv's rows by index, or nothing when it is missing or damaged (the point folders
    are the truth; points.csv only adds what failed and why)."""
    try:
        frame = _read_points(folder, plan)
    except (RunFormatError, OSError):
        return {}
    return {int(row["index"]): row for row in frame.to_dict("records")}


def _reconcile(folder: Path, point: SweepPoint, recorded: Mapping[str, Any] | None
               ) -> tuple[dict | None, pd.DataFrame | None, str]:
    """(figures, modes, state) of a point before resuming: done when its folder holds a complete
    run of its config; failed when points.csv says so and no complete run is there; damaged when
    its folder is there but not a readable run of this point (it is measured again); else pending."""
    out = folder / point.run_name
    if not os.path.lexists(out):
        status = (recorded or {}).get("status")
        return None, None, "failed" if status == "failed" else "pending"
    if not is_tool_run(out):
        return None, None, "damaged"
    try:
        result = RunResult.load(out)
    except (ProfilerError, OSError):
        return None, None, "damaged"
    if result.config != point.config:
        return None, None, "damaged"
    if result.complete:
        figures, modes = point_figures(result)
        elapsed = _number((recorded or {}).get("elapsed_s"))
        figures["elapsed_s"] = elapsed
        return figures, modes, "done"
    # an incomplete run of this point: failed (kept) if that was recorded, else measured again
    status = (recorded or {}).get("status")
    return None, None, "failed" if status == "failed" else "pending"


class BackgroundSweep:
    """A sweep on a daemon thread, for the dashboard: wait for the device (``acquire(cancel)``
    returns False if ``cancel`` was set while waiting), run ``runner`` (already created, so its
    folder is there from the start), release (``release()``), whatever happens. The page reads
    :meth:`snapshot`; :meth:`stop` works while waiting or running."""

    def __init__(self, runner: SweepRunner, acquire: Callable[[threading.Event], bool],
                 release: Callable[[], None]) -> None:
        self._runner = runner
        runner.on_progress = lambda progress: self._set(progress=progress)
        self._acquire, self._release = acquire, release
        self.name = runner.folder.name
        self.folder = runner.folder
        self._guard = threading.Lock()
        self._cancel = threading.Event()
        self._snapshot: dict[str, Any] = {"status": "queued", "progress": None, "outcome": None,
                                          "error": "", "started_at": None, "finished_at": None}
        self._thread = threading.Thread(target=self._main, name=f"sweep-{self.name}", daemon=True)
        self._done = threading.Event()

    def start(self) -> BackgroundSweep:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._cancel.set()
        self._runner.stop()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def snapshot(self) -> dict[str, Any]:
        """status (queued, running, stopping, done, stopped, error), progress (SweepProgress or
        None), outcome (SweepOutcome or None), error (one line), started_at, finished_at."""
        with self._guard:
            snap = dict(self._snapshot)
        if snap["status"] == "running" and self._cancel.is_set():
            snap["status"] = "stopping"
        return snap

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def _set(self, **changes: Any) -> None:
        with self._guard:
            self._snapshot.update(changes)

    def _main(self) -> None:
        try:
            if not self._acquire(self._cancel):
                self._runner.stop()
                self._set(status="stopped", outcome=self._runner.run(),
                          error="stopped while waiting for the device")
                return
            try:
                self._set(status="running", started_at=time.time())
                outcome = self._runner.run()
                error = (f"{outcome.fatal['kind']}: {outcome.fatal['message']}"
                         if outcome.fatal else "")
                self._set(status=outcome.status, outcome=outcome, error=error)
            finally:
                self._release()
        except Exception as exc:  # noqa: BLE001 - said on the page, never a thread that dies silently
            self._set(status="error", error=_one_line(f"{type(exc).__name__}: {exc}"))
        finally:
            self._set(finished_at=time.time())
            self._done.set()


# ----------------------------------------------------------------------------- reading a sweep


@dataclass(frozen=True)
class SweepData:
    """A sweep folder as read: its plan, status, points.csv and point_modes.csv."""

    folder: Path
    plan: SweepPlan
    status: str
    points: pd.DataFrame
    point_modes: pd.DataFrame
    info: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.folder.name


def _read_csv(path: Path, columns: Sequence[str], text_columns: Iterable[str],
              optional: Iterable[str] = ()) -> pd.DataFrame:
    if path.is_symlink() or not path.is_file():
        raise RunFormatError(f"{path} is missing", "the sweep folder is incomplete; resume it "
                                                   "(python -m profiler_core sweep --resume)")
    if path.stat().st_size > _MAX_TABLE_BYTES:
        raise RunFormatError(f"{path} is too large for a sweep table", "the file was damaged")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise RunFormatError(f"{path} is not a readable CSV: {_one_line(error, 200)}",
                             "the file was damaged or edited; resume the sweep") from None
    for column in optional:  # a figure an older sweep did not record: not measured
        if column not in frame.columns:
            frame[column] = ""
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise RunFormatError(f"{path} lacks columns {missing}", "the file was damaged or edited")
    frame = frame[list(columns)].copy()
    text = set(text_columns)
    for column in columns:
        if column in text:
            continue
        raw = frame[column].str.strip()
        blank = raw.eq("") | raw.str.lower().eq("nan")
        values = pd.to_numeric(raw.where(~blank), errors="coerce").astype(float)
        if (values.isna() & ~blank).any():
            raise RunFormatError(f"{path}: column {column} holds text where numbers belong",
                                 "the file was damaged or edited")
        frame[column] = values
    return frame


def _read_points(folder: Path, plan: SweepPlan) -> pd.DataFrame:
    text = set(POINT_TEXT) | {a.name for a in plan.axes if not a.numeric}
    frame = _read_csv(folder / POINTS_FILE, point_columns(plan.axis_names), text, POINT_FIGURES)
    if len(frame) != len(plan.points()) or list(frame["index"]) != list(range(len(frame))):
        raise RunFormatError(f"{folder / POINTS_FILE} does not hold the plan's "
                             f"{len(plan.points())} points in order", "resume the sweep to rebuild it")
    bad = frame[~frame["status"].isin(POINT_STATUSES)]
    if len(bad):
        raise RunFormatError(f"{folder / POINTS_FILE}: unknown status {bad['status'].iloc[0][:20]!r}",
                             "the file was damaged or edited")
    frame["index"] = frame["index"].astype(int)
    for axis in plan.axes:
        if not axis.numeric:
            continue
        planned = [dict(point.values)[axis.name] for point in plan.points()]
        wrong = frame[axis.name].to_numpy(dtype=float) != np.asarray(planned, dtype=float)
        if wrong.any():  # blank, nan, inf or another number: not the point the plan measures
            at = int(np.flatnonzero(wrong)[0])
            raise RunFormatError(
                f"{folder / POINTS_FILE}: point {at} has {axis.name} "
                f"{shown(float(frame[axis.name].iloc[at]))}, not the plan's {planned[at]:,}",
                "the file was damaged or edited; resume the sweep to rebuild it")
        frame[axis.name] = planned
    return frame


def load_sweep(directory: str | os.PathLike) -> SweepData:
    """Read a sweep folder (nothing in it is executed); ``RunFormatError`` says what is wrong."""
    folder = Path(directory)
    info = _read_sweep_json(folder)
    if info is None:
        raise RunFormatError(f"{folder} is not a sweep folder of this tool (no readable "
                             f"{SWEEP_FILE})", "choose a folder written by python -m profiler_core sweep")
    plan = SweepPlan.from_dict(info.get("plan") or {})
    status = info.get("status") if info.get("status") in SWEEP_STATUSES else "running"
    points = _read_points(folder, plan)
    modes_path = folder / POINT_MODES_FILE
    point_modes = _read_csv(modes_path, POINT_MODE_COLUMNS, ("mode",)) if modes_path.exists() \
        else pd.DataFrame(columns=POINT_MODE_COLUMNS)
    if not point_modes["mode"].isin(MODE_NAMES).all():
        raise RunFormatError(f"{modes_path}: a row names an unknown mode",
                             "the file was damaged or edited")
    return SweepData(folder, plan, str(status), points, point_modes.reset_index(drop=True),
                     {k: v for k, v in info.items() if k in ("created_at", "updated_at", "fatal",
                                                             "runner", "resumed_at")})


SWEEP_LIST_COLUMNS = ["name", "path", "status", "axes", "points", "done", "failed", "updated",
                      "problem"]


def list_sweeps(runs_folder: str | os.PathLike) -> pd.DataFrame:
    """The sweep folders directly in ``runs_folder``, newest first; a damaged one is listed with
    ``problem`` saying why."""
    rows = []
    folder = Path(runs_folder)
    try:
        children = sorted(folder.iterdir()) if folder.is_dir() else []
    except OSError:
        children = []
    for child in children:
        info = _read_sweep_json(child)
        if info is None:
            continue
        row = {"name": clean_text(child.name), "path": clean_text(str(child)),
               "status": clean_text(str(info.get("status", ""))), "axes": "", "points": 0,
               "done": 0, "failed": 0, "updated": clean_text(str(info.get("updated_at", ""))[:19]),
               "problem": ""}
        if row["path"] != str(child):  # pandas' text columns and Streamlit take only UTF-8
            row["problem"] = ("the folder name is not valid UTF-8 (shown with U+FFFD); rename "
                              "the folder to open it")
            rows.append(row)
            continue
        try:
            data = load_sweep(child)
            row.update(axes=" x ".join(data.plan.axis_names), points=len(data.points),
                       done=int((data.points["status"] == "done").sum()),
                       failed=int((data.points["status"] == "failed").sum()), status=data.status)
        except ProfilerError as exc:
            row["problem"] = _one_line(clean_text(str(exc)), 200)
        except Exception as exc:  # noqa: BLE001 - a damaged sweep is listed, never a crash
            row["problem"] = _one_line(clean_text(f"{type(exc).__name__}: {exc}"), 200)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=SWEEP_LIST_COLUMNS)
    return frame.sort_values("updated", ascending=False, kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- analysis

SPEEDUP_COLUMNS = ["index", "mode", "series", "speedup", "speedup_ci_low", "speedup_ci_high",
                   "predicted_speedup", "eager_ms", "mode_ms", "floor_ms", "one_time_ms",
                   "memory_bytes"]


def speedup_table(points: pd.DataFrame, point_modes: pd.DataFrame, axis_names: Sequence[str],
                  x: str | None = None) -> pd.DataFrame:
    """One row per measured point and mode other than eager: the axes' values, the mode's speedup
    over eager with its 95% CI, eager's and the mode's medians per step, the point's GPU-busy
    floor per step, the mode's one-time cost and memory. ``series`` names the line a row belongs
    to when plotted against ``x`` (the mode and the other axes' values). ``predicted_speedup`` is
    the prediction from the eager profiled window alone (``profiler_core.analysis.predict``), for the
    graph mode of points that have one."""
    columns = [*axis_names, *SPEEDUP_COLUMNS]
    done = points[points["status"] == "done"]
    if done.empty or point_modes.empty:
        return pd.DataFrame(columns=columns)
    eager = point_modes[point_modes["mode"] == "eager"].set_index("index")["median_ms"]
    rows = point_modes[(point_modes["mode"] != "eager") & point_modes["index"].isin(done["index"])]
    predicted = done.get("predicted_speedup", pd.Series(math.nan, index=done.index))
    merged = rows.merge(done[["index", *axis_names, "floor_ms"]].assign(predicted=predicted),
                        on="index", how="inner")
    merged = merged.assign(eager_ms=merged["index"].map(eager).astype(float),
                           mode_ms=merged["median_ms"].astype(float),
                           predicted_speedup=merged["predicted"].where(merged["mode"] == "graph"))
    others = [name for name in axis_names if name != x]
    merged["series"] = [" · ".join([str(row["mode"]), *(f"{name}={row[name]}" for name in others)])
                        for _, row in merged.iterrows()]
    merged = merged[columns].sort_values(["index", "mode"], kind="stable")
    return merged.reset_index(drop=True)


def eager_table(points: pd.DataFrame, point_modes: pd.DataFrame, axis_names: Sequence[str],
                x: str | None = None) -> pd.DataFrame:
    """One row per measured point with eager's median per step, in ``speedup_table``'s columns
    (``mode`` "eager", ``mode_ms`` and the speedup NaN; ``series`` "eager" with the other axes'
    values): what a sweep without a graph timing (a CPU sweep) measured, for the medians chart."""
    columns = [*axis_names, *SPEEDUP_COLUMNS]
    done = points[points["status"] == "done"]
    if done.empty or point_modes.empty:
        return pd.DataFrame(columns=columns)
    rows = point_modes[(point_modes["mode"] == "eager") & point_modes["index"].isin(done["index"])]
    merged = rows.merge(done[["index", *axis_names, "floor_ms"]], on="index", how="inner")
    others = [name for name in axis_names if name != x]
    merged = merged.assign(
        series=[" · ".join(["eager", *(f"{name}={row[name]}" for name in others)])
                for _, row in merged.iterrows()],
        speedup=math.nan, speedup_ci_low=math.nan, speedup_ci_high=math.nan,
        predicted_speedup=math.nan, eager_ms=merged["median_ms"].astype(float), mode_ms=math.nan)
    return merged[columns].sort_values("index", kind="stable").reset_index(drop=True)


CROSSOVER_COLUMNS = ["series", "crossover", "direction", "below_x", "above_x", "text"]


def _x_text(value: float) -> str:
    """A parameter value in a sentence: 1,758 or 2.5 (never 1.76e+03)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def crossovers(table: pd.DataFrame, x: str, threshold: float = DEFAULT_THRESHOLD,
               numeric: bool = True) -> pd.DataFrame:
    """Per series of ``speedup_table`` (against ``x``): where the speedup crosses ``threshold``.

    Along increasing ``x``, the first pair of neighbouring points whose speedups bracket the
    threshold from above to below gives the crossover, interpolated linearly in log(x) between
    them (``direction`` "falls below"); without one, the first from below to above ("rises
    above"). None found is said plainly in ``text``: above at every point, below at every point,
    or too few points. A text parameter (dtype, modes) has no crossover."""
    rows = []
    for series, group in table.groupby("series", sort=False):
        data = group[[x, "speedup"]].copy()
        data["speedup"] = pd.to_numeric(data["speedup"], errors="coerce")
        data = data[np.isfinite(data["speedup"].to_numpy(dtype=float))]
        row = {"series": series, "crossover": math.nan, "direction": "", "below_x": math.nan,
               "above_x": math.nan}
        if not numeric:
            row["text"] = f"{series}: no crossover along {x} (not a number)"
            rows.append(row)
            continue
        data = data.sort_values(x, kind="stable")
        xs, ys = data[x].to_numpy(dtype=float), data["speedup"].to_numpy(dtype=float)
        if len(xs) < 2:
            row["text"] = f"{series}: too few measured points to look for a crossover"
            rows.append(row)
            continue
        found = None
        for want in ("falls below", "rises above"):
            for i in range(len(xs) - 1):
                a, b = ys[i], ys[i + 1]
                falls = a >= threshold > b
                rises = a < threshold <= b
                if (falls if want == "falls below" else rises) and xs[i] > 0 and xs[i + 1] > 0:
                    found = (want, i)
                    break
            if found:
                break
        if found is None:
            where = f"{x} {_x_text(xs[0])} to {_x_text(xs[-1])}"
            row["text"] = (f"{series}: no crossover; the speedup stays at or above "
                           f"{threshold:.2f}x over {where}" if (ys >= threshold).all() else
                           f"{series}: no crossover; the speedup is below {threshold:.2f}x at "
                           f"every point of {where}")
            rows.append(row)
            continue
        direction, i = found
        a, b = ys[i], ys[i + 1]
        share = (threshold - a) / (b - a)
        value = math.exp(math.log(xs[i]) + share * (math.log(xs[i + 1]) - math.log(xs[i])))
        row.update(crossover=value, direction=direction,
                   above_x=xs[i] if direction == "falls below" else xs[i + 1],
                   below_x=xs[i + 1] if direction == "falls below" else xs[i])
        row["text"] = (f"{series}: the speedup {direction} {threshold:.2f}x at {x} ≈ "
                       f"{_x_text(value)} (between {_x_text(xs[i])}: {a:.2f}x and "
                       f"{_x_text(xs[i + 1])}: {b:.2f}x)")
        rows.append(row)
    return pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)


BREAK_EVEN_COLUMNS = ["index", "mode", "saving_ms", "one_time_ms", "memory_mib", "break_even_steps",
                      "pays_back"]


def break_even_table(table: pd.DataFrame, axis_names: Sequence[str]) -> pd.DataFrame:
    """Per point and mode of ``speedup_table``: the saving per training step (eager median minus
    the mode's), the one-time cost (capture with its warm-up, or compilation) and the memory it
    kept, and the steps after which the saving has paid the cost back (inf: never, the mode is
    not faster; NaN: not measured)."""
    columns = [*axis_names, *BREAK_EVEN_COLUMNS]
    if table.empty:
        return pd.DataFrame(columns=columns)
    out = table[["index", *axis_names, "mode"]].copy()
    out["saving_ms"] = table["eager_ms"] - table["mode_ms"]
    out["one_time_ms"] = table["one_time_ms"]
    out["memory_mib"] = table["memory_bytes"] / 2**20
    out["break_even_steps"] = [stats.break_even_iterations(cost, eager, mode) for cost, eager, mode
                               in zip(table["one_time_ms"], table["eager_ms"], table["mode_ms"])]
    out["pays_back"] = [("never (graph not faster)" if math.isinf(steps) else
                         "not measured" if math.isnan(steps) else f"after {steps:,.0f} steps")
                        for steps in out["break_even_steps"]]
    return out[columns].reset_index(drop=True)


AMORTISATION_COLUMNS = ["capture_iters", "series", "graph_ms", "eager_ms", "floor_ms",
                        "above_floor_pct"]


def amortisation_table(table: pd.DataFrame, axis_names: Sequence[str]) -> pd.DataFrame:
    """Time per training step of the graph against the training steps captured in one graph
    (``capture_iters`` must be a swept axis; otherwise empty), beside eager and the GPU-busy
    floor: how far one replay's launch cost is spread. ``series`` names the other axis's value."""
    if "capture_iters" not in axis_names or table.empty:
        return pd.DataFrame(columns=AMORTISATION_COLUMNS)
    graph = table[table["mode"] == "graph"]
    others = [name for name in axis_names if name != "capture_iters"]
    out = pd.DataFrame({
        "capture_iters": graph["capture_iters"].astype(int),
        "series": [" · ".join(f"{name}={row[name]}" for name in others) or "graph"
                   for _, row in graph.iterrows()],
        "graph_ms": graph["mode_ms"], "eager_ms": graph["eager_ms"], "floor_ms": graph["floor_ms"]})
    out["above_floor_pct"] = (out["graph_ms"] / out["floor_ms"] - 1.0) * 100.0
    return out.sort_values(["series", "capture_iters"], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- text output


def format_sweep(points: pd.DataFrame, point_modes: pd.DataFrame, plan: SweepPlan) -> str:
    """The sweep's table and its crossover(s) as plain text (the CLI's summary)."""
    shown = points[["index", *plan.axis_names, "status", "eager_median_ms", "graph_median_ms",
                    "speedup", "speedup_ci_low", "speedup_ci_high", "predicted_speedup",
                    "floor_ms", "break_even_steps", "error_kind"]].copy()
    lines = ["Points (ms per training step; speedup with its 95% CI; predicted: from the eager "
             "profiled window alone; floor: GPU busy per step)",
             shown.to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")]
    x = plan.axes[0]
    table = speedup_table(points, point_modes, plan.axis_names, x.name)
    lines += ["", f"Crossover (threshold {plan.threshold:.2f}x, along {x.name}):"]
    if table.empty:
        measured = (points["status"] == "done").any()
        lines.append("  no graph timing in the measured points (a CPU sweep times the eager half "
                     "only)" if measured else "  no point was measured")
    for text in crossovers(table, x.name, plan.threshold, x.numeric)["text"]:
        lines.append(f"  {text}")
    failed = points[points["status"] == "failed"]
    for _, row in failed.iterrows():
        lines.append(f"point {int(row['index'])} failed ({row['error_kind']}): {row['error_message']}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the command line


def plan_from_args(args: Any) -> SweepPlan:
    """``python -m profiler_core sweep``'s options as a plan: the axes from ``--param``, the base
    from ``--preset`` and the run options, the per-point trials from the options given (the
    sweep's shorter defaults otherwise)."""
    from profiler_core.cli import parser as cli
    if not args.param:
        raise ConfigError("param", "a sweep needs at least one --param NAME=VALUES",
                          "e.g. --param batch=1:1024:x2")
    axes = tuple(parse_param(text) for text in args.param)
    defaults = PointTrials()
    trials = PointTrials(**{name: getattr(args, name) if getattr(args, name, None) is not None
                            else getattr(defaults, name) for name in defaults.to_dict()})
    threshold = DEFAULT_THRESHOLD if args.threshold is None else args.threshold
    return SweepPlan(axes, cli.config_from_args(args), trials, threshold)


def saved_plan(directory: str | os.PathLike) -> SweepPlan:
    """The plan of the sweep in ``directory`` (``ConfigError`` on ``out`` if it is not one)."""
    target = check_sweep_output(directory, resume=True)
    return SweepPlan.from_dict((_read_sweep_json(target) or {}).get("plan") or {})


def _check_machine(plan: SweepPlan) -> None:
    """What the plan asks of this machine, checked before the first point: its CPUs
    (``--cpu-affinity``), then CUDA."""
    if plan.base.cpu_affinity is not None:
        from profiler_core.spec import hostinfo
        hostinfo.check_cpus(plan.base.cpu_affinity)  # a CPU this machine lacks: one line, exit 2
    _check_cuda(plan)


def _check_cuda(plan: SweepPlan) -> None:
    if not plan.base.is_cuda:
        return
    import torch

    if not torch.cuda.is_available():
        raise NoCudaError("no CUDA device is present (torch.cuda.is_available() is False)",
                          "run the sweep on a machine with an NVIDIA GPU and a CUDA build of "
                          "torch, or pass --device cpu to try it on the CPU (eager half only)")


def _bar_callback(bar: Any) -> ProgressCallback:
    from profiler_core.spec.progress import Progress

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


def command_sweep(args: Any) -> int:
    """``python -m profiler_core sweep``: plan (or resume), run with a progress bar, print the
    table and the crossover. Exit codes: 0 every point measured; 2 a refused plan or folder;
    3 no CUDA device; 130 stopped (Ctrl-C, SIGTERM: finished points kept, ``--resume``
    continues); a point failed: the exit code of its error kind (4 capture, 5 memory, 6 GPU
    fault; 1 crashed or timed out), after every other point was measured."""
    import sys

    from profiler_core.cli import parser as cli
    from profiler_core.spec.schema import ERROR_KINDS

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
    finished = int(runner._folder.points["status"].isin(FINISHED).sum())
    print(f"Sweep of {' x '.join(plan.axis_names)}: {len(plan.points())} points"
          + (f" ({finished} already finished)" if finished else "") + f", into {runner.folder}",
          file=sys.stderr)
    pending = len(plan.points()) - finished
    spares = sweep_spares(pending, plan.base.device)
    print(f"Expected time: about {_duration(expected_seconds(pending, plan.base.device, spares))} "
          f"for {pending:,} point(s), {spares} warm worker(s) at once ({_cores()} cores); a rough "
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
