"""How far a run's figures move: the panels the Overview and the Latency view share for a run
measured in several fresh processes (``repeats.csv``) and for an unstable measurement.

Scope: drawing only. The figures come from ``profiler_core.orchestration.repeats`` (the between-process table)
and ``profiler_core.timing.stability`` (the checks), the chart from ``dashboard.charts``.
"""

from __future__ import annotations

import math

import streamlit as st

from dashboard import ui
from dashboard.charts.timing import repeats_chart
from dashboard.rundata import OpenedRun
from profiler_core.orchestration import repeats
from profiler_core.timing import stability


def stability_warnings(run: OpenedRun) -> None:
    """A warning per mode whose steady-state timing is unstable (``stability.unstable_timing``),
    naming both figures and what each means."""
    for item in stability.unstable_timing(run.table("stats")):
        st.warning("**Unstable measurement.** " + ui.escape_md(item.text()),
                   icon=":material/warning:")


def _range(low: float, high: float, pattern: str) -> str:
    if not (math.isfinite(low) and math.isfinite(high)):
        return "n/a"
    return f"{pattern.format(low)}-{pattern.format(high)}"


def between_processes(run: OpenedRun, key: str) -> None:
    """A run measured in several fresh processes: the between-process interval beside the shown
    run's own CI, a warning when the spread is wider than that CI, the processes' chart and
    repeats.csv. Draws nothing for a run of one process."""
    table = run.table("repeats")
    if table.empty:
        return
    head = run.headline
    st.subheader("Between fresh processes")
    figures = repeats.between_table(head, run.pair)
    shown = head.get("repeat_shown", "?")
    cols = st.columns(3)
    cols[0].metric("Fresh processes", f"{len(table)}", delta=f"shown: #{shown}, the median",
                   delta_color="off", delta_arrow="off",
                   help="The same settings measured in this many fresh processes, one after "
                        "another. This run's tables are those of the median process.")
    speedup = figures[figures["figure"] == "speedup"]
    row = speedup.iloc[0] if len(speedup) else (figures.iloc[0] if len(figures) else None)
    if row is not None:
        pattern = "{:.2f}x" if row["unit"] == "x" else "{:.4f} ms"
        cols[1].metric("Within this process: 95% CI",
                       _range(row["shown_ci_low"], row["shown_ci_high"], pattern),
                       help="The bootstrap interval over this process's own trials: the noise of "
                            "one process. (Times per step have none.)")
        cols[2].metric(f"Between processes: {row['figure']}",
                       _range(row["interval_low"], row["interval_high"], pattern),
                       delta=f"range {_range(row['between_min'], row['between_max'], pattern)}",
                       delta_color="off", delta_arrow="off",
                       help="An interval of the median over the processes ("
                            + str(head.get("between_interval") or "order statistics")
                            + "), and under it the lowest and highest process.")
    wider = stability.spread_beyond_ci(head)
    if wider is not None:
        st.warning(ui.escape_md(wider.text()), icon=":material/warning:")
    left, right = st.columns([3, 2])
    with left:
        ui.chart(repeats_chart(table), key=f"{key}_chart")
    with right:
        ui.table(figures, f"{run.name}-between_processes.csv", key=f"{key}_between",
                 label="between-process CSV",
                 column_config={c: st.column_config.NumberColumn(format="%.4g")
                                for c in repeats.BETWEEN_COLUMNS[2:]})
    ui.table(table, f"{run.name}-repeats.csv", key=f"{key}_table", label="repeats.csv",
             column_config={"eager_median_ms": st.column_config.NumberColumn(format="%.4f"),
                            "graph_median_ms": st.column_config.NumberColumn(format="%.4f"),
                            "speedup": st.column_config.NumberColumn(format="%.2fx"),
                            "run_wall_s": st.column_config.NumberColumn(format="%.1f")})
    if head.get("between_interval"):
        st.caption("Interval of the median: " + ui.escape_md(head["between_interval"]) + ".")
