"""A run in a separate worker process, so that a CUDA fault or a hang cannot take the server down.

Scope: start ``python -m profiler_core run ... --progress jsonl`` once the device's lock is ours,
follow its JSON-lines progress, stop it on Cancel or after a timeout, and say how it ended.

How a :class:`RunJob` runs (all on one daemon thread, never touching Streamlit):
1. wait for the device's :class:`~dashboard.gpulock.GpuLock` (first come, first served; a Cancel
   while waiting leaves the queue);
2. start the worker in its own process group, stdout a pipe, stderr a temporary file;
3. read stdout line by line: ``progress`` events update the snapshot, ``done``/``error`` are kept;
4. when the worker exits, classify: done (exit 0), error (the worker said why: bad input, no CUDA,
   capture failure, out of memory...; with its message and hint), cancelled, timeout, or crashed
   (killed, or an exit it did not explain, with stderr's tail);
5. release the lock, whatever happened.
Cancel (and the timeout) send SIGTERM to the worker's process group, then SIGKILL after a grace
period. The Streamlit page only reads :meth:`RunJob.snapshot`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from dashboard.gpulock import GpuLock, Ticket
from profiler_core.cli import config_to_argv
from profiler_core.config import RunConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
ACTIVE = ("queued", "starting", "running", "cancelling")
# The worker's exit codes (profiler_core.__main__) other than 0 and a crash.
EXIT_MEANING = {2: "bad input", 3: "no CUDA device", 4: "the step could not be captured",
                5: "not enough GPU memory", 6: "a GPU fault", 130: "interrupted"}
REFUSALS = ("ConfigError", "UsageError")  # error kinds that mean "this input was refused"


def worker_argv(config: RunConfig, out_dir: Path, python: str = sys.executable) -> list[str]:
    """The worker's command line for ``config`` writing into ``out_dir``."""
    return [python, "-m", "profiler_core", "run", *config_to_argv(config), "--out", str(out_dir),
            "--progress", "jsonl"]


def worker_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: unbuffered, the repo importable, CUDA numbered like NVML."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    # The GPU selector lists NVML's indices (PCI bus order); make CUDA count the same way.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


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
    done_event: bool = False
    other_lines: list[str] = field(default_factory=list)


