"""Stopping a run (profiler_core/engine/stopping.py): the first Ctrl-C, SIGTERM or time limit raises,
later ones wait and say so, the handlers are restored, and the backstop ends a process whose run
never sees the time limit. Signals are sent to this process (the main thread) or to a child."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from profiler_core.engine.stopping import RunStopper
from profiler_core.spec.errors import TimeLimitReached


def _signal_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode, in this (main) thread


def test_the_first_stop_raises_and_later_ones_wait_and_say_so():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    said = io.StringIO()
    with RunStopper(stream=said) as stopper:
        with pytest.raises(KeyboardInterrupt):
            _signal_self(signal.SIGINT)
        assert stopper.reason == "interrupt"
        _signal_self(signal.SIGINT)  # waits: the run is saving what it measured
        _signal_self(signal.SIGTERM)
        assert stopper.deferred == 2
    assert said.getvalue().count("interrupted again") == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_once_saving_a_finished_run_even_the_first_stop_waits():
    said = io.StringIO()
    with RunStopper(stream=said) as stopper:
        stopper.saving()
        _signal_self(signal.SIGTERM)
        assert stopper.reason is None and stopper.deferred == 1
    assert "the run has finished and is being saved" in said.getvalue()


def test_the_time_limit_raises_once_and_is_off_while_saving():
    with RunStopper() as stopper:
        stopper.limit(0.2)
        with pytest.raises(TimeLimitReached, match="no result within the time limit of 0.2 s"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                pass
        assert stopper.reason == "time limit"
    with RunStopper() as stopper:
        stopper.limit(0.2)
        stopper.saving()
        time.sleep(0.4)  # no exception: the limit was cancelled
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_run_that_never_sees_the_time_limit_is_ended_by_the_backstop():
    """SIGALRM blocked stands in for a step stuck in C code: the handler never runs, so the
    backstop thread ends the process (exit 124) and says why."""
    child = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import signal, time
        from profiler_core.engine.stopping import RunStopper
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        with RunStopper(backstop_s=0.3) as stopper:
            stopper.limit(0.2)
            time.sleep(60)
    """)], capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[1])
    assert child.returncode == 124
    assert "did not stop within 0.3 s of its time limit of 0.2 s" in child.stderr
