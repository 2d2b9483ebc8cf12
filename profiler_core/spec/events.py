"""The run's JSON-lines protocol: every record a run process, a warm worker and the launcher write,
declared once as a frozen dataclass.

Scope: one record per line, a JSON object whose ``"event"`` names its kind. A run
(``python -m profiler_core run --progress jsonl``, or a warm worker serving one) writes
:class:`ProgressEvent` records, then :class:`DoneEvent` or :class:`ErrorEvent`, on its stdout; a
warm worker (``engine.serve``) first says :class:`WorkerEvent` ready, then accepted (its
handshake, kept by ``orchestration.child``); the launcher hands its listeners its own
:class:`LauncherNote` records (stopping a run at its time limit, falling back from a warm worker),
which no process writes. Writers call ``to_line()``; readers call :func:`parse`, which refuses a
line that is not one of these records, or one whose fields are missing, unknown or of the wrong
type, with :class:`EventFormatError`. No I/O here.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from profiler_core.spec.progress import Progress

EVENT_KEY = "event"  # the key naming a record's kind
FRACTION_DIGITS = 4  # a progress record's fraction is rounded to this many places


class EventFormatError(ValueError):
    """A line or record that is not one of the protocol's records: ``message`` says what is wrong
    with it, ``hint`` where such records come from."""

    def __init__(self, message: str,
                 hint: str = "records are written by spec.events' to_line(), one per line") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})"


def _check(event: object, types: dict[str, tuple[type, ...]]) -> None:
    """Refuse ``event`` (a record being made) when a field is not of its declared types (a bool
    is no number here, and a number must be finite)."""
    name = type(event).__name__
    for field_name, allowed in types.items():
        value = getattr(event, field_name)
        numeric = any(kind in (int, float) for kind in allowed)
        if (not isinstance(value, allowed) or (numeric and isinstance(value, bool))
                or (isinstance(value, float) and not math.isfinite(value))):
            wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in allowed)
            raise EventFormatError(f"{name}.{field_name} must be {wanted}, not "
                                   f"{type(value).__name__} {value!r:.80}")


def _choice(event: object, field_name: str, allowed: tuple[str, ...]) -> None:
    value = getattr(event, field_name)
    if value not in allowed:
        raise EventFormatError(f"{type(event).__name__}.{field_name} must be one of "
                               f"{', '.join(allowed)}, not {value!r:.80}")


class _Record:
    """What every record does: its dict on the wire (``event`` first, then its fields in order,
    those that are None and optional left out), its line, and reading it back from a dict."""

    EVENT: ClassVar[str]

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {EVENT_KEY: self.EVENT}
        for spec in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, spec.name)
            if value is None and spec.default is None:
                continue  # an optional field that is not there
            record[spec.name] = value
        return record

    def to_line(self) -> str:
        """The record as the one JSON line a process writes (no newline)."""
        return json.dumps(self.to_record())

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Any:
        """The record of this kind from its dict (``event`` included); EventFormatError for a field
        missing, unknown or of the wrong type."""
        declared = {spec.name: spec for spec in fields(cls)}  # type: ignore[arg-type]
        given = set(record) - {EVENT_KEY}
        unknown = sorted(given - set(declared))
        if unknown:
            raise EventFormatError(f"a {cls.EVENT} record has no field {', '.join(map(repr, unknown))}")
        missing = [name for name, spec in declared.items()
                   if name not in given and spec.default is MISSING]
        if missing:
            raise EventFormatError(f"a {cls.EVENT} record lacks {', '.join(map(repr, missing))}")
        return cls(**{name: record[name] for name in given})


@dataclass(frozen=True)
class ProgressEvent(_Record):
    """Where a run is: its phase, work units done of the total, the fraction done (0 to 1)."""

    EVENT: ClassVar[str] = "progress"
    phase: str  # e.g. "warm-up", "timed trials", "profiling graph", "done"
    done: int
    total: int
    fraction: float
    message: str

    def __post_init__(self) -> None:
        _check(self, {"phase": (str,), "done": (int,), "total": (int,), "fraction": (int, float),
                      "message": (str,)})
        if not 0.0 <= self.fraction <= 1.0:
            raise EventFormatError(f"ProgressEvent.fraction must be from 0 to 1, not {self.fraction!r}")

    @classmethod
    def of(cls, progress: Progress) -> ProgressEvent:
        """The record of what the engine reported."""
        return cls(progress.phase, progress.done, progress.total,
                   round(progress.fraction, FRACTION_DIGITS), progress.message)


@dataclass(frozen=True)
class DoneEvent(_Record):
    """The run finished and was written to ``out``."""

    EVENT: ClassVar[str] = "done"
    out: str

    def __post_init__(self) -> None:
        _check(self, {"out": (str,)})


@dataclass(frozen=True)
class ErrorEvent(_Record):
    """The run failed: ``kind`` its error kind (``spec.errors.ERROR_KINDS``, or ProfilerError),
    ``field`` the setting refused (None for any other error), ``message`` one line, ``hint`` what
    to change ("" when nothing)."""

    EVENT: ClassVar[str] = "error"
    kind: str
    field: str | None
    message: str
    hint: str

    def __post_init__(self) -> None:
        _check(self, {"kind": (str,), "field": (str, type(None)), "message": (str,),
                      "hint": (str,)})


@dataclass(frozen=True)
class LauncherNote(_Record):
    """The launcher's own word on a run it follows: ``stopping`` it at its time limit, or a
    ``fallback`` from a warm worker to a fresh process."""

    EVENT: ClassVar[str] = "launcher"
    KINDS: ClassVar[tuple[str, ...]] = ("stopping", "fallback")
    kind: str
    message: str

    def __post_init__(self) -> None:
        _check(self, {"kind": (str,), "message": (str,)})
        _choice(self, "kind", self.KINDS)


@dataclass(frozen=True)
class WorkerEvent(_Record):
    """A warm worker's handshake: ``ready`` (warmed up on ``device`` in ``warm_s`` seconds, process
    ``pid``), then ``accepted`` once it took its run's request."""

    EVENT: ClassVar[str] = "worker"
    STATES: ClassVar[tuple[str, ...]] = ("ready", "accepted")
    state: str
    pid: int | None = None
    device: str | None = None
    warm_s: float | None = None

    def __post_init__(self) -> None:
        _check(self, {"state": (str,), "pid": (int, type(None)), "device": (str, type(None)),
                      "warm_s": (int, float, type(None))})
        _choice(self, "state", self.STATES)


# What a run's listener gets (``orchestration.launcher.RunProcess``'s ``on_event``).
RunEvent = ProgressEvent | DoneEvent | ErrorEvent | LauncherNote
Event = RunEvent | WorkerEvent
EVENT_CLASSES: tuple[type[_Record], ...] = (ProgressEvent, DoneEvent, ErrorEvent, LauncherNote,
                                            WorkerEvent)
_CLASS_OF: dict[str, type[_Record]] = {cls.EVENT: cls for cls in EVENT_CLASSES}


def from_record(record: object) -> Event:
    """The record a dict stands for; EventFormatError for anything else."""
    if not isinstance(record, dict):
        raise EventFormatError(f"a record is a JSON object, not {type(record).__name__}")
    kind = record.get(EVENT_KEY)
    cls = _CLASS_OF.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EventFormatError(f"unknown record kind {kind!r:.80}: the kinds are "
                               f"{', '.join(_CLASS_OF)}")
    event: Event = cls.from_record(record)
    return event


def parse(line: str) -> Event:
    """The record one line holds (surrounding blanks ignored); EventFormatError for a line that is
    not JSON, or not one of the records."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        raise EventFormatError(f"not a JSON line: {line.strip()!r:.80}") from None
    return from_record(record)
