"""Starting, following and cancelling a run from the page; the GPU lock as other sessions see it.

Scope: the Run button (sidebar), the live panel above every view (progress bar, current phase,
Cancel; or the queue position and who holds the device and since when, for each GPU of a
data-parallel run), and what happens when a run ends (the new run opens, and
:func:`dashboard.worker.describe_outcome` says how it ended). The work itself is done by a
:class:`~profiler_core.orchestration.runjob.RunJob`, a background job behind the lock of every
device it uses, through the server's one warm
:class:`~profiler_core.orchestration.launcher.Launcher` (a spare worker with torch imported and CUDA
up waits for the next run, so a second Run starts fast).
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import streamlit as st

from dashboard import controls, rundata, state, ui, worker
from profiler_core.orchestration.command import REPO_ROOT
from profiler_core.orchestration.gpulock import LockState
from profiler_core.orchestration.launcher import Launcher
from profiler_core.orchestration.runjob import RunJob, RunSnapshot, run_devices
from profiler_core.spec.config import RunConfig, preset_label
from profiler_core.spec.errors import ConfigError

POLL_S = 0.5
HANDLED = "job_handled"


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,120}")


def new_run_name(config: RunConfig, when: float | None = None) -> str:
    """A folder name that sorts by time and says what ran: 20261130-142501-seed-fp32-cuda0-ab12.

    Built only from validated values (a preset name, a dtype, a device), and checked again: it is
    one plain path component, never '..' nor a path.
    """
    stamp = datetime.fromtimestamp(when or time.time()).strftime("%Y%m%d-%H%M%S")
    device = config.device.replace(":", "")
    preset = preset_label(config)  # the step's one label, as every reader shows it
    session = re.sub(r"[^A-Za-z0-9]", "", state.session_id())[:4] or "s"
    name = f"{stamp}-{preset}-{config.dtype}-{device}-{session}"
    if not RUN_NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"unsafe run name {name!r}")
    return name


def new_run_dir(folder: Path, config: RunConfig) -> Path:
    """A fresh folder for the new run directly in ``folder``; never an existing run's folder."""
    folder = folder.resolve()
    base = new_run_name(config)
    out_dir = folder / base
    suffix = 2
    while out_dir.exists() or out_dir.is_symlink():  # a run started in the same second
        out_dir = folder / f"{base}-{suffix}"
        suffix += 1
    if out_dir.parent != folder:
        raise ValueError(f"{out_dir} is not directly in {folder}")
    return out_dir


def _now() -> float:
    """The clock every duration on the page is read from (one place, so tests can fix it)."""
    return time.time()


