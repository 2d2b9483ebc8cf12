"""The built-in workloads as objects: the article's MLP, a transformer encoder stack, a small
convolutional classifier, and the deliberately broken steps (the MLP with one flaw each).

Each workload is declared once here: its size fields (``SizeField``: name, limits, label and
help; ``config`` takes their limits from them, ``fields`` their command-line options and sidebar
controls), its small CPU step, its sweep axes, its captions, counts and memory estimates. No torch
here: its model, batches, loss and (for a broken step) its flaw are ``engine.workload_models``'s,
and the step itself (``engine.workloads``) is the same for all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from profiler_core.spec.errors import ConfigError

if TYPE_CHECKING:  # config imports this module; the type is for annotations only
    from profiler_core.spec.config import RunConfig

MAX_WIDTH = 1_048_576  # the largest batch or layer width (rows, features)


@dataclass(frozen=True)
class SizeField:
    """A ``RunConfig`` field that sizes a workload, declared once: the range it may take and its
    words on the command line and in the sidebar (its ``FieldSpec`` in ``fields``, in the
    Model section). ``RunConfig`` holds its default; ``config`` checks at import that it does."""

    name: str  # the RunConfig field
    limits: tuple[int, int] | tuple[float, float]  # (low, high), inclusive: whole numbers or not
    label: str  # the sidebar's label, and how a refusal names the field
    help: str  # the sidebar's help
    option_help: str  # the command line's help (run --help adds the default)
    option: str = ""  # the command-line option; empty: "--" + the name with dashes
    metavar: str | None = None  # the option's value in run --help
    step: float | None = None  # a fractional field: the sidebar's step
    number_format: str | None = None  # a fractional field: the sidebar's printf format

    @property
    def whole(self) -> bool:
        """Whether it takes whole numbers (its limits are ints)."""
        return _whole(self.limits)


def _whole(limits: tuple[int, int] | tuple[float, float]) -> TypeGuard[tuple[int, int]]:
    return all(isinstance(value, int) for value in limits)


def int_limits(sizes: Iterable[SizeField]) -> dict[str, tuple[int, int]]:
    """Field -> (low, high) of the whole-number fields among ``sizes``."""
    return {size.name: size.limits for size in sizes if _whole(size.limits)}


def float_limits(sizes: Iterable[SizeField]) -> dict[str, tuple[float, float]]:
    """Field -> (low, high) of the fractional fields among ``sizes``."""
    return {size.name: (float(size.limits[0]), float(size.limits[1])) for size in sizes
            if not _whole(size.limits)}


BATCH = SizeField("batch", (1, MAX_WIDTH), "Batch size N", "Rows per training batch.",
                  "batch size N")
D_IN = SizeField("d_in", (1, MAX_WIDTH), "Input features D_in",
                 "Features into the first Linear layer.", "input features")
HIDDEN = SizeField("hidden", (1, MAX_WIDTH), "Hidden width H", "Width of every hidden layer.",
                   "hidden width H")
D_OUT = SizeField("d_out", (1, MAX_WIDTH), "Output features D_out",
                  "Features out of the last Linear layer.", "output features")
HIDDEN_LAYERS = SizeField(
    "hidden_layers", (1, 64), "Hidden layers",
    "1 is the article's Linear-Dropout-Linear-Dropout; k adds k-1 Linear+ReLU.",
    "mlp: hidden layers; transformer: encoder layers; conv: conv blocks")
DROPOUT1 = SizeField("dropout1", (0.0, 0.99), "Dropout after the first Linear",
                     "Dropout probability after the first Linear.",
                     "dropout after the first and the last Linear", option="--dropout",
                     metavar="P1", step=0.05, number_format="%.2f")
DROPOUT2 = SizeField("dropout2", (0.0, 0.99), "Dropout after the last Linear",
                     "Dropout probability after the last Linear.", "dropout after the last Linear",
                     option="--dropout", metavar="P2", step=0.05, number_format="%.2f")
SEQ_LEN = SizeField("seq_len", (1, 65_536), "Sequence length", "Tokens per sequence.",
                    "transformer: tokens per sequence")
HEADS = SizeField("heads", (1, 256), "Attention heads",
                  "Attention heads of every encoder layer (the width must divide by it).",
                  "transformer: attention heads")
IMAGE_SIZE = SizeField("image_size", (4, 2_048), "Image size",
                       "Input images are this many pixels wide and high, 3 channels.",
                       "conv: image height and width")
CHANNELS = SizeField("channels", (1, 4_096), "Channels", "Channels of every convolution.",
                     "conv: channels of every convolution")
# Every size field, in the order the command line and the sidebar list them (a workload's size
# field missing here stops the import, below).
SIZES: tuple[SizeField, ...] = (BATCH, D_IN, HIDDEN, D_OUT, HIDDEN_LAYERS, DROPOUT1, DROPOUT2,
                                SEQ_LEN, HEADS, IMAGE_SIZE, CHANNELS)

# Fields every built-in workload uses; each workload adds its own size fields and dropouts.
COMMON_FIELDS = (BATCH, HIDDEN_LAYERS, D_OUT)
# Distinct batches every run draws once and cycles through (the memory estimate counts them).
BATCH_POOL_SIZE = 8
# Each optimizer's learning rate (``config.OPTIMIZERS``).
LEARNING_RATES = {"sgd": 0.1, "adam": 1e-3, "adamw": 1e-3}


@dataclass(frozen=True)
class Workload:
    """One built-in workload. Subclasses say what their sizes mean."""

    name: str
    sizes: tuple[SizeField, ...]  # the config fields that shape this workload
    summary: str  # one line, for help texts
    # The small step a CPU run gets unless its sizes are asked for (seconds on 2 cores, where the
    # presets' steps take minutes): (field, value) pairs, sizes and the timed steps; read it as
    # the dict ``cpu_sizes``.
    cpu_step: tuple[tuple[str, int | None], ...] = ()
    # A sweep's size parameters (``sweep --param width=...``) and the fields each one sets; a
    # parameter absent here changes nothing for this workload.
    sweep_axes: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # The dimensions ``--vary`` may change from step to step (none: its shapes stay fixed).
    varying: tuple[str, ...] = ()

    @property
    def size_fields(self) -> tuple[str, ...]:
        """The names of the config fields that shape this workload."""
        return tuple(size.name for size in self.sizes)

    @property
    def cpu_sizes(self) -> dict[str, int | None]:
        """Field -> value of this workload's small CPU step."""
        return dict(self.cpu_step)

    def sweep_fields(self, parameter: str) -> tuple[str, ...]:
        """The config fields a sweep's size parameter sets for this workload (none: not one)."""
        return dict(self.sweep_axes).get(parameter, ())

    def uses(self, field: str) -> bool:
        """Whether a config field matters for this workload: its own size fields, and every field
        that sizes no workload at all (precision, schedule, measurement)."""
        return field in self.size_fields or field not in SIZE_FIELDS

    def check(self, config: RunConfig) -> None:
        """Refuse sizes this workload cannot build (``ConfigError`` naming the field)."""

    def describe(self, config: RunConfig) -> str:
        raise NotImplementedError

    def caption(self, values: Mapping[str, Any]) -> str:
        """The model in the words of the presets' captions, from field values that may not make
        a valid config yet (the sidebar's)."""
        raise NotImplementedError

    def parameter_count(self, config: RunConfig) -> int:
        raise NotImplementedError

    def largest_tensors(self, config: RunConfig) -> dict[str, int]:
        """Field -> elements of the largest weight or activation that field shapes."""
        raise NotImplementedError

    def activation_elements(self, config: RunConfig) -> int:
        """Elements one training step keeps for backward (outputs, masks, their gradients)."""
        raise NotImplementedError

    def batch_elements(self, config: RunConfig) -> int:
        """Elements of one (input, target) batch."""
        raise NotImplementedError

    def shrink_hint(self, config: RunConfig) -> str:
        """Which sizes to lower, with their values now."""
        shown = ", ".join(f"{size.name} {getattr(config, size.name):,}" for size in self.sizes
                          if size.whole)
        return f"shrink the batch or this workload's sizes (now {shown})"


