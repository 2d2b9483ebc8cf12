"""The user's own training step: ``--workload package.module:function``.

Finding, calling and checking the user's ``build(device)`` and what it returns (docs/cli.md,
"Your own training step"; ``profiler_core/examples/user_step.py`` is a worked example); no
running. Every problem, including whatever the user's code raises, is a ``WorkloadError`` of one
line naming their file, line and function (exit 2).
"""

from __future__ import annotations

import importlib
import linecache
import os
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from profiler_core.spec.config import is_user_spec
from profiler_core.spec.errors import WorkloadError

EXAMPLE = "profiler_core.examples.user_step:build"
REQUIRED_KEYS = ("model", "batch")
OPTIONAL_KEYS = ("loss", "optimizer")


@dataclass(frozen=True)
class StepParts:
    """One replica of a training step."""

    model: nn.Module
    batch: Callable[[torch.Generator], tuple[Any, Any]]  # one (input, target) batch on the device
    loss: Callable[[Any, Any], torch.Tensor]
    optimizer: torch.optim.Optimizer


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
    return WorkloadError(f"your step {spec}{during} {_what_was_raised(error)}{location}",
                         "the error is in your step, not in the tool: fix it there")


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
    except BaseException as error:  # noqa: BLE001 - the user's module failed while importing
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


def build_parts(spec: str, device: torch.device) -> StepParts:
    """Call the user's function for one replica and check what it returned."""
    function = find_function(spec)
    try:
        returned = function(device)
    except KeyboardInterrupt:
        raise
    except TypeError as error:
        if user_frame(error) is not None:  # raised inside the function, not by the call itself
            raise user_code_error(spec, error) from None
        raise WorkloadError(f"calling {spec}(device) failed: {str(error).splitlines()[0]}",
                            "the function must take one argument, the torch.device") from None
    except BaseException as error:  # noqa: BLE001 - the user's function failed
        raise user_code_error(spec, error) from None
    return check_parts(spec, returned)


def check_batch(spec: str, batch: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``(input, target)`` pair that ``batch(generator)`` returned, checked: two tensors on
    ``device``; a ``WorkloadError`` naming what is wrong otherwise."""
    how = "return x, y: a tuple of two tensors"
    if isinstance(batch, (types.GeneratorType, map, filter, zip)) or (
            hasattr(batch, "__next__") and not isinstance(batch, (tuple, list))):
        raise WorkloadError(f"{spec}: batch(generator) returned a {type(batch).__name__}, not an "
                            "(input, target) pair", f"{how}, with return, not yield")
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
        if value.device != device and not (value.device.type == device.type == "cuda"
                                           and device.index is None):
            raise WorkloadError(f"{spec}: batch(generator)'s {name} is on {value.device}, not on "
                                f"{device}", "create it on the device your function is given "
                                             "(device=device)")
    return batch[0], batch[1]


def check_parts(spec: str, returned: Any) -> StepParts:
    """A :class:`StepParts` from what the function returned, or a ``WorkloadError`` naming the
    part that is wrong."""
    if isinstance(returned, StepParts):
        values = {"model": returned.model, "batch": returned.batch, "loss": returned.loss,
                  "optimizer": returned.optimizer}
    elif isinstance(returned, dict):
        unknown = sorted(set(returned) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
        if unknown:
            raise WorkloadError(f"{spec} returned an unknown key {unknown[0]!r}",
                                f"return only {', '.join(REQUIRED_KEYS + OPTIONAL_KEYS)}")
        values = dict(returned)
    else:
        raise WorkloadError(f"{spec} returned a {type(returned).__name__}, not a dict of the step's "
                            "parts", "return {'model': ..., 'batch': ..., 'loss': ..., "
                                     "'optimizer': ...} (loss and optimizer optional)")
    for key in REQUIRED_KEYS:
        if values.get(key) is None:
            raise WorkloadError(f"{spec} returned no {key!r}", f"return a dict with {key!r}")
    model = values["model"]
    if not isinstance(model, nn.Module):
        raise WorkloadError(f"{spec}: 'model' is a {type(model).__name__}, not a torch.nn.Module",
                            "return the model itself")
    if not callable(values["batch"]):
        raise WorkloadError(f"{spec}: 'batch' is a {type(values['batch']).__name__}, not a "
                            "function", "return a function batch(generator) -> (input, target)")
    loss = values.get("loss") or nn.MSELoss()
    if not callable(loss):
        raise WorkloadError(f"{spec}: 'loss' is a {type(loss).__name__}, not a function",
                            "return a loss function loss(output, target), or leave it out")
    optimizer = values.get("optimizer")
    if optimizer is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise WorkloadError(f"{spec}: 'optimizer' is a {type(optimizer).__name__}, not a "
                            "torch.optim.Optimizer", "return the optimizer itself, built on "
                                                     "model.parameters(), or leave it out")
    return StepParts(model=model, batch=values["batch"], loss=loss, optimizer=optimizer)
