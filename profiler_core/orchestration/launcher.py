"""Runs in processes of their own: start, follow, stop, and say how each ended.

:class:`Launcher` starts a ``RunConfig`` in a fresh process or on a warm worker, each in its own
process group; it relays the run's records (``spec.events``), stops a run by signalling its group,
and classifies the ending (:class:`Ending`). No UI here (``orchestration.runjob`` and the dashboard sit
on top).
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from profiler_core.engine.serve import RunRequest
from profiler_core.orchestration.child import Child
from profiler_core.orchestration.command import run_argv, run_env, serve_argv
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ERROR_KINDS
from profiler_core.spec.events import DoneEvent, ErrorEvent, LauncherNote, ProgressEvent, RunEvent

# The kind an exit code stands for when a run died before writing its error record (the first
# kind listed for a code wins: exit 2 is a refused input).
KIND_OF_EXIT: dict[int, str] = {}
for _kind, _code in ERROR_KINDS.items():
    KIND_OF_EXIT.setdefault(_code, _kind)
STATUSES = ("done", "error", "cancelled", "timeout", "crashed")
DEFAULT_GRACE_S = 5.0  # SIGTERM, then SIGKILL this long after
# A spare that has not said it is ready this long after it started is taken for hung.
SPARE_READY_TIMEOUT_S = 300.0
# A ready spare that has not taken a request this long after it was sent is taken for hung.
HANDOVER_TIMEOUT_S = 10.0
# A ready spare that no run has taken this long is stopped (it holds a few hundred MB of host
# memory, and a CUDA context on its GPU); the next run starts in a fresh process and a spare is
# started again after it. docs/how-it-measures.md, "Warm workers", states it.
IDLE_TIMEOUT_S = 600.0
# Phases a run reports once its timed trials are over (see ``Launcher``: when spares start).
AFTER_TIMED_PHASES = ("parity", "done")
AFTER_TIMED_PREFIXES = ("profiling ",)

EventHandler = Callable[[RunEvent], None]


def left_timed_phases(phase: str) -> bool:
    """Whether a run reporting ``phase`` is past its timed trials (a spare may start now)."""
    return phase in AFTER_TIMED_PHASES or phase.startswith(AFTER_TIMED_PREFIXES)


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
    error: ErrorEvent | None
    stderr_tail: str
    killed: bool
    message: str = ""
    warm: bool = False


class RunProcess:
    """One run of ``python -m profiler_core run ... --progress jsonl`` (or a warm worker serving
    one run) in its own process group. ``on_event`` gets every record the run prints
    (``spec.events``: ``ProgressEvent``, then ``DoneEvent`` or ``ErrorEvent``) on the launcher's
    reader thread, and the launcher's own ``LauncherNote`` records; calls never overlap. The
    launcher drives it through :meth:`attach`, :meth:`fail_to_start` and :meth:`note`, and reads
    :attr:`active` and :attr:`in_or_before_timed_phases`."""

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
        self._child: Child | None = None
        self._exit_seen: Child | None = None
        self._warm = False
        self._ended = threading.Event()
        self._ending: Ending | None = None
        self._cancelled = False
        self._timed_out = False
        self._killed = False
        self._done_record = False
        self._error: ErrorEvent | None = None
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

    @property
    def active(self) -> bool:
        """Whether it has not ended yet."""
        return not self._ended.is_set()

    @property
    def in_or_before_timed_phases(self) -> bool:
        """Whether it is still going and has not left its timed trials (no spare may start)."""
        return self.active and not left_timed_phases(self.phase)

    # -- the launcher's side ---------------------------------------------------------------------

    def attach(self, child: Child, *, warm: bool) -> None:
        """Follow ``child`` (a fresh process, or the warm worker ``warm`` it is handed to): its
        records and its exit; stopped at once if the run was stopped while it started."""
        with self._guard:
            self._child, self._warm = child, warm
            stop = self._cancelled or self._timed_out
        child.attach(self)
        if stop:  # cancelled or timed out while the process was being started
            child.stop(self.grace_s, self._mark_killed)
        if child.exited.is_set():
            self.on_child_exit(child)  # exited before it was attached (a dead spare)

    def fail_to_start(self, error: Exception) -> None:
        """No process could be started: the run ended, crashed, saying why."""
        self._finish(Ending("crashed", None, None, "", False,
                            f"the worker could not start: {error}"))

    def note(self, kind: str, message: str) -> None:
        """The launcher's own word on this run (``LauncherNote``), to its listener."""
        self._emit(LauncherNote(kind, message))

    def _emit(self, event: RunEvent) -> None:
        with self._deliver:
            if self._on_event is None or self._handler_failed is not None:
                return
            try:
                self._on_event(event)
            except BaseException as error:  # a bug in the handler: the run cannot be followed
                self._handler_failed = error
                with self._guard:
                    child = self._child
                if child is not None:
                    threading.Thread(target=child.kill_now, daemon=True).start()

    def on_child_event(self, child: Child, event: RunEvent) -> None:
        """One record ``child`` printed (``orchestration.child`` read it)."""
        if self._warm and not child.accepted.is_set():
            return  # a warm worker's lines before it took the run are not the run's
        if isinstance(event, ProgressEvent):
            self.phase = event.phase
        elif isinstance(event, DoneEvent):
            self._done_record = True
        elif isinstance(event, ErrorEvent):
            self._error = event
        self._emit(event)
        if isinstance(event, (ProgressEvent, DoneEvent)):
            self._on_phase(self)

    def on_child_exit(self, child: Child) -> None:
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
            self.note("fallback", f"the warm worker {how}; the run starts in a fresh process")
            self._restart(self)
            return
        self._finish(self._classify(child))

    def _classify(self, child: Child) -> Ending:
        code = child.returncode
        tail = child.stderr_tail()
        with self._guard:
            killed, warm = self._killed, self._warm

        def ending(status: str, message: str, error: ErrorEvent | None = None) -> Ending:
            return Ending(status, code, error, tail, killed, message, warm)

        if self._handler_failed is not None:
            return ending("crashed", f"the event handler failed: {self._handler_failed!r}")
        written = self.out_dir is not None and (self.out_dir / "summary.json").is_file()
        if code == 0 and self._done_record:  # it finished, even if a stop request came too late
            return ending("done", "finished")
        if self._timed_out:
            return ending("timeout", f"stopped after the {self.timeout_s or 0:g} s time limit")
        if self._cancelled:
            return ending("cancelled", "cancelled")
        if code == 0 and written:
            return ending("done", "finished")
        error = self._error
        if error is None and code in KIND_OF_EXIT:  # a known exit code but no error record
            kind = KIND_OF_EXIT[code]
            message = _last_line(tail) or (f"the worker exited with code {code} ({kind}) "
                                           "without an error record")
            error = ErrorEvent(kind, None, message, "")
        if error is not None:
            return ending("error", error.message, error)
        return ending("crashed", describe_exit(code) if code is not None else
                      "the worker ended without an exit code")

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
        self.note("stopping", f"no result after {self.timeout_s:g} s: stopping the worker")
        if child is not None:
            child.stop(self.grace_s, self._mark_killed)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