@dataclass(frozen=True)
class Mlp(Workload):
    """The article's step: Linear(D_in, H) -> Dropout(p1) -> (hidden_layers - 1) x
    [Linear(H, H) -> ReLU] -> Linear(H, D_out) -> Dropout(p2), MSE loss."""

    def describe(self, config: RunConfig) -> str:
        return (f"N={config.batch}, {config.d_in} -> {config.hidden} x{config.hidden_layers} -> "
                f"{config.d_out}")

    def caption(self, values: Mapping[str, Any]) -> str:
        get, layers = values.get, values.get("hidden_layers")
        middle = f"{get('hidden')}" + (f" x{layers}" if isinstance(layers, int) and layers > 1 else "")
        return f"MLP, N={get('batch')}, {get('d_in')} -> {middle} -> {get('d_out')}"



    def parameter_count(self, config: RunConfig) -> int:
        return (config.d_in * config.hidden + config.hidden
                + (config.hidden_layers - 1) * (config.hidden * config.hidden + config.hidden)
                + config.hidden * config.d_out + config.d_out)

    def largest_tensors(self, config: RunConfig) -> dict[str, int]:
        return {"d_in": config.batch * config.d_in,
                "hidden": max(config.d_in * config.hidden, config.hidden * config.hidden,
                              config.batch * config.hidden),
                "d_out": max(config.hidden * config.d_out, config.batch * config.d_out)}

    def activation_elements(self, config: RunConfig) -> int:
        # Per layer output: the activation, the dropout/ReLU output and mask, its gradient.
        widths = config.d_in + 3 * config.hidden * config.hidden_layers + 3 * config.d_out
        return 2 * config.batch * widths

    def batch_elements(self, config: RunConfig) -> int:
        return config.batch * (config.d_in + config.d_out)


