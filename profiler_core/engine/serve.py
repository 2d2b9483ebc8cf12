"""The warm worker: ``python -m profiler_core serve --device D`` serves exactly one run.

It imports torch and the engine, brings CUDA up on ``D`` with a tiny training step, reports
ready (a ``spec.events.WorkerEvent``), reads one :class:`RunRequest` (one bounded JSON line: the
config's dict, the run folder, overwrite), says it accepted it and runs it exactly as
``run ... --timeout 0 --progress jsonl`` would, then exits. The warm-up leaves nothing a run
measures (RNG, workspaces, cached memory and peak statistics are reset); a bad request is one
UsageError record (``spec.events.ErrorEvent``), exit 2. Details: docs/how-it-measures.md.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError, UsageError
from profiler_core.spec.events import ErrorEvent, Event, WorkerEvent

WARM_BATCH, WARM_WIDTH, WARM_IMAGE = 32, 64, 8
# A request is one run's config: about a thousand characters. Longer lines are refused after
# this many characters are read (the rest is never read into memory).
MAX_REQUEST_CHARS = 65_536
MAX_REQUEST_DEPTH = 8  # {"config": {"modes": [...]}} is 3 deep; json.loads would recurse deeper
REQUEST_FORM = '{"config": {...RunConfig.to_dict()...}, "out": "<run folder>", "overwrite": false}'


@dataclass(frozen=True)
class RunRequest:
    """One run handed to a warm worker: it runs as ``run --timeout 0 --progress jsonl`` of
    ``config`` into ``out`` would (``overwrite``: replace an earlier run of this tool there)."""

    config: RunConfig
    out: str
    overwrite: bool = False

    def to_line(self) -> str:
        """The request as the one JSON line a worker reads."""
        return json.dumps({"config": self.config.to_dict(), "out": self.out,
                           "overwrite": self.overwrite})


def _write(stream: IO[str], event: Event) -> None:
    stream.write(event.to_line() + "\n")
    stream.flush()


def warm_up(device_name: str) -> None:
    """Import what a run imports and run a tiny training step on ``device_name`` (the CPU, or a
    CUDA device that exists; for any other the run itself says what is wrong)."""
    import torch

    import profiler_core.engine.runner  # noqa: F401  (the engine, pandas, numpy: what a run imports)
    from profiler_core.engine.memory import freeze_startup_objects

    device = torch.device(device_name)
    if device.type == "cuda":
        index = 0 if device.index is None else device.index
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            return  # the run says what is wrong (and freezes its start-up objects itself)
        with torch.cuda.device(index), torch.random.fork_rng(devices=[index]):
            _tiny_steps(torch, device, (None, torch.bfloat16))
            torch.cuda.synchronize(device)
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:
            clear_workspaces()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with torch.random.fork_rng(devices=[]):
            _tiny_steps(torch, device, (None,))
    # Before any request: the warm-up's garbage collected, then what is alive frozen (what the
    # run would do first, here off its clock; a cycle of the warm-up is not kept forever).
    gc.collect()
    freeze_startup_objects()


def _tiny_steps(torch, device, autocast_dtypes) -> None:
    """Forward, loss, backward and an SGD step of a two-layer MLP and of a small convolution
    (cuBLAS, and cuDNN for the conv workload), once per precision."""
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(WARM_WIDTH, WARM_WIDTH), nn.Dropout(0.1), nn.ReLU(),
                        nn.Linear(WARM_WIDTH, WARM_WIDTH)).to(device)
    conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4)).to(device)
    optimizer = torch.optim.SGD([*mlp.parameters(), *conv.parameters()], lr=0.1)
    vectors = torch.ones(WARM_BATCH, WARM_WIDTH, device=device)
    images = torch.ones(2, 3, WARM_IMAGE, WARM_IMAGE, device=device)
    labels = torch.zeros(2, dtype=torch.long, device=device)
    for dtype in autocast_dtypes:
        optimizer.zero_grad(set_to_none=True)
        autocast = (torch.autocast(device.type, dtype=dtype, cache_enabled=False) if dtype
                    else contextlib.nullcontext())
        with autocast:
            vector_out, image_out = mlp(vectors), conv(images)
        loss = (torch.nn.functional.mse_loss(vector_out.float(), vectors)
                + torch.nn.functional.cross_entropy(image_out.float(), labels))
        loss.backward()
        optimizer.step()


def read_request(line: str) -> RunRequest:
    """The run request in one line; ValueError (one line) for anything else."""
    if len(line) > MAX_REQUEST_CHARS:
        raise ValueError(f"the request is longer than {MAX_REQUEST_CHARS:,} characters")
    if _nesting(line) > MAX_REQUEST_DEPTH:
        raise ValueError(f"the request is nested more than {MAX_REQUEST_DEPTH} deep")
    try:
        request = json.loads(line)
    except (ValueError, RecursionError):
        raise ValueError("the request is not JSON") from None
    if not (isinstance(request, dict) and set(request) == {"config", "out", "overwrite"}
            and isinstance(request["config"], dict) and isinstance(request["out"], str)
            and isinstance(request["overwrite"], bool)):
        raise ValueError(f"the request must be {REQUEST_FORM}")
    if "\x00" in request["out"]:
        raise ValueError("the request's out holds a NUL character, which no path can hold")
    return RunRequest(_config(request["config"]), request["out"], request["overwrite"])


def _config(values: dict[str, Any]) -> RunConfig:
    try:
        return RunConfig.from_dict(values)
    except ConfigError as error:
        raise ValueError(f"the request's config is refused: {error.message}") from None
    except (TypeError, ValueError, AttributeError, OverflowError) as error:
        raise ValueError(f"the request's config is malformed ({type(error).__name__})") from None


def _nesting(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text`` (brackets inside strings count too: an upper
    bound, enough to refuse before ``json.loads`` recurses)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def read_line(stdin: IO[str], limit: int = MAX_REQUEST_CHARS) -> str:
    """One line of at most ``limit`` characters (one more is read to tell a longer one); bytes
    that are not UTF-8 are a ValueError."""
    raw = getattr(stdin, "buffer", None)
    if raw is None:
        return stdin.readline(limit + 1)
    cap = 4 * limit + 4  # a character is at most 4 bytes in UTF-8
    data = raw.readline(cap)
    if len(data) >= cap and not data.endswith(b"\n"):
        raise ValueError(f"the request is longer than {limit:,} characters")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the request is not UTF-8 text") from None


def _refuse(stdout: IO[str], message: str) -> int:
    """A refused request: one JSON error record on stdout, one line on stderr, exit 2."""
    hint = f"send one line: {REQUEST_FORM}"
    _write(stdout, ErrorEvent(UsageError.kind, None, message, hint))
    print(f"error: {message} ({hint})", file=sys.stderr)
    return UsageError.exit_code


def serve(device_name: str, run_request: Callable[[RunRequest], int],
          stdin: IO[str] | None = None, stdout: IO[str] | None = None) -> int:
    """Warm up, say so, serve one request through ``run_request`` (the command line's run) and
    return its exit code."""
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    started = time.perf_counter()
    try:
        warm_up(device_name)
    except Exception as error:  # the launcher falls back to a fresh process
        print(f"error: the warm-up on {device_name} failed: {error!r}", file=sys.stderr)
        return 1
    _write(stdout, WorkerEvent("ready", pid=os.getpid(), device=device_name,
                               warm_s=round(time.perf_counter() - started, 3)))
    try:
        line = read_line(stdin)
        if not line:
            return 0  # the launcher let this spare go
        request = read_request(line.rstrip("\r\n") if line.endswith("\n") else line)
    except ValueError as error:
        return _refuse(stdout, str(error))
    _write(stdout, WorkerEvent("accepted"))
    return run_request(request)
