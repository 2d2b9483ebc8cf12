"""Ranks: a data-parallel run per rank (``ranks.csv``): step time per rank and mode, where each
rank's step goes (compute, exposed and hidden communication, host wait), p50/p99 with the
straggler named, the all-reduce's share, and every rank's trace for Perfetto."""

import streamlit as st

from dashboard import ui
from dashboard.analysis.run_kind import is_cpu_run
from dashboard.charts import ranks as rank_charts
from profiler_core.analysis.ranks import job_step_ms

run = ui.require_run()
ui.run_header(run, "Ranks (data parallel)")
ranks = run.table("ranks")
if ranks.empty:
    st.info("This run is not data parallel: start one with --nproc-per-node N (or GPUs (data "
            "parallel) in the sidebar, offered where more than one GPU is visible).",
            icon=":material/info:")
    st.stop()

headline = run.headline
speedup = run.pair.speedup
straggler = headline.get("straggler_rank")
eager_ms, slowest = job_step_ms(ranks, "eager")
bound = headline.get("eager_bound")
left, middle, right, last = st.columns(4)
left.metric("Ranks", f"{headline.get('world_size', '?')}")
cpu = is_cpu_run(run.config, run.environment)
middle.metric("Job speedup (slowest rank)", f"{speedup:.2f}x" if speedup == speedup else "n/a",
              delta="CPU run: no graph" if cpu and speedup != speedup else None,
              delta_color="off", delta_arrow="off")
right.metric("Straggler", f"rank {int(straggler)}" if isinstance(straggler, float)
             and straggler == straggler else "none named")
last.metric("Eager step (slowest rank)", ui.fmt(eager_ms, "{:.3f} ms"),
            delta=(f"rank {slowest}: {bound}" if isinstance(bound, str) and bound else
                   f"rank {slowest}; pace: not profiled" if slowest is not None else None),
            delta_color="off", delta_arrow="off",
            help="The job's eager step: its slowest rank's median step time (steady state). Under "
                 "it, what sets that rank's pace in its profiled window: launch-bound (the GPU "
                 "waits for the host 30% of the time or more), communication-bound (exposed "
                 "communication takes that share), else GPU-bound; a run without a profiled "
                 "window cannot say.")

ui.chart(rank_charts.step_grid(ranks), key="ranks_grid")
modes = list(ranks["mode"].drop_duplicates())
mode = st.radio("Mode", modes, horizontal=True, key="ranks_mode")
left, right = st.columns(2)
with left:
    ui.chart(rank_charts.stacked_step(ranks, mode), key="ranks_stack")
with right:
    ui.chart(rank_charts.percentiles(ranks, mode), key="ranks_percentiles")
ui.chart(rank_charts.all_reduce_share(ranks), key="ranks_share")
ui.table(rank_charts.summary_table(ranks), f"{run.name}-ranks-summary.csv", key="ranks_summary",
         label="summary CSV", column_config=ui.number_columns(rank_charts.SUMMARY_COLUMNS[2:], "%.4g"))
st.caption("An empty cell: not measured in this run (a speedup needs a graph, an all-reduce share "
           "and arrival waits a profiled window).")
ui.csv_download(ranks, f"{run.name}-ranks.csv", key="ranks_csv", label="ranks.csv")
ui.csv_download(run.table("rank_latency"), f"{run.name}-rank_latency.csv",
                key="rank_latency_csv", label="every rank's iterations (rank_latency.csv)")

st.subheader("Every rank's trace")
traces = sorted(run.path.glob("trace_*_rank*.json*"))
if not traces:
    st.caption("No per-rank traces (the run was not profiled).")
for path in traces:
    st.download_button(f"Download {path.name}", data=path.read_bytes, file_name=path.name,
                       key=f"ranks_trace_{path.name}", icon=":material/download:")
st.caption("Open several in https://ui.perfetto.dev to see the ranks side by side.")
