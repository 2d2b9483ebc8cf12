"""Runs in processes of their own: start, follow, stop, and say how each ended.

Scope: starting ``python -m profiler_core run ... --progress jsonl`` (or handing the same command
line to a warm worker, ``python -m profiler_core serve``) in its own process group, reading its
JSON-lines records on a thread, stopping it (Cancel, a time limit) by signalling the whole group,
killing whatever it left in its group once it exits, and classifying the ending. No UI here: the
dashboard adds its device lock and its wording on top (``dashboard/worker.py``), the CLI and
sweeps use it as is.

A run's process:
1. starts in a new session (its own process group), stdout a pipe read line by line on the
   launcher's reader thread, stderr a temporary file (its tail is kept);
2. every JSON record it prints goes to ``on_event`` (``progress``, ``done``, ``error``); the
   launcher adds its own records, ``{"event": "launcher", "kind": "stopping"|"fallback", "message"}``,
   when it stops a run at its time limit or falls back from a warm worker to a fresh process;
3. once it exits, anything left in its process group is killed (a child holding the pipe would
   otherwise keep it "running"), then the ending is classified (:class:`Ending`): ``done`` (exit 0
   and a ``done`` record, or exit 0 with a run written), ``timeout``, ``cancelled``, ``error`` (an
   error record, or an exit code that stands for one of ``errors.ERROR_KINDS``), or ``crashed``
   (a signal, an exit it did not explain, a process that could not start, or a bug in
   ``on_event``: the process is then killed at once).
Stopping sends SIGTERM to the group (the run keeps what it measured, marked incomplete), then
SIGKILL after a grace period. Runs still going when the interpreter exits are stopped (atexit).
Runs and spares also end when the launcher's process dies without stopping them (SIGKILL, a
crash): each child watches it (``profiler_core.orchestration.parent``: Linux's parent-death signal, and a pipe
whose write end only the launcher holds). Every child is forked from one thread that lives as long
as the process (``_SPAWNER``), because Linux sends that signal when the forking *thread* ends, and
the launcher's callers and reader threads come and go.

Warm workers (``Launcher(warm=True)``): a spare ``serve`` process has imported torch and the
engine, brought the CUDA context up on the device of the last run and run a tiny training step
(cuBLAS handle, kernels loaded), then waits for one run request on its stdin. A ``run`` command
for this launcher's interpreter on the spare's device is handed to it; it runs exactly the code
path of a fresh ``run`` process (same records, outputs and exit codes) and exits: a worker never
serves twice, because a failed capture leaves a process unusable. Spares are started only for
devices that ``run`` commands asked for, never before the first one.

The timing rule: a spare is started only while no run of this launcher is in or before its
timed phases, that is once every active run has reported a phase after its timed trials
(``profiling <mode>``, ``parity`` or ``done``) or has ended; a spare still starting up when another
run begins is stopped (it is started again under the same rule). So no spare ever imports torch
or initialises CUDA while a run of this launcher is being timed.

A spare that died while waiting, or that does not take the request in time (hung), is killed and
the run starts in a fresh process instead; a ``launcher``/``fallback`` record says so.

A pool (``spares=N``, for sweeps): N spares are started together under the same rule, and the pool
is refilled only once all of them have been used, so a sweep pays one warm-up for N points. A run
handed to the pool while some of its spares are still warming up is sent only once they are all
ready, so the rule holds for every spare.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from profiler_core.cli import parser as cli
from profiler_core.orchestration import parent
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ERROR_KINDS

REPO_ROOT = Path(__file__).resolve().parents[2]
# The kind an exit code stands for when a run died before writing its error record (the first
# kind listed for a code wins: exit 2 is a refused input).
KIND_OF_EXIT: dict[int, str] = {}
for _kind, _code in ERROR_KINDS.items():
    KIND_OF_EXIT.setdefault(_code, _kind)
STATUSES = ("done", "error", "cancelled", "timeout", "crashed")
STDERR_TAIL_BYTES = 4000
DEFAULT_GRACE_S = 5.0  # SIGTERM, then SIGKILL this long after
# A spare that has not said it is ready this long after it started is taken for hung.
SPARE_READY_TIMEOUT_S = 300.0
# A ready spare that has not taken a request this long after it was sent is taken for hung.
HANDOVER_TIMEOUT_S = 10.0
# A ready spare that no run has taken this long is stopped (it holds a few hundred MB of host
# memory, and a CUDA context on its GPU); the next run starts in a fresh process and a spare is
# started again after it. README, "Fast repeated runs", states it.
IDLE_TIMEOUT_S = 600.0
# Phases a run reports once its timed trials are over (see the module docstring).
AFTER_TIMED_PHASES = ("parity", "done")
AFTER_TIMED_PREFIXES = ("profiling ",)

EventHandler = Callable[[dict], None]


def left_timed_phases(phase: str) -> bool:
    """Whether a run reporting ``phase`` is past its timed trials (a spare may start now)."""
    return phase in AFTER_TIMED_PHASES or phase.startswith(AFTER_TIMED_PREFIXES)


def run_argv(config: RunConfig, out_dir: Path | str, *, python: str = sys.executable,
             overwrite: bool = False) -> list[str]:
    """The command line of one run of ``config`` writing into ``out_dir``, JSON-lines progress.
    ``--timeout 0``: the run sets itself no time limit, its launcher's caller does (``timeout_s``)."""
    return [python, "-m", "profiler_core", "run", *cli.config_to_argv(config), "--timeout", "0",
            "--out", str(out_dir), "--progress", "jsonl", *(["--overwrite"] if overwrite else [])]


