"""Kernels: a sortable table of every kernel per mode and a top-N bar chart per mode."""

import streamlit as st

from dashboard import analysis, charts, state, ui

run = state.require_run()
ui.run_header(run, "Kernels")
kernels = run.table("kernels")
if kernels.empty:
    st.info("No kernel table in this run (the profiler was off, the run was on the CPU, or it "
            "stopped before profiling).", icon=":material/info:")
    st.stop()
top_n = st.slider("Top N kernels per mode", min_value=3, max_value=30, value=10, key="kernels_top_n")
cols = st.columns(2)
for col, mode in zip(cols, analysis.MODES):
    with col:
        ui.chart(charts.kernel_top_bar(kernels, mode, top_n), key=f"kernels_top_{mode}")
st.caption("Click a column header to sort. Times are over the profiled window; share is of the "
           "mode's GPU busy time.")
ui.table(analysis.kernel_table(kernels), f"{run.name}-kernels.csv", key="kernels", label="kernels CSV",
         column_config={
             "share_of_gpu_pct": st.column_config.ProgressColumn("share of GPU %", min_value=0,
                                                                 max_value=100, format="%.1f%%"),
             "kernel_full": st.column_config.TextColumn("full name", width="large"),
         })
