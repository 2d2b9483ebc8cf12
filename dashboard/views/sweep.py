"""Sweep: vary one or two settings over a list or a log range, run every point (stop, resume), and
see where CUDA graphs stop paying: speedup with its CI and the crossover, medians beside the
GPU-busy floor, a heat map for two parameters, amortisation, and break-even per point.

The base of a new sweep is a preset on a device. A sweep runs as a background job
(``profiler_core.orchestration.jobs.BackgroundJob``) holding the device's lock, like the Run
button's run, and its points go through a launcher of its own with a pool of warm workers (the
sweep's default, closed when it ends); this page reads its snapshot twice a second.
"""

import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import controls, devices, rundata, state, ui
from dashboard.charts.sweep import sweep_amortisation, sweep_heatmap, sweep_medians, sweep_speedup
from profiler_core.orchestration.jobs import BackgroundJob
from profiler_core.spec import fields
from profiler_core.spec.config import INT_LIMITS, PRESET_DESCRIPTIONS, PRESETS, RunConfig
from profiler_core.spec.errors import ProfilerError
from profiler_core.sweep.analysis import (
    amortisation_table,
    break_even_table,
    crossovers,
    eager_table,
    speedup_table,
)
from profiler_core.sweep.plan import (
    DEFAULT_THRESHOLD,
    PARAMETERS,
    RANGE_EXAMPLE,
    PointTrials,
    SweepAxis,
    SweepPlan,
    parse_values,
)
from profiler_core.sweep.runner import SweepRunner
from profiler_core.sweep.store import (
    FINISHED,
    check_sweep_output,
    list_sweeps,
    load_sweep,
    measured_now,
)

JOB = "sweep_job"
OPEN = "sweep_open"  # the sweep shown (the selector's key)
SELECT = "sweep_select"  # a sweep to show on the next run (set where the selector is already drawn)
SEEN = "sweep_seen_finished"
POLL_S = 0.5
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")
EXAMPLES = {"batch": "1:1024:x2", "width": "256:4096:x2", "d_in": "256:4096:x2",
            "hidden": "256:4096:x2", "d_out": "64:1024:x2", "hidden_layers": "1:16:x2",
            "seq_len": "32:512:x2", "dtype": "fp32,bf16", "capture_iters": "1:8:x2",
            "modes": "graph,compile_ro"}
NONE = "(none)"


def _start(runner: SweepRunner) -> None:
    """Queue a sweep (its folder already written) on the device's lock and start it on a
    background thread; it opens on this page."""
    lock = state.lock_registry().lock(runner.plan.base.device)
    name = runner.folder.name
    job = BackgroundJob(runner, name, lock, state.session_id(), holder=f"sweep {name}").start()
    st.session_state[JOB] = job
    st.session_state[SELECT] = name


def base_for(preset_name: str, device: str) -> RunConfig:
    """A preset on ``device``; on the CPU with the sidebar's small CPU step (seconds per point)."""
    config = PRESETS[preset_name].replace(device=device)
    if device == devices.CPU_DEVICE:
        config = config.replace(**fields.cpu_step_values(config.workload))
    return config


def _job() -> BackgroundJob | None:
    job = st.session_state.get(JOB)
    return job if isinstance(job, BackgroundJob) else None


# ----------------------------------------------------------------------------- a new sweep

st.title("Sweep")
st.caption("Where do CUDA graphs stop paying? Vary one or two settings; each point is a full "
           "measurement with shorter trials, in its own process. Finished points are kept when "
           "you stop, and a stopped sweep resumes where it stopped.")
folder = state.runs_dir()
job = _job()
active = job is not None and job.active

