"""Running a sweep: every point measured in its own process, stoppable and resumable.

Scope: :class:`SweepRunner` measures every point through
``profiler_core.orchestration.launcher.Launcher`` (a pool of warm workers), reports progress
through a callback, keeps every finished point when stopped (``stop()``, Ctrl-C), records a
failed point and goes on, and on resume skips finished points (re-running a point whose folder is
damaged or incomplete, replacing only that point's folder).
"""

from __future__ import annotations

import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.orchestration.launcher import Ending, Launcher, RunProcess
from profiler_core.spec.errors import ConfigError, ProfilerError, RunFormatError, quoted
from profiler_core.spec.events import ProgressEvent, RunEvent
from profiler_core.storage.outputs import NotOwned, replace_folder
from profiler_core.storage.results import RunResult, run_files
from profiler_core.storage.runfolder import is_tool_run
from profiler_core.sweep.plan import SweepPlan, SweepPoint
from profiler_core.sweep.store import (
    FINISHED,
    POINT_FIGURES,
    POINT_MODE_COLUMNS,
    SweepFolder,
    check_sweep_output,
    claim_folder,
    not_replaced,
    number_or_nan,
    one_line,
    point_figures,
    read_points,
    read_sweep_json,
    release_folder,
    runner_record,
    sweep_files,
)


@dataclass(frozen=True)
class SweepProgress:
    """Where a sweep is: points finished (measured or failed, counting those kept from before a
    resume) out of all, and the point being measured with its own progress."""

    points_total: int
    points_finished: int
    index: int | None = None  # the point being measured (None: between points)
    label: str = ""
    point_fraction: float = 0.0
    phase: str = ""
    message: str = ""

    @property
    def fraction(self) -> float:
        if not self.points_total:
            return 1.0
        current = self.point_fraction if self.index is not None else 0.0
        return min(1.0, (self.points_finished + current) / self.points_total)


@dataclass(frozen=True)
class SweepOutcome:
    """How a sweep's execution ended: ``status`` done or stopped; ``fatal`` the error that stopped
    it when no point could run (no CUDA device), else None."""

    folder: Path
    status: str
    points: pd.DataFrame
    point_modes: pd.DataFrame
    fatal: dict | None = None
    rerun_damaged: tuple[str, ...] = ()

    @property
    def failed(self) -> pd.DataFrame:
        return self.points[self.points["status"] == "failed"]

    @property
    def error_line(self) -> str:
        """The fatal error in one line ("" when none stopped the sweep)."""
        return f"{self.fatal['kind']}: {self.fatal['message']}" if self.fatal else ""


# Worker errors after which no later point can run either: stop the sweep, keep the point pending.
FATAL_KINDS = ("NoCudaError", "UsageError")
ProgressCallback = Callable[[SweepProgress], None]

