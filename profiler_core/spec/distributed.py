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
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

RANK_ENV_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
# Where the ranks meet (``init_process_group``'s env:// rendezvous): torchrun sets both for its
# ranks; a shell that merely has RANK and WORLD_SIZE (SLURM's, one torchrun started in) has not.
RENDEZVOUS_ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT")
# Each mark is followed by one JSON object on the same line, the fields of its record below
# (``RankPhase``, ``RankFailure``, ``TorchrunFailure``); the records are written and read only
# through ``announce`` and ``read_marks``.
PHASE_MARK = "profiler_core-rank-phase"
ERROR_MARK = "profiler_core-rank-error"
FAILURE_MARK = "profiler_core-torchrun-failure"
_MARKS = (PHASE_MARK, ERROR_MARK, FAILURE_MARK)
# What a collective raises on a rank whose peer has ended (gloo's socket errors, NCCL's abort): the
# consequence of another rank's failure, not a failure of its own.
_PEER_LOST = re.compile(r"connection (closed|reset) by peer|broken pipe|remote process exited|"
                        r"communicator was aborted", re.IGNORECASE)
# Set by the tool's launcher for the ranks it starts: a rank says its error on its mark line only
# (the launcher reports it, in one line), with no traceback or error line of its own.
LAUNCHED_ENV = "PROFILER_CORE_LAUNCHED_RANK"
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


def missing_rendezvous(environ: Mapping[str, str] = os.environ) -> list[str]:
    """The rendezvous variables (``RENDEZVOUS_ENV_NAMES``) a rank lacks, or holds unusable (an
    empty address, a port that is not a whole number from 1 to 65535)."""
    address = environ.get("MASTER_ADDR", "").strip()
    port = environ.get("MASTER_PORT", "").strip()
    missing = [] if address else ["MASTER_ADDR"]
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        missing.append("MASTER_PORT")
    return missing


def is_peer_lost(message: str) -> bool:
    """Whether a rank's error message says a peer rank had ended (``_PEER_LOST``)."""
    return _PEER_LOST.search(message) is not None


def launched_by_the_tool(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this rank was started by the tool's own launcher (``LAUNCHED_ENV``)."""
    return environ.get(LAUNCHED_ENV) == "1"


@dataclass(frozen=True)
class RankPhase:
    """``PHASE_MARK``: a rank entering one of ``RANK_PHASES`` at wall-clock ``t`` (0 unsaid)."""

    rank: int
    phase: str
    t: float = 0.0


@dataclass(frozen=True)
class RankFailure:
    """``ERROR_MARK``: the error a rank ended with, as its command line reports it (``kind`` from
    ``errors.kind_and_exit_code``: the launcher raises the same kind, whose exit code it exits
    with); a refused setting's ``field`` (the launcher names its option); ``peer_lost``: the error
    only says another rank had ended."""

    rank: int
    kind: str = ""
    message: str = ""
    hint: str = ""
    field: str | None = None
    peer_lost: bool = False


@dataclass(frozen=True)
class TorchrunFailure:
    """``FAILURE_MARK``: torchrun's own word, as the tool starts it
    (``orchestration.torchrun_main``): the first rank to fail and the exit code of every rank that
    ended with an error."""

    rank: int
    exit_codes: dict[int, int]


RankRecord: TypeAlias = RankPhase | RankFailure | TorchrunFailure
_MARK_OF: dict[type, str] = {RankPhase: PHASE_MARK, RankFailure: ERROR_MARK,
                             TorchrunFailure: FAILURE_MARK}


def rank_line(record: RankRecord) -> str:
    """The record as its mark and one JSON object (no newline)."""
    return f"{_MARK_OF[type(record)]} {json.dumps(asdict(record))}"


def announce(record: RankRecord) -> None:
    """One line for the launcher on stderr, written in one call (the ranks share torchrun's
    stderr: two writes per line could interleave with another rank's)."""
    try:
        sys.stderr.write(rank_line(record) + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the launcher is gone
        pass


def announce_phase(rank: int, phase: str) -> None:
    announce(RankPhase(rank, phase, time.time()))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _record(mark: str, raw: dict[str, Any]) -> RankRecord | None:
    """``raw`` (what followed ``mark``) as its record: a field of the wrong type is left unsaid;
    None without a whole-number rank."""
    rank = raw.get("rank")
    if type(rank) is not int:
        return None
    if mark == PHASE_MARK:
        t = raw.get("t")
        return RankPhase(rank, _text(raw.get("phase")),
                         float(t) if isinstance(t, (int, float)) and not isinstance(t, bool)
                         else 0.0)
    if mark == ERROR_MARK:
        field = raw.get("field")
        return RankFailure(rank, _text(raw.get("kind")), _text(raw.get("message")),
                           _text(raw.get("hint")), field if isinstance(field, str) else None,
                           raw.get("peer_lost") is True)
    codes = raw.get("exit_codes")
    return TorchrunFailure(rank, {int(r): code for r, code in codes.items()
                                  if str(r).isdigit() and type(code) is int}
                           if isinstance(codes, dict) else {})


def read_marks(line: str) -> list[RankRecord]:
    """Every record in a line the ranks wrote, wherever a mark starts (a launcher may prefix
    lines with the rank, and lines of two ranks may run together); empty for any other line."""
    found: list[tuple[int, RankRecord]] = []
    for mark in _MARKS:
        at = line.find(mark + " ")
        while at >= 0:
            start = at + len(mark) + 1
            try:
                raw, _ = _DECODER.raw_decode(line, start)
            except ValueError:
                raw = None
            record = _record(mark, raw) if isinstance(raw, dict) else None
            if record is not None:
                found.append((at, record))
            at = line.find(mark + " ", start)
    return [record for _, record in sorted(found, key=lambda item: item[0])]


_DECODER = json.JSONDecoder()
