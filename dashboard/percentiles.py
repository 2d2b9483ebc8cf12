"""Percentiles of a run's time per step, each shown only where the sample supports it.

Scope: pure functions of DataFrames (no Streamlit, no Plotly).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dashboard.analysis.frames import ordered_modes
from dashboard.analysis.timing import SERIES, per_step_latency, series_steps

PERCENTILES = (1, 10, 25, 50, 75, 90, 99, 99.9)
PERCENTILE_COLUMNS = (["mode", "timing", "count"]
                      + [f"p{str(p).replace('.', '_')}_ms" for p in PERCENTILES]
                      + ["max_ms", "mean_ms"])


PERCENTILE_RULE = ("a percentile is shown only when the sample is large enough to put at least "
                   "one sample beyond it: p99.9 needs 1,000 samples, p1 and p99 100, p10 and p90 "
                   "10, p25 and p75 4 (the median and the max: any)")


def percentile_min_count(percentile: float) -> int:
    """The fewest samples that support ``percentile`` (0-100): one sample expected beyond it on
    its nearer tail, so p99 needs 100 and p99.9 needs 1,000; the median needs one
    (``PERCENTILE_RULE``)."""
    tail = min(float(percentile), 100.0 - float(percentile))
    return 1 if tail <= 0 or tail >= 50 else int(math.ceil(round(100.0 / tail, 6)))


def supported_percentiles(frame: pd.DataFrame, count: str = "count",
                          columns: dict[str, float] | None = None) -> pd.DataFrame:
    """``frame`` with every percentile cell its row's ``count`` cannot support set to NaN
    (``columns``: column -> percentile; by default the ``p<N>_ms`` columns present)."""
    if columns is None:
        columns = {}
        for column in frame.columns:
            if column.startswith("p") and column.endswith("_ms"):
                try:
                    columns[column] = float(column[1:-3].replace("_", "."))
                except ValueError:
                    continue
    out = frame.copy()
    counts = pd.to_numeric(out[count], errors="coerce") if count in out else None
    if counts is None or out.empty:
        return out
    for column, percentile in columns.items():
        if column in out:
            out[column] = pd.to_numeric(out[column], errors="coerce").astype(float).where(
                counts >= percentile_min_count(percentile))
    return out


def percentile_table(latency: pd.DataFrame, steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Percentiles of the per-step time per mode and per-iteration method (``steps``: the
    ``per_step_latency`` of ``latency`` when already computed). A percentile the row's count does
    not support (``PERCENTILE_RULE``) is NaN."""
    steps = per_step_latency(latency) if steps is None else steps
    rows = []
    for timing in SERIES:
        part, column = series_steps(steps, timing)
        for mode in ordered_modes(part):
            group = part[part["mode"].astype(str) == mode]
            values = group[column].dropna().to_numpy(dtype=float)
            if values.size == 0:
                continue
            quantiles = [q if values.size >= percentile_min_count(p) else math.nan
                         for p, q in zip(PERCENTILES, np.percentile(values, PERCENTILES))]
            rows.append([mode, timing, int(values.size), *quantiles, values.max(), values.mean()])
    return pd.DataFrame(rows, columns=PERCENTILE_COLUMNS)