with st.expander("New sweep", expanded=not active and job is None):
    gpus, _ = state.device_list()
    device_options = [*gpus["device"].astype(str), devices.CPU_DEVICE]
    cols = st.columns(2)
    preset_name = cols[0].selectbox("Base preset", list(PRESETS), key="sweep_preset",
                                    help="Every point starts from this preset; the swept values "
                                         "replace its own. (The command line takes any settings.)")
    device = cols[1].selectbox("Device", device_options, key="sweep_device")
    cpu = device == devices.CPU_DEVICE
    base = base_for(preset_name, device)
    st.caption(ui.escape_md(controls.step_text(base.to_dict(), cpu) if cpu else
                            PRESET_DESCRIPTIONS.get(preset_name, "")))
    names = list(PARAMETERS)
    left, right = st.columns(2)
    with left:
        first = st.selectbox("Parameter", names, key="sweep_p1",
                             help="What the sweep varies: " + "; ".join(
                                 f"{n}: {d}" for n, d in PARAMETERS.items()))
        first_values = st.text_input("Values", value=EXAMPLES[first], key=f"sweep_v1_{first}",
                                     help=RANGE_EXAMPLE)
    with right:
        second = st.selectbox("Second parameter (optional)", [NONE, *names], key="sweep_p2")
        second_values = st.text_input("Its values", value=EXAMPLES.get(second, ""),
                                      key=f"sweep_v2_{second}", disabled=second == NONE)
    defaults = PointTrials()
    trial_cols = st.columns(4)
    if cpu:  # a CPU point replays nothing: what it times is the base's eager steps
        eager_steps = trial_cols[0].number_input(
            "Eager steps per point", *INT_LIMITS["eager_iters"], int(base.total_eager_iters),
            key="sweep_eager_iters",
            help="A CPU sweep times the eager step only (CUDA graphs need a GPU), so a point has "
                 "no graph replays to set: it times this many eager steps, split into its trials.")
        base = base.replace(eager_iters=int(eager_steps))
        replays = defaults.replays
    else:
        replays = trial_cols[0].number_input("Replays per point", 1, 100_000, defaults.replays,
                                             key="sweep_replays",
                                             help="Timed graph replays per point (eager times as "
                                                  "many steps).")
    trials = trial_cols[1].number_input("Trials per point (0: automatic)", 0, 1_000, 0,
                                        key="sweep_trials")
    profile = trial_cols[2].toggle("Profile each point", value=defaults.profile and not cpu,
                                   key="sweep_profile", disabled=cpu,
                                   help="A short profiled window per mode gives the GPU-busy "
                                        "floor.")
    profile_iters = trial_cols[3].number_input("Profiled iterations", 1, 1_000,
                                               defaults.profile_iters, key="sweep_profile_iters",
                                               disabled=not profile)
    threshold = st.number_input("Crossover threshold (speedup)", 1.0, 100.0, DEFAULT_THRESHOLD,
                                step=0.05, key="sweep_threshold_new")
    processes = st.number_input("Fresh processes per point", *INT_LIMITS["repeats"], 1,
                                key="sweep_repeats", help=fields.spec("repeats").help)
    base = base.replace(repeats=int(processes))
    name = st.text_input("Sweep folder name (in the runs folder)",
                         value=f"sweep-{first}" + (f"-{second}" if second != NONE else ""),
                         key="sweep_name", max_chars=80)
    plan, problem = None, ""
    try:
        axes = [SweepAxis(first, parse_values(first, first_values))]
        if second != NONE:
            axes.append(SweepAxis(second, parse_values(second, second_values)))
        plan = SweepPlan(tuple(axes), base, PointTrials(
            replays=int(replays), trials=int(trials) or None, profile=bool(profile),
            profile_iters=int(profile_iters)), float(threshold))
        if not NAME.fullmatch(name or "") or ".." in name:
            raise ProfilerError("the folder name must be letters, digits, '.', '_' or '-', at most "
                                "80, starting with a letter or digit")
        check_sweep_output(folder / name)
    except ProfilerError as exc:
        plan, problem = None, str(exc)
    if problem:
        st.error(f"Refused: {ui.escape_md(problem)}", icon=":material/block:")
    elif plan is not None:
        st.caption(f"{len(plan.points()):,} points into {ui.escape_md(folder / name)}.")
    if st.button("Start the sweep", type="primary", key="sweep_start", icon=":material/play_arrow:",
                 disabled=plan is None or active) and plan is not None:
        try:
            _start(SweepRunner.create(plan, folder / name))
        except ProfilerError as exc:
            st.error(f"Refused: {ui.escape_md(exc)}", icon=":material/block:")
        else:
            st.rerun()


# ----------------------------------------------------------------------------- the live sweep


def _progress(job: BackgroundJob) -> None:
    snap = job.snapshot()
    progress = snap["progress"]
    if snap["status"] == "queued":
        st.info(f"Sweep {ui.escape_md(job.name)} waits for the device (another run or sweep holds "
                "it); it starts by itself.", icon=":material/hourglass_top:")
    elif progress is not None:
        elapsed = time.time() - (snap["started_at"] or time.time())
        left = ""
        if 0.02 <= progress.fraction < 1.0 and elapsed > 1:
            left = f" · about {elapsed * (1 - progress.fraction) / progress.fraction:,.0f} s left"
        st.progress(progress.fraction,
                    text=f"Sweep {ui.escape_md(job.name)}: {progress.points_finished} of "
                         f"{progress.points_total} points finished{left}")
        if progress.index is not None:
            st.progress(progress.point_fraction,
                        text=f"Point {progress.index + 1} ({ui.escape_md(progress.label)}): "
                             f"{ui.escape_md(progress.phase)}")
    else:
        st.caption(f"Sweep {ui.escape_md(job.name)}: starting.")
    if st.button("Stop the sweep", key="sweep_stop", icon=":material/stop:",
                 disabled=snap["status"] == "stopping",
                 help="The point being measured is stopped (kept incomplete, measured again on "
                      "resume); every finished point is kept."):
        job.stop()
        st.rerun()


