"""The training step under test: one replica of a declared workload (``spec.workload_kinds``) or
of the user's own step (``user_workload``), with its optimizer, precision, static counter and
synthetic batches. Capture, replay and timing live in ``capture`` and ``runner``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from profiler_core.engine.user_workload import build_parts, check_batch
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import ConfigError
from profiler_core.spec.workload_kinds import LEARNING_RATES, declared_workload, workload_of

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build_model(config: RunConfig) -> nn.Module:
    """The declared workload's model (``mlp``, ``transformer``, ``conv``; a broken step is the MLP)."""
    return declared_workload(config).build_model(config)


def build_optimizer(config: RunConfig, params, capturable: bool) -> torch.optim.Optimizer:
    """The workload's own optimizer if it insists on one (``broken-optimizer``: Adam without
    ``capturable``), else SGD (lr 0.1), Adam or AdamW; Adam-style optimizers get
    ``capturable=True`` when graphed."""
    own = declared_workload(config).own_optimizer(params)
    if own is not None:
        return own
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
    workload = declared_workload(config)
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
        self.workload = workload_of(config)  # None: the user's own step
        if self.workload is None:
            parts = build_parts(config.workload, device)
            self.model, self.loss_fn, self.optimizer = parts.model, parts.loss, parts.optimizer
        else:
            with device:  # parameters drawn where they live (on the CPU, 0.1 s per seed replica)
                self.model = build_model(config)
            self.loss_fn = self.workload.loss_fn()
            self.optimizer = build_optimizer(config, self.model.parameters(),
                                             capturable=graphed and device.type == "cuda")
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
            if self.workload is None:  # the user's loss gets the model's output as it is
                loss = self.loss_fn(prediction, y)
            else:
                loss = self.loss_fn(self.workload.output_for_loss(prediction).float(), y)
        if self.workload is not None:
            self.workload.after_loss(loss)
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