def duration_text(seconds: float) -> str:
    """'0 s', '59 s', '2 min 5 s', '1 h 4 min': whole seconds, never negative."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _ago(since: float) -> str:
    return duration_text(_now() - since)


def clock_text(when: float) -> str:
    return datetime.fromtimestamp(when).strftime("%H:%M:%S")


MIN_ETA_FRACTION, MIN_ETA_ELAPSED_S = 0.02, 1.0


def eta_seconds(fraction: float, elapsed_s: float) -> float | None:
    """Seconds left if the rest goes at the pace so far; None while too little is done to say
    (under 2% or under a second) and once finished."""
    if not (MIN_ETA_FRACTION <= fraction < 1.0) or elapsed_s < MIN_ETA_ELAPSED_S:
        return None
    return elapsed_s * (1.0 - fraction) / fraction


def eta_text(fraction: float, elapsed_s: float) -> str:
    """'about 35 s left' / 'estimating the time left'."""
    left = eta_seconds(fraction, elapsed_s)
    return "estimating the time left" if left is None else f"about {duration_text(left)} left"


def describe_lock(lock: LockState, own_job: str | None = None,
                  own_started_at: float | None = None) -> str:
    """'cuda:0 is free' / 'cuda:0 is busy: run ... (another session) holds it since 14:02:11
    (35 s ago)'. For this session's own run the time is the run's start, the same one the run
    panel counts from, so the sidebar and the panel always agree."""
    if lock.holder is None:
        return f"{lock.device} is free."
    ticket = lock.holder.ticket
    own = ticket.job_id == own_job
    whose = "your run" if own else (
        "your other tab" if ticket.session == state.session_id() else "another session")
    since = own_started_at if own and own_started_at else lock.holder.since
    text = (f"{lock.device} is busy: run **{ui.escape_md(ticket.run_name)}** "
            f"({whose}) holds it since {clock_text(since)} ({_ago(since)} ago).")
    if lock.waiting:
        text += f" {len(lock.waiting)} run(s) waiting."
    return text


@st.cache_resource
def run_launcher() -> Launcher:
    """The server's one launcher, shared by every session: it keeps a warm worker for the device
    of the last run (stopped when the server exits)."""
    return Launcher(warm=True, cwd=REPO_ROOT)


def start_run(config: RunConfig) -> RunJob:
    """Create the run folder name, queue the job on the lock of every device it uses (each GPU of
    a data-parallel run) and start it."""
    out_dir = new_run_dir(state.runs_dir(), config)
    locks = [state.lock_registry().lock(device) for device in run_devices(config)]
    timeout = float(st.session_state.get(controls.TIMEOUT_KEY) or 0) or None
    job = RunJob(config, out_dir, config.device, locks,
                 session=state.session_id(), timeout_s=timeout, launcher=run_launcher())
    st.session_state[state.JOB] = job
    return job.start()


def run_button(config: RunConfig | None, error: ConfigError | None) -> None:
    """The Run button, disabled while a run of this session is active or a setting is refused."""
    job: RunJob | None = st.session_state.get(state.JOB)
    active = job is not None and job.snapshot().active
    if error is not None:
        st.error(f"Run is disabled: {controls.field_label(error.field)} was refused (see below).")
    devices = run_devices(config) if config is not None else (
        st.session_state.get(controls.DEVICE_KEY),)
    busy = [device for device in devices
            if device and state.lock_registry().lock(device).state().holder is not None]
    if job is not None and active:
        # The panel above the view says who holds the device and for how long; one place only,
        # so the sidebar never shows a second clock that disagrees with it.
        st.caption(f"Your run {ui.escape_md(job.run_name)} is in progress: its progress, time "
                   "left and the device's queue are shown above the view.")
    elif busy:
        _lock_caption(busy[0])
    if st.button("Run", type="primary", key="run_button", disabled=config is None or active,
                 width="stretch", icon=":material/play_arrow:") and config is not None:
        start_run(config)
        st.rerun()


def _lock_caption(device: str) -> None:
    """Who holds the device (another session, or a run of this session that has finished but
    not yet released it) and for how long: redrawn every half second, so it never shows a stale
    "0 s ago"; once the device is free the whole page reruns."""
    @st.fragment(run_every=POLL_S)
    def live() -> None:
        lock = state.lock_registry().lock(device).state()
        if lock.holder is None:
            st.rerun(scope="app")
        st.caption(describe_lock(lock) + " A run started now waits its turn.")

    live()


def handle_finished_job() -> None:
    """Once per finished job: open its run if it wrote one. Call before the sidebar is drawn."""
    job: RunJob | None = st.session_state.get(state.JOB)
    if job is None:
        return
    snap = job.snapshot()
    if snap.active or st.session_state.get(HANDLED) == snap.job_id:
        return
    st.session_state[HANDLED] = snap.job_id
    out_dir = Path(snap.out_dir)
    state.refresh_runs()
    if rundata.is_run_dir(out_dir):
        key = str(out_dir.resolve())
        if out_dir.resolve().parent != state.runs_dir().resolve():
            state.remember_extra_run(out_dir, f"{out_dir.name} (new run)")
        st.session_state[state.OPEN_RUN] = key


def waiting_text(snap: RunSnapshot) -> str:
    """Who holds each device the queued run waits for, and its place in each queue (a
    data-parallel run takes its GPUs in turn, in ascending order)."""
    if len(snap.devices) <= 1:
        lock = state.lock_registry().lock(snap.device).state()
        position = lock.position(snap.job_id)
        return (f"Waiting for {snap.device}: " + describe_lock(lock, snap.job_id)
                + (f" Your run is number {position} in the queue." if position else ""))
    text = f"Waiting for {', '.join(snap.devices)} (taken in this order):"
    for device in snap.devices:
        lock = state.lock_registry().lock(device).state()
        position = lock.position(snap.job_id)
        text += " " + describe_lock(lock, snap.job_id)
        if position:
            text += f" Your run is number {position} in {device}'s queue."
    return text


def _progress(snap: RunSnapshot) -> None:
    if snap.status == "queued":
        st.info(waiting_text(snap), icon=":material/hourglass_top:")
    else:
        phase = snap.phase or snap.status
        text = f"{snap.run_name}: {phase}" + (f" - {snap.message}" if snap.message else "")
        elapsed = _now() - snap.started_at if snap.started_at else 0.0
        eta = eta_text(snap.fraction, elapsed) if snap.started_at else "starting"
        st.progress(snap.fraction, text=f"{ui.escape_md(text)} · {snap.fraction:.0%} · {eta}")
        if snap.started_at:
            st.caption(f"Running for {_ago(snap.started_at)} (since {clock_text(snap.started_at)}) "
                       f"in a worker process on {', '.join(snap.devices) or snap.device}; {eta} (from the pace so far).")
    if st.button("Cancel", key="cancel_run", icon=":material/stop:",
                 disabled=snap.status == "cancelling"):
        st.session_state[state.JOB].cancel()
        st.rerun()


def _result(snap: RunSnapshot) -> None:
    """How this session's last run ended, in plain words, with what to change."""
    if st.session_state.get("job_dismissed") == snap.job_id:
        return
    outcome = worker.describe_outcome(snap, controls.field_label)
    box = {"success": st.success, "warning": st.warning}.get(outcome.level, st.error)
    icon = {"success": ":material/check_circle:", "warning": ":material/warning:"}.get(
        outcome.level, ":material/error:")
    text = f"**{ui.escape_md(outcome.title)}**"
    if outcome.detail:
        text += f" {ui.escape_md(outcome.detail)}"
    if outcome.hint:
        text += f"  \n**What to change:** {ui.escape_md(outcome.hint)}"
    box(text, icon=icon)
    if outcome.show_log and snap.stderr_tail.strip():
        with st.expander("What the worker printed last"):
            st.code(snap.stderr_tail[-3000:], language=None)
    if snap.status != "done" and rundata.is_run_dir(Path(snap.out_dir)):
        st.info("What it measured before it stopped was kept, marked incomplete, and is open.",
                icon=":material/save:")
    if st.button("Dismiss", key="dismiss_run"):
        st.session_state["job_dismissed"] = snap.job_id
        st.rerun()


def job_panel() -> None:
    """Above every view: the live progress of this session's run, or how the last one ended."""
    job: RunJob | None = st.session_state.get(state.JOB)
    if job is None:
        return
    if job.snapshot().active:
        @st.fragment(run_every=POLL_S)
        def live() -> None:
            snap = job.snapshot()
            if not snap.active:
                st.rerun()  # the whole app: open the new run
            _progress(snap)

        live()
    else:
        _result(job.snapshot())
