"""Kernels, under the profiler: eager vs a chosen mode kernel by kernel (what the graph, or another
mode, adds, drops or keeps), the top-N bars of every mode, and a sortable table of every kernel
with the operator that launched it, all narrowed by a name filter. Kernels are named so they can
be told apart (the functor of a generic kernel: ``kernel_tables.readable_kernels``)."""

import streamlit as st

from dashboard import kernel_tables, state, ui
from dashboard.analysis.frames import ordered_modes
from dashboard.analysis.run_kind import no_profile_reason
from dashboard.charts.kernels import kernel_diff_bars, kernel_top_bar
from profiler_core import MODE_LABELS
from profiler_core.spec.errors import ProfilerError

run = ui.require_run()
ui.run_header(run, "Kernels")
kernels = kernel_tables.readable_kernels(run.table("kernels"))
if kernels.empty:
    reason = no_profile_reason(run.config, run.environment, run.complete)
    st.info(f"No kernel table in this run: {reason}.", icon=":material/info:")
    st.stop()
recorded = bool((kernels["operator"] != "").any())
from_traces = {}
if not recorded:  # a run recorded before kernels.csv had the operator: read it from its traces
    for mode in ordered_modes(kernels):
        path = run.trace_paths.get(mode)
        try:
            if path is not None:
                from_traces[mode] = state.trace_operators(path, mode)
        except (ProfilerError, OSError):
            continue
    kernels = kernel_tables.with_operators(kernels, from_traces)
operators_known = bool((kernels["operator"] != "").any())
st.caption("Everything on this page comes from the torch.profiler window (**under the "
           "profiler**): kernel times are the GPU's own, but the profiler slows every launch, so "
           "per-iteration totals here are not the headline's step. Names: a generic kernel is "
           "named with the functor it runs, "
           + ui.escape_md("vectorized_elementwise_kernel<FillFunctor>")
           + "; hover over a bar, or read the last column, for the full name. "
           + kernel_tables.OPERATOR_MEANING.capitalize() + "."
           + ("" if recorded else
              " This run's kernel table predates that column: the operators were read from its "
              "traces." if operators_known else
              " This run did not record the operators (it was recorded before they were, and "
              "has no trace to read them from)."))
left, right = st.columns([3, 1])
with left:
    name_filter = st.text_input("Filter kernels by name or operator", key="kernels_filter",
                                max_chars=200, placeholder="e.g. gemm, dropout, aten::addmm",
                                help="Shows only kernels whose name (short or full) or launching "
                                     "operator contains this text; case does not matter, and the "
                                     "text is not a pattern.")
with right:
    top_n = st.slider("Top N kernels", min_value=3, max_value=30, value=10, key="kernels_top_n")
shown = kernel_tables.filter_by_name(kernels, name_filter)
if name_filter.strip():
    st.caption(f"{shown['kernel_full'].nunique():,} of {kernels['kernel_full'].nunique():,} "
               f"kernels match \"{ui.escape_md(name_filter.strip())}\".")
if shown.empty:
    st.info("No kernel name contains that text.", icon=":material/filter_alt_off:")
    st.stop()

modes = ordered_modes(kernels)
others = [mode for mode in modes if mode != "eager"] or ["graph"]
if len(others) > 1:
    other = st.radio("Compare eager with", others, horizontal=True, key="kernels_other",
                     format_func=lambda mode: MODE_LABELS.get(mode, mode))
else:
    other = others[0]
st.subheader(f"Eager vs {other}, kernel by kernel (under the profiler)")
diff = kernel_tables.kernel_diff(shown, other)
diff_columns = kernel_tables.kernel_diff_columns(other)
counts = diff["where"].value_counts()
random_kernels = (" (with dropout, each replay first runs two small kernels that refresh the "
                  "graph's random seed and offset)" if other == "graph" else "")
st.caption(f"Per iteration of the profiled windows: {counts.get('both', 0)} kernels run in both "
           f"modes, {counts.get('eager only', 0)} only eagerly and "
           f"{counts.get(f'{other} only', 0)} only in {other}{random_kernels}. Hover over a bar "
           "for the kernel's full name.")
ui.chart(kernel_diff_bars(diff, top_n), key="kernels_diff")
ui.table(diff, f"{run.name}-kernels_eager_vs_{other}.csv", key="kernels_diff",
         label="comparison CSV",
         column_order=[c for c in diff_columns[:-1]  # the full name: in the CSV and on hover
                       if c != "operator" or operators_known],
         column_config={
             "kernel": st.column_config.TextColumn(width="large"),
             "where": st.column_config.TextColumn(width="small"),
             **{c: st.column_config.NumberColumn(format="%.2f") for c in diff_columns
                if c.endswith(("_calls_per_iter", "_us_per_iter"))},
             "change_us_per_iter": st.column_config.NumberColumn(f"{other} - eager (us/iter)",
                                                                 format="%+.2f"),
             "operator": st.column_config.TextColumn(
                 "launched by", width="medium", help=kernel_tables.OPERATOR_MEANING.capitalize() + "."),
             "kernel_full": st.column_config.TextColumn("full name", width="large"),
         })

st.subheader("Top kernels per mode (under the profiler)")
for first in range(0, len(modes), 2):  # two modes per row, however many the run timed
    cols = st.columns(2)
    for col, mode in zip(cols, modes[first:first + 2]):
        with col:
            ui.chart(kernel_top_bar(shown, mode, top_n), key=f"kernels_top_{mode}")
st.caption("Click a column header to sort. Times are over the profiled window; share is of the "
           "mode's GPU busy time.")
ui.table(kernel_tables.kernel_table(shown), f"{run.name}-kernels.csv", key="kernels", label="kernels CSV",
         column_order=[c for c in kernel_tables.KERNEL_TABLE_COLUMNS if c != "operator" or operators_known],
         column_config={
             "kernel": st.column_config.TextColumn(width="large"),
             "operator": st.column_config.TextColumn(
                 "launched by", width="medium", help=kernel_tables.OPERATOR_MEANING.capitalize() + "."),
             "share_of_gpu_pct": st.column_config.ProgressColumn("share of GPU %", min_value=0,
                                                                 max_value=100, format="%.1f%%"),
             "kernel_full": st.column_config.TextColumn("full name", width="large"),
         })
