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
``MAX_TRACE_MB`` MiB (``$PROFILER_CORE_MAX_TRACE_MB`` changes it, up to ``MAX_TRACE_MB_CEILING``);
JSON that does not parse (nested too deep, numbers too long, bad UTF-8); a complete event whose
``ts`` or ``dur`` is not a finite number within ``MAX_TIME_US`` or whose ``dur`` is negative.
What is parsed is bounded, not only its bytes (tiny events compress a thousand to one, and cost
memory as events, not as bytes): :func:`load_trace` reads the file a mebibyte at a time and
parses one event at a time, keeping only the columns this module reads; it refuses more than
``MAX_TRACE_EVENTS`` entries in ``traceEvents`` (``$PROFILER_CORE_MAX_TRACE_EVENTS``), more than
``MAX_TRACE_NAMES`` distinct texts (names, categories, process and thread ids;
``$PROFILER_CORE_MAX_TRACE_NAMES``) and one JSON value over ``MAX_JSON_VALUE_CHARS`` characters.
A text over ``TRACE_TEXT_MAX_CHARS`` characters is cut (ending in "..."), and a lone surrogate in
it (the JSON escape ``"\\ud800"``) becomes U+FFFD, so every name can be written as UTF-8. Text
from the file that a message quotes is cut short and its control characters escaped, so a
message stays on one line.
"""

from __future__ import annotations

import codecs
import gzip
import io
import itertools
import json
import math
import os
import re
import stat
import zlib
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.errors import RunFormatError, shown
from profiler_core.spec.errors import printable as _printable
from profiler_core.spec.progress import Progress, ProgressCallback
from profiler_core.spec.schema import (
    BREAKDOWN_COLUMNS,
    KERNEL_COLUMNS,
    LAUNCH_SPLIT_COLUMNS,
    TABLE_FILES,
)
from profiler_core.storage.csvsafe import csv_bytes
from profiler_core.storage.outputs import replace_file

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
    "mode": str, "kernel": str, "kernel_full": str, "operator": str, "calls_per_iter": "float64",
    "total_us": "float64", "mean_us": "float64", "min_us": "float64", "max_us": "float64",
    "share_of_gpu_pct": "float64",
}
# The operator that launched a kernel: the innermost CPU op (category ``cpu_op``: ``aten::addmm``,
# ``aten::fill_``...) on the launching thread whose span holds the start of the kernel's launch
# call (linked by correlation id), as the PyTorch profiler and HTA attribute kernels to ops. A
# kernel of a graph replay was launched by the replay (``GRAPH_REPLAY_OPERATOR``); one whose call
# has no enclosing op gets "". A kernel launched by several operators lists the most frequent
# first, at most ``OPERATORS_PER_KERNEL`` names of at most ``OPERATOR_NAME_MAX_CHARS`` characters
# (then "+N more"), so a row stays short.
OPERATOR_CATEGORY = "cpu_op"
GRAPH_REPLAY_OPERATOR = "CUDA graph replay"
OPERATORS_PER_KERNEL = 3
OPERATOR_NAME_MAX_CHARS = 200
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
MAX_TRACE_MB_CEILING = 65_536  # the override is taken as this at most (64 GiB)
# What is parsed is bounded too, not only bytes: a trace's events cost memory and time whatever
# their size on disk (tiny events compress 1000:1). A real profiled window of this tool holds a
# few thousand entries per profiled step: the bundled sample's 20 steps hold SAMPLE_TRACE_EVENTS
# entries (1.7 MB of JSON) and SAMPLE_TRACE_NAMES distinct texts.
MAX_TRACE_EVENTS = 1_000_000  # entries of traceEvents, of every kind (about 250 MB of real JSON)
MAX_TRACE_EVENTS_ENV = "PROFILER_CORE_MAX_TRACE_EVENTS"  # overrides MAX_TRACE_EVENTS
MAX_TRACE_EVENTS_CEILING = 100_000_000
MAX_TRACE_NAMES = 20_000  # distinct texts of complete events: names, categories, pids, tids
MAX_TRACE_NAMES_ENV = "PROFILER_CORE_MAX_TRACE_NAMES"  # overrides MAX_TRACE_NAMES
MAX_TRACE_NAMES_CEILING = 10_000_000
SAMPLE_TRACE_EVENTS, SAMPLE_TRACE_NAMES = 6_627, 105
# A text longer than this (real kernel names: under 1,000 characters) is cut, ending in "...".
TRACE_TEXT_MAX_CHARS = KERNEL_NAME_SCAN_CHARS
# One JSON value (an event, or another top-level value) is parsed whole: a real event is a few
# kB at most, so a longer one is refused before it is built.
MAX_JSON_VALUE_CHARS = 2**20
READ_CHUNK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
MAX_TIME_US = 1e18  # |ts| and dur beyond this (31,700 years) are refused: sums stay finite
TRACE_HINT = "pass the file written by torch.profiler's prof.export_chrome_trace(path)"
EVENT_HINT = "the file is not a torch.profiler Chrome trace, or it was edited by hand"
REPORT_TOP_KERNELS = 10
_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

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


@dataclass(frozen=True, eq=False)
class TraceEvents:
    """A trace's complete events, as :func:`load_trace` reads them. Compared by identity.

    ``events`` has ``EVENT_COLUMNS``: ``ts``, ``end``, ``dur`` and ``correlation`` are floats
    (microseconds; NaN for no correlation id), and the text columns ``name``, ``cat`` (lower
    case), ``pid`` and ``tid`` are categorical, each distinct text held once (cut to
    ``TRACE_TEXT_MAX_CHARS``, lone surrogates replaced: see :class:`_EventColumns`).
    """

    events: pd.DataFrame
    entries: int  # entries of the file's traceEvents list, of every kind (flow, metadata...)


def load_trace(path: str | Path, progress: ProgressCallback | None = None) -> TraceEvents:
    """Read a Chrome trace (plain JSON, or gzip recognised by its magic bytes), keeping its
    complete events (:class:`TraceEvents`).

    The file is read and parsed a piece at a time: one event at a time is built as Python
    objects, and only the fields this module uses are kept, as columns. ``progress`` (if given)
    hears after every mebibyte read: done and total are bytes of the file.

    Refuses (``RunFormatError``) what is not a regular file, a file or inflated content over
    :func:`max_trace_bytes`, more than :func:`max_trace_events` entries in ``traceEvents`` or
    more than :func:`max_trace_names` distinct texts, one JSON value (an event) over
    ``MAX_JSON_VALUE_CHARS`` characters, an event whose times are not numbers in range, and
    anything that does not parse as a JSON object with a ``traceEvents`` list.
    """
    path = Path(path)
    where = f"trace {shown(path)}"
    limit = max_trace_bytes()
    columns = _EventColumns(where)
    try:
        handle = _open_regular_file(path, limit)
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise _unreadable(where, error) from None
    with handle:
        size = os.fstat(handle.fileno()).st_size

        def report() -> None:
            if progress is not None:
                progress(Progress("reading the trace", min(handle.tell(), size), size,
                                  f"{columns.entries:,} events"))

        packed = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
        stream = gzip.GzipFile(fileobj=handle, mode="rb") if packed else handle
        text = _JsonText(stream, where, limit, packed, report)
        try:
            _read_trace_object(text, columns)
        except RecursionError:
            raise RunFormatError(f"{where} nests its JSON too deeply to be read",
                                 TRACE_HINT) from None
        except MemoryError:
            raise RunFormatError(f"{where} is too large to parse in this machine's memory",
                                 f"profile fewer steps, or lower {MAX_TRACE_EVENTS_ENV} to refuse "
                                 "such a trace sooner") from None
        except json.JSONDecodeError as error:
            raise text.invalid(error.msg) from None
        except ValueError as error:  # an integer over Python's digit limit
            raise RunFormatError(f"{where} holds a number too long to read "
                                 f"({shown(str(error).split(':')[0], 200)})", TRACE_HINT) from None
    return TraceEvents(columns.frame(), columns.entries)


def _unreadable(where: str, error: BaseException) -> RunFormatError:
    reason = error.strerror if isinstance(error, OSError) and error.strerror else error
    return RunFormatError(f"cannot read {where}: {shown(str(reason), 200)}", TRACE_HINT)


def _limit_from_env(name: str, default: float, ceiling: float, unit: str, example: str) -> float:
    """``$name`` as a positive number, at most ``ceiling`` (a larger one is taken as ``ceiling``);
    ``default`` when unset. Anything else (text, zero, negative, NaN, infinite) is refused."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise RunFormatError(f"{name} is '{shown(text)}', not a positive number of {unit}",
                             f"unset it for the default of {default:,g} {unit}, or set it to a "
                             f"number such as {example}")
    return min(value, ceiling)


