"""Every per-mode figure of a run in long form (``metrics.csv``): one row per (mode, metric), with
eager's value of the same metric and the ratio to it.

Scope: assembling that table from what a run measured (modes.csv, stats.csv and each mode's own
figures), the name a figure goes by in an index filter (:func:`headline_key`), and the schema
upgrade of summaries written before schema 4, whose headline also held per-mode figures, as
``<mode>_<metric>`` keys and a few older names (:func:`split_headline`: the only place those
names are read). Every figure the tool writes is declared in ``spec.metrics`` (:func:`build`
refuses any other name); an older run's figures are kept as stored. No measuring here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.metrics import HEADLINE_METHOD, TIMING_METHODS, spec_of
from profiler_core.spec.modes import MODE_NAMES
from profiler_core.spec.schema import METRIC_COLUMNS

BASELINE = "eager"
# Timing methods whose median is no time of a step to compare with eager's (no ``_speedup``).
_NO_SPEEDUP = tuple(spec.name for spec in TIMING_METHODS if not spec.has_speedup)
# The names of eager and graph figures that are not ``<mode>_<metric>``: how an index filter names
# them, and the keys a summary headline of schema 1 to 3 held them under.
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
          figures: Mapping[str, Mapping[str, Any]], *, from_older_run: bool = False
          ) -> pd.DataFrame:
    """metrics.csv from modes.csv, stats.csv and ``figures`` (mode -> metric -> value: what each
    mode measured beyond its timing). Modes in modes.csv's order, then any others. Every metric
    must be declared (``spec.metrics``; ``UndeclaredMetricError`` otherwise), except in the
    upgrade of a run written before metrics.csv existed (``from_older_run``: its figures are
    kept under the names it stored)."""
    values: dict[str, dict[str, float]] = {}

    def put(mode: str, metric: str, value: Any) -> None:
        if not from_older_run:
            spec_of(metric)
        number = _number(value)
        if number is not None:
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
        if eager is not None and method not in _NO_SPEEDUP:
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
    """The name of a figure of a run in an index filter (``--where``), as older summary headlines
    named it: ``<mode>_<metric>``, or the name eager's and the graph's figures have always gone by
    (``speedup``, ``capture_ms``, ``graph_pool_bytes``...)."""
    return _HEADLINE_KEY.get((mode, metric), f"{mode}_{metric}")


def _is_mode_fact(metric: str) -> bool:
    """Headline keys that start with a mode's name but are facts of the run, not figures of that
    mode: how its profiled window found its iterations (text) and a repeats run's spread between
    processes (``<figure>_between_...``)."""
    return metric == "iteration_source" or metric.startswith("between_")


def split_headline(headline: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The schema upgrade of a summary headline written before schema 4: (its facts, its per-mode
    figures as mode -> metric -> value). The figures are the ``<mode>_<metric>`` keys and the
    older names of ``_HEADLINE_NAMES``; the facts are every other key (the timing method, the
    prediction, parity, counters, how each window found its iterations, the repeats' spread)."""
    facts: dict[str, Any] = {}
    figures: dict[str, dict[str, Any]] = {}
    by_length = sorted(MODE_NAMES, key=len, reverse=True)  # "graphed_callables_" before "graph_"
    for key, value in headline.items():
        if key in _HEADLINE_NAMES:
            mode, metric = _HEADLINE_NAMES[key]
        else:
            prefixed = next((m for m in by_length if key.startswith(m + "_")), None)
            if prefixed is None or _is_mode_fact(key[len(prefixed) + 1:]):
                facts[key] = value
                continue
            mode, metric = prefixed, key[len(prefixed) + 1:]
        figures.setdefault(mode, {})[metric] = value
    return facts, figures


def with_figures(table: pd.DataFrame, figures: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """metrics.csv with the ``figures`` it lacks added (a figure it holds keeps its value), eager's
    value and the ratio to it worked out again; values that are not numbers are left out. The
    upgrade of an older run (its headline's figures): names are kept as stored."""
    frame = table[METRIC_COLUMNS[:3]] if set(METRIC_COLUMNS[:3]) <= set(table.columns) else \
        pd.DataFrame(columns=METRIC_COLUMNS[:3])
    held = set(zip(frame["mode"].astype(str), frame["metric"].astype(str)))
    added = [[mode, metric, value] for mode, by_metric in figures.items()
             for metric, value in by_metric.items()
             if (mode, metric) not in held and _number(value) is not None]
    if not added:
        return table
    rows = pd.DataFrame(added, columns=METRIC_COLUMNS[:3])
    return _with_eager(pd.concat([frame, rows], ignore_index=True) if len(frame) else rows)


def _number(value: Any) -> float | None:
    """A figure's value as a float; None for anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits (an edited summary): not a figure
        return None