def run_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A run's environment: unbuffered, this package importable, CUDA numbered like NVML."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    # NVML (and the dashboard's GPU selector) count GPUs in PCI bus order; make CUDA do the same.
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def describe_exit(returncode: int) -> str:
    """Plain words for how a run process ended that neither finished nor reported an error."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"the worker was killed by {name}"
    if returncode == 0:
        return "the worker exited without writing a run"
    return f"the worker crashed (exit code {returncode})"


@dataclass(frozen=True)
class Ending:
    """How a run process ended.

    ``status`` is one of :data:`STATUSES`; ``error`` the run's error record when ``status`` is
    "error" (made up from the exit code, with ``stderr``'s last line as message, when the run died
    before writing one); ``killed``: it ignored SIGTERM and was SIGKILLed after the grace period;
    ``message``: one line saying how it ended; ``warm``: a warm worker served it.
    """

    status: str
    returncode: int | None
    error: dict | None
    stderr_tail: str
    killed: bool
    message: str = ""
    warm: bool = False


class _Spawner:
    """Starts every child process from one daemon thread that lives as long as this process.

    Linux's parent-death signal, which each child asks for (``profiler_core.orchestration.parent``), is sent when
    the *thread* that forked the child ends, not the process: a child forked from a caller's
    thread, or from the reader thread that restarts a run, would be killed when that thread ends.
    """

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        if hasattr(os, "register_at_fork"):  # a forked copy of this process has no such thread
            os.register_at_fork(after_in_child=self._forget_thread)

    def popen(self, *args: Any, **kwargs: Any) -> subprocess.Popen:
        """``subprocess.Popen(*args, **kwargs)`` run on the spawning thread; its errors raised here."""
        if threading.current_thread() is self._thread:
            return subprocess.Popen(*args, **kwargs)
        try:
            self._ensure_thread()
        except RuntimeError:  # no new thread at interpreter shutdown: fork from this one
            return subprocess.Popen(*args, **kwargs)
        done = threading.Event()
        box: dict[str, Any] = {}
        self._requests.put((args, kwargs, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["process"]

    def _ensure_thread(self) -> None:
        with self._guard:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, daemon=True,
                                                name="launcher-spawner")
                self._thread.start()

    def _forget_thread(self) -> None:
        self._thread = None
        self._guard = threading.Lock()
        self._requests = queue.SimpleQueue()

    def _serve(self) -> None:
        while True:
            args, kwargs, box, done = self._requests.get()
            try:
                box["process"] = subprocess.Popen(*args, **kwargs)
            except BaseException as error:  # handed to the caller, which raises it
                box["error"] = error
            finally:
                done.set()


_SPAWNER = _Spawner()


class _Child:
    """One process in a session of its own: stdout read on a thread, stderr into a temporary
    file, its group killed once it exits. ``{"event": "worker"}`` records (a warm worker's
    handshake) are kept here; every other line goes to the listener."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None,
                 listener: RunProcess | None, stdin_pipe: bool = False) -> None:
        self.ready = threading.Event()  # a warm worker is warmed up and waits for a request
        self.accepted = threading.Event()  # a warm worker took the request
        self.exited = threading.Event()  # exited, leftovers killed, stdout drained
        self.returncode: int | None = None
        self.hung = False  # a warm worker that did not take its run in time (then killed)
        self.started_at = time.monotonic()
        self.ready_at: float | None = None  # when a warm worker said it was ready (monotonic)
        self._listener = listener
        self._guard = threading.Lock()
        self._stderr: IO[bytes] = tempfile.TemporaryFile(mode="w+b")
        self._stderr_from = 0
        env = dict(env)
        # The pipe the child watches for this process's death: only this process holds its write
        # end (non-inheritable), closed once the child has exited.
        self._parent_pipe: int | None = None
        popen_extra: dict[str, Any] = {"creationflags": getattr(subprocess,
                                                                "CREATE_NEW_PROCESS_GROUP", 0)}
        read_end = None
        if os.name == "posix":
            read_end, self._parent_pipe = os.pipe()
            env = parent.child_environment(env, read_end)
            popen_extra = {"start_new_session": True, "pass_fds": (read_end,)}
        try:
            # An argv list, never a shell string: nothing a user typed is parsed by a shell.
            self.proc = _SPAWNER.popen(
                [str(a) for a in argv], stdout=subprocess.PIPE, stderr=self._stderr,
                stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL, cwd=cwd,
                env=env, text=True, encoding="utf-8", errors="replace", bufsize=1,
                shell=False, **popen_extra)
        except BaseException:
            self._stderr.close()
            self._close_parent_pipe()
            raise
        finally:
            if read_end is not None:
                os.close(read_end)  # the child's copy is its own
        self.pid = self.proc.pid
        self._reaper = threading.Thread(target=self._reap_leftovers, daemon=True,
                                        name=f"reap-{self.pid}")
        self._reaper.start()
        threading.Thread(target=self._read, daemon=True, name=f"read-{self.pid}").start()

    def attach(self, listener: RunProcess) -> None:
        """From now on, lines and the exit go to ``listener``; stderr's tail starts here."""
        with self._guard:
            self._listener = listener
            self._stderr_from = self._stderr.tell()

    def send(self, line: str) -> bool:
        """Write one line to stdin and close it; False if the process no longer reads."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.close()
            return True
        except (OSError, ValueError):
            return False

    def has_exited(self) -> bool:
        """Whether the process has exited, without reaping it (its group id stays reserved)."""
        proc = self.proc
        if proc.returncode is not None:
            return True
        if os.name != "posix" or not hasattr(os, "waitid"):
            return proc.poll() is not None
        try:
            return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def signal_group(self, sig: int) -> None:
        try:
            if os.name == "posix":
                os.killpg(self.proc.pid, sig)  # it leads its own session
            else:
                self.proc.terminate() if sig == signal.SIGTERM else self.proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def kill_now(self, wait_s: float = 5.0) -> None:
        """SIGKILL the group and wait for the process (a bug on our side: never leave it running)."""
        if self.has_exited():
            return
        self.signal_group(getattr(signal, "SIGKILL", signal.SIGTERM))
        try:
            self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, grace_s: float, on_killed: Callable[[], None] = lambda: None) -> None:
        """SIGTERM to the group now, SIGKILL after ``grace_s`` if it has not exited."""
        if self.has_exited():
            return
        self.signal_group(signal.SIGTERM)

        def kill_later() -> None:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.has_exited():
                    return  # the reaper kills anything it left behind
                time.sleep(0.05)
            if not self.has_exited():
                on_killed()
                self.signal_group(getattr(signal, "SIGKILL", signal.SIGTERM))

        threading.Thread(target=kill_later, daemon=True, name=f"stop-{self.pid}").start()

    def stderr_tail(self) -> str:
        with self._guard:
            start = self._stderr_from
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(start, size - STDERR_TAIL_BYTES))
        return self._stderr.read().decode("utf-8", errors="replace")

    def _reap_leftovers(self) -> None:
        """Once the process has exited, kill what it left in its group. ``waitid(WNOWAIT)``
        waits without reaping, so the group's id cannot be reused before it is signalled."""
        if os.name != "posix" or not hasattr(os, "waitid"):
            return
        try:
            os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        except (ChildProcessError, OSError):
            return  # already reaped: the pipe has closed, nothing to do
        try:
            os.killpg(self.proc.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except (ProcessLookupError, PermissionError, OSError):
            pass

    def _read(self) -> None:
        try:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if not self._handshake(line):
                    with self._guard:
                        listener = self._listener
                    if listener is not None:
                        listener._on_line(self, line)
            self._reaper.join()  # the process has exited and its leftovers are gone
            self.returncode = self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._close_parent_pipe()
            self.exited.set()
            with self._guard:
                listener = self._listener
            if listener is not None:
                listener._on_exit(self)

    def _close_parent_pipe(self) -> None:
        with self._guard:
            fd, self._parent_pipe = self._parent_pipe, None
        if fd is not None:
            os.close(fd)

    def _handshake(self, line: str) -> bool:
        if '"worker"' not in line:
            return False
        try:
            record = json.loads(line)
        except ValueError:
            return False
        if not isinstance(record, dict) or record.get("event") != "worker":
            return False
        state = record.get("state")
        if state == "ready":
            self.ready_at = time.monotonic()
            self.ready.set()
        elif state == "accepted":
            self.accepted.set()
        return True


class RunProcess:
    """One run of ``python -m profiler_core run ... --progress jsonl`` (or a warm worker serving
    one run) in its own process group. ``on_event`` gets every JSON record the run prints
    (``{"event": "progress", "phase", "done", "total", "fraction", "message"}``,
    ``{"event": "done", ...}``, ``{"event": "error", ...}``) on the launcher's reader thread, and
    the launcher's own ``{"event": "launcher", ...}`` records; calls never overlap."""

    def __init__(self, *, out_dir: Path | None, on_event: EventHandler | None,
                 timeout_s: float | None, grace_s: float, on_phase: Callable[[RunProcess], None],
                 restart: Callable[[RunProcess], None] | None = None) -> None:
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.phase = ""  # the last progress phase reported
        self._on_event = on_event
        self._on_phase = on_phase  # the launcher's hook: phase changes and the end
        self._restart = restart  # starts a fresh process when a warm worker failed to serve
        self._guard = threading.Lock()
        self._deliver = threading.Lock()  # on_event calls never overlap
        self._child: _Child | None = None
        self._exit_seen: _Child | None = None
        self._warm = False
        self._ended = threading.Event()
        self._ending: Ending | None = None
        self._cancelled = False
        self._timed_out = False
        self._killed = False
        self._done_record = False
        self._error: dict | None = None
        self._handler_failed: BaseException | None = None
        self._timer: threading.Timer | None = None
        if timeout_s:
            self._timer = threading.Timer(timeout_s, self._on_timeout)
            self._timer.daemon = True
            self._timer.start()

    # -- the contract ----------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The process running it now (None when none could be started)."""
        with self._guard:
            return self._child.pid if self._child is not None else None

    @property
    def warm(self) -> bool:
        """Whether a warm worker is serving it."""
        with self._guard:
            return self._warm

    def cancel(self, grace_s: float | None = None) -> None:
        """Stop the run: SIGTERM to its group, SIGKILL after the grace period."""
        with self._guard:
            if self._ended.is_set():
                return
            self._cancelled = True
            child = self._child
        if child is not None:
            child.stop(self.grace_s if grace_s is None else grace_s, self._mark_killed)

    def wait(self, timeout: float | None = None) -> Ending | None:
        """The ending, once the process has exited and its group is gone; None while running."""
        if not self._ended.wait(timeout):
            return None
        return self._ending

    def kill(self) -> None:
        """SIGKILL the group at once and wait for the process (for a caller's own failure)."""
        with self._guard:
            self._cancelled = True
            child = self._child
        if child is not None:
            child.kill_now()

    # -- the launcher's side ---------------------------------------------------------------------

    def _attach(self, child: _Child, warm: bool) -> None:
        with self._guard:
            self._child, self._warm = child, warm
            stop = self._cancelled or self._timed_out
        child.attach(self)
        if stop:  # cancelled or timed out while the process was being started
            child.stop(self.grace_s, self._mark_killed)
        if child.exited.is_set():
            self._on_exit(child)  # exited before it was attached (a dead spare)

    def _fail_to_start(self, error: Exception) -> None:
        self._finish(Ending("crashed", None, None, "", False,
                            f"the worker could not start: {error}"))

    def _emit(self, record: dict) -> None:
        with self._deliver:
            if self._on_event is None or self._handler_failed is not None:
                return
            try:
                self._on_event(record)
            except BaseException as error:  # a bug in the handler: the run cannot be followed
                self._handler_failed = error
                with self._guard:
                    child = self._child
                if child is not None:
                    threading.Thread(target=child.kill_now, daemon=True).start()

    def _on_line(self, child: _Child, line: str) -> None:
        line = line.strip()
        if not line or (self._warm and not child.accepted.is_set()):
            return  # a warm worker's lines before it took the run are not the run's
        try:
            record = json.loads(line) if line.startswith("{") else None
        except ValueError:
            record = None
        if not isinstance(record, dict) or "event" not in record:
            return  # not a record (a stray print): stderr's tail is what explains a failure
        event = record.get("event")
        if event == "progress":
            self.phase = str(record.get("phase", ""))
        elif event == "done":
            self._done_record = True
        elif event == "error":
            self._error = dict(record)
        self._emit(record)
        if event == "progress" or event == "done":
            self._on_phase(self)

    def _on_exit(self, child: _Child) -> None:
        """``child`` exited (called once per child: by its reader, or on attaching a dead one)."""
        with self._guard:
            if child is not self._child or child is self._exit_seen or self._ended.is_set():
                return
            self._exit_seen = child
            warm_not_taken = self._warm and not child.accepted.is_set()
            stopping = self._cancelled or self._timed_out
        if warm_not_taken and not stopping and self._restart is not None:
            how = ("did not take the run in time and was stopped" if child.hung
                   else f"exited (code {child.returncode}) before taking the run")
            self._emit({"event": "launcher", "kind": "fallback",
                        "message": f"the warm worker {how}; the run starts in a fresh process"})
            self._restart(self)
            return
        self._finish(self._classify(child))

    def _classify(self, child: _Child) -> Ending:
        code = child.returncode
        tail = child.stderr_tail()
        with self._guard:
            killed, warm = self._killed, self._warm
        common = dict(returncode=code, stderr_tail=tail, killed=killed, warm=warm)
        if self._handler_failed is not None:
            return Ending("crashed", error=None, message=f"the event handler failed: "
                          f"{self._handler_failed!r}", **common)
        written = self.out_dir is not None and (self.out_dir / "summary.json").is_file()
        if code == 0 and self._done_record:  # it finished, even if a stop request came too late
            return Ending("done", error=None, message="finished", **common)
        if self._timed_out:
            return Ending("timeout", error=None,
                          message=f"stopped after the {self.timeout_s:g} s time limit", **common)
        if self._cancelled:
            return Ending("cancelled", error=None, message="cancelled", **common)
        if code == 0 and written:
            return Ending("done", error=None, message="finished", **common)
        error = self._error
        if error is None and code in KIND_OF_EXIT:  # a known exit code but no error record
            kind = KIND_OF_EXIT[code]
            error = {"event": "error", "kind": kind, "field": None,
                     "message": _last_line(tail) or f"the worker exited with code {code} ({kind}) "
                                                    "without an error record", "hint": ""}
        if error is not None:
            return Ending("error", error=error, message=str(error.get("message") or ""), **common)
        return Ending("crashed", error=None, message=describe_exit(code), **common)

    def _finish(self, ending: Ending) -> None:
        with self._guard:
            if self._ended.is_set():
                return
            self._ending = ending
            if self._timer is not None:
                self._timer.cancel()
        self._ended.set()
        self._on_phase(self)

    def _mark_killed(self) -> None:
        with self._guard:
            self._killed = True

    def _on_timeout(self) -> None:
        with self._guard:
            if self._ended.is_set():
                return
            self._timed_out = True
            child = self._child
        self._emit({"event": "launcher", "kind": "stopping",
                    "message": f"no result after {self.timeout_s:g} s: stopping the worker"})
        if child is not None:
            child.stop(self.grace_s, self._mark_killed)

    @property
    def _active(self) -> bool:
        return not self._ended.is_set()

    @property
    def _in_or_before_timed_phases(self) -> bool:
        return self._active and not left_timed_phases(self.phase)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


_LIVE: weakref.WeakSet[RunProcess] = weakref.WeakSet()


class _SparePool:
    """A launcher's spare workers and their device; stopped with the launcher, when it is garbage
    collected, or when the interpreter exits (``weakref.finalize``)."""

    def __init__(self) -> None:
        self.children: list[_Child] = []
        self.device: str | None = None

    def live(self) -> list[_Child]:
        self.children = [child for child in self.children if not child.has_exited()]
        return self.children

    def stop(self, grace_s: float = 2.0) -> None:
        children, self.children = self.children, []
        for child in children:
            child.stop(grace_s)


class Launcher:
    """Starts runs in processes of their own; with ``warm=True`` keeps ``spares`` warm workers
    (see the module docstring for when they are started, used and replaced). ``cwd``: the runs'
    working folder (default: this process's); ``grace_s``: SIGTERM to SIGKILL;
    ``handover_timeout_s``: how long a ready spare may take to accept a run; ``idle_timeout_s``:
    how long a ready spare waits for a run before it is stopped (None or 0: as long as the
    launcher lives)."""

    def __init__(self, *, warm: bool = True, python: str = sys.executable,
                 env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
                 grace_s: float = DEFAULT_GRACE_S,
                 handover_timeout_s: float = HANDOVER_TIMEOUT_S, spares: int = 1,
                 idle_timeout_s: float | None = IDLE_TIMEOUT_S) -> None:
        if spares < 1:
            raise ValueError("spares must be at least 1")
        self.idle_timeout_s = idle_timeout_s
        self.idle_stopped = 0  # spares stopped because no run took them in idle_timeout_s
        self._idle_timer: threading.Timer | None = None
        self.warm = warm
        self.spares = spares
        self.handover_timeout_s = handover_timeout_s
        self.python = python
        self.env = dict(env) if env is not None else run_env()
        self.cwd = Path(cwd) if cwd is not None else None
        self.grace_s = grace_s
        self._guard = threading.RLock()
        self._runs: list[RunProcess] = []
        self._pool = _SparePool()
        weakref.finalize(self, self._pool.stop)
        self._wanted_device: str | None = None  # the device of the last run a worker could serve
        self._closed = False

    def start(self, config: RunConfig, out_dir: Path, *, overwrite: bool = False,
              timeout_s: float | None = None,
              on_event: EventHandler | None = None) -> RunProcess:
        """Run ``config`` into ``out_dir``; on a warm spare for its device if one is there."""
        return self.start_argv(run_argv(config, out_dir, python=self.python, overwrite=overwrite),
                               out_dir, timeout_s=timeout_s, on_event=on_event)

    def start_argv(self, argv: Sequence[str], out_dir: Path | None = None, *,
                   timeout_s: float | None = None, on_event: EventHandler | None = None,
                   grace_s: float | None = None) -> RunProcess:
        """Run any command line the same way (tests pass a stand-in). A ``run`` command of this
        launcher's interpreter may be served by a warm worker; anything else gets a fresh process.
        ``grace_s`` overrides the launcher's grace period for this run."""
        argv = [str(a) for a in argv]
        device = self._servable_device(argv)
        with self._guard:
            if self._closed:
                raise RuntimeError("this launcher was closed")
            run = RunProcess(out_dir=out_dir, on_event=on_event, timeout_s=timeout_s,
                             grace_s=self.grace_s if grace_s is None else grace_s,
                             on_phase=self._on_run_phase,
                             restart=lambda r: self._start_fresh(r, argv))
            spare = self._take_spare(device)
            if device is not None and self.warm:
                self._wanted_device = device
            self._runs.append(run)
        _LIVE.add(run)
        if spare is not None and self._hand_over(spare, run, argv):
            return run
        self._start_fresh(run, argv)
        return run

    def close(self) -> None:
        """Stop the spare (if any) and start no more; runs already started go on."""
        with self._guard:
            self._closed = True
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._pool.stop(min(self.grace_s, 2.0))

    @property
    def spare_pid(self) -> int | None:
        """The next spare worker's process id (None: no spare now)."""
        with self._guard:
            return self._pool.children[0].pid if self._pool.children else None

    @property
    def spare_pids(self) -> list[int]:
        """Every spare worker's process id."""
        with self._guard:
            return [child.pid for child in self._pool.children]

    # -- inside ----------------------------------------------------------------------------------

    def _servable_device(self, argv: list[str]) -> str | None:
        """The device a warm worker would serve this command on; None when it is not a ``run``
        command of this launcher's interpreter, or it cannot be read (a fresh process says why)."""
        if argv[:4] != [self.python, "-m", "profiler_core", "run"]:
            return None
        try:
            return cli.config_from_args(cli.parse(argv[3:])).device
        except Exception:  # a refused command line: the fresh process reports it the usual way
            return None

    def _take_spare(self, device: str | None) -> _Child | None:
        """A spare that can serve ``device`` (a ready one first); spares that cannot, and are
        still starting up, are stopped (they must not warm up during this run's timed trials)."""
        pool = self._pool.children  # a dead one is handed over too: the run then says so
        if not pool:
            return None
        if self.warm and device is not None and device == self._pool.device:
            spare = next((child for child in pool if child.ready.is_set() and not child.has_exited()),
                         pool[0])
            pool.remove(spare)
            return spare
        if device is not None or any(not child.ready.is_set() for child in pool):
            self._pool.stop(min(self.grace_s, 2.0))
        return None

    def _hand_over(self, spare: _Child, run: RunProcess, argv: list[str]) -> bool:
        """Give ``run`` to ``spare``; False (spare stopped, said in a record) if it cannot take it."""
        if spare.has_exited():
            run._emit({"event": "launcher", "kind": "fallback",
                       "message": "the warm worker had exited while waiting; the run starts in a "
                                  "fresh process"})
            return False
        run._attach(spare, warm=True)
        with self._guard:
            starting = [child for child in self._pool.children if not child.ready.is_set()]
        request = json.dumps({"argv": argv[3:]})
        if not starting:
            if not spare.send(request):
                return True  # it exited meanwhile: _on_exit falls back to a fresh process
            threading.Thread(target=_wait_or_kill,
                             args=(spare, spare.accepted, self._acceptance_deadline(spare)),
                             daemon=True, name=f"handover-{spare.pid}").start()
            return True
        # Other spares are still warming up: the run is sent only once they are ready (or gone),
        # so that none of them imports torch or starts CUDA during its timed trials.
        threading.Thread(target=self._send_when_pool_ready, args=(spare, request, starting),
                         daemon=True, name=f"handover-{spare.pid}").start()
        return True

    def _send_when_pool_ready(self, spare: _Child, request: str, starting: list[_Child]) -> None:
        for child in starting:
            _wait_or_kill(child, child.ready, child.started_at + SPARE_READY_TIMEOUT_S)
        if not spare.send(request):
            return  # it exited meanwhile: _on_exit falls back to a fresh process
        _wait_or_kill(spare, spare.accepted, self._acceptance_deadline(spare))

    def _acceptance_deadline(self, spare: _Child) -> float:
        """Until when a spare that was sent a run may take to accept it: the end of its warm-up
        allowance while it still warms up, else the handover timeout from now."""
        if not spare.ready.is_set():
            return spare.started_at + SPARE_READY_TIMEOUT_S
        return time.monotonic() + self.handover_timeout_s

    def _start_fresh(self, run: RunProcess, argv: list[str]) -> None:
        try:
            child = _Child(argv, self.env, self.cwd, listener=None)
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in an argument
            run._fail_to_start(error)
            return
        run._attach(child, warm=False)

    def _on_run_phase(self, run: RunProcess) -> None:
        """A run reported a phase or ended: start a spare if the timing rule allows it now."""
        with self._guard:
            if not run._active and run in self._runs:
                self._runs.remove(run)
            self._maybe_start_spare()

    def _maybe_start_spare(self) -> None:
        if (not self.warm or self._closed or self._wanted_device is None
                or any(r._in_or_before_timed_phases for r in self._runs)):
            return
        if self._pool.live():
            return  # refilled only once empty: a spare warming up delays the next run's start
        argv = [self.python, "-m", "profiler_core", "serve", "--device", self._wanted_device]
        self._pool.device = self._wanted_device
        for _ in range(self.spares):
            try:
                self._pool.children.append(_Child(argv, self.env, self.cwd, listener=None,
                                                  stdin_pipe=True))
            except (OSError, ValueError):
                break  # runs then start in fresh processes, which say what failed
        if self._pool.children and self.idle_timeout_s:
            self._check_idle_in(self.idle_timeout_s)

    def _check_idle_in(self, delay_s: float) -> None:
        """Look for idle spares in ``delay_s`` seconds (replacing an earlier check)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = threading.Timer(delay_s, self._stop_idle_spares)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _stop_idle_spares(self) -> None:
        """Stop every spare that has been ready for ``idle_timeout_s`` without a run; check again
        when the next one would be (a spare still warming up: a full idle time from now)."""
        with self._guard:
            if self._closed or not self.idle_timeout_s:
                return
            now = time.monotonic()
            idle = [child for child in self._pool.live() if child.ready_at is not None
                    and now - child.ready_at >= self.idle_timeout_s]
            for child in idle:
                self._pool.children.remove(child)
                child.stop(min(self.grace_s, 2.0))
            self.idle_stopped += len(idle)
            waits = [self.idle_timeout_s - (now - child.ready_at) if child.ready_at is not None
                     else self.idle_timeout_s for child in self._pool.live()]
            if waits:
                self._check_idle_in(max(0.05, min(waits)))


def _wait_or_kill(child: _Child, event: threading.Event, deadline: float) -> None:
    """Wait until ``event`` is set or ``child`` has exited; a child still waiting at ``deadline``
    is taken for hung and killed (a spare's exit restarts its run in a fresh process)."""
    while not (event.is_set() or child.exited.is_set() or child.has_exited()):
        if time.monotonic() >= deadline:
            child.hung = True
            child.kill_now()
            return
        event.wait(0.05)


def stop_all_runs(grace_s: float = 2.0) -> None:
    """Stop every run still going (the interpreter is exiting; spares are stopped by their
    launcher's finalizer): SIGTERM, then SIGKILL. A stopped run keeps what it measured, marked
    incomplete."""
    runs = [run for run in list(_LIVE) if run._active]
    for run in runs:
        run.cancel(grace_s=min(run.grace_s, grace_s))
    deadline = time.monotonic() + grace_s + 1.0
    for run in runs:
        run.wait(max(0.0, deadline - time.monotonic()))


atexit.register(stop_all_runs)
