"""A run from the page in a separate worker process, once the device's lock is ours.

Scope: the dashboard's layer over :mod:`profiler_core.orchestration.launcher` (which starts the worker in its own
process group, follows its JSON-lines records, stops it, kills what it leaves behind and
classifies the ending): the per-device lock, the snapshot the page reads, and the wording of how
a run ended.

How a :class:`RunJob` runs (on one daemon thread, never touching Streamlit):
1. wait for the device's :class:`~dashboard.gpulock.GpuLock` (first come, first served; a Cancel
   while waiting leaves the queue);
2. start the worker through a :class:`~profiler_core.orchestration.launcher.Launcher` (the server's warm one, so
   a run may be served by a warm worker; or a private launcher of fresh processes);
3. its records update the snapshot: ``progress`` the phase and the bar, ``done``/``error`` how it
   ended, the launcher's ``stopping``/``fallback`` records what the launcher is doing;
4. when the worker has exited (and whatever it left in its process group is gone), the launcher's
   :class:`~profiler_core.orchestration.launcher.Ending` becomes the job's final state: done, error (the worker's
   error record, kinds from ``profiler_core.spec.errors.ERROR_KINDS``), cancelled, timeout or crashed;
5. release the lock, whatever happened, before the page can see the job finished.
Cancel (and the timeout) stop the worker's whole process group: SIGTERM, then SIGKILL after a grace
period. Workers still running when the server exits are stopped by the launcher (``atexit``).
:func:`describe_outcome` says in plain words how a job ended and what to change. The Streamlit page
only reads :meth:`RunJob.snapshot`. The job hands the launcher a ``RunConfig``, never a command line
(the launcher builds a fresh process's argv list, never a shell string).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboard.gpulock import GpuLock, Ticket
from profiler_core.orchestration.command import REPO_ROOT, run_env
from profiler_core.orchestration.launcher import (  # noqa: F401  (KIND_OF_EXIT: read here with the wording)
    KIND_OF_EXIT,
    Ending,
    Launcher,
    RunProcess,
)
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import REFUSED_KINDS

ACTIVE = ("queued", "starting", "running", "cancelling")
# Plain words for every error kind of the schema (a test checks that none is missing).
ERROR_TITLES = {
    "UsageError": "The run was refused: a setting could not be read",
    "ConfigError": "The run was refused: a setting is out of range",
    "NoCudaError": "No CUDA GPU is available to the worker",
    "CaptureError": "The training step could not be captured into a CUDA graph",
    "GpuMemoryError": "Not enough GPU memory for this run",
    "CudaFaultError": "The GPU reported a fault",
    "RunFormatError": "The worker could not read or write a run folder",
    "SaveError": "The run could not be saved in the runs folder",
    "RankError": "A rank of the data-parallel run failed",
    "Interrupted": "The run was interrupted",
    "WorkloadError": "Your training step failed",
    "TimeLimit": "The run reached its own time limit",
}
# What follows from each kind, beyond the worker's own hint.
ERROR_AFTERMATH = {
    "CudaFaultError": "The fault ended the worker process only; the server and the GPU lock are "
                      "fine, and the next run starts in a fresh process.",
    "GpuMemoryError": "The worker released the GPU memory when it exited; the next run starts in a "
                      "fresh process.",
}
ERROR_FIELDS = ("kind", "field", "message", "hint")


@dataclass(frozen=True)
class JobSnapshot:
    """What a run is doing now; ``status`` is one of ACTIVE or done/error/cancelled/timeout/crashed."""

    job_id: str
    run_name: str
    device: str
    out_dir: str
    status: str
    phase: str = ""
    fraction: float = 0.0
    message: str = ""
    error: dict[str, Any] | None = None
    returncode: int | None = None
    requested_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    stderr_tail: str = ""
    events: int = 0
    killed: bool = False  # it ignored SIGTERM and was killed with SIGKILL after the grace period
    timeout_s: float | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ok(self) -> bool:
        return self.status == "done"


@dataclass
class _State:
    status: str = "queued"
    phase: str = ""
    fraction: float = 0.0
    message: str = ""
    error: dict[str, Any] | None = None
    returncode: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    stderr_tail: str = ""
    events: int = 0
    killed: bool = False


class RunJob:
    """One worker run; see the module docstring. ``work`` is the config to run (``launcher`` may
    serve it on a warm worker), or a command line run as it is in a fresh process (tests' stand-ins
    for the worker). Without ``launcher``, a private one starts fresh processes with ``env`` and
    ``cwd``."""

    def __init__(self, work: RunConfig | Sequence[str], out_dir: Path, device: str, lock: GpuLock,
                 session: str = "", run_name: str | None = None, timeout_s: float | None = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 grace_s: float = 5.0, launcher: Launcher | None = None) -> None:
        self.work = work if isinstance(work, RunConfig) else [str(a) for a in work]
        self.out_dir = Path(out_dir)
        self.device = device
        self.job_id = uuid.uuid4().hex[:12]
        self.run_name = run_name or self.out_dir.name
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._launcher = launcher or Launcher(
            warm=False, env=env if env is not None else run_env(),
            cwd=Path(cwd) if cwd is not None else REPO_ROOT, grace_s=grace_s)
        self._lock = lock
        self._ticket = Ticket(self.job_id, self.run_name, session, time.time())
        self._state = _State()
        self._guard = threading.Lock()
        self._cancel = threading.Event()
        self._process: RunProcess | None = None
        self._handler_error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"run-{self.job_id}", daemon=True)
        self._finished = threading.Event()

    # -- control (called from the Streamlit script thread) --------------------------------------

    def start(self) -> RunJob:
        """Join the device's queue now (so runs start in the order Run was pressed) and go."""
        self._lock.enqueue(self._ticket)
        try:
            self._thread.start()
        except BaseException:
            self._lock.leave(self._ticket)  # never block the device with a job that never ran
            raise
        return self

    def cancel(self) -> None:
        """Stop the run: leave the queue if waiting, else stop the worker (then kill it)."""
        if self._finished.is_set():
            return
        self._cancel.set()
        with self._guard:
            if self._state.status in ("running", "starting"):
                self._state.status = "cancelling"
                self._state.message = "stopping the worker"
            process = self._process
        if process is not None:
            process.cancel(self.grace_s)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished (tests); True if it did."""
        return self._finished.wait(timeout)

    def snapshot(self) -> JobSnapshot:
        with self._guard:
            s = self._state
            return JobSnapshot(
                job_id=self.job_id, run_name=self.run_name, device=self.device,
                out_dir=str(self.out_dir), status=s.status, phase=s.phase, fraction=s.fraction,
                message=s.message, error=dict(s.error) if s.error else None,
                returncode=s.returncode, requested_at=self._ticket.requested_at,
                started_at=s.started_at, finished_at=s.finished_at, stderr_tail=s.stderr_tail,
                events=s.events, killed=s.killed, timeout_s=self.timeout_s)

    # -- the job thread -------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        with self._guard:
            for key, value in changes.items():
                setattr(self._state, key, value)

    def _main(self) -> None:
        # A terminal status is published only once the lock is released, so whoever sees a
        # finished job (the page, a test) also sees the device free.
        ending: dict[str, Any]
        try:
            if not self._lock.acquire(self._ticket, self._cancel):
                ending = dict(status="cancelled", message="cancelled while waiting for the device")
            else:
                try:
                    ending = self._run_worker()
                except Exception:
                    self._kill_now()  # never free the device with a worker still on it
                    raise
                finally:
                    self._lock.release(self._ticket)
        except Exception as exc:  # never leave a job "running" because of a bug here
            ending = dict(status="crashed", message=f"the dashboard could not run the worker: {exc!r}")
        finally:
            self._lock.leave(self._ticket)  # whatever happened, never stay in the queue
        try:
            self._set(finished_at=time.time(), **ending)
        finally:
            self._finished.set()

    def _run_worker(self) -> dict[str, Any]:
        """Run the worker to its end; returns the job's final state (published by ``_main``)."""
        if self._cancel.is_set():
            return dict(status="cancelled", message="cancelled before it started")
        self._set(status="starting", started_at=time.time(), message="starting the worker process")
        try:
            self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return dict(status="crashed",
                        message=f"the runs folder {self.out_dir.parent} cannot be created "
                                f"({exc.strerror or exc}); choose another runs folder in the sidebar")
        if isinstance(self.work, RunConfig):
            process = self._launcher.start(self.work, self.out_dir, timeout_s=self.timeout_s,
                                           on_event=self._on_event, grace_s=self.grace_s)
        else:
            process = self._launcher.start_command(self.work, self.out_dir,
                                                   timeout_s=self.timeout_s,
                                                   on_event=self._on_event, grace_s=self.grace_s)
        with self._guard:
            self._process = process
            if self._state.status == "starting":
                self._state.status = "running"
        if self._cancel.is_set():  # Cancel came while the process was being started
            process.cancel(self.grace_s)
        ending = process.wait()
        if self._handler_error is not None:
            raise self._handler_error
        return self._final_state(ending)

    def _kill_now(self) -> None:
        """Kill the worker's process group at once and wait for the worker (a dashboard bug)."""
        with self._guard:
            process = self._process
        if process is not None:
            process.kill()

    def _on_event(self, record: dict) -> None:
        """The launcher's handler: a failure here is a dashboard bug, which ends the run."""
        try:
            self._on_line(record)
        except Exception as error:
            self._handler_error = error
            raise

    def _on_line(self, record: dict) -> None:
        """One record the worker (or the launcher) printed, a JSON line."""
        with self._guard:
            s = self._state
            s.events += 1
            event = record.get("event")
            if event == "progress":
                s.phase = str(record.get("phase", ""))
                s.message = str(record.get("message", ""))
                try:
                    s.fraction = min(1.0, max(0.0, float(record.get("fraction", s.fraction))))
                except (TypeError, ValueError):
                    pass
            elif event == "done":
                s.fraction = 1.0
                s.phase = "done"
            elif event == "error":
                s.error = _error_fields(record)
            elif event == "launcher":
                s.message = str(record.get("message", ""))
                if record.get("kind") == "stopping":
                    s.status = "cancelling"

    def _final_state(self, ending: Ending) -> dict[str, Any]:
        """The job's final state from how the launcher says the worker ended."""
        state: dict[str, Any] = dict(status=ending.status, returncode=ending.returncode,
                                     stderr_tail=ending.stderr_tail, killed=ending.killed,
                                     message=ending.message)
        if ending.status == "done":
            state.update(fraction=1.0, message="finished")
        elif ending.status == "error" and ending.error is not None:
            state.update(error=_error_fields(ending.error),
                         message=str(ending.error.get("message") or ""))
        return state


