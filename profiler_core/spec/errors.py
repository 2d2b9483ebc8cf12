"""Typed errors, each with a one-line message and a hint saying what to change, and the error
kinds they stand for: every class declares its exit code, and ``ERROR_KINDS`` (the kind in a
worker's JSON-lines error record -> the command line's exit code) is derived from the classes."""

from __future__ import annotations

import os
from typing import Any, ClassVar

ECHO_MAX_CHARS = 80  # characters of input text quoted in an error message


def shown(value: object, limit: int = ECHO_MAX_CHARS) -> str:
    """Text from input fit to quote in a one-line message: at most ``limit`` characters (then
    "..."), unprintable characters escaped (a line break shows as ``\\n``). A list or object
    is named, not printed; so is an integer too long to print."""
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        text = text if isinstance(text, str) else os.fsdecode(text)
    elif isinstance(value, list):
        text = "a JSON list"
    elif isinstance(value, dict):
        text = "a JSON object"
    else:
        try:
            text = repr(value)
        except ValueError:  # an integer over Python's digit limit
            text = "a number too long to print"
    return printable(text[:limit]) + ("..." if len(text) > limit else "")


def quoted(value: object) -> str:
    """``value`` as ``{value!r}`` would quote it in a message ('text' in quotes, other values
    as they print), shortened by :func:`shown`."""
    return f"'{shown(value)}'" if isinstance(value, str) else shown(value)


def shown_int(value: int) -> str:
    """A whole number for a message, its digits grouped (1,048,576), shortened by :func:`shown`
    (a 400-digit number is not echoed whole)."""
    try:
        return shown(f"{value:,}")
    except ValueError:  # over Python's digit limit
        return shown(value)


def printable(text: str) -> str:
    """``text`` with every unprintable character (control, line or paragraph separator, lone
    surrogate) written as its escape, e.g. ``\\n`` or ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ProfilerError(Exception):
    """Base class: ``message`` says what went wrong, ``hint`` what to change. Each subclass is an
    error kind named after the class (``kind``), with its own ``exit_code``; ``refused`` says that
    nothing ran (the input was refused)."""

    exit_code: ClassVar[int] = 1
    refused: ClassVar[bool] = False
    kind: ClassVar[str] = "ProfilerError"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.kind = cls.__name__

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(ProfilerError):
    """A command line that cannot be parsed; the message is one line naming the option."""

    exit_code = 2
    refused = True


class ConfigError(ProfilerError):
    """A configuration value is out of range; ``field`` names the option."""

    exit_code = 2
    refused = True

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.field = field


class NoCudaError(ProfilerError):
    """A CUDA device was asked for and none is present."""

    exit_code = 3


class RunFormatError(ProfilerError):
    """A run directory or trace file is missing, malformed or of an unknown version."""

    exit_code = 2


class WorkloadError(ProfilerError):
    """The user's workload cannot be loaded or does not return what the tool needs, or their
    code failed while it ran."""

    exit_code = 2


class CaptureError(ProfilerError):
    """The training step could not be captured into a CUDA graph."""

    exit_code = 4


class GpuMemoryError(ProfilerError):
    """The run needs more GPU memory than is free (estimated before running, or a real OOM)."""

    exit_code = 5


class CudaFaultError(ProfilerError):
    """The GPU reported an error that leaves this process's CUDA context unusable."""

    exit_code = 6


class SaveError(ProfilerError):
    """A run could not be written where asked (a full disk...): the message says where it was
    saved instead, or that nothing could be saved and why."""

    exit_code = 7


class RankError(ProfilerError):
    """A rank of a data-parallel run failed with an error that is none of the tool's kinds (those
    are reported as their own kind); the message names the rank and its error."""

    exit_code = 8


class TimeLimitReached(KeyboardInterrupt):
    """The run's time limit (``run --timeout``) was reached: raised in the main thread like
    Ctrl-C, so the engine stops and keeps what it measured (marked incomplete)."""

    kind: ClassVar[str] = "TimeLimit"
    exit_code: ClassVar[int] = 124  # as GNU timeout's
    refused: ClassVar[bool] = False


# Ctrl-C or a stop signal (any other KeyboardInterrupt): the shell's exit code for SIGINT.
INTERRUPTED = "Interrupted"
INTERRUPTED_EXIT_CODE = 130

# Every error the tool reports, in this order: the first kind listed for an exit code is the one
# that code stands for when a process died before writing its error record (2: a refused input).
ERROR_CLASSES: tuple[type[ProfilerError] | type[TimeLimitReached], ...] = (
    UsageError, ConfigError, NoCudaError, CaptureError, GpuMemoryError, CudaFaultError,
    RunFormatError, SaveError, WorkloadError, RankError, TimeLimitReached)
# The kind in a worker's JSON-lines error record -> the command line's exit code.
ERROR_KINDS: dict[str, int] = {
    **{cls.kind: cls.exit_code for cls in ERROR_CLASSES}, INTERRUPTED: INTERRUPTED_EXIT_CODE}
# The kinds that mean "this input was refused: nothing ran".
REFUSED_KINDS: tuple[str, ...] = tuple(cls.kind for cls in ERROR_CLASSES if cls.refused)


def kind_and_exit_code(error: BaseException) -> tuple[str, int]:
    """The error kind and exit code that report ``error`` (an error of the tool, the time limit,
    or Ctrl-C); ("ProfilerError", 1) for anything else."""
    if isinstance(error, (ProfilerError, TimeLimitReached)):
        return error.kind, error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return INTERRUPTED, INTERRUPTED_EXIT_CODE
    return ProfilerError.kind, ProfilerError.exit_code
