"""Shapes: a run whose step's shapes change (``--vary``): which strategy pays for this
distribution of shapes (eager on the exact shapes, padding to the largest, a graph per bucket in
one shared pool or pools of their own, torch.compile), at what memory, after how many steps; the
distribution with its buckets, every strategy's time and memory, the padded share, the shapes in
step order, and the strategies' table."""

import streamlit as st

from dashboard import ui
from dashboard.charts import shapes as shape_charts
from profiler_core.spec.shapes import beats_eager as clearly_faster

run = ui.require_run()
ui.run_header(run, "Shapes")
strategies = run.table("strategies")
if strategies.empty:
    st.info("This run's shapes did not change from step to step. On the command line, "
            "`--vary seq_len=lognormal:128:0.6:512` (the transformer's sequence length), "
            "`--vary batch=...` (any workload), or a keyword of your own step's batch function, "
            "with `--buckets pow2`, times every strategy for changing shapes on one seeded "
            "sequence. The sidebar's run picker also holds one measured on an H200: "
            "**Sample shapes-transformer-lognormal**.", icon=":material/info:")
    st.stop()

head = run.headline
steps = run.table("shape_steps")
dimension = str(head.get("shapes_vary", "shape")).split("=")[0]
edges = [int(e) for e in str(head.get("shapes_buckets", "")).split(",") if e.strip().isdigit()]
best = strategies.set_index("strategy")
left, middle, right, last = st.columns(4)
name = head.get("shapes_best")
best_speedup = head.get("shapes_best_speedup")
beats_eager = (isinstance(best_speedup, (int, float)) and name in best.index
               and clearly_faster(float(best_speedup),
                                              float(best.at[name, "speedup_ci_low"])))
left.metric("Pays most", (str(name) if beats_eager else "eager") if name else "n/a",
            delta=ui.fmt(head.get("shapes_best_speedup"),
                         "{:.2f}x eager" if beats_eager else "none clearly beats it: best {:.2f}x"),
            delta_color="off",
            delta_arrow="off", help="The largest speedup over eager on the whole sequence (the sums' "
                                    "ratio), among the strategies whose answer padding did not "
                                    "change.")
middle.metric("Steps", f"{int(head.get('shapes_steps', len(steps)))}",
              delta=f"{head.get('shapes_distinct', '?')} distinct shapes", delta_color="off",
              delta_arrow="off")
right.metric("Buckets", ", ".join(f"{e:,}" for e in edges) or "n/a")
if name in best.index:
    last.metric("Break-even", ui.fmt(best.at[name, "break_even_steps"], "{:,.0f} steps",
                                     missing="never"),
                help="Steps after which the strategy's one-time cost (captures, recordings) is "
                     "paid back by its saving per step over eager.")
verdict = head.get("shapes_verdict")
if verdict:
    st.success(ui.escape_md(verdict) + ".", icon=":material/lightbulb:")
st.caption(f"The varying dimension: {ui.escape_md(head.get('shapes_vary', ''))} "
           f"({ui.escape_md(head.get('shapes_distribution', ''))}). Every strategy ran the same "
           "seeded sequence, in interleaved blocks, a CUDA event (on a CPU, the wall clock) after "
           "every step.")
ui.chart(shape_charts.distribution(steps, edges, dimension), key="shapes_distribution")
ui.chart(shape_charts.times_and_memory(strategies), key="shapes_times")
left, right = st.columns(2)
with left:
    ui.chart(shape_charts.padded_share(strategies), key="shapes_padded")
with right:
    st.subheader("Parity with eager on the exact shapes")
    shown = [note.removeprefix("parity: ") for note in run.notes if note.startswith("parity: ")]
    for note in shown:
        st.caption(ui.escape_md(note))
    if not shown:
        st.caption("No parity check in this run (--parity-steps 0).")
ui.chart(shape_charts.steps_in_order(steps, dimension), key="shapes_steps")
ui.table(strategies, f"{run.name}-strategies.csv", key="shapes_table", label="strategies CSV",
         column_config=ui.number_columns(["median_ms", "p90_ms", "p99_ms", "sum_ms", "mean_ms",
                                          "speedup", "speedup_ci_low", "speedup_ci_high",
                                          "padded_share", "one_time_ms", "predicted_speedup"],
                                         "%.4g"))
ui.csv_download(steps, f"{run.name}-shape_steps.csv", key="shapes_steps_csv",
                label="every step (shape_steps.csv)")