if job is not None:
    if job.active:
        @st.fragment(run_every=POLL_S)
        def live() -> None:
            current = _job()
            if current is None or not current.active:
                st.rerun()  # the whole page: the finished sweep's charts
            snap = current.snapshot()
            finished = snap["progress"].points_finished if snap["progress"] else 0
            if st.session_state.get(SEEN) != finished:
                st.session_state[SEEN] = finished
                st.rerun()  # a point finished: redraw the charts with it
            _progress(current)

        live()
    else:
        snap = job.snapshot()
        if snap["status"] == "done":
            st.success(f"Sweep {ui.escape_md(job.name)} finished.", icon=":material/check_circle:")
        elif snap["status"] == "stopped":
            st.warning(f"Sweep {ui.escape_md(job.name)} stopped"
                       + (f": {ui.escape_md(snap['error'])}" if snap["error"] else "")
                       + ". Its finished points are kept; **Resume** below continues it.",
                       icon=":material/pause_circle:")
        else:
            st.error(f"Sweep {ui.escape_md(job.name)} failed: {ui.escape_md(snap['error'])}",
                     icon=":material/error:")


# ----------------------------------------------------------------------------- open a sweep

st.subheader("Sweeps in the runs folder")
own = list_sweeps(folder)
listed = rundata.sweeps_with_samples(own)
if own.empty:
    st.info(f"No sweep in {ui.escape_md(folder)} yet: start one above, or with "
            "`python -m profiler_core sweep --out <runs folder>/<name> --param batch=1:1024:x2`."
            + (" Below: a sweep measured on an H200 and bundled with the tool." if len(listed)
               else ""))
if listed.empty:
    st.stop()
options = list(listed["name"])
if st.session_state.get(SELECT) in options:
    st.session_state[OPEN] = st.session_state.pop(SELECT)
if st.session_state.get(OPEN) not in options:
    st.session_state[OPEN] = options[0]
labels = {row.name: f"{row.name} · {row.status} · {row.done}/{row.points} measured"
          + (f" · {row.failed} failed" if row.failed else "") + (" · unreadable" if row.problem else "")
          for row in listed.itertuples(index=False)}
chosen = st.selectbox("Sweep", options, key=OPEN, format_func=lambda name: labels[name])
row = listed[listed["name"] == chosen].iloc[0]
if row["problem"]:
    st.error(f"This sweep cannot be opened: {ui.escape_md(row['problem'])}", icon=":material/block:")
    st.stop()
try:
    data = load_sweep(Path(row["path"]))
except ProfilerError as exc:
    st.error(f"This sweep cannot be opened: {ui.escape_md(exc)}", icon=":material/block:")
    st.stop()

running_here = job is not None and active and job.name == data.name
points, plan = data.points, data.plan
finished = int(points["status"].isin(FINISHED).sum())
st.caption(f"{ui.escape_md(data.name)}: {' x '.join(plan.axis_names)}, {len(points)} points, "
           f"{finished} finished ({int((points['status'] == 'failed').sum())} failed) · status "
           f"{'running here' if running_here else ui.escape_md(data.status)} · base preset "
           f"{ui.escape_md(plan.base.preset)} on {ui.escape_md(plan.base.device)}")
if data.status != "done" and not running_here and measured_now(data.folder):
    st.info("This sweep is being measured now by another session or process; its charts grow as "
            "its points finish (reload the page).", icon=":material/hourglass_top:")
elif data.status != "done" and not running_here:
    resumable = not active
    st.info("This sweep is not finished (stopped, or the process running it ended). Resume "
            "measures the points left; finished points are kept.", icon=":material/pause_circle:")
    if st.button("Resume", key="sweep_resume", icon=":material/play_arrow:", disabled=not resumable,
                 help=None if resumable else "Your other sweep is still running."):
        try:
            _start(SweepRunner.resume(data.folder))
        except ProfilerError as exc:
            st.error(f"Cannot resume: {ui.escape_md(exc)}", icon=":material/block:")
        else:
            st.rerun()

# ----------------------------------------------------------------------------- charts

axis_names = plan.axis_names
x = st.radio("Along", axis_names, horizontal=True, key="sweep_x") if len(axis_names) > 1 \
    else axis_names[0]
x_axis = plan.axis(x)
cpu_sweep = plan.base.device == devices.CPU_DEVICE
threshold = float(plan.threshold) if cpu_sweep else st.number_input(  # no speedup on a CPU
    "Crossover threshold (speedup)", 1.0, 100.0, float(plan.threshold), step=0.05,
    key=f"sweep_threshold_{data.name}",
    help="Graphing stops paying where the speedup falls below this.")
