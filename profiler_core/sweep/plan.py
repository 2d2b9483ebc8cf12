"""A sweep's plan: which settings it varies over which values, and the config of every point.

Scope: the value grammar (``batch=1:1024:x2``, ``dtype=fp32,bf16``, ``modes=graph,compile``; for
the user's own step, any setting of its build function: ``--param batch=1:64:x2``),
:class:`SweepAxis`, the shorter trials every point runs (:class:`PointTrials`) and
:class:`SweepPlan` (frozen), whose every point's ``RunConfig`` is built when the plan is: a plan
that exists is one whose every point can run; a bad value raises ``ConfigError`` naming the point
and what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from profiler_core.spec.config import (
    DTYPES,
    INT_LIMITS,
    SETTING_NAME_PATTERN,
    RunConfig,
    SettingValue,
    changed_from_preset,
    is_user_spec,
)
from profiler_core.spec.errors import ConfigError, RunFormatError, quoted, shown, shown_int
from profiler_core.spec.fields import read_number, read_text, read_whole_number, spec
from profiler_core.spec.modes import ALWAYS_MEASURED, MODE_NAMES
from profiler_core.spec.shapes import MAX_BUCKETS
from profiler_core.spec.workload_kinds import workload_named

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
    "buckets": "with --vary: the number of buckets a graph per bucket pads up to, at the "
               "sequence's quantiles (buckets=1:16:x2)",
}
ALIASES = {"d-in": "d_in", "d-out": "d_out", "hidden-layers": "hidden_layers", "layers":
           "hidden_layers", "seq-len": "seq_len", "capture-iters": "capture_iters",
           "iters-per-graph": "capture_iters", "precision": "dtype", "mode": "modes"}
TEXT_PARAMETERS = ("dtype", "modes")
_ANY_WORKLOAD: dict[str, tuple[str, ...]] = {"dtype": ("dtype",), "capture_iters": ("capture_iters",),
                                             "modes": ("modes",), "buckets": ("buckets",)}
MAX_AXES = 2
MAX_POINTS = 2_000  # about 100 minutes at 20 points a minute
DEFAULT_THRESHOLD = 1.1
THRESHOLD_LIMITS = (1.0, 100.0)
RANGE_EXAMPLE = "a list such as 1,8,64 or a range such as 1:1024:x2 (x: multiply, +: add)"
# Names a setting of the user's own step may not take as a sweep axis: the columns a sweep's
# tables hold beside the axes (points.csv, point_modes.csv, the analysis's tables).
RESERVED_AXIS_NAMES = frozenset({
    "index", "status", "run", "error_kind", "error_message", "mode", "series", "x", "median_ms",
    "speedup", "speedup_ci_low", "speedup_ci_high", "one_time_ms", "memory_bytes", "memory_mib",
    "eager_median_ms", "graph_median_ms", "eager_gpu_busy_ms", "graph_gpu_busy_ms", "floor_ms",
    "capture_ms", "graph_pool_bytes", "break_even_steps", "predicted_speedup",
    "predicted_speedup_error_pct", "elapsed_s", "saving_ms", "graph_ms", "eager_ms", "crossover",
    "direction", "below_x", "above_x", "text", "mode_ms", "predicted"})


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
    if name == "buckets":
        return 1, MAX_BUCKETS
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
            factor = read_number(step[1:])
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
        values: list[int] = []
        value = float(start)
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


def _setting_item(text: str) -> SettingValue:
    """One listed value of an own step's setting: a whole number, a number or text (the
    setting's kind, from the build function's signature, converts it before the sweep runs)."""
    text = text.strip()
    if text.lstrip("+-").isascii() and text.lstrip("+-").isdigit():
        return int(text)
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def parse_setting_values(name: str, text: str) -> tuple:
    """The values of an own step's setting: a range of whole numbers as ``parse_values`` reads
    one, or a list of numbers or texts."""
    text = str(text).strip()
    if not text:
        raise _refuse(name, "no values given")
    if ":" in text:
        return tuple(_range_values(name, text))
    return tuple(dict.fromkeys(_setting_item(item) for item in text.split(",") if item.strip()))


def is_setting_axis(name: str, workload: str) -> bool:
    """Whether a swept name is a setting of the user's own step: every name but the parameters
    that apply to any workload (dtype, capture_iters, modes) when the workload is an own step."""
    return is_user_spec(workload) and ALIASES.get(name.lower(), name.lower()) not in _ANY_WORKLOAD


def parse_param(text: str, workload: str = "") -> SweepAxis:
    """``--param NAME=VALUES`` as an axis; for the user's own step (``workload``), NAME may be
    any setting of its build function."""
    name, sep, values = str(text).partition("=")
    if not sep:
        raise ConfigError("param", f"expected NAME=VALUES, got {str(text)[:60]!r}",
                          "e.g. --param batch=1:1024:x2 or --param dtype=fp32,bf16")
    if is_setting_axis(name.strip(), workload):
        return SweepAxis(name.strip(), parse_setting_values(name.strip(), values), setting=True)
    name = parameter_name(name)
    return SweepAxis(name, parse_values(name, values))


@dataclass(frozen=True)
class SweepAxis:
    """One swept parameter and its values, in the order they are measured."""

    name: str
    values: tuple
    setting: bool = False  # a setting of the user's own step (its build function's parameter)

    def __post_init__(self) -> None:
        if self.setting:
            if not SETTING_NAME_PATTERN.fullmatch(self.name) or self.name in RESERVED_AXIS_NAMES:
                raise ConfigError("param", f"cannot sweep a setting named {shown(self.name)!r}",
                                  "settings are keyword parameters of your build function; "
                                  f"these names are taken by the sweep's tables: "
                                  f"{', '.join(sorted(RESERVED_AXIS_NAMES))}")
        elif self.name not in PARAMETERS:
            raise ConfigError("param", f"cannot sweep {self.name!r}",
                              f"choose among {', '.join(PARAMETERS)}")
        if not self.values:
            raise _refuse(self.name, "no values given")
        if len(set(self.values)) != len(self.values):
            raise _refuse(self.name, "a value is given twice", "name each value once")
        if self.setting:
            for value in self.values:
                if not isinstance(value, (bool, int, float, str)):
                    raise _refuse(self.name, f"expected numbers or texts, got {quoted(value)}")
        elif self.numeric:
            low, high = _limits(self.name)
            for value in self.values:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise _refuse(self.name, f"expected whole numbers, got {quoted(value)}")
                if not low <= value <= high:
                    raise _refuse(self.name, f"{shown_int(value)} is outside {low:,} to {high:,}",
                                  f"keep every value from {low:,} to {high:,}")

    @property
    def numeric(self) -> bool:
        if self.setting:
            return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)
        return self.name not in TEXT_PARAMETERS

    @property
    def log_scale(self) -> bool:
        """Whether its values are best shown on a log axis (numbers spanning 8x or more)."""
        return self.numeric and min(self.values) > 0 and max(self.values) / min(self.values) >= 8

    def to_dict(self) -> dict[str, Any]:
        values: dict[str, Any] = {"name": self.name, "values": list(self.values)}
        if self.setting:
            values["setting"] = True
        return values


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


def _fields_for(axis: str, workload: str, setting: bool = False) -> tuple[str, ...]:
    if setting:
        return (f"workload_args.{axis}",)
    if axis in _ANY_WORKLOAD:
        return _ANY_WORKLOAD[axis]
    declared = workload_named(workload)  # each workload declares its sweep axes
    return declared.sweep_fields(axis) if declared is not None else ()


def _point_changes(axis: str, value: Any, workload: str) -> dict[str, Any]:
    if axis == "modes":
        return {"modes": _modes_value(axis, value)}
    if axis == "buckets":  # that many buckets at the sequence's quantiles
        return {"buckets": f"quantiles:{value}"}
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
            if axis.setting and not is_user_spec(workload):
                raise ConfigError("param", f"{axis.name} is a setting of your own step, and "
                                           f"{workload} is a built-in workload",
                                  "sweep a setting with --workload package.module:function")
            if axis.name == "buckets" and self.base.vary is None:
                raise ConfigError("param", "buckets changes nothing here: the step's shapes are "
                                           "fixed", "sweep buckets with --vary NAME=DIST")
            fields = _fields_for(axis.name, workload, axis.setting)
            if not fields:
                where = ("your own step's sizes are its build function's settings: sweep one of "
                         "those by its name" if is_user_spec(workload) else
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
        _ = self._point_list  # every point's config is validated now (and kept)

    @cached_property
    def _point_list(self) -> tuple[SweepPoint, ...]:
        points = []
        combos: list[tuple[tuple[str, Any], ...]] = [()]
        for axis in self.axes:
            combos = [combo + ((axis.name, value),) for combo in combos for value in axis.values]
        trials = self.point_trials.to_dict()
        settings_axes = {axis.name for axis in self.axes if axis.setting}
        for index, combo in enumerate(combos):
            changes: dict[str, Any] = dict(trials)
            settings = self.base.settings
            for name, value in combo:
                if name in settings_axes:
                    settings[name] = value
                else:
                    changes.update(_point_changes(name, value, self.base.workload))
            if settings_axes:
                changes["workload_args"] = settings
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
            axes = tuple(SweepAxis(str(a["name"]), tuple(a["values"]), a.get("setting") is True)
                         for a in values["axes"])
            trials = PointTrials(**values["point_trials"])
            return cls(axes, RunConfig.from_dict(values["base"]), trials, float(values["threshold"]))
        except ConfigError as error:
            raise RunFormatError(f"the saved sweep plan is refused: {error}",
                                 "the sweep.json was edited; start a new sweep") from None
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
            raise RunFormatError(f"the saved sweep plan is malformed ({type(error).__name__})",
                                 "the sweep.json was edited; start a new sweep") from None


