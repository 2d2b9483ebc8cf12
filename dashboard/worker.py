"""A run in a separate worker process, so that a CUDA fault or a hang cannot take the server down.

Scope: start ``python -m profiler_core run ... --progress jsonl`` once the device's lock is ours,
follow its JSON-lines progress, stop it on Cancel or after a timeout, and say how it ended.

How a :class:`RunJob` runs (all on one daemon thread, never touching Streamlit):
1. wait for the device's :class:`~dashboard.gpulock.GpuLock` (first come, first served; a Cancel
   while waiting leaves the queue);
2. start the worker in its own process group, stdout a pipe, stderr a temporary file;
3. read stdout line by line: ``progress`` events update the snapshot, ``done``/``error`` are kept;
4. when the worker exits, kill whatever it left running in its process group (a child holding
   the pipe open would otherwise keep the job "running" and the lock held), then classify: done
   (exit 0), error (the worker said why in an error record whose kind is one of
   ``profiler_core.schema.ERROR_KINDS``: bad input, no CUDA, capture failure, out of memory, a
   sticky GPU fault...; with its message and hint), cancelled, timeout, or crashed (killed, or an
   exit it did not explain, with stderr's tail);
5. release the lock, whatever happened.
Cancel (and the timeout) send SIGTERM to the worker's process group, then SIGKILL after a grace
period. :func:`describe_outcome` says in plain words how a job ended and what to change. Workers
still running when the server process exits are stopped (``atexit``). The Streamlit page only
reads :meth:`RunJob.snapshot`. The worker always gets an argv list, never a shell string.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from dashboard.gpulock import GpuLock, Ticket
from profiler_core.cli import config_to_argv
from profiler_core.config import RunConfig
from profiler_core.schema import ERROR_KINDS

REPO_ROOT = Path(__file__).resolve().parent.parent
ACTIVE = ("queued", "starting", "running", "cancelling")
REFUSALS = ("ConfigError", "UsageError")  # error kinds that mean "this input was refused"
# The kind an exit code stands for when the worker died before writing its error record
# (the first kind listed for a code wins: exit 2 is a refused input).
KIND_OF_EXIT: dict[int, str] = {}
for _kind, _code in ERROR_KINDS.items():
    KIND_OF_EXIT.setdefault(_code, _kind)
# Plain words for every error kind of the schema (a test checks that none is missing).
ERROR_TITLES = {
    "UsageError": "The run was refused: a setting could not be read",
    "ConfigError": "The run was refused: a setting is out of range",
    "NoCudaError": "No CUDA GPU is available to the worker",
    "CaptureError": "The training step could not be captured into a CUDA graph",
    "GpuMemoryError": "Not enough GPU memory for this run",
    "CudaFaultError": "The GPU reported a fault",
    "RunFormatError": "The worker could not read or write a run folder",
    "Interrupted": "The run was interrupted",
}
# What follows from each kind, beyond the worker's own hint.
ERROR_AFTERMATH = {
    "CudaFaultError": "The fault ended the worker process only; the server and the GPU lock are "
                      "fine, and the next run starts in a fresh process.",
    "GpuMemoryError": "The worker released the GPU memory when it exited; the next run starts in a "
                      "fresh process.",
}
MAX_LINE_CHARS = 4000  # a non-JSON line from the worker is kept at most this long
_LIVE_JOBS: "weakref.WeakSet[RunJob]" = weakref.WeakSet()


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
        """Join the device's queue now (so runs start in the order Run was pressed) and go."""
        self._lock.enqueue(self._ticket)
        try:
            self._thread.start()
        except BaseException:
            self._lock.leave(self._ticket)  # never block the device with a job that never ran
            raise
        _LIVE_JOBS.add(self)
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
        popen_extra: dict[str, Any] = (
            {"start_new_session": True} if os.name == "posix"
            else {"creationflags": getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)})
        with tempfile.TemporaryFile(mode="w+b") as stderr_file:
            try:
                # An argv list, never a shell string: nothing typed in the browser is parsed by a shell.
                proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=stderr_file,
                                        stdin=subprocess.DEVNULL, cwd=self.cwd, env=self.env,
                                        text=True, encoding="utf-8", errors="replace", bufsize=1,
                                        shell=False, **popen_extra)
            except OSError as exc:
                return dict(status="crashed", message=f"the worker could not start: {exc}")
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
            reaper = threading.Thread(target=self._reap_leftovers, args=(proc,), daemon=True)
            reaper.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    self._on_line(line)
                reaper.join()  # the worker has exited and its leftovers are gone
                returncode = proc.wait()
            finally:
                if timer is not None:
                    timer.cancel()
                if proc.stdout is not None:
                    proc.stdout.close()
            stderr_file.seek(0, os.SEEK_END)
            size = stderr_file.tell()
            stderr_file.seek(max(0, size - 4000))
            tail = stderr_file.read().decode("utf-8", errors="replace")
        return self._outcome(returncode, tail)

    def _kill_now(self) -> None:
        """Kill the worker's process group at once and wait for the worker (a dashboard bug)."""
        with self._guard:
            proc = self._proc
        if proc is None or _has_exited(proc):
            return
        _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def _reap_leftovers(self, proc: subprocess.Popen) -> None:
        """Once the worker has exited, kill what it left in its process group.

        A leftover child that inherited stdout would keep the pipe open, so the job would stay
        "running" and hold the device's lock. ``waitid(WNOWAIT)`` waits without reaping, so the
        group's id cannot be reused by another process before it is signalled.
        """
        if os.name != "posix" or not hasattr(os, "waitid"):
            return
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except (ChildProcessError, OSError):
            return  # already reaped by proc.wait(): the pipe has closed, nothing to do
        try:
            os.killpg(proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def _on_line(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        if len(line) > MAX_LINE_CHARS and not line.startswith("{"):
            line = line[:MAX_LINE_CHARS] + " ..."
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
                s.error = {key: (None if record.get(key) is None else str(record.get(key)))
                           for key in ("kind", "field", "message", "hint")}

    def _on_timeout(self) -> None:
        self._timed_out.set()
        with self._guard:
            self._state.status = "cancelling"
            self._state.message = f"no result after {self.timeout_s:g} s: stopping the worker"
        self._stop_process()

    def _stop_process(self) -> None:
        with self._guard:
            proc = self._proc
        if proc is None or _has_exited(proc):
            return
        _signal_group(proc, signal.SIGTERM)

        def kill_later() -> None:
            deadline = time.monotonic() + self.grace_s
            while time.monotonic() < deadline:
                if _has_exited(proc):
                    return  # the reaper kills anything it left behind
                time.sleep(0.05)
            if not _has_exited(proc):
                self._set(killed=True)
                _signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))

        threading.Thread(target=kill_later, daemon=True).start()

    def _outcome(self, returncode: int, stderr_tail: str) -> dict[str, Any]:
        """How the worker ended, from its exit, its records and what the dashboard asked of it."""
        with self._guard:
            s = self._state
            error = dict(s.error) if s.error else None
            done_event = s.done_event
        ending: dict[str, Any] = dict(returncode=returncode, stderr_tail=stderr_tail)
        if returncode == 0 and done_event:  # it finished, even if a stop request came too late
            ending.update(status="done", fraction=1.0, message="finished")
        elif self._timed_out.is_set():
            ending.update(status="timeout", message=f"stopped after the {self.timeout_s:g} s time limit")
        elif self._cancel.is_set():
            ending.update(status="cancelled", message="cancelled")
        elif returncode == 0 and (self.out_dir / "summary.json").is_file():
            ending.update(status="done", fraction=1.0, message="finished")
        elif error is not None or returncode in KIND_OF_EXIT:
            if error is None:  # it exited with a known code but wrote no error record
                kind = KIND_OF_EXIT[returncode]
                error = {"kind": kind, "field": None,
                         "message": _last_line(stderr_tail) or ERROR_TITLES.get(kind, kind),
                         "hint": ""}
            ending.update(status="error", error=error, message=str(error.get("message") or ""))
        else:
            ending.update(status="crashed", message=describe_exit(returncode))
        return ending


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


def _has_exited(proc: subprocess.Popen) -> bool:
    """Whether the worker has exited, without reaping it (so its group id stays reserved)."""
    if proc.returncode is not None:
        return True
    if os.name != "posix" or not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def stop_all_jobs(grace_s: float = 2.0) -> None:
    """Stop every worker still running (the server is exiting): SIGTERM, then SIGKILL.

    A cancelled worker keeps what it measured, marked incomplete, so nothing is lost.
    """
    jobs = [job for job in list(_LIVE_JOBS) if not job._finished.is_set()]
    for job in jobs:
        job._cancel.set()
        job.grace_s = min(job.grace_s, grace_s)
        job._stop_process()
    deadline = time.monotonic() + grace_s + 1.0
    for job in jobs:
        job.wait(max(0.0, deadline - time.monotonic()))


atexit.register(stop_all_jobs)


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
        if kind in REFUSALS:
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


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.name == "posix":
            os.killpg(proc.pid, sig)  # the worker leads its own session (start_new_session)
        else:
            proc.terminate() if sig == signal.SIGTERM else proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass
