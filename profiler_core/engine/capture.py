"""Whole-step CUDA-graph capture, exactly as in the seed article: warm-up on a side stream,
``zero_grad(set_to_none=True)``, capture under ``torch.cuda.graph``, replay with static inputs.

Scope: one graphed replica of the training step, its static inputs and what capture cost.
"""

from __future__ import annotations

import gc
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from profiler_core.engine.batches import Batch, copy_into, static_copy
from profiler_core.engine.workloads import TrainingStep
from profiler_core.spec.errors import CaptureError, CudaFaultError

_TORCH_DIR = str(Path(torch.__file__).parent)
# Source text that gives away why a line cannot be captured.
_HOST_SYNC_CODE = (".item()", ".cpu()", ".tolist()", ".numpy()", "print(", ".nonzero(", "synchronize(")
_CPU_TENSOR_CODE = (".to(", ".cuda(", "torch.tensor(", "torch.zeros(", "torch.ones(", "torch.randn(")


# The diagnosis of a capture that failed in this process. A failed capture leaves PyTorch's CUDA
# random-number state in capture mode ("Offset increment outside graph capture encountered
# unexpectedly" at the next dropout), so later runs in the same process are refused clearly.
_failed_capture: str | None = None


def refuse_after_failed_capture() -> None:
    if _failed_capture is not None:
        raise CudaFaultError(
            f"an earlier capture in this process failed ({_failed_capture}), which leaves PyTorch's "
            "CUDA random-number state unusable for further runs here",
            "start a new process for the next run (the dashboard runs each run in its own worker)")


def _exception_chain(error: BaseException) -> list[BaseException]:
    """The error and what it was raised from or during, the original first."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain[::-1]


def _offending_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the original error that is not inside torch itself."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith(_TORCH_DIR)]
    return frames[-1] if frames else None


# torch's own files whose host synchronisation a step reaches through a call of the user's:
# (file name ending, cause, fix).
_TORCH_CAUSES = (
    ("amp/grad_scaler.py", "the GradScaler's step reads on the host whether the gradients "
                           "overflowed (an .item())",
     "use bf16 autocast, which needs no GradScaler; with fp16, keep scaler.scale(loss).backward() "
     "in the step and move scaler.step(optimizer) and scaler.update() into the build dict's "
     "after_step, which runs after every step outside the graph"),
    ("nn/utils/clip_grad.py", "gradient clipping checks the norm on the host "
                              "(error_if_nonfinite=True)",
     "leave error_if_nonfinite off in the captured step (clip_grad_norm_ itself is capturable)"),
)


def _torch_cause(error: BaseException) -> tuple[str, str] | None:
    """(cause, fix) when the failing call went through one of ``_TORCH_CAUSES``' files."""
    files = [frame.filename.replace("\\", "/") for frame in traceback.extract_tb(error.__traceback__)]
    for ending, cause, fix in _TORCH_CAUSES:
        if any(name.endswith(ending) for name in files):
            return cause, fix
    return None


def diagnose_capture_failure(error: BaseException) -> CaptureError:
    """A ``CaptureError`` that names the cause (the offending line where it can be found) and the fix."""
    chain = _exception_chain(error)
    text = " ".join(str(e) for e in chain)
    frame = _offending_frame(chain[0])
    code = (frame.line or "").strip() if frame else ""
    where = f" at {Path(frame.filename).name}:{frame.lineno} `{code}`" if frame else ""
    through_torch = next((found for found in map(_torch_cause, chain) if found), None)
    if through_torch is not None:
        cause, fix = through_torch
    elif "capturable" in text:
        cause = "the optimizer was built without capturable=True"
        fix = "build Adam/AdamW with capturable=True (or use SGD) for the graphed step"
    elif any(marker in code for marker in _HOST_SYNC_CODE):
        cause = "the step synchronises with the host"
        fix = ("keep .item(), .cpu(), .tolist(), print() of tensors and other host syncs out of the "
               "captured step: read values after replay() instead")
    elif any(marker in code for marker in _CPU_TENSOR_CODE):
        cause = "the step copies a CPU tensor to the GPU"
        fix = "create the tensor on the GPU once, before capture, and reuse it inside the step"
    else:
        cause = "an operation in the step is not allowed during capture"
        fix = ("captured steps may not synchronise with the host, copy CPU tensors, or change tensor "
               "shapes; see PyTorch's CUDA-graph constraints")
    detail = str(chain[0]).strip().splitlines()[0] if str(chain[0]).strip() else type(chain[0]).__name__
    return CaptureError(f"the training step could not be captured: {cause}{where} ({detail})", fix)


@dataclass(frozen=True)
class CaptureCosts:
    """One-time costs of making the graph (milliseconds and allocator bytes)."""

    warmup_ms: float  # side-stream warm-up iterations, synchronised wall time
    capture_ms: float  # capture itself, synchronised wall time
    pool_reserved_bytes: int  # allocator reservation added by the capture (the graph's private pool)
    pool_allocated_bytes: int  # live allocations added by the capture


class GraphedStep:
    """A ``TrainingStep`` captured into a ``torch.cuda.CUDAGraph`` and replayed with static inputs."""

    def __init__(self, step: TrainingStep, example: Batch) -> None:
        self.step = step
        self.static: Batch = static_copy(example)  # the step's arguments the graph reads
        self.graph: torch.cuda.CUDAGraph | None = None

    def load(self, *batch) -> None:
        """Copy a fresh batch into the static inputs the graph reads."""
        copy_into(self.static, batch)

    def warm_up(self, batches: list[Batch], count: bool) -> float:
        """Run one eager step per batch on a side stream; returns synchronised wall milliseconds."""
        device = self.step.device
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        side_stream = torch.cuda.Stream(device)
        side_stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side_stream):
            for batch in batches:
                self.load(*batch)
                self.step.eager_step(*self.static, count=count)
        torch.cuda.current_stream(device).wait_stream(side_stream)
        torch.cuda.synchronize(device)
        return (time.perf_counter() - started) * 1e3

    def capture(self, steps_per_graph: int, warmup_ms: float) -> CaptureCosts:
        """Capture ``steps_per_graph`` training steps into one graph (no work runs during capture)."""
        device = self.step.device
        # As in the article: grads to None so backward allocates .grad from the graph's private pool.
        self.step.zero_grad(set_to_none=True)
        # torch.cuda.graph() collects garbage and empties the cache as it starts: do it first, so
        # what that frees is not counted against the capture.
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        reserved_before = torch.cuda.memory_reserved(device)
        allocated_before = torch.cuda.memory_allocated(device)
        started = time.perf_counter()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for index in range(steps_per_graph):
                    self.step.captured_step(*self.static, index=index)
        except RuntimeError as error:
            global _failed_capture
            diagnosis = diagnose_capture_failure(error)
            _failed_capture = diagnosis.message
            raise diagnosis from error
        torch.cuda.synchronize(device)
        capture_ms = (time.perf_counter() - started) * 1e3
        self.graph = graph
        return CaptureCosts(
            warmup_ms=warmup_ms,
            capture_ms=capture_ms,
            pool_reserved_bytes=torch.cuda.memory_reserved(device) - reserved_before,
            pool_allocated_bytes=torch.cuda.memory_allocated(device) - allocated_before,
        )

    def replay(self) -> None:
        """One replay (``steps_per_graph`` training steps), then what runs outside the graph (the
        fp16 scaler update, the user's after_step)."""
        if self.graph is None:
            raise CaptureError("replay() was called before the step was captured",
                               "call capture() first")
        self.graph.replay()
        self.step.finish_step()
