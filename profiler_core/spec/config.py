"""Run configuration: the frozen ``RunConfig``, its limits, validation and the article's presets.

Scope: what to run, never how. Every field is checked when a ``RunConfig`` is built, so a config
that exists is a valid one; a bad value raises ``ConfigError`` naming the field and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from profiler_core.spec.errors import ConfigError, quoted, shown, shown_int
from profiler_core.spec.hostinfo import CPU_LIST_EXAMPLE, format_cpu_list, parse_cpu_list
from profiler_core.spec.modes import ALWAYS_MEASURED, MODE_NAMES
from profiler_core.spec.numerics import FLAG_SETTING_DTYPES
from profiler_core.spec.shapes import check_buckets, check_vary, parse_strategies
from profiler_core.spec.workload_kinds import (
    KNOWN,
    SIZE_FIELDS,
    SIZES,
    float_limits,
    int_limits,
    workload_of,
)

DTYPES = ("fp32", "fp32-ieee", "tf32", "bf16", "fp16")  # meanings: ``numerics.DTYPE_MEANINGS``
# The article's step, its three lessons, and the built-in transformer and convolutional workloads.
PRESET_NAMES = ("seed", "lesson1", "lesson2", "lesson3", "transformer", "conv")
OPTIMIZERS = ("sgd", "adam", "adamw")
# The declared workloads' names (``workload_kinds``): the built-in ones, then the deliberately
# broken steps that cannot be captured (for the tests and the CLI only).
WORKLOADS = tuple(KNOWN)

# Interleaved trials when none are asked for (fewer when the replays or eager steps are few).
DEFAULT_TRIALS = 10

# The user's own step: "package.module:function" (see ``user_workload``).
USER_WORKLOAD_PATTERN = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


MAX_USER_SPEC_CHARS = 256  # a package.module:function reference, at most

# A setting of the user's own step (a keyword parameter of its build function): its value.
SettingValue = bool | int | float | str
MAX_SETTINGS = 32  # settings given to one own step, at most
MAX_SETTING_TEXT = 200  # characters of a text setting, at most
SETTING_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def is_user_spec(text: object) -> bool:
    """Whether a workload name is a ``package.module:function`` reference."""
    return isinstance(text, str) and USER_WORKLOAD_PATTERN.fullmatch(text) is not None


# Largest tensor the tool will build, in elements (a layer over 2^31 elements is refused).
MAX_TENSOR_ELEMENTS = 2**31

# A run's time limit in seconds (``run --timeout``, the dashboard's "Stop a run after"; 0: no
# limit): its default and the most it may be.
RUN_TIMEOUT_S = 900.0
MAX_TIMEOUT_S = 86_400.0

# (low, high) inclusive limits of every numeric field; the dashboard's controls use them too. A
# workload's size fields bring their own (``workload_kinds.SIZES``).
INT_LIMITS: dict[str, tuple[int, int]] = {
    **int_limits(SIZES),
    "warmup_iters": (1, 1_000),
    "capture_iters": (1, 100),
    "replays": (1, 100_000),
    "eager_iters": (1, 10_000_000),
    "trials": (1, 1_000),
    "seed": (0, 2**31 - 1),
    "profile_iters": (1, 1_000),
    "parity_steps": (0, 1_000),
    "repeats": (1, 15),
    "nproc_per_node": (1, 64),
}
FLOAT_LIMITS: dict[str, tuple[float, float]] = {
    **float_limits(SIZES),
    "nvml_interval_ms": (1.0, 10_000.0),
}


@dataclass(frozen=True)
class RunConfig:
    """One eager-vs-graph experiment. Defaults are the seed article's tutorial step."""

    batch: int = 640  # N: rows per training batch
    d_in: int = 4096  # input features
    hidden: int = 2048  # H: width of every hidden layer
    d_out: int = 1024  # output features
    hidden_layers: int = 1  # mlp: 1 = the article's Linear-Dropout-Linear-Dropout, k adds k-1
    #                         Linear+ReLU; transformer: encoder layers; conv: convolution blocks
    heads: int = 8  # transformer: attention heads (hidden must divide by it)
    seq_len: int = 128  # transformer: tokens per sequence
    channels: int = 64  # conv: channels of every convolution
    image_size: int = 32  # conv: input images are image_size x image_size, 3 channels
    dropout1: float = 0.2  # dropout after the first Linear
    dropout2: float = 0.1  # dropout after the last Linear
    dtype: str = "fp32"  # fp32 (PyTorch's default flags), fp32-ieee (TF32 off everywhere), tf32,
    #                      bf16 autocast, fp16 autocast + GradScaler (``numerics.DTYPE_MEANINGS``)
    optimizer: str = "sgd"  # sgd (lr 0.1), adam, adamw (capturable=True in the graphed replica)
    warmup_iters: int = 3  # side-stream warm-up iterations before capture
    capture_iters: int = 1  # training steps captured in one graph (article lesson 3: 3)
    replays: int = 200  # timed graph replays
    eager_iters: int | None = None  # timed eager steps; None = replays * capture_iters
    count_warmup: bool = True  # does the static counter count warm-up steps (lesson 2: no)
    seed: int = 0  # seeds weights, batches and dropout
    device: str = "cuda:0"  # "cuda:N" or "cpu" (cpu runs only the eager half)
    trials: int | None = None  # eager and graph alternate in this many blocks; None = auto
    profile: bool = True  # record a torch.profiler window per mode (launch/kernel split)
    profile_iters: int = 20  # iterations in each profiled window
    nvml: bool = True  # sample GPU utilisation, clocks, power with NVML during the run
    nvml_interval_ms: float = 20.0  # NVML polling period
    parity_steps: int = 5  # replays compared with eager steps for numerical parity (0 = skip)
    modes: tuple[str, ...] = ALWAYS_MEASURED  # eager, graph, then any of ``spec.modes``' others
    workload: str = "mlp"  # "mlp", a deliberately broken step (WORKLOADS), or "package.module:function"
    preset: str = "custom"  # the preset the values started from; a run whose values differ
    #                         from it is labelled custom everywhere (``preset_label``)
    repeats: int = 1  # fresh processes measuring this config; the headline is their median
    cpu_affinity: str | None = None  # CPUs the timing process is pinned to, as taskset writes
    #                                  them ("3", "2-5", "0,2,4"); None: not pinned
    nproc_per_node: int | None = None  # data-parallel ranks on this node, one GPU each, under
    #                                    torchrun (``engine.ddp_step``); None: one process, no DDP
    workload_args: tuple[tuple[str, SettingValue], ...] = ()  # the user's own step's settings
    #                       (keyword parameters of its build function), by name; --workload-arg
    vary: str | None = None  # one dimension varied per step and its distribution, NAME=DIST
    #                          ("seq_len=lognormal:128:0.6:512", ``spec.shapes``); None: fixed
    buckets: str = "pow2"  # with vary: the sizes a graph per bucket pads up to (pow2,
    #                        quantiles:N, or 128,256,512)
    strategies: str | None = None  # with vary: the strategies timed, NAME,NAME (eager and
    #                                buckets among them); None: every one (``spec.shapes``)

    def __post_init__(self) -> None:
        if isinstance(self.cpu_affinity, str):  # one spelling per set of CPUs: "2,3,4" is "2-4"
            try:
                compact = format_cpu_list(parse_cpu_list(self.cpu_affinity))
            except ValueError as error:
                raise ConfigError("cpu_affinity", f"cpu_affinity: {error}",
                                  f"give CPU numbers as taskset does: {CPU_LIST_EXAMPLE}, or "
                                  "leave it empty: not pinned") from None
            object.__setattr__(self, "cpu_affinity", compact or None)
        if isinstance(self.workload_args, Mapping):  # one spelling: (name, value) pairs by name
            object.__setattr__(self, "workload_args", tuple(sorted(self.workload_args.items())))
        elif isinstance(self.workload_args, (list, tuple)) and all(
                isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
                for pair in self.workload_args):
            object.__setattr__(self, "workload_args",
                               tuple(sorted((name, value) for name, value in self.workload_args)))
        _validate(self)

    @property
    def total_eager_iters(self) -> int:
        """Timed eager steps: the explicit value, else as many training steps as the replays do."""
        return self.eager_iters if self.eager_iters is not None else self.replays * self.capture_iters

    @property
    def trial_count(self) -> int:
        """Interleaved blocks per mode: the explicit value, else up to ``DEFAULT_TRIALS`` with at
        least two iterations in each block (a steady-state block keeps all but its first)."""
        if self.trials is not None:
            return self.trials
        return max(1, min(DEFAULT_TRIALS, self.replays // 2, self.total_eager_iters // 2))

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def device_index(self) -> int | None:
        return int(self.device.split(":")[1]) if self.is_cuda else None

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    @property
    def extra_modes(self) -> tuple[str, ...]:
        """The requested modes beside eager and the article's graph."""
        return tuple(mode for mode in self.modes if mode not in ALWAYS_MEASURED)

    @property
    def settings(self) -> dict[str, SettingValue]:
        """The user's own step's settings, by name (``workload_args``)."""
        return dict(self.workload_args)

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["modes"] = list(self.modes)
        values["workload_args"] = self.settings
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> RunConfig:
        """Build from a mapping (a saved summary, a form); unknown keys are refused."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(str(unknown[0])[:40], f"unknown setting {quoted(unknown[0])}",
                              f"known settings: {', '.join(sorted(known))}")
        values = dict(values)
        if isinstance(values.get("modes"), list):
            values["modes"] = tuple(values["modes"])
        if isinstance(values.get("workload_args"), list):  # pairs, as JSON writes tuples
            values["workload_args"] = tuple(tuple(pair) if isinstance(pair, list) else pair
                                            for pair in values["workload_args"])
        return cls(**values)


def check_size_fields_in_config() -> None:
    """Every workload's size field (``workload_kinds.SIZES``) is a ``RunConfig`` field of its
    kind; a ``TypeError`` saying what to add otherwise, when this module is imported."""
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig)}
    for size in SIZES:
        kind = "int" if size.whole else "float"
        default = defaults.get(size.name, dataclasses.MISSING)
        if default is dataclasses.MISSING or isinstance(default, bool) or not isinstance(
                default, int if size.whole else float):
            raise TypeError(f"the size field {size.name} (spec/workload_kinds.py) is not "
                            f"{'an int' if size.whole else 'a float'} field of RunConfig: add "
                            f"'{size.name}: {kind} = DEFAULT  "
                            "# what it sizes' to RunConfig in spec/config.py")


check_size_fields_in_config()


def _allowed_int(name: str) -> str:
    low, high = INT_LIMITS[name]
    return f"a whole number from {low:,} to {high:,}"


def _check_int(config: RunConfig, name: str) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"{name} must be {_allowed_int(name)}; got {quoted(value)}")
    low, high = INT_LIMITS[name]
    if not low <= value <= high:
        raise ConfigError(name, f"{name} must be {_allowed_int(name)}; got {shown_int(value)}")


def _check_float(config: RunConfig, name: str) -> None:
    value = getattr(config, name)
    low, high = FLOAT_LIMITS[name]
    allowed = f"a number from {low:g} to {high:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and math.isnan(value)):
        raise ConfigError(name, f"{name} must be {allowed}; got {quoted(value)}")
    if not low <= value <= high:  # a whole number of 400 digits compares, but is no float
        got = shown_int(value) if isinstance(value, int) else f"{value:g}"
        raise ConfigError(name, f"{name} must be {allowed}; got {got}")


def _check_choice(config: RunConfig, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(config, name)
    if value not in choices:
        raise ConfigError(name, f"{name} must be one of {', '.join(choices)}; got {quoted(value)}")


def _check_settings(config: RunConfig) -> None:
    """The own step's settings: only with an own step, at most ``MAX_SETTINGS``, each named like
    a Python keyword parameter (and not like a run setting that applies to an own step, which
    the index and the tables would confuse with it), each a bool, number or short text."""
    pairs = config.workload_args
    if not isinstance(pairs, tuple):
        raise ConfigError("workload_args", f"workload_args must be name=value settings; got "
                                           f"{quoted(pairs)}")
    if pairs and not is_user_spec(config.workload):
        raise ConfigError("workload_args", f"--workload-arg sets your own step's settings, and "
                                           f"{config.workload} is a built-in workload",
                          "use its size options (--batch, --hidden...) instead")
    if len(pairs) > MAX_SETTINGS:
        raise ConfigError("workload_args", f"at most {MAX_SETTINGS} settings; got {len(pairs)}")
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ConfigError("workload_args", "a setting is given twice", "give each setting once")
    run_settings = {f.name for f in dataclasses.fields(RunConfig)} - SIZE_FIELDS
    for name, value in pairs:
        if not SETTING_NAME_PATTERN.fullmatch(name):
            raise ConfigError("workload_args", f"{shown(name)!r} is not a setting name",
                              "settings are keyword parameters of your build function: "
                              "letters, digits and _")
        if name in run_settings:
            raise ConfigError("workload_args", f"your step's setting {name!r} has the name of a "
                                               "run setting", f"rename the parameter of your build "
                                                              f"function (e.g. step_{name})")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError("workload_args", f"{name} must be a finite number; got {value!r}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
            raise ConfigError("workload_args", f"{name} is too large: {shown_int(value)}")
        if isinstance(value, str) and (len(value) > MAX_SETTING_TEXT or not value.isprintable()):
            raise ConfigError("workload_args", f"{name} must be printable text of at most "
                                               f"{MAX_SETTING_TEXT} characters")
        if not isinstance(value, (bool, int, float, str)):
            raise ConfigError("workload_args", f"{name} must be a bool, a number or text; got "
                                               f"{type(value).__name__}")


def _check_shapes(config: RunConfig) -> None:
    """``vary`` and ``buckets``: their grammar (``spec.shapes``; a lengths file is read when the
    run starts), a dimension the workload has, and no data-parallel or repeated run."""
    if not isinstance(config.buckets, str):
        raise ConfigError("buckets", f"buckets must be text such as pow2; got {quoted(config.buckets)}")
    check_buckets(config.buckets)
    if config.strategies is not None:
        if not isinstance(config.strategies, str):
            raise ConfigError("strategies", f"strategies must be names separated by commas; got "
                                            f"{quoted(config.strategies)}")
        if config.vary is None:
            raise ConfigError("strategies", "strategies are chosen for a run of changing shapes",
                              "add --vary NAME=DIST, or leave --strategies out")
        parse_strategies(config.strategies)
    if config.vary is None:
        return
    if not isinstance(config.vary, str):
        raise ConfigError("vary", f"vary must be NAME=DIST; got {quoted(config.vary)}")
    check_vary(config.vary)
    dimension = config.vary.partition("=")[0].strip()
    declared = workload_of(config)
    allowed = declared.varying if declared is not None else None
    if not is_user_spec(config.workload) and dimension not in (allowed or ()):
        raise ConfigError("vary", f"the {config.workload} workload cannot vary {shown(dimension)}",
                          f"vary {' or '.join(allowed) if allowed else 'nothing'} (an own step: "
                          "a keyword of its batch function)")
    if config.nproc_per_node is not None:
        raise ConfigError("vary", "--vary cannot be combined with --nproc-per-node",
                          "measure the shapes on one device")


def _validate(config: RunConfig) -> None:
    for name in INT_LIMITS:
        if name in ("eager_iters", "trials", "nproc_per_node") and getattr(config, name) is None:
            continue
        _check_int(config, name)
    for name in FLOAT_LIMITS:
        _check_float(config, name)
    _check_choice(config, "dtype", DTYPES)
    _check_choice(config, "optimizer", OPTIMIZERS)
    if is_user_spec(config.workload) and len(config.workload) > MAX_USER_SPEC_CHARS:
        raise ConfigError("workload", f"workload {quoted(config.workload)} is longer than "
                                      f"{MAX_USER_SPEC_CHARS} characters",
                          "name your step by a shorter package.module:function")
    if not (config.workload in WORKLOADS or is_user_spec(config.workload)):
        raise ConfigError("workload", f"workload must be one of {', '.join(WORKLOADS)} or a "
                                      f"package.module:function; got {quoted(config.workload)}",
                          "see README, 'Your own training step'")
    if is_user_spec(config.workload) and config.dtype in FLAG_SETTING_DTYPES:
        raise ConfigError("dtype", f"dtype {config.dtype} would set TF32 flags for your own step, "
                                   "whose code owns its numerics",
                          "set them in your module (torch.backends.cuda.matmul.allow_tf32, "
                          "torch.backends.cudnn.allow_tf32 or torch.set_float32_matmul_precision): "
                          "the tool runs your step with the flags your code sets, and records them")
    if config.cpu_affinity is not None and not isinstance(config.cpu_affinity, str):
        raise ConfigError("cpu_affinity", f"cpu_affinity must be a list of CPUs such as "
                                          f"{CPU_LIST_EXAMPLE}; got {config.cpu_affinity!r}")
    for name in ("count_warmup", "profile", "nvml"):
        if not isinstance(getattr(config, name), bool):
            raise ConfigError(name, f"{name} must be true or false; got {quoted(getattr(config, name))}")
    device = config.device
    if not isinstance(device, str) or not (
        device == "cpu" or (device.startswith("cuda:") and device[5:].isascii() and device[5:].isdigit() and len(device) < 9)
    ):
        raise ConfigError("device", f"device must be 'cpu' or a CUDA index such as 0; got {quoted(device)}")
    if config.dtype == "fp16" and config.capture_iters > 1:
        raise ConfigError("capture_iters", "with fp16, capture_iters must be 1",
                          "fp16's GradScaler step runs outside the graph, so a graph can hold only "
                          "one training step: use bf16, or capture_iters 1")
    if config.trials is not None and config.trials > config.replays:
        raise ConfigError("trials", f"trials ({config.trials}) cannot exceed replays ({config.replays})",
                          "each trial needs at least one replay: lower trials, raise replays, or "
                          "leave trials empty (automatic)")
    if config.trials is not None and config.total_eager_iters < config.trials:
        raise ConfigError("eager_iters",
                          f"eager_iters ({config.total_eager_iters}) cannot be fewer than trials "
                          f"({config.trials})", "raise eager_iters or lower trials")
    _check_settings(config)
    _check_shapes(config)
    workload = workload_of(config)
    if workload is not None:
        workload.check(config)
    layer_sizes = workload.largest_tensors(config) if workload is not None else {}
    for name, elements in layer_sizes.items():
        if elements > MAX_TENSOR_ELEMENTS:
            raise ConfigError(
                name,
                f"a tensor of {elements:,} elements (over 2^31) follows from {name}={getattr(config, name):,}",
                "shrink the batch or layer sizes so that no weight or activation exceeds 2^31 elements",
            )
    modes = config.modes
    if not isinstance(modes, tuple) or not all(isinstance(m, str) for m in modes):
        raise ConfigError("modes", f"modes must be a list of names; got {quoted(modes)}")
    unknown = [m for m in modes if m not in MODE_NAMES]
    if unknown:
        raise ConfigError("modes", f"modes must be some of {', '.join(MODE_NAMES)}; got "
                                   f"{quoted(unknown[0])}")
    if len(set(modes)) != len(modes) or modes[:2] != ALWAYS_MEASURED:
        raise ConfigError("modes", f"modes must start with eager, graph and name each mode once; "
                                   f"got {shown(', '.join(modes))}",
                          "eager (the baseline) and graph (the article's capture) are always "
                          "measured: add the others after them")
    if config.preset not in PRESET_NAMES + ("custom",):
        raise ConfigError("preset", f"preset must be custom or one of {', '.join(PRESET_NAMES)}; "
                          f"got {quoted(config.preset)}")


PRESETS: dict[str, RunConfig] = {
    "seed": RunConfig(preset="seed"),
    # Lesson 1: work runs during warm-up but not during capture; replay runs it.
    "lesson1": RunConfig(warmup_iters=1, capture_iters=1, replays=10, count_warmup=True,
                         preset="lesson1"),
    # Lesson 2: only what is captured matters (the warm-up does not touch the counter).
    "lesson2": RunConfig(warmup_iters=1, capture_iters=1, replays=10, count_warmup=False,
                         preset="lesson2"),
    # Lesson 3: a loop captured into one graph replays as that many steps.
    "lesson3": RunConfig(warmup_iters=3, capture_iters=3, replays=10, count_warmup=True,
                         preset="lesson3"),
    # A stack of transformer encoder layers (pre-norm, GELU MLP of 4x the width), bf16 autocast.
    "transformer": RunConfig(workload="transformer", batch=16, hidden=512, hidden_layers=4,
                             heads=8, seq_len=128, d_out=512, dtype="bf16", optimizer="adamw",
                             preset="transformer"),
    # A small convolutional classifier: conv blocks at 64 channels on 32x32 images, 10 classes.
    "conv": RunConfig(workload="conv", batch=64, channels=64, image_size=32, hidden_layers=4,
                      d_out=10, dtype="bf16", optimizer="sgd", preset="conv"),
}

PRESET_DESCRIPTIONS = {
    "seed": "The article's tutorial step: N=640, 4096 -> 2048 -> 1024, SGD, 200 replays.",
    "lesson1": "Lesson 1: warm-up computes, capture does not; 10 replays count 10.",
    "lesson2": "Lesson 2: only what happens during capture matters; warm-up leaves the counter at 0.",
    "lesson3": "Lesson 3: 3 steps captured in one graph; 10 replays count 30.",
    "transformer": "4 transformer encoder layers, width 512, 8 heads, 16 x 128 tokens, bf16, AdamW.",
    "conv": "A convolutional classifier: 4 blocks of 64 channels on 64 images of 32x32, bf16, SGD.",
}


# Fields that say where a run ran, not which values it used: a preset run on the CPU is still that
# preset.
NOT_PRESET_FIELDS = ("device", "preset")
# Fields that say how a run is measured (in how many fresh processes, on which CPUs), not which
# values it used: the seed step measured five times, pinned, or on two GPUs, is still the seed
# preset.
HOW_MEASURED_FIELDS = ("repeats", "cpu_affinity", "nproc_per_node")


def changed_from_preset(config: RunConfig, base: RunConfig | None = None) -> list[str]:
    """The fields whose values differ from ``base``, by default the preset ``config`` names (all
    of them: no preset)."""
    base = PRESETS.get(config.preset) if base is None else base
    values = {f: getattr(config, f) for f in config.to_dict()}
    if base is None:
        return [f for f in values if f not in NOT_PRESET_FIELDS + HOW_MEASURED_FIELDS]
    return changed_values(values, base)


def changed_values(values: Mapping[str, Any], base: RunConfig) -> list[str]:
    """Of a config's values by field (a config's own, or the keyword arguments one is about to
    be built from), the fields that differ from ``base``; the fields that say where or how a run
    is measured (``NOT_PRESET_FIELDS``, ``HOW_MEASURED_FIELDS``) never do."""
    return [f for f, value in values.items() if f not in NOT_PRESET_FIELDS + HOW_MEASURED_FIELDS
            and value != getattr(base, f)]


# Fields that say how a step is run and timed, not which step it is: the seed step in bf16 with
# every mode timed is still the seed step (its label says the precision and the modes beside it).
STEP_VARIANT_FIELDS = ("dtype", "modes")


def step_preset(config: RunConfig) -> str | None:
    """The preset whose step ``config`` runs: the preset it names, or else the first preset whose
    every value it has, the precision and the modes apart (``STEP_VARIANT_FIELDS``); None when
    none (a custom step)."""
    names = ([config.preset] if config.preset in PRESETS else []) + list(PRESETS)
    for name in dict.fromkeys(names):
        if not set(changed_from_preset(config, PRESETS[name])) - set(STEP_VARIANT_FIELDS):
            return name
    return None


def preset_label(config: RunConfig) -> str:
    """The one label of a run's values, in every reader (the dashboard, ``index``, the runs
    list), always shown beside its precision: the preset whose step it runs (``step_preset``:
    the seed preset in bf16, as the bundled sample, is "seed"), else "custom"."""
    return step_preset(config) or "custom"


def preset_text(config: RunConfig, limit: int = 3) -> str:
    """What a run's values are, in words: 'seed preset, fp32'; 'seed step in bf16, every mode'
    (the preset's step, run in another precision or with other modes); 'custom (seed with
    batch 64, dtype bf16)' (the preset it recorded, changed); 'custom, fp32'."""
    name = step_preset(config)
    if name is None:
        base = PRESETS.get(config.preset)
        if base is None:
            return f"custom, {config.dtype}"
        changed = [f"{f} {getattr(config, f)}" for f in changed_from_preset(config)]
        shown = ", ".join(changed[:limit]) + (f" and {len(changed) - limit} more"
                                              if len(changed) > limit else "")
        return f"custom ({config.preset} with {shown})"
    base = PRESETS[name]
    if config.dtype == base.dtype and tuple(config.modes) == tuple(base.modes):
        return f"{name} preset, {config.dtype}"
    modes = ("every mode" if set(config.modes) == set(MODE_NAMES) else
             "modes " + ", ".join(config.modes))
    return f"{name} step in {config.dtype}" + (
        "" if tuple(config.modes) == tuple(base.modes) else f", {modes}")


def preset(name: str, **overrides: Any) -> RunConfig:
    """A preset's config with optional overrides (validated like any config)."""
    if name not in PRESETS:
        raise ConfigError("preset", f"unknown preset {quoted(name)}", f"choose one of {', '.join(PRESETS)}")
    return PRESETS[name].replace(**overrides) if overrides else PRESETS[name]
