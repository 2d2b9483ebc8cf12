"""Whole-step CUDA-graph capture, exactly as in the seed article: warm-up on a side stream,
``zero_grad(set_to_none=True)``, capture under ``torch.cuda.graph``, replay with static inputs.

Scope: one graphed replica of the training step, its static inputs and what capture cost.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from profiler_core.errors import CaptureError
from profiler_core.workloads import TrainingStep


@dataclass(frozen=True)
class CaptureCosts:
    """One-time costs of making the graph (milliseconds and allocator bytes)."""

    warmup_ms: float  # side-stream warm-up iterations, synchronised wall time
    capture_ms: float  # capture itself, synchronised wall time
    pool_reserved_bytes: int  # allocator reservation added by the capture (the graph's private pool)
    pool_allocated_bytes: int  # live allocations added by the capture


class GraphedStep:
    """A ``TrainingStep`` captured into a ``torch.cuda.CUDAGraph`` and replayed with static inputs."""

    def __init__(self, step: TrainingStep, example_x: torch.Tensor, example_y: torch.Tensor) -> None:
        self.step = step
        self.static_x = torch.empty_like(example_x)
        self.static_y = torch.empty_like(example_y)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.costs: CaptureCosts | None = None

    def load(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Copy a fresh batch into the static inputs the graph reads."""
        self.static_x.copy_(x)
        self.static_y.copy_(y)

    def warm_up(self, batches: list[tuple[torch.Tensor, torch.Tensor]], count: bool) -> float:
        """Run one eager step per batch on a side stream; returns synchronised wall milliseconds."""
        device = self.step.device
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        side_stream = torch.cuda.Stream(device)
        side_stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side_stream):
            for x, y in batches:
                self.load(x, y)
                self.step.eager_step(self.static_x, self.static_y, count=count)
        torch.cuda.current_stream(device).wait_stream(side_stream)
        torch.cuda.synchronize(device)
        return (time.perf_counter() - started) * 1e3

    def capture(self, steps_per_graph: int, warmup_ms: float) -> CaptureCosts:
        """Capture ``steps_per_graph`` training steps into one graph (no work runs during capture)."""
        device = self.step.device
        # As in the article: grads to None so backward allocates .grad from the graph's private pool.
        self.step.optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        reserved_before = torch.cuda.memory_reserved(device)
        allocated_before = torch.cuda.memory_allocated(device)
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for index in range(steps_per_graph):
                    if index > 0:
                        # Later captured steps zero the grads in place, so each one is a true
                        # training step rather than an accumulation (counters are unaffected).
                        self.step.optimizer.zero_grad(set_to_none=False)
                    self.step.forward_backward_update(self.static_x, self.static_y)
        except RuntimeError as error:
            raise CaptureError(
                f"the training step could not be captured into a CUDA graph: {error}".splitlines()[0],
                "a captured step may not synchronise with the host (.item(), .cpu(), print of a "
                "tensor), use CPU tensors, or use an optimizer without capturable=True",
            ) from error
        torch.cuda.synchronize(device)
        capture_ms = (time.perf_counter() - started) * 1e3
        self.graph = graph
        self.costs = CaptureCosts(
            warmup_ms=warmup_ms,
            capture_ms=capture_ms,
            pool_reserved_bytes=torch.cuda.memory_reserved(device) - reserved_before,
            pool_allocated_bytes=torch.cuda.memory_allocated(device) - allocated_before,
        )
        return self.costs

    def replay(self) -> None:
        """One replay (``steps_per_graph`` training steps), then the fp16 scaler update if any."""
        self.graph.replay()
        self.step.scaler_update()
