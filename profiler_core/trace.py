"""Graph-aware analysis of a Chrome trace exported by ``torch.profiler``.

Scope: read a trace written by ``prof.export_chrome_trace(path)`` (plain JSON or gzip), cut it
into iterations, and split each iteration into CPU launch time, other CPU time, GPU busy time and
GPU idle time; list the kernels; decompose a mode's speedup over eager into those parts; write the
tables and a plain-text report; and give the events of one iteration as lanes for drawing
(:func:`iteration_timeline`: CPU ops per thread, launch calls, the GPU work they enqueued). It
reads files and returns DataFrames; it never runs a workload, never imports torch, and never
draws anything.

How a trace is read (Kineto's Chrome-trace export, checked with torch 2.13 on CPU; GPU categories
as listed in GPU-FACTS.md for torch 2.11 on an H200):

- Only complete events (``ph == "X"``) are used; metadata, instant and flow events are skipped.
  ``ts`` and ``dur`` are microseconds; ``ts`` may be a float, an int or a numeric string; a
  missing ``dur`` counts as zero.
- CPU-side CUDA API calls have category ``cuda_runtime`` or ``cuda_driver``; GPU work has
  category ``kernel``, ``gpu_memcpy`` or ``gpu_memset``. A GPU event is linked to the API call
  that enqueued it by ``args["correlation"]``. All kernels of one graph replay carry the
  correlation id of their ``cudaGraphLaunch``.
- Iterations come from the profiler's step markers ``ProfilerStep#N`` on the CPU (category
  ``user_annotation`` in recent torch, ``cpu_op`` in older ones; torch writes them only when the
  profiler has a ``schedule`` and the loop calls ``prof.step()``). Without them, each
  ``cudaGraphLaunch`` is one iteration (its CPU window is the launch call itself); without
  those either, the whole trace is one window.

Per iteration (all in microseconds; an iteration's CPU window is [cpu_start, cpu_end]):

- a GPU event belongs to the iteration whose CPU window contains the start of its linked API
  call; GPU events whose call is not in the trace count only when the whole trace is the window.
- ``cpu_launch_us``: summed duration of the launch calls (``LAUNCH_API_NAMES``) starting in the
  window, on any thread; a launch call nested inside another launch call on the same thread
  (a driver call made by a runtime call) is not counted again. ``launches`` counts them.
- ``cpu_other_us``: window duration minus ``cpu_launch_us`` (negative only if several threads
  launch at the same time).
- ``span_us``: from ``cpu_start`` to the later of ``cpu_end`` and the end of the iteration's last
  GPU event. When the CPU runs ahead of the GPU, consecutive spans overlap and ``gpu_idle_us``
  includes time the GPU spent on the previous iteration's work.
- ``gpu_busy_us``: length of the union of the iteration's GPU intervals (kernels, memcpy,
  memset), clipped to the span; ``gpu_idle_us`` = ``span_us`` - ``gpu_busy_us``.
- ``kernels``: GPU events of category ``kernel`` (memcpy/memset count in busy time only).
- ``launch_delay_us``: median, over the iteration's launch calls that enqueued GPU work, of the
  first GPU start minus the end of the call (a graph launch's first kernel); NaN without any.

What is refused (``RunFormatError``, one line naming the file or the event, and a hint): anything
but a regular file (a link to one is fine; a pipe, device or folder is refused before it is
opened, and the file is opened without blocking); a file, or a gzip's inflated content, over
``MAX_TRACE_MB`` MiB (``$PROFILER_CORE_MAX_TRACE_MB`` raises it; gzip is inflated in chunks and
stops at the cap); JSON that does not parse (nested too deep, numbers too long, bad UTF-8); a
complete event whose ``ts`` or ``dur`` is not a finite number within ``MAX_TIME_US`` or whose
``dur`` is negative. Text from the file that a message quotes is cut short and its control
characters escaped, so a message stays on one line.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from profiler_core.csvsafe import csv_bytes
from profiler_core.errors import RunFormatError, shown
from profiler_core.errors import printable as _printable
from profiler_core.outputs import replace_file
from profiler_core.schema import (
    BREAKDOWN_COLUMNS,
    KERNEL_COLUMNS,
    LAUNCH_SPLIT_COLUMNS,
    TABLE_FILES,
)

# Runtime and driver calls that enqueue GPU work. Trace names may carry a CUPTI version suffix
# ("cudaLaunchKernel_v7000") and a per-thread-stream suffix ("_ptsz", "_ptds"); both are
# stripped before the name is looked up here.
LAUNCH_API_NAMES = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuGraphLaunch",
)
GRAPH_LAUNCH_API_NAMES = ("cudaGraphLaunch", "cuGraphLaunch")

API_CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
GPU_EVENT_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
KERNEL_CATEGORY = "kernel"
STEP_MARKER_CATEGORIES = ("user_annotation", "cpu_op")
# Complete events that are not CPU activity: GPU work, the GPU copy of the step markers, and the
# profiler's own span ("PyTorch Profiler (0)"), which covers more than the recorded work.
NOT_CPU_CATEGORIES = GPU_EVENT_CATEGORIES + ("gpu_user_annotation", "trace")

STEP_MARKER_PATTERN = r"ProfilerStep#\d+"
API_NAME_SUFFIX_PATTERN = re.compile(r"(_ptsz|_ptds)?(_v\d+)?$")

ITERATION_SOURCE_DESCRIPTIONS = {
    "profiler_steps": "the profiler's step markers (ProfilerStep#N), one iteration per step",
    "graph_launches": (
        "graph launches: no ProfilerStep markers were found, so each cudaGraphLaunch is one "
        "iteration, from the launch call to the end of its last kernel"
    ),
    "whole_trace": (
        "the whole trace as one window: no ProfilerStep markers and no graph launches were "
        "found, so the figures are totals for the trace, not per training step"
    ),
}

SUMMARY_FIELDS = (
    "span_us", "cpu_launch_us", "cpu_other_us", "gpu_busy_us", "gpu_idle_us", "launches",
    "kernels", "launch_delay_us",
)
LAUNCH_SPLIT_DTYPES = {
    "mode": str, "iteration": "int64", "span_us": "float64", "cpu_launch_us": "float64",
    "cpu_other_us": "float64", "gpu_busy_us": "float64", "gpu_idle_us": "float64",
    "launches": "int64", "kernels": "int64", "launch_delay_us": "float64",
}
KERNEL_DTYPES = {
    "mode": str, "kernel": str, "kernel_full": str, "calls_per_iter": "float64",
    "total_us": "float64", "mean_us": "float64", "min_us": "float64", "max_us": "float64",
    "share_of_gpu_pct": "float64",
}
BREAKDOWN_DTYPES = {
    "mode": str, "component": str, "eager_us": "float64", "mode_us": "float64",
    "saving_us": "float64", "share_of_saving_pct": "float64",
}

KERNEL_NAME_MAX_CHARS = 60
# Kernel names whose informative part is their first template argument
# (e.g. "cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(...)").
WRAPPER_KERNEL_NAMES = ("Kernel", "Kernel2", "device_kernel")
WRAPPER_MAX_DEPTH = 8  # wrappers inside wrappers looked through, at most
# Characters of a kernel name read to shorten it: the name itself comes before its template
# arguments and parameters (real names seen: under 1,000 characters).
KERNEL_NAME_SCAN_CHARS = 4096

MAX_TRACE_MB = 512  # largest trace read, as a file and inflated (MiB)
MAX_TRACE_MB_ENV = "PROFILER_CORE_MAX_TRACE_MB"  # overrides MAX_TRACE_MB
READ_CHUNK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
MAX_TIME_US = 1e18  # |ts| and dur beyond this (31,700 years) are refused: sums stay finite
TRACE_HINT = "pass the file written by torch.profiler's prof.export_chrome_trace(path)"
EVENT_HINT = "the file is not a torch.profiler Chrome trace, or it was edited by hand"
REPORT_TOP_KERNELS = 10

EVENT_COLUMNS = ["name", "cat", "ts", "end", "dur", "pid", "tid", "correlation"]


@dataclass(frozen=True, eq=False)
class TraceAnalysis:
    """One trace analysed. Compared by identity (its fields are DataFrames)."""

    mode: str  # label written in every row, e.g. "eager" or "graph"
    launch_split: pd.DataFrame  # LAUNCH_SPLIT_COLUMNS, one row per iteration
    kernels: pd.DataFrame  # KERNEL_COLUMNS, kernels of the analysed iterations
    iteration_source: str  # "profiler_steps", "graph_launches" or "whole_trace"
    launch_api_names: tuple[str, ...]  # launch call names found in the trace, as written there
    gpu_event_count: int  # kernel + memcpy + memset events in the whole trace

    def summary(self) -> dict[str, float]:
        """Per-iteration medians of the launch split; NaN where no iteration has a value."""
        medians = {}
        for field in SUMMARY_FIELDS:
            values = self.launch_split[field].dropna()
            medians[field] = float(values.median()) if len(values) else float("nan")
        return medians


def load_trace(path: str | Path) -> dict:
    """Read a Chrome trace (plain JSON, or gzip recognised by its magic bytes).

    Refuses (``RunFormatError``) what is not a regular file, a file or inflated content over
    :func:`max_trace_bytes`, and anything that does not parse as a JSON object with a
    ``traceEvents`` list.
    """
    path = Path(path)
    limit = max_trace_bytes()
    raw = _read_regular_file(path, limit)
    if raw[:2] == GZIP_MAGIC:
        raw = _inflate(raw, path, limit)
    try:
        text = raw.decode("utf-8")
        del raw
        trace = json.loads(text)
    except RecursionError:
        raise RunFormatError(f"trace {shown(path)} nests its JSON too deeply to be read",
                             TRACE_HINT) from None
    except MemoryError:
        raise RunFormatError(f"trace {shown(path)} is too large to parse in this machine's "
                             "memory", f"lower {MAX_TRACE_MB_ENV} or profile fewer steps") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunFormatError(f"trace {shown(path)} is not valid (gzipped) JSON: "
                             f"{shown(str(error), 200)}", TRACE_HINT) from None
    except ValueError as error:  # an integer over Python's digit limit
        raise RunFormatError(f"trace {shown(path)} holds a number too long to read "
                             f"({shown(str(error).split(':')[0], 200)})", TRACE_HINT) from None
    _require_event_list(trace, f"trace {shown(path)}")
    return trace


def max_trace_bytes() -> int:
    """The largest trace read (file and inflated): ``$PROFILER_CORE_MAX_TRACE_MB`` MiB, else
    ``MAX_TRACE_MB``."""
    text = os.environ.get(MAX_TRACE_MB_ENV, "").strip()
    if not text:
        return MAX_TRACE_MB * 2**20
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = math.nan
    if not (math.isfinite(megabytes) and megabytes > 0):
        raise RunFormatError(f"{MAX_TRACE_MB_ENV} is '{shown(text)}', not a positive number of MiB",
                             f"unset it for the default of {MAX_TRACE_MB} MiB, or set it to a "
                             "number such as 2048")
    return max(1, int(megabytes * 2**20))


def _read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file (after following links) of at most
    ``limit`` bytes; a pipe is never opened in a way that waits for a writer."""
    where = f"trace {shown(path)}"
    try:
        _require_regular(path.stat(), where)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_CLOEXEC", 0))
        with open(descriptor, "rb") as handle:
            info = os.fstat(handle.fileno())
            _require_regular(info, where)  # replaced between the check and the opening
            if info.st_size > limit:
                raise _too_large(f"{where} is {info.st_size / 2**20:,.1f} MiB, over the "
                                 f"{limit / 2**20:.4g} MiB limit for a trace")
            raw = handle.read(limit + 1)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise RunFormatError(f"cannot read {where}: {shown(str(reason), 200)}",
                             TRACE_HINT) from None
    if len(raw) > limit:  # it grew while being read
        raise _too_large(f"{where} is over the {limit / 2**20:.4g} MiB limit for a trace")
    return raw


