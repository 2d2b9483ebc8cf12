"""torchrun as the tool's launcher starts it: ``python -m profiler_core.orchestration.torchrun_main
ARGS`` is torch's own ``torchrun ARGS`` (``torch.distributed.run``), quieter.

Scope: one process, torchrun's agent. A failed rank is said on one line the launcher reads
(``spec.distributed.FAILURE_MARK``: every rank that ended with an error, and its exit code)
instead of torchrun's traceback and error block, and the agent's own log lines (a rank's exit, the
signals it sends) are not printed: the launcher says what happened, in one line. Stopped by a
signal (the launcher's death signal), it ends with 128 + the signal, quietly. Its note that it
sets OMP_NUM_THREADS, which a CPU rank's timing depends on, is kept.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

QUIET_LOGGERS = "torch.distributed.elastic"  # the agent's loggers: exits, signals, restarts
FAILED_EXIT_CODE = 1  # torchrun's own when a rank failed


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

    try:
        torchrun.run(torchrun.parse_args(list(argv)))
    except ChildFailedError as failed:
        first, _ = failed.get_first_failure()
        announce(TorchrunFailure(int(first), {
            int(rank): int(failure.exitcode) for rank, failure in failed.failures.items()}))
        return FAILED_EXIT_CODE
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
