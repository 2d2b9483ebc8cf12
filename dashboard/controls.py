"""The sidebar's run controls, generated from ``profiler_core.spec.fields``: one widget per
``RunConfig`` field, in its section, with its label and help; presets; and validation. The
changing shapes (``vary``, ``buckets``) have a control of their own, ``dashboard.shape_controls``.

Widgets -> a validated ``RunConfig``: ranges come from the config's limits, every other rule is
checked by building the config, and a ``ConfigError`` is shown under the control it names.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import devices, shape_controls
from profiler_core import ALWAYS_MEASURED, MODE_LABELS
from profiler_core.spec import fields
from profiler_core.spec.config import (
    HOW_MEASURED_FIELDS,
    INT_LIMITS,
    NOT_PRESET_FIELDS,
    PRESET_DESCRIPTIONS,
    PRESETS,
    RUN_TIMEOUT_S,
    RunConfig,
    changed_values,
)
from profiler_core.spec.errors import ConfigError
from profiler_core.spec.workload_kinds import BUILT_IN, workload_named

PREFIX = "cfg_"
PRESET_KEY = "cfg_preset"
DEVICE_KEY = "cfg_device"
TIMEOUT_KEY = "cfg_timeout_s"
DEFAULT_TIMEOUT_S = int(RUN_TIMEOUT_S)  # the command line's default
PRESET_FIELDS = [f.name for f in dataclasses.fields(RunConfig) if f.name not in NOT_PRESET_FIELDS]

# The sidebar's own control beside the workload selector (not a RunConfig field: it sets the
# workload), offered only when the server was started with PROFILER_ALLOW_USER_CODE=1, because it
# runs code.
USER_CODE_ENV = "PROFILER_ALLOW_USER_CODE"
USER_WORKLOAD = "user_workload"
USER_WORKLOAD_LABEL = "Your own step (package.module:function)"
USER_WORKLOAD_HELP = ("A function build(device) returning the model, a batch maker and optionally "
                      "loss and optimizer (README, 'Your own training step'). It runs your code; "
                      "empty: the workload above.")

CPU_OPTION = "CPU (eager only)"  # the device selector's CPU entry: short, it must fit the sidebar
CPU_WHY = ("CPU runs time the eager step only: graph replays, iterations per graph, the profiler "
           "(launch split, kernels, traces), NVML and parity need a CUDA GPU, so those controls "
           "are off here. The model is set to a small step that runs in seconds on a CPU.")
SIZED_FOR_KEY = "cfg_sized_for"  # "cpu" or "gpu": which kind of device the values were set for


def key(name: str) -> str:
    return PREFIX + name


OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


def step_text(values: dict[str, Any], cpu: bool = False) -> str:
    """The step the values describe, in the words of the preset captions: 'MLP, N=64, 512 -> 512
    -> 128, fp32, SGD, 200 eager steps'. Built from the values themselves, so a caption never
    quotes a preset's sizes that the controls no longer hold (the CPU's small step)."""
    get = values.get
    workload = str(get("workload") or "mlp")
    declared = workload_named(workload)
    model = declared.caption(values) if declared is not None else f"the step {workload}"
    optimizer = OPTIMIZER_NAMES.get(str(get("optimizer")), str(get("optimizer") or ""))
    eager = get("eager_iters")
    if cpu:
        steps = f"{eager} eager steps" if eager else "eager steps only"
    else:
        steps = f"{get('replays')} replays"
        extra = [str(m) for m in (get("modes") or ()) if m not in ALWAYS_MEASURED]
        if extra:
            steps += "; also timed: " + ", ".join(extra)
    return f"{model}, {get('dtype')}, {optimizer}, {steps}."


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
        if field in HOW_MEASURED_FIELDS and key(field) in st.session_state:
            continue  # how to measure is not the preset's: a chosen preset keeps it
        st.session_state[key(field)] = getattr(config, field)
    st.session_state[key("modes")] = list(config.extra_modes)
    if on_cpu():
        apply_cpu_sizes()


def apply_cpu_sizes() -> None:
    """Choosing the CPU switches the model and schedule to the workload's small step (a few
    seconds on 2 cores; declared on the workload, ``fields.cpu_step_values``, which ``run --device
    cpu`` reads too) and fixes the graph-only settings; a preset chosen on the CPU keeps them."""
    workload = st.session_state.get(key("workload"), "mlp")
    for field, value in fields.cpu_step_values(workload if workload in BUILT_IN else "mlp").items():
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
    keep_hidden_values([key(field) for field in PRESET_FIELDS] + shape_controls.KEPT)


def keep_hidden_values(keys: list[str]) -> None:
    """Streamlit drops the state of a widget that a run does not draw (a workload's size controls
    under another workload, the shapes' controls while off): written back before any is drawn,
    each value is kept, so the transformer's D_in is still there on the second rerun and the
    shapes come back as they were set."""
    for name in keys:
        if name in st.session_state:
            st.session_state[name] = st.session_state[name]


VISIBLE_GPUS_KEY = "_visible_gpus"  # GPUs the device list found (the GPU count is offered above 1)


def _shown(field: fields.FieldSpec) -> bool:
    """Whether a control belongs on screen: a workload's size controls only with that workload;
    the number of GPUs for a data-parallel run only where more than one GPU is visible."""
    if field.name == "nproc_per_node":
        return int(st.session_state.get(VISIBLE_GPUS_KEY, 0)) > 1
    workload = st.session_state.get(key("workload"), "mlp")
    return field.applies_to(workload if workload in fields.BUILT_IN_WORKLOADS else "mlp")


def user_code_allowed() -> bool:
    return os.environ.get(USER_CODE_ENV) == "1"


def _help(field: fields.FieldSpec, cpu: bool) -> str:
    """The field's help and what it accepts; on the CPU, first what changes there and why."""
    text = f"{field.help} {fields.allowed_text(field.name)}".strip()
    return f"{field.cpu_reason} {text}" if cpu and field.cpu_reason else text


def _widget(field: fields.FieldSpec, cpu: bool = False) -> None:
    """One control, chosen by the field's kind. Its current value is also passed as the widget's
    default: a rerun that reaches the server before the browser has drawn the control (a click
    right after the page loads) then falls back to that value, not to the widget's minimum. On
    the CPU a graph-only control is disabled and its help says why."""
    label, help_text = field.label_with_unit, _help(field, cpu)
    disabled = cpu and field.graph_only
    k = key(field.name)
    current = st.session_state.get(k)
    if field.kind == fields.LIST:
        chosen = [choice for choice in (current or []) if choice in field.choices]
        st.multiselect(label, field.choices, default=chosen, key=k, help=help_text,
                       format_func=lambda mode: MODE_LABELS.get(mode, mode))
    elif field.kind == fields.BOOL:
        st.toggle(label, value=bool(current), key=k, help=help_text, disabled=disabled)
    elif field.kind in (fields.CHOICE, fields.WORKLOAD):
        options = list(field.choices)
        st.selectbox(label, options, index=options.index(current) if current in options else 0,
                     key=k, help=help_text, disabled=disabled)
        if field.kind == fields.WORKLOAD and user_code_allowed():
            mine = st.session_state.get(key(USER_WORKLOAD))
            st.text_input(USER_WORKLOAD_LABEL, value=mine or "", key=key(USER_WORKLOAD),
                          help=USER_WORKLOAD_HELP,
                          placeholder="e.g. profiler_core.examples.user_step:build")
    elif field.kind == fields.CPUS:
        st.text_input(label, value=current or "", key=k, help=help_text,
                      placeholder=field.empty or None)
    elif field.kind == fields.FLOAT:
        low, high = field.number_limits
        st.number_input(label, min_value=float(low), max_value=float(high), step=field.step,
                        value=None if current is None else float(current),
                        format=field.number_format, key=k, help=help_text, disabled=disabled)
    else:
        low, high = field.number_limits
        st.number_input(label, min_value=low, max_value=high, step=1, key=k, help=help_text,
                        value=None if current is None else int(current),
                        placeholder=field.empty or None, disabled=disabled)


def _device_selector(gpus: pd.DataFrame, no_gpu_reason: str) -> None:
    options = list(gpus["device"]) + [devices.CPU_DEVICE]
    rows = {row["device"]: row for row in gpus.to_dict("records")}
    if st.session_state.get(DEVICE_KEY) not in options:
        st.session_state[DEVICE_KEY] = options[0]

    def describe(device: str) -> str:
        if device == devices.CPU_DEVICE:
            return CPU_OPTION
        return devices.describe_device(rows[device])

    device = fields.spec("device")
    why = (f" No CUDA GPU was found here ({no_gpu_reason})." if gpus.empty else "")
    st.selectbox(device.label, options, index=options.index(st.session_state[DEVICE_KEY]),
                 key=DEVICE_KEY, format_func=describe,
                 help=device.help + why + (" " + CPU_WHY if on_cpu() else ""))


def chosen_workload() -> str:
    """The workload the controls hold: the own step's ``package.module:function`` where one is
    given (and allowed), else the selector's."""
    own = str(st.session_state.get(key(USER_WORKLOAD)) or "").strip()
    return own if own and user_code_allowed() else st.session_state.get(key("workload"), "mlp")


def config_values() -> dict[str, Any]:
    """The RunConfig keyword arguments the controls hold now."""
    values: dict[str, Any] = {f: st.session_state.get(key(f)) for f in PRESET_FIELDS}
    values["modes"] = ALWAYS_MEASURED + tuple(m for m in (values.get("modes") or [])
                                              if m in fields.spec("modes").choices)
    values["workload"] = chosen_workload()
    values.update(shape_controls.chosen(values["workload"]))
    for field in fields.FIELDS:  # number inputs may hand back 64.0 for 64
        if field.kind in (fields.INT, fields.FLOAT) and values.get(field.name) is not None:
            values[field.name] = (int if field.kind == fields.INT else float)(values[field.name])
    values["device"] = st.session_state.get(DEVICE_KEY) or devices.CPU_DEVICE
    if values["device"] == devices.CPU_DEVICE:
        # What a CPU run does, whatever a disabled control held; its replays follow the eager
        # iterations, so "trials <= replays" is the eager iterations' rule.
        values.update(fields.CPU_FIXED)
        if values.get("eager_iters") is not None:
            values["replays"] = max(values["eager_iters"], INT_LIMITS["replays"][0])
            values["replays"] = min(values["replays"], INT_LIMITS["replays"][1])
        for name in ("replays", *fields.CPU_FIXED):
            st.session_state[key(name)] = values[name]
    chosen = st.session_state.get(PRESET_KEY, "seed")
    same = chosen in PRESETS and not changed_values(values, PRESETS[chosen])
    values["preset"] = chosen if same else fields.CUSTOM_PRESET
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
    allowed = fields.allowed_text(error.field)
    hint = f" {error.hint}." if error.hint else ""
    return f"Refused: {error.message}.{hint} {allowed}".strip()


def preset_caption(values: dict[str, Any], cpu: bool) -> str:
    """What the controls will run, under the preset selector: the preset's own description while
    they hold its values, else the step they hold (``step_text``) and why it is 'custom'."""
    chosen = st.session_state.get(PRESET_KEY, "seed")
    if values.get("preset") == chosen and not cpu:
        return PRESET_DESCRIPTIONS.get(chosen, "")
    why = ("On the CPU: eager only, sized to take seconds (labelled 'custom')" if cpu else
           f"Changed from {chosen} (labelled 'custom')")
    return f"{why}: {step_text(values, cpu)}"


def run_controls(gpus: pd.DataFrame, no_gpu_reason: str
                 ) -> tuple[RunConfig | None, ConfigError | None, str]:
    """The device and preset selectors; returns the config the controls hold, or the error of the
    control that refuses it, and the caption of what they will run (drawn under the Run button,
    which stays on the first screen at 1440x900). ``run_settings`` draws the other controls
    (below the button).

    Widget values are in session state before the widgets are drawn, so the config is checked
    first: the section holding a refused control opens, and the refusal sits right under it.
    """
    init_controls()
    st.session_state[VISIBLE_GPUS_KEY] = len(gpus)
    _device_selector(gpus, no_gpu_reason)
    size_for_device()
    cpu = on_cpu()
    presets, preset = list(PRESETS), fields.spec("preset")
    st.selectbox(preset.label, presets, index=presets.index(st.session_state[PRESET_KEY]),
                 key=PRESET_KEY, on_change=apply_preset, help=preset.help)
    values = config_values()
    config, error = build_config(values)
    if config is not None:  # what the run would refuse of its shapes when it starts
        error = shape_controls.refusal(config)
        config = None if error is not None else config
    caption = (preset_caption(values, cpu) if error is None else
               PRESET_DESCRIPTIONS.get(st.session_state[PRESET_KEY], ""))
    return config, error, caption


def run_settings(error: ConfigError | None) -> None:
    """Every other control, section by section (a refused one's section open, the refusal right
    under it), and the time limit."""
    cpu = on_cpu()
    for title in fields.SECTIONS:
        section = fields.in_section(title)
        refused_here = error is not None and error.field in {f.name for f in section}
        with st.expander(title, expanded=(title == fields.MODEL) or refused_here):
            for field in section:
                if not _shown(field):
                    continue
                _widget(field, cpu)
                if error is not None and refused_here and error.field == field.name:
                    st.error(refusal_text(error), icon=":material/block:")
    shape_controls.draw(chosen_workload(), error, refusal_text(error) if error else "")
    st.number_input("Stop a run after (s)", min_value=0, max_value=86_400, step=60, key=TIMEOUT_KEY,
                    value=int(st.session_state[TIMEOUT_KEY]),
                    help="A worker still running this long after it started (time waiting for the "
                         "device does not count) is stopped; what it measured is kept, marked "
                         "incomplete (0: no limit).")


def field_label(field: str) -> str:
    """How the sidebar names a field (a refusal, a worker's error)."""
    if field == USER_WORKLOAD:
        return USER_WORKLOAD_LABEL
    return fields.SPECS[field].label_with_unit if field in fields.SPECS else field
