"""Launch split: the headline's saving per step attributed to its parts (GPU idle removed, kernel
time changed, batch copy added; host issue time beside), as a waterfall and a table, for the mode
picked; then, labelled "under the profiler", what the profiled window saw: where an iteration's
time goes per mode (CPU launch, other CPU, GPU busy, GPU idle), launches/kernels per iteration,
the profiled iteration decomposed per timeline, and one profiled iteration per mode drawn lane by
lane (CPU ops, launch calls, GPU work) from the run's Chrome traces."""

import pandas as pd
import streamlit as st

from dashboard import state, ui
from dashboard.analysis import verdict_text
from dashboard.analysis.frames import ordered_modes
from dashboard.analysis.launch_split import (
    SPLIT_MEDIAN_COLUMNS,
    breakdown_against,
    breakdown_table,
    decomposable_modes,
    split_medians,
)
from dashboard.analysis.overheads import profiler_overhead_text, profiler_overheads
from dashboard.analysis.payback import pay_back
from dashboard.analysis.run_kind import is_cpu_run, no_profile_reason
from dashboard.analysis.saving import NEGATIVE_SHARE_TEXT, attribution_modes, saving_table
from dashboard.charts.attribution import (
    iteration_timeline,
    launch_count_bars,
    profiled_waterfall,
    speedup_waterfall,
    split_bars,
    unknown_components,
)
from profiler_core import MODE_LABELS
from profiler_core.analysis.timeline import TIMELINE_MAX_THREADS
from profiler_core.spec.errors import ProfilerError
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS

run = ui.require_run()
ui.run_header(run, "Launch split: CPU launch vs GPU work")
split = run.table("launch_split")
medians = split_medians(split)
attribution = run.table("attribution")
reason = no_profile_reason(run.config, run.environment, run.complete)
cpu = is_cpu_run(run.config, run.environment)
profiled = decomposable_modes(run.table("breakdown"), medians)
attributed = attribution_modes(attribution)
others = ordered_modes(pd.DataFrame({"mode": [*attributed, *profiled]}))
other = others[0] if others else "graph"
if len(others) > 1:
    other = st.radio("Explain the speedup of", others, horizontal=True, key="split_other",
                     format_func=lambda mode: MODE_LABELS.get(mode, mode),
                     help="Each mode's saving is attributed from its block of the run's "
                          "attribution.csv; under the profiler, its decomposition comes from "
                          "breakdown.csv (or, for a run recorded before that held every mode, "
                          "from its launch-split medians).")
pay = pay_back(run.figures, run.table("modes"), other)
verdict = verdict_text.verdict(run.figures, attribution, reason, other, pay)
st.info(f"**{verdict.title}.** {verdict.text}", icon=":material/lightbulb:")

st.subheader(f"The headline's saving, part by part: eager vs {other}")
if cpu:
    st.info("No attribution in this run: a CPU run times the eager step only (graphs need a CUDA "
            "GPU), so there is no saving to attribute.", icon=":material/info:")
elif other not in attributed:
    st.info(f"No attribution of {other}'s saving in this run: it needs the steady-state timing of "
            f"eager and {other}, which this run does not have.", icon=":material/info:")
else:
    missing = (f"the saving cannot be attributed: this run has no profiled window ({reason}), so "
               "the GPU's kernel time is unknown")
    ui.chart(speedup_waterfall(attribution, missing, other), key="split_waterfall")
    st.caption(
        "From the headline's two medians (timed in a training loop, no profiler), per training "
        "step. **Kernel time**: the GPU's busy time per step, from the profiled window (the profiler "
        "barely changes how long a kernel runs). **Batch copy**: the graph's copy of each new batch "
        "into its static inputs, timed apart. **GPU idle**: the rest of the step, when the GPU "
        "waited for the host. The three add up to the step, so their changes add up to the "
        "headline's saving. **Host issue time** (beside the sum, when the run timed it): how long "
        "the host needed to issue a step; a host slower than the GPU's work leaves the GPU "
        f"waiting, which is the idle a graph removes. {NEGATIVE_SHARE_TEXT}")
    saving = saving_table(attribution, other)
    if not (saving.loc[saving["component"] == "step", "saving_us"] > 0).any():
        st.caption(f"No shares: {other} is not faster than eager, so there is no saving to share; "
                   "the saving column says what each part removed (positive) or added "
                   "(negative).")
    if "host_issue" not in set(saving["component"]):
        st.caption("This run did not time the host's issue time (runs recorded before 2026-12-01 "
                   "did not), so it is not shown beside the sum.")
    ui.table(saving,
             f"{run.name}-saving_eager_vs_{other}_by_component.csv", key="split_saving",
             label="saving by component CSV",
             column_config={"eager_us": st.column_config.NumberColumn("eager (us)", format="%.1f"),
                            "mode_us": st.column_config.NumberColumn(f"{other} (us)", format="%.1f"),
                            "saving_us": st.column_config.NumberColumn("saving (us)", format="%.1f"),
                            "share_of_saving_pct": st.column_config.NumberColumn(
                                "share of the saving", format="%.1f%%"),
                            "in_the_sum": st.column_config.TextColumn("in the sum?")},
             column_order=["what", "eager_us", "mode_us", "saving_us", "share_of_saving_pct",
                           "in_the_sum"])

traces = {mode: path for mode, path in run.trace_paths.items() if path is not None}
st.header("Under the profiler")
if split.empty and run.table("breakdown").empty and not traces:
    st.info(f"No profiled window in this run: {reason}. The split, the profiled iteration "
            "decomposed and the iteration timelines all come from one.", icon=":material/info:")
    st.stop()
