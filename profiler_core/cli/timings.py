"""Where a ``run`` command's wall time goes, from the process's start to its exit.

Scope: the command marks its own steps (:class:`WallTimings`); the run's phases.csv splits the
run itself. The parts up to the run's end are kept in the run's environment (``WALL_KEYS``);
``run --timings`` also prints the whole breakdown, writing and the summary included, on stderr.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

# Seconds kept in a run's environment: process start to the command (interpreter, imports of the
# command line, parsing), the command to the run (output check, torch and the runner imported,
# a user step loaded), and the run itself (``run_experiment``: phases.csv splits it).
WALL_KEYS = ("wall_startup_s", "wall_before_run_s", "wall_run_s")
# Phases of phases.csv summed under one line: a phase named "<mode> <kind>" goes under its kind.
PHASE_KINDS = ("timed", "cold start", "article loop", "warm-up", "capture", "preparation",
               "profiled", "input copy")


def process_start_s() -> float | None:
    """When this process started, as a ``time.time()`` value (Linux's /proc, to 10 ms); None
    where it cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime_s = float(handle.read().split()[0])
        started_ticks = int(fields[19])  # field 22 of the file, counted after the command name
        age_s = uptime_s - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - age_s if math.isfinite(age_s) and age_s >= 0 else None


class WallTimings:
    """Named moments of one command, from the process's start (``time.time()`` values)."""

    def __init__(self, clock: Callable[[], float] = time.time,
                 started_s: float | None = None) -> None:
        self._clock = clock
        self.moments: dict[str, float] = {}
        if started_s is None:
            started_s = process_start_s()
        if started_s is not None:
            self.moments["process start"] = started_s
        self.mark("command")

    def mark(self, name: str) -> None:
        """Record the moment ``name`` now."""
        self.moments[name] = self._clock()

    def between(self, first: str, last: str) -> float:
        """Seconds from moment ``first`` to ``last`` (NaN when either was not marked)."""
        if first not in self.moments or last not in self.moments:
            return math.nan
        return self.moments[last] - self.moments[first]

    def record(self, environment: dict[str, Any]) -> None:
        """Keep the seconds up to the run's end in a run's environment (``WALL_KEYS``)."""
        environment.update(wall_startup_s=self.between("process start", "command"),
                           wall_before_run_s=self.between("command", "run start"),
                           wall_run_s=self.between("run start", "run end"))

    def parts(self, environment: dict[str, Any], phases: pd.DataFrame) -> list[tuple[str, float]]:
        """The breakdown as (part, seconds): start-up, before the run, the run in its phases (the
        device check before them, each kind of phase summed, and what no phase covers: before
        the first, between them, after the last), writing the run folder (its files and the run
        index), printing the summary, and the total."""
        rows = [("start-up: interpreter, imports, arguments", self.between("process start",
                                                                            "command")),
                ("before the run: output check, torch and the runner imported",
                 self.between("command", "run start"))]
        run_s = self.between("run start", "run end")
        device_check_s = _number(environment.get("device_check_s"))
        rows.append(("run: device check (CUDA context, memory estimate)", device_check_s))
        parts = _phase_parts(phases)
        rows += [(f"run: {part}", seconds) for part, seconds in parts]
        if len(phases):  # phases.csv's times are from the end of the device check
            before_s = float(phases["start_s"].min())
            after_s = run_s - device_check_s - float(phases["end_s"].max())
            rows += [("run: before its first phase (environment, NVML sampler start)", before_s),
                     ("run: between its phases", run_s - device_check_s - before_s - after_s
                      - sum(seconds for _, seconds in parts)),
                     ("run: after its last phase (tables, results, NVML sampler stop)", after_s)]
        rows += [("writing the run folder and its index entry", self.between("run end", "saved")),
                 ("printing the summary", self.between("saved", "printed")),
                 ("total", self.between("process start" if "process start" in self.moments
                                        else "command", "printed"))]
        return rows


def format_parts(parts: list[tuple[str, float]], bytecode: object = None) -> str:
    """The breakdown as lines of text, for stderr; ``bytecode`` (the run environment's): where the
    imports' compiled modules came from, which decides how long the imports take."""
    width = max(len(part) for part, _ in parts)
    lines = ["Wall time of this command (s):"]
    if bytecode:
        lines.append(f"  (compiled modules: {bytecode})")
    for part, seconds in parts:
        shown = f"{seconds:8.3f}" if math.isfinite(seconds) else "     n/a"
        lines.append(f"  {part:<{width}} {shown}")
    return "\n".join(lines)


def _phase_parts(phases: pd.DataFrame) -> list[tuple[str, float]]:
    """Seconds per kind of phase, in order of first appearance; a phase inside another one (the
    phases of a mode's preparation) counts only in the outer one."""
    if phases.empty:
        return []
    ordered = phases.sort_values(["start_s", "end_s"], ascending=[True, False], kind="stable")
    totals: dict[str, float] = {}
    reach = -math.inf
    for name, start, end in zip(ordered["phase"].astype(str), ordered["start_s"],
                                ordered["end_s"]):
        if end <= reach:  # nested in the phase before it
            continue
        reach = max(reach, end)
        totals[_kind(name)] = totals.get(_kind(name), 0.0) + (end - start)
    return list(totals.items())


def _kind(name: str) -> str:
    """"eager timed" -> "timed"; a phase that is not "<mode> <kind>" keeps its name."""
    mode_and_kind = name.split(" ", 1)
    return mode_and_kind[1] if len(mode_and_kind) == 2 and mode_and_kind[1] in PHASE_KINDS else name


def _number(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else (
        math.nan)
