"""A worked example of your own training step: a small classifier with LayerNorm and GELU.

Run it with ``python -m profiler_core run --workload profiler_core.examples.user_step:build
--out runs/mine``. The tool calls ``build(device)`` once per replica (eager, and each graphed
mode), so everything is created inside it; ``batch(generator)`` draws one batch on the device
with the generator it is given, so every mode sees the same data. Everything here can be
captured: no host synchronisation, no CPU tensors, fixed shapes, ``capturable=True`` for AdamW.
"""

import torch
from torch import nn

BATCH, FEATURES, HIDDEN, CLASSES = 256, 512, 1024, 10


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.LayerNorm(HIDDEN), nn.GELU(),
                                  nn.Linear(HIDDEN, HIDDEN), nn.GELU())
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def build(device: torch.device) -> dict:
    model = Classifier().to(device)

    def batch(generator: torch.Generator):
        x = torch.randn(BATCH, FEATURES, device=device, generator=generator)
        y = torch.randint(0, CLASSES, (BATCH,), device=device, generator=generator)
        return x, y

    return {
        "model": model,
        "batch": batch,
        "loss": nn.functional.cross_entropy,
        "optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3,
                                       capturable=device.type == "cuda"),
    }
