"""The torch side of the built-in workloads, which ``spec.workload_kinds`` declares: each one's
model, synthetic batches and loss, and the one flaw of each deliberately broken step.

Scope: building modules and tensors only; sizes, limits, captions and memory estimates live with
the declarations. Every declared workload has its entry in :data:`MODELS` (checked at import).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from profiler_core.spec.config import RunConfig
from profiler_core.spec.workload_kinds import KNOWN, LEARNING_RATES


class MlpModel:
    """The article's step: Linear(D_in, H) -> Dropout(p1) -> (hidden_layers - 1) x
    [Linear(H, H) -> ReLU] -> Linear(H, D_out) -> Dropout(p2), MSE loss."""

    def build_model(self, config: RunConfig) -> nn.Module:
        layers: list[nn.Module] = [nn.Linear(config.d_in, config.hidden),
                                   nn.Dropout(p=config.dropout1)]
        for _ in range(config.hidden_layers - 1):
            layers += [nn.Linear(config.hidden, config.hidden), nn.ReLU()]
        layers += [nn.Linear(config.hidden, config.d_out), nn.Dropout(p=config.dropout2)]
        return nn.Sequential(*layers)

    def random_batch(self, config: RunConfig, device: torch.device,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(config.batch, config.d_in, device=device, generator=generator),
                torch.randn(config.batch, config.d_out, device=device, generator=generator))

    def loss_fn(self) -> nn.Module:
        return nn.MSELoss()

    def masked_loss(self, prediction: torch.Tensor, target: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
        """The loss over the positions ``weights`` keeps (1; padding 0): the same value as
        ``loss_fn`` on the unpadded batch. MSE: the mean over the last dimension, then the
        weighted mean over the positions."""
        per_position = (prediction.float() - target).pow(2).mean(dim=-1)
        return (per_position * weights).sum() / weights.sum()

    def padding_key(self, dimension: str) -> bool:
        """Whether padding ``dimension`` needs the model told which positions are padding (an
        attention's keys); else the loss's weights alone keep padding out of the answer."""
        return False

    # The leading dimensions of the input that a loss counts positions over (its weights' shape).
    POSITION_DIMENSIONS = 1

    # The step's hooks, for the deliberately broken workloads; a real workload leaves them be.
    def own_optimizer(self, params: Any) -> torch.optim.Optimizer | None:
        """An optimizer this workload insists on, or None for the config's."""
        return None

    def output_for_loss(self, prediction: torch.Tensor) -> torch.Tensor:
        """The model's output as the loss gets it."""
        return prediction

    def after_loss(self, loss: torch.Tensor) -> None:
        """Called with the loss before backward."""


class EncoderStack(nn.Module):
    """Encoder layers then a Linear head; ``key_padding`` (batch, seq_len; True: a padded
    position) keeps padded tokens out of every attention, so the real tokens' outputs are the
    unpadded sequence's."""

    def __init__(self, layers: list[nn.Module], head: nn.Module) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.head = head

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_padding)
        return self.head(x)


class TransformerModel(MlpModel):
    """``hidden_layers`` pre-norm encoder layers (width ``hidden``, ``heads`` heads, a GELU MLP of
    4x the width, dropout p1), then a Linear to ``d_out``; input (batch, seq_len, hidden), MSE."""

    def build_model(self, config: RunConfig) -> nn.Module:
        layers: list[nn.Module] = [
            nn.TransformerEncoderLayer(config.hidden, config.heads, dim_feedforward=4 * config.hidden,
                                       dropout=config.dropout1, activation="gelu", batch_first=True,
                                       norm_first=True)
            for _ in range(config.hidden_layers)]
        return EncoderStack(layers, nn.Linear(config.hidden, config.d_out))

    POSITION_DIMENSIONS = 2  # every token of every sequence

    def padding_key(self, dimension: str) -> bool:
        return dimension == "seq_len"

    def random_batch(self, config: RunConfig, device: torch.device,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (config.batch, config.seq_len)
        return (torch.randn(*shape, config.hidden, device=device, generator=generator),
                torch.randn(*shape, config.d_out, device=device, generator=generator))


class ConvModel(MlpModel):
    """``hidden_layers`` blocks of [3x3 Conv(``channels``) -> BatchNorm -> ReLU] on 3-channel
    images, global average pooling, dropout p2 and a Linear to ``d_out`` classes; cross-entropy."""

    def build_model(self, config: RunConfig) -> nn.Module:
        layers: list[nn.Module] = []
        channels_in = 3
        for _ in range(config.hidden_layers):
            layers += [nn.Conv2d(channels_in, config.channels, 3, padding=1, bias=False),
                       nn.BatchNorm2d(config.channels), nn.ReLU()]
            channels_in = config.channels
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(p=config.dropout2),
                   nn.Linear(config.channels, config.d_out)]
        return nn.Sequential(*layers)

    def random_batch(self, config: RunConfig, device: torch.device,
                     generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return (torch.randn(config.batch, 3, config.image_size, config.image_size, device=device,
                            generator=generator),
                torch.randint(0, config.d_out, (config.batch,), device=device, generator=generator))

    def loss_fn(self) -> nn.Module:
        return nn.CrossEntropyLoss()

    def masked_loss(self, prediction: torch.Tensor, target: torch.Tensor,
                    weights: torch.Tensor) -> torch.Tensor:
        per_image = nn.functional.cross_entropy(prediction.float(), target, reduction="none")
        return (per_image * weights).sum() / weights.sum()


class HostSyncModel(MlpModel):
    """The MLP whose step reads the loss on the host (``loss.item()``): a host synchronisation
    inside the step, which capture refuses."""

    def after_loss(self, loss: torch.Tensor) -> None:
        loss.item()


class CpuTensorModel(MlpModel):
    """The MLP whose step copies a CPU tensor to the device inside the step, which capture
    refuses."""

    def output_for_loss(self, prediction: torch.Tensor) -> torch.Tensor:
        return prediction + torch.zeros(1).to(prediction.device)


class UncapturableOptimizerModel(MlpModel):
    """The MLP trained by Adam without ``capturable=True``, whose step cannot be captured."""

    def own_optimizer(self, params: Any) -> torch.optim.Optimizer | None:
        return torch.optim.Adam(params, lr=LEARNING_RATES["adam"], capturable=False)


_MODELS = {"mlp": MlpModel(), "transformer": TransformerModel(), "conv": ConvModel(),
           "broken-host-sync": HostSyncModel(), "broken-cpu-tensor": CpuTensorModel(),
           "broken-optimizer": UncapturableOptimizerModel()}
# Every declared workload's torch side (a KeyError here names a declared one with none).
MODELS: dict[str, MlpModel] = {name: _MODELS[name] for name in KNOWN}
