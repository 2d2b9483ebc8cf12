"""The training step under test: a built-in workload (``workload_kinds``: the article's MLP, the
transformer, the conv classifier) or the user's own step (``--workload package.module:function``),
with its optimizer, precision and synthetic batches.

Scope: building one replica of the workload (model, loss, optimizer, static counter) and running
its step pieces. Capture, replay and timing live in ``capture`` and ``runner``; loading the user's
function lives in ``user_workload``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from profiler_core.engine.user_workload import build_parts, check_batch
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import ConfigError
from profiler_core.spec.workload_kinds import workload_of

LEARNING_RATES = {"sgd": 0.1, "adam": 1e-3, "adamw": 1e-3}
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build_model(config: RunConfig) -> nn.Module:
    """The built-in workload's model (``mlp``, ``transformer`` or ``conv``; a broken step is the MLP)."""
    return workload_of(config).build_model(config)


def build_optimizer(config: RunConfig, params, capturable: bool) -> torch.optim.Optimizer:
    """SGD (lr 0.1), Adam or AdamW; Adam-style optimizers get ``capturable=True`` when graphed.

    The ``broken-optimizer`` workload uses Adam without ``capturable``, which cannot be captured.
    """
    if config.workload == "broken-optimizer":
        return torch.optim.Adam(params, lr=LEARNING_RATES["adam"], capturable=False)
    lr = LEARNING_RATES[config.optimizer]
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    optimizer_class = torch.optim.Adam if config.optimizer == "adam" else torch.optim.AdamW
    return optimizer_class(params, lr=lr, capturable=capturable)


@contextlib.contextmanager
def matmul_precision(dtype: str) -> Iterator[None]:
    """TF32 on for ``tf32`` and explicitly off otherwise, restored afterwards."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    allow = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def make_batches(config: RunConfig, count: int,
                 device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` distinct (input, target) batches, drawn once on ``device`` from a generator seeded
    with ``config.seed``, so that both modes see the same data (the user's ``batch(generator)``
    for their own step)."""
    generator = torch.Generator(device=device).manual_seed(config.seed)
    if is_user_spec(config.workload):
        draw = build_parts(config.workload, device).batch
        return [check_batch(config.workload, draw(generator), device) for _ in range(count)]
    workload = workload_of(config)
    return [workload.random_batch(config, device, generator) for _ in range(count)]


class TrainingStep:
    """One replica of the workload: model, loss, optimizer, GradScaler (fp16) and a static counter.

    The counter is the article's ``static_counter``: a one-element tensor incremented inside the
    step, so it shows which phases really run the step on the device.
    """

    def __init__(self, config: RunConfig, device: torch.device, graphed: bool) -> None:
        if config.dtype == "fp16" and device.type == "cpu":
            raise ConfigError("dtype", "fp16 autocast needs a CUDA device", "use fp32 or bf16 with --device cpu")
        self.config = config
        self.device = device
        torch.manual_seed(config.seed)  # identical initial weights in every replica
        if is_user_spec(config.workload):
            parts = build_parts(config.workload, device)
            self.model, self.loss_fn, self.optimizer = parts.model, parts.loss, parts.optimizer
            self._float_loss = False  # the user's loss gets the model's output as it is
        else:
            self.model = build_model(config).to(device)
            self.loss_fn = workload_of(config).loss_fn()
            self.optimizer = build_optimizer(config, self.model.parameters(),
                                             capturable=graphed and device.type == "cuda")
            self._float_loss = True
        self.scaler = torch.amp.GradScaler(device.type) if config.dtype == "fp16" else None
        self.counter = torch.zeros((1,), device=device)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.config.dtype not in AUTOCAST_DTYPES:
            return contextlib.nullcontext()
        # cache_enabled=False: autocast's weight cache must not outlive a graph capture.
        return torch.autocast(self.device.type, dtype=AUTOCAST_DTYPES[self.config.dtype],
                              cache_enabled=False)

    def forward_backward_update(self, x: torch.Tensor, y: torch.Tensor, count: bool = True) -> None:
        """The capturable body: forward, loss, backward, optimizer step (not for fp16), counter += 1.

        With fp16 the loss is scaled and the GradScaler's step/update, which synchronise with the
        host, are left to ``scaler_update`` outside any graph, as PyTorch's CUDA-graph notes require.
        """
        with self.autocast():
            prediction = self.model(x)
            if self.config.workload == "broken-cpu-tensor":
                prediction = prediction + torch.zeros(1).to(self.device)  # a CPU tensor copied in
            loss = self.loss_fn(prediction.float() if self._float_loss else prediction, y)
        if self.config.workload == "broken-host-sync":
            loss.item()  # a host synchronisation inside the step
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
            self.optimizer.step()
        if count:
            self.counter[0] += 1.0

    def scaler_update(self) -> None:
        """fp16 only: unscale, skip on inf/NaN, step and update the loss scale (host-synchronising)."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()

    def eager_step(self, x: torch.Tensor, y: torch.Tensor, count: bool = True) -> None:
        """A whole eager training step: zero_grad, body, and the fp16 scaler update."""
        self.optimizer.zero_grad(set_to_none=True)
        self.forward_backward_update(x, y, count)
        self.scaler_update()

    def parameters_flat(self) -> torch.Tensor:
        return torch.cat([p.detach().float().reshape(-1) for p in self.model.parameters()])
