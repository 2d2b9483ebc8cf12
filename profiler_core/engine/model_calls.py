"""How the user's whole step calls its model, for ``make_graphed_callables``: the arguments and
the autocast state of the model's first call, seen by a forward pre-hook during one eager step.

Scope: recording that call and refusing, in one line, the calls ``make_graphed_callables`` cannot
take (keyword arguments, arguments that are not tensors, no model in the build dict).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from profiler_core.engine.batches import Batch
from profiler_core.spec.errors import WorkloadError

if TYPE_CHECKING:  # workloads imports nothing from here; the type is for annotations only
    from profiler_core.engine.workloads import TrainingStep


@dataclass(frozen=True)
class ModelCall:
    """The model's first call in a step: its positional tensors (copies, each with the
    requires_grad it had) and the autocast it ran under."""

    arguments: tuple[torch.Tensor, ...]
    device_type: str
    autocast_enabled: bool
    autocast_dtype: torch.dtype | None

    def autocast(self) -> contextlib.AbstractContextManager:
        """The same autocast, its weight cache off (a cached cast would outlive the capture)."""
        if not self.autocast_enabled or self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.autocast_dtype, cache_enabled=False)


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype | None]:
    """Whether autocast is on for ``device_type`` now, and its dtype (older torch releases name
    the GPU's and the CPU's apart)."""
    try:
        enabled = bool(torch.is_autocast_enabled(device_type))
        dtype = torch.get_autocast_dtype(device_type)
    except (TypeError, AttributeError):
        if device_type == "cuda":
            enabled, dtype = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        else:
            enabled, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    return enabled, dtype if enabled else None


def graphable_call(step: TrainingStep, batch: Batch) -> ModelCall:
    """Run one eager step of the user's whole step and return how it first called the model;
    ``WorkloadError`` when there is no model or the call is one make_graphed_callables refuses."""
    spec = step.config.workload
    model = step.model
    if model is None:
        raise WorkloadError(f"graphed_callables needs the model of {spec}: its build dict has none",
                            "add 'model': your model to the dict your build function returns, "
                            "or leave graphed_callables out of --modes")
    seen: list[tuple[tuple[Any, ...], dict[str, Any], tuple[bool, torch.dtype | None]]] = []

    def record(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not seen:
            seen.append((args, dict(kwargs), _autocast_state(step.device.type)))

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        step.eager_step(*batch, count=False)
    finally:
        handle.remove()
    if not seen:
        raise WorkloadError(f"the step of {spec} never called its model",
                            "return the model your step calls as 'model', or leave "
                            "graphed_callables out of --modes")
    args, kwargs, (enabled, dtype) = seen[0]
    if kwargs:
        raise WorkloadError(f"graphed_callables cannot graph the model of {spec}: the step calls it "
                            f"with keyword arguments ({', '.join(sorted(kwargs))})",
                            "make_graphed_callables takes positional tensors only: call "
                            "model(x, ...) positionally, or leave graphed_callables out of --modes")
    wrong = [type(a).__name__ for a in args if not isinstance(a, torch.Tensor)]
    if wrong or not args:
        raise WorkloadError(f"graphed_callables cannot graph the model of {spec}: the step calls it "
                            f"with {'a ' + wrong[0] if wrong else 'no arguments'}, not tensors only",
                            "make_graphed_callables takes positional tensors only; leave "
                            "graphed_callables out of --modes")
    copies = tuple(a.detach().clone().requires_grad_(a.requires_grad) for a in args)
    return ModelCall(copies, step.device.type, enabled, dtype)
