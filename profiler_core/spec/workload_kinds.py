"""The built-in workloads as objects: the article's MLP, a transformer encoder stack and a small
convolutional classifier.

Scope: everything about one built-in workload in one place: its own size fields, the small step
a CPU run uses unless told otherwise (``cpu_sizes``: the dashboard's CPU sizes and the command
line's ``run --device cpu``), how it is described, its model, batches and loss, its parameter count, the largest tensors its sizes imply
(refused over 2^31 elements when a config is built) and what its memory estimate is made of.
Optimizers, precision and the step itself are the same for every workload (``workloads``); the
user's own step (``user_workload``) has none of these counts, since only its code knows them.

Torch is imported only when a model or a batch is built, so that validating a config, the CLI's
help and the dashboard never load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # config imports this module; the type is for annotations only
    from profiler_core.spec.config import RunConfig

# Fields every built-in workload uses; each workload adds its own size fields and dropouts.
COMMON_FIELDS = ("batch", "hidden_layers", "d_out")


@dataclass(frozen=True)
class Workload:
    """One built-in workload. Subclasses say what their sizes mean."""

    name: str
    size_fields: tuple[str, ...]  # the config fields that shape this workload
    summary: str  # one line, for help texts
    # The small step a CPU run gets unless its sizes are asked for (seconds on 2 cores, where the
    # presets' steps take minutes): (field, value) pairs, sizes and the timed steps; read it as
    # the dict ``cpu_sizes``.
    cpu_step: tuple[tuple[str, int | None], ...] = ()

    @property
    def cpu_sizes(self) -> dict[str, int | None]:
        """Field -> value of this workload's small CPU step."""
        return dict(self.cpu_step)

    def describe(self, config: RunConfig) -> str:
        raise NotImplementedError

    def build_model(self, config: RunConfig) -> Any:
        raise NotImplementedError

    def random_batch(self, config: RunConfig, device: Any, generator: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def loss_fn(self) -> Any:
        from torch import nn

        return nn.MSELoss()

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
        shown = ", ".join(f"{name} {getattr(config, name):,}" for name in self.size_fields
                          if name not in ("dropout1", "dropout2"))
        return f"shrink the batch or this workload's sizes (now {shown})"


@dataclass(frozen=True)
class Mlp(Workload):
    """The article's step: Linear(D_in, H) -> Dropout(p1) -> (hidden_layers - 1) x
    [Linear(H, H) -> ReLU] -> Linear(H, D_out) -> Dropout(p2), MSE loss."""

    def describe(self, config: RunConfig) -> str:
        return (f"N={config.batch}, {config.d_in} -> {config.hidden} x{config.hidden_layers} -> "
                f"{config.d_out}")

    def build_model(self, config: RunConfig) -> Any:
        from torch import nn

        layers: list[nn.Module] = [nn.Linear(config.d_in, config.hidden),
                                   nn.Dropout(p=config.dropout1)]
        for _ in range(config.hidden_layers - 1):
            layers += [nn.Linear(config.hidden, config.hidden), nn.ReLU()]
        layers += [nn.Linear(config.hidden, config.d_out), nn.Dropout(p=config.dropout2)]
        return nn.Sequential(*layers)

    def random_batch(self, config: RunConfig, device: Any, generator: Any) -> tuple[Any, Any]:
        import torch

        return (torch.randn(config.batch, config.d_in, device=device, generator=generator),
                torch.randn(config.batch, config.d_out, device=device, generator=generator))

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

    def describe(self, config: RunConfig) -> str:
        return (f"transformer: {config.hidden_layers} encoder layers, width {config.hidden}, "
                f"{config.heads} heads, {config.batch} x {config.seq_len} tokens")

    def build_model(self, config: RunConfig) -> Any:
        from torch import nn

        layers: list[nn.Module] = [
            nn.TransformerEncoderLayer(config.hidden, config.heads, dim_feedforward=4 * config.hidden,
                                       dropout=config.dropout1, activation="gelu", batch_first=True,
                                       norm_first=True)
            for _ in range(config.hidden_layers)]
        return nn.Sequential(*layers, nn.Linear(config.hidden, config.d_out))

    def random_batch(self, config: RunConfig, device: Any, generator: Any) -> tuple[Any, Any]:
        import torch

        shape = (config.batch, config.seq_len)
        return (torch.randn(*shape, config.hidden, device=device, generator=generator),
                torch.randn(*shape, config.d_out, device=device, generator=generator))

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

    def build_model(self, config: RunConfig) -> Any:
        from torch import nn

        layers: list[nn.Module] = []
        channels_in = 3
        for _ in range(config.hidden_layers):
            layers += [nn.Conv2d(channels_in, config.channels, 3, padding=1, bias=False),
                       nn.BatchNorm2d(config.channels), nn.ReLU()]
            channels_in = config.channels
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(p=config.dropout2),
                   nn.Linear(config.channels, config.d_out)]
        return nn.Sequential(*layers)

    def random_batch(self, config: RunConfig, device: Any, generator: Any) -> tuple[Any, Any]:
        import torch

        return (torch.randn(config.batch, 3, config.image_size, config.image_size, device=device,
                            generator=generator),
                torch.randint(0, config.d_out, (config.batch,), device=device, generator=generator))

    def loss_fn(self) -> Any:
        from torch import nn

        return nn.CrossEntropyLoss()

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


BUILT_IN: dict[str, Workload] = {
    "mlp": Mlp("mlp", ("d_in", "hidden", *COMMON_FIELDS, "dropout1", "dropout2"),
               "the article's MLP",
               cpu_step=(("batch", 64), ("d_in", 512), ("hidden", 512), ("d_out", 128),
                         ("hidden_layers", 1), ("eager_iters", 200), ("replays", 200),
                         ("trials", None))),
    "transformer": Transformer("transformer", ("hidden", "heads", "seq_len", *COMMON_FIELDS,
                                               "dropout1"), "a stack of transformer encoder layers",
                               cpu_step=(("batch", 8), ("seq_len", 32), ("hidden", 128),
                                         ("heads", 4), ("hidden_layers", 2), ("d_out", 128),
                                         ("eager_iters", 50), ("replays", 50), ("trials", None))),
    "conv": ConvClassifier("conv", ("channels", "image_size", *COMMON_FIELDS, "dropout2"),
                           "a small convolutional classifier",
                           cpu_step=(("batch", 16), ("channels", 16), ("image_size", 16),
                                     ("hidden_layers", 2), ("d_out", 10), ("eager_iters", 100),
                                     ("replays", 100), ("trials", None))),
}


def workload_of(config: RunConfig) -> Workload | None:
    """The built-in workload a config runs (the deliberately broken steps are the MLP with one
    flaw); None for the user's own step."""
    if config.workload in BUILT_IN:
        return BUILT_IN[config.workload]
    if config.workload.startswith("broken-"):
        return BUILT_IN["mlp"]
    return None
