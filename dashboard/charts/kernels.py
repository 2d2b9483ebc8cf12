"""The kernel figures: one mode's top kernels by GPU time, and eager against another mode kernel
by kernel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboard.charts.common import (
    apply_layout,
    empty_figure,
    escape,
    finite_frame,
    mode_color,
    number_text,
)


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


def _unique(labels: Sequence[str]) -> list[str]:
    """Category labels made distinct (two kernels with one short name would share a bar):
    a repeated label gets ' (2)', ' (3)'..."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def _operators(kernels: pd.DataFrame) -> list[str]:
    """Each row's launching operator for hover text, escaped ('not recorded' when the run has
    none: recorded before the operator column, or not found in the trace)."""
    column = kernels["operator"] if "operator" in kernels else pd.Series("", index=kernels.index)
    return [escape(str(op)) if isinstance(op, str) and op else "(not recorded)" for op in column]


def kernel_top_bar(kernels: pd.DataFrame, mode: str, top_n: int = 10) -> go.Figure:
    """The ``top_n`` kernels of one mode by total GPU time (horizontal bars, biggest on top)."""
    title = f"Under the profiler: top {top_n} kernels by GPU time, {escape(mode)}"
    part = kernels[kernels["mode"].astype(str) == mode] if not kernels.empty else kernels
    part = finite_frame(part, ("total_us", "share_of_gpu_pct", "calls_per_iter", "mean_us"))
    part = part.dropna(subset=["total_us"]) if not part.empty else part
    if part.empty:
        return empty_figure(title, f"no kernels recorded for {mode}")
    top = part.sort_values("total_us", ascending=False).head(top_n)
    names = _unique([escape(_short(n)) for n in top["kernel"].astype(str)])[::-1]
    top = top.iloc[::-1]
    fig = go.Figure(go.Bar(
        x=top["total_us"], y=names, orientation="h", marker_color=mode_color(mode),
        text=[f"{s:.1f}%" if np.isfinite(s) else "" for s in top["share_of_gpu_pct"]],
        textposition="auto",
        customdata=np.stack([[escape(n) for n in top["kernel_full"].astype(str)],
                             number_text(top["calls_per_iter"].to_numpy(dtype=float), "{:,.0f}"),
                             number_text(top["mean_us"].to_numpy(dtype=float), "{:,.2f}"),
                             _operators(top)], axis=1),
        hovertemplate="%{customdata[0]}<br>launched by %{customdata[3]}<br>total %{x:,.1f} us, "
                      "%{customdata[1]} calls/iter, mean %{customdata[2]} us<extra></extra>"))
    fig.update_xaxes(title_text="GPU time (us, profiled window)")
    fig.update_yaxes(automargin=True)
    return apply_layout(fig, title, height=max(260, 28 * len(top) + 120), showlegend=False)


def kernel_diff_bars(diff: pd.DataFrame, top_n: int = 15) -> go.Figure:
    """Eager vs another mode, GPU time per iteration of each kernel (``kernel_tables.kernel_diff``, whose
    columns name the mode): the ``top_n`` kernels with the largest time in either, side by side."""
    other = next((c[:-len("_us_per_iter")] for c in diff.columns
                  if c.endswith("_us_per_iter") and c != "eager_us_per_iter"), "graph")
    title = (f"Under the profiler: kernels eager vs {escape(other)}, GPU time per iteration "
             f"(top {top_n})")
    if diff.empty:
        return empty_figure(title, "no kernels to compare")
    pair = ("eager", other)
    diff = finite_frame(diff, [f"{mode}_us_per_iter" for mode in pair])
    size = diff[[f"{mode}_us_per_iter" for mode in pair]].max(axis=1, skipna=True)
    top = diff.assign(_size=size.fillna(0)).sort_values("_size", ascending=False).head(top_n)
    names = _unique([escape(_short(n)) for n in top["kernel"].astype(str)])[::-1]
    top = top.iloc[::-1]
    full = np.stack([[escape(n) for n in top["kernel_full"].astype(str)], _operators(top)], axis=1)
    fig = go.Figure()
    for mode in pair:
        values = top[f"{mode}_us_per_iter"].to_numpy(dtype=float)
        fig.add_trace(go.Bar(x=values, y=names, orientation="h", name=escape(mode),
                             marker_color=mode_color(mode), customdata=full,
                             hovertemplate="%{customdata[0]}<br>launched by %{customdata[1]}<br>"
                                           "%{fullData.name}: %{x:,.2f} us per iteration"
                                           "<extra></extra>"))
    fig.update_layout(barmode="group", bargap=0.2)
    fig.update_xaxes(title_text="GPU time per iteration (us, profiled window)")
    fig.update_yaxes(automargin=True)
    return apply_layout(fig, title, height=max(280, 34 * len(top) + 130))