_LIVE: weakref.WeakSet[RunProcess] = weakref.WeakSet()


class _SparePool:
    """A launcher's spare workers and their device; stopped with the launcher, when it is garbage
    collected, or when the interpreter exits (``weakref.finalize``)."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.device: str | None = None

    def live(self) -> list[Child]:
        self.children = [child for child in self.children if not child.has_exited()]
        return self.children

    def stop(self, grace_s: float = 2.0) -> None:
        children, self.children = self.children, []
        for child in children:
            child.stop(grace_s)


class Launcher:
    """Starts runs in processes of their own; with ``warm=True`` keeps ``spares`` warm workers.

    :class:`Launcher` starts a run of a ``RunConfig`` (``Launcher.start(config, out_dir)``)
    either in a fresh process (``python -m profiler_core run ... --progress jsonl``, the command line
    of ``profiler_core.orchestration.command``) or on a warm worker (``python -m profiler_core serve``,
    handed the config's dict, ``profiler_core.engine.serve.RunRequest``), each in its own process
    group (``profiler_core.orchestration.child``). Every record the run prints (``spec.events``) goes
    to ``on_event``; the launcher adds a ``LauncherNote`` (kind stopping or fallback) when
    it stops a run at its time limit or falls back from a warm worker to a fresh process. Stopping
    (Cancel, a time limit) sends SIGTERM to the group (the run keeps what it measured, marked
    incomplete), then SIGKILL after a grace period. The ending is classified (:class:`Ending`): done,
    timeout, cancelled, error (an error record, or an exit code that stands for an error kind) or
    crashed. No UI here: ``profiler_core.orchestration.runjob`` runs one behind the device's lock,
    and the dashboard words how it ended (``dashboard/worker.py``).

    Warm workers (``warm=True``): a spare has imported torch and the engine and brought CUDA up on the
    device of the last run; it serves exactly one run, then exits. Spares are started only for devices
    that runs asked for, and only while no run of this launcher is in or before its timed phases
    (every active run has reported ``profiling <mode>``, ``parity`` or ``done``), so no spare warms up
    during a timed trial. A pool (``spares=N``, for sweeps) starts N together and is refilled once all
    are used; a run handed to it while some still warm up is sent once they are all ready. A spare that
    died, hung or idled past ``idle_timeout_s`` is stopped, and the run starts in a fresh process.
    Runs still going when the interpreter exits are stopped (atexit); runs and spares also end when
    this process dies (``profiler_core.orchestration.parent``).

    ``cwd``: the runs'
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

    def start(self, config: RunConfig, out_dir: Path | str, *, overwrite: bool = False,
              timeout_s: float | None = None, on_event: EventHandler | None = None,
              grace_s: float | None = None) -> RunProcess:
        """Run ``config`` into ``out_dir`` (``overwrite``: replace an earlier run of this tool
        there): on a warm spare for ``config.device`` if one is there, else in a fresh process.
        ``timeout_s``: stop it after that long (None: no limit); ``on_event``: every record, on
        the launcher's reader thread; ``grace_s``: this run's SIGTERM to SIGKILL."""
        argv = run_argv(config, out_dir, python=self.python, overwrite=overwrite)
        request = RunRequest(config, str(out_dir), overwrite)
        return self._begin(argv, Path(out_dir), config.device, request, timeout_s, on_event,
                           grace_s)

    def start_command(self, argv: Sequence[str], out_dir: Path | None = None, *,
                      timeout_s: float | None = None, on_event: EventHandler | None = None,
                      grace_s: float | None = None) -> RunProcess:
        """Run any other command line the same way, always in a fresh process (tests pass
        stand-ins for the run command); a spare still warming up is stopped, as for a run on
        another device. ``out_dir``: where a run it writes counts as done."""
        return self._begin([str(a) for a in argv], out_dir, None, None, timeout_s, on_event,
                           grace_s)

    def _begin(self, argv: list[str], out_dir: Path | None, device: str | None,
               request: RunRequest | None, timeout_s: float | None,
               on_event: EventHandler | None, grace_s: float | None) -> RunProcess:
        """Start ``argv`` fresh, or hand ``request`` to a spare serving ``device``."""
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
        if spare is not None and request is not None and self._hand_over(spare, run, request):
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

    def _take_spare(self, device: str | None) -> Child | None:
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

    def _hand_over(self, spare: Child, run: RunProcess, request: RunRequest) -> bool:
        """Give ``run`` to ``spare``; False (spare stopped, said in a record) if it cannot take it."""
        if spare.has_exited():
            run.note("fallback", "the warm worker had exited while waiting; the run starts in a "
                                 "fresh process")
            return False
        run.attach(spare, warm=True)
        with self._guard:
            starting = [child for child in self._pool.children if not child.ready.is_set()]
        line = request.to_line()
        if not starting:
            if not spare.send(line):
                return True  # it exited meanwhile: _on_exit falls back to a fresh process
            threading.Thread(target=_wait_or_kill,
                             args=(spare, spare.accepted, self._acceptance_deadline(spare)),
                             daemon=True, name=f"handover-{spare.pid}").start()
            return True
        # Other spares are still warming up: the run is sent only once they are ready (or gone),
        # so that none of them imports torch or starts CUDA during its timed trials.
        threading.Thread(target=self._send_when_pool_ready, args=(spare, line, starting),
                         daemon=True, name=f"handover-{spare.pid}").start()
        return True

    def _send_when_pool_ready(self, spare: Child, line: str, starting: list[Child]) -> None:
        for child in starting:
            _wait_or_kill(child, child.ready, child.started_at + SPARE_READY_TIMEOUT_S)
        if not spare.send(line):
            return  # it exited meanwhile: _on_exit falls back to a fresh process
        _wait_or_kill(spare, spare.accepted, self._acceptance_deadline(spare))

    def _acceptance_deadline(self, spare: Child) -> float:
        """Until when a spare that was sent a run may take to accept it: the end of its warm-up
        allowance while it still warms up, else the handover timeout from now."""
        if not spare.ready.is_set():
            return spare.started_at + SPARE_READY_TIMEOUT_S
        return time.monotonic() + self.handover_timeout_s

    def _start_fresh(self, run: RunProcess, argv: list[str]) -> None:
        try:
            child = Child(argv, self.env, self.cwd, listener=None)
        except (OSError, ValueError) as error:  # ValueError: a NUL byte in an argument
            run.fail_to_start(error)
            return
        run.attach(child, warm=False)

    def _on_run_phase(self, run: RunProcess) -> None:
        """A run reported a phase or ended: start a spare if the timing rule allows it now."""
        with self._guard:
            if not run.active and run in self._runs:
                self._runs.remove(run)
            self._maybe_start_spare()

    def _maybe_start_spare(self) -> None:
        if (not self.warm or self._closed or self._wanted_device is None
                or any(r.in_or_before_timed_phases for r in self._runs)):
            return
        if self._pool.live():
            return  # refilled only once empty: a spare warming up delays the next run's start
        argv = serve_argv(self._wanted_device, python=self.python)
        self._pool.device = self._wanted_device
        for _ in range(self.spares):
            try:
                self._pool.children.append(Child(argv, self.env, self.cwd, listener=None,
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


def _wait_or_kill(child: Child, event: threading.Event, deadline: float) -> None:
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
    runs = [run for run in list(_LIVE) if run.active]
    for run in runs:
        run.cancel(grace_s=min(run.grace_s, grace_s))
    deadline = time.monotonic() + grace_s + 1.0
    for run in runs:
        run.wait(max(0.0, deadline - time.monotonic()))


atexit.register(stop_all_runs)
