"""Every ``RunConfig`` field declared once: its label, help, sidebar section, kind, command-line
option, what a CPU run does with it, and how its value is read from text. The command line's run
options and the sidebar's controls are both generated from ``FIELDS``. Ranges are looked up in
``config``; a workload's size fields, and which workload each shapes, come from their
declarations in ``workload_kinds``, never copied here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler_core.spec.config import (
    DTYPES,
    FLOAT_LIMITS,
    INT_LIMITS,
    OPTIMIZERS,
    PRESET_NAMES,
    WORKLOADS,
    RunConfig,
    changed_from_preset,
    is_user_spec,
)
from profiler_core.spec.errors import ConfigError, quoted
from profiler_core.spec.hostinfo import CPU_LIST_EXAMPLE, format_cpu_list, parse_cpu_list
from profiler_core.spec.modes import (
    ALWAYS_MEASURED,
    CPU_MODES,
    EXTRA_MODES,
    MODE_NAMES,
    cpu_modes_note,
    extra_modes_choices,
    extra_modes_help,
)
from profiler_core.spec.shapes import (
    STRATEGY_NAMES,
    check_buckets,
    check_vary,
    parse_strategies,
)
from profiler_core.spec.workload_kinds import (
    BROKEN,
    BUILT_IN,
    SIZE_FIELDS,
    SIZES,
    SizeField,
    workload_named,
)

# What a field's value is, which decides how it is read from text, its option and its widget.
INT = "int"
FLOAT = "float"
BOOL = "bool"
CHOICE = "choice"  # one of ``choices``
LIST = "list"  # modes: names separated by commas (eager and graph always first)
DEVICE = "device"  # "cpu" or a CUDA index ("0", "cuda:1")
WORKLOAD = "workload"  # a built-in or deliberately broken workload, or "package.module:function"
PRESET = "preset"  # a preset's name, or custom: where the other fields start from
CPUS = "cpus"  # CPUs as taskset writes them ("3", "2-5", "0,2,4"); empty: not pinned
SETTINGS = "settings"  # the user's own step's NAME=VALUE settings (an option given once each)
SHAPES = "shapes"  # text in ``spec.shapes``'s grammar: --vary NAME=DIST, --buckets
KINDS = (INT, FLOAT, BOOL, CHOICE, LIST, DEVICE, WORKLOAD, PRESET, CPUS, SETTINGS, SHAPES)

# The sidebar's sections, in order. Device and preset have their own selectors above them.
MODEL = "Model"
SCHEDULE = "Schedule"
MEASUREMENT = "Measurement"
SECTIONS = (MODEL, SCHEDULE, MEASUREMENT)
ABOVE_SECTIONS = "above the sections"
COMMAND_LINE_ONLY = "command line only"  # no sidebar control (the user's own step's settings)
# The shapes' own sidebar section (``dashboard/shape_controls.py``): a dimension, a distribution's
# kind and numbers or a lengths file, and the buckets, composed into --vary and --buckets text.
CHANGING_SHAPES = "Changing shapes"

# The workloads the dashboard offers.
BUILT_IN_WORKLOADS = tuple(BUILT_IN)
CUSTOM_PRESET = "custom"  # the label of a run whose values are not a preset's

# Why a graph-only control does nothing on the CPU (a CPU run times the eager step only).
GRAPH_ONLY_NOTE = "Off on the CPU: it needs a CUDA GPU (a CPU run times the eager step only)."


@dataclass(frozen=True)
class FieldSpec:
    """One ``RunConfig`` field as people see it: in the sidebar and on the command line."""

    name: str  # the RunConfig field
    label: str  # the sidebar's label, and how a refusal names the field
    help: str  # the sidebar's help: one or two sentences
    option_help: str  # the command line's help (run --help adds the default)
    kind: str  # one of KINDS
    section: str  # one of SECTIONS, ABOVE_SECTIONS, CHANGING_SHAPES or COMMAND_LINE_ONLY
    choices: tuple[str, ...] = ()  # CHOICE: the values; WORKLOAD: the ones the dashboard offers
    option: str = ""  # the command-line option; empty: "--" + the name with dashes
    metavar: str | None = None  # the option's value in run --help (argparse's default if None)
    empty: str = ""  # the field may be None (automatic); this says what that means
    graph_only: bool = False  # does nothing on the CPU: the sidebar disables it there
    cpu_value: int | bool | None = None  # what a CPU run uses instead (None: nothing fixed)
    cpu_note: str = ""  # what else changes on the CPU, for a control that stays enabled
    unit: str = ""  # shown after the label: "NVML interval (ms)"
    step: float | None = None  # FLOAT: the sidebar's step
    number_format: str | None = None  # FLOAT: the sidebar's printf format

    @property
    def cli_option(self) -> str:
        return self.option or "--" + self.name.replace("_", "-")

    @property
    def label_with_unit(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label

    @property
    def limits(self) -> tuple[int, int] | tuple[float, float] | None:
        """(low, high), inclusive, from ``config``'s tables; None for a field without a range."""
        return INT_LIMITS.get(self.name) or FLOAT_LIMITS.get(self.name)

    @property
    def number_limits(self) -> tuple[int, int] | tuple[float, float]:
        """``limits`` of a number field (``INT``, ``FLOAT``), which always has them: one declared
        without is an error of its declaration."""
        limits = self.limits
        if limits is None:
            raise KeyError(f"the number field {self.name} has no range in INT_LIMITS or "
                           "FLOAT_LIMITS")
        return limits

    @property
    def cpu_reason(self) -> str:
        """What the sidebar says about this control on the CPU ("" when nothing changes)."""
        return GRAPH_ONLY_NOTE if self.graph_only else self.cpu_note

    def applies_to(self, workload: str) -> bool:
        """Whether this field matters for a workload (``workload_kinds``: a size field of another
        does not, nor any size field for the user's own step)."""
        declared = workload_named(workload)
        if self.kind == SETTINGS:  # the settings of the user's own step: none for a built-in one
            return declared is None
        if self.name == "vary":  # every workload can vary a dimension of its own
            return True
        return declared.uses(self.name) if declared is not None else self.name not in SIZE_FIELDS