class RunJob:
    """One worker run; see the module docstring. ``argv`` is the full command line."""

    def __init__(self, argv: Sequence[str], out_dir: Path, device: str, lock: GpuLock,
                 session: str = "", run_name: str | None = None, timeout_s: float | None = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 grace_s: float = 5.0) -> None:
        self.argv = [str(a) for a in argv]
        self.out_dir = Path(out_dir)
        self.device = device
        self.job_id = uuid.uuid4().hex[:12]
        self.run_name = run_name or self.out_dir.name
        self.timeout_s = timeout_s
        self.env = env if env is not None else worker_env()
        self.cwd = Path(cwd) if cwd is not None else REPO_ROOT
        self.grace_s = grace_s
        self._lock = lock
        self._ticket = Ticket(self.job_id, self.run_name, session, time.time())
        self._state = _State()
        self._guard = threading.Lock()
        self._cancel = threading.Event()
        self._timed_out = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._thread = threading.Thread(target=self._main, name=f"run-{self.job_id}", daemon=True)
        self._finished = threading.Event()

    # -- control (called from the Streamlit script thread) --------------------------------------

    def start(self) -> "RunJob":
        self._thread.start()
        return self

    def cancel(self) -> None:
        """Stop the run: leave the queue if waiting, else terminate the worker (then kill it)."""
        if self._finished.is_set():
            return
        self._cancel.set()
        with self._guard:
            if self._state.status in ("running", "starting"):
                self._state.status = "cancelling"
                self._state.message = "stopping the worker"
        self._stop_process()

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
                events=s.events)

    # -- the job thread -------------------------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        with self._guard:
            for key, value in changes.items():
                setattr(self._state, key, value)

    def _main(self) -> None:
        try:
            if not self._lock.acquire(self._ticket, self._cancel):
                self._set(status="cancelled", message="cancelled while waiting for the device",
                          finished_at=time.time())
                return
            try:
                self._run_worker()
            finally:
                self._lock.release(self._ticket)
        except Exception as exc:  # never leave a job "running" because of a bug here
            self._set(status="crashed", message=f"the dashboard could not run the worker: {exc!r}",
                      finished_at=time.time())
        finally:
            self._finished.set()

    def _run_worker(self) -> None:
        if self._cancel.is_set():
            self._set(status="cancelled", message="cancelled before it started", finished_at=time.time())
            return
        self._set(status="starting", started_at=time.time(), message="starting the worker process")
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        popen_extra: dict[str, Any] = (
            {"start_new_session": True} if os.name == "posix"
            else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)})
        with tempfile.TemporaryFile(mode="w+b") as stderr_file:
            try:
                proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=stderr_file,
                                        stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env,
                                        text=True, encoding="utf-8", errors="replace", bufsize=1,
                                        **popen_extra)
            except OSError as exc:
                self._set(status="crashed", message=f"the worker could not start: {exc}",
                          finished_at=time.time())
                return
            with self._guard:
                self._proc = proc
                if self._state.status == "starting":
                    self._state.status = "running"
            if self._cancel.is_set():  # Cancel came while the process was being created
                self._stop_process()
            timer = None
            if self.timeout_s:
                timer = threading.Timer(self.timeout_s, self._on_timeout)
                timer.daemon = True
                timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    self._on_line(line)
                returncode = proc.wait()
            finally:
                if timer is not None:
                    timer.cancel()
            stderr_file.seek(0, os.SEEK_END)
            size = stderr_file.tell()
            stderr_file.seek(max(0, size - 4000))
            tail = stderr_file.read().decode("utf-8", errors="replace")
        self._finish(returncode, tail)

    def _on_line(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        with self._guard:
            s = self._state
            if not isinstance(record, dict) or "event" not in record:
                s.other_lines = (s.other_lines + [line])[-20:]
                return
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
                s.done_event = True
                s.fraction = 1.0
                s.phase = "done"
            elif event == "error":
                s.error = {key: record.get(key) for key in ("kind", "field", "message", "hint")}

    def _on_timeout(self) -> None:
        self._timed_out.set()
        with self._guard:
            self._state.status = "cancelling"
            self._state.message = f"no result after {self.timeout_s:g} s: stopping the worker"
        self._stop_process()

    def _stop_process(self) -> None:
        with self._guard:
            proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        _signal_group(proc, signal.SIGTERM)

        def kill_later() -> None:
            try:
                proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))

        threading.Thread(target=kill_later, daemon=True).start()

    def _finish(self, returncode: int, stderr_tail: str) -> None:
        with self._guard:
            s = self._state
            s.returncode = returncode
            s.finished_at = time.time()
            s.stderr_tail = stderr_tail
            if self._timed_out.is_set():
                s.status = "timeout"
                s.message = f"stopped after the {self.timeout_s:g} s time limit"
            elif self._cancel.is_set():
                s.status = "cancelled"
                s.message = "cancelled"
            elif returncode == 0 and (s.done_event or (self.out_dir / "summary.json").is_file()):
                s.status = "done"
                s.fraction = 1.0
                s.message = "finished"
            elif s.error is not None or returncode in EXIT_MEANING:
                s.status = "error"
                if s.error is None:
                    s.error = {"kind": EXIT_MEANING.get(returncode, "error"), "field": None,
                               "message": _last_line(stderr_tail) or EXIT_MEANING[returncode],
                               "hint": ""}
                s.message = str(s.error.get("message") or "")
            else:
                s.status = "crashed"
                s.message = describe_exit(returncode)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def describe_exit(returncode: int) -> str:
    """Plain words for how a worker ended that neither finished nor reported an error."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker was killed by {name}"
    if returncode == 0:
        return "the worker exited without writing a run"
    return f"the worker crashed (exit code {returncode})"


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)  # the worker leads its own session (start_new_session)
        else:
            proc.terminate() if sig == signal.SIGTERM else proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass
