"""What a rank of a data-parallel run and its launcher share: the rank's place in the job, read
from torchrun's variables, and the lines a rank writes on stderr so that the launcher can name a
rank that fails or hangs.

Scope: plain data and text (no torch, no processes). A rank reads only RANK, LOCAL_RANK and
WORLD_SIZE, so the same worker runs under our launcher (``orchestration.torchrun``), a
multi-node torchrun, or srun starting one torchrun per node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RANK_ENV_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
# Each mark is followed by one JSON object on the same line: {"rank", "phase", "t"} for a phase,
# {"rank", "kind", "message", "hint", "exit_code"} for an error.
PHASE_MARK = "profiler_core-rank-phase"
ERROR_MARK = "profiler_core-rank-error"
# A rank's phases in the order it goes through them (a hung rank is the one furthest behind).
RANK_PHASES = ("prepare", "timed trials", "profiled windows", "checks", "gather", "done")


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job."""

    rank: int
    local_rank: int
    world_size: int


def rank_env(environ: Mapping[str, str] = os.environ) -> RankEnv | None:
    """This process's place in a torchrun job; None when it was not started as a rank."""
    if not all(name in environ for name in RANK_ENV_NAMES):
        return None
    try:
        rank, local, world = (int(environ[name]) for name in RANK_ENV_NAMES)
    except ValueError:
        return None
    return RankEnv(rank, local, world) if 0 <= rank < world and local >= 0 else None


def announce(mark: str, record: Mapping[str, Any]) -> None:
    """One line for the launcher on stderr: ``mark`` and a JSON object."""
    try:
        print(f"{mark} {json.dumps(dict(record))}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed: the launcher is gone
        pass


def announce_phase(rank: int, phase: str) -> None:
    announce(PHASE_MARK, {"rank": rank, "phase": phase, "t": time.time()})


def read_mark(line: str) -> tuple[str, dict[str, Any]] | None:
    """(mark, record) from a line a rank wrote, wherever the mark starts in it (a launcher may
    prefix lines with the rank); None for any other line."""
    for mark in (PHASE_MARK, ERROR_MARK):
        at = line.find(mark + " ")
        if at >= 0:
            try:
                record = json.loads(line[at + len(mark) + 1:])
            except ValueError:
                return None
            if isinstance(record, dict) and isinstance(record.get("rank"), int):
                return mark, record
    return None