@dataclass(frozen=True)
class Transformer(Workload):
    """``hidden_layers`` pre-norm encoder layers (width ``hidden``, ``heads`` heads, a GELU MLP of
    4x the width, dropout p1), then a Linear to ``d_out``; input (batch, seq_len, hidden), MSE."""

    def check(self, config: RunConfig) -> None:
        if config.hidden % config.heads:
            raise ConfigError("heads", f"hidden ({config.hidden:,}) must divide by heads "
                                       f"({config.heads:,})", "pick heads that divide the width")

    def describe(self, config: RunConfig) -> str:
        return (f"transformer: {config.hidden_layers} encoder layers, width {config.hidden}, "
                f"{config.heads} heads, {config.batch} x {config.seq_len} tokens")

    def caption(self, values: Mapping[str, Any]) -> str:
        get = values.get
        return (f"{get('hidden_layers')} transformer encoder layers, width {get('hidden')}, "
                f"{get('heads')} heads, {get('batch')} x {get('seq_len')} tokens")



    def parameter_count(self, config: RunConfig) -> int:
        width = config.hidden
        # attention in/out projections 4H^2 + 4H, feed-forward 8H^2 + 5H, two LayerNorms 4H
        per_layer = 12 * width * width + 13 * width
        return config.hidden_layers * per_layer + width * config.d_out + config.d_out

    def largest_tensors(self, config: RunConfig) -> dict[str, int]:
        return {"seq_len": config.batch * config.seq_len * 4 * config.hidden,
                "heads": config.batch * config.heads * config.seq_len * config.seq_len,
                "hidden": 4 * config.hidden * config.hidden}

    def activation_elements(self, config: RunConfig) -> int:
        tokens = config.batch * config.seq_len
        # Per layer: norms, q/k/v, attention output and projection, the 4x feed-forward before
        # and after GELU, dropout masks (about 16 x tokens x width), plus one tokens x tokens
        # score matrix per head; doubled for the gradients of backward.
        per_layer = 16 * tokens * config.hidden + config.batch * config.heads * config.seq_len ** 2
        return 2 * (config.hidden_layers * per_layer + tokens * config.d_out)

    def batch_elements(self, config: RunConfig) -> int:
        return config.batch * config.seq_len * (config.hidden + config.d_out)


@dataclass(frozen=True)
class ConvClassifier(Workload):
    """``hidden_layers`` blocks of [3x3 Conv(``channels``) -> BatchNorm -> ReLU] on 3-channel
    images, global average pooling, dropout p2 and a Linear to ``d_out`` classes; cross-entropy."""

    def describe(self, config: RunConfig) -> str:
        return (f"conv classifier: {config.hidden_layers} blocks of {config.channels} channels, "
                f"{config.batch} images of {config.image_size}x{config.image_size}, "
                f"{config.d_out} classes")

    def caption(self, values: Mapping[str, Any]) -> str:
        get = values.get
        return (f"a convolutional classifier: {get('hidden_layers')} blocks of {get('channels')} "
                f"channels on {get('batch')} images of {get('image_size')}x{get('image_size')}")




    def parameter_count(self, config: RunConfig) -> int:
        channels = config.channels
        convolutions = 9 * 3 * channels + (config.hidden_layers - 1) * 9 * channels * channels
        return convolutions + config.hidden_layers * 2 * channels + channels * config.d_out + config.d_out

    def largest_tensors(self, config: RunConfig) -> dict[str, int]:
        return {"image_size": config.batch * config.channels * config.image_size ** 2,
                "channels": 9 * config.channels * config.channels}

    def activation_elements(self, config: RunConfig) -> int:
        # Per block: the convolution, BatchNorm and ReLU outputs; doubled for backward.
        feature_map = config.batch * config.channels * config.image_size ** 2
        return 2 * 3 * config.hidden_layers * feature_map

    def batch_elements(self, config: RunConfig) -> int:
        return config.batch * (3 * config.image_size ** 2 + 1)


_MLP_SIZES = (D_IN, HIDDEN, *COMMON_FIELDS, DROPOUT1, DROPOUT2)
_MLP_CPU_STEP: tuple[tuple[str, int | None], ...] = (
    ("batch", 64), ("d_in", 512), ("hidden", 512), ("d_out", 128), ("hidden_layers", 1),
    ("eager_iters", 200), ("replays", 200), ("trials", None))
