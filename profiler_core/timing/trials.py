"""Timing of training iterations, three ways, with a swappable clock.

How blocks of iterations of one mode are timed (steady state, the headline; cold start; the
article's loop: docs/how-it-measures.md, "The run, step by step"); interleaving the modes belongs
to ``runner``. A :class:`CudaClock` marks time with CUDA events, a :class:`HostClock` with
``perf_counter``; tests pass their own clock. Nothing reports progress from inside a block, so
no work but the step runs between a block's marks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

STEADY = "steady"
COLD = "cold"


@dataclass(frozen=True)
class Mode:
    """How one mode runs iteration ``i``.

    ``load`` copies iteration ``i``'s batch into the mode's static inputs (a graph); None when the
    step reads its batch directly (eager). ``run`` is the step itself.
    """

    name: str
    steps: int  # training steps per iteration (a replay of a graph holding several steps)
    run: Callable[[int], None]
    load: Callable[[int], None] | None = None


class Clock(Protocol):
    """Marks points in the device's stream of work and measures between them."""

    device_timestamps: bool  # marks are device-side (CUDA events), not host times

    def marks(self, count: int) -> list[Any]: ...

    def record(self, mark: Any) -> None: ...

    def elapsed_ms(self, start: Any, end: Any) -> float: ...

    def synchronize(self) -> None: ...


class CudaClock:
    """Marks are CUDA events on the current stream, made once and reused (an event made inside
    a timed loop would cost a driver call there)."""

    device_timestamps = True

    def __init__(self, device: Any) -> None:
        import torch

        self._torch = torch
        self.device = device
        self._events: list[Any] = []

    def marks(self, count: int) -> list[Any]:
        while len(self._events) < count:
            event = self._torch.cuda.Event(enable_timing=True)
            event.record()  # creates the driver's event now, outside any timed loop
            self._events.append(event)
        return self._events[:count]

    def record(self, mark: Any) -> None:
        mark.record()

    def elapsed_ms(self, start: Any, end: Any) -> float:
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self._torch.cuda.synchronize(self.device)


class _HostMark:
    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = math.nan


class HostClock:
    """Marks are host ``perf_counter`` readings (the CPU device: work is done when a call returns)."""

    device_timestamps = False

    def marks(self, count: int) -> list[_HostMark]:
        return [_HostMark() for _ in range(count)]

    def record(self, mark: _HostMark) -> None:
        mark.seconds = time.perf_counter()

    def elapsed_ms(self, start: _HostMark, end: _HostMark) -> float:
        return (end.seconds - start.seconds) * 1e3

    def synchronize(self) -> None:
        pass


# One timed iteration: (mode, method, trial, iteration, steps, gpu_ms, wall_ms), the order of
# ``schema.LATENCY_COLUMNS``.
Row = tuple


def steady_block(mode: Mode, first_iteration: int, count: int, trial: int, clock: Clock,
                 rows: list[Row], wall_clock: Callable[[], float] = time.perf_counter) -> float:
    """``count`` iterations back to back, one mark after each; appends rows for all but the first
    to ``rows`` (see the module docstring). Interrupted (Ctrl-C, SIGTERM), it still appends the
    iterations finished.

    With device timestamps a row's time is in ``gpu_ms`` (``wall_ms`` NaN); with host marks it is
    in ``wall_ms`` (``gpu_ms`` NaN). Returns the host's time to issue the block, per training
    step: the host clock from before the first iteration's call to after the last one returned,
    before the closing synchronise (what the launching thread spent; where the queue to the
    device fills, it includes waiting for the device).
    """
    marks = clock.marks(1 + count)
    finished = 0
    load, run = mode.load, mode.run
    clock.synchronize()
    clock.record(marks[0])
    started = wall_clock()
    try:
        for k in range(count):
            if load is not None:
                load(first_iteration + k)
            run(first_iteration + k)
            clock.record(marks[k + 1])
            finished = k + 1
    except KeyboardInterrupt:
        clock.synchronize()
        rows += _steady_rows(mode, first_iteration, finished, trial, clock, marks)
        raise
    issued = wall_clock()
    clock.synchronize()
    rows += _steady_rows(mode, first_iteration, finished, trial, clock, marks)
    return (issued - started) * 1e3 / (count * mode.steps) if count else math.nan


