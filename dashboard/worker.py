"""How a run from the page ended, in plain words, and what to change.

Scope: the wording over :class:`profiler_core.orchestration.runjob.RunJob` (which runs the worker
as a background job behind the device's lock, follows its records and classifies the ending):
a title for every error kind of ``profiler_core.spec.errors.ERROR_KINDS``, what follows from it,
what a signal that ended the worker usually means, and :func:`describe_outcome`, which the
Streamlit page shows. No Streamlit here.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from profiler_core.orchestration.runjob import RunSnapshot
from profiler_core.spec.errors import REFUSED_KINDS

# Plain words for every error kind of the schema (a test checks that none is missing).
ERROR_TITLES = {
    "UsageError": "The run was refused: a setting could not be read",
    "ConfigError": "The run was refused: a setting is out of range",
    "NoCudaError": "No CUDA GPU is available to the worker",
    "CaptureError": "The training step could not be captured into a CUDA graph",
    "GpuMemoryError": "Not enough GPU memory for this run",
    "CudaFaultError": "The GPU reported a fault",
    "RunFormatError": "The worker could not read or write a run folder",
    "SaveError": "The run could not be saved in the runs folder",
    "RankError": "A rank of the data-parallel run failed",
    "Interrupted": "The run was interrupted",
    "WorkloadError": "Your training step failed",
    "TimeLimit": "The run reached its own time limit",
}
# What follows from each kind, beyond the worker's own hint.
ERROR_AFTERMATH = {
    "CudaFaultError": "The fault ended the worker process only; the server and the GPU lock are "
                      "fine, and the next run starts in a fresh process.",
    "GpuMemoryError": "The worker released the GPU memory when it exited; the next run starts in a "
                      "fresh process.",
}


SIGNAL_MEANING = {
    "SIGKILL": "Something outside the dashboard killed it; most often the system's out-of-memory "
               "killer, when the machine runs short of host RAM.",
    "SIGSEGV": "It crashed inside native code (a segmentation fault), for example in the CUDA "
               "driver or in PyTorch.",
    "SIGABRT": "It aborted inside native code (for example a failed CUDA or PyTorch assertion).",
    "SIGBUS": "It crashed on a memory access (a bus error), often from a full /dev/shm or disk.",
    "SIGTERM": "Something outside the dashboard asked it to stop.",
}
SIGNAL_HINT = {
    "SIGKILL": "make the run smaller (batch, layer sizes, replays) or free memory on the machine, "
               "then run again",
}


@dataclass(frozen=True)
class Outcome:
    """How a finished job ended, in plain words, for the page (no Streamlit here).

    ``level`` picks the box (success, error, warning), ``title`` is one sentence, ``detail`` says
    what happened, ``hint`` what to change ("" when nothing to change), ``show_log`` whether the
    worker's last lines help.
    """

    level: str
    title: str
    detail: str = ""
    hint: str = ""
    show_log: bool = False


def _sentence(text: str) -> str:
    text = str(text or "").strip()
    return text if not text or text[-1] in ".!?" else text + "."


def describe_outcome(snap: RunSnapshot, field_label=lambda field: field) -> Outcome:
    """Plain words for how ``snap`` ended; ``field_label`` names a refused setting as the sidebar does."""
    name = snap.run_name
    if snap.status == "done":
        return Outcome("success", f"Run {name} finished and is open.")
    if snap.status == "error":
        error = snap.error
        kind = error.kind if error is not None else ""
        message = _sentence((error.message if error is not None else "") or snap.message)
        hint = _sentence(error.hint if error is not None else "")
        if kind in REFUSED_KINDS:
            field = error.field if error is not None else None
            where = f" ({field_label(field)})" if field else ""
            return Outcome("error", f"The run was refused{where}: nothing ran.", message, hint)
        title = ERROR_TITLES.get(kind) or (f"The run stopped with an error ({kind})" if kind
                                           else "The run stopped with an error")
        detail = " ".join(t for t in (message, ERROR_AFTERMATH.get(kind, "")) if t)
        return Outcome("error", f"{title}: run {name} stopped.", detail, hint,
                       show_log=kind not in ERROR_TITLES or kind == "CudaFaultError")
    if snap.status == "timeout":
        limit = f"{snap.timeout_s:g} s" if snap.timeout_s else "its time limit"
        detail = (f"It was still running after {limit}, the limit set under 'Stop a run after (s)' "
                  "in the sidebar, so the worker was stopped")
        detail += (": it did not stop when asked, so it was killed." if snap.killed else ".")
        return Outcome("warning", f"Run {name} was stopped after {limit}.", detail,
                       "Raise 'Stop a run after (s)' (0: no limit), or make the run shorter "
                       "(fewer replays, trials or profiled iterations).", show_log=snap.killed)
    if snap.status == "cancelled":
        if snap.started_at is None:
            return Outcome("warning", f"Run {name} was cancelled before it started.",
                           "It left the queue; nothing ran.")
        detail = "The worker was stopped" + (
            ": it did not stop when asked, so it was killed." if snap.killed else ".")
        return Outcome("warning", f"Run {name} was cancelled.", detail)
    # crashed: killed, a signal, or an exit the worker did not explain
    detail = ""
    hint = "Run it again; if it happens again, the worker's last lines below say where it stopped."
    code = snap.returncode
    if code is not None and code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = ""
        detail = SIGNAL_MEANING.get(signame, "")
        hint = _sentence(SIGNAL_HINT.get(signame, "")) or hint
    elif code is None:
        hint = ""
    detail = " ".join(t for t in (detail, "The server is unaffected and the device lock was "
                                          "released.") if t)
    return Outcome("error", f"Run {name} failed: {_sentence(snap.message)}", detail, hint,
                   show_log=True)
