"""Launch split: where a step's time goes per mode (CPU launch, other CPU, GPU busy, GPU idle),
the speedup decomposed as a waterfall, launches/kernels per iteration, and one profiled iteration
per mode drawn lane by lane (CPU ops, launch calls, GPU work) from the run's Chrome traces."""

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, state, ui
from profiler_core.config import MODE_LABELS
from profiler_core import trace
from profiler_core.errors import ProfilerError

run = state.require_run()
ui.run_header(run, "Launch split: CPU launch vs GPU work")
split = run.table("launch_split")
medians = analysis.split_medians(split)
reason = analysis.no_profile_reason(run.config, run.environment, run.complete)
verdict = analysis.verdict(run.headline, split, run.config.capture_iters, reason)
st.info(f"**{verdict.title}.** {verdict.text}", icon=":material/lightbulb:")
st.caption(
    "From a torch.profiler window per mode, separate from the timed trials. **CPU launch**: time "
    "in CUDA runtime calls that enqueue GPU work (cudaLaunchKernel, cudaGraphLaunch, "
    "cudaMemcpyAsync, ...). **Other CPU**: the rest of the step on the CPU (framework, Python). "
    "**GPU busy**: the union of kernel, memcpy and memset intervals. **GPU idle**: the iteration "
    "span minus busy time. GPU busy time is the floor a graph replay cannot beat.")
traces = {mode: path for mode, path in run.trace_paths.items() if path is not None}
if split.empty and run.table("breakdown").empty and not traces:
    st.info(f"No profiled window in this run: {reason}. The split, the speedup decomposed and the "
            "iteration timelines all come from one.", icon=":material/info:")
    st.stop()
overhead = analysis.number(run.headline, "profiler_overhead_pct")
if analysis.finite(overhead):
    st.caption(f"Profiler overhead on the median iteration: {overhead:.1f}%.")

missing = "no profiled window in this run"
left, right = st.columns([3, 2])
with left:
    ui.chart(charts.split_bars(medians, missing), key="split_bars")
with right:
    ui.chart(charts.launch_count_bars(medians, missing), key="split_counts")
others = analysis.decomposable_modes(run.table("breakdown"), medians)
other = others[0] if others else "graph"
if len(others) > 1:
    other = st.radio("Decompose the speedup of", others, horizontal=True, key="split_other",
                     format_func=lambda mode: MODE_LABELS.get(mode, mode),
                     help="Each mode's decomposition comes from the run's breakdown.csv; a mode "
                          "it lacks (a run recorded before it held every mode) is decomposed the "
                          "same way from its launch-split medians.")
breakdown = analysis.breakdown_against(run.table("breakdown"), medians, other)
ui.chart(charts.speedup_waterfall(breakdown, "no breakdown in this run", other),
         key="split_waterfall")
unknown = charts.unknown_components(breakdown)
if unknown:
    st.warning("breakdown.csv holds components this dashboard does not know, left out of the "
               f"waterfall: {ui.escape_md(', '.join(unknown))}. Known: "
               f"{', '.join(charts.BREAKDOWN_COMPONENTS)}.", icon=":material/warning:")
st.caption("Each timeline adds up to the iteration span: on the GPU, busy + idle; on the CPU, "
           "launch calls + other work + time spent waiting for the GPU. Bar colours are the "
           "parts' colours of every chart (green: GPU busy); a step's sign is its direction.")

st.subheader("Medians per iteration")
ui.table(medians, f"{run.name}-launch_split_medians.csv", key="split_medians",
         label="medians CSV", empty=f"No profiled window in this run: {reason}.",
         column_config={c: st.column_config.NumberColumn(format="%.1f")
                        for c in analysis.SPLIT_MEDIAN_COLUMNS[2:]})
st.subheader("The speedup decomposed, per timeline")
st.caption("Each timeline's parts add up to the whole saving of a step, so the shares add up to "
           "100% within each timeline (breakdown.csv, in the run's zip, gives every share of the "
           "total saving instead).")
ui.table(analysis.breakdown_table(breakdown), f"{run.name}-breakdown_eager_vs_{other}_by_timeline.csv",
         key="split_breakdown", label="breakdown CSV",
         empty=f"No breakdown in this run (it needs both profiled modes): {reason}.",
         column_config={**{c: st.column_config.NumberColumn(format="%.1f")
                           for c in ("eager_us", "saving_us")},
                        "mode_us": st.column_config.NumberColumn(f"{other}_us", format="%.1f"),
                        "share_of_timeline_saving_pct": st.column_config.NumberColumn(
                            "share of the timeline's saving", format="%.1f%%")})
ui.csv_download(split, f"{run.name}-launch_split.csv", key="split_raw_csv",
                label="every profiled iteration (launch_split.csv)")

st.subheader("One profiled iteration, lane by lane")
st.caption("Cut from the run's Chrome traces at the profiler's step markers: the CPU's outermost "
           "operations on each thread, the launch calls, and the GPU work they enqueued, in "
           "microseconds from the start of the iteration. Hover over a bar for its name. The "
           "median iteration is shown first; pick another below. (The whole trace opens in "
           "Perfetto: see the downloads on the Overview.)")
if not traces:
    st.info(f"No trace in this run: {reason}.", icon=":material/info:")
for mode in analysis.ordered_modes(pd.DataFrame({"mode": list(run.trace_paths)})):
    path = traces.get(mode)
    if path is None:
        if traces:
            st.caption(f"No {mode} trace in this run.")
        continue
    try:
        typical = state.iteration_timeline(path)
        if typical.iterations > 1:
            labels = {i: f"iteration {i + 1} of {typical.iterations}"
                      + (" (median span)" if i == typical.iteration else "")
                      for i in range(typical.iterations)}
            picked = st.selectbox(f"{mode}: which iteration", list(labels),
                                  index=typical.iteration, format_func=labels.get,
                                  key=f"split_iteration_{mode}")
        else:
            picked = typical.iteration
        shown = typical if picked == typical.iteration else state.iteration_timeline(path, picked)
    except (ProfilerError, OSError) as exc:
        st.warning(f"The {mode} trace cannot be drawn: {ui.escape_md(exc)}", icon=":material/warning:")
        continue
    title = (f"{mode}: iteration {shown.iteration + 1} of {shown.iterations}, "
             f"{shown.span_us:,.0f} us from its first CPU call to its last GPU work")
    ui.chart(charts.iteration_timeline(shown.events, title, shown.span_us),
             key=f"split_timeline_{mode}")
    if shown.dropped:
        st.caption(f"{shown.dropped:,} of its shortest events are left out, to keep the chart fast.")
    if shown.hidden_threads:
        st.caption(f"The CPU ops of {shown.hidden_threads:,} more threads are left out: one lane "
                   f"each is drawn for the first {trace.TIMELINE_MAX_THREADS} threads only.")
