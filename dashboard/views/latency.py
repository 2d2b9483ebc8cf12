"""Latency: per-step distributions eager vs graph (histogram, ECDF), every step in order (warm-up
effects, drift), a percentile table, and the article's no-sync timing beside the true timing.
Every chart shows one timing method at a time: steady state (the headline) or cold start."""

import streamlit as st

from dashboard import article, percentiles, repeats_panel, ui
from dashboard.analysis.run_kind import is_cpu_run
from dashboard.analysis.timing import (
    headline_method,
    method_caption,
    method_label,
    per_step_latency,
    series_available,
    series_steps,
    timing_comparison,
)
from dashboard.charts.timing import (
    latency_ecdf,
    latency_histogram,
    latency_series,
    timing_methods_bars,
)

run = ui.require_run()
ui.run_header(run, "Latency per training step")
cpu = is_cpu_run(run.config, run.environment)
all_steps = per_step_latency(run.table("latency"))
available = series_available(all_steps) or ["steady_event"]
default = headline_method(run.pair.timing_method, run.table("stats"))
series = st.radio("Timing", available, index=available.index(default) if default in available else 0,
                  horizontal=True, key="latency_timing",
                  format_func=lambda name: method_label(name, cpu),
                  help="Steady state (the headline): steps queued back to back as in training, "
                       "timed between consecutive steps. Cold start: a synchronise before each "
                       "step, so each pays its first launch's latency. A replay covering several "
                       "captured steps is divided by their number.")
st.caption(method_caption(series, cpu))
repeats_panel.stability_warnings(run)
steps, column = series_steps(all_steps, series)
if steps.empty:
    st.info("This run has no per-iteration latency table (it stopped before the timed trials, or "
            "its latency.csv is empty).", icon=":material/info:")

ui.chart(latency_histogram(steps, column), key="latency_hist")
left, right = st.columns(2)
with left:
    ui.chart(latency_ecdf(steps, column), key="latency_ecdf")
with right:
    ui.chart(latency_series(steps, column), key="latency_series")
ui.csv_download(run.table("latency"), f"{run.name}-latency.csv", key="latency_raw_csv",
                label="every iteration (latency.csv)")

st.subheader("Percentiles (ms per step)")
pct_table = percentiles.percentile_table(run.table("latency"), all_steps)
unsupported = [c for c in percentiles.PERCENTILE_COLUMNS[3:]
               if c in pct_table and len(pct_table) and pct_table[c].isna().all()]
ui.table(pct_table.drop(columns=unsupported), f"{run.name}-percentiles.csv",
         key="latency_pct", label="percentiles CSV", empty="No timed steps, so no percentiles.",
         column_config={c: st.column_config.NumberColumn(format="%.4f")
                        for c in percentiles.PERCENTILE_COLUMNS[3:]})
if len(pct_table):
    st.caption(percentiles.PERCENTILE_RULE.capitalize() + "."
               + (f" Not supported by any row here: {', '.join(c[:-3].replace('_', '.') for c in unsupported)}."
                  if unsupported else "")
               + " An empty cell: that row has too few samples for it.")

timing = timing_comparison(run.table("stats"), run.figures, cpu)
no_timing = ("No timing statistics in this run (stats.csv is empty: the run stopped before its "
             "statistics were computed).")
timing_columns = {"eager_median_ms": st.column_config.NumberColumn(format="%.4f"),
                  "graph_median_ms": st.column_config.NumberColumn(format="%.4f"),
                  "speedup": st.column_config.NumberColumn(format="%.2fx"),
                  "meaning": st.column_config.TextColumn(width="large")}
if cpu:  # no GPU to wait for: the article's pitfall does not arise, so none is drawn
    st.subheader("How this run was timed")
    st.caption("The article's timing pitfall (a clock read around a loop that never waits for the "
               "GPU) needs a GPU: a step on the CPU has finished when its call returns, so this "
               "run measured the steady-state wall clock only.")
    ui.table(timing, f"{run.name}-timing_methods.csv", key="latency_timing_table",
             label="timing CSV", column_order=["label", "eager_median_ms", "meaning"],
             empty=no_timing, column_config=timing_columns)
else:
    st.subheader("The article's timing beside the true timing")
    st.markdown(article.quote(article.TIMING, article.SPEED))
    st.markdown(
        f"Yet {article.SHORT_NAME} times `perf_counter()` around its loop **without** "
        "`torch.cuda.synchronize()`. That measures how fast the CPU *enqueues* work, not how long "
        "the GPU takes to run it, so it flatters whichever mode launches faster. The true timings "
        "below wait for the GPU.")
    ui.chart(timing_methods_bars(timing), key="latency_methods")
    ui.table(timing, f"{run.name}-timing_methods.csv", key="latency_timing_table",
             label="timing CSV",
             column_order=["label", "eager_median_ms", "graph_median_ms", "speedup", "meaning"],
             empty=no_timing, column_config=timing_columns)

st.subheader("Statistics per mode and method (stats.csv)")
ui.table(percentiles.supported_percentiles(run.table("stats")), f"{run.name}-stats.csv",
         key="latency_stats", label="stats CSV", empty="stats.csv is empty in this run.")
if len(run.table("stats")):
    st.caption("The same rule holds here: a percentile its count does not support is left empty "
               "(the steady state per trial has one sample per trial). The run's own stats.csv, "
               "in the run's zip, keeps every figure.")
