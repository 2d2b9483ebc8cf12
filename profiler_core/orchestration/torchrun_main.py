"""torchrun as the tool's launcher starts it: ``python -m profiler_core.orchestration.torchrun_main
ARGS`` is torch's own ``torchrun ARGS`` (``torch.distributed.run``), quieter.

Scope: one process, torchrun's agent. A failed rank is said on one line the launcher reads
(``spec.distributed.FAILURE_MARK``: every rank that ended with an error, and its exit code)
instead of torchrun's traceback and error block, and the agent's own log lines (a rank's exit, the
signals it sends) are not printed: the launcher says what happened, in one line. Stopped by a
signal (the launcher's death signal), it ends with 128 + the signal, quietly, and not before its
ranks have ended: torchrun's own shutdown (SIGTERM to each rank, SIGKILL 30 s later) is cut short
by a second signal, which a killed launcher with several threads sends (the death signal comes
once per thread), so whatever rank it left is ended here (SIGTERM, SIGKILL after
``RANK_GRACE_S``), further signals ignored. Each rank also watches this process and ends with it
(``orchestration.parent``), should it be SIGKILLed. Its note that it sets OMP_NUM_THREADS, which
a CPU rank's timing depends on, is kept.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Sequence

from profiler_core.orchestration import parent
from profiler_core.orchestration.torchrun import children, signal_sessions

QUIET_LOGGERS = "torch.distributed.elastic"  # the agent's loggers: exits, signals, restarts
FAILED_EXIT_CODE = 1  # torchrun's own when a rank failed
RANK_GRACE_S = parent.GRACE_S  # from the SIGTERM to a rank left running to its SIGKILL
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _quiet_agent() -> None:
    """Import torchrun with the agent's loggers above CRITICAL (each sets its level from
    LOGLEVEL when made), LOGLEVEL restored for the ranks; torchrun's own notes kept."""
    before = os.environ.get("LOGLEVEL")
    os.environ["LOGLEVEL"] = "CRITICAL"
    try:
        import torch.distributed.run  # noqa: F401  (its loggers are made on import)
    finally:
        if before is None:
            os.environ.pop("LOGLEVEL", None)
        else:
            os.environ["LOGLEVEL"] = before
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(QUIET_LOGGERS):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    logging.getLogger("torch.distributed.run").setLevel(logging.WARNING)


def main(argv: Sequence[str]) -> int:
    """torchrun with ``argv``; its exit code."""
    _quiet_agent()
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    from profiler_core.spec.distributed import TorchrunFailure, announce

    parent.watched_as_agent()
    try:
        torchrun.run(torchrun.parse_args(list(argv)))
    except ChildFailedError as failed:
        first, _ = failed.get_first_failure()
        announce(TorchrunFailure(int(first), {
            int(rank): int(failure.exitcode) for rank, failure in failed.failures.items()}))
        return FAILED_EXIT_CODE
    except SignalException as stopped:
        end_ranks_left()
        return 128 + int(stopped.sigval)
    return 0


def end_ranks_left(grace_s: float = RANK_GRACE_S) -> list[int]:
    """End every child of this process still running (the ranks torchrun's shutdown left):
    SIGTERM to each one's process group (torchrun starts each rank in a session of its own),
    SIGKILL to those left after ``grace_s``, each reaped; the pids found. Signals that would end
    this process are ignored from here on."""
    for number in ENDING_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    ranks = children().get(os.getpid(), [])
    signal_sessions(ranks, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = list(ranks)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [pid for pid in left if not _reaped(pid)]
    signal_sessions(left, signal.SIGKILL)
    for pid in left:
        _reaped(pid, block=True)
    return ranks


def _reaped(pid: int, block: bool = False) -> bool:
    """Whether child ``pid`` has ended (reaping it; waiting for it where ``block``)."""
    try:
        return os.waitpid(pid, 0 if block else os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True  # reaped already (by torchrun's own handles)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