def max_trace_bytes() -> int:
    """The largest trace read (file and inflated): ``$PROFILER_CORE_MAX_TRACE_MB`` MiB (at most
    ``MAX_TRACE_MB_CEILING``), else ``MAX_TRACE_MB``."""
    megabytes = _limit_from_env(MAX_TRACE_MB_ENV, MAX_TRACE_MB, MAX_TRACE_MB_CEILING, "MiB",
                                "2048")
    return max(1, int(megabytes * 2**20))


def max_trace_events() -> int:
    """The most entries a trace's traceEvents list may have: ``$PROFILER_CORE_MAX_TRACE_EVENTS``
    (at most ``MAX_TRACE_EVENTS_CEILING``), else ``MAX_TRACE_EVENTS``."""
    return max(1, int(_limit_from_env(MAX_TRACE_EVENTS_ENV, MAX_TRACE_EVENTS,
                                      MAX_TRACE_EVENTS_CEILING, "events", "5000000")))


def max_trace_names() -> int:
    """The most distinct texts (names, categories, process and thread ids) a trace's complete
    events may have: ``$PROFILER_CORE_MAX_TRACE_NAMES`` (at most ``MAX_TRACE_NAMES_CEILING``),
    else ``MAX_TRACE_NAMES``."""
    return max(1, int(_limit_from_env(MAX_TRACE_NAMES_ENV, MAX_TRACE_NAMES,
                                      MAX_TRACE_NAMES_CEILING, "names", "100000")))


