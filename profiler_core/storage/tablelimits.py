"""How large each table of a run folder can be, and a cheap check of a table file against it.

Scope: the most rows a run of a given config writes into each table (:func:`table_row_limit`,
generous), and :func:`check_table_file` (:func:`check_table_stream` for a stream, such as a
member of an uploaded zip), which reads a table in chunks before pandas parses it. A table past
its limit was damaged, edited or crafted, and parsing it whole could take minutes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from profiler_core.analysis.attribution import COMPONENTS as ATTRIBUTION_COMPONENTS
from profiler_core.spec.config import INT_LIMITS, RunConfig
from profiler_core.spec.errors import RunFormatError
from profiler_core.spec.modes import ALWAYS_MEASURED
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS, NVML_METRICS

READ_CHUNK_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20  # one line of a table (a kernel's two names: 8 kB at most)
HINT = "the file was damaged, edited or crafted; run again"

# Rows per mode, beyond what depends on the config (generous: the runner writes fewer).
STATS_ROWS_PER_MODE = 32  # timing methods of stats.csv (about 10)
METRIC_ROWS_PER_MODE = 256  # metrics of metrics.csv (about 60)
KERNEL_ROWS_PER_MODE = 5_000  # distinct kernels of a profiled window (real: tens to hundreds)
COUNTER_ROWS = 16  # the counter lesson's phases (5)
PHASES_PER_MODE = 16  # phases a mode has beside its trials: warm-up, profiled... (about 5)
RANK_METRIC_ROWS = 64  # figures per rank and mode of ranks.csv (about 25)
MAX_WORLD_SIZE = 65_536  # ranks of a data-parallel run taken from its environment, at most
# NVML: polled samples of every metric at the config's interval, plus the driver's own samples
# (at most every 1/6 s). When the run's duration is unknown, MAX_NVML_ROWS: 90 minutes polled
# every 20 ms.
DRIVER_SAMPLE_S = 1 / 6
MAX_NVML_ROWS = 2_000_000
MIN_NVML_ROWS = 100_000
ROOM = 64  # added to every limit
SHAPE_STRATEGIES = 8  # strategies a run of changing shapes times, at most


def table_row_limit(name: str, config: RunConfig,
                    environment: Mapping[str, Any] | None = None) -> int:
    """The most rows table ``name`` of a run of ``config`` may have (``environment``: the run's,
    whose ``started_at`` and ``finished_at`` bound the NVML samples)."""
    modes = max(len(config.modes), len(ALWAYS_MEASURED))
    timed = max(config.total_eager_iters, config.replays * config.capture_iters)
    rows = {
        # steady and cold rows for every timed iteration of every mode
        "latency": modes * 2 * timed,
        "stats": modes * STATS_ROWS_PER_MODE,
        "counters": COUNTER_ROWS,
        "launch_split": modes * config.profile_iters * max(1, config.capture_iters),
        "breakdown": modes * len(BREAKDOWN_COMPONENTS),
        "attribution": modes * len(ATTRIBUTION_COMPONENTS),
        "kernels": modes * KERNEL_ROWS_PER_MODE,
        "nvml": _nvml_rows(config, environment),
        # the timed, cold-start and article-loop blocks of every trial, and a mode's other phases
        "phases": modes * (3 * config.trial_count + PHASES_PER_MODE),
        "modes": modes,
        "metrics": modes * METRIC_ROWS_PER_MODE,
        "repeats": INT_LIMITS["repeats"][1],  # one row per process of a --repeats run
        # a data-parallel run: latency's steady rows and a block of figures per rank and mode
        "rank_latency": _world_size(environment) * modes * timed,
        "ranks": _world_size(environment) * modes * RANK_METRIC_ROWS,
        # a run of changing shapes: a row per strategy, and per step and strategy
        "strategies": SHAPE_STRATEGIES,
        "shape_steps": SHAPE_STRATEGIES * config.total_eager_iters,
    }[name]
    return 2 * rows + ROOM


def _world_size(environment: Mapping[str, Any] | None) -> int:
    """The ranks of a data-parallel run as its environment records them (1 when it does not)."""
    value = (environment or {}).get("world_size", 1)
    if isinstance(value, bool) or not isinstance(value, int):
        return 1
    return min(max(value, 1), MAX_WORLD_SIZE)


def _nvml_rows(config: RunConfig, environment: Mapping[str, Any] | None) -> int:
    duration_s = _duration_s(environment or {})
    if duration_s is None:
        return MAX_NVML_ROWS
    per_second = len(NVML_METRICS) * (1e3 / config.nvml_interval_ms + 1 / DRIVER_SAMPLE_S)
    return max(MIN_NVML_ROWS, int(per_second * (duration_s + 60)))


def _duration_s(environment: Mapping[str, Any]) -> float | None:
    """Seconds from the run's start to its end, when both are recorded (and in order)."""
    try:
        started = datetime.fromisoformat(str(environment["started_at"]))
        finished = datetime.fromisoformat(str(environment["finished_at"]))
        seconds = (finished - started).total_seconds()
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= 30 * 86_400 else None


