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


def stability_summary(found: list[stability.Instability], modes: int,
                      host: stability.HostLoad) -> str:
    """The one line that stands for every unstable mode: which, how far their trials spread, and
    a loaded host when it was ('Unstable measurement in 4 of 5 modes (eager, ...): trials spread
    14-28% of their median')."""
    names = ", ".join(item.mode for item in found)
    spreads = [item.trial_iqr_pct for item in found if math.isfinite(item.trial_iqr_pct)]
    spread = ""
    if spreads:
        low, high = min(spreads), max(spreads)
        spread = (f": trials spread {low:.0f}% of their median" if round(low) == round(high) else
                  f": trials spread {low:.0f}-{high:.0f}% of their median")
    where = f"{len(found)} of {modes} modes" if modes > 1 else "this run"
    return (f"Unstable measurement in {where} ({names}){spread}"
            + ("; the host was loaded" if host.loaded else ""))


def stability_warnings(run: OpenedRun) -> None:
    """One line for every mode whose steady-state timing is unstable
    (``stability.unstable_timing``), which opens into each mode's figures and what they mean,
    with the host's load and thread count; none where the trials differ in their work
    (``stability.trials_are_alike``: a run of changing shapes)."""
    if not stability.trials_are_alike(run.config.vary):
        return
    found = stability.unstable_timing(run.table("stats"))
    if not found:
        return
    host = stability.HostLoad.of(run.environment)
    stats = run.table("stats")
    modes = int(stats["mode"].nunique()) if "mode" in stats else len(found)
    with st.expander(ui.escape_md(stability_summary(found, modes, host)),
                     icon=":material/warning:"):
        st.markdown("\n".join(f"- {ui.escape_md(item.figures())}" for item in found))
        st.markdown(ui.escape_md(
            f"Some steps took much longer than a typical one ({host.cause()}), so each figure "
            f"depends on when they fell: the measurement is unstable. {stability.ADVICE}"))


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
    wider = stability.spread_beyond_ci(head, (run.pair.speedup_ci_low, run.pair.speedup_ci_high))
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