table = speedup_table(points, data.point_modes, axis_names, x)
found = crossovers(table, x, threshold, x_axis.numeric)
NO_GRAPH = ("A CPU sweep has no graph timing, and never will: CUDA graphs need a CUDA GPU, so "
            "each point timed the eager step only. There is no speedup and no crossover to show; "
            "eager's medians are drawn below.")
st.subheader("Speedup")
if cpu_sweep:
    st.info(NO_GRAPH, icon=":material/info:")
else:
    ui.chart(sweep_speedup(table, x, threshold, found, x_axis.numeric, x_axis.log_scale),
             key="sweep_speedup")
    if table.empty:
        st.caption("No measured point has a graph timing yet: the chart fills in as points finish.")
    for text in found["text"]:
        st.markdown(f"- {ui.escape_md(text)}")
    ui.table(found.drop(columns=["text"]), f"{data.name}-crossovers.csv", key="sweep_crossovers",
             label="crossovers CSV", empty="No crossover to show: no series has two measured "
                                           "points with a speedup yet.")

medians = table if not table.empty else eager_table(points, data.point_modes, axis_names, x)
st.subheader("Eager's medians" if cpu_sweep else "Medians and the GPU-busy floor")
times = pd.to_numeric(medians[["eager_ms", "mode_ms"]].stack(), errors="coerce")
times = times[times > 0]
wide = len(times) > 1 and float(times.max()) / float(times.min()) > 20
log_y = st.toggle("Log scale for the times", value=bool(wide), key="sweep_log_y")
ui.chart(sweep_medians(medians, x, x_axis.numeric, x_axis.log_scale, log_y),
         key="sweep_medians")
if cpu_sweep:
    st.caption("Eager's median time per training step at each point (wall clock). A CPU sweep has "
               "no profiler window, so no GPU-busy floor.")
elif plan.point_trials.profile:
    st.caption("Floor: the GPU's busy time per training step in the point's profiled window (the "
               "graph's, else eager's): no launch strategy goes below it.")
else:
    st.caption("This sweep ran without the profiler, so no point has a GPU-busy floor.")
ui.table(medians, f"{data.name}-{'eager' if table.empty else 'speedup'}.csv", key="sweep_table",
         label="eager medians CSV" if table.empty else "speedup table CSV",
         empty="No measured point yet.",
         column_order=[*axis_names, "eager_ms"] if table.empty else None,
         column_config={"eager_ms": st.column_config.NumberColumn("eager ms per step",
                                                                  format="%.4f")}
         if table.empty else None)

if len(axis_names) == 2 and cpu_sweep:
    st.subheader("Heat map")
    st.caption("The heat map shows the speedup for two parameters: a CPU sweep has none.")
elif len(axis_names) == 2:
    st.subheader("Heat map")
    y = next(name for name in axis_names if name != x)
    modes = sorted(set(table["mode"].astype(str))) or ["graph"]
    mode = st.selectbox("Mode", modes, index=modes.index("graph") if "graph" in modes else 0,
                        key="sweep_heat_mode") if len(modes) > 1 else modes[0]
    ui.chart(sweep_heatmap(table, x, y, mode, threshold), key="sweep_heatmap")

st.subheader("Amortisation")
amortisation = amortisation_table(table, axis_names)
if cpu_sweep:
    st.caption("Amortisation is how a graph spreads its launch over several captured steps: a CPU "
               "sweep has no graph.")
elif "capture_iters" in axis_names:
    ui.chart(sweep_amortisation(amortisation), key="sweep_amortisation")
    ui.table(amortisation, f"{data.name}-amortisation.csv", key="sweep_amortisation_table",
             label="amortisation CSV")
else:
    st.caption("Sweep capture_iters (iterations per graph, e.g. 1:8:x2) to see how capturing "
               "several training steps in one graph spreads a replay's launch cost.")

st.subheader("Break-even")
st.caption("Per point and mode: the one-time cost (capture with its warm-up, or compilation) and "
           "the memory it kept, against the saving per training step.")
break_even = break_even_table(table, axis_names)
# one word for a mode that never pays back, as everywhere ("never (graph not faster)" in
# pays_back): the steps column shows an empty cell there, not "Infinity"
shown_steps = break_even["break_even_steps"].astype(float)
ui.table(break_even.assign(break_even_steps=shown_steps.where(np.isfinite(shown_steps))),
         f"{data.name}-break-even.csv", key="sweep_break_even", label="break-even CSV",
         column_config={"break_even_steps": st.column_config.NumberColumn(
                            "break-even (steps)", format="%.0f"),
                        "pays_back": st.column_config.TextColumn("pays back")},
         empty=("A CPU sweep has no graph, so nothing to pay back." if cpu_sweep else
                "No measured point with a graph timing yet."))

st.subheader("Points")
ui.table(points, f"{data.name}-points.csv", key="sweep_points", label="points CSV",
         column_config={"error_message": st.column_config.TextColumn(width="large")})
