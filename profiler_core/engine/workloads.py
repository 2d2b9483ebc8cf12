"""The training step under test: one replica of a declared workload (``spec.workload_kinds``) or
of the user's own step (``user_workload``: the four-part form, whose loop the tool writes, or the
whole step, which the tool runs as it is), with its optimizer, precision, static counter and
synthetic batches. Capture, replay and timing live in ``capture`` and ``runner``; a batch is the
tuple of the step's arguments (``batches``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from profiler_core.engine.batches import Batch
from profiler_core.engine.user_workload import build_parts, draw_batch
from profiler_core.engine.workload_models import MODELS
from profiler_core.spec.config import RunConfig, is_user_spec
from profiler_core.spec.errors import ConfigError, WorkloadError
from profiler_core.spec.workload_kinds import LEARNING_RATES, declared_workload, workload_of

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def build_model(config: RunConfig) -> nn.Module:
    """The declared workload's model (``mlp``, ``transformer``, ``conv``; a broken step is the MLP)."""
    return MODELS[declared_workload(config).name].build_model(config)


def build_optimizer(config: RunConfig, params, capturable: bool) -> torch.optim.Optimizer:
    """The workload's own optimizer if it insists on one (``broken-optimizer``: Adam without
    ``capturable``), else SGD (lr 0.1), Adam or AdamW; Adam-style optimizers get
    ``capturable=True`` when graphed."""
    own = MODELS[declared_workload(config).name].own_optimizer(params)
    if own is not None:
        return own
    lr = LEARNING_RATES[config.optimizer]
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr)
    optimizer_class = torch.optim.Adam if config.optimizer == "adam" else torch.optim.AdamW
    return optimizer_class(params, lr=lr, capturable=capturable)


def make_batches(config: RunConfig, count: int, device: torch.device) -> list[Batch]:
    """``count`` distinct batches, drawn once on ``device`` from a generator seeded with
    ``config.seed``, so that every mode sees the same data: (input, target) pairs, or the user's
    own ``batch(generator)``'s, each as the step's arguments."""
    generator = torch.Generator(device=device).manual_seed(config.seed)
    if is_user_spec(config.workload):
        parts = build_parts(config.workload, device, config.settings)
        return [draw_batch(config.workload, parts, generator, device) for _ in range(count)]
    model = MODELS[declared_workload(config).name]
    return [model.random_batch(config, device, generator) for _ in range(count)]


