"""The article's static counter after each phase: predicted by its rule against observed."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.common import (
    apply_layout,
    empty_figure,
    escape,
    finite,
    log_ticks,
)
from dashboard.charts.palette import SERIES_COLORS

COUNTER_COLORS = {"predicted": SERIES_COLORS[5], "observed": SERIES_COLORS[0]}
LOG_FROM = 20.0  # values spanning more than this many times: a log axis


def counter_bars(lessons: pd.DataFrame) -> go.Figure:
    """The static counter after each phase: predicted by the article's rule vs observed, each
    bar labelled with its value. When the values span more than ``LOG_FROM`` times (3 warm-up
    steps beside 200 replays), the axis is logarithmic, so that a count of 3 is a bar one can see
    (the lesson that capture does not move the counter is 3 -> 3); a zero, which a log axis
    cannot draw, is written where its bar would stand."""
    title = "Static counter after each phase"
    if lessons.empty:
        return empty_figure(title)
    phases = [escape(p) for p in lessons["phase"].astype(str)]
    values = {column: finite(lessons[column]) for column in COUNTER_COLORS}
    every = np.concatenate(list(values.values()))
    positive = every[np.isfinite(every) & (every > 0)]
    log = positive.size > 0 and float(positive.max()) / float(positive.min()) > LOG_FROM
    fig = go.Figure()
    for column, color in COUNTER_COLORS.items():
        shown = np.where(values[column] > 0, values[column], np.nan) if log else values[column]
        fig.add_trace(go.Bar(x=phases, y=shown, name=column, marker_color=color,
                             text=[f"{v:,.0f}" if np.isfinite(v) else "" for v in values[column]],
                             textposition="outside", cliponaxis=False, textfont={"size": 10},
                             hovertemplate="%{fullData.name}: %{text}<extra>%{x}</extra>"))
    fig.update_layout(barmode="group")
    if log:
        top = float(positive.max())
        fig.update_yaxes(title_text="counter value (log scale)", type="log",
                         range=[-0.2, math.log10(top) + 0.35], **log_ticks(0.7, top))
        for phase, *pair in zip(phases, *values.values()):  # zeros: said, not drawn
            if all(v == 0 for v in pair):
                fig.add_annotation(x=phase, y=0, yref="paper", yanchor="bottom", text="0",
                                   showarrow=False)
    else:
        fig.update_yaxes(title_text="counter value", rangemode="tozero")
    return apply_layout(fig, title)
