"""A run's figures, held once: every per-mode figure in long form, and the article's pair.

Scope: :class:`Figures` (mode, metric, value: the rows of metrics.csv, where a run of schema 4
holds every per-mode figure; what an older summary's headline kept under its own names is read
by the schema upgrade, ``metrics.split_headline``) and :class:`Headline` (eager against the
graph: the two medians, the speedup with its confidence interval, the break-even). Readers ask
for a figure by mode and metric (``figures.get("graph", "capture_ms")``), never by a key; a
metric no ``spec.metrics.MetricSpec`` declares is refused (``UndeclaredMetricError``), while a
declared one the run does not hold for that mode reads NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from profiler_core.spec.metrics import spec_of


def as_number(value: Any) -> float:
    """A figure as a float: NaN for anything that is not a number (text, true/false, None, a
    whole number too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


class Figures:
    """Every per-mode figure of a run, once: mode -> metric -> value (NaN: not measured)."""

    def __init__(self, values: Mapping[str, Mapping[str, float]]) -> None:
        self._values = {mode: dict(by_metric) for mode, by_metric in values.items()}

    @classmethod
    def from_table(cls, table: pd.DataFrame) -> Figures:
        """The figures of metrics.csv (its first row of a repeated mode and metric; a value that is
        not a number is NaN)."""
        values: dict[str, dict[str, float]] = {}
        if {"mode", "metric", "value"} <= set(table.columns):
            numbers = pd.to_numeric(table["value"], errors="coerce")
            for mode, metric, value in zip(table["mode"], table["metric"], numbers):
                if isinstance(mode, str) and isinstance(metric, str):
                    values.setdefault(mode, {}).setdefault(metric, as_number(value))
        return cls(values)

    def get(self, mode: str, metric: str, default: float = math.nan) -> float:
        """The figure, ``default`` (NaN) when the run has none; ``UndeclaredMetricError`` for a
        metric no ``MetricSpec`` declares."""
        return self._values.get(mode, {}).get(spec_of(metric).name, default)

    def holds(self, mode: str, metric: str) -> bool:
        """Whether the run holds that figure at all (NaN included: measured, with no value)."""
        return spec_of(metric).name in self._values.get(mode, {})

    def has(self, mode: str, metric: str) -> bool:
        """Whether the run holds a finite value of that figure."""
        return math.isfinite(self.get(mode, metric))

    def modes(self) -> list[str]:
        return list(self._values)

    def of_mode(self, mode: str) -> dict[str, float]:
        """One mode's figures, metric -> value."""
        return dict(self._values.get(mode, {}))

    def items(self) -> Iterator[tuple[str, str, float]]:
        """(mode, metric, value) for every figure."""
        for mode, by_metric in self._values.items():
            for metric, value in by_metric.items():
                yield mode, metric, value

    def frame(self) -> pd.DataFrame:
        """The figures as a long table: mode, metric, value."""
        return pd.DataFrame(list(self.items()), columns=["mode", "metric", "value"])


@dataclass(frozen=True)
class Headline:
    """The article's pair: eager against the graph, per training step, by the run's headline
    timing method (``timing_method``). ``pays_back`` is 1 or 0 (NaN: not measured);
    ``break_even_steps`` is NaN when the graph never pays its one-time cost back."""

    timing_method: str
    eager_ms: float
    graph_ms: float
    speedup: float
    speedup_ci_low: float
    speedup_ci_high: float
    break_even_steps: float
    pays_back: float

    @classmethod
    def of(cls, figures: Figures, facts: Mapping[str, Any]) -> Headline:
        """The pair from a run's figures and its headline's facts (``timing_method``)."""
        method = facts.get("timing_method")
        return cls(timing_method=method if isinstance(method, str) else "",
                   eager_ms=figures.get("eager", "median_ms"),
                   graph_ms=figures.get("graph", "median_ms"),
                   speedup=figures.get("graph", "speedup"),
                   speedup_ci_low=figures.get("graph", "speedup_ci_low"),
                   speedup_ci_high=figures.get("graph", "speedup_ci_high"),
                   break_even_steps=figures.get("graph", "break_even_iters"),
                   pays_back=figures.get("graph", "pays_back"))
