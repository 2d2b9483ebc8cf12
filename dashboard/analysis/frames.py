"""Helpers every table of the run's analysis shares: finite numbers, a column as floats, the
modes of a table in run order, and the article's pair of modes.

Scope: pure functions of values and DataFrames (no Streamlit, no Plotly).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from profiler_core import MODE_NAMES
from profiler_core.analysis.figures import as_number

MODES = ("eager", "graph")  # the article's pair: eager is every comparison's baseline


def number(values: Mapping[str, Any], key: str) -> float:
    """``values[key]`` as a float (a fact of the summary's headline, such as the parity); NaN when
    missing, None, not a number (text, true/false, a JSON object or list) or too large for a
    float."""
    return as_number(values.get(key))


def finite(value: float) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def float_column(frame: pd.DataFrame, column: str) -> pd.Series:
    values = pd.to_numeric(frame[column], errors="coerce").astype(float)
    return values.where(np.isfinite(values))


def ordered_modes(frame: pd.DataFrame) -> list[str]:
    """The modes in a table, in the order a run measures them (eager, graph, then the others)."""
    present = list(pd.unique(frame["mode"].dropna().astype(str)))  # a row without a mode is skipped
    order = {mode: index for index, mode in enumerate(MODE_NAMES)}
    return sorted(present, key=lambda m: (order.get(m, len(order)), m))