def _error_fields(record: dict) -> dict[str, str | None]:
    """The error record's four fields, as text (None where missing)."""
    return {key: (None if record.get(key) is None else str(record.get(key))) for key in ERROR_FIELDS}


SIGNAL_MEANING = {
    "SIGKILL": "Something outside the dashboard killed it; most often the system's out-of-memory "
               "killer, when the machine runs short of host RAM.",
    "SIGSEGV": "It crashed inside native code (a segmentation fault), for example in the CUDA "
               "driver or in PyTorch.",
    "SIGABRT": "It aborted inside native code (for example a failed CUDA or PyTorch assertion).",
    "SIGBUS": "It crashed on a memory access (a bus error), often from a full /dev/shm or disk.",
    "SIGTERM": "Something outside the dashboard asked it to stop.",
}
SIGNAL_HINT = {
    "SIGKILL": "make the run smaller (batch, layer sizes, replays) or free memory on the machine, "
               "then run again",
}


@dataclass(frozen=True)
class Outcome:
    """How a finished job ended, in plain words, for the page (no Streamlit here).

    ``level`` picks the box (success, error, warning), ``title`` is one sentence, ``detail`` says
    what happened, ``hint`` what to change ("" when nothing to change), ``show_log`` whether the
    worker's last lines help.
    """

    level: str
    title: str
    detail: str = ""
    hint: str = ""
    show_log: bool = False