def size_field(size: SizeField) -> FieldSpec:
    """A workload's size field (``workload_kinds``) as the Model section and the command line
    show it."""
    return FieldSpec(size.name, size.label, size.help, size.option_help,
                     INT if size.whole else FLOAT, MODEL, option=size.option,
                     metavar=size.metavar, step=size.step, number_format=size.number_format)


# The command line's order, and the sidebar's within each section: preset and device (drawn
# above the sections), then section by section; the workloads' size fields in ``SIZES``' order.
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("preset", "Preset", "Fills every control with one of the article's experiments.",
              "start from a preset (default: seed; with --device cpu and neither a preset nor a "
              "size option, the workload's small CPU step, which runs in seconds); other options "
              "override it, and a run whose values differ from its preset is labelled "
              f"{CUSTOM_PRESET}", PRESET, ABOVE_SECTIONS,
              choices=(*PRESET_NAMES, CUSTOM_PRESET)),
    FieldSpec("device", "GPU",
              "The machine's GPUs by index, name and free memory. A CPU run times the eager step "
              "only.", "CUDA device index, or cpu", DEVICE, ABOVE_SECTIONS),
    # Model
    FieldSpec("workload", "Workload",
              "The article's MLP, a stack of transformer encoder layers, or a small convolutional "
              "classifier. Each shows its own size controls.",
              ", ".join(f"{w.summary} ({w.name})" for w in BUILT_IN.values())
              + ", a deliberately broken step that cannot be captured (" + ", ".join(BROKEN)
              + "), or your own step: a function build(device) returning model, batch, loss, "
              "optimizer (see README)", WORKLOAD, MODEL, choices=BUILT_IN_WORKLOADS,
              metavar="NAME|package.module:function"),
    *(size_field(size) for size in SIZES),
    FieldSpec("dtype", "Precision",
              "fp32 as a plain PyTorch loop runs it (PyTorch's default flags: TF32 off for matmuls, "
              "on for cuDNN convolutions), fp32-ieee (TF32 off everywhere), tf32 (on everywhere), "
              "bf16 autocast or fp16 autocast with a GradScaler.",
              "precision: fp32 as a plain PyTorch loop runs it (the process's flags: PyTorch's "
              "defaults), fp32-ieee (TF32 off for matmuls and convolutions), tf32 (TF32 on for "
              "both), bf16 autocast, fp16 autocast with a GradScaler; with your own step only "
              "fp32, bf16 or fp16 (autocast around its model and loss), and no dtype at all with a "
              "whole step, which owns its precision", CHOICE, MODEL, choices=DTYPES),
    FieldSpec("optimizer", "Optimizer",
              "SGD (lr 0.1), Adam or AdamW (capturable=True in the graphed copy).", "optimizer",
              CHOICE, MODEL, choices=OPTIMIZERS),
    # Schedule
    FieldSpec("warmup_iters", "Warm-up iterations",
              "Side-stream iterations before capture (CUDA graphs need them).",
              "side-stream warm-up iterations", INT, SCHEDULE),
    FieldSpec("capture_iters", "Iterations per graph",
              "Training steps captured in one graph (the article's lesson 3 uses 3).",
              "training steps captured per graph", INT, SCHEDULE, graph_only=True, cpu_value=1),
    FieldSpec("replays", "Graph replays", "Timed graph replays.", "timed graph replays", INT,
              SCHEDULE, graph_only=True),
    FieldSpec("eager_iters", "Eager iterations",
              "Timed eager steps. Empty: replays x iterations per graph, so both modes train for "
              "the same number of steps.", "timed eager steps (default: replays x capture-iters)",
              INT, SCHEDULE, empty="auto: replays x iterations per graph"),
    FieldSpec("trials", "Trials (eager/graph blocks)",
              "Eager and graph alternate in this many blocks, so drift hits both. Empty: up to "
              "10, with at least two iterations in each block.",
              "interleaved eager/graph blocks (default: up to 10, at least 2 iterations per "
              "block)", INT, SCHEDULE, empty="auto: up to 10"),
    FieldSpec("count_warmup", "Counter counts warm-up",
              "Does the static counter count warm-up steps (the article's lesson 2: no).",
              "let the static counter count warm-up steps (lesson 2: no)", BOOL, SCHEDULE),
    FieldSpec("seed", "Seed", "Seeds weights, batches and dropout.", "random seed", INT,
              SCHEDULE),
    # Measurement
    FieldSpec("modes", "Also time these modes",
              "Eager (the baseline) and the article's whole-step graph are always timed. "
              + extra_modes_help(),
              "modes to time beside eager and the article's graph (always measured): "
              + extra_modes_choices(), LIST, MEASUREMENT, choices=EXTRA_MODES,
              metavar="MODE,MODE", cpu_note=cpu_modes_note()),
    FieldSpec("profile", "Profiler (launch split)",
              "Record a torch.profiler window per mode: CPU launch vs GPU busy/idle, kernels, "
              "traces.", "record a torch.profiler window per mode", BOOL, MEASUREMENT,
              graph_only=True, cpu_value=False),
    FieldSpec("profile_iters", "Profiled iterations", "Iterations in each profiled window.",
              "iterations per profiled window", INT, MEASUREMENT, graph_only=True),
    FieldSpec("nvml", "NVML telemetry",
              "Sample GPU utilisation, clocks, power and memory with NVML during the run.",
              "sample GPU utilisation with NVML", BOOL, MEASUREMENT, graph_only=True,
              cpu_value=False),
    FieldSpec("nvml_interval_ms", "NVML interval", "NVML polling period.", "NVML polling period",
              FLOAT, MEASUREMENT, graph_only=True, unit="ms", step=5.0, number_format="%.1f"),
    FieldSpec("parity_steps", "Parity steps",
              "Replays compared with eager steps for numerical parity (0 skips it).",
              "steps compared for parity (0: skip)", INT, MEASUREMENT, graph_only=True,
              cpu_value=0),
    FieldSpec("repeats", "Fresh processes",
              "Measure the same settings in this many fresh processes, one after another. The "
              "headline is the run whose speedup is the median, with the spread between processes "
              "beside its own confidence interval: where a process lands on the host moves a "
              "host-bound eager step by 10-40%.",
              "measure in this many fresh processes, one after another; the saved run is the "
              "median one, with repeats.csv and the between-process interval", INT, MEASUREMENT,
              metavar="N"),
    FieldSpec("cpu_affinity", "Pin to CPUs",
              f"Pin the timing process to these CPUs, as taskset writes them ({CPU_LIST_EXAMPLE}). "
              "Empty: not pinned (wherever the system runs it).",
              f"pin the timing process to these CPUs, as taskset -c takes them ({CPU_LIST_EXAMPLE}); "
              "checked against the CPUs this machine allows (default: not pinned)", CPUS,
              MEASUREMENT, metavar="CPUS", empty="not pinned"),
    FieldSpec("workload_args", "Settings of your step",
              "Keyword parameters of your own step's build function, as NAME=VALUE.",
              "a setting of your own step: a keyword parameter with a default of its build "
              "function (def build(device, *, batch=32)), checked against its signature before "
              "anything runs; repeat for several (default: the function's own defaults)",
              SETTINGS, COMMAND_LINE_ONLY, option="--workload-arg", metavar="NAME=VALUE"),
    FieldSpec("vary", "Varying dimension",
              "One dimension that changes from step to step, and its distribution.",
              "vary one dimension per step, NAME=DIST: seq_len (transformer) or batch (any "
              "workload; an own step: a keyword of its batch function) over uniform:LOW:HIGH, "
              "lognormal:MEDIAN:SIGMA:MAX, a list 128,256,512 (weights: 128:3,256:1) or "
              "file:PATH (one length a line); times eager, padding to the largest, a graph per "
              "bucket (shared and own pools) and torch.compile on the same seeded sequence",
              SHAPES, CHANGING_SHAPES, metavar="NAME=DIST", empty="fixed shapes"),
    FieldSpec("buckets", "Buckets",
              "The sizes a graph per bucket pads each batch up to.",
              "with --vary: the bucket sizes a graph per bucket pads up to: pow2, quantiles:N "
              "(N quantiles of the sequence) or sizes such as 128,256,512", SHAPES,
              CHANGING_SHAPES, metavar="pow2|quantiles:N|SIZES"),
    FieldSpec("strategies", "Strategies",
              "The strategies a run of changing shapes times; empty: every one.",
              "with --vary: the strategies to time, separated by commas, eager and buckets among "
              "them: " + ", ".join(STRATEGY_NAMES) + " (leave out the torch.compile ones to skip "
              "their minutes of compiling; default: every strategy)", SHAPES, COMMAND_LINE_ONLY,
              metavar="NAME,NAME", empty="every strategy"),
    FieldSpec("nproc_per_node", "GPUs (data parallel)",
              "Train on this many GPUs at once with DistributedDataParallel, one process per GPU "
              "under torchrun: every rank is timed, with its communication and the straggler. "
              "Empty: one process, no DDP.",
              "data-parallel ranks on this node, one GPU each, started under torchrun "
              "(DistributedDataParallel; --device cpu: gloo ranks on the CPU); a per-rank run "
              "(default: one process, no DDP)", INT, MEASUREMENT, metavar="N",
              empty="one process, no DDP"),
)
SPECS: dict[str, FieldSpec] = {spec.name: spec for spec in FIELDS}

