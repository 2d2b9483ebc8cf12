"""Training steps of the user's for data-parallel runs on the CPU (tests/test_ddp_failures.py):
one whose rank 1 dies without a word, and one whose forward raises on rank 1."""

from __future__ import annotations

import os

import torch
from torch import nn


class _OnRankOne(nn.Module):
    """A small model whose forward does ``act`` on rank 1 once it has run ``after`` steps."""

    def __init__(self, act, after: int) -> None:
        super().__init__()
        self.layer = nn.Linear(16, 4)
        self.act, self.after, self.steps = act, after, 0

    def forward(self, x):
        self.steps += 1
        if os.environ.get("RANK") == "1" and self.steps > self.after:
            self.act()
        return self.layer(x)


def _step(device, act, after: int = 5):
    def batch(generator):
        return (torch.randn(8, 16, device=device, generator=generator),
                torch.randn(8, 4, device=device, generator=generator))

    return {"model": _OnRankOne(act, after).to(device), "batch": batch}


def _exit_silently() -> None:
    os._exit(3)  # no error record, no traceback: as a crash in C code would


def rank_1_exits(device):
    return _step(device, _exit_silently)


def _raise() -> None:
    raise ValueError("rank 1 cannot go on")


def rank_1_raises_in_forward(device):
    return _step(device, _raise)