def _sentence(text: str) -> str:
    text = str(text or "").strip()
    return text if not text or text[-1] in ".!?" else text + "."


def describe_outcome(snap: JobSnapshot, field_label=lambda field: field) -> Outcome:
    """Plain words for how ``snap`` ended; ``field_label`` names a refused setting as the sidebar does."""
    name = snap.run_name
    if snap.status == "done":
        return Outcome("success", f"Run {name} finished and is open.")
    if snap.status == "error":
        error = snap.error or {}
        kind = str(error.get("kind") or "")
        message = _sentence(error.get("message") or snap.message)
        hint = _sentence(error.get("hint") or "")
        if kind in REFUSED_KINDS:
            field = error.get("field")
            where = f" ({field_label(field)})" if field else ""
            return Outcome("error", f"The run was refused{where}: nothing ran.", message, hint)
        title = ERROR_TITLES.get(kind) or (f"The run stopped with an error ({kind})" if kind
                                           else "The run stopped with an error")
        detail = " ".join(t for t in (message, ERROR_AFTERMATH.get(kind, "")) if t)
        return Outcome("error", f"{title}: run {name} stopped.", detail, hint,
                       show_log=kind not in ERROR_TITLES or kind == "CudaFaultError")
    if snap.status == "timeout":
        limit = f"{snap.timeout_s:g} s" if snap.timeout_s else "its time limit"
        detail = (f"It was still running after {limit}, the limit set under 'Stop a run after (s)' "
                  "in the sidebar, so the worker was stopped")
        detail += (": it did not stop when asked, so it was killed." if snap.killed else ".")
        return Outcome("warning", f"Run {name} was stopped after {limit}.", detail,
                       "Raise 'Stop a run after (s)' (0: no limit), or make the run shorter "
                       "(fewer replays, trials or profiled iterations).", show_log=snap.killed)
    if snap.status == "cancelled":
        if snap.started_at is None:
            return Outcome("warning", f"Run {name} was cancelled before it started.",
                           "It left the queue; nothing ran.")
        detail = "The worker was stopped" + (
            ": it did not stop when asked, so it was killed." if snap.killed else ".")
        return Outcome("warning", f"Run {name} was cancelled.", detail)
    # crashed: killed, a signal, or an exit the worker did not explain
    detail = ""
    hint = "Run it again; if it happens again, the worker's last lines below say where it stopped."
    code = snap.returncode
    if code is not None and code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = ""
        detail = SIGNAL_MEANING.get(signame, "")
        hint = _sentence(SIGNAL_HINT.get(signame, "")) or hint
    elif code is None:
        hint = ""
    detail = " ".join(t for t in (detail, "The server is unaffected and the device lock was "
                                          "released.") if t)
    return Outcome("error", f"Run {name} failed: {_sentence(snap.message)}", detail, hint,
                   show_log=True)