# What a CPU run does with the graph-only settings, whatever they held.
CPU_FIXED: dict[str, int | bool] = {f.name: f.cpu_value for f in FIELDS if f.cpu_value is not None}


def cpu_step_values(workload: str) -> dict[str, Any]:
    """The values that make a built-in workload's small CPU step (its declaration's
    ``cpu_sizes``) with what a CPU run does with the graph-only settings; {} for the user's own
    step, whose sizes only its code knows. The dashboard's CPU controls and ``run --device cpu``
    both use it."""
    kind = workload_named(workload)
    return {**kind.cpu_sizes, **CPU_FIXED} if kind is not None else {}


def applies(name: str, config: RunConfig) -> bool:
    """Whether a field's value had any effect on a run of ``config``: a workload's own size
    fields only for that workload (none for the user's own step, whose code sets its sizes and
    dropout), and the graph-only settings only on a CUDA device."""
    field = SPECS[name]
    return field.applies_to(config.workload) and (config.is_cuda or not field.graph_only)


def applied_settings(config: RunConfig) -> dict[str, Any]:
    """The settings that applied to a run of ``config``, in ``RunConfig``'s order, with the
    values it used: the fields that had an effect (``applies``), the timed eager steps and the
    trials as counted (not None for automatic), and on the CPU only the modes that run there."""
    values = {name: value for name, value in config.to_dict().items()
              if name not in SPECS or applies(name, config)}
    values["eager_iters"] = config.total_eager_iters
    values["trials"] = config.trial_count
    values["modes"] = [mode for mode in config.modes if config.is_cuda or mode in CPU_MODES]
    return values


