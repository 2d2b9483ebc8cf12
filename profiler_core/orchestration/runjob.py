"""One run in a worker process as a background job: what the dashboard's Run button starts.

Scope: :class:`RunJob` runs one config (or a stand-in command line) as a
:class:`~profiler_core.orchestration.jobs.BackgroundJob`, which queues on the device's lock (a
data-parallel run: the lock of every GPU its ranks use, :func:`run_devices`), runs it on a daemon
thread and releases the locks whatever happens. Its work: start the run through a
:class:`~profiler_core.orchestration.launcher.Launcher` (the caller's warm one, so a warm worker may
serve it; or a private launcher of fresh processes), follow its records (``spec.events``:
progress, the phase and the bar; done or error; the launcher's notes, stopping or fallback) into
one :class:`RunSnapshot`, the state the page reads, and make the launcher's
:class:`~profiler_core.orchestration.launcher.Ending` its final state: done, error (the worker's
error record, kinds from ``profiler_core.spec.errors.ERROR_KINDS``), cancelled, timeout or crashed.
Cancel and the time limit stop the worker's whole process group (SIGTERM, then SIGKILL after the
grace period). The launcher is handed a ``RunConfig``, never a command line. No UI here: the
dashboard says in words how a run ended (``dashboard/worker.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from profiler_core.orchestration.command import REPO_ROOT, run_env
from profiler_core.orchestration.gpulock import GpuLock
from profiler_core.orchestration.jobs import BackgroundJob
from profiler_core.orchestration.launcher import Ending, Launcher, RunProcess
from profiler_core.spec.config import RunConfig
from profiler_core.spec.events import DoneEvent, ErrorEvent, LauncherNote, ProgressEvent, RunEvent

ACTIVE = ("queued", "starting", "running", "cancelling")


def run_devices(config: RunConfig) -> tuple[str, ...]:
    """The devices a run of ``config`` uses, whose locks it holds: its device; for a
    data-parallel run on CUDA, every GPU its ranks take (rank LOCAL_RANK on ``cuda:LOCAL_RANK``,
    ``engine.ddp_step``), whatever ``config.device`` names."""
    if config.nproc_per_node is not None and config.is_cuda:
        return tuple(f"cuda:{local_rank}" for local_rank in range(config.nproc_per_node))
    return (config.device,)


@dataclass(frozen=True)
class RunSnapshot:
    """What a run is doing now, or how it ended: the one state the job keeps, publishes while it
    runs and returns at its end, and the page reads. ``status`` is one of ACTIVE or
    done/error/cancelled/timeout/crashed; ``devices``: every device whose lock the run takes, in
    the order it takes them; ``error`` the worker's error record; ``events`` how many records it
    heard; ``killed``: it ignored SIGTERM and was killed with SIGKILL after the grace period."""

    job_id: str
    run_name: str
    device: str
    devices: tuple[str, ...]
    out_dir: str
    status: str
    phase: str = ""
    fraction: float = 0.0
    message: str = ""
    error: ErrorEvent | None = None
    returncode: int | None = None
    requested_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    stderr_tail: str = ""
    events: int = 0
    killed: bool = False
    timeout_s: float | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def ok(self) -> bool:
        return self.status == "done"

    @property
    def error_line(self) -> str:
        """Why it could not go on ("" once done)."""
        return "" if self.status == "done" else self.message


class RunJob:
    """One worker run; see the module docstring. ``work`` is the config to run (``launcher`` may
    serve it on a warm worker), or a command line run as it is in a fresh process (tests' stand-ins
    for the worker). Without ``launcher``, a private one starts fresh processes with ``env`` and
    ``cwd``. ``lock``: the device's lock, or the lock of every device the run uses
    (:func:`run_devices`). The job's control is :meth:`start`, :meth:`cancel`, :meth:`wait` and
    :meth:`snapshot`; :meth:`run` and :meth:`stop` are the work its background job calls."""

    on_progress: Callable[[Any], None]  # set by the background job

    def __init__(self, work: RunConfig | Sequence[str], out_dir: Path, device: str,
                 lock: GpuLock | Sequence[GpuLock],
                 session: str = "", run_name: str | None = None, timeout_s: float | None = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 grace_s: float = 5.0, launcher: Launcher | None = None) -> None:
        self.work = work if isinstance(work, RunConfig) else [str(a) for a in work]
        self.out_dir = Path(out_dir)
        self.device = device
        self.run_name = run_name or self.out_dir.name
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self._launcher = launcher or Launcher(
            warm=False, env=env if env is not None else run_env(),
            cwd=Path(cwd) if cwd is not None else REPO_ROOT, grace_s=grace_s)
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._process: RunProcess | None = None
        self._handler_error: BaseException | None = None
        self._job = BackgroundJob(self, self.run_name, lock, session)
        self.job_id = self._job.job_id
        self._state = RunSnapshot(
            job_id=self.job_id, run_name=self.run_name, device=self.device,
            devices=self._job.devices, out_dir=str(self.out_dir), status="queued",
            requested_at=self._job.requested_at, timeout_s=self.timeout_s)

    # -- control (called from the page's thread) -----------------------------------------------

    def start(self) -> RunJob:
        """Join every device's queue now (so runs start in the order Run was pressed) and go."""
        self._job.start()
        return self

    def cancel(self) -> None:
        """Stop the run: leave every queue if waiting, else stop the worker (then kill it)."""
        self._job.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job has finished (tests); True if it did."""
        return self._job.wait(timeout)

    def snapshot(self) -> RunSnapshot:
        """The run's last state, with the job's status and times (the device's queue, the job's
        own failure)."""
        job = self._job.snapshot()
        run: RunSnapshot = job["outcome"] or job["progress"] or self._state
        status, message = job["status"], run.message
        if status in ("running", "stopping"):
            status = run.status  # queued until the worker starts, then starting, running, cancelling
        elif status == "error" and job["outcome"] is None:  # the job's failure, not the worker's
            status, message = "crashed", f"the dashboard could not run the worker: {job['error']}"
        return replace(run, status=status, message=message, started_at=job["started_at"],
                       finished_at=job["finished_at"])

    # -- the work (on the job's thread) ---------------------------------------------------------

    def stop(self) -> None:
        """Stop the worker if it runs (its group: SIGTERM, then SIGKILL after the grace period)."""
        self._stop.set()
        with self._guard:
            if self._state.status in ("running", "starting"):
                self._publish(status="cancelling", message="stopping the worker")
            process = self._process
        if process is not None:
            process.cancel(self.grace_s)

    def run(self) -> RunSnapshot:
        """Run the worker to its end; a failure here (a bug) kills it before the device is freed."""
        try:
            ending = self._run_worker()
        except Exception as exc:
            self._kill_now()  # never free the device with a worker still on it
            ending = dict(status="crashed",
                          message=f"the dashboard could not run the worker: {exc!r}")
        with self._guard:  # the job publishes it once the device is free
            self._state = replace(self._state, **ending)
            return self._state

    def _publish(self, **changes: Any) -> None:
        """Change the state (holding ``_guard``) and report it to the job."""
        self._state = replace(self._state, **changes)
        self.on_progress(self._state)

    def _set(self, **changes: Any) -> None:
        with self._guard:
            self._publish(**changes)

    def _run_worker(self) -> dict[str, Any]:
        """Run the worker to its end; returns the final state."""
        if self._stop.is_set():
            return dict(status="cancelled", message="cancelled before it started")
        self._set(status="starting", message="starting the worker process")
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
                self._publish(status="running")
        if self._stop.is_set():  # Cancel came while the process was being started
            self.stop()
        ending = process.wait()
        if self._handler_error is not None:
            raise self._handler_error
        assert ending is not None  # wait() without a timeout returns the ending
        return _final_state(ending)

    def _kill_now(self) -> None:
        """Kill the worker's process group at once and wait for the worker (a bug here)."""
        with self._guard:
            process = self._process
        if process is not None:
            process.kill()

    def _on_event(self, event: RunEvent) -> None:
        """The launcher's handler: a failure here is a bug, which ends the run."""
        try:
            self._on_line(event)
        except Exception as error:
            self._handler_error = error
            raise

    def _on_line(self, event: RunEvent) -> None:
        """One record the worker printed (or the launcher's note) into the state."""
        with self._guard:
            changes: dict[str, Any] = {"events": self._state.events + 1}
            if isinstance(event, ProgressEvent):
                changes.update(phase=event.phase, message=event.message, fraction=event.fraction)
            elif isinstance(event, DoneEvent):
                changes.update(fraction=1.0, phase="done")
            elif isinstance(event, ErrorEvent):
                changes["error"] = event
            elif isinstance(event, LauncherNote):
                changes["message"] = event.message
                if event.kind == "stopping":
                    changes["status"] = "cancelling"
            self._publish(**changes)


def _final_state(ending: Ending) -> dict[str, Any]:
    """The run's final state from how the launcher says the worker ended."""
    state: dict[str, Any] = dict(status=ending.status, returncode=ending.returncode,
                                 stderr_tail=ending.stderr_tail, killed=ending.killed,
                                 message=ending.message)
    if ending.status == "done":
        state.update(fraction=1.0, message="finished")
    elif ending.status == "error" and ending.error is not None:
        state.update(error=ending.error, message=ending.error.message)
    return state
