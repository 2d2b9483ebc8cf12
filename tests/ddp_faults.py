"""A stand-in rank for the launcher's tests, started by torchrun: it watches its agent and
reports phases as a real rank does, then on the rank named by argv behaves as asked: ``fail``
(raises, its error said on the launcher's line), ``hang`` (sleeps forever), ``deaf`` (ignores
SIGTERM and sleeps, as a rank stuck in C code does), ``ok`` (exits 0); other ranks wait."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # torchrun runs this file as a script

from profiler_core.orchestration.parent import end_with_parent
from profiler_core.spec.distributed import (
    RankFailure,
    announce,
    announce_phase,
    rank_env,
)


def main() -> None:
    end_with_parent()  # as ``python -m profiler_core`` does first thing
    env = rank_env()
    assert env is not None
    behaviour, target = sys.argv[1], int(sys.argv[2])
    announce_phase(env.rank, "prepare")
    if env.rank != target:
        announce_phase(env.rank, "gather")
        time.sleep(0.0 if behaviour == "ok" else 600.0)  # a rank blocked waiting for the others
        return
    if behaviour == "fail":
        announce(RankFailure(env.rank, "RuntimeError", "RuntimeError: injected failure"))
        raise SystemExit(1)
    if behaviour == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if behaviour in ("hang", "deaf"):
        announce_phase(env.rank, "timed trials")
        time.sleep(600.0)


if __name__ == "__main__":
    main()