_MLP_SWEEP_AXES = (("batch", ("batch",)), ("width", ("d_in", "hidden", "d_out")),
                   ("d_in", ("d_in",)), ("hidden", ("hidden",)), ("d_out", ("d_out",)),
                   ("hidden_layers", ("hidden_layers",)))

# The workloads the dashboard offers, in its order.
BUILT_IN: dict[str, Workload] = {
    "mlp": Mlp("mlp", _MLP_SIZES, "the article's MLP", cpu_step=_MLP_CPU_STEP,
               sweep_axes=_MLP_SWEEP_AXES, varying=("batch",)),
    "transformer": Transformer(
        "transformer", (HIDDEN, HEADS, SEQ_LEN, *COMMON_FIELDS, DROPOUT1),
        "a stack of transformer encoder layers",
        cpu_step=(("batch", 8), ("seq_len", 32), ("hidden", 128), ("heads", 4),
                  ("hidden_layers", 2), ("d_out", 128), ("eager_iters", 50), ("replays", 50),
                  ("trials", None)),
        sweep_axes=(("batch", ("batch",)), ("width", ("hidden", "d_out")), ("hidden", ("hidden",)),
                    ("d_out", ("d_out",)), ("hidden_layers", ("hidden_layers",)),
                    ("seq_len", ("seq_len",))),
        varying=("batch", "seq_len")),
    "conv": ConvClassifier(
        "conv", (CHANNELS, IMAGE_SIZE, *COMMON_FIELDS, DROPOUT2),
        "a small convolutional classifier",
        cpu_step=(("batch", 16), ("channels", 16), ("image_size", 16), ("hidden_layers", 2),
                  ("d_out", 10), ("eager_iters", 100), ("replays", 100), ("trials", None)),
        sweep_axes=(("batch", ("batch",)), ("width", ("channels",)), ("d_out", ("d_out",)),
                    ("hidden_layers", ("hidden_layers",))),
        varying=("batch",)),
}
# Deliberately broken steps that cannot be captured, for the tests and the command line (the
# dashboard never offers them); each is the MLP, with its sizes, CPU step and sweep axes (its
# flaw: ``engine.workload_models``).
BROKEN: dict[str, Workload] = {
    "broken-host-sync": Mlp("broken-host-sync", _MLP_SIZES,
                                     "the MLP with a host synchronisation in its step",
                                     cpu_step=_MLP_CPU_STEP, sweep_axes=_MLP_SWEEP_AXES),
    "broken-cpu-tensor": Mlp("broken-cpu-tensor", _MLP_SIZES,
                                       "the MLP copying a CPU tensor in its step",
                                       cpu_step=_MLP_CPU_STEP, sweep_axes=_MLP_SWEEP_AXES),
    "broken-optimizer": Mlp(
        "broken-optimizer", _MLP_SIZES, "the MLP with an optimizer that cannot be captured",
        cpu_step=_MLP_CPU_STEP, sweep_axes=_MLP_SWEEP_AXES),
}
KNOWN: dict[str, Workload] = {**BUILT_IN, **BROKEN}


def check_size_declarations() -> None:
    """Every workload's size fields are in ``SIZES`` (where the command line and the sidebar
    find them), and every one there sizes some workload; a ``TypeError`` saying what to add
    otherwise, when this module is imported."""
    listed = {size.name: size for size in SIZES}
    if len(listed) != len(SIZES):
        raise TypeError("spec/workload_kinds.py's SIZES names a field twice: declare each once")
    for workload in KNOWN.values():
        for size in workload.sizes:
            if listed.get(size.name) is not size:
                raise TypeError(f"workload {workload.name}'s size field {size.name} is not in "
                                "spec/workload_kinds.py's SIZES: add it there, where the command "
                                "line and the sidebar should list it")
    unused = set(listed) - {name for workload in KNOWN.values() for name in workload.size_fields}
    if unused:
        raise TypeError(f"SIZES lists {', '.join(sorted(unused))}, which no workload declares: "
                        "remove it, or add it to a workload's size fields")


check_size_declarations()
# The fields that size some workload (none of them applies to the user's own step).
SIZE_FIELDS = frozenset(size.name for size in SIZES)


def workload_named(name: str) -> Workload | None:
    """The declared workload of this name; None for the user's own step."""
    return KNOWN.get(name)


def workload_of(config: RunConfig) -> Workload | None:
    """The declared workload a config runs; None for the user's own step."""
    return KNOWN.get(config.workload)


def declared_workload(config: RunConfig) -> Workload:
    """The declared workload a config runs, for code that has no answer for the user's own step
    (sizes, counts, estimates); ``ConfigError`` for that step, whose code alone knows them."""
    workload = KNOWN.get(config.workload)
    if workload is None:
        raise ConfigError("workload", f"{config.workload} is your own step, which declares no "
                                      "sizes", "only its code knows its model and batches")
    return workload
