"""Own steps in the whole-step form, for the CPU tests: a step with accumulation over
micro-batches and gradient clipping (settings: batch, micro_batches, clip), and one whose module
sets numerics flags at import and records the flags its step sees."""

import torch
from torch import nn

CALLS: list[int] = []  # one entry per call of accumulating's step: its batch size


def accumulating(device, *, batch: int = 8, micro_batches: int = 2, clip: float = 1.0,
                 width: int = 32):
    """zero_grad, a loss over ``micro_batches`` micro-batches, backward on each, clipping and the
    optimizer step: all inside the user's own step."""
    model = nn.Sequential(nn.Linear(16, width), nn.ReLU(), nn.Linear(width, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def draw(generator):
        return {"x": torch.randn(batch, 16, device=device, generator=generator),
                "y": torch.randn(batch, 4, device=device, generator=generator)}

    def step(data):
        CALLS.append(data["x"].shape[0])
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for x, y in zip(data["x"].chunk(micro_batches), data["y"].chunk(micro_batches)):
            loss = nn.functional.mse_loss(model(x), y) / micro_batches
            loss.backward()
            total = total + loss.detach()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return total

    return {"step": step, "batch": draw, "model": model, "optimizer": optimizer}


def scaled_fp16(device, *, outside: bool = False):
    """fp16 autocast with a GradScaler: its step and update inside the step (capture refuses the
    scaler's host read) or, with ``outside``, in after_step (outside the graph)."""
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(device.type)

    def draw(generator):
        return (torch.randn(32, 64, device=device, generator=generator),
                torch.randn(32, 8, device=device, generator=generator))

    def update():
        scaler.step(optimizer)
        scaler.update()

    def step(data):
        x, y = data
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16, cache_enabled=False):
            loss = nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if not outside:
            update()

    parts = {"step": step, "batch": draw, "model": model, "optimizer": optimizer}
    return {**parts, "after_step": update} if outside else parts


def shaped(device, *, width: int = 16):
    """A whole step over sequences of a length the tool chooses: ``batch(generator, seq_len=L)``
    draws an exact batch, ``pad_to=P`` pads it to P with a mask that the step applies."""
    model = nn.Sequential(nn.Linear(8, width), nn.GELU(), nn.Linear(width, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def draw(generator, seq_len: int = 16, pad_to: int | None = None):
        x = torch.randn(2, seq_len, 8, device=device, generator=generator)
        y = torch.randn(2, seq_len, 4, device=device, generator=generator)
        size = pad_to or seq_len
        mask = torch.zeros(2, size, device=device)
        mask[:, :seq_len] = 1.0
        pad = size - seq_len
        return {"x": nn.functional.pad(x, (0, 0, 0, pad)), "y": nn.functional.pad(y, (0, 0, 0, pad)),
                "mask": mask}

    def step(data):
        optimizer.zero_grad(set_to_none=True)
        error = (model(data["x"]) - data["y"]).pow(2).mean(dim=-1)
        loss = (error * data["mask"]).sum() / data["mask"].sum()
        loss.backward()
        optimizer.step()

    return {"step": step, "batch": draw, "model": model, "optimizer": optimizer}