overheads = profiler_overheads(run.table("metrics"), run.table("stats"), run.table("latency"))
st.caption(
    "Everything below comes from a torch.profiler window per mode, run after the timed trials. "
    "The profiler slows every launch, so these are the times of a slower program. "
    + (profiler_overhead_text(overheads) + " " if len(overheads) else
       "This run does not say by how much. ")
    + "**CPU launch**: time in CUDA runtime calls that enqueue GPU work (cudaLaunchKernel, "
    "cudaGraphLaunch, cudaMemcpyAsync, ...). **Other CPU**: the rest of the iteration on the CPU "
    "(framework, Python). **GPU busy**: the union of kernel, memcpy and memset intervals. **GPU "
    "idle**: the iteration span minus busy time.")

missing = "no profiled window in this run"
left, right = st.columns([3, 2])
with left:
    ui.chart(split_bars(medians, missing), key="split_bars")
with right:
    ui.chart(launch_count_bars(medians, missing), key="split_counts")
breakdown = breakdown_against(run.table("breakdown"), medians, other)
ui.chart(profiled_waterfall(breakdown, "no breakdown in this run", other),
         key="split_profiled_waterfall")
unknown = unknown_components(breakdown)
if unknown:
    st.warning("breakdown.csv holds components this dashboard does not know, left out of the "
               f"waterfall: {ui.escape_md(', '.join(unknown))}. Known: "
               f"{', '.join(BREAKDOWN_COMPONENTS)}.", icon=":material/warning:")
st.caption("Under the profiler, each timeline adds up to the profiled iteration's span: on the GPU, "
           "busy + idle; on the CPU, launch calls + other work + time spent waiting for the GPU. "
           "Its totals are the profiled spans, not the headline's steps (see the attribution "
           "above). Bar colours are the parts' colours of every chart (green: GPU busy); a step's "
           "sign is its direction.")

st.subheader("Under the profiler: medians per profiled iteration")
ui.table(medians, f"{run.name}-launch_split_medians_under_the_profiler.csv", key="split_medians",
         label="medians under the profiler CSV", empty=f"No profiled window in this run: {reason}.",
         column_config={**{c: st.column_config.NumberColumn(format="%.1f")
                           for c in SPLIT_MEDIAN_COLUMNS[2:]},
                        "launch_delay_us": st.column_config.NumberColumn(format="%.2f"),
                        "span_us": st.column_config.NumberColumn("span_us (profiled)",
                                                                 format="%.1f")})
st.subheader("Under the profiler: the profiled iteration decomposed, per timeline")
st.caption("Each timeline's parts add up to the whole saving of a profiled iteration, so the shares "
           "add up to 100% within each timeline (breakdown.csv, in the run's zip, gives every share "
           "of the total saving instead). A negative share is time that grew from eager to the "
           "mode: extra kernels or copies on the GPU, or, on the CPU, longer waits for the GPU (a "
           "graph leaves the CPU little else to do).")
ui.table(breakdown_table(breakdown),
         f"{run.name}-breakdown_eager_vs_{other}_by_timeline_under_the_profiler.csv",
         key="split_breakdown", label="breakdown under the profiler CSV",
         empty=f"No breakdown in this run (it needs both profiled modes): {reason}.",
         column_config={"eager_us": st.column_config.NumberColumn(
                            "eager_us (under the profiler)", format="%.1f"),
                        "saving_us": st.column_config.NumberColumn(
                            "saving_us (under the profiler)", format="%.1f"),
                        "mode_us": st.column_config.NumberColumn(
                            f"{other}_us (under the profiler)", format="%.1f"),
                        "share_of_timeline_saving_pct": st.column_config.NumberColumn(
                            "share of the timeline's saving", format="%.1f%%")})
ui.csv_download(split, f"{run.name}-launch_split.csv", key="split_raw_csv",
                label="every profiled iteration (launch_split.csv, under the profiler)")

st.subheader("Under the profiler: one profiled iteration, lane by lane")
st.caption("Cut from the run's Chrome traces at the profiler's step markers: the CPU's outermost "
           "operations on each thread, the launch calls, and the GPU work they enqueued, in "
           "microseconds from the start of the iteration. Hover over a bar for its name. The "
           "median iteration is shown first; pick another below. (The whole trace opens in "
           "Perfetto: see the downloads on the Overview.)")
if not traces:
    st.info(f"No trace in this run: {reason}.", icon=":material/info:")
for mode in ordered_modes(pd.DataFrame({"mode": list(run.trace_paths)})):
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
                                  index=typical.iteration, format_func=labels.__getitem__,
                                  key=f"split_iteration_{mode}")
        else:
            picked = typical.iteration
        shown = typical if picked == typical.iteration else state.iteration_timeline(path, picked)
    except (ProfilerError, OSError) as exc:
        st.warning(f"The {mode} trace cannot be drawn: {ui.escape_md(exc)}", icon=":material/warning:")
        continue
    title = (f"{mode}: iteration {shown.iteration + 1} of {shown.iterations}, "
             f"{shown.span_us:,.0f} us from its first CPU call to its last GPU work "
             "(under the profiler)")
    ui.chart(iteration_timeline(shown.events, title, shown.span_us),
             key=f"split_timeline_{mode}")
    if shown.dropped:
        st.caption(f"{shown.dropped:,} of its shortest events are left out, to keep the chart fast.")
    if shown.hidden_threads:
        st.caption(f"The CPU ops of {shown.hidden_threads:,} more threads are left out: one lane "
                   f"each is drawn for the first {TIMELINE_MAX_THREADS} threads only.")
