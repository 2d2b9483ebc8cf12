"""A run or a warm worker started by the launcher ends when the launcher's process ends, however
it ends (SIGKILL included): a run left behind would go on holding its device outside the
dashboard's device lock.

Scope: the child's side; no heavy imports (it runs before torch is imported). The launcher
(``child.Child``) gives each child the read end of a pipe whose write end only the launcher
holds, and names it and its own process id in the environment (``PARENT_ENV``,
``"<pid>:<fd>"``). A child started as ``python -m profiler_core`` calls :func:`end_with_parent`
first thing, which

1. removes the variable from its environment, so its own children are not watched for it;
2. on Linux, asks the kernel for SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``). The
   kernel sends it when the parent *thread* that forked the child ends, so the launcher forks every
   child from one thread that lives as long as its process (``child._SPAWNER``);
3. checks that its parent is still the launcher, which may have died before step 2: if not, it
   stops now (SIGTERM to itself);
4. starts a watchdog thread blocked on the pipe (no wake-ups, so nothing disturbs the timed
   trials). End of file means the launcher's process is gone: the kernel closed its end. The
   watchdog then sends the child SIGTERM where step 2 was not possible, and SIGKILLs the child's
   process group ``GRACE_S`` later if the child is still there.

SIGTERM stops a run as Cancel does (it keeps what it measured, marked incomplete) and ends a warm
worker while it warms up or waits. When a launcher with several threads is killed, the kernel may
send the death signal once per thread as each exits (the child is handed to the next thread
first): a run takes only the first SIGTERM as its stop, the others wait until it has saved
(``stopping.RunStopper``). What no signal handler can stop is a child stuck in C code
that holds the interpreter lock; the kernel's SIGKILL of step 4 does not need it, but comes only
from the watchdog thread, which does: such a child ends only with its own process group.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PARENT_ENV = "PROFILER_CORE_PARENT"
GRACE_S = 10.0  # from the parent's death to SIGKILL: time to save an incomplete run
_PR_SET_PDEATHSIG = 1


def child_environment(env: dict[str, str], read_fd: int) -> dict[str, str]:
    """``env`` for a child watching this process through the pipe's ``read_fd`` (launcher side)."""
    return {**env, PARENT_ENV: f"{os.getpid()}:{read_fd}"}


def _arm_death_signal() -> bool:
    """Ask Linux for SIGTERM when the parent dies; False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def end_with_parent(grace_s: float = GRACE_S) -> bool:
    """Watch the launcher that started this process (see the module docstring); False when this
    process was not started by a launcher (nothing to watch)."""
    value = os.environ.pop(PARENT_ENV, "")
    try:
        parent_pid, read_fd = (int(part) for part in value.split(":"))
        os.set_inheritable(read_fd, False)
    except (ValueError, OSError):
        return False  # not started by a launcher, or a mangled value: nothing to watch
    armed = _arm_death_signal()
    if os.getppid() != parent_pid:  # the launcher died before the death signal was armed
        _stop(armed=False)
    threading.Thread(target=_watch, args=(read_fd, armed, grace_s), daemon=True,
                     name="parent-watch").start()
    return True


def _watch(read_fd: int, armed: bool, grace_s: float) -> None:
    try:
        while os.read(read_fd, 1):
            pass  # the launcher never writes; anything read is ignored
    except OSError:
        pass
    _stop(armed)
    time.sleep(grace_s)
    _kill_group()


def _stop(armed: bool) -> None:
    """SIGTERM to this process, unless the kernel has sent it already (``armed``)."""
    if not armed:
        os.kill(os.getpid(), signal.SIGTERM)


def _kill_group() -> None:
    """SIGKILL this process and its process group (its own when it leads it, as launched)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