def _require_regular(info: os.stat_result, where: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = ("a named pipe" if stat.S_ISFIFO(info.st_mode) else
                "a folder" if stat.S_ISDIR(info.st_mode) else
                "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "a special file")
        raise RunFormatError(f"{where} is {kind}, not a regular file",
                             "pass the trace file itself; a link to a file is fine")


def _inflate(packed: bytes, path: Path, limit: int) -> bytearray:
    """Gzipped ``packed`` inflated in chunks, refused as soon as it passes ``limit`` bytes."""
    inflated = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(packed)) as reader:
            while chunk := reader.read(READ_CHUNK_BYTES):
                inflated += chunk
                if len(inflated) > limit:
                    raise _too_large(f"trace {shown(path)} inflates to over the "
                                     f"{limit / 2**20:.4g} MiB limit for a trace")
    except (OSError, EOFError, zlib.error) as error:
        raise RunFormatError(f"trace {shown(path)} is not valid gzip: {shown(str(error), 200)}",
                             TRACE_HINT) from None
    return inflated


def _too_large(message: str) -> RunFormatError:
    return RunFormatError(message, f"to read it anyway, set {MAX_TRACE_MB_ENV} to a larger "
                                   f"number of MiB; the default is {MAX_TRACE_MB}")


def analyse_trace(trace: dict, mode: str = "trace") -> TraceAnalysis:
    """Cut ``trace`` into iterations and measure each one (see the module docstring)."""
    _require_event_list(trace, "the trace")
    events = _complete_events(trace["traceEvents"])
    api_calls = events[events["cat"].isin(API_CALL_CATEGORIES)]
    api_calls = api_calls.assign(
        api=api_calls["name"].str.replace(API_NAME_SUFFIX_PATTERN, "", regex=True)
    )
    launch_calls = _outermost_per_thread(api_calls[api_calls["api"].isin(LAUNCH_API_NAMES)])
    gpu_events = events[events["cat"].isin(GPU_EVENT_CATEGORIES)]
    windows, source = _iteration_windows(events, launch_calls)

    launch_calls = launch_calls.assign(
        iteration=_window_of(launch_calls["ts"].to_numpy(), windows)
    )
    gpu_events = _link_to_calls(gpu_events, api_calls)
    if source == "whole_trace":
        gpu_events = gpu_events.assign(iteration=np.zeros(len(gpu_events), dtype="int64"))
    else:
        gpu_events = gpu_events.assign(iteration=_window_of(gpu_events["call_ts"], windows))

    launch_split = _launch_split(windows, launch_calls, gpu_events, mode)
    assigned_kernels = gpu_events[
        (gpu_events["iteration"] >= 0) & (gpu_events["cat"] == KERNEL_CATEGORY)
    ]
    return TraceAnalysis(
        mode=mode,
        launch_split=launch_split,
        kernels=_kernel_table(assigned_kernels, len(windows), mode),
        iteration_source=source,
        launch_api_names=tuple(sorted(launch_calls["name"].unique())),
        gpu_event_count=len(gpu_events),
    )


def decompose_speedup(eager: TraceAnalysis, other: TraceAnalysis) -> pd.DataFrame:
    """Where the per-iteration time went, eager vs ``other`` (one mode's block of breakdown.csv,
    BREAKDOWN_COLUMNS; ``mode`` is ``other.mode`` in every row, ``mode_us`` its times).

    Rows: ``gpu_busy`` (median GPU busy time), ``gpu_idle`` (median span minus median busy, so
    that ``gpu_busy`` + ``gpu_idle`` = ``total_span`` exactly in every column; medians are not
    additive, so this can differ slightly from the median of per-iteration idle times),
    ``total_span`` (median span), then ``cpu_launch`` and ``cpu_other`` (median CPU times: they
    explain the saving but do not add up to it). ``saving_us`` = ``eager_us`` - ``mode_us``;
    ``share_of_saving_pct`` is every row's saving as a percentage of the span saving (NaN when
    the span saving is zero), so a CPU row above 100% means more CPU time was removed than
    span time.
    """
    return decompose_medians(eager.summary(), other.summary(), mode=other.mode)


def decompose_medians(eager: Mapping[str, float], other: Mapping[str, float], *,
                      mode: str) -> pd.DataFrame:
    """:func:`decompose_speedup` from two modes' launch-split medians (``TraceAnalysis.summary``
    or a launch_split.csv's medians): mode ``mode`` (whose medians ``other`` holds) against
    eager, its block of breakdown.csv."""
    eager_us, mode_us = _breakdown_components(eager), _breakdown_components(other)
    span_saving = eager_us["total_span"] - mode_us["total_span"]
    rows = []
    for component in eager_us:
        saving = eager_us[component] - mode_us[component]
        rows.append({
            "mode": mode,
            "component": component,
            "eager_us": eager_us[component],
            "mode_us": mode_us[component],
            "saving_us": saving,
            "share_of_saving_pct": saving / span_saving * 100 if span_saving else float("nan"),
        })
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS).astype(BREAKDOWN_DTYPES)


