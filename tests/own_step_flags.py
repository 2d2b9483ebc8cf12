"""An own step whose module sets numerics flags at import, as users' modules do; its step
records the flags it sees (``SEEN``)."""

import torch
from torch import nn

torch.set_float32_matmul_precision("high")
torch.backends.cudnn.benchmark = True

SEEN: list[tuple[str, bool]] = []  # (float32 matmul precision, cudnn.benchmark) per step


def build(device):
    model = nn.Linear(8, 2).to(device)

    def draw(generator):
        return (torch.randn(4, 8, device=device, generator=generator),
                torch.randn(4, 2, device=device, generator=generator))

    def forward_seen(module, args):
        SEEN.append((torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark))

    model.register_forward_pre_hook(forward_seen)
    return {"model": model, "batch": draw}
