"""One child process in a session of its own, followed from this process.

Scope: starting a process from one long-lived spawning thread (Linux sends the parent-death
signal that each child asks for, ``profiler_core.orchestration.parent``, when the *thread* that
forked it ends), reading its stdout line by line on a thread, keeping its stderr's tail, signalling
its whole process group, and killing whatever it left in its group once it exits. Each line is
read as a record of the run's protocol (``spec.events.parse``): a warm worker's handshake
(``WorkerEvent``, ready then accepted) is kept here, every other record goes to the
:class:`ChildListener` (``profiler_core.orchestration.launcher.RunProcess``), and a line that is
no record (a stray print) is dropped: stderr's tail is what explains a failure.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from profiler_core.orchestration import parent
from profiler_core.spec.events import Event, EventFormatError, RunEvent, WorkerEvent, parse

STDERR_TAIL_BYTES = 4000


class ChildListener(Protocol):
    """Who follows a child: each record it prints (but its handshake), then its exit."""

    def on_child_event(self, child: Child, event: RunEvent) -> None: ...

    def on_child_exit(self, child: Child) -> None: ...


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


class Child:
    """One process in a session of its own: stdout read on a thread, stderr into a temporary
    file, its group killed once it exits. ``WorkerEvent`` records (a warm worker's handshake)
    are kept here; every other record goes to the listener."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None,
                 listener: ChildListener | None, stdin_pipe: bool = False) -> None:
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

    def attach(self, listener: ChildListener) -> None:
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
                event = _event_of(line)
                if isinstance(event, WorkerEvent):
                    self._handshake(event)
                elif event is not None:
                    with self._guard:
                        listener = self._listener
                    if listener is not None:
                        listener.on_child_event(self, event)
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
                listener.on_child_exit(self)

    def _close_parent_pipe(self) -> None:
        with self._guard:
            fd, self._parent_pipe = self._parent_pipe, None
        if fd is not None:
            os.close(fd)

    def _handshake(self, event: WorkerEvent) -> None:
        if event.state == "ready":
            self.ready_at = time.monotonic()
            self.ready.set()
        elif event.state == "accepted":
            self.accepted.set()


def _event_of(line: str) -> Event | None:
    """The record ``line`` holds; None for a line that is none (a stray print, a malformed or
    unknown record)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        return parse(line)
    except EventFormatError:
        return None
