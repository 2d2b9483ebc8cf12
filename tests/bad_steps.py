"""Purpose-built training steps for the user-workload loader and the capture-readiness checks.

Every line that a readiness check must flag ends with a comment ``# expect: <kind>``; the tests
read those comments, so a finding on any other line, or a missing one, fails them.
"""

import torch
from torch import nn


def _batch(device):
    def batch(generator):
        return (torch.randn(8, 16, device=device, generator=generator),
                torch.randn(8, 4, device=device, generator=generator))
    return batch


class HostSync(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        y = self.layer(x)
        scale = y.abs().max().item()  # expect: host-sync
        print(y)  # expect: host-sync
        return y / float(scale)  # expect: host-sync


class CpuTensor(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        bias = torch.ones(4)  # expect: cpu-tensor
        return self.layer(x) + bias.to(x.device)


class DynamicShapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        y = self.layer(x)
        keep = y[y > 0]  # expect: dynamic-shape
        where = torch.nonzero(y)  # expect: dynamic-shape
        if (y > 10).any():  # expect: data-dependent-branch
            y = y * 0.5
        return y + keep.sum() * 0 + where.sum() * 0


class FrozenCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1  # expect: frozen-python-state
        noise = torch.Generator(device=x.device)  # expect: extra-generator
        return self.layer(x) + 0 * torch.randn(4, device=x.device, generator=noise)


def host_sync(device):
    model = HostSync().to(device)
    return {"model": model, "batch": _batch(device)}


def cpu_tensor(device):
    model = CpuTensor().to(device)
    return {"model": model, "batch": _batch(device)}


def dynamic_shapes(device):
    model = DynamicShapes().to(device)
    return {"model": model, "batch": _batch(device)}


def frozen_counter(device):
    model = FrozenCounter().to(device)
    return {"model": model, "batch": _batch(device)}


def scheduled_adam(device):
    model = nn.Linear(16, 4).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)  # expect: optimizer-not-capturable
    torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)  # expect: lr-schedule
    return {"model": model, "batch": _batch(device), "optimizer": optimizer}


def _logged(loss):  # called from a whole step: the readiness checks read it too
    return loss.item()  # expect: host-sync


def whole_step_scaled(device):
    """A whole step with what a real loop has and capture refuses or freezes."""
    model = nn.Linear(16, 4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)  # expect: lr-schedule

    def step(batch):
        x, y = batch
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)  # expect: clip-nonfinite-check
        if not torch.isfinite(norm):  # expect: data-dependent-branch
            return None
        scaler.step(optimizer)  # expect: grad-scaler
        scaler.update()  # expect: grad-scaler
        scheduler.step()  # expect: lr-schedule
        _logged(loss)
        return loss

    return {"step": step, "batch": _batch(device), "model": model, "optimizer": optimizer}


def clean(device):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    return {"model": model, "batch": _batch(device), "loss": nn.functional.mse_loss,
            "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}


# Loader failures: each returns something the tool cannot use.
def returns_list(device):
    return [nn.Linear(16, 4)]


def no_model(device):
    return {"batch": _batch(device)}


def model_not_module(device):
    return {"model": "a model", "batch": _batch(device)}


def batch_not_callable(device):
    return {"model": nn.Linear(16, 4), "batch": [1, 2]}


def bad_optimizer(device):
    return {"model": nn.Linear(16, 4), "batch": _batch(device), "optimizer": "adam"}


def bad_loss(device):
    return {"model": nn.Linear(16, 4), "batch": _batch(device), "loss": 3}


def unknown_key(device):
    return {"model": nn.Linear(16, 4), "batch": _batch(device), "scheduler": None}


def takes_no_arguments():
    return {}


NOT_A_FUNCTION = 42


# Failures inside the user's own code (each names its line in the one-line error).
class RaisesInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        raise ValueError("forward is broken")  # raises: forward


def raises_in_forward(device):
    return {"model": RaisesInForward().to(device), "batch": _batch(device)}


def raises_in_build(device):
    model = nn.Linear(16, 4).to(device)
    return {"model": model, "batch": _batch(device), "extra": 1 / 0}  # raises: build


def type_error_in_build(device):
    return len(device)  # raises: build-type-error


def raises_in_batch(device):
    def batch(generator):
        raise RuntimeError("no data")  # raises: batch
    return {"model": nn.Linear(16, 4).to(device), "batch": batch}


def raises_in_loss(device):
    def loss(output, target):
        return output.sum() + target.no_such_attribute  # raises: loss
    return {"model": nn.Linear(16, 4).to(device), "batch": _batch(device), "loss": loss}


def torch_loss_fails(device):  # a torch loss given a target it cannot take: no line of the user's
    def batch(generator):
        return (torch.randn(8, 16, device=device, generator=generator),
                torch.randn(8, 3, device=device, generator=generator))
    return {"model": nn.Linear(16, 4).to(device), "batch": batch,
            "loss": nn.functional.cross_entropy}


def batch_three_values(device):
    def batch(generator):
        x = torch.randn(8, 16, device=device, generator=generator)
        return x, x[:, :4], x
    return {"model": nn.Linear(16, 4).to(device), "batch": batch}


def batch_generator(device):
    def batch(generator):
        yield torch.randn(8, 16, device=device, generator=generator)
        yield torch.randn(8, 4, device=device, generator=generator)
    return {"model": nn.Linear(16, 4).to(device), "batch": batch}


def batch_not_tensors(device):
    return {"model": nn.Linear(16, 4).to(device), "batch": lambda generator: ([1.0] * 16, 0)}


class ExitsInForward(nn.Module):
    def __init__(self, code):
        super().__init__()
        self.layer = nn.Linear(16, 4)
        self.code = code

    def forward(self, x):
        raise SystemExit(self.code)  # raises: exit


def exits_3_in_forward(device):
    return {"model": ExitsInForward(3).to(device), "batch": _batch(device)}


def exits_0_in_build(device):
    raise SystemExit(0)  # raises: exit-build


class Abort(BaseException):
    """A user's own BaseException (not an Exception)."""


def base_exception_in_batch(device):
    def batch(generator):
        raise Abort("stop everything")  # raises: base
    return {"model": nn.Linear(16, 4).to(device), "batch": batch}


class HangsInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        while True:  # raises: hang
            x = x + 0


def hangs_in_forward(device):
    return {"model": HangsInForward().to(device), "batch": _batch(device)}


def capturable_on_cpu(device):
    """AdamW with capturable=True whatever the device: the docs' old snippet, which fails on a CPU."""
    model = nn.Linear(16, 4).to(device)
    return {"model": model, "batch": _batch(device),
            "optimizer": torch.optim.AdamW(model.parameters(), capturable=True)}