def small_cpu_step(config: RunConfig) -> RunConfig:
    """``config`` on the CPU with its workload's small step; labelled custom when that is not
    the preset's own step (it never is for the built-in presets)."""
    small = config.replace(device="cpu", **cpu_step_values(config.workload))
    return small.replace(preset=CUSTOM_PRESET) if changed_from_preset(small) else small


def spec(name: str) -> FieldSpec:
    """The declaration of one ``RunConfig`` field; ``ConfigError`` for a name that is not one."""
    if name not in SPECS:
        raise ConfigError(name, f"unknown setting {quoted(name)}",
                          f"known settings: {', '.join(sorted(SPECS))}")
    return SPECS[name]


def in_section(section: str) -> tuple[FieldSpec, ...]:
    return tuple(s for s in FIELDS if s.section == section)


def options() -> dict[str, tuple[FieldSpec, ...]]:
    """Command-line option -> the fields it sets, in declaration order. Fields that share an
    option take their values together (``--dropout P1 P2``); the first one's help describes it."""
    grouped: dict[str, tuple[FieldSpec, ...]] = {}
    for field in FIELDS:
        grouped[field.cli_option] = grouped.get(field.cli_option, ()) + (field,)
    return grouped


def allowed_text(name: str) -> str:
    """What a field accepts, in words ("" for an unknown name or a field without a rule to say)."""
    field = SPECS.get(name)
    if field is None:
        return ""
    if field.kind == INT:
        low, high = INT_LIMITS[name]
        extra = " (empty: automatic)" if field.empty else ""
        return f"Allowed: a whole number from {low:,} to {high:,}{extra}."
    if field.kind == FLOAT:
        lowest, highest = FLOAT_LIMITS[name]
        return f"Allowed: {lowest:g} to {highest:g}."
    if field.kind in (CHOICE, WORKLOAD):
        return f"Allowed: {', '.join(field.choices)}."
    if field.kind == CPUS:
        return f"Allowed: CPU numbers as taskset writes them, {CPU_LIST_EXAMPLE} (empty: not pinned)."
    return ""