def _steady_rows(mode: Mode, first_iteration: int, finished: int, trial: int, clock: Clock,
                 marks: list[Any]) -> list[Row]:
    rows = []
    for k in range(1, finished):  # the first iteration started from an idle device
        elapsed = clock.elapsed_ms(marks[k], marks[k + 1])
        gpu_ms, wall_ms = (elapsed, math.nan) if clock.device_timestamps else (math.nan, elapsed)
        rows.append((mode.name, STEADY, trial, first_iteration + k, mode.steps, gpu_ms, wall_ms))
    return rows


def held_mean_ms(action: Callable[[], None], count: int, clock: Clock,
                 hold_device: Callable[[], None] | None) -> float:
    """The device time of one call of ``action``: ``count`` calls queued behind ``hold_device``
    (work that keeps the device busy until all of them are enqueued, so they run back to back
    and none waits for the host; None: queued as they come) between two marks; their mean."""
    start, end = clock.marks(2)
    clock.synchronize()
    if hold_device is not None:
        hold_device()
    clock.record(start)
    for _ in range(count):
        action()
    clock.record(end)
    clock.synchronize()
    return clock.elapsed_ms(start, end) / count


def input_copy_ms(mode: Mode, count: int, clock: Clock, hold_device: Callable[[], None]) -> float:
    """The device time of one batch copy into a mode's static inputs (:func:`held_mean_ms`, the
    batches in turn). NaN for a mode that copies nothing."""
    if mode.load is None:
        return math.nan
    load, turn = mode.load, iter(range(count))
    return held_mean_ms(lambda: load(next(turn)), count, clock, hold_device)


def held_replay_ms(mode: Mode, count: int, clock: Clock, hold_device: Callable[[], None]) -> float:
    """The device time of one iteration of ``mode`` with no wait for the host
    (:func:`held_mean_ms`, no batch copy), per training step. For a graph this is its kernels'
    time as replayed, measured with no profiler: the check on the profiled window's kernel
    time."""
    run, turn = mode.run, iter(range(count))
    return held_mean_ms(lambda: run(next(turn)), count, clock, hold_device) / mode.steps


def cold_iteration(mode: Mode, iteration: int, trial: int, clock: Clock,
                   wall_clock: Callable[[], float] = time.perf_counter) -> Row:
    """One iteration from an idle device: the batch copied first (untimed), then a synchronise,
    then marks around the step alone; ``wall_ms`` is host time until a synchronise after it."""
    if mode.load is not None:
        mode.load(iteration)
    start, end = clock.marks(2)
    clock.synchronize()
    started = wall_clock()
    clock.record(start)
    mode.run(iteration)
    clock.record(end)
    clock.synchronize()
    wall_ms = (wall_clock() - started) * 1e3
    gpu_ms = clock.elapsed_ms(start, end) if clock.device_timestamps else math.nan
    return (mode.name, COLD, trial, iteration, mode.steps, gpu_ms, wall_ms)


@dataclass(frozen=True)
class LoopTime:
    """The article's loop timing for one block, per training step."""

    enqueue_ms: float  # perf_counter around the loop with no synchronise: CPU enqueue time only
    synchronised_ms: float  # the same loop closed by a synchronise: its true time


def article_loop(mode: Mode, count: int, clock: Clock,
                 wall_clock: Callable[[], float] = time.perf_counter) -> LoopTime:
    """``count`` iterations as the article times them (batch copies included, as in a loop)."""
    clock.synchronize()
    started = wall_clock()
    for i in range(count):
        if mode.load is not None:
            mode.load(i)
        mode.run(i)
    enqueued = wall_clock()
    clock.synchronize()
    finished = wall_clock()
    steps = count * mode.steps
    return LoopTime((enqueued - started) * 1e3 / steps, (finished - started) * 1e3 / steps)


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` items in ``parts`` blocks whose sizes differ by at most one."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def interleaved(modes: list[Mode], trials: int) -> list[tuple[int, Mode]]:
    """(trial, mode) in ABBA order: drift and noise hit every mode alike."""
    order = []
    for trial in range(trials):
        order += [(trial, mode) for mode in (modes if trial % 2 == 0 else modes[::-1])]
    return order
