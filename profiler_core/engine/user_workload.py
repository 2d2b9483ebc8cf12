"""The user's own training step: ``--workload package.module:function``.

Finding, calling and checking the user's ``build(device, **settings)`` and what it returns
(docs/cli.md, "Your own training step"; ``profiler_core/examples/`` holds worked examples): the
four-part form (model, batch, loss, optimizer: the tool writes the loop) or the whole step
(``step(batch)``: the user's own loop body), and the build's keyword settings
(``--workload-arg``, a sweep's own-step axes) read from its signature. No running. Every
problem, including whatever the user's code raises, is a ``WorkloadError`` of one line naming
their file, line and function (exit 2).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import linecache
import math
import os
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from profiler_core.engine import batches
from profiler_core.spec.config import RunConfig, SettingValue, is_user_spec
from profiler_core.spec.errors import ConfigError, WorkloadError

EXAMPLE = "profiler_core.examples.user_step:build"
REQUIRED_KEYS = ("model", "batch")  # the four-part form
OPTIONAL_KEYS = ("loss", "optimizer")
# The whole step: ``step(batch)`` is the user's training step; the tool captures it as it is.
WHOLE_STEP_REQUIRED = ("step", "batch")
WHOLE_STEP_OPTIONAL = ("model", "optimizer", "after_step")
ALL_KEYS = (*REQUIRED_KEYS, *OPTIONAL_KEYS, "step", "after_step")


@dataclass(frozen=True)
class StepParts:
    """One replica of a training step: the four-part form (``step`` None: the tool runs
    zero_grad, forward, loss, backward and the optimizer step) or the whole step (``step`` given:
    the user's function of one batch does all of it; ``model`` and ``optimizer`` optional, for
    graphed_callables, parity and the readiness checks)."""

    model: nn.Module | None
    batch: Callable[[torch.Generator], Any]  # one batch on the device (four-part: (input, target))
    loss: Callable[[Any, Any], torch.Tensor] | None  # None with a whole step
    optimizer: torch.optim.Optimizer | None  # None: a whole step that returned none
    step: Callable[[Any], Any] | None = None  # the whole step, a function of one batch
    after_step: Callable[[], Any] | None = None  # run after every step outside any graph

    @property
    def whole_step(self) -> bool:
        return self.step is not None

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        """(name, parameter) of what the step trains: the model's, else the optimizer's (named
        by their place in its param groups); empty when neither was given."""
        if self.model is not None:
            return list(self.model.named_parameters())
        if self.optimizer is None:
            return []
        return [(f"param_groups[{g}][{i}]", p) for g, group in enumerate(self.optimizer.param_groups)
                for i, p in enumerate(group["params"])]


_TOOL_DIR = Path(__file__).resolve().parents[1]
_EXAMPLES_DIR = _TOOL_DIR / "examples"  # the worked example is user code
_LIBRARY_DIRS = tuple({Path(p).resolve() for p in (
    *(sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")),
    Path(torch.__file__).parent) if p})


def _is_user_file(filename: str) -> bool:
    """Whether a traceback's file is the user's code: not this tool (its examples excepted), not
    torch, the standard library or an installed package, not a frozen module (``<frozen ...>``)."""
    if not filename or filename.startswith("<"):
        return False
    path = Path(os.path.abspath(filename))
    if _TOOL_DIR in path.parents and _EXAMPLES_DIR not in path.parents:
        return False
    return not any(root == path or root in path.parents for root in _LIBRARY_DIRS)


def _shown_path(filename: str) -> str:
    """A file as the user would type it: relative to the current folder when under it."""
    try:
        return os.path.relpath(filename) if not os.path.relpath(filename).startswith("..") else filename
    except ValueError:  # another drive (Windows)
        return filename


def user_frame(error: BaseException) -> str | None:
    """Where in the user's code ``error`` was raised: "file:line in function" of the innermost
    traceback frame in the user's code (None when no frame is theirs)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if _is_user_file(f.filename)]
    if not frames:
        return None
    frame = frames[-1]
    return f"{_shown_path(frame.filename)}:{frame.lineno} in {frame.name}"


