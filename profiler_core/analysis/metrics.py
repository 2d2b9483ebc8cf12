"""Every per-mode figure of a run in long form (``metrics.csv``): one row per (mode, metric), with
eager's value of the same metric and the ratio to it.

Scope: assembling that table from what a run measured (modes.csv, stats.csv and each mode's own
figures) and deriving it for runs saved before it existed (schema 1 and 2, whose per-mode figures
sit in the headline as ``<mode>_<metric>`` keys and a few older names: the only place those names
are known, with the writer's :func:`headline_key`). No measuring here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.modes import MODE_NAMES
from profiler_core.spec.schema import METRIC_COLUMNS

BASELINE = "eager"
# The headline method (modes.csv's median_ms and speedup): not repeated as <method>_ metrics.
HEADLINE_METHOD = "steady_trial"
# The summary headline's names of eager and graph figures that are not ``<mode>_<metric>`` (the
# headline keeps them for the article's pair; schema-2 runs had only these).
_HEADLINE_NAMES = {
    "cold_eager_median_ms": ("eager", "cold_event_median_ms"),
    "cold_graph_median_ms": ("graph", "cold_event_median_ms"),
    "article_eager_ms": ("eager", "article_no_sync_median_ms"),
    "article_graph_ms": ("graph", "article_no_sync_median_ms"),
    "block_eager_ms": ("eager", "block_sync_median_ms"),
    "block_graph_ms": ("graph", "block_sync_median_ms"),
    "graph_input_copy_ms": ("graph", "input_copy_median_ms"),
    "warmup_ms": ("graph", "warmup_ms"),
    "capture_ms": ("graph", "capture_ms"),
    "graph_pool_bytes": ("graph", "pool_bytes"),
    "graph_pool_allocated_bytes": ("graph", "pool_allocated_bytes"),
    "break_even_iters": ("graph", "break_even_iters"),
    "speedup": ("graph", "speedup"),
    "speedup_ci_low": ("graph", "speedup_ci_low"),
    "speedup_ci_high": ("graph", "speedup_ci_high"),
    "cold_speedup": ("graph", "cold_event_speedup"),
    "article_speedup": ("graph", "article_no_sync_speedup"),
    "block_speedup": ("graph", "block_sync_speedup"),
}
_HEADLINE_KEY = {figure: key for key, figure in _HEADLINE_NAMES.items()}


def build(modes: pd.DataFrame, stats: pd.DataFrame,
          figures: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """metrics.csv from modes.csv, stats.csv and ``figures`` (mode -> metric -> value: what each
    mode measured beyond its timing). Modes in modes.csv's order, then any others."""
    values: dict[str, dict[str, float]] = {}

    def put(mode: str, metric: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            return
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits (an edited summary): not a figure
            return
        values.setdefault(mode, {}).setdefault(metric, number)

    for row in modes.to_dict("records"):
        for column, value in row.items():
            if column != "mode":
                put(str(row["mode"]), column, value if pd.notna(value) else math.nan)
    medians = {(str(r["mode"]), str(r["method"])): float(r["median_ms"])
               for r in stats.to_dict("records") if pd.notna(r["median_ms"])}
    for (mode, method), median in medians.items():
        if method == HEADLINE_METHOD:
            continue
        put(mode, f"{method}_median_ms", median)
        eager = medians.get((BASELINE, method))
        if eager is not None and method not in ("input_copy", "host_issue", "held_replay"):
            put(mode, f"{method}_speedup", eager / median if median else math.nan)
    for mode, metrics in figures.items():
        for metric, value in metrics.items():
            put(mode, metric, value)
    rows = [[mode, metric, value] for mode, metrics in values.items()
            for metric, value in metrics.items()]
    return _with_eager(pd.DataFrame(rows, columns=METRIC_COLUMNS[:3]))


def _with_eager(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame(columns=METRIC_COLUMNS)
    frame = frame.assign(value=pd.to_numeric(frame["value"], errors="coerce").astype(float))
    eager = frame[frame["mode"] == BASELINE].drop_duplicates("metric").set_index("metric")["value"]
    frame["eager_value"] = frame["metric"].map(eager).astype(float)
    ratio = frame["value"] / frame["eager_value"]
    frame["ratio_to_eager"] = ratio.where(np.isfinite(ratio))
    return frame[METRIC_COLUMNS].reset_index(drop=True)


def headline_key(mode: str, metric: str) -> str:
    """The summary headline's name for a figure of eager or the graph: ``<mode>_<metric>``, or
    the older name the headline has always used for it (``capture_ms``, ``graph_pool_bytes``...)."""
    return _HEADLINE_KEY.get((mode, metric), f"{mode}_{metric}")


def headline_figures(headline: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The per-mode figures a summary headline holds under its own names (the schema upgrade: the
    ``<mode>_<metric>`` keys and the older names of ``_HEADLINE_NAMES``), mode -> metric -> value.
    Keys that are no mode's figure (the prediction, parity, counters...) are left out."""
    figures: dict[str, dict[str, Any]] = {}
    by_length = sorted(MODE_NAMES, key=len, reverse=True)  # "graphed_callables_" before "graph_"
    for key, value in headline.items():
        if key in _HEADLINE_NAMES:
            mode, metric = _HEADLINE_NAMES[key]
        else:
            prefixed = next((m for m in by_length if key.startswith(m + "_")), None)
            if prefixed is None:
                continue
            mode, metric = prefixed, key[len(prefixed) + 1:]
        figures.setdefault(mode, {})[metric] = value
    return figures


def from_saved_headline(modes: pd.DataFrame, stats: pd.DataFrame,
                        headline: Mapping[str, Any]) -> pd.DataFrame:
    """metrics.csv of a run saved before the table existed: its modes.csv and stats.csv, and the
    per-mode figures its headline kept (:func:`headline_figures`)."""
    return build(modes, stats, headline_figures(headline))
