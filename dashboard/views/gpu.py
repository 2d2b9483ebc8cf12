"""GPU: NVML time series (utilisation, SM clock, power, memory) with the run's phases shaded."""

import streamlit as st

from dashboard import charts, state, ui

try:
    from profiler_core.telemetry import NVML_UTILISATION_CAVEAT as CAVEAT
except ImportError:
    CAVEAT = ("NVML utilisation is the percent of time any kernel ran over the driver's sample "
              "period (1/6 s to 1 s): it cannot resolve a millisecond step, and 100% does not "
              "mean the SMs are busy; the profiler's GPU busy time is the precise figure.")

run = state.require_run()
ui.run_header(run, "GPU telemetry (NVML)")
st.warning(CAVEAT, icon=":material/info:")
nvml, phases = run.table("nvml"), run.table("phases")
ui.chart(charts.nvml_timeseries(nvml, phases), key="gpu_nvml")
st.caption("Shaded bands are the run's phases (warm-up, capture, timed trials, profiled windows) on "
           "the same clock. Lines: polled readings; dots: the driver's own buffered samples.")
left, right = st.columns(2)
with left:
    st.subheader("Phases")
    ui.table(phases, f"{run.name}-phases.csv", key="gpu_phases", label="phases CSV",
             empty="No phases recorded in this run.")
with right:
    st.subheader("Samples")
    summary = (nvml.groupby(["metric", "source"])["value"].agg(["count", "mean", "min", "max"])
               .reset_index() if not nvml.empty else nvml)
    ui.table(summary, f"{run.name}-nvml_summary.csv", key="gpu_summary", label="summary CSV",
             empty="No NVML samples in this run (NVML off, unavailable, or a CPU run).")
    ui.csv_download(nvml, f"{run.name}-nvml.csv", key="gpu_nvml_csv", label="every sample (nvml.csv)")