def _tool_call(error: BaseException) -> str | None:
    """The tool's own line that called into the user's parts when no frame is the user's (a torch
    loss given as ``loss``, a batch of the wrong kind): "`code` (file:line)"."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if f.filename.startswith(str(_TOOL_DIR)) and not _is_user_file(f.filename)]
    if not frames:
        return None
    frame = frames[-1]
    code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    return f"`{code}` ({_shown_path(frame.filename)}:{frame.lineno})"


def _what_was_raised(error: BaseException) -> str:
    """``ValueError: message`` (first line); ``SystemExit`` reads as the sys.exit call it was."""
    if isinstance(error, SystemExit):
        return f"called sys.exit({error.code!r})"
    text = str(error).strip().splitlines()
    kind = type(error).__name__
    if not isinstance(error, Exception):
        kind += " (a BaseException, not an Exception)"
    return f"raised {kind}: {text[0]}" if text else f"raised {kind}"


def user_code_error(spec: str, error: BaseException, stage: str = "") -> WorkloadError:
    """One line for an exception that came out of the user's step ``spec``: what it raised, and
    where (the user's file, line and function, or the tool's line that called their part)."""
    where = user_frame(error)
    if where is not None:
        location = f" at {where}"
    else:
        call = _tool_call(error)
        location = f" while the tool ran {call}" if call else ""
    during = f" {stage}" if stage else ""
    hint = "the error is in your step, not in the tool: fix it there"
    if isinstance(error, ModuleNotFoundError) and error.name:
        hint = f"install {error.name} in this Python environment (or point --workload elsewhere)"
    for marker, known_fix in KNOWN_CAUSES:
        if marker in str(error):
            hint = known_fix
    return WorkloadError(f"your step {spec}{during} {_what_was_raised(error)}{location}", hint)


# What torch says when the user's object cannot do what the tool asked of it, and what to change.
KNOWN_CAUSES = (
    ("If capturable=True, params and state_steps must be on supported devices",
     "capturable=True needs the parameters on a CUDA device: build the optimizer with "
     "capturable=(device.type == 'cuda'), so that the same step also runs on the CPU"),
)


def _hint() -> str:
    return f"point --workload at a function such as {EXAMPLE} (see README, 'Your own training step')"


def find_function(spec: str) -> Callable[..., Any]:
    """Import ``package.module`` and return its ``function``; one-line errors otherwise. The
    current folder is importable, as for ``python -m``."""
    if not is_user_spec(spec):
        raise WorkloadError(f"--workload {spec!r} is not of the form package.module:function",
                            _hint())
    module_name, function_name = spec.split(":")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise WorkloadError(f"cannot import {module_name!r}: {error}".splitlines()[0],
                            "check the module path and that it is importable from this folder"
                            " (or on PYTHONPATH)") from None
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or the time limit: not the module's doing
        raise
    except BaseException as error:  # the user's module failed while importing
        where = user_frame(error)
        raise WorkloadError(f"importing {module_name!r} {_what_was_raised(error)}"
                            + (f" at {where}" if where else ""),
                            "fix the module so that it imports cleanly; code that ends the program"
                            " belongs under if __name__ == '__main__':") from None
    function = getattr(module, function_name, None)
    if function is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "") if names else "none"
        raise WorkloadError(f"module {module_name!r} has no function {function_name!r} "
                            f"(its functions: {shown})", _hint())
    if not callable(function):
        raise WorkloadError(f"{spec} is a {type(function).__name__}, not a function", _hint())
    return function


@dataclass(frozen=True)
class Setting:
    """One keyword parameter of the user's build function: a setting of their step."""

    name: str
    default: Any
    kind: type | None  # bool, int, float or str; None: a default of another type (not settable)

    def describe(self) -> str:
        kind = self.kind.__name__ if self.kind is not None else type(self.default).__name__
        return f"{self.name} ({kind}, default {self.default!r})"


SETTING_KINDS = (bool, int, float, str)
_KIND_NAMES = {kind.__name__: kind for kind in SETTING_KINDS}


def _setting_kind(parameter: inspect.Parameter) -> type | None:
    """A parameter's kind: its annotation when that is bool, int, float or str (written as a type
    or, under ``from __future__ import annotations``, as its name), else its default's type."""
    annotation = parameter.annotation
    if annotation in SETTING_KINDS:
        return annotation
    if isinstance(annotation, str) and annotation.strip() in _KIND_NAMES:
        return _KIND_NAMES[annotation.strip()]
    default = parameter.default
    return type(default) if type(default) in SETTING_KINDS else None


def step_settings(spec: str) -> dict[str, Setting]:
    """The settings of the user's step: the build function's parameters after the device that
    have a default (``def build(device, *, batch=32, seq_len=128)``), by name."""
    function = find_function(spec)
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin or C function without a signature
        return {}
    return {p.name: Setting(p.name, p.default, _setting_kind(p)) for p in parameters[1:]
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty}


