"""The sidebar's run controls: one widget per ``RunConfig`` field, presets, and validation.

Scope: widgets -> a validated ``RunConfig``. Ranges come from ``INT_LIMITS``/``FLOAT_LIMITS``
(the widgets refuse values outside them); every other rule of ``RunConfig`` (trials <= replays,
no tensor over 2^31 elements, ...) is checked by building the config, and a ``ConfigError`` is
shown right under the control it names, with what is allowed, before anything can run.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import devices
from dashboard.analysis import MODE_WORDS
from profiler_core.config import (
    ALWAYS_MEASURED,
    DTYPES,
    FLOAT_LIMITS,
    INT_LIMITS,
    MODE_NAMES,
    OPTIMIZERS,
    PRESET_DESCRIPTIONS,
    PRESETS,
    RunConfig,
)
from profiler_core.errors import ConfigError

PREFIX = "cfg_"
PRESET_KEY = "cfg_preset"
DEVICE_KEY = "cfg_device"
TIMEOUT_KEY = "cfg_timeout_s"
DEFAULT_TIMEOUT_S = 900
PRESET_FIELDS = [f.name for f in dataclasses.fields(RunConfig) if f.name not in ("device", "preset")]

LABELS = {
    "batch": "Batch size N", "d_in": "Input features D_in", "hidden": "Hidden width H",
    "d_out": "Output features D_out", "hidden_layers": "Hidden layers",
    "dropout1": "Dropout after the first Linear", "dropout2": "Dropout after the last Linear",
    "dtype": "Precision", "optimizer": "Optimizer", "warmup_iters": "Warm-up iterations",
    "capture_iters": "Iterations per graph", "replays": "Graph replays",
    "eager_iters": "Eager iterations", "count_warmup": "Counter counts warm-up",
    "seed": "Seed", "trials": "Trials (eager/graph blocks)", "profile": "Profiler (launch split)",
    "profile_iters": "Profiled iterations", "nvml": "NVML telemetry",
    "nvml_interval_ms": "NVML interval (ms)", "parity_steps": "Parity steps",
    "workload": "Workload", "heads": "Attention heads", "seq_len": "Sequence length",
    "channels": "Channels", "image_size": "Image size", "modes": "Also time these modes",
    "user_workload": "Your own step (package.module:function)",
}
HELP = {
    "batch": "Rows per training batch.",
    "d_in": "Features into the first Linear layer.",
    "hidden": "Width of every hidden layer.",
    "d_out": "Features out of the last Linear layer.",
    "hidden_layers": "1 is the article's Linear-Dropout-Linear-Dropout; k adds k-1 Linear+ReLU.",
    "dropout1": "Dropout probability after the first Linear.",
    "dropout2": "Dropout probability after the last Linear.",
    "dtype": "fp32 (TF32 off), tf32, bf16 autocast or fp16 autocast with a GradScaler.",
    "optimizer": "SGD (lr 0.1), Adam or AdamW (capturable=True in the graphed copy).",
    "warmup_iters": "Side-stream iterations before capture (CUDA graphs need them).",
    "capture_iters": "Training steps captured in one graph (the article's lesson 3 uses 3).",
    "replays": "Timed graph replays.",
    "eager_iters": "Timed eager steps. Empty: replays x iterations per graph, so both modes "
                   "train for the same number of steps.",
    "count_warmup": "Does the static counter count warm-up steps (the article's lesson 2: no).",
    "seed": "Seeds weights, batches and dropout.",
    "trials": "Eager and graph alternate in this many blocks, so drift hits both. Empty: up to 10, "
              "with at least two iterations in each block.",
    "profile": "Record a torch.profiler window per mode: CPU launch vs GPU busy/idle, kernels, traces.",
    "profile_iters": "Iterations in each profiled window.",
    "nvml": "Sample GPU utilisation, clocks, power and memory with NVML during the run.",
    "nvml_interval_ms": "NVML polling period.",
    "parity_steps": "Replays compared with eager steps for numerical parity (0 skips it).",
    "workload": "The article's MLP, a stack of transformer encoder layers, or a small "
                "convolutional classifier. Each shows its own size controls.",
    "heads": "Attention heads of every encoder layer (the width must divide by it).",
    "seq_len": "Tokens per sequence.",
    "channels": "Channels of every convolution.",
    "image_size": "Input images are this many pixels wide and high, 3 channels.",
    "modes": "Eager (the baseline) and the article's whole-step graph are always timed. Add "
             "make_graphed_callables on the model, torch.compile without CUDA graphs (its own "
             "share), or torch.compile(mode='reduce-overhead'); each is timed the same way, with "
             "its one-time cost.",
    "user_workload": "A function build(device) returning the model, a batch maker and optionally "
                     "loss and optimizer (README, 'Your own training step'). It runs your code; "
                     "empty: the workload above.",
}
# The size controls each built-in workload uses, in the Model section (hidden_layers: MLP hidden
# layers, encoder layers, or convolution blocks; d_out: output features or classes).
MODEL_FIELDS = {
    "mlp": ("batch", "d_in", "hidden", "d_out", "hidden_layers", "dropout1", "dropout2"),
    "transformer": ("batch", "seq_len", "hidden", "heads", "hidden_layers", "d_out", "dropout1"),
    "conv": ("batch", "image_size", "channels", "hidden_layers", "d_out", "dropout2"),
}
WORKLOAD_CHOICES = tuple(MODEL_FIELDS)
EXTRA_MODES = tuple(mode for mode in MODE_NAMES if mode not in ALWAYS_MEASURED)
# Set PROFILER_ALLOW_USER_CODE=1 when starting the server to offer "your own step" (it runs code).
USER_CODE_ENV = "PROFILER_ALLOW_USER_CODE"
SECTIONS = (
    ("Model", ("workload", "user_workload", *dict.fromkeys(f for fields in MODEL_FIELDS.values()
                                                         for f in fields), "dtype", "optimizer")),
    ("Schedule", ("warmup_iters", "capture_iters", "replays", "eager_iters", "trials",
                  "count_warmup", "seed")),
    ("Measurement", ("modes", "profile", "profile_iters", "nvml", "nvml_interval_ms",
                     "parity_steps")),
)
CHOICES = {"dtype": DTYPES, "optimizer": OPTIMIZERS, "workload": WORKLOAD_CHOICES}
# Controls that may be left empty, and what empty means.
PLACEHOLDERS = {"eager_iters": "auto: replays x iterations per graph", "trials": "auto: up to 10"}
BOOLS = ("count_warmup", "profile", "nvml")

# A CPU run times the eager step only (profiler_core.runner): these controls do nothing there, so
# on the CPU they are disabled, set to what a CPU run does, and say why.
GRAPH_ONLY = ("capture_iters", "replays", "profile", "profile_iters", "nvml", "nvml_interval_ms",
              "parity_steps")
CPU_FIXED = {"capture_iters": 1, "profile": False, "nvml": False, "parity_steps": 0}
# Choosing the CPU switches the model and schedule to this small step (a few seconds on 2 cores,
# where the seed preset's step takes minutes); a preset chosen while on the CPU keeps these sizes.
CPU_SIZES = {"batch": 64, "d_in": 512, "hidden": 512, "d_out": 128, "hidden_layers": 1,
             "eager_iters": 200, "replays": 200, "trials": None}
CPU_WORKLOAD_SIZES = {  # the same idea for the other built-in workloads
    "transformer": {"batch": 8, "seq_len": 32, "hidden": 128, "heads": 4, "hidden_layers": 2,
                    "d_out": 128, "eager_iters": 50, "replays": 50},
    "conv": {"batch": 16, "channels": 16, "image_size": 16, "hidden_layers": 2, "d_out": 10,
             "eager_iters": 100, "replays": 100},
}
CPU_WHY = ("CPU runs time the eager step only: graph replays, iterations per graph, the profiler "
           "(launch split, kernels, traces), NVML and parity need a CUDA GPU, so those controls "
           "are off here. The model is set to a small step that runs in seconds on a CPU.")
SIZED_FOR_KEY = "cfg_sized_for"  # "cpu" or "gpu": which kind of device the values were set for


def allowed_text(name: str) -> str:
    """What a control accepts, in words (shown in its help and with any refusal)."""
    if name in INT_LIMITS:
        low, high = INT_LIMITS[name]
        extra = " (empty: automatic)" if name in PLACEHOLDERS else ""
        return f"Allowed: a whole number from {low:,} to {high:,}{extra}."
    if name in FLOAT_LIMITS:
        low, high = FLOAT_LIMITS[name]
        return f"Allowed: {low:g} to {high:g}."
    if name in CHOICES:
        return f"Allowed: {', '.join(CHOICES[name])}."
    return ""


def key(name: str) -> str:
    return PREFIX + name


def on_cpu() -> bool:
    return st.session_state.get(DEVICE_KEY) == devices.CPU_DEVICE


def apply_preset() -> None:
    """on_change of the preset selector: fill every control from the chosen preset (on the CPU,
    with the CPU's small sizes and its graph-only settings)."""
    name = st.session_state.get(PRESET_KEY)
    if name not in PRESETS:
        return
    config = PRESETS[name]
    for field in PRESET_FIELDS:
        st.session_state[key(field)] = getattr(config, field)
    st.session_state[key("modes")] = list(config.extra_modes)
    if on_cpu():
        apply_cpu_sizes()


def apply_cpu_sizes() -> None:
    """The CPU's small step and what a CPU run does with the graph-only settings."""
    workload = st.session_state.get(key("workload"), "mlp")
    for field, value in {**CPU_SIZES, **CPU_WORKLOAD_SIZES.get(workload, {}), **CPU_FIXED}.items():
        st.session_state[key(field)] = value


def size_for_device() -> None:
    """When the device changes between a GPU and the CPU (or on the first run), set the controls
    for it: the CPU's small step, or back to the chosen preset on a GPU."""
    kind = "cpu" if on_cpu() else "gpu"
    if st.session_state.get(SIZED_FOR_KEY) == kind:
        return
    first = SIZED_FOR_KEY not in st.session_state
    st.session_state[SIZED_FOR_KEY] = kind
    if kind == "cpu":
        apply_cpu_sizes()
    elif not first:
        apply_preset()


def init_controls() -> None:
    """First run of a session: the controls start at the seed preset."""
    if PRESET_KEY not in st.session_state:
        st.session_state[PRESET_KEY] = "seed"
        apply_preset()
    st.session_state.setdefault(TIMEOUT_KEY, DEFAULT_TIMEOUT_S)


def _shown(name: str) -> bool:
    """Whether a control belongs on screen: a workload's size controls only with that workload,
    and the field for your own step only when the server allows running user code."""
    if name == "user_workload":
        return os.environ.get(USER_CODE_ENV) == "1"
    workload = st.session_state.get(key("workload"), "mlp")
    sizes = {f for fields in MODEL_FIELDS.values() for f in fields}
    return name not in sizes or name in MODEL_FIELDS.get(workload, MODEL_FIELDS["mlp"])


def _widget(name: str, cpu: bool = False) -> None:
    """One control. Its current value is also passed as the widget's default: a rerun that
    reaches the server before the browser has drawn the control (a click right after the page
    loads) then falls back to that value, not to the widget's minimum. On the CPU a graph-only
    control is disabled and its help says why."""
    label, help_text = LABELS[name], f"{HELP[name]} {allowed_text(name)}".strip()
    disabled = cpu and name in GRAPH_ONLY
    if disabled:
        help_text = f"Off on the CPU: it needs a CUDA GPU (a CPU run times the eager step only). {help_text}"
    k = key(name)
    current = st.session_state.get(k)
    if name == "modes":
        chosen = [mode for mode in (current or []) if mode in EXTRA_MODES]
        if cpu:
            help_text = ("On the CPU only torch.compile can run: the graph modes need a CUDA GPU "
                         f"and are skipped. {help_text}")
        st.multiselect(label, EXTRA_MODES, default=chosen, key=k, help=help_text,
                       format_func=lambda mode: MODE_WORDS.get(mode, mode))
    elif name == "user_workload":
        st.text_input(label, value=current or "", key=k, help=help_text,
                      placeholder="e.g. profiler_core.examples.user_step:build")
    elif name in BOOLS:
        st.toggle(label, value=bool(current), key=k, help=help_text, disabled=disabled)
    elif name in CHOICES:
        options = list(CHOICES[name])
        st.selectbox(label, options, index=options.index(current) if current in options else 0,
                     key=k, help=help_text, disabled=disabled)
    elif name in FLOAT_LIMITS:
        low, high = FLOAT_LIMITS[name]
        step = 0.05 if name.startswith("dropout") else 5.0
        st.number_input(label, min_value=float(low), max_value=float(high), step=step,
                        value=None if current is None else float(current),
                        format="%.2f" if name.startswith("dropout") else "%.1f", key=k, help=help_text,
                        disabled=disabled)
    else:
        low, high = INT_LIMITS[name]
        st.number_input(label, min_value=low, max_value=high, step=1, key=k, help=help_text,
                        value=None if current is None else int(current),
                        placeholder=PLACEHOLDERS.get(name), disabled=disabled)


def _device_selector(gpus: pd.DataFrame, no_gpu_reason: str) -> None:
    options = list(gpus["device"]) + [devices.CPU_DEVICE]
    rows = {row["device"]: row for row in gpus.to_dict("records")}
    if st.session_state.get(DEVICE_KEY) not in options:
        st.session_state[DEVICE_KEY] = options[0]

    def describe(device: str) -> str:
        if device == devices.CPU_DEVICE:
            return "CPU (eager only: no graphs, to try the pipeline)"
        return devices.describe_device(rows[device])

    st.selectbox("GPU", options, index=options.index(st.session_state[DEVICE_KEY]), key=DEVICE_KEY,
                 format_func=describe,
                 help="The machine's GPUs by index, name and free memory. A CPU run times the "
                      "eager step only.")
    if gpus.empty:
        st.caption(f"No CUDA GPU found: a run here times the eager step on the CPU only. "
                   f"({no_gpu_reason})")
    if on_cpu():
        st.caption(CPU_WHY)


def config_values() -> dict[str, Any]:
    """The RunConfig keyword arguments the controls hold now."""
    values: dict[str, Any] = {f: st.session_state.get(key(f)) for f in PRESET_FIELDS}
    values["modes"] = ALWAYS_MEASURED + tuple(m for m in (values.get("modes") or [])
                                              if m in EXTRA_MODES and m not in ALWAYS_MEASURED)
    own = str(st.session_state.get(key("user_workload")) or "").strip()
    if own and os.environ.get(USER_CODE_ENV) == "1":
        values["workload"] = own
    for name in INT_LIMITS:
        if values.get(name) is not None:
            values[name] = int(values[name])
    for name in FLOAT_LIMITS:
        if values.get(name) is not None:
            values[name] = float(values[name])
    values["device"] = st.session_state.get(DEVICE_KEY) or devices.CPU_DEVICE
    if values["device"] == devices.CPU_DEVICE:
        # What a CPU run does, whatever a disabled control held; its replays follow the eager
        # iterations, so "trials <= replays" is the eager iterations' rule.
        values.update(CPU_FIXED)
        if values.get("eager_iters") is not None:
            values["replays"] = max(values["eager_iters"], INT_LIMITS["replays"][0])
            values["replays"] = min(values["replays"], INT_LIMITS["replays"][1])
        for field in ("replays", *CPU_FIXED):
            st.session_state[key(field)] = values[field]
    chosen = st.session_state.get(PRESET_KEY, "seed")
    same = chosen in PRESETS and all(values[f] == getattr(PRESETS[chosen], f) for f in PRESET_FIELDS)
    values["preset"] = chosen if same else "custom"
    return values


def build_config(values: dict[str, Any]) -> tuple[RunConfig | None, ConfigError | None]:
    if values.get("device") == devices.CPU_DEVICE and values.get("trials") is not None:
        eager = values.get("eager_iters") or values.get("replays")
        if isinstance(eager, int) and values["trials"] > eager:
            return None, ConfigError("trials", f"trials ({values['trials']}) cannot exceed the "
                                     f"eager iterations ({eager})",
                                     "lower trials, raise eager iterations, or leave trials empty")
    try:
        return RunConfig(**values), None
    except ConfigError as error:
        return None, error
    except TypeError as exc:  # a control left empty that needs a value
        return None, ConfigError("preset", f"a setting is missing: {exc}", "fill every control")


def refusal_text(error: ConfigError) -> str:
    allowed = allowed_text(error.field)
    hint = f" {error.hint}." if error.hint else ""
    return f"Refused: {error.message}.{hint} {allowed}".strip()


def run_controls(gpus: pd.DataFrame, no_gpu_reason: str) -> tuple[RunConfig | None, ConfigError | None]:
    """Draw every control in the sidebar; returns the config, or the error shown beside its control.

    Widget values are in session state before the widgets are drawn, so the config is checked
    first: the section holding a refused control opens, and the refusal sits right under it.
    """
    init_controls()
    _device_selector(gpus, no_gpu_reason)
    size_for_device()
    cpu = on_cpu()
    presets = list(PRESETS)
    st.selectbox("Preset", presets, index=presets.index(st.session_state[PRESET_KEY]),
                 key=PRESET_KEY, on_change=apply_preset,
                 help="Fills every control with one of the article's experiments.")
    st.caption(PRESET_DESCRIPTIONS.get(st.session_state[PRESET_KEY], ""))
    values = config_values()
    config, error = build_config(values)
    for title, names in SECTIONS:
        refused_here = error is not None and error.field in names
        with st.expander(title, expanded=(title == "Model") or refused_here):
            for name in names:
                if not _shown(name):
                    continue
                _widget(name, cpu)
                if refused_here and error.field == name:
                    st.error(refusal_text(error), icon=":material/block:")
    st.number_input("Stop a run after (s)", min_value=0, max_value=86_400, step=60, key=TIMEOUT_KEY,
                    value=int(st.session_state[TIMEOUT_KEY]),
                    help="A worker still running this long after it started (time waiting for the "
                         "device does not count) is stopped; what it measured is kept, marked "
                         "incomplete (0: no limit).")
    if error is None and values["preset"] == "custom":
        st.caption("CPU-sized values, not a preset's: this run is labelled 'custom'." if cpu else
                   "Values changed from the preset: this run is labelled 'custom'.")
    return config, error


def field_label(field: str) -> str:
    return LABELS.get(field, field)
