"""Background jobs: long work (one run, a sweep) on a daemon thread, behind the devices' locks.

Scope: :class:`BackgroundJob` takes its place in the queue of every device it uses (one, or each
GPU of a data-parallel run: :class:`~profiler_core.orchestration.gpulock.GpuLock`, joined at once,
first come, first served) when started, takes the locks in ascending device order, runs the work,
releases every lock whatever happens, and only then says it has finished, so whoever sees a job
finished also sees its devices free. It keeps a snapshot that a page reads while the work goes
on; :meth:`BackgroundJob.stop` works while waiting (the job leaves every queue) or running. The
work is any object with the :class:`Work` interface (``profiler_core.orchestration.runjob.RunJob``,
``profiler_core.sweep.runner.SweepRunner``). No UI here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from profiler_core.orchestration.gpulock import GpuLock, Ticket, enqueue_all, sorted_locks

STOPPED_WAITING = "stopped while waiting for the device"


class Outcome(Protocol):
    """How a piece of work ended: ``status`` in words (done, stopped...), ``error_line`` why it
    could not go on ("" when nothing stopped it)."""

    @property
    def status(self) -> str: ...

    @property
    def error_line(self) -> str: ...


class Work(Protocol):
    """What a background job runs: ``run()`` once (after ``stop()`` it returns at once, marking
    the work stopped), ``stop()`` from any thread, ``on_progress`` set by the job before it runs."""

    on_progress: Callable[[Any], None]

    def run(self) -> Outcome: ...

    def stop(self) -> None: ...


class BackgroundJob:
    """``work`` on a daemon thread once ``lock`` (the device's, or several: every device's) is its
    turn; see the module docstring. ``name`` names the job; ``holder`` is what the locks show as
    waiting for or holding the device (default: ``name``), with ``session`` (which browser
    session asked)."""

    def __init__(self, work: Work, name: str, lock: GpuLock | Sequence[GpuLock], session: str = "",
                 holder: str | None = None) -> None:
        self._work = work
        work.on_progress = lambda progress: self._set(progress=progress)
        self.name = name
        self.job_id = uuid.uuid4().hex[:12]
        self._locks = sorted_locks([lock] if isinstance(lock, GpuLock) else lock)
        self._ticket = Ticket(self.job_id, holder or name, session, time.time())
        self._guard = threading.Lock()
        self._cancel = threading.Event()
        self._snapshot: dict[str, Any] = {"status": "queued", "progress": None, "outcome": None,
                                          "error": "", "started_at": None, "finished_at": None}
        self._thread = threading.Thread(target=self._main, name=f"job-{self.job_id}", daemon=True)
        self._done = threading.Event()

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices whose locks the job takes, in the order it takes them."""
        return tuple(lock.device for lock in self._locks)

    @property
    def requested_at(self) -> float:
        """When the job was made (``time.time()``): its place in the device's queue."""
        return self._ticket.requested_at

    def start(self) -> BackgroundJob:
        """Join every device's queue now (so jobs start in the order they were asked for) and go."""
        enqueue_all(self._locks, self._ticket)
        try:
            self._thread.start()
        except BaseException:
            self._leave_queues()  # never block a device with a job that never ran
            raise
        return self

    def stop(self) -> None:
        """Leave every queue if waiting, else stop the work; nothing once the job has finished."""
        if self._done.is_set():
            return
        self._cancel.set()
        self._work.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished; True if it did."""
        return self._done.wait(timeout)

    def snapshot(self) -> dict[str, Any]:
        """status (queued, running, stopping, then the outcome's status, or error), progress (the
        work's last report or None), outcome (what ``run()`` returned, or None), error (one line),
        started_at, finished_at."""
        with self._guard:
            snap = dict(self._snapshot)
        if snap["status"] == "running" and self._cancel.is_set():
            snap["status"] = "stopping"
        return snap

    @property
    def active(self) -> bool:
        return not self._done.is_set()

    def _set(self, **changes: Any) -> None:
        with self._guard:
            self._snapshot.update(changes)

    def _main(self) -> None:
        # The final status is published only once every lock is released and every queue left.
        ending: dict[str, Any]
        held: list[GpuLock] = []
        try:
            try:
                for lock in self._locks:  # ascending device order
                    if not lock.acquire(self._ticket, self._cancel):
                        break
                    held.append(lock)
                if len(held) < len(self._locks):
                    self._work.stop()
                    outcome = self._work.run()
                    ending = dict(status=outcome.status, outcome=outcome, error=STOPPED_WAITING)
                else:
                    self._set(status="running", started_at=time.time())
                    outcome = self._work.run()
                    ending = dict(status=outcome.status, outcome=outcome, error=outcome.error_line)
            finally:
                for lock in reversed(held):
                    lock.release(self._ticket)
        except Exception as exc:  # said on the page, never a thread that dies silently
            ending = dict(status="error", error=_one_line(f"{type(exc).__name__}: {exc}"))
        finally:
            self._leave_queues()  # whatever happened, never stay in a queue
        try:
            self._set(finished_at=time.time(), **ending)
        finally:
            self._done.set()

    def _leave_queues(self) -> None:
        for lock in self._locks:
            lock.leave(self._ticket)


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    flat = "".join(ch if ch.isprintable() else " " for ch in flat)
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
