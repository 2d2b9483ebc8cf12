"""How much slower each mode ran under the profiler than in the headline, as a table and in one
sentence.

Scope: pure functions of metrics.csv, stats.csv and latency.csv (no Streamlit, no Plotly); the
table keeps its columns also when the input is empty.
"""

from __future__ import annotations

import math

import pandas as pd

from dashboard.analysis.frames import finite, float_column, ordered_modes

PROFILER_OVERHEAD_COLUMNS = ["mode", "profiled_ms", "headline_ms", "overhead_pct"]


def _steps_of(latency: pd.DataFrame, mode: str) -> float:
    if latency.empty:
        return 1.0
    steps = pd.to_numeric(latency.loc[latency["mode"].astype(str) == mode, "steps"],
                          errors="coerce").dropna()
    return float(steps.iloc[0]) if len(steps) and float(steps.iloc[0]) >= 1 else 1.0


def profiler_overheads(metrics: pd.DataFrame, stats: pd.DataFrame,
                       latency: pd.DataFrame) -> pd.DataFrame:
    """How much slower each mode ran under the profiler than in the headline: the profiled
    window's median iteration (wall clock, ``profiled_wall_median_ms``) against the headline's
    steady-state time of an iteration (the median per step x the steps of an iteration).
    Worked out here for every run, so a run recorded when the overhead was stored against the
    cold start says the same thing as today's. Columns ``PROFILER_OVERHEAD_COLUMNS``."""
    if metrics.empty or stats.empty:
        return pd.DataFrame(columns=PROFILER_OVERHEAD_COLUMNS)
    wall = metrics[metrics["metric"].astype(str) == "profiled_wall_median_ms"]
    rows = []
    for mode in ordered_modes(wall):
        profiled = float(float_column(wall[wall["mode"].astype(str) == mode], "value").iloc[0])
        median = stats[(stats["mode"].astype(str) == mode)
                       & (stats["method"].astype(str) == "steady_trial")]
        per_step = float(float_column(median, "median_ms").iloc[0]) if len(median) else math.nan
        headline_ms = per_step * _steps_of(latency, mode)
        if finite(profiled) and finite(headline_ms) and headline_ms > 0:
            rows.append([mode, profiled, headline_ms, (profiled / headline_ms - 1) * 100])
    return pd.DataFrame(rows, columns=PROFILER_OVERHEAD_COLUMNS)


def profiler_overhead_text(overheads: pd.DataFrame) -> str:
    """One sentence: how far the profiled window is from the headline (empty without figures)."""
    if overheads.empty:
        return ""
    rows = overheads.set_index("mode")
    first = "eager" if "eager" in rows.index else str(rows.index[0])
    row = rows.loc[first]
    text = (f"Under the profiler, {first}'s median iteration took {row['profiled_ms'] * 1e3:,.0f} us "
            f"against the headline's {row['headline_ms'] * 1e3:,.0f} us: the profiled window ran "
            f"{first} {row['overhead_pct']:.0f}% slower than the timed trials")
    others = [f"{mode} {r['overhead_pct']:.0f}% slower ({r['profiled_ms'] * 1e3:,.0f} vs "
              f"{r['headline_ms'] * 1e3:,.0f} us)" for mode, r in rows.iterrows() if mode != first]
    if others:
        text += ", and the " + ", the ".join(others)
    return text + ", so its totals are not the headline."