def _breakdown_components(medians: Mapping[str, float]) -> dict[str, float]:
    return {
        "gpu_busy": medians["gpu_busy_us"],
        "gpu_idle": medians["span_us"] - medians["gpu_busy_us"],
        "total_span": medians["span_us"],
        "cpu_launch": medians["cpu_launch_us"],
        "cpu_other": medians["cpu_other_us"],
    }


def format_report(analysis: TraceAnalysis) -> str:
    """A plain-text report of one analysed trace."""
    split = analysis.launch_split
    lines = [
        f"Trace analysis, mode {analysis.mode!r}",
        f"Iterations: {len(split)}, taken from "
        f"{ITERATION_SOURCE_DESCRIPTIONS[analysis.iteration_source]}.",
        f"GPU events in the trace (kernel, memcpy, memset): {analysis.gpu_event_count}",
        "Launch calls counted: "
        + (", ".join(analysis.launch_api_names) or "none found in this trace"),
        "",
        "Per-iteration medians:",
    ]
    medians = analysis.summary()
    for field in SUMMARY_FIELDS:
        unit = " us" if field.endswith("_us") else ""
        lines.append(f"  {field.removesuffix('_us'):<14}{medians[field]:>12.1f}{unit}")
    lines.append("")
    top = analysis.kernels.head(REPORT_TOP_KERNELS)
    if top.empty:
        lines.append("No GPU kernels in the analysed iterations (a CPU-only profile?).")
        return "\n".join(lines)
    lines.append(f"Top {len(top)} kernels by total time:")
    lines.append(f"  {'kernel':<{KERNEL_NAME_MAX_CHARS}} {'calls/iter':>10} {'total us':>10} "
                 f"{'mean us':>9} {'% of GPU':>8}")
    for kernel in top.itertuples(index=False):
        lines.append(
            f"  {kernel.kernel:<{KERNEL_NAME_MAX_CHARS}} {kernel.calls_per_iter:>10.2f} "
            f"{kernel.total_us:>10.1f} {kernel.mean_us:>9.2f} {kernel.share_of_gpu_pct:>8.1f}"
        )
    return "\n".join(lines)


