"""Overview: the headline speedup with its confidence interval, both medians, the break-even, the
verdict from the headline's saving attributed to its parts (launch-bound or GPU-bound, and why),
the GPU, the config and the downloads (the run, its traces, and metrics.csv: every figure per mode
in long form)."""

import streamlit as st

from dashboard import repeats_panel, run_facts, state, ui
from dashboard.analysis import timing, verdict_text
from dashboard.analysis.frames import finite
from dashboard.analysis.overheads import profiler_overhead_text, profiler_overheads
from dashboard.analysis.payback import BREAK_EVEN_DEFINITION, modes_table, one_time_costs, pay_back
from dashboard.analysis.run_kind import is_cpu_run, no_profile_reason
from dashboard.analysis.saving import kernel_floor
from dashboard.charts.timing import median_bars, modes_speedup_bars, prediction_bars
from profiler_core.analysis import predict

gpus, no_gpu_reason = state.device_list()
if gpus.empty:  # one line: the first screen is the answer's (the reason: the GPU box's help)
    st.info("**No CUDA GPU was found on this machine**: the views show recorded runs; a run here "
            "times only the eager step on the CPU.", icon=":material/info:")

run = ui.require_run()
ui.run_header(run, "Overview")
h, pair, figures = run.headline, run.pair, run.figures
cpu = is_cpu_run(run.config, run.environment)
speedup, low, high = pair.speedup, pair.speedup_ci_low, pair.speedup_ci_high
ci = f"95% CI {ui.fmt(low, '{:.2f}')}-{ui.fmt(high, '{:.2f}')}x" if finite(low) else "no CI"

method = timing.headline_method(pair.timing_method, run.table("stats"))
method_label = timing.method_label(method, cpu)
pay = pay_back(figures, run.table("modes"), "graph")
cols = st.columns(4)
cols[0].metric("Speedup", ui.fmt(speedup, "{:.2f}x"), delta=ci if not cpu else "CPU run: no graph",
               delta_color="off", delta_arrow="off",
               help=f"Median eager step / median graph step, timed by {method_label}, with its "
                    "bootstrap 95% confidence interval.")
cols[1].metric("Eager median per step", ui.fmt(pair.eager_ms, "{:.3f} ms"),
               help=f"Timed by {method_label}.")
cols[2].metric("Graph median per step", ui.fmt(pair.graph_ms, "{:.3f} ms"),
               help=f"Timed by {method_label}; includes copying each new batch into the graph's "
                    "static inputs.")
cols[3].metric("Break-even", pay.short if not cpu else "n/a",
               delta=pay.note if not cpu else "CPU run: no graph", delta_color="off",
               delta_arrow="off",
               help=f"Break-even: {BREAK_EVEN_DEFINITION} (one-time cost: "
                    f"{pay.cost_text}).")
article_says = figures.get("graph", "article_no_sync_speedup")
st.caption(f"Every time on this page is per training step, timed by {method_label}: "
           f"{timing.METHOD_MEANING.get(method, '')}."
           + (f" The article's own timing (a clock around a loop that never waits for the GPU) "
              f"would say {ui.fmt(article_says, '{:.2f}x')}: CPU enqueue time, not training time "
              "(the Latency view shows it beside the others)." if finite(article_says)
              else " The Latency view shows the other methods."))
repeats_panel.stability_warnings(run)

no_split = no_profile_reason(run.config, run.environment, run.complete)
verdict = verdict_text.verdict(figures, run.table("attribution"), no_split, "graph", pay)
box = {"launch-bound": st.success, "gpu-bound": st.info, "mixed": st.info}.get(
    verdict.kind, st.info if cpu else st.warning)
box(f"**{verdict.title}.**", icon=":material/lightbulb:")  # the verdict in one sentence
with st.expander("The figures behind it"):
    st.markdown(verdict.text)

st.caption("The Launch split view draws this saving part by part (timed with no profiler), and "
           "beside it, labelled, what the profiled window saw.")
left, right = st.columns(2)  # the costs table's values ('never (graph not faster)') need room
with left:
    ui.chart(median_bars(run.table("stats"), kernel_floor(run.table("attribution")),
                                method=method, method_label=method_label),
             key="overview_medians")
