"""Ranks: a data-parallel run per rank (``ranks.csv``): step time per rank and mode, where each
rank's step goes (compute, exposed and hidden communication, host wait), p50/p99 with the
straggler named, the all-reduce's share, and every rank's trace for Perfetto."""

import streamlit as st

from dashboard import ui
from dashboard.charts import ranks as rank_charts

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
left, middle, right, last = st.columns(4)
left.metric("Ranks", f"{headline.get('world_size', '?')}")
bound = headline.get("eager_bound")
last.metric("Eager step", bound if isinstance(bound, str) and bound else "n/a",
            help="What sets the pace of the slowest rank's eager step in its profiled window: "
                 "launch-bound (the GPU waits for the host 30% of the time or more), "
                 "communication-bound (exposed communication takes that share), else GPU-bound.")
middle.metric("Job speedup (slowest rank)",
              f"{speedup:.2f}x" if speedup == speedup else "n/a")
right.metric("Straggler", f"rank {int(straggler)}" if isinstance(straggler, float)
             and straggler == straggler else "none named")

ui.chart(rank_charts.step_grid(ranks), key="ranks_grid")
modes = list(ranks["mode"].drop_duplicates())
mode = st.radio("Mode", modes, horizontal=True, key="ranks_mode")
left, right = st.columns(2)
with left:
    ui.chart(rank_charts.stacked_step(ranks, mode), key="ranks_stack")
with right:
    ui.chart(rank_charts.percentiles(ranks, mode), key="ranks_percentiles")
ui.chart(rank_charts.all_reduce_share(ranks), key="ranks_share")
st.dataframe(rank_charts.summary_table(ranks), hide_index=True)
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
