"""The article's static counter after each phase: predicted by its rule against observed."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.common import (
    apply_layout,
    empty_figure,
    escape,
    finite,
)
from dashboard.charts.palette import SERIES_COLORS

COUNTER_COLORS = {"predicted": SERIES_COLORS[5], "observed": SERIES_COLORS[0]}


def counter_bars(lessons: pd.DataFrame) -> go.Figure:
    """The static counter after each phase: predicted by the article's rule vs observed."""
    title = "Static counter after each phase"
    if lessons.empty:
        return empty_figure(title)
    phases = [escape(p) for p in lessons["phase"].astype(str)]
    fig = go.Figure()
    for column, color in COUNTER_COLORS.items():
        values = finite(lessons[column])
        fig.add_trace(go.Bar(x=phases, y=values, name=column, marker_color=color,
                             hovertemplate="%{fullData.name}: %{y}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="counter value", rangemode="tozero")
    return apply_layout(fig, title)