def write_tables(analysis: TraceAnalysis, out_dir: str | Path) -> list[Path]:
    """Write launch_split.csv and kernels.csv into ``out_dir`` (created if needed), as CSV for a
    user: text that a spreadsheet would run as a formula is made inert (``csvsafe``). Each file
    is written beside its name and renamed over it, so a file hard-linked there from elsewhere is
    replaced, never written through."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table_key, frame in (("launch_split", analysis.launch_split),
                             ("kernels", analysis.kernels)):
        file_name, columns = TABLE_FILES[table_key]
        path = out_dir / file_name
        replace_file(path, csv_bytes(frame[columns]))
        written.append(path)
    return written


def short_kernel_name(full_name: str) -> str:
    """A readable kernel name: no return type, namespaces, template arguments or parameters.

    ``void at::native::(anonymous namespace)::foo<float, 4>(float*)`` -> ``foo``. Generic wrapper
    kernels (``cutlass::Kernel2<cutlass_80_tensorop_...>(...)``) are named by their first
    template argument (looking through at most WRAPPER_MAX_DEPTH wrappers). Only the first
    KERNEL_NAME_SCAN_CHARS characters are read; unprintable characters are escaped. At most
    KERNEL_NAME_MAX_CHARS characters.
    """
    name = full_name[:KERNEL_NAME_SCAN_CHARS]
    for _ in range(WRAPPER_MAX_DEPTH + 1):
        name = name.replace("(anonymous namespace)", "").strip().removeprefix("void ").strip()
        short = _outside_brackets(name).rsplit("::", 1)[-1].strip() or name
        wrapped = _first_template_argument(name)
        if short not in WRAPPER_KERNEL_NAMES or not wrapped:
            break
        name = wrapped
    short = _printable(short)
    if len(short) > KERNEL_NAME_MAX_CHARS:
        short = short[: KERNEL_NAME_MAX_CHARS - 3] + "..."
    return short


def _outside_brackets(name: str) -> str:
    """``name`` without whatever is inside <...> or (...), at any depth."""
    kept, depth = [], 0
    for character in name:
        if character in "<(":
            depth += 1
        elif character in ">)":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(character)
    return "".join(kept)


def _first_template_argument(name: str) -> str:
    """The text up to the first top-level comma of the first <...> in ``name``, or ""."""
    opening = name.find("<")
    if opening < 0:
        return ""
    depth = 0
    for position in range(opening, len(name)):
        character = name[position]
        if character in "<(":
            depth += 1
        elif character in ">)":
            depth -= 1
        if depth == 0 or (depth == 1 and character == ","):
            return name[opening + 1 : position].strip()
    return name[opening + 1 :].strip()


def _require_event_list(trace: object, where: str) -> None:
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise RunFormatError(
            f"{where} has no 'traceEvents' list",
            "expected a Chrome trace object as written by prof.export_chrome_trace(path)",
        )


def _complete_events(raw_events: list) -> pd.DataFrame:
    """The complete ("X") events as a table; categories lower-cased, times in microseconds."""
    records = []
    for index, event in enumerate(raw_events):
        if not isinstance(event, dict) or event.get("ph") != "X" or "ts" not in event:
            continue
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        raw_duration = event.get("dur")
        ts = _microseconds(event, index, "ts")
        dur = 0.0 if raw_duration is None else _microseconds(event, index, "dur")
        if dur < 0:
            raise RunFormatError(f"{_event_label(event, index)} has a negative duration: 'dur' is "
                                 f"{shown(raw_duration)}", EVENT_HINT)
        records.append((
            str(event.get("name", "")),
            str(event.get("cat", "")).lower(),
            ts,
            ts + dur,
            dur,
            str(event.get("pid", "")),
            str(event.get("tid", "")),
            _correlation_id(args.get("correlation")),
        ))
    return pd.DataFrame.from_records(records, columns=EVENT_COLUMNS).astype({
        "name": str, "cat": str, "ts": "float64", "end": "float64", "dur": "float64",
        "pid": str, "tid": str, "correlation": "float64",
    })


def _microseconds(event: dict, index: int, field: str) -> float:
    """``event[field]`` as a float, refused unless finite and at most ``MAX_TIME_US`` in size."""
    value = event[field]
    try:
        number = float(value)
    except (TypeError, ValueError):
        problem = "a non-numeric"
    except OverflowError:  # an integer too large for a float
        problem = "an out-of-range"
    else:
        if abs(number) <= MAX_TIME_US:
            return number
        problem = "a non-finite" if not math.isfinite(number) else "an out-of-range"
    raise RunFormatError(f"{_event_label(event, index)} has {problem} {field!r}: {shown(value)}",
                         EVENT_HINT)


def _event_label(event: dict, index: int) -> str:
    """'trace event #12 ('cudaLaunchKernel')': which event a message is about."""
    return f"trace event #{index} ('{shown(event.get('name', ''))}')"


def _correlation_id(value: object) -> float:
    """Correlation ids as floats (exact below 2**53), NaN when absent or not a finite number."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")
    return number if math.isfinite(number) else float("nan")


