"""The devices a run can use: the machine's GPUs (NVML first, torch.cuda as a fallback) and the CPU.

Scope: one table (DEVICE_COLUMNS) for the GPU selector, and one line saying why there is no GPU.
No Streamlit here. Nothing here creates a CUDA context when NVML answers.
"""

from __future__ import annotations

import math

import pandas as pd

from profiler_core.engine.telemetry import default_nvml, list_gpus

DEVICE_COLUMNS = ["device", "index", "name", "memory_free_mib", "memory_total_mib", "source"]
CPU_DEVICE = "cpu"


def _nvml_gpus() -> tuple[pd.DataFrame, str]:
    nvml = default_nvml()
    gpus = list_gpus(nvml)
    return gpus, "" if not gpus.empty else (nvml.reason or "NVML lists no GPU")


def _torch_gpus() -> tuple[pd.DataFrame, str]:
    try:
        import torch  # only when NVML lists no GPU: loading torch takes seconds
    except ImportError as exc:
        return pd.DataFrame(), f"torch is not importable ({exc})"
    if not torch.cuda.is_available():
        return pd.DataFrame(), (f"torch {torch.__version__} sees no CUDA device "
                                "(torch.cuda.is_available() is False)")
    rows = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        rows.append({"index": index, "name": props.name, "memory_free_mib": math.nan,
                     "memory_total_mib": props.total_memory / 2**20})
    return pd.DataFrame(rows), ""


def list_devices() -> tuple[pd.DataFrame, str]:
    """(GPUs as DEVICE_COLUMNS, why none were found: "" when some were)."""
    gpus, nvml_reason = _nvml_gpus()
    source = "nvml"
    reason = ""
    if gpus.empty:
        gpus, torch_reason = _torch_gpus()
        source = "torch"
        reason = "; ".join(r for r in (nvml_reason, torch_reason) if r)
    if gpus.empty:
        return pd.DataFrame(columns=DEVICE_COLUMNS), reason or "no CUDA GPU was found"
    out = gpus[["index", "name", "memory_free_mib", "memory_total_mib"]].copy()
    out.insert(0, "device", [f"cuda:{int(i)}" for i in out["index"]])
    out["source"] = source
    return out[DEVICE_COLUMNS].reset_index(drop=True), ""


def describe_device(row: dict) -> str:
    """'GPU 0 · H200 · 139/140 GiB free' for the selector: short enough for the sidebar's box
    (the vendor's name left out, memory in whole GiB)."""
    free, total = row.get("memory_free_mib", math.nan), row.get("memory_total_mib", math.nan)
    memory = ""
    if isinstance(total, (int, float)) and not math.isnan(total):
        if isinstance(free, (int, float)) and not math.isnan(free):
            memory = f" · {free / 1024:.0f}/{total / 1024:.0f} GiB free"
        else:
            memory = f" · {total / 1024:.0f} GiB"
    name = str(row["name"]).removeprefix("NVIDIA ")
    return f"GPU {int(row['index'])} · {name}{memory}"