class TrainingStep:
    """One replica of the workload: model, loss, optimizer, GradScaler (fp16) and a static counter.

    The counter is the article's ``static_counter``: a one-element tensor incremented inside the
    step, so it shows which phases really run the step on the device. With the user's whole step
    (``whole_step``) the tool runs their function as it is, counter after it; it writes no
    zero_grad, autocast, loss or optimizer step of its own.
    """

    def __init__(self, config: RunConfig, device: torch.device, graphed: bool) -> None:
        if config.dtype == "fp16" and device.type == "cpu":
            raise ConfigError("dtype", "fp16 autocast needs a CUDA device", "use fp32 or bf16 with --device cpu")
        self.config = config
        self.device = device
        torch.manual_seed(config.seed)  # identical initial weights in every replica
        declared = workload_of(config)  # None: the user's own step
        self.workload = MODELS[declared.name] if declared is not None else None
        self.whole_step: Callable[..., Any] | None = None
        self.after_step: Callable[[], Any] | None = None
        self.model: nn.Module | None
        self.optimizer: torch.optim.Optimizer | None
        if self.workload is None:
            parts = build_parts(config.workload, device, config.settings)
            self.model, self.loss_fn, self.optimizer = parts.model, parts.loss, parts.optimizer
            self.whole_step, self.after_step = parts.step, parts.after_step
            self.named_parameters = parts.parameters
            if self.whole_step is not None:
                check_whole_step(config)
        else:
            with device:  # parameters drawn where they live (on the CPU, 0.1 s per seed replica)
                model = build_model(config)
            self.model = model
            self.loss_fn = self.workload.loss_fn()
            self.optimizer = build_optimizer(config, model.parameters(),
                                             capturable=graphed and device.type == "cuda")
            self.named_parameters = lambda: list(model.named_parameters())
        self.scaler = torch.amp.GradScaler(device.type) if config.dtype == "fp16" else None
        self.counter = torch.zeros((1,), device=device)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.config.dtype not in AUTOCAST_DTYPES or self.whole_step is not None:
            return contextlib.nullcontext()
        # cache_enabled=False: autocast's weight cache must not outlive a graph capture.
        return torch.autocast(self.device.type, dtype=AUTOCAST_DTYPES[self.config.dtype],
                              cache_enabled=False)

    def forward_backward_update(self, *batch: Any, count: bool = True) -> None:
        """The capturable body: forward, loss, backward, optimizer step (not for fp16), counter += 1;
        with a whole step, the user's step function itself, then the counter.

        With fp16 the loss is scaled and the GradScaler's step/update, which synchronise with the
        host, are left to ``finish_step`` outside any graph, as PyTorch's CUDA-graph notes require.
        """
        if self.whole_step is not None:
            self.whole_step(*batch)
        else:
            self._tool_step(*batch)
        if count:
            self.counter[0] += 1.0

    def _tool_step(self, x: Any, y: Any, weights: Any = None, key_padding: Any = None) -> None:
        """``weights`` and ``key_padding``: a padded batch's (``engine.shaped``): the loss over
        the real positions only, and the padded ones hidden from the model's attention."""
        model, optimizer, loss_fn = self.model, self.optimizer, self.loss_fn
        assert model is not None and optimizer is not None and loss_fn is not None, \
            "the tool writes the loop only where it has a model, a loss and an optimizer"
        with self.autocast():
            prediction = model(x) if key_padding is None else model(x, key_padding)
            if self.workload is None:  # the user's loss gets the model's output as it is
                loss = loss_fn(prediction, y)
            elif weights is not None:
                loss = self.workload.masked_loss(self.workload.output_for_loss(prediction), y,
                                                 weights)
            else:
                loss = loss_fn(self.workload.output_for_loss(prediction).float(), y)
        if self.workload is not None:
            self.workload.after_loss(loss)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
            optimizer.step()

    def require_model(self, what: str) -> nn.Module:
        """The model, for a mode that needs one (``what``); a whole step may have given none."""
        if self.model is None:
            raise WorkloadError(f"{what} needs the model of {self.config.workload}: its build dict "
                                "has none", "add 'model': your model to the dict your build "
                                            f"function returns, or leave {what} out")
        return self.model

    def zero_grad(self, set_to_none: bool) -> None:
        """The optimizer's zero_grad, where the tool writes the loop (a whole step zeroes its own
        gradients; before capture the tool still sets them to None, as the article does, so that
        backward allocates them from the graph's pool)."""
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=set_to_none)

    def captured_step(self, *batch: Any, index: int) -> None:
        """The ``index``-th training step of a capture: later steps of a tool-written loop zero
        the gradients in place first, so each one is a true training step, not an accumulation."""
        if index > 0 and self.whole_step is None:
            self.zero_grad(set_to_none=False)
        self.forward_backward_update(*batch)

    def finish_step(self) -> None:
        """What runs after each step outside any graph: fp16's unscale, inf/NaN skip, step and
        loss-scale update (host-synchronising), and the user's ``after_step``."""
        if self.scaler is not None and self.optimizer is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        if self.after_step is not None:
            self.after_step()

    def eager_step(self, *batch: Any, count: bool = True) -> None:
        """A whole eager training step: zero_grad (where the tool writes the loop), the body, and
        what runs outside a graph."""
        if self.whole_step is None:
            self.zero_grad(set_to_none=True)
        self.forward_backward_update(*batch, count=count)
        self.finish_step()

    def compile(self, mode: str | None, dynamic: bool | None = None) -> None:
        """``torch.compile`` over what the step runs: the model (the loss and optimizer stay
        eager), or the user's whole step function; ``dynamic`` as torch.compile takes it."""
        if self.whole_step is not None:
            self.whole_step = torch.compile(self.whole_step, mode=mode, dynamic=dynamic)
        else:
            # torch.compile of a Module returns an OptimizedModule (a Module); its stubs say Callable
            self.model = torch.compile(self.require_model("compile"), mode=mode,  # type: ignore[assignment]
                                       dynamic=dynamic)

    def parameters_flat(self) -> torch.Tensor:
        return torch.cat([p.detach().float().reshape(-1) for _, p in self.named_parameters()])


def check_whole_step(config: RunConfig) -> None:
    """What a whole step cannot be given: a precision (it owns its own), more than one step per
    graph with an ``after_step`` (which runs once per replay), data parallelism (its model is
    the user's to wrap)."""
    if config.dtype != "fp32":
        raise WorkloadError(f"--dtype {config.dtype} does not apply to the whole step of "
                            f"{config.workload}: it owns its precision",
                            "write torch.autocast (and a GradScaler, if any) inside your step, or "
                            "leave --dtype out")
    if config.nproc_per_node is not None:
        raise WorkloadError(f"--nproc-per-node cannot run the whole step of {config.workload}: "
                            "its model is its own, so the tool cannot wrap it in "
                            "DistributedDataParallel", "run it on one GPU, or use the four-part "
                            "form (model, batch, loss, optimizer), which the tool wraps")