def _outermost_per_thread(calls: pd.DataFrame) -> pd.DataFrame:
    """Drop calls that lie inside an earlier call on the same thread (nested driver calls)."""
    ordered = calls.sort_values(["pid", "tid", "ts", "end"], ascending=[True, True, True, False])
    thread = [ordered["pid"], ordered["tid"]]
    furthest_end_before = ordered.groupby(thread)["end"].cummax().groupby(thread).shift()
    nested = (ordered["ts"] < furthest_end_before) & (ordered["end"] <= furthest_end_before)
    return ordered[~nested].sort_index()


def _iteration_windows(events: pd.DataFrame,
                       launch_calls: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """CPU windows ``iteration, cpu_start, cpu_end`` sorted by start, and their source."""
    step_markers = events[
        events["cat"].isin(STEP_MARKER_CATEGORIES)
        & events["name"].str.fullmatch(STEP_MARKER_PATTERN)
    ]
    graph_launches = launch_calls[launch_calls["api"].isin(GRAPH_LAUNCH_API_NAMES)]
    if len(step_markers):
        chosen, source = step_markers, "profiler_steps"
    elif len(graph_launches):
        chosen, source = graph_launches, "graph_launches"
    else:
        cpu_events = events[~events["cat"].isin(NOT_CPU_CATEGORIES)]
        if len(cpu_events):
            start, end = cpu_events["ts"].min(), cpu_events["end"].max()
        else:  # GPU events only, or nothing at all
            start = end = events["ts"].min()
        chosen = pd.DataFrame({"ts": [start], "end": [end]}).dropna()
        source = "whole_trace"
    chosen = chosen.sort_values("ts")
    windows = pd.DataFrame({
        "iteration": np.arange(len(chosen), dtype="int64"),
        "cpu_start": chosen["ts"].to_numpy(dtype="float64"),
        "cpu_end": chosen["end"].to_numpy(dtype="float64"),
    })
    return windows, source


def _window_of(timestamps, windows: pd.DataFrame) -> np.ndarray:
    """Index of the window containing each timestamp, -1 for none (or a NaN timestamp)."""
    timestamps = np.asarray(timestamps, dtype="float64")
    if windows.empty:
        return np.full(len(timestamps), -1, dtype="int64")
    starts, ends = windows["cpu_start"].to_numpy(), windows["cpu_end"].to_numpy()
    candidate = np.searchsorted(starts, timestamps, side="right") - 1
    inside = (candidate >= 0) & (timestamps <= ends[np.maximum(candidate, 0)])
    return np.where(inside, candidate, -1).astype("int64")


def _link_to_calls(gpu_events: pd.DataFrame, api_calls: pd.DataFrame) -> pd.DataFrame:
    """Add the linked API call's start and end (NaN when unlinked) and whether it launches."""
    calls = api_calls.dropna(subset=["correlation"]).drop_duplicates("correlation")
    call_by_correlation = calls.set_index("correlation")
    launch_correlations = calls.loc[calls["api"].isin(LAUNCH_API_NAMES), "correlation"]
    correlation = gpu_events["correlation"]
    return gpu_events.assign(
        call_ts=correlation.map(call_by_correlation["ts"]).astype("float64"),
        call_end=correlation.map(call_by_correlation["end"]).astype("float64"),
        by_launch_call=correlation.isin(launch_correlations),
    )


def _launch_split(windows: pd.DataFrame, launch_calls: pd.DataFrame,
                  gpu_events: pd.DataFrame, mode: str) -> pd.DataFrame:
    """One LAUNCH_SPLIT_COLUMNS row per window (definitions in the module docstring)."""
    split = windows.set_index("iteration")
    per_launch = launch_calls.groupby("iteration")["dur"]
    split["cpu_launch_us"] = per_launch.sum().reindex(split.index, fill_value=0.0)
    split["launches"] = per_launch.size().reindex(split.index, fill_value=0)
    per_gpu_event = gpu_events.groupby("iteration")
    last_gpu_end = per_gpu_event["end"].max().reindex(split.index)
    split["span_end"] = np.fmax(split["cpu_end"], last_gpu_end)
    split["span_us"] = split["span_end"] - split["cpu_start"]
    split["cpu_other_us"] = split["cpu_end"] - split["cpu_start"] - split["cpu_launch_us"]
    split["gpu_busy_us"] = _busy_time(gpu_events, split).reindex(split.index, fill_value=0.0)
    split["gpu_idle_us"] = split["span_us"] - split["gpu_busy_us"]
    is_kernel = (gpu_events["cat"] == KERNEL_CATEGORY).groupby(gpu_events["iteration"])
    split["kernels"] = is_kernel.sum().reindex(split.index, fill_value=0)
    split["launch_delay_us"] = _launch_delays(gpu_events).reindex(split.index)
    split["mode"] = mode
    return split.reset_index()[LAUNCH_SPLIT_COLUMNS].astype(LAUNCH_SPLIT_DTYPES)


def _busy_time(gpu_events: pd.DataFrame, split: pd.DataFrame) -> pd.Series:
    """Per iteration, the length of the union of its GPU intervals clipped to its span.

    With intervals sorted by start, each adds what reaches past the furthest end before it.
    """
    in_windows = gpu_events[gpu_events["iteration"].isin(split.index)]
    lower = split["cpu_start"].reindex(in_windows["iteration"]).to_numpy()
    upper = split["span_end"].reindex(in_windows["iteration"]).to_numpy()
    intervals = pd.DataFrame({
        "iteration": in_windows["iteration"].to_numpy(),
        "start": np.clip(in_windows["ts"].to_numpy(), lower, upper),
        "end": np.clip(in_windows["end"].to_numpy(), lower, upper),
    }).sort_values(["iteration", "start"], kind="stable")
    furthest_end_before = (
        intervals.groupby("iteration")["end"].cummax().groupby(intervals["iteration"]).shift()
    )
    reach_start = np.fmax(intervals["start"], furthest_end_before)
    added = (intervals["end"] - reach_start).clip(lower=0)
    return added.groupby(intervals["iteration"]).sum()


def _launch_delays(gpu_events: pd.DataFrame) -> pd.Series:
    """Per iteration, the median over launch calls of first GPU start minus end of the call."""
    launched = gpu_events[gpu_events["by_launch_call"] & (gpu_events["iteration"] >= 0)]
    per_call = launched.groupby(["iteration", "correlation"]).agg(
        first_gpu_start=("ts", "min"), call_end=("call_end", "first")
    )
    delays = per_call["first_gpu_start"] - per_call["call_end"]
    return delays.groupby(level="iteration").median()


def _kernel_table(kernels: pd.DataFrame, iterations: int, mode: str) -> pd.DataFrame:
    per_name = kernels.groupby("name").agg(
        calls=("dur", "size"), total_us=("dur", "sum"), mean_us=("dur", "mean"),
        min_us=("dur", "min"), max_us=("dur", "max"),
    ).reset_index()
    all_kernels_us = per_name["total_us"].sum()
    table = pd.DataFrame({
        "mode": mode,
        "kernel": per_name["name"].map(short_kernel_name),
        "kernel_full": per_name["name"],
        "calls_per_iter": per_name["calls"] / iterations if iterations else np.nan,
        "total_us": per_name["total_us"],
        "mean_us": per_name["mean_us"],
        "min_us": per_name["min_us"],
        "max_us": per_name["max_us"],
        "share_of_gpu_pct": per_name["total_us"] / all_kernels_us * 100 if all_kernels_us
        else np.nan,
    }, columns=KERNEL_COLUMNS)
    table = table.sort_values(["total_us", "kernel_full"], ascending=[False, True])
    return table.astype(KERNEL_DTYPES).reset_index(drop=True)


# ----------------------------------------------------------------------------- one iteration, drawn

TIMELINE_COLUMNS = ["lane", "kind", "name", "start_us", "dur_us"]
TIMELINE_CPU_OP_CATEGORIES = ("cpu_op", "user_annotation")
TIMELINE_MAX_EVENTS = 4000  # events of one iteration kept for drawing (the longest first)
LAUNCH_LANE = "CPU: launch calls"
GPU_LANE = "GPU: kernels, copies"


@dataclass(frozen=True, eq=False)
class IterationTimeline:
    """The events of one profiled iteration, for drawing its lanes. Compared by identity."""

    iteration: int  # which iteration (0-based, in start order)
    iterations: int  # how many the trace has
    span_us: float  # from the iteration's CPU start to its last CPU or GPU end
    iteration_source: str  # as in TraceAnalysis
    events: pd.DataFrame  # TIMELINE_COLUMNS; start_us from the iteration's CPU start
    dropped: int = 0  # short events left out to stay under TIMELINE_MAX_EVENTS


def _spans(windows: pd.DataFrame, gpu_events: pd.DataFrame) -> pd.Series:
    last_gpu_end = gpu_events[gpu_events["iteration"] >= 0].groupby("iteration")["end"].max()
    ends = np.fmax(windows["cpu_end"].to_numpy(),
                   last_gpu_end.reindex(windows["iteration"]).to_numpy(dtype=float))
    return pd.Series(ends - windows["cpu_start"].to_numpy(), index=windows["iteration"])


def typical_iteration(spans: pd.Series) -> int:
    """The iteration whose span is the median one (the first iteration, often slow, only when
    it is the only one)."""
    candidates = spans.iloc[1:] if len(spans) > 2 else spans
    candidates = candidates.dropna()
    if candidates.empty:
        return int(spans.index[0]) if len(spans) else 0
    ordered = candidates.sort_values(kind="stable")
    return int(ordered.index[(len(ordered) - 1) // 2])


def iteration_timeline(trace: dict, iteration: int | None = None,
                       max_events: int = TIMELINE_MAX_EVENTS) -> IterationTimeline:
    """One iteration of a profiled window as lanes of events, cut at ``ProfilerStep#`` markers
    like :func:`analyse_trace` (the median-span iteration when ``iteration`` is None; an index out
    of range is clamped).

    Lanes: the outermost CPU ops of each thread that has some in the iteration's CPU window
    ("CPU: ops, thread 1" is the thread that ran the step marker), the launch calls starting in
    the window ("CPU: launch calls"), and the GPU work those calls enqueued ("GPU: kernels,
    copies"; kinds "kernel" and "memcpy/memset"). Times are microseconds from the iteration's
    CPU start; ``name`` is the trace's own text (escape it before showing it as markup).
    """
    _require_event_list(trace, "the trace")
    events = _complete_events(trace["traceEvents"])
    api_calls = events[events["cat"].isin(API_CALL_CATEGORIES)]
    api_calls = api_calls.assign(
        api=api_calls["name"].str.replace(API_NAME_SUFFIX_PATTERN, "", regex=True))
    launch_calls = _outermost_per_thread(api_calls[api_calls["api"].isin(LAUNCH_API_NAMES)])
    windows, source = _iteration_windows(events, launch_calls)
    gpu_events = _link_to_calls(events[events["cat"].isin(GPU_EVENT_CATEGORIES)], api_calls)
    if source == "whole_trace":
        gpu_events = gpu_events.assign(iteration=np.zeros(len(gpu_events), dtype="int64"))
    else:
        gpu_events = gpu_events.assign(iteration=_window_of(gpu_events["call_ts"], windows))
    empty = pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith("_us") else "object")
                          for c in TIMELINE_COLUMNS})
    if windows.empty:
        return IterationTimeline(0, 0, math.nan, source, empty)
    spans = _spans(windows, gpu_events)
    chosen = typical_iteration(spans) if iteration is None else int(
        min(max(int(iteration), 0), len(windows) - 1))
    window = windows.set_index("iteration").loc[chosen]
    start, end = float(window["cpu_start"]), float(window["cpu_end"])

    def rows(frame: pd.DataFrame, lane, kind) -> pd.DataFrame:
        return pd.DataFrame({"lane": lane, "kind": kind, "name": frame["name"].to_numpy(),
                             "start_us": frame["ts"].to_numpy() - start,
                             "dur_us": frame["dur"].to_numpy()})

    parts = []
    markers = events["name"].str.fullmatch(STEP_MARKER_PATTERN)
    ops = events[events["cat"].isin(TIMELINE_CPU_OP_CATEGORIES) & ~markers
                 & (events["ts"] >= start) & (events["ts"] <= end)]
    ops = _outermost_per_thread(ops)
    if len(ops):
        marker_rows = events[markers & events["cat"].isin(STEP_MARKER_CATEGORIES)]
        main = (marker_rows["pid"].iloc[0], marker_rows["tid"].iloc[0]) if len(marker_rows) else None
        threads = list(dict.fromkeys(zip(ops.sort_values("ts")["pid"], ops.sort_values("ts")["tid"])))
        if main in threads:
            threads.remove(main)
            threads.insert(0, main)
        for number, (pid, tid) in enumerate(threads, start=1):
            on_thread = ops[(ops["pid"] == pid) & (ops["tid"] == tid)]
            parts.append(rows(on_thread, f"CPU: ops, thread {number}", "CPU op"))
    launches = launch_calls[(launch_calls["ts"] >= start) & (launch_calls["ts"] <= end)]
    if len(launches):
        parts.append(rows(launches, LAUNCH_LANE, "launch call"))
    gpu = gpu_events[gpu_events["iteration"] == chosen]
    if len(gpu):
        kinds = np.where(gpu["cat"] == KERNEL_CATEGORY, "kernel", "memcpy/memset")
        gpu = gpu.assign(name=[short_kernel_name(n) if k == "kernel" else n
                               for n, k in zip(gpu["name"], kinds)])
        parts.append(rows(gpu, GPU_LANE, kinds))
    timeline = pd.concat(parts, ignore_index=True) if parts else empty
    dropped = 0
    if len(timeline) > max_events:  # keep the longest events, in their lanes
        keep = timeline["dur_us"].rank(method="first", ascending=False) <= max_events
        dropped = int((~keep).sum())
        timeline = timeline[keep]
    timeline = timeline.sort_values(["start_us"], kind="stable").reset_index(drop=True)
    return IterationTimeline(chosen, len(windows), float(spans.loc[chosen]), source,
                             timeline[TIMELINE_COLUMNS], dropped)