# Warm workers a sweep keeps ready at once: they warm up together between two points, so the
# sweep waits for one warm-up per this many points (a warm-up costs several points' time: see
# docs/h200-history.md, "Sweeps: the warm-worker pool").
SWEEP_SPARES = 8
# A point's cost for the up-front estimate (rough, and said to be): seconds per point, and per
# warm-up of the pool. CUDA: a seed-size point and a warm-up on a GPU (docs/h200-history.md).
# CPU: a small point on a warm worker and a warm-up on a 2-core machine; larger steps take longer.
POINT_SECONDS = {"cuda": 1.5, "cpu": 0.7}
WARM_UP_SECONDS = {"cuda": 10.0, "cpu": 3.0}


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def sweep_spares(pending_points: int, device: str, cores: int | None = None) -> int:
    """Warm workers for a sweep's remaining points: one per point after the first (which runs in a
    fresh process), at most ``SWEEP_SPARES``, at most one per two cores (they warm up together,
    each importing torch on a core), and one for the CPU device, whose points use every core."""
    cores = usable_cores() if cores is None else cores
    limit = 1 if device == "cpu" else min(SWEEP_SPARES, max(1, cores // 2))
    return max(1, min(limit, pending_points - 1))


def expected_seconds(points: int, device: str, spares: int) -> float:
    """A sweep's expected time before it starts: ``POINT_SECONDS`` a point and a pool warm-up
    (``WARM_UP_SECONDS``) per ``spares`` points."""
    kind = "cpu" if device == "cpu" else "cuda"
    return points * POINT_SECONDS[kind] + math.ceil(points / max(1, spares)) * WARM_UP_SECONDS[kind]


def _default_launcher(pending_points: int, device: str = "cuda:0") -> Launcher:
    # The first point runs in a fresh process; each later one takes a spare.
    return Launcher(warm=True, spares=sweep_spares(pending_points, device))


class SweepRunner:
    """Measure every point of a sweep, each in its own process (``launcher``: an object with the
    ``profiler_core.orchestration.launcher.Launcher`` interface; a warm one by default, closed at the end).

    Build it with :meth:`create` (a new sweep) or :meth:`resume` (a stopped or crashed one), then
    call :meth:`run` once. ``on_progress`` is called from the launcher's reader thread as well as
    the caller's; :meth:`stop` may be called from any thread (the point being measured is
    cancelled, kept incomplete, and measured again on resume). A point that fails is recorded
    (``error_kind``, ``error_message``) and the sweep goes on.
    """

    on_progress: Callable[[Any], None]  # a SweepProgress each time; set by the background job

    def __init__(self, folder: SweepFolder, *, launcher: Launcher | None = None,
                 on_progress: ProgressCallback | None = None, point_timeout_s: float | None = None,
                 rerun_damaged: Sequence[str] = (), claim: str = "") -> None:
        self._folder = folder
        self._claim = claim  # released when run() ends
        self._launcher = launcher
        self._own_launcher = launcher is None
        self.on_progress = on_progress or (lambda progress: None)  # may be set before run()
        self._point_timeout_s = point_timeout_s
        self._stop = threading.Event()
        self._process_guard = threading.Lock()
        self._process: RunProcess | None = None
        self.rerun_damaged = tuple(rerun_damaged)

    @property
    def plan(self) -> SweepPlan:
        return self._folder.plan

    @property
    def folder(self) -> Path:
        return self._folder.path

    @classmethod
    def create(cls, plan: SweepPlan, directory: str | os.PathLike, *, overwrite: bool = False,
               **options: Any) -> SweepRunner:
        """A new sweep in ``directory`` (checked by :func:`check_sweep_output`; an earlier sweep
        of this tool there is replaced only with ``overwrite``)."""
        target = check_sweep_output(directory, overwrite=overwrite)
        claim = claim_folder(target, read_sweep_json(target))
        try:
            if os.path.lexists(target):  # one of our sweeps, replaced as asked: its files only
                try:
                    replace_folder(target, sweep_files)  # checked again once moved aside
                except NotOwned as why:
                    raise not_replaced(repr(str(target)), why) from None
            target.mkdir(parents=True)
            folder = SweepFolder(target, plan)
            folder.points = folder.blank_points()
            folder.write_points()
            folder.write_info("running", runner=runner_record())
        except BaseException:
            release_folder(claim)
            raise
        return cls(folder, claim=claim, **options)

    @classmethod
    def resume(cls, directory: str | os.PathLike, *, threshold: float | None = None,
               **options: Any) -> SweepRunner:
        """Continue the sweep in ``directory``: its plan from sweep.json; a point counts as
        finished when its folder holds a complete run of its config (measured) or points.csv
        recorded its failure. A point folder that is damaged or was left by a different config
        is moved aside (``point-NNN.damaged-K``, nothing deleted) and measured again."""
        target = check_sweep_output(directory, resume=True)
        info = read_sweep_json(target) or {}
        plan = SweepPlan.from_dict(info.get("plan") or {})
        if threshold is not None:
            plan = replace(plan, threshold=threshold)
        _check_resumable(target)
        claim = claim_folder(target, info)
        try:
            return cls._resumed(target, plan, info, claim=claim, **options)
        except OSError as error:  # written to while resuming: a disk that filled or went away
            release_folder(claim)
            raise _unwritable(target, error) from None
        except BaseException:
            release_folder(claim)
            raise

    @classmethod
    def _resumed(cls, target: Path, plan: SweepPlan, info: Mapping[str, Any],
                 **options: Any) -> SweepRunner:
        folder = SweepFolder(target, plan)
        folder.info = {key: value for key, value in info.items() if key in ("created_at",)}
        recorded = _read_points_quietly(target, plan)
        folder.points = folder.blank_points()
        modes_rows, damaged = [], []
        for point in plan.points():
            figures, modes, state = _reconcile(target, point, recorded.get(point.index))
            if state == "damaged":
                damaged.append(point.run_name)
                _move_aside(target / point.run_name)
                state = "pending"
            _set_row(folder.points, point.index, state=state, figures=figures,
                     error=(recorded.get(point.index) or {}) if state == "failed" else None)
            if modes is not None:
                modes_rows.append(modes.assign(index=point.index))
        if modes_rows:
            folder.point_modes = pd.concat(modes_rows, ignore_index=True)[POINT_MODE_COLUMNS]
        folder.write_points()
        folder.write_info("running", runner=runner_record(), resumed_at=time.strftime(
            "%Y-%m-%dT%H:%M:%S"))
        return cls(folder, rerun_damaged=damaged, **options)

    # -- control ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop after cancelling the point being measured; every finished point is kept."""
        self._stop.set()
        with self._process_guard:
            process = self._process
        if process is not None:
            process.cancel()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def finished_points(self) -> int:
        """Points measured or failed so far (those kept from before a resume included)."""
        return self._finished_count()

    # -- running ---------------------------------------------------------------------------------

    def _finished_count(self) -> int:
        return int(self._folder.points["status"].isin(FINISHED).sum())

    def _report(self, **current: Any) -> None:
        self.on_progress(SweepProgress(len(self._folder.points), self._finished_count(), **current))

    def run(self) -> SweepOutcome:
        """Measure every point not finished yet; returns how it ended (Ctrl-C: stopped)."""
        try:
            fatal = self._run_points()
            running = self._folder.points["status"] == "running"
            self._folder.points.loc[running, "status"] = "stopped"
            finished = bool(self._folder.points["status"].isin(FINISHED).all())
            status = "done" if finished else "stopped"
            self._folder.write_points()
            self._folder.write_info(status, **({"fatal": fatal} if fatal else {}))
        finally:
            release_folder(self._claim)  # only once the folder says how it ended
        self._report()
        return SweepOutcome(self.folder, status, self._folder.points.copy(),
                            self._folder.point_modes.copy(), fatal, self.rerun_damaged)

    def _run_points(self) -> dict | None:
        """Measure the points left, in order, until done, stopped or a fatal error (returned)."""
        fatal = None
        try:
            if self._launcher is None:
                pending = int((~self._folder.points["status"].isin(FINISHED)).sum())
                self._launcher = _default_launcher(pending, self.plan.base.device)
            launcher = self._launcher
            self._report()
            for point in self.plan.points():
                if self._stop.is_set():
                    break
                if self._folder.points.at[point.index, "status"] in FINISHED:
                    continue
                fatal = self._measure(point, launcher)
                if fatal is not None:
                    break
        except KeyboardInterrupt:
            self.stop()
        finally:
            with self._process_guard:
                process, self._process = self._process, None
            if process is not None:  # interrupted while a point ran: let it keep what it measured
                process.cancel()
                process.wait(30)
            if self._own_launcher and self._launcher is not None:
                self._launcher.close()
        return fatal

    def _measure(self, point: SweepPoint, launcher: Launcher) -> dict | None:
        """Run one point to its end and record it; returns a fatal error record, else None."""
        out = self.folder / point.run_name
        overwrite = False
        if os.path.lexists(out):
            try:
                run_files(out)  # this point's own earlier, incomplete run, and nothing else
                overwrite = True
            except (NotOwned, OSError):
                _move_aside(out)
        points = self._folder.points
        points.at[point.index, "status"] = "running"
        self._folder.write_points()
        self._report(index=point.index, label=point.label, phase="starting")
        started = time.monotonic()

        def on_event(event: RunEvent) -> None:
            if not isinstance(event, ProgressEvent):
                return
            self._report(index=point.index, label=point.label, point_fraction=event.fraction,
                         phase=one_line(event.phase, 60), message=one_line(event.message, 120))

        process = launcher.start(point.config, out, overwrite=overwrite,
                                 timeout_s=self._point_timeout_s, on_event=on_event)
        with self._process_guard:
            self._process = process
        if self._stop.is_set():
            process.cancel()
        ending = None
        while ending is None:
            try:
                ending = process.wait(0.2)
            except KeyboardInterrupt:
                self.stop()
        with self._process_guard:
            self._process = None
        return self._record(point, out, ending, time.monotonic() - started)

    def _record(self, point: SweepPoint, out: Path, ending: Ending, elapsed_s: float
                ) -> dict | None:
        error = ending.error
        state, figures, kind, message, fatal = "failed", None, "", "", None
        if ending.status == "done":
            try:
                result = RunResult.load(out)
                figures, modes = point_figures(result)
                state = "done"
                self._add_modes(point.index, modes)
            except (ProfilerError, OSError) as exc:
                kind, message = "RunFormatError", f"the point's run folder cannot be read: {exc}"
        elif ending.status == "error" and error is not None:
            kind = error.kind or "error"
            message = error.message
            if error.hint:
                message += f" ({error.hint})"
            if kind == "Interrupted" and self._stop.is_set():
                state = "stopped"
            elif kind in FATAL_KINDS:
                state, fatal = "pending", {"kind": kind, "message": one_line(message)}
                self._stop.set()
        elif ending.status == "cancelled" and self._stop.is_set():
            state = "stopped"
        elif ending.status == "timeout":
            kind, message = "Timeout", f"no result after {self._point_timeout_s or 0:g} s: stopped"
        else:
            tail = [line for line in str(getattr(ending, "stderr_tail", "") or "").splitlines()
                    if line.strip()]
            kind = "Crashed" if ending.status != "cancelled" else "Cancelled"
            message = (f"the run process ended ({ending.status}, exit code "
                       f"{getattr(ending, 'returncode', None)})"
                       + (f": {tail[-1]}" if tail else ""))
        figures = dict(figures or {})
        figures["elapsed_s"] = elapsed_s
        _set_row(self._folder.points, point.index, state=state, figures=figures,
                 error={"error_kind": kind, "error_message": message} if state == "failed" else None)
        self._folder.write_points()
        self._report()
        return fatal

    def _add_modes(self, index: int, modes: pd.DataFrame) -> None:
        kept = self._folder.point_modes
        kept = kept[kept["index"] != index] if len(kept) else kept
        frames = [frame for frame in (kept, modes.assign(index=index)[POINT_MODE_COLUMNS])
                  if len(frame)]
        self._folder.point_modes = pd.concat(frames, ignore_index=True) if frames else kept


def _check_resumable(target: Path) -> None:
    """Refuse (``ConfigError`` on ``out``) to resume a sweep whose folder cannot be written (a
    read-only mount): resuming rewrites points.csv and sweep.json there. A file is made and
    removed to find out."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".resume-check.", dir=target)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise _unwritable(target, error) from None


def _unwritable(target: Path, error: OSError) -> ConfigError:
    return ConfigError("out", f"cannot resume the sweep in {quoted(str(target))}: the folder "
                              f"cannot be written ({error.strerror or type(error).__name__})",
                       "copy the sweep folder to a writable disk and resume it there")


def _set_row(points: pd.DataFrame, index: int, *, state: str, figures: dict | None,
             error: Mapping[str, Any] | None) -> None:
    points.at[index, "status"] = state
    for name in POINT_FIGURES:
        if figures is not None and name in figures:
            points.at[index, name] = number_or_nan(figures[name])
    error = error or {}
    points.at[index, "error_kind"] = one_line(error.get("error_kind", ""), 40)
    points.at[index, "error_message"] = one_line(error.get("error_message", ""))


def _move_aside(path: Path) -> Path:
    """Rename a damaged point folder beside itself (``point-NNN.damaged-K``); nothing is deleted."""
    for suffix in range(1, 1000):
        aside = path.with_name(f"{path.name}.damaged-{suffix}")
        if not os.path.lexists(aside):
            os.replace(path, aside)
            return aside
    raise RunFormatError(f"{path} is damaged and 999 damaged copies are already kept beside it",
                         "remove the point-NNN.damaged-K folders you do not need")


def _read_points_quietly(folder: Path, plan: SweepPlan) -> dict[int, dict[str, Any]]:
    """points.csv's rows by index, or nothing when it is missing or damaged (the point folders
    are the truth; points.csv only adds what failed and why)."""
    try:
        frame = read_points(folder, plan)
    except (RunFormatError, OSError):
        return {}
    return {int(row["index"]): row for row in frame.to_dict("records")}


def _reconcile(folder: Path, point: SweepPoint, recorded: Mapping[str, Any] | None
               ) -> tuple[dict | None, pd.DataFrame | None, str]:
    """(figures, modes, state) of a point before resuming: done when its folder holds a complete
    run of its config; failed when points.csv says so and no complete run is there; damaged when
    its folder is there but not a readable run of this point (it is measured again); else pending."""
    out = folder / point.run_name
    if not os.path.lexists(out):
        status = (recorded or {}).get("status")
        return None, None, "failed" if status == "failed" else "pending"
    if not is_tool_run(out):
        return None, None, "damaged"
    try:
        result = RunResult.load(out)
    except (ProfilerError, OSError):
        return None, None, "damaged"
    if result.config != point.config:
        return None, None, "damaged"
    if result.complete:
        figures, modes = point_figures(result)
        elapsed = number_or_nan((recorded or {}).get("elapsed_s"))
        figures["elapsed_s"] = elapsed
        return figures, modes, "done"
    # an incomplete run of this point: failed (kept) if that was recorded, else measured again
    status = (recorded or {}).get("status")
    return None, None, "failed" if status == "failed" else "pending"


