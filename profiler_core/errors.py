"""Typed errors. Every error carries a one-line message and a hint saying what to change."""

from __future__ import annotations


class ProfilerError(Exception):
    """Base class: ``message`` says what went wrong, ``hint`` what to change."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(ProfilerError):
    """A configuration value is out of range; ``field`` names the option."""

    exit_code = 2

    def __init__(self, field: str, message: str, hint: str = "") -> None:
        super().__init__(message, hint)
        self.field = field


class NoCudaError(ProfilerError):
    """A CUDA device was asked for and none is present."""

    exit_code = 3


class RunFormatError(ProfilerError):
    """A run directory or trace file is missing, malformed or of an unknown version."""

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


class TimeLimitReached(KeyboardInterrupt):
    """The run's time limit (``run --timeout``) was reached: raised in the main thread like
    Ctrl-C, so the engine stops and keeps what it measured (marked incomplete)."""

    exit_code = 124  # as GNU timeout's
