"""The numerics flags of this process, read from torch, and the one place the tool sets any:
a built-in workload's ``--dtype tf32`` or ``fp32-ieee`` (``spec.numerics.DTYPE_FLAGS``), set for
the run and restored after it. The user's own step runs with the flags its code set; nothing here
changes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.numerics import DTYPE_FLAGS, FLAG_NAMES


def _optional(read: Callable[[], Any]) -> Any:
    """A flag this torch may not have (an older release): None when it has not."""
    try:
        return read()
    except (AttributeError, RuntimeError):
        return None


_READERS: dict[str, Callable[[], Any]] = {
    "matmul_allow_tf32": lambda: bool(torch.backends.cuda.matmul.allow_tf32),
    "cudnn_allow_tf32": lambda: bool(torch.backends.cudnn.allow_tf32),
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "cudnn_benchmark": lambda: bool(torch.backends.cudnn.benchmark),
    "cudnn_deterministic": lambda: bool(torch.backends.cudnn.deterministic),
    "cudnn_enabled": lambda: bool(torch.backends.cudnn.enabled),
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
    "matmul_allow_fp16_reduced_precision_reduction":
        lambda: bool(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
    "matmul_allow_bf16_reduced_precision_reduction":
        lambda: bool(torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
    "sdpa_flash": torch.backends.cuda.flash_sdp_enabled,
    "sdpa_mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
    "sdpa_math": torch.backends.cuda.math_sdp_enabled,
    "sdpa_cudnn": lambda: torch.backends.cuda.cudnn_sdp_enabled(),
}
assert tuple(_READERS) == FLAG_NAMES, "every declared flag has a reader, in the declared order"


def read_flags() -> dict[str, Any]:
    """Every declared flag as this process has it now (None where this torch has no such flag)."""
    return {name: _optional(read) for name, read in _READERS.items()}


def _set_tf32(matmul: bool, cudnn: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


@contextlib.contextmanager
def tool_precision(config: RunConfig) -> Iterator[None]:
    """The flags a built-in workload's ``dtype`` asks for (tf32: TF32 on for matmuls and
    convolutions; fp32-ieee: off for both), restored afterwards with the matmul precision they
    imply; every other dtype, and the user's own step, leaves the process's flags as they are."""
    wanted = {} if is_user_spec(config.workload) else DTYPE_FLAGS.get(config.dtype, {})
    if not wanted:
        yield
        return
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    _set_tf32(wanted["matmul_allow_tf32"], wanted["cudnn_allow_tf32"])
    try:
        yield
    finally:
        _set_tf32(saved[0], saved[1])
        torch.set_float32_matmul_precision(saved[2])
