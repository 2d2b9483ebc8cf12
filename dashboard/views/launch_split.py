"""Launch split: where a step's time goes per mode (CPU launch, other CPU, GPU busy, GPU idle),
the speedup decomposed as a waterfall, and launches/kernels per iteration."""

import streamlit as st

from dashboard import analysis, charts, state, ui

run = state.require_run()
ui.run_header(run, "Launch split: CPU launch vs GPU work")
split = run.table("launch_split")
medians = analysis.split_medians(split)
verdict = analysis.verdict(run.headline, split, run.config.capture_iters)
st.info(f"**{verdict.title}.** {verdict.text}", icon=":material/lightbulb:")
st.caption(
    "From a torch.profiler window per mode, separate from the timed trials. **CPU launch**: time "
    "in CUDA runtime calls that enqueue GPU work (cudaLaunchKernel, cudaGraphLaunch, "
    "cudaMemcpyAsync, ...). **Other CPU**: the rest of the step on the CPU (framework, Python). "
    "**GPU busy**: the union of kernel, memcpy and memset intervals. **GPU idle**: the iteration "
    "span minus busy time. GPU busy time is the floor a graph replay cannot beat.")
overhead = analysis.number(run.headline, "profiler_overhead_pct")
if analysis.finite(overhead):
    st.caption(f"Profiler overhead on the median iteration: {overhead:.1f}%.")

left, right = st.columns([3, 2])
with left:
    ui.chart(charts.split_bars(medians), key="split_bars")
with right:
    ui.chart(charts.launch_count_bars(medians), key="split_counts")
ui.chart(charts.speedup_waterfall(run.table("breakdown")), key="split_waterfall")
unknown = charts.unknown_components(run.table("breakdown"))
if unknown:
    st.warning("breakdown.csv holds components this dashboard does not know, left out of the "
               f"waterfall: {ui.escape_md(', '.join(unknown))}. Known: "
               f"{', '.join(charts.BREAKDOWN_COMPONENTS)}.", icon=":material/warning:")
st.caption("Each timeline adds up to the iteration span: on the GPU, busy + idle; on the CPU, "
           "launch calls + other work + time spent waiting for the GPU.")
left, right = st.columns(2)
with left:
    st.subheader("Medians per iteration")
    ui.table(medians, f"{run.name}-launch_split_medians.csv", key="split_medians",
             label="medians CSV", empty="No profiled window in this run (profiler off, a CPU run, "
                                        "or it stopped before profiling).",
             column_config={c: st.column_config.NumberColumn(format="%.1f")
                            for c in analysis.SPLIT_MEDIAN_COLUMNS[2:]})
with right:
    st.subheader("The speedup decomposed")
    ui.table(run.table("breakdown"), f"{run.name}-breakdown.csv", key="split_breakdown",
             label="breakdown CSV", empty="No breakdown in this run (it needs both profiled modes).",
             column_config={c: st.column_config.NumberColumn(format="%.1f")
                            for c in ("eager_us", "graph_us", "saving_us", "share_of_saving_pct")})
ui.csv_download(split, f"{run.name}-launch_split.csv", key="split_raw_csv",
                label="every profiled iteration (launch_split.csv)")
