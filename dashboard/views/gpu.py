"""GPU: NVML time series (utilisation, SM clock, power, memory) with the run's phases shaded,
zoomed to the phases picked (by default from the first measured phase on: the setup before it,
loading CUDA and building the replicas, can take most of the run's clock)."""

import streamlit as st

from dashboard import run_facts, ui
from dashboard.analysis.run_kind import is_cpu_run
from dashboard.charts.gpu import nvml_timeseries
from profiler_core.engine.telemetry import NVML_UTILISATION_CAVEAT as CAVEAT

run = ui.require_run()
ui.run_header(run, "GPU telemetry (NVML)")
cpu = is_cpu_run(run.config, run.environment)
if not cpu:
    st.warning(CAVEAT, icon=":material/info:")
nvml, phases = run.table("nvml"), run.table("phases")
summary = run_facts.phase_summary(phases)
x_range = None
default = run_facts.default_phase_range(summary)
if len(summary) > run_facts.MAX_PHASE_CHOICES and not nvml.empty:
    st.caption(f"This run has {len(summary):,} phase names, too many to pick a range from "
               f"(at most {run_facts.MAX_PHASE_CHOICES}): the chart shows the whole run.")
elif default is not None and len(summary) > 1 and not nvml.empty:
    names = list(summary["phase"])
    first, last = st.select_slider(
        "Phases shown", options=names, value=default, key="gpu_phase_range",
        format_func=str,
        help="Zoom the time axis to these phases (from the start of the first to the end of the "
             "last). The setup before the first measured phase (loading CUDA, building the "
             "replicas) is left out at first, so the timed trials fill the chart.")
    x_range = run_facts.phase_window(summary, first, last)
    st.caption(f"Showing {x_range[0]:.2f}-{x_range[1]:.2f} s of the run." if x_range else "")
no_nvml = ("a CPU run: NVML reads NVIDIA GPUs only" if cpu
           else "NVML off or unavailable" if run.complete else "NVML off, unavailable, or the "
           "run stopped before its samples were read")
ui.chart(nvml_timeseries(nvml, phases, x_range=x_range,
                                empty_message=f"no NVML samples in this run ({no_nvml})"),
         key="gpu_nvml")
st.caption("Shaded bands are the run's phases on the same clock, coloured by what they do (warm-up, "
           "capture, timed trials, profiled windows...); the lanes under the panels say which mode "
           "each belongs to (hover for its name and times). Lines: polled readings; dots: the "
           "driver's own buffered samples. Polling pauses during the timed trials (so it cannot "
           "slow them): the lines break there, the pause is shaded grey, and only the driver's "
           "samples cover it.")
left, right = st.columns(2)
with left:
    st.subheader("Phases")
    ui.table(summary, f"{run.name}-phase_summary.csv", key="gpu_phases", label="phase summary CSV",
             empty="No phases recorded in this run.",
             column_config={c: st.column_config.NumberColumn(format="%.3f")
                            for c in ("first_start_s", "last_end_s", "total_s")})
    ui.csv_download(phases, f"{run.name}-phases.csv", key="gpu_phases_raw",
                    label="every phase block (phases.csv)")
with right:
    st.subheader("Samples")
    summary_nvml = (nvml.groupby(["metric", "source"])["value"].agg(["count", "mean", "min", "max"])
                    .reset_index() if not nvml.empty else nvml)
    ui.table(summary_nvml, f"{run.name}-nvml_summary.csv", key="gpu_summary", label="summary CSV",
             empty=f"No NVML samples in this run ({no_nvml}).",
             column_config={"count": st.column_config.NumberColumn(format="%d"),
                            **{c: st.column_config.NumberColumn(format="%.1f")
                               for c in ("mean", "min", "max")}})
    ui.csv_download(nvml, f"{run.name}-nvml.csv", key="gpu_nvml_csv", label="every sample (nvml.csv)")
