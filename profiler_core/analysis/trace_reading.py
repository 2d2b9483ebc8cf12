"""Reading a Chrome trace exported by ``torch.profiler`` (plain JSON or gzip), bounded.

Scope: :func:`load_trace` streams the file a mebibyte at a time and parses one event at a time,
keeping the complete ("X") events' columns that the analysis reads (:class:`TraceEvents`); it
refuses, in one line with a hint, what is not a regular file, too large, too many events or
names, JSON that does not parse, and events whose times are not numbers in range.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.errors import RunFormatError, shown
from profiler_core.spec.progress import Progress, ProgressCallback

# A text longer than this (real kernel names: under 1,000 characters) is cut, ending in "...".
TRACE_TEXT_MAX_CHARS = 4096
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
# One JSON value (an event, or another top-level value) is parsed whole: a real event is a few
# kB at most, so a longer one is refused before it is built.
MAX_JSON_VALUE_CHARS = 2**20
READ_CHUNK_BYTES = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"
MAX_TIME_US = 1e18  # |ts| and dur beyond this (31,700 years) are refused: sums stay finite
TRACE_HINT = "pass the file written by torch.profiler's prof.export_chrome_trace(path)"
EVENT_HINT = "the file is not a torch.profiler Chrome trace, or it was edited by hand"
_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

EVENT_COLUMNS = ["name", "cat", "ts", "end", "dur", "pid", "tid", "correlation"]


@dataclass(frozen=True, eq=False)
class TraceEvents:
    """A trace's complete events, as :func:`load_trace` reads them. Compared by identity.

    Only complete events (``ph == "X"``) are kept; metadata, instant and flow events are
    skipped. ``ts`` and ``dur`` are microseconds (a float, an int or a numeric string in the
    file); a missing ``dur`` counts as zero.

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

    Refuses (``RunFormatError``, one line naming the file or the event, with a hint; text quoted
    from the file is cut short and its control characters escaped) what is not a regular file (a
    link to one is fine; a pipe, device or folder is refused before it is opened, and the file is
    opened without blocking), a file or inflated content over
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

    def __init__(self, stream: io.BufferedIOBase, where: str, limit: int,
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
            whitespace = _JSON_WHITESPACE.match(self._text, self._position)
            if whitespace is not None:  # always: the pattern matches an empty text too
                self._position = whitespace.end()
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



def per_text(texts: pd.Series, function: Callable[[str], Any], dtype: Any = object) -> np.ndarray:
    """``function`` of every row's text (a categorical column of :class:`TraceEvents`), worked
    out once per distinct text present, so a million events cost a million array lookups."""
    codes = texts.cat.codes.to_numpy()
    categories = texts.cat.categories
    table = np.zeros(len(categories), dtype=dtype)
    for code in pd.unique(codes):
        table[code] = function(categories[code])
    return table[codes]



def _require_event_list(trace: object, where: str) -> None:
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise _no_event_list(where)


def _no_event_list(where: str) -> RunFormatError:
    return RunFormatError(
        f"{where} has no 'traceEvents' list",
        "expected a Chrome trace object as written by prof.export_chrome_trace(path)",
    )


def events_of(trace: TraceEvents | dict) -> pd.DataFrame:
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


def _correlation_id(value: Any) -> float:
    """Correlation ids as floats (exact below 2**53), NaN when absent or not a finite number."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return float("nan")
    return number if math.isfinite(number) else float("nan")