def _open_regular_file(path: Path, limit: int) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file (after following links) of at most
    ``limit`` bytes; a pipe is never opened in a way that waits for a writer."""
    where = f"trace {shown(path)}"
    _require_regular(path.stat(), where)
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                         | getattr(os, "O_CLOEXEC", 0))
    handle = open(descriptor, "rb")
    try:
        info = os.fstat(handle.fileno())
        _require_regular(info, where)  # replaced between the check and the opening
        if info.st_size > limit:
            raise _too_large(f"{where} is {info.st_size / 2**20:,.1f} MiB, over the "
                             f"{limit / 2**20:.4g} MiB limit for a trace")
    except BaseException:
        handle.close()
        raise
    return handle


class _JsonText:
    """The JSON text of a byte stream, decoded and parsed a piece at a time.

    Holds the text not parsed yet (a mebibyte, or one JSON value being parsed: at most
    ``MAX_JSON_VALUE_CHARS`` characters), never the whole file. Counts the bytes read against
    ``limit``.
    """

    def __init__(self, stream: io.RawIOBase | gzip.GzipFile, where: str, limit: int,
                 packed: bool, report: Callable[[], None]) -> None:
        self._stream, self.where, self._limit = stream, where, limit
        self._packed, self._report = packed, report
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()
        self._text, self._position = "", 0
        self._read_bytes = 0
        self._ended = False

    def invalid(self, reason: str) -> RunFormatError:
        return RunFormatError(f"{self.where} is not valid (gzipped) JSON: {shown(reason, 200)}",
                              TRACE_HINT)

    def _more(self, at_least: int = 0) -> bool:
        """Read on until ``at_least`` characters are held past the position (one piece at least,
        or up to the end of the stream); False when it had already ended."""
        if self._ended:
            return False
        pieces = [self._text[self._position:]]
        held = len(pieces[0])
        while True:
            try:
                chunk = self._stream.read(READ_CHUNK_BYTES)
            except (OSError, EOFError, zlib.error) as error:
                if not self._packed:
                    raise _unreadable(self.where, error) from None
                raise RunFormatError(f"{self.where} is not valid gzip: {shown(str(error), 200)}",
                                     TRACE_HINT) from None
            self._read_bytes += len(chunk)
            if self._read_bytes > self._limit:
                raise _too_large(f"{self.where} {'inflates to' if self._packed else 'is'} over "
                                 f"the {self._limit / 2**20:.4g} MiB limit for a trace")
            try:
                piece = self._utf8.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                raise self.invalid(str(error)) from None
            pieces.append(piece)
            held += len(piece)
            if not chunk:
                self._ended = True
            if self._ended or held >= at_least:
                break
        self._text, self._position = "".join(pieces), 0
        self._report()
        return True

    def peek(self) -> str:
        """The next character that is not JSON whitespace, left unread ("" at the end)."""
        while True:
            self._position = _JSON_WHITESPACE.match(self._text, self._position).end()
            if self._position < len(self._text):
                return self._text[self._position]
            if not self._more():
                return ""

    def skip(self) -> None:
        """Step over the character :meth:`peek` returned."""
        self._position += 1

    def value(self, what: str) -> Any:
        """The next JSON value, whole (``what`` names it in a refusal). The text held grows (by
        doubling) until the value parses, so one value costs at most about twice its own
        parsing; one over ``MAX_JSON_VALUE_CHARS`` characters is refused unparsed."""
        self.peek()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._text, self._position)
            except json.JSONDecodeError as error:
                # Cut short by the end of the text held (not wrong): an error at the end, or a
                # string still open there (reported where the string starts).
                cut_short = (error.pos >= len(self._text) - 16
                             or error.msg.startswith("Unterminated string"))
                if self._ended or not cut_short:
                    raise self.invalid(error.msg) from None
            else:
                # a value ending exactly at the end of the text held may go on (a number)
                if end < len(self._text) or self._ended:
                    self._position = end
                    return value
            held = len(self._text) - self._position
            if held > MAX_JSON_VALUE_CHARS:
                raise RunFormatError(
                    f"{self.where}: {what} is over {MAX_JSON_VALUE_CHARS / 2**20:g} MiB of JSON "
                    "text (real events are a few kB at most)", EVENT_HINT)
            self._more(at_least=2 * held)


def _read_trace_object(text: _JsonText, columns: _EventColumns) -> None:
    """Parse a trace's top-level object from ``text``, one value at a time: every entry of its
    ``traceEvents`` list goes to ``columns``; its other values are parsed and dropped."""
    if text.peek() != "{":
        text.value("the trace")  # not JSON: that is refused; JSON but not an object: below
        raise _no_event_list(text.where)
    text.skip()
    found = False
    if text.peek() == "}":
        raise _no_event_list(text.where)
    while True:
        key = text.value("a key of the trace")
        if not isinstance(key, str):
            raise text.invalid("Expecting property name enclosed in double quotes")
        if text.peek() != ":":
            raise text.invalid("Expecting ':' delimiter")
        text.skip()
        if key == "traceEvents" and text.peek() == "[":
            text.skip()
            columns.clear()  # a second traceEvents list replaces the first, as in json.loads
            found = True
            if text.peek() == "]":
                text.skip()
            else:
                for index in itertools.count():
                    columns.add(text.value(f"trace event #{index}"), index)
                    character = text.peek()
                    text.skip()
                    if character == "]":
                        break
                    if character != ",":
                        raise text.invalid("Expecting ',' delimiter")
        else:
            text.value(f"the value of '{shown(key)}'")
            found = found and key != "traceEvents"
        character = text.peek()
        text.skip()
        if character == "}":
            break
        if character != ",":
            raise text.invalid("Expecting ',' delimiter")
    if text.peek() != "":
        raise text.invalid("Extra data")
    if not found:
        raise _no_event_list(text.where)


class _EventColumns:
    """The complete ("X") events of a trace, gathered one at a time into columns: times as
    doubles, texts as codes into one list of distinct texts.

    A text is kept once however many events carry it, cut to ``TRACE_TEXT_MAX_CHARS``
    characters (ending in "...") and with any lone surrogate (a JSON escape such as
    ``"\\ud800"``, which UTF-8 cannot encode) replaced by U+FFFD, so every name can be written
    as UTF-8 (CSV, Arrow). Refuses (``RunFormatError``) more than :func:`max_trace_events`
    entries and more than :func:`max_trace_names` distinct texts, and events whose times are
    not numbers in range (see :func:`_microseconds`).
    """

    TEXT_FIELDS = ("name", "cat", "pid", "tid")

    def __init__(self, where: str) -> None:
        self.where = where
        self.max_entries, self.max_texts = max_trace_events(), max_trace_names()
        self.entries = 0  # entries of every kind seen, in every traceEvents list
        self._texts: list[str] = []
        self._code_of: dict[str, int] = {}  # kept text -> its code
        # per field, a value as the JSON has it (a text or an integer) -> its code, so that the
        # usual event costs a dictionary lookup per field (bounded: see _new_code)
        self._seen: dict[str, dict[str | int, int]] = {field: {} for field in self.TEXT_FIELDS}
        self.clear()

    def clear(self) -> None:
        """Forget the events gathered so far (not the count of entries, which the cap reads)."""
        self._codes = {field: array("i") for field in self.TEXT_FIELDS}
        self._times = {column: array("d") for column in ("ts", "dur", "correlation")}

    def add(self, event: object, index: int) -> None:
        """One entry of traceEvents (``index``: its position, named in a refusal)."""
        self.entries += 1
        if self.entries > self.max_entries:
            raise RunFormatError(
                f"{self.where} holds more than {self.max_entries:,} events, the limit for a trace "
                f"(the bundled sample's 20 profiled steps hold {SAMPLE_TRACE_EVENTS:,})",
                f"to read it anyway, set {MAX_TRACE_EVENTS_ENV} to a larger number; or profile "
                "fewer steps")
        if type(event) is not dict or event.get("ph") != "X" or "ts" not in event:
            return
        raw_duration = event.get("dur")
        ts = _microseconds(event, index, "ts")
        dur = 0.0 if raw_duration is None else _microseconds(event, index, "dur")
        if dur < 0:
            raise RunFormatError(f"{_event_label(event, index)} has a negative duration: 'dur' is "
                                 f"{shown(raw_duration)}", EVENT_HINT)
        for field in self.TEXT_FIELDS:
            value = event.get(field, "")
            kind = type(value)
            code = self._seen[field].get(value) if kind is str or kind is int else None
            self._codes[field].append(self._new_code(field, value) if code is None else code)
        times, args = self._times, event.get("args")
        times["ts"].append(ts)
        times["dur"].append(dur)
        times["correlation"].append(
            _correlation_id(args.get("correlation")) if type(args) is dict else math.nan)

    def _new_code(self, field: str, value: object) -> int:
        """The code of a value not seen yet in ``field``: of its text as kept (a new text takes
        the next code, up to the cap)."""
        text = value if type(value) is str else str(value)
        kept = clean_text(text.lower() if field == "cat" else text)
        code = self._code_of.get(kept)
        if code is None:
            if len(self._texts) >= self.max_texts:
                raise RunFormatError(
                    f"{self.where} holds more than {self.max_texts:,} distinct names (event names, "
                    "categories, process and thread ids), the limit for a trace (the bundled "
                    f"sample's hold {SAMPLE_TRACE_NAMES:,})",
                    f"to read it anyway, set {MAX_TRACE_NAMES_ENV} to a larger number")
            code = len(self._texts)
            self._texts.append(kept)
            self._code_of[kept] = code
        seen = self._seen[field]
        # Remembered only when it is short, and while there are few: values that are cut or
        # folded to one kept text (a million spellings of one long name) are not all held.
        if (type(value) is str or type(value) is int) and len(seen) < self.max_texts and (
                len(text) <= TRACE_TEXT_MAX_CHARS):
            seen[value] = code
        return code

    def frame(self) -> pd.DataFrame:
        """The events gathered, ``EVENT_COLUMNS`` (see :class:`TraceEvents`)."""
        texts = pd.Index(self._texts, dtype=object)
        times = {column: np.frombuffer(values, dtype="float64") if len(values) else
                 np.empty(0, dtype="float64") for column, values in self._times.items()}
        columns = {column: pd.Categorical.from_codes(
            np.frombuffer(codes, dtype=np.int32) if len(codes) else np.empty(0, dtype=np.int32),
            categories=texts) for column, codes in self._codes.items()}
        return pd.DataFrame({
            "name": columns["name"], "cat": columns["cat"], "ts": times["ts"],
            "end": times["ts"] + times["dur"], "dur": times["dur"], "pid": columns["pid"],
            "tid": columns["tid"], "correlation": times["correlation"],
        }, columns=EVENT_COLUMNS)


def clean_text(text: str) -> str:
    """``text`` as kept from a trace: at most ``TRACE_TEXT_MAX_CHARS`` characters (a longer one
    is cut and ends in "..."), each lone surrogate replaced by U+FFFD."""
    if len(text) > TRACE_TEXT_MAX_CHARS:
        text = text[: TRACE_TEXT_MAX_CHARS - 3] + "..."
    if not text.isascii():
        text = _LONE_SURROGATE.sub("\ufffd", text)
    return text


def _require_regular(info: os.stat_result, where: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        kind = ("a named pipe" if stat.S_ISFIFO(info.st_mode) else
                "a folder" if stat.S_ISDIR(info.st_mode) else
                "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else
                "a socket" if stat.S_ISSOCK(info.st_mode) else "a special file")
        raise RunFormatError(f"{where} is {kind}, not a regular file",
                             "pass the trace file itself; a link to a file is fine")


def _too_large(message: str) -> RunFormatError:
    return RunFormatError(message, f"to read it anyway, set {MAX_TRACE_MB_ENV} to a larger "
                                   f"number of MiB; the default is {MAX_TRACE_MB}")


def analyse_trace(trace: TraceEvents | dict, mode: str = "trace") -> TraceAnalysis:
    """Cut ``trace`` (read by :func:`load_trace`, or a Chrome trace object as
    ``json.load`` gives it) into iterations and measure each one (see the module docstring)."""
    events, launch_calls, gpu_events, windows, source = _cut(trace)
    launch_calls = launch_calls.assign(
        iteration=_window_of(launch_calls["ts"].to_numpy(), windows)
    )
    launch_split = _launch_split(windows, launch_calls, gpu_events, mode)
    assigned_kernels = gpu_events[
        (gpu_events["iteration"] >= 0) & (gpu_events["cat"] == KERNEL_CATEGORY)
    ]
    assigned_kernels = assigned_kernels.assign(operator=_launching_operators(events, assigned_kernels))
    return TraceAnalysis(
        mode=mode,
        launch_split=launch_split,
        kernels=_kernel_table(assigned_kernels, len(windows), mode),
        iteration_source=source,
        launch_api_names=tuple(sorted({str(name) for name in launch_calls["name"].unique()})),
        gpu_event_count=len(gpu_events),
    )


def _cut(trace: TraceEvents | dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame,
                                             pd.DataFrame, str]:
    """A trace's complete events, its launch calls (outermost per thread; columns
    ``launches``, ``graph_launch``), its GPU events linked to their calls (``call_ts``,
    ``call_end``, ``by_launch_call``) with the ``iteration`` each belongs to (-1: none), its
    iteration windows and their source."""
    events = _events_of(trace)
    api_calls = events[events["cat"].isin(API_CALL_CATEGORIES)]
    api_calls = api_calls.assign(
        launches=_per_text(api_calls["name"], lambda name: _api_name(name) in LAUNCH_API_NAMES,
                           bool),
        graph_launch=_per_text(api_calls["name"],
                               lambda name: _api_name(name) in GRAPH_LAUNCH_API_NAMES, bool),
    )
    launch_calls = _outermost_per_thread(api_calls[api_calls["launches"]])
    windows, source = _iteration_windows(events, launch_calls)
    gpu_events = _link_to_calls(events[events["cat"].isin(GPU_EVENT_CATEGORIES)], api_calls)
    if source == "whole_trace":
        gpu_events = gpu_events.assign(iteration=np.zeros(len(gpu_events), dtype="int64"))
    else:
        gpu_events = gpu_events.assign(iteration=_window_of(gpu_events["call_ts"], windows))
    return events, launch_calls, gpu_events, windows, source


def _launching_operators(events: pd.DataFrame, kernels: pd.DataFrame) -> np.ndarray:
    """For each kernel event, the operator that launched it (see ``OPERATOR_CATEGORY``): the
    innermost ``cpu_op`` on its launch call's thread holding the call's start; the graph replay
    for a kernel launched by ``cudaGraphLaunch``; "" when none is found. One pass per launching
    thread over its ops and calls in time order (a stack of the ops open), so it costs one step
    per event, however deeply ops nest."""
    out = np.full(len(kernels), "", dtype=object)
    if kernels.empty:
        return out
    calls = events[events["cat"].isin(API_CALL_CATEGORIES)].dropna(subset=["correlation"])
    calls = calls.drop_duplicates("correlation")
    calls = calls[calls["correlation"].isin(kernels["correlation"])]
    if calls.empty:
        return out
    graph = _per_text(calls["name"], lambda name: _api_name(name) in GRAPH_LAUNCH_API_NAMES, bool)
    ops = events[events["cat"] == OPERATOR_CATEGORY]
    ops_of_thread = {thread: group for thread, group in ops.groupby(["pid", "tid"], observed=True)}
    by_call: dict[float, str] = {}
    for thread, thread_calls in calls[~graph].groupby(["pid", "tid"], observed=True):
        if thread not in ops_of_thread:
            continue
        thread_ops = ops_of_thread[thread].sort_values(["ts", "end"], ascending=[True, False],
                                                       kind="stable")
        op_ts = thread_ops["ts"].to_numpy(dtype=float)
        op_end = thread_ops["end"].to_numpy(dtype=float)
        op_name = thread_ops["name"].to_numpy(dtype=object)
        ordered = thread_calls.sort_values("ts", kind="stable")
        stack: list[int] = []
        next_op = 0
        for when, correlation in zip(ordered["ts"].to_numpy(dtype=float),
                                     ordered["correlation"].to_numpy(dtype=float)):
            while next_op < len(op_ts) and op_ts[next_op] <= when:
                while stack and op_end[stack[-1]] < op_ts[next_op]:
                    stack.pop()  # ended before this op began: not open any more
                stack.append(next_op)
                next_op += 1
            while stack and op_end[stack[-1]] < when:
                stack.pop()
            if stack:
                by_call[correlation] = str(op_name[stack[-1]])[:OPERATOR_NAME_MAX_CHARS]
    for correlation in calls.loc[graph, "correlation"].to_numpy(dtype=float):
        by_call[correlation] = GRAPH_REPLAY_OPERATOR
    found = kernels["correlation"].map(by_call)
    return np.where(found.notna(), found, "").astype(object)


def _operators_text(operators: pd.Series) -> str:
    """The operators of one kernel's calls in a cell: the most frequent first ('aten::add_,
    aten::mul (+2 more)'); "" when none is known."""
    counts = operators[operators != ""].value_counts(sort=False)
    if counts.empty:
        return ""
    names = sorted(counts.index, key=lambda name: (-counts[name], name))
    text = ", ".join(names[:OPERATORS_PER_KERNEL])
    return text + (f" (+{len(names) - OPERATORS_PER_KERNEL} more)"
                   if len(names) > OPERATORS_PER_KERNEL else "")


def _api_name(name: str) -> str:
    """A CUDA API call's name without its version and per-thread-stream suffixes."""
    return API_NAME_SUFFIX_PATTERN.sub("", name)


def _per_text(texts: pd.Series, function: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``function`` of every row's text (a categorical column of :class:`TraceEvents`), worked
    out once per distinct text present, so a million events cost a million array lookups."""
    codes = texts.cat.codes.to_numpy()
    categories = texts.cat.categories
    table = np.zeros(len(categories), dtype=dtype)
    for code in pd.unique(codes):
        table[code] = function(categories[code])
    return table[codes]


def _is_step_marker(names: pd.Series) -> np.ndarray:
    return _per_text(names, lambda name: re.fullmatch(STEP_MARKER_PATTERN, name) is not None,
                     bool)


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
    text = full_name[:KERNEL_NAME_SCAN_CHARS].replace("(anonymous namespace)", "")
    # Brackets are counted once, with arrays: a name of 4,096 brackets costs microseconds, not a
    # Python loop over its characters at every wrapper looked through.
    codes = _code_points(text)
    steps = _bracket_steps(codes)
    walk = np.cumsum(steps)  # brackets open after each character (a stray closing counts -1)
    start, stop = 0, len(text)  # the part of ``text`` being named
    for level in range(WRAPPER_MAX_DEPTH + 1):
        start, stop = _stripped(text, start, stop)
        depth = walk[start:stop] - (walk[start - 1] if start else 0)
        if level == 0:  # a closing bracket with nothing open is dropped, the depth stays 0
            depth = depth - np.minimum(np.minimum.accumulate(depth), 0) if len(depth) else depth
        # (inside a template argument the depth never drops below where the argument starts)
        outside = codes[start:stop][(steps[start:stop] == 0) & (depth == 0)]
        short = (outside.tobytes().decode("utf-32-le", "surrogatepass").rsplit("::", 1)[-1]
                 .strip() or text[start:stop])
        if short not in WRAPPER_KERNEL_NAMES:
            break
        wrapped = _first_template_argument(text, codes, walk, start, stop)
        if wrapped is None:
            break
        start, stop = wrapped
    short = _printable(short)
    if len(short) > KERNEL_NAME_MAX_CHARS:
        short = short[: KERNEL_NAME_MAX_CHARS - 3] + "..."
    return short


# Words of a kernel's template arguments that never say what it computes: types, numbers'
# suffixes, namespaces and the generic machinery around the functor.
_NOT_A_FUNCTOR = frozenset({
    "void", "bool", "char", "signed", "unsigned", "short", "int", "long", "float", "double",
    "half", "const", "volatile", "ul", "u", "l", "ull", "std", "array", "Array", "c10", "at",
    "native", "detail", "cuda", "memory", "policies", "BFloat16", "Half", "int8_t", "int16_t",
    "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t", "size_t", "ReduceOp",
    "func_wrapper_t", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "TensorListMetadata",
    "TrivialOffsetCalculator", "OffsetCalculator", "LoadWithCast", "StoreWithCast",
    "LoadWithoutCast", "StoreWithoutCast", "TensorInfo", "PhiloxCudaState", "IntDivider",
    "lambda", "operator", "anonymous", "namespace", "BinaryFunctor", "binary_internal",
    "AUnaryFunctor", "BUnaryFunctor",
})
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kernel_label(full_name: str) -> str:
    """:func:`short_kernel_name` with, for a generic kernel, the functor it runs: five kernels all
    called ``vectorized_elementwise_kernel`` become ``vectorized_elementwise_kernel<FillFunctor>``,
    ``...<CUDAFunctorOnSelf_add>``, ``...<mse_kernel_cuda>``... The functor is the first word
    of the kernel's template arguments that names something (not a type, a number, a namespace
    or generic machinery: ``_NOT_A_FUNCTOR``). At most KERNEL_NAME_MAX_CHARS characters, the
    functor kept whole when the name leaves room for it."""
    short = short_kernel_name(full_name)
    text = full_name[:KERNEL_NAME_SCAN_CHARS].replace("(anonymous namespace)", "")
    if short.endswith("...") or short not in text:
        return short
    opening = text.find("<", text.index(short) + len(short))
    if opening != text.index(short) + len(short):  # no template arguments right after the name
        return short
    functor = None
    for match in _WORD.finditer(text, opening + 1):
        word, start, end = match.group(), match.start(), match.end()
        if (text.startswith("::", end) or word in _NOT_A_FUNCTOR or word in WRAPPER_KERNEL_NAMES
                or len(word) < 2 or text[start - 1:start].isdigit()
                or text.endswith("c10::", 0, start)):
            continue
        functor = _printable(word)
        break
    if not functor:
        return short
    room = KERNEL_NAME_MAX_CHARS - len(short) - 2
    if room < 8:
        return short
    if len(functor) > room:
        functor = functor[:room - 3] + "..."
    return f"{short}<{functor}>"


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def _bracket_steps(codes: np.ndarray) -> np.ndarray:
    """+1 at each '<' or '(', -1 at each '>' or ')', 0 elsewhere."""
    opening = (codes == ord("<")) | (codes == ord("("))
    closing = (codes == ord(">")) | (codes == ord(")"))
    return opening.astype(np.int64) - closing


def _stripped(text: str, start: int, stop: int, void: bool = True) -> tuple[int, int]:
    """``text[start:stop]`` without surrounding whitespace and (``void``) a leading "void ", as
    bounds."""
    part = text[start:stop]
    lead = len(part) - len(part.lstrip())
    part = part.strip()
    if void and part.startswith("void "):
        lead += 5 + len(part[5:]) - len(part[5:].lstrip())
        part = part[5:].strip()
    return start + lead, start + lead + len(part)


def _first_template_argument(text: str, codes: np.ndarray, walk: np.ndarray, start: int,
                             stop: int) -> tuple[int, int] | None:
    """Bounds of the text up to the first top-level comma of the first <...> in
    ``text[start:stop]`` (stripped), or None when there is none or it is empty."""
    opening = text.find("<", start, stop)
    if opening < 0:
        return None
    inside = walk[opening]  # the depth just inside the '<'
    after = slice(opening + 1, stop)
    ends = np.flatnonzero((walk[after] == inside - 1)
                          | ((walk[after] == inside) & (codes[after] == ord(","))))
    end = opening + 1 + int(ends[0]) if len(ends) else stop
    start, stop = _stripped(text, opening + 1, end, void=False)
    return (start, stop) if stop > start else None


def _require_event_list(trace: object, where: str) -> None:
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise _no_event_list(where)


def _no_event_list(where: str) -> RunFormatError:
    return RunFormatError(
        f"{where} has no 'traceEvents' list",
        "expected a Chrome trace object as written by prof.export_chrome_trace(path)",
    )


def _events_of(trace: TraceEvents | dict) -> pd.DataFrame:
    """The complete events of ``trace`` (``EVENT_COLUMNS``, as :class:`TraceEvents` holds them),
    with the same limits and refusals as :func:`load_trace`."""
    if isinstance(trace, TraceEvents):
        return trace.events
    _require_event_list(trace, "the trace")
    columns = _EventColumns("the trace")
    for index, event in enumerate(trace["traceEvents"]):
        columns.add(event, index)
    return columns.frame()


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
    furthest_end_before = (ordered.groupby(thread, observed=True)["end"].cummax()
                           .groupby(thread, observed=True).shift())
    nested = (ordered["ts"] < furthest_end_before) & (ordered["end"] <= furthest_end_before)
    return ordered[~nested].sort_index()


def _iteration_windows(events: pd.DataFrame,
                       launch_calls: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """CPU windows ``iteration, cpu_start, cpu_end`` sorted by start, and their source."""
    step_markers = events[
        events["cat"].isin(STEP_MARKER_CATEGORIES).to_numpy() & _is_step_marker(events["name"])
    ]
    graph_launches = launch_calls[launch_calls["graph_launch"]]
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
    launch_correlations = calls.loc[calls["launches"], "correlation"]
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
    per_name = kernels.groupby("name", observed=True).agg(
        calls=("dur", "size"), total_us=("dur", "sum"), mean_us=("dur", "mean"),
        min_us=("dur", "min"), max_us=("dur", "max"),
    ).reset_index()
    all_kernels_us = per_name["total_us"].sum()
    full_names = per_name["name"].to_numpy(dtype=object)
    if "operator" in kernels and len(per_name):
        operators = kernels.groupby("name", observed=True)["operator"].agg(_operators_text)
        operator = operators.reindex(per_name["name"]).fillna("").to_numpy(dtype=object)
    else:
        operator = np.full(len(per_name), "", dtype=object)
    table = pd.DataFrame({
        "mode": mode,
        "kernel": [kernel_label(name) for name in full_names],
        "kernel_full": full_names,
        "operator": operator,
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
TIMELINE_MAX_THREADS = 16  # CPU threads drawn, one lane each (the step's own thread first)
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
    hidden_threads: int = 0  # CPU threads beyond the first TIMELINE_MAX_THREADS, not drawn


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


def iteration_timeline(trace: TraceEvents | dict, iteration: int | None = None,
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
    events, launch_calls, gpu_events, windows, source = _cut(trace)
    empty = pd.DataFrame({c: pd.Series(dtype="float64" if c.endswith("_us") else "object")
                          for c in TIMELINE_COLUMNS})
    if windows.empty:
        return IterationTimeline(0, 0, math.nan, source, empty)
    spans = _spans(windows, gpu_events)
    chosen = typical_iteration(spans) if iteration is None else int(
        min(max(int(iteration), 0), len(windows) - 1))
    window = windows.set_index("iteration").loc[chosen]
    start, end = float(window["cpu_start"]), float(window["cpu_end"])

    def rows(frame: pd.DataFrame, lane, kind, names=None) -> pd.DataFrame:
        # names stay Python objects (each distinct text held once) until the rows are trimmed
        names = frame["name"].to_numpy(dtype=object) if names is None else names
        return pd.DataFrame({"lane": lane, "kind": kind, "name": pd.Series(names, dtype=object),
                             "start_us": frame["ts"].to_numpy() - start,
                             "dur_us": frame["dur"].to_numpy()})

    parts = []
    markers = _is_step_marker(events["name"])
    ops = events[events["cat"].isin(TIMELINE_CPU_OP_CATEGORIES).to_numpy() & ~markers
                 & (events["ts"] >= start).to_numpy() & (events["ts"] <= end).to_numpy()]
    ops = _outermost_per_thread(ops)
    hidden_threads = 0
    if len(ops):
        marker_rows = events[markers & events["cat"].isin(STEP_MARKER_CATEGORIES).to_numpy()]
        main = (marker_rows["pid"].iloc[0], marker_rows["tid"].iloc[0]) if len(marker_rows) else None
        first_ops = ops.sort_values("ts", kind="stable").drop_duplicates(["pid", "tid"])
        threads = list(zip(first_ops["pid"], first_ops["tid"]))
        if main in threads:
            threads.remove(main)
            threads.insert(0, main)
        hidden_threads = max(0, len(threads) - TIMELINE_MAX_THREADS)
        for number, (pid, tid) in enumerate(threads[:TIMELINE_MAX_THREADS], start=1):
            on_thread = ops[(ops["pid"] == pid) & (ops["tid"] == tid)]
            parts.append(rows(on_thread, f"CPU: ops, thread {number}", "CPU op"))
    launches = launch_calls[(launch_calls["ts"] >= start) & (launch_calls["ts"] <= end)]
    if len(launches):
        parts.append(rows(launches, LAUNCH_LANE, "launch call"))
    gpu = gpu_events[gpu_events["iteration"] == chosen]
    if len(gpu):
        is_kernel = (gpu["cat"] == KERNEL_CATEGORY).to_numpy()
        kinds = np.where(is_kernel, "kernel", "memcpy/memset")
        names = np.where(is_kernel, _per_text(gpu["name"], short_kernel_name),
                         gpu["name"].to_numpy(dtype=object))
        parts.append(rows(gpu, GPU_LANE, kinds, names))
    timeline = pd.concat(parts, ignore_index=True) if parts else empty
    dropped = 0
    if len(timeline) > max_events:  # keep the longest events, in their lanes
        keep = timeline["dur_us"].rank(method="first", ascending=False) <= max_events
        dropped = int((~keep).sum())
        timeline = timeline[keep]
    timeline = timeline.sort_values(["start_us"], kind="stable").reset_index(drop=True)
    timeline["name"] = timeline["name"].astype(str)
    return IterationTimeline(chosen, len(windows), float(spans.loc[chosen]), source,
                             timeline[TIMELINE_COLUMNS], dropped, hidden_threads)
