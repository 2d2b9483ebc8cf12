"""A training step's batch as the tool moves it: a tuple of the step's arguments, each a tensor or
a tuple, list or dict of them (a whole step's ``batch(generator)`` may return any such
structure; the built-in and four-part steps take ``(input, target)``).

Scope: the static copies a CUDA graph reads, copying a fresh batch into them, and checking that a
batch is made of tensors on the run's device (one line naming the offending part otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

# A batch: the arguments of one step (``(input, target)``, or ``(batch,)`` for a whole step).
Batch = tuple[Any, ...]
MAX_DEPTH = 8  # nesting of tuples, lists and dicts a batch may have


def static_copy(value: Any) -> Any:
    """The same structure with a new tensor of the same shape, dtype and device for every tensor
    (its contents copied: the graph's static inputs start as the example batch)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: static_copy(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(static_copy(item) for item in value)
    return value


def copy_into(static: Any, value: Any) -> None:
    """Copy every tensor of ``value`` into its place in ``static`` (the same structure)."""
    if isinstance(static, torch.Tensor):
        static.copy_(value)
    elif isinstance(static, dict):
        for key, item in static.items():
            copy_into(item, value[key])
    elif isinstance(static, (tuple, list)):
        for item, new in zip(static, value):
            copy_into(item, new)


def tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a batch, depth first."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors(item)


def problem(value: Any, device: torch.device, where: str = "", depth: int = 0) -> str | None:
    """What makes ``value`` no batch of tensors on ``device`` ("the batch's ['labels'] is a str,
    not a tensor"), or None when it is one: tensors, and tuples, lists and dicts of them."""
    if isinstance(value, torch.Tensor):
        if value.device != device and not (value.device.type == device.type == "cuda"
                                           and device.index is None):
            return f"the batch{where} is on {value.device}, not on {device}"
        return None
    if depth >= MAX_DEPTH:
        return f"the batch{where} is nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        if not value:
            return f"the batch{where} is an empty dict"
        for key, item in value.items():
            found = problem(item, device, f"{where}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, (tuple, list)):
        if not value:
            return f"the batch{where} is an empty {type(value).__name__}"
        for index, item in enumerate(value):
            found = problem(item, device, f"{where}[{index}]", depth + 1)
            if found:
                return found
        return None
    return f"the batch{where} is a {type(value).__name__}, not a tensor"
