"""Stopping a run: Ctrl-C, SIGTERM (the dashboard's Cancel) and the run's time limit.

The signal handling of ``python -m profiler_core run`` while it runs and saves (a
:class:`RunStopper` around both): the first stop raises in the main thread, a later one waits
until the run's folder is written. A rank of a data-parallel run is only told (``cooperate``):
its ranks must stop at the same point, which they agree on.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import IO, Any

from profiler_core.spec.errors import TimeLimitReached

# What signal.signal takes and returns: a function, SIG_DFL or SIG_IGN, or None (not set from Python).
SignalHandler = Callable[[int, FrameType | None], Any] | int | None

BACKSTOP_S = 30.0  # from the time limit to ending the process if the run did not stop itself
_STOP_SIGNALS = ("SIGINT", "SIGTERM")


class RunStopper:
    """The stop signals of one run (a context manager: SIGINT and SIGTERM are handled inside it,
    restored on exit); :meth:`limit` sets the time limit. ``reason`` is None, "interrupt" or
    "time limit" once the run was told to stop; ``deferred`` counts the stops that came later.
    After :meth:`cooperate` the first stop only sets ``reason`` (nothing is raised)."""

    def __init__(self, stream: IO[str] | None = None, backstop_s: float = BACKSTOP_S) -> None:
        self.stream = stream
        self.backstop_s = backstop_s
        self.time_limit_s: float | None = None
        self.reason: str | None = None
        self.deferred = 0
        self._saving = False
        self._cooperative = False
        self._previous: dict[int, SignalHandler] = {}
        self._backstop: threading.Timer | None = None
        self._active = False

    def __enter__(self) -> RunStopper:
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers belong to the main thread: nothing is installed
        self._active = True
        for name in _STOP_SIGNALS:
            number = getattr(signal, name)
            self._previous[number] = signal.signal(number, self._on_signal)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._active:
            return
        self._cancel_limit()
        self._active = False
        for number, previous in self._previous.items():
            signal.signal(number, previous)
        self._previous.clear()

    def limit(self, seconds: float | None) -> None:
        """Stop the run ``seconds`` from now (None or 0: no limit); only inside the context, in
        the main thread (elsewhere nothing is set)."""
        if not seconds or not self._active or not hasattr(signal, "setitimer"):
            return
        self.time_limit_s = seconds
        self._previous.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._on_signal))
        signal.setitimer(signal.ITIMER_REAL, seconds)
        self._backstop = threading.Timer(seconds + self.backstop_s, self._end_now)
        self._backstop.daemon = True
        self._backstop.start()

    def cooperate(self) -> None:
        """From now on the first stop (a signal, the time limit) sets ``reason`` and raises
        nothing: the run asks ``reason`` where it may stop (a data-parallel rank, whose ranks stop
        together at the next point they all reach)."""
        self._cooperative = True

    def saving(self) -> None:
        """The run is over and its folder is being written: from now on, stops wait (said once)
        and the time limit is off."""
        self._cancel_limit()
        self._saving = True

    # -- inside ----------------------------------------------------------------------------------

    def _cancel_limit(self) -> None:
        if self._backstop is not None:
            self._backstop.cancel()
            self._backstop = None
        if self.time_limit_s and self._active:
            signal.setitimer(signal.ITIMER_REAL, 0)

    def _on_signal(self, signum: int, frame: object) -> None:
        limit = signum == getattr(signal, "SIGALRM", None)
        if self.reason is None and not self._saving:
            self.reason = "time limit" if limit else "interrupt"
            if self._cooperative:
                return
            if limit:
                raise TimeLimitReached(f"no result within the time limit of "
                                       f"{self.time_limit_s:g} s")
            raise KeyboardInterrupt
        if limit:
            return  # the run is stopping or saving already
        self.deferred += 1
        if self.deferred == 1:
            what = ("interrupted again: the run is already stopping and saves what it measured "
                    "first" if self.reason else "interrupted: the run has finished and is being "
                                               "saved")
            self._say(f"{what}; it ends once its folder is written (Ctrl-\\ quits at once, "
                      "without saving)")

    def _end_now(self) -> None:
        """The backstop: the run did not stop within ``backstop_s`` of its time limit."""
        self._say(f"error: the run did not stop within {self.backstop_s:g} s of its time limit "
                  f"of {self.time_limit_s:g} s (stuck outside Python); ended without saving")
        os._exit(TimeLimitReached.exit_code)

    def _say(self, line: str) -> None:
        stream = self.stream or sys.stderr
        try:
            stream.write(line + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass
