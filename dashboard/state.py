"""Session and server state: which run is open, the runs folder, shared caches and the GPU locks.

Scope: the Streamlit glue between the sidebar, the views and the file/worker modules. Objects
shared by every session live in ``st.cache_resource`` (the lock registry, loaded runs); the
per-session choices live in ``st.session_state`` under the keys below.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pandas as pd
import streamlit as st

from dashboard import devices, rundata, uploads
from profiler_core import ProfilerError
from profiler_core.analysis import timeline, trace
from profiler_core.analysis.trace_reading import load_trace
from profiler_core.orchestration.gpulock import GpuLockRegistry
from profiler_core.storage import index as run_index
from profiler_core.storage import runfolder

SAMPLE = "sample"  # the option key of the bundled sample run; every other key is a folder path
OPEN_RUN = "open_run"
RUNS_DIR = "runs_dir"
EXTRA_RUNS = "extra_runs"  # paths opened from elsewhere: uploads, runs written to another folder
JOB = "job"
UPLOADS = "uploads"  # this session's SessionUploads (its folder goes when the session ends)


def init_session() -> None:
    ss = st.session_state
    ss.setdefault("session_id", uuid.uuid4().hex[:8])
    ss.setdefault(RUNS_DIR, rundata.default_runs_dir())
    ss.setdefault(EXTRA_RUNS, {})


def session_id() -> str:
    return st.session_state.get("session_id", "?")


@st.cache_resource
def lock_registry() -> GpuLockRegistry:
    """One registry of device locks for every session of this server."""
    return GpuLockRegistry()


@st.cache_data(ttl=15, show_spinner=False)
def device_list() -> tuple[pd.DataFrame, str]:
    return devices.list_devices()


LAST_GOOD_RUNS_DIR = "runs_dir_accepted"


def runs_dir() -> Path:
    """The runs folder typed in the sidebar, resolved; if that is refused, the last one accepted
    in this session (else the default one)."""
    try:
        folder = rundata.resolve_runs_folder(st.session_state.get(RUNS_DIR))
    except ProfilerError:
        last = st.session_state.get(LAST_GOOD_RUNS_DIR)
        return Path(last) if last else Path(rundata.default_runs_dir()).expanduser().resolve()
    st.session_state[LAST_GOOD_RUNS_DIR] = str(folder)
    return folder


def runs_dir_problem() -> str:
    """Why the typed runs folder is refused ('' when it is fine)."""
    try:
        rundata.resolve_runs_folder(st.session_state.get(RUNS_DIR))
    except ProfilerError as exc:
        return str(exc)
    return ""


@st.cache_resource
def upload_store() -> uploads.UploadStore:
    """The server's one folder for uploaded runs (removed when the server exits)."""
    return uploads.UploadStore()


def session_uploads() -> uploads.SessionUploads:
    """This session's uploads, created on first use."""
    store = upload_store()
    current = st.session_state.get(UPLOADS)
    if not isinstance(current, uploads.SessionUploads) or current.store is not store:
        current = store.session()
        st.session_state[UPLOADS] = current
    return current


def forget_extra_runs(paths: list[Path]) -> None:
    """Drop runs (removed uploads) from this session's list of extra runs."""
    extra = st.session_state.get(EXTRA_RUNS, {})
    for path in paths:
        extra.pop(str(Path(path).resolve()), None)


@st.cache_data(ttl=3, show_spinner=False)
def _list_runs(folder: str) -> pd.DataFrame:
    return rundata.list_runs(Path(folder))


def folder_runs() -> pd.DataFrame:
    folder = runs_dir().resolve()
    if run_index.needs_build(folder):
        _build_index_with_progress(folder)
    return _list_runs(str(folder))


# A first index build reads every run's summary: a progress bar from this many folders on.
INDEX_PROGRESS_FROM = 50


def _build_index_with_progress(folder: Path) -> None:
    """Build the runs folder's index (first open, or after an update of its format) with a
    progress bar, so that a folder of a thousand runs does not look frozen for seconds."""
    bar = None
    step = 1

    def show(done: int, total: int) -> None:
        nonlocal bar, step
        if total < INDEX_PROGRESS_FROM:
            return
        if bar is None:
            bar, step = st.progress(0.0), max(1, total // 100)
        if done % step == 0 or done == total:
            bar.progress(done / total, text=f"Indexing the runs folder (once): {done:,} of "
                                            f"{total:,} folders read")

    with run_index.open_index(folder, progress=show):
        pass
    if bar is not None:
        bar.empty()


def refresh_runs() -> None:
    """Forget the cached folder listing (a run was just written)."""
    _list_runs.clear()


def sample_dir() -> Path:
    return rundata.SAMPLE_RUN_DIR


@st.cache_data(show_spinner=False)
def _sample_label(path: str, stamp: float) -> str:
    try:
        env = runfolder.read_summary(Path(path)).environment
    except (ProfilerError, OSError):
        return "Bundled sample run (unreadable)"
    bits = ["Bundled sample run", env.get("gpu_name") or "", str(env.get("started_at") or "")[:10]]
    return " · ".join(b for b in bits if b)


def run_options() -> dict[str, str]:
    """Option key -> label for every run that can be opened now (sample, folder, extra, the
    further bundled samples)."""
    options: dict[str, str] = {}
    if rundata.sample_run_available(sample_dir()):
        summary = sample_dir() / rundata.SUMMARY_FILE
        options[SAMPLE] = _sample_label(str(sample_dir()), summary.stat().st_mtime)
    for row in folder_runs().itertuples(index=False):
        bits = [row.name, row.gpu, row.started]
        if not row.complete:
            bits.append("incomplete")
        if row.problem:
            bits.append("unreadable")
        options[str(Path(row.path).resolve())] = " · ".join(b for b in bits if b)
    for path, label in st.session_state.get(EXTRA_RUNS, {}).items():
        if path not in options and rundata.is_run_dir(Path(path)):
            options[path] = label
    for bundled in rundata.sample_runs():  # after the user's own runs
        label = _sample_label(str(bundled), (bundled / rundata.SUMMARY_FILE).stat().st_mtime)
        options[str(bundled.resolve())] = label.replace("Bundled sample run",
                                                        f"Sample {bundled.name}", 1)
    return options


def short_run_label(options: dict[str, str]):
    """A format_func for the sidebar's run selector: the label's first part (the sample's words or
    the run's folder name), with 'NVIDIA ' dropped from a GPU name, so it fits the box; the whole
    label is written under it."""
    def short(key: str) -> str:
        label = options.get(key, str(key))
        if key == SAMPLE:
            return label.replace("Bundled sample run", "Sample run").replace("NVIDIA ", "")
        name, _, rest = label.partition(" · ")
        flags = [bit for bit in rest.split(" · ") if bit in ("incomplete", "unreadable")]
        return " · ".join([name, *flags])
    return short


def remember_extra_run(path: Path, label: str) -> str:
    key = str(Path(path).resolve())
    st.session_state.setdefault(EXTRA_RUNS, {})[key] = label
    return key


def option_path(key: str) -> Path:
    return sample_dir() if key == SAMPLE else Path(key)


@st.cache_resource(max_entries=12, show_spinner="Opening the run...")
def _load(path: str, source: str, stamp: float) -> rundata.OpenedRun:
    return rundata.open_run(Path(path), source)


def load_option(key: str) -> rundata.OpenedRun:
    """Open a run by option key (cached per folder and summary.json time); ProfilerError if bad."""
    path = option_path(key)
    summary = path / rundata.SUMMARY_FILE
    stamp = summary.stat().st_mtime if summary.is_file() else 0.0
    parent = path.resolve().parent
    source = SAMPLE if key == SAMPLE or parent == rundata.SAMPLE_RUNS_DIR.resolve() else (
        "folder" if parent == runs_dir().resolve() else "other")
    return _load(str(path), source, stamp)


def current_run() -> tuple[rundata.OpenedRun | None, str]:
    """(the open run, or None with one line saying why)."""
    key = st.session_state.get(OPEN_RUN)
    if not key:
        return None, ""
    try:
        return load_option(key), ""
    except (ProfilerError, OSError) as exc:
        return None, f"This run cannot be opened: {exc}"


@st.cache_data(max_entries=16, show_spinner="Reading the trace...")
def _timeline(path: str, stamp: float, iteration: int | None) -> timeline.IterationTimeline:
    return timeline.iteration_timeline(load_trace(path), iteration)


def iteration_timeline(path: Path, iteration: int | None = None) -> timeline.IterationTimeline:
    """One profiled iteration of a run's Chrome trace, cut at its ProfilerStep# markers (cached
    per file and modification time). Raises ``RunFormatError`` for a trace that cannot be read
    (too large, not JSON, hostile values: see ``profiler_core.analysis.trace_reading.load_trace``)."""
    path = Path(path)
    return _timeline(str(path), path.stat().st_mtime, iteration)


@st.cache_data(max_entries=16, show_spinner="Reading the trace...")
def _operators(path: str, stamp: float, mode: str) -> dict[str, str]:
    kernels = trace.analyse_trace(load_trace(path), mode).kernels
    return dict(zip(kernels["kernel_full"].astype(str), kernels["operator"].astype(str)))


def trace_operators(path: Path, mode: str) -> dict[str, str]:
    """Kernel (full name) -> the operator that launched it, read from a run's Chrome trace: for
    runs recorded before kernels.csv had the operator column (cached per file and modification
    time). Raises ``RunFormatError`` for a trace that cannot be read."""
    path = Path(path)
    return _operators(str(path), path.stat().st_mtime, mode)
