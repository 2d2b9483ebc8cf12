"""Background jobs: long work (a sweep, a batch of runs) on a daemon thread, behind a device lock.

Scope: :class:`BackgroundJob` waits for the device (a caller's ``acquire``), runs the work,
releases the device whatever happens, and keeps a snapshot that a page reads while the work goes
on; :meth:`BackgroundJob.stop` works while waiting or running. The work is any object with the
:class:`Work` interface (``profiler_core.sweep.runner.SweepRunner`` is one). No UI here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol


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
    """``work`` on a daemon thread: wait for the device (``acquire(cancel)`` returns False if
    ``cancel`` was set while waiting), run it, release the device (``release()``), whatever
    happens. The page reads :meth:`snapshot`; :meth:`stop` works while waiting or running."""

    def __init__(self, work: Work, name: str, acquire: Callable[[threading.Event], bool],
                 release: Callable[[], None]) -> None:
        self._work = work
        work.on_progress = lambda progress: self._set(progress=progress)
        self._acquire, self._release = acquire, release
        self.name = name
        self._guard = threading.Lock()
        self._cancel = threading.Event()
        self._snapshot: dict[str, Any] = {"status": "queued", "progress": None, "outcome": None,
                                          "error": "", "started_at": None, "finished_at": None}
        self._thread = threading.Thread(target=self._main, name=f"job-{name}", daemon=True)
        self._done = threading.Event()

    def start(self) -> BackgroundJob:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._cancel.set()
        self._work.stop()

    def wait(self, timeout: float | None = None) -> bool:
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
        try:
            if not self._acquire(self._cancel):
                self._work.stop()
                self._set(status="stopped", outcome=self._work.run(),
                          error="stopped while waiting for the device")
                return
            try:
                self._set(status="running", started_at=time.time())
                outcome = self._work.run()
                self._set(status=outcome.status, outcome=outcome, error=outcome.error_line)
            finally:
                self._release()
        except Exception as exc:  # noqa: BLE001 - said on the page, never a thread that dies silently
            self._set(status="error", error=_one_line(f"{type(exc).__name__}: {exc}"))
        finally:
            self._set(finished_at=time.time())
            self._done.set()


def _one_line(text: str, limit: int = 400) -> str:
    flat = " ".join(text.split())
    flat = "".join(ch if ch.isprintable() else " " for ch in flat)
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