AUTO = "auto"  # the text of an automatic (None) value
_TRUE_WORDS = ("on", "true", "yes", "1")
_FALSE_WORDS = ("off", "false", "no", "0")


def read_whole_number(text: str) -> int:
    """"1024" or "1_024", in ASCII digits (Python's ``int`` would also take "\u0663" as 3);
    ``ValueError`` saying what was expected."""
    try:
        if not text.isascii():
            raise ValueError
        return int(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"expected a whole number, got {quoted(text)}") from None


def read_number(text: str) -> float:
    """A number in ASCII ("2.5", "1e-3"); ``ValueError`` saying what was expected."""
    try:
        if not text.isascii():
            raise ValueError
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {quoted(text)}") from None


def read_device(text: str) -> str:
    """"cpu", or a CUDA device as "cuda:N" from "N", "cuda" or "cuda:N"."""
    text = text.strip().lower()
    if text == "cpu":
        return "cpu"
    index = text[5:] if text.startswith("cuda:") else ("0" if text == "cuda" else text)
    if not (index.isascii() and index.isdigit()) or len(index) > 4 or int(index) > MAX_CUDA_INDEX:
        raise ValueError(f"expected 'cpu' or a CUDA index from 0 to {MAX_CUDA_INDEX}, got "
                         f"{quoted(text)}")
    return f"cuda:{int(index)}"


