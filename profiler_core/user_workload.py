"""The user's own training step: ``--workload package.module:function``.

Scope: finding, calling and checking the user's function; no running. The function takes the
device (``torch.device``) and returns a fresh replica of the step each time it is called (the tool
builds one replica per mode, from the same seed):

    def build(device):
        model = MyModel().to(device)
        return {
            "model": model,                                    # required: a torch.nn.Module
            "batch": lambda generator: (x, y),                 # required: one (input, target) batch
            "loss": torch.nn.functional.cross_entropy,         # optional: loss(output, target)
            "optimizer": torch.optim.SGD(model.parameters()),  # optional: default SGD, lr 0.01
        }

A :class:`StepParts` may be returned instead of the dict. ``batch(generator)`` draws one batch on
the device with the given ``torch.Generator``, so both modes see the same data. Every problem is a
:class:`WorkloadError` with one line saying what is wrong and what to change (CLI exit 2).
``profiler_core/examples/user_step.py`` is a worked example.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from profiler_core.config import is_user_spec
from profiler_core.errors import ProfilerError

EXAMPLE = "profiler_core.examples.user_step:build"
REQUIRED_KEYS = ("model", "batch")
OPTIONAL_KEYS = ("loss", "optimizer")


class WorkloadError(ProfilerError):
    """The user's workload cannot be loaded or does not return what the tool needs."""

    exit_code = 2


@dataclass(frozen=True)
class StepParts:
    """One replica of a training step."""

    model: nn.Module
    batch: Callable[[torch.Generator], tuple[Any, Any]]  # one (input, target) batch on the device
    loss: Callable[[Any, Any], torch.Tensor]
    optimizer: torch.optim.Optimizer


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
    except Exception as error:  # noqa: BLE001 - the user's module failed while importing
        raise WorkloadError(f"importing {module_name!r} raised {type(error).__name__}: "
                            f"{str(error).splitlines()[0] if str(error) else ''}".rstrip(": "),
                            "fix the module so that it imports cleanly") from None
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
    except TypeError as error:
        raise WorkloadError(f"calling {spec}(device) failed: {str(error).splitlines()[0]}",
                            "the function must take one argument, the torch.device") from None
    return check_parts(spec, returned)


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