with right:
    st.subheader("One-time costs and checks")
    overheads = profiler_overheads(run.table("metrics"), run.table("stats"),
                                            run.table("latency"))
    costs = one_time_costs(figures, h, pay, overheads)
    if costs["value"].isna().all():
        st.info("No one-time costs in this run (they need a CUDA run that reached capture).",
                icon=":material/info:")
    else:
        ui.table(costs, f"{run.name}-one_time_costs.csv", key="overview_costs", label="costs CSV",
                 column_order=["quantity", "shown"],
                 column_config={"shown": st.column_config.TextColumn("value")})
        st.caption(f"Break-even: {BREAK_EVEN_DEFINITION}. "
                   + (profiler_overhead_text(overheads) if len(overheads) else ""))
    match = h.get("counters_match")
    if isinstance(match, bool):  # anything else says nothing about the counters
        st.caption("The article's counter lessons all matched." if match else
                    "A counter lesson did not match: see Counters.")
    parity_verdict = h.get("parity_verdict")
    if isinstance(parity_verdict, str) and parity_verdict:
        shown = ui.escape_md(parity_verdict[0].upper() + parity_verdict[1:]) + "."
        if h.get("parity_matches") is False:
            st.warning(f"**Parity.** {shown}", icon=":material/difference:")
        else:
            st.caption(f"Parity: {shown}")

st.subheader("Prediction before capture")
if predict.has_prediction(h):
    left, right = st.columns([3, 2])
    with left:
        ui.chart(prediction_bars(predict.prediction_parts(h, figures)), key="overview_prediction_chart")
        ui.table(predict.prediction_table(h, figures), f"{run.name}-prediction.csv", key="overview_prediction",
                 label="prediction CSV",
                 column_config={"predicted": st.column_config.NumberColumn(format="%.4g"),
                                "measured": st.column_config.NumberColumn(format="%.4g"),
                                "error_pct": st.column_config.NumberColumn("error (%)", format="%+.1f")})
    with right:
        ui.table(predict.constants_table(h, figures), f"{run.name}-prediction_constants.csv",
                 key="overview_prediction_constants", label="constants CSV",
                 column_config={"value": st.column_config.NumberColumn(format="%.4g")})
    st.caption("Predicted from the eager profiled window alone, as if before any capture: graph "
               "time per step = eager GPU busy + (launch + batch copy) / steps per graph + cost "
               "per node x kernels; speedup = measured eager median / predicted graph time. Error "
               "is (predicted - measured) / measured. It assumes the GPU, not the host, bounds the "
               "graphed step. Constants " + ui.escape_md(h.get("prediction_constants_method", "")) + ".")
else:
    st.caption("This run has no prediction: it needs a CUDA run with a profiled eager window, "
               "recorded by a version of this tool that calibrates one (`python -m profiler_core "
               "predict` predicts from any eager trace).")

modes = run.table("modes")
if len(modes) > 2:  # more than eager and the article's graph: how each way of graphing compares
    st.subheader("Every mode")
    ui.chart(modes_speedup_bars(modes), key="overview_modes")
    # under the chart, the whole width: the modes' words and every column show uncut
    ui.table(modes_table(modes, figures), f"{run.name}-modes.csv", key="overview_modes_table",
             label="modes CSV",
             column_config={"break_even": st.column_config.TextColumn(
                 "break-even", help=f"Break-even: {BREAK_EVEN_DEFINITION}.")})
    st.caption("Every figure per mode, in long form: the Downloads below (metrics.csv).")

repeats_panel.between_processes(run, key="overview_repeats")

# one above the other, the whole width: long values (the platform, the modes) show uncut
st.subheader("GPU and software")
ui.table(run_facts.environment_table(run.environment), f"{run.name}-environment.csv",
         key="overview_env", label="environment CSV",
         empty="This run does not say which GPU and software it ran on.")
st.subheader("Configuration")
ui.table(run_facts.config_table(run.config, run.environment), f"{run.name}-config.csv", key="overview_config",
         label="config CSV")

ui.notes(run)
st.subheader("Downloads")
ui.run_downloads(run, key="overview_dl")
metrics = run.table("metrics")
if len(metrics):
    ui.csv_download(metrics, f"{run.name}-every_figure_per_mode.csv", key="overview_mode_metrics",
                    label="every figure per mode (metrics.csv, long form: mode, metric, value, "
                          "eager's value, ratio to eager)")