# The largest CUDA device index accepted (a machine has a few GPUs; the run checks it has this one).
MAX_CUDA_INDEX = 1023


def read_text(field: FieldSpec, text: str) -> Any:
    """``text`` as a value of ``field``; ``ValueError`` saying what was expected (the command
    line's option parser turns it into its own error; ``parse_value`` into a ``ConfigError``).
    Ranges are not checked here: building the ``RunConfig`` checks them."""
    if field.kind == INT:
        return read_whole_number(text)
    if field.kind == FLOAT:
        return read_number(text)
    if field.kind == DEVICE:
        return read_device(text)
    if field.kind == BOOL:
        word = text.strip().lower()
        if word in _TRUE_WORDS or word in _FALSE_WORDS:
            return word in _TRUE_WORDS
        raise ValueError(f"expected on or off, got {quoted(text)}")
    if field.kind == LIST:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in MODE_NAMES]
        if unknown:
            raise ValueError(f"expected modes among {', '.join(MODE_NAMES)}, got {quoted(unknown[0])}")
        return tuple(dict.fromkeys([*ALWAYS_MEASURED, *names]))
    if field.kind == CPUS:  # empty text is "not pinned" only where the field may be empty
        cpus = parse_cpu_list(text)
        if not cpus:
            raise ValueError(f"expected CPU numbers such as {CPU_LIST_EXAMPLE}, got {quoted(text)}, "
                             "which names no CPU")
        return format_cpu_list(cpus)
    if field.kind == SHAPES:
        text = text.strip()
        if field.name == "vary":
            check_vary(text)
        elif field.name == "strategies":
            return ",".join(parse_strategies(text))
        else:
            check_buckets(text)
        return text
    if field.kind == SETTINGS:  # NAME=VALUE pairs separated by spaces, as format_value writes them
        return tuple(read_setting(item) for item in text.split())
    if field.kind == WORKLOAD:
        if text in WORKLOADS or is_user_spec(text):
            return text
        raise ValueError(f"expected one of {', '.join(WORKLOADS)} or package.module:function, "
                         f"got {quoted(text)}")
    if text in field.choices:  # CHOICE, PRESET
        return text
    raise ValueError(f"expected one of {', '.join(field.choices)}, got {quoted(text)}")


def read_setting(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` (``--workload-arg batch=8``) as (name, value text); the value's kind comes
    from the build function's signature, which the run checks before anything runs."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME=VALUE such as batch=8, got {quoted(text)}")
    return name.strip(), value.strip()


def parse_value(name: str, text: str) -> Any:
    """One field's value from text, as the command line reads it ("1_024", "bf16", "off",
    "compile,compile_ro", "0" for cuda:0), or None from "auto" or "" for a field that may be
    automatic (trials, eager_iters). A ``ConfigError`` naming the field says what was expected.
    Ranges are checked when the ``RunConfig`` is built."""
    field = spec(name)
    if field.empty and text.strip().lower() in ("", AUTO):
        return None
    try:
        return read_text(field, text)
    except ValueError as error:
        raise ConfigError(name, f"{name}: {error}", allowed_text(name).rstrip(".")) from None


def format_value(name: str, value: Any) -> str:
    """A field's value as text that ``parse_value`` reads back: on/off, modes joined by commas,
    auto for an automatic field."""
    kind = spec(name).kind
    if value is None:
        return AUTO
    if kind == BOOL:
        return "on" if value else "off"
    if kind == LIST:
        return ",".join(value)
    if kind == SETTINGS:
        return " ".join(f"{setting}={setting_value}" for setting, setting_value in value)
    return str(value)

