"""The numerics flags a run records: PyTorch's process-wide settings that change which kernels a
training step runs (TF32, matmul precision, cuDNN's choices, determinism, reduced-precision
reductions, attention backends), declared once with their labels and PyTorch's defaults.

Scope: declarations and wording only (no torch import): ``engine.numerics`` reads the flags from
torch; the CLI summary, the dashboard's config table and the compare view show them from here.
A run stores them in its environment under ``numerics``, as its step saw them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ENVIRONMENT_KEY = "numerics"  # environment["numerics"]: flag name -> value


@dataclass(frozen=True)
class NumericsFlag:
    """One process-wide setting of PyTorch's."""

    name: str  # the key in environment["numerics"]
    setting: str  # how the user writes it in their code
    default: bool | str | None  # PyTorch's own default; None where it depends on the version


FLAGS: tuple[NumericsFlag, ...] = (
    NumericsFlag("matmul_allow_tf32", "torch.backends.cuda.matmul.allow_tf32", False),
    NumericsFlag("cudnn_allow_tf32", "torch.backends.cudnn.allow_tf32", True),
    NumericsFlag("float32_matmul_precision", "torch.set_float32_matmul_precision", "highest"),
    NumericsFlag("cudnn_benchmark", "torch.backends.cudnn.benchmark", False),
    NumericsFlag("cudnn_deterministic", "torch.backends.cudnn.deterministic", False),
    NumericsFlag("cudnn_enabled", "torch.backends.cudnn.enabled", True),
    NumericsFlag("deterministic_algorithms", "torch.use_deterministic_algorithms", False),
    NumericsFlag("matmul_allow_fp16_reduced_precision_reduction",
                 "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction", True),
    NumericsFlag("matmul_allow_bf16_reduced_precision_reduction",
                 "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", True),
    NumericsFlag("sdpa_flash", "torch.backends.cuda.enable_flash_sdp", True),
    NumericsFlag("sdpa_mem_efficient", "torch.backends.cuda.enable_mem_efficient_sdp", True),
    NumericsFlag("sdpa_math", "torch.backends.cuda.enable_math_sdp", True),
    NumericsFlag("sdpa_cudnn", "torch.backends.cuda.enable_cudnn_sdp", None),
)
FLAG_NAMES = tuple(flag.name for flag in FLAGS)
_BY_NAME = {flag.name: flag for flag in FLAGS}

# What each built-in ``--dtype`` does to the flags: fp32 is what a plain PyTorch loop gets (the
# flags as the process has them: PyTorch's defaults, TF32 off for matmuls and on for cuDNN's
# convolutions); tf32 turns TF32 on for both; fp32-ieee turns it off for both. bf16 and fp16 add
# autocast and leave the flags alone. The user's own step owns its flags: the tool sets none.
DTYPE_FLAGS: dict[str, dict[str, bool]] = {
    "tf32": {"matmul_allow_tf32": True, "cudnn_allow_tf32": True},
    "fp32-ieee": {"matmul_allow_tf32": False, "cudnn_allow_tf32": False},
}
DTYPE_MEANINGS = {
    "fp32": "fp32 as a plain PyTorch loop runs it (the process's flags: by PyTorch's defaults "
            "TF32 off for matmuls, on for cuDNN convolutions)",
    "fp32-ieee": "fp32 with TF32 off for matmuls and convolutions (stricter than PyTorch's default)",
    "tf32": "TF32 on for matmuls and convolutions (looser than PyTorch's default)",
    "bf16": "bf16 autocast (flags as the process has them)",
    "fp16": "fp16 autocast with a GradScaler (flags as the process has them)",
}
# The dtypes that set a flag: refused for the user's own step, whose code owns its flags.
FLAG_SETTING_DTYPES = tuple(DTYPE_FLAGS)


def value_text(value: Any) -> str:
    """A flag's value as the summary and the tables show it."""
    if value is None:
        return "n/a (this torch has no such setting)"
    return str(value)


def differences_from_default(flags: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, value, PyTorch's default) of every recorded flag whose value is not PyTorch's
    default (flags with no fixed default, or not recorded, are left out)."""
    differences = []
    for name, value in flags.items():
        flag = _BY_NAME.get(name)
        if flag is None or flag.default is None or value is None:
            continue
        if value != flag.default:
            differences.append((name, value, flag.default))
    return differences


def summary_line(flags: Mapping[str, Any]) -> str:
    """One line for the CLI summary: PyTorch's defaults, or what differs from them."""
    if not flags:
        return "numerics flags: not recorded (a run saved before they were)"
    differing = differences_from_default(flags)
    if not differing:
        return "numerics flags: PyTorch's defaults (TF32 off for matmuls, on for cuDNN convolutions)"
    shown = ", ".join(f"{name} {value} (default {default})" for name, value, default in differing)
    return f"numerics flags: {shown}"


def table_rows(environment: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(setting, value) rows of the flags a run recorded, in the declared order, for the config
    table and the compare view; none for a run saved before they were recorded."""
    flags = environment.get(ENVIRONMENT_KEY)
    if not isinstance(flags, Mapping):
        return []
    rows = [(f"numerics: {name}", value_text(flags[name])) for name in FLAG_NAMES if name in flags]
    rows += [(f"numerics: {name}", value_text(value)) for name, value in flags.items()
             if name not in _BY_NAME]
    return rows
