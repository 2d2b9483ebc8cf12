"""A run or a warm worker started by the launcher ends when the launcher's process ends, however
it ends (SIGKILL included), so no run goes on holding its device outside the device lock; a rank
of a data-parallel run ends when torchrun's agent does, however that ends.

The child's side, with no heavy imports: ``python -m profiler_core`` calls :func:`end_with_parent`
first thing (the parent-death signal, a check that the parent is still there, and a watchdog on
a pipe whose write end only the launcher holds, or, for a rank, on the agent's process itself).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable

PARENT_ENV = "PROFILER_CORE_PARENT"
# Set by the tool's torchrun (``torchrun_main``) to its own pid, for the ranks it starts.
AGENT_ENV = "PROFILER_CORE_AGENT"
AGENT_POLL_S = 1.0  # how often a rank checks on its agent where Linux has no pidfd_open
GRACE_S = 10.0  # from the parent's death to SIGKILL: time to save an incomplete run
_PR_SET_PDEATHSIG = 1


def child_environment(env: dict[str, str], read_fd: int) -> dict[str, str]:
    """``env`` for a child watching this process through the pipe's ``read_fd`` (launcher side)."""
    return {**env, PARENT_ENV: f"{os.getpid()}:{read_fd}"}


def watched_as_agent() -> None:
    """Have the ranks this process (torchrun's agent) starts end when it ends (agent side: they
    inherit its environment)."""
    os.environ[AGENT_ENV] = str(os.getpid())


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
    """Watch the launcher, or torchrun's agent, that started this process; False when neither
    did (nothing to watch).

    The launcher (``child.Child``) gives each child the read end of a pipe whose write end only
    the launcher holds, and names it and its own process id in the environment (``PARENT_ENV``,
    ``"<pid>:<fd>"``). The tool's torchrun names its own process id (``AGENT_ENV``, set by
    :func:`watched_as_agent`): torchrun closes every inherited descriptor, and it may itself end
    without ending its ranks (SIGKILLed, or when a second death signal cuts its own shutdown
    short, as a launcher with several threads sends), which left them running for good when
    one was stuck in C code. This function:

    1. removes the variable from its environment, so its own children are not watched for it;
    2. for the launcher, on Linux, asks the kernel for SIGTERM when its parent dies
       (``prctl(PR_SET_PDEATHSIG)``). The kernel sends it when the parent *thread* that forked
       the child ends, so the launcher forks every child from one thread that lives as long as
       its process (``child._SPAWNER``); torchrun's threads are not the tool's to arrange, so a
       rank relies on step 4 alone;
    3. checks that its parent is still the launcher (or the agent), which may have died before
       step 2: if not, it stops now (SIGTERM to itself);
    4. starts a watchdog thread blocked on the pipe, or on the agent's pidfd (no wake-ups, so
       nothing disturbs the timed trials; where Linux has no ``pidfd_open``, it checks every
       ``AGENT_POLL_S``). End of file (or a readable pidfd) means the watched process is gone.
       The watchdog then sends the child SIGTERM where step 2 was not possible, and SIGKILLs the
       child's process group ``GRACE_S`` later if the child is still there.

    SIGTERM stops a run as Cancel does (it keeps what it measured, marked incomplete) and ends a warm
    worker while it warms up or waits. When a launcher with several threads is killed, the kernel may
    send the death signal once per thread as each exits (the child is handed to the next thread
    first): a run takes only the first SIGTERM as its stop, the others wait until it has saved
    (``stopping.RunStopper``). What no signal handler can stop is a child stuck in C code (a
    rank waiting on a peer or on the rendezvous store); the SIGKILL of step 4 needs no handler,
    but comes from the watchdog thread, which needs the interpreter lock: C code that holds it
    while it waits is ended only by its own process group's end.
    """
    watched = _launcher_pipe() or _agent()
    if watched is None:
        return False  # not started by a launcher or an agent, or a mangled value
    parent_pid, wait_until_gone, by_launcher = watched
    armed = by_launcher and _arm_death_signal()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        _stop(armed=False)
    threading.Thread(target=_watch, args=(wait_until_gone, armed, grace_s), daemon=True,
                     name="parent-watch").start()
    return True


def _launcher_pipe() -> tuple[int, Callable[[], None], bool] | None:
    """The launcher's pid and a wait for its pipe's end of file (``PARENT_ENV``)."""
    value = os.environ.pop(PARENT_ENV, "")
    try:
        parent_pid, read_fd = (int(part) for part in value.split(":"))
        os.set_inheritable(read_fd, False)
    except (ValueError, OSError):
        return None

    def wait_until_gone() -> None:
        try:
            while os.read(read_fd, 1):
                pass  # the launcher never writes; anything read is ignored
        except OSError:
            pass
    return parent_pid, wait_until_gone, True


def _agent() -> tuple[int, Callable[[], None], bool] | None:
    """torchrun's agent's pid and a wait for its end (``AGENT_ENV``)."""
    value = os.environ.pop(AGENT_ENV, "")
    try:
        agent_pid = int(value)
    except ValueError:
        return None
    if agent_pid <= 1:
        return None
    try:
        pidfd = os.pidfd_open(agent_pid)
    except ProcessLookupError:  # gone already: step 3 stops this rank
        return agent_pid, lambda: None, False
    except (AttributeError, OSError):  # no pidfd here (not Linux 5.3+): check on it now and then
        def poll_until_gone() -> None:
            while os.getppid() == agent_pid:
                time.sleep(AGENT_POLL_S)
        return agent_pid, poll_until_gone, False

    def wait_until_gone() -> None:
        select.select([pidfd], [], [])  # readable once the process has ended
    return agent_pid, wait_until_gone, False


def _watch(wait_until_gone: Callable[[], None], armed: bool, grace_s: float) -> None:
    wait_until_gone()
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
