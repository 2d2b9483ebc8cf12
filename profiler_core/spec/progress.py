"""Progress reporting from long runs: a small value type and a counter of work units.

Scope: what the engine reports; how it is shown (a text bar, JSON lines, a Streamlit bar) is the
caller's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    phase: str  # e.g. "warm-up", "capture", "timed trials"
    done: int  # work units finished
    total: int  # work units in the whole run
    message: str = ""

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 1.0


ProgressCallback = Callable[[Progress], None]


def ignore_progress(progress: Progress) -> None:
    """The default callback: report nothing."""


class LastPhase:
    """A progress callback that passes each report on to ``callback`` and keeps the phase of the
    last one (``phase``: "" before any), to say where a run was when it stopped."""

    def __init__(self, callback: ProgressCallback = ignore_progress) -> None:
        self.callback = callback
        self.phase = ""

    def __call__(self, progress: Progress) -> None:
        self.phase = progress.phase
        self.callback(progress)


class ProgressCounter:
    """Counts work units against a planned total and reports at most every ``min_step`` units."""

    def __init__(self, total: int, callback: ProgressCallback = ignore_progress) -> None:
        self.total = max(1, total)
        self.done = 0
        self.callback = callback
        self.phase = "starting"
        self._min_step = max(1, self.total // 200)
        self._reported = -self._min_step

    def start_phase(self, phase: str, message: str = "") -> None:
        self.phase = phase
        self._report(message, force=True)

    def advance(self, units: int = 1, message: str = "") -> None:
        self.done = min(self.total, self.done + units)
        self._report(message)

    def finish(self, message: str = "done") -> None:
        self.done = self.total
        self.phase = "done"
        self._report(message, force=True)

    def _report(self, message: str, force: bool = False) -> None:
        if force or self.done - self._reported >= self._min_step:
            self._reported = self.done
            self.callback(Progress(self.phase, self.done, self.total, message))