_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def _converted(spec: str, setting: Setting, value: SettingValue) -> SettingValue:
    """``value`` as the setting's kind (text from the command line, a number from a sweep); a
    one-line ``ConfigError`` when it is not one."""
    kind = setting.kind
    wrong = ConfigError("workload_arg", f"{setting.name} of {spec} takes a {kind.__name__ if kind else '?'}"
                                        f"; got {value!r}"[:300],
                        f"give {setting.describe()} a value of its kind")
    if kind is None:
        raise ConfigError("workload_arg", f"{setting.name} of {spec} has a default of type "
                                          f"{type(setting.default).__name__}, which cannot be set "
                                          "from the command line",
                          "only bool, int, float and str settings can be set (or annotate it)")
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise wrong
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value).strip().replace("_", "")
        if isinstance(value, str) and text.lstrip("+-").isascii() and text.lstrip("+-").isdigit():
            return int(text)
        raise wrong
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        else:
            try:
                number = float(str(value).strip())
            except ValueError:
                raise wrong from None
        if not math.isfinite(number):
            raise wrong
        return number
    return str(value)


def check_settings(spec: str, values: Mapping[str, SettingValue]) -> tuple[tuple[str, SettingValue], ...]:
    """The settings given for the user's step, checked against its build function's signature
    before anything runs and converted to each setting's kind: an unknown name is refused with
    the closest names, a value of the wrong kind in one line (``ConfigError``, exit 2)."""
    known = step_settings(spec)
    converted = []
    for name, value in values.items():
        setting = known.get(name)
        if setting is None:
            close = difflib.get_close_matches(name, list(known), n=3)
            listed = ", ".join(s.describe() for s in known.values()) or "none"
            raise ConfigError("workload_arg", f"{spec} has no setting {name!r}"
                                              + (f" (closest: {', '.join(close)})" if close else ""),
                              f"its settings (keyword parameters with defaults of the build "
                              f"function): {listed}")
        converted.append((name, _converted(spec, setting, value)))
    return tuple(sorted(converted))


def with_checked_settings(config: RunConfig) -> RunConfig:
    """``config`` with its own step's settings checked and converted (``check_settings``); a
    built-in workload's config as it is."""
    if not is_user_spec(config.workload) or not config.workload_args:
        return config
    return config.replace(workload_args=check_settings(config.workload, config.settings))


def build_parts(spec: str, device: torch.device,
                settings: Mapping[str, SettingValue] | None = None) -> StepParts:
    """Call the user's function for one replica, with its settings, and check what it returned."""
    function = find_function(spec)
    try:
        returned = function(device, **(settings or {}))
    except KeyboardInterrupt:
        raise
    except TypeError as error:
        if user_frame(error) is not None:  # raised inside the function, not by the call itself
            raise user_code_error(spec, error) from None
        raise WorkloadError(f"calling {spec}(device) failed: {str(error).splitlines()[0]}",
                            "the function must take one argument, the torch.device (its settings, "
                            "if any, as keyword parameters with defaults)") from None
    except BaseException as error:  # the user's function failed
        raise user_code_error(spec, error) from None
    return check_parts(spec, returned)


def check_batch(spec: str, batch: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(input, target)`` pair that ``batch(generator)`` returned, checked: two tensors on
    ``device``; a ``WorkloadError`` naming what is wrong otherwise."""
    how = "return x, y: a tuple of two tensors"
    _refuse_iterators(spec, batch, "an (input, target) pair", f"{how}, with return, not yield")
    if not isinstance(batch, (tuple, list)):
        raise WorkloadError(f"{spec}: batch(generator) returned a {type(batch).__name__}, not an "
                            "(input, target) pair", how)
    if len(batch) != 2:
        raise WorkloadError(f"{spec}: batch(generator) returned {len(batch)} values, not 2 "
                            "(input, target)", f"{how}; the model is called as model(input)")
    for name, value in zip(("input", "target"), batch):
        if not isinstance(value, torch.Tensor):
            raise WorkloadError(f"{spec}: batch(generator)'s {name} is a {type(value).__name__}, "
                                "not a tensor", "the graph copies each batch into fixed tensors: "
                                                f"{how}")
        if batches.problem(value, device) is not None:
            raise WorkloadError(f"{spec}: batch(generator)'s {name} is on {value.device}, not on "
                                f"{device}", "create it on the device your function is given "
                                             "(device=device)")
    return batch[0], batch[1]


def _refuse_iterators(spec: str, batch: Any, wanted: str, how: str) -> None:
    if isinstance(batch, (types.GeneratorType, map, filter, zip)) or (
            hasattr(batch, "__next__") and not isinstance(batch, (tuple, list))):
        raise WorkloadError(f"{spec}: batch(generator) returned a {type(batch).__name__}, not "
                            f"{wanted}", how)


def check_step_batch(spec: str, batch: Any, device: torch.device) -> tuple[Any]:
    """What a whole step's ``batch(generator)`` returned, checked: a tensor, or a tuple, list or
    dict of tensors, on ``device``; returned as the step's one argument."""
    how = ("return the batch your step takes: a tensor, or a tuple, list or dict of tensors, "
           "created on the device your function is given")
    _refuse_iterators(spec, batch, "a batch of tensors", f"{how} (with return, not yield)")
    found = batches.problem(batch, device)
    if found is not None:
        raise WorkloadError(f"{spec}: batch(generator) returned a batch that cannot be copied into "
                            f"a graph's static inputs: {found}", how)
    return (batch,)


def draw_batch(spec: str, parts: StepParts, generator: torch.Generator,
               device: torch.device) -> tuple[Any, ...]:
    """One batch drawn with ``generator`` and checked, as the step's arguments: ``(input,
    target)`` for the four-part form, ``(batch,)`` for a whole step."""
    drawn = parts.batch(generator)
    if parts.whole_step:
        return check_step_batch(spec, drawn, device)
    return check_batch(spec, drawn, device)


def check_parts(spec: str, returned: Any) -> StepParts:
    """A :class:`StepParts` from what the function returned, or a ``WorkloadError`` naming the
    part that is wrong."""
    values: dict[str, Any]
    if isinstance(returned, StepParts):
        values = {"model": returned.model, "batch": returned.batch, "loss": returned.loss,
                  "optimizer": returned.optimizer, "step": returned.step,
                  "after_step": returned.after_step}
    elif isinstance(returned, dict):
        unknown = sorted(str(key) for key in set(returned) - set(ALL_KEYS))
        if unknown:
            raise WorkloadError(f"{spec} returned an unknown key {unknown[0]!r}",
                                f"return only {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)} (the "
                                f"four-part form), or {', '.join(WHOLE_STEP_REQUIRED)} with "
                                f"optional {', '.join(WHOLE_STEP_OPTIONAL)} (the whole step)")
        values = dict(returned)
    else:
        raise WorkloadError(f"{spec} returned a {type(returned).__name__}, not a dict of the step's "
                            "parts", "return {'model': ..., 'batch': ..., 'loss': ..., "
                                     "'optimizer': ...} (loss and optimizer optional), or "
                                     "{'step': ..., 'batch': ...} for your whole step")
    if values.get("step") is not None:
        return _whole_step_parts(spec, values)
    if values.get("after_step") is not None:
        raise WorkloadError(f"{spec} returned 'after_step' without 'step'",
                            "after_step belongs to the whole-step form: return your step "
                            "function as 'step' too, or leave after_step out")
    for key in REQUIRED_KEYS:
        if values.get(key) is None:
            raise WorkloadError(f"{spec} returned no {key!r}", f"return a dict with {key!r}")
    model = _checked_model(spec, values["model"])
    _check_callable(spec, "batch", values["batch"],
                    "return a function batch(generator) -> (input, target)")
    loss = values.get("loss") or nn.MSELoss()
    _check_callable(spec, "loss", loss, "return a loss function loss(output, target), or leave it out")
    optimizer = values.get("optimizer")
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    _check_optimizer(spec, optimizer)
    return StepParts(model=model, batch=values["batch"], loss=loss, optimizer=optimizer)


def _whole_step_parts(spec: str, values: dict) -> StepParts:
    if values.get("loss") is not None:
        raise WorkloadError(f"{spec} returned both 'step' and 'loss'",
                            "your step computes its own loss: leave 'loss' out of the dict")
    if values.get("batch") is None:
        raise WorkloadError(f"{spec} returned no 'batch'",
                            "return a function batch(generator) that draws one batch on the device")
    _check_callable(spec, "step", values["step"],
                    "return your training step as a function step(batch)")
    _check_callable(spec, "batch", values["batch"],
                    "return a function batch(generator) that draws one batch on the device")
    if values.get("after_step") is not None:
        _check_callable(spec, "after_step", values["after_step"],
                        "return a function of no arguments, run after each step outside the graph")
    model = values.get("model")
    if model is not None:
        model = _checked_model(spec, model)
    optimizer = values.get("optimizer")
    if optimizer is not None:
        _check_optimizer(spec, optimizer)
    return StepParts(model=model, batch=values["batch"], loss=None, optimizer=optimizer,
                     step=values["step"], after_step=values.get("after_step"))


def _checked_model(spec: str, model: Any) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"{spec}: 'model' is a {type(model).__name__}, not a torch.nn.Module",
                            "return the model itself")
    return model


def _check_callable(spec: str, key: str, value: Any, how: str) -> None:
    if not callable(value):
        raise WorkloadError(f"{spec}: {key!r} is a {type(value).__name__}, not a function", how)


def _check_optimizer(spec: str, optimizer: Any) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WorkloadError(f"{spec}: 'optimizer' is a {type(optimizer).__name__}, not a "
                            "torch.optim.Optimizer", "return the optimizer itself, built on "
                                                     "model.parameters(), or leave it out")