class TableRefused(ValueError):
    """A table file past a limit (``TableNotText``, ``LineTooLong``, ``TooManyRows``), raised by
    :func:`check_table_stream` for its caller to say in its own words (:func:`check_table_file`:
    a ``RunFormatError``): ``message`` names the file as ``name``, ``limit`` is the limit passed
    (bytes of a line, rows)."""

    def __init__(self, message: str, name: str, limit: int) -> None:
        super().__init__(message)
        self.message, self.name, self.limit = message, name, limit


class TableNotText(TableRefused):
    """The table holds a NUL byte."""


class LineTooLong(TableRefused):
    """A line of the table is over ``limit`` bytes."""


class TooManyRows(TableRefused):
    """More than ``limit`` rows follow the table's header."""


def check_table_stream(stream: IO[bytes], name: str, limit: int,
                       max_line_bytes: int = MAX_LINE_BYTES,
                       on_header: Callable[[bytes], None] | None = None) -> None:
    """Read a table from ``stream`` once, in chunks, and refuse (a ``TableRefused``, its message
    naming the file ``name``) a NUL byte, a line over ``max_line_bytes`` or more than ``limit``
    rows after the header (counted as line breaks: a quoted cell may hold one, so this
    over-counts, never under-counts). ``on_header`` is given the first line (without its line
    break) as soon as it has ended, or at the end of a table of one line. Stops at the first
    problem; memory stays within a chunk and the header. A chunk is no longer than a line may
    be, so only a line running across chunks can be too long."""
    chunk_bytes = min(READ_CHUNK_BYTES, max_line_bytes)
    header = bytearray()  # the first line, until it ends
    lines = 0  # line breaks seen
    open_line = 0  # bytes of the line not ended yet
    while chunk := stream.read(chunk_bytes):
        if b"\x00" in chunk:
            raise TableNotText(f"{name} holds NUL bytes, so it is not a table written by this "
                               "tool", name, 0)
        first_break = chunk.find(b"\n")
        ended = open_line + (len(chunk) if first_break < 0 else first_break)
        if ended > max_line_bytes:
            raise LineTooLong(f"{name} has a line over {max_line_bytes // 1024:,} KiB, longer "
                              "than any line this tool writes", name, max_line_bytes)
        if lines == 0:
            header += chunk if first_break < 0 else chunk[:first_break]
            if first_break >= 0 and on_header is not None:
                on_header(bytes(header))
        open_line = ended if first_break < 0 else len(chunk) - 1 - chunk.rindex(b"\n")
        lines += chunk.count(b"\n")
        if lines - 1 + (open_line > 0) > limit:
            raise TooManyRows(f"{name} has more than {limit:,} rows, more than a run of its "
                              "config ever writes there", name, limit)
    if lines == 0 and on_header is not None:
        on_header(bytes(header))


def check_table_file(path: Path, limit: int) -> None:
    """:func:`check_table_stream` on the file at ``path`` (named by its path), ``MAX_LINE_BYTES``
    a line; a refusal is a ``RunFormatError``."""
    with open(path, "rb") as handle:
        try:
            check_table_stream(handle, str(path), limit)
        except TableRefused as refused:
            raise RunFormatError(refused.message, HINT) from None
