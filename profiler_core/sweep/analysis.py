"""What a sweep found: pure functions on its tables (points.csv, point_modes.csv).

Scope: :func:`speedup_table` (speedup with its CI, eager and mode medians, the GPU-busy floor,
per point and mode), :func:`crossovers` (where the speedup falls below the threshold,
interpolated on a log scale), :func:`break_even_table` (one-time cost and memory against the
per-step saving), :func:`amortisation_table` (time per step against iterations per graph,
beside the floor) and :func:`format_sweep` (the command line's summary). No Streamlit or Plotly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from profiler_core.sweep.plan import DEFAULT_THRESHOLD, SweepPlan
from profiler_core.timing import stats

SPEEDUP_COLUMNS = ["index", "mode", "series", "speedup", "speedup_ci_low", "speedup_ci_high",
                   "predicted_speedup", "eager_ms", "mode_ms", "floor_ms", "one_time_ms",
                   "memory_bytes"]


def speedup_table(points: pd.DataFrame, point_modes: pd.DataFrame, axis_names: Sequence[str],
                  x: str | None = None) -> pd.DataFrame:
    """One row per measured point and mode other than eager: the axes' values, the mode's speedup
    over eager with its 95% CI, eager's and the mode's medians per step, the point's GPU-busy
    floor per step, the mode's one-time cost and memory. ``series`` names the line a row belongs
    to when plotted against ``x`` (the mode and the other axes' values). ``predicted_speedup`` is
    the prediction from the eager profiled window alone (``profiler_core.analysis.predict``), for the
    graph mode of points that have one."""
    columns = [*axis_names, *SPEEDUP_COLUMNS]
    done = points[points["status"] == "done"]
    if done.empty or point_modes.empty:
        return pd.DataFrame(columns=columns)
    eager = point_modes[point_modes["mode"] == "eager"].set_index("index")["median_ms"]
    rows = point_modes[(point_modes["mode"] != "eager") & point_modes["index"].isin(done["index"])]
    predicted = done.get("predicted_speedup", pd.Series(math.nan, index=done.index))
    merged = rows.merge(done[["index", *axis_names, "floor_ms"]].assign(predicted=predicted),
                        on="index", how="inner")
    merged = merged.assign(eager_ms=merged["index"].map(eager).astype(float),
                           mode_ms=merged["median_ms"].astype(float),
                           predicted_speedup=merged["predicted"].where(merged["mode"] == "graph"))
    others = [name for name in axis_names if name != x]
    merged["series"] = [" · ".join([str(row["mode"]), *(f"{name}={row[name]}" for name in others)])
                        for _, row in merged.iterrows()]
    merged = merged[columns].sort_values(["index", "mode"], kind="stable")
    return merged.reset_index(drop=True)


def eager_table(points: pd.DataFrame, point_modes: pd.DataFrame, axis_names: Sequence[str],
                x: str | None = None) -> pd.DataFrame:
    """One row per measured point with eager's median per step, in ``speedup_table``'s columns
    (``mode`` "eager", ``mode_ms`` and the speedup NaN; ``series`` "eager" with the other axes'
    values): what a sweep without a graph timing (a CPU sweep) measured, for the medians chart."""
    columns = [*axis_names, *SPEEDUP_COLUMNS]
    done = points[points["status"] == "done"]
    if done.empty or point_modes.empty:
        return pd.DataFrame(columns=columns)
    rows = point_modes[(point_modes["mode"] == "eager") & point_modes["index"].isin(done["index"])]
    merged = rows.merge(done[["index", *axis_names, "floor_ms"]], on="index", how="inner")
    others = [name for name in axis_names if name != x]
    merged = merged.assign(
        series=[" · ".join(["eager", *(f"{name}={row[name]}" for name in others)])
                for _, row in merged.iterrows()],
        speedup=math.nan, speedup_ci_low=math.nan, speedup_ci_high=math.nan,
        predicted_speedup=math.nan, eager_ms=merged["median_ms"].astype(float), mode_ms=math.nan)
    return merged[columns].sort_values("index", kind="stable").reset_index(drop=True)


CROSSOVER_COLUMNS = ["series", "crossover", "direction", "below_x", "above_x", "text"]


def _x_text(value: float) -> str:
    """A parameter value in a sentence: 1,758 or 2.5 (never 1.76e+03)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def crossovers(table: pd.DataFrame, x: str, threshold: float = DEFAULT_THRESHOLD,
               numeric: bool = True) -> pd.DataFrame:
    """Per series of ``speedup_table`` (against ``x``): where the speedup crosses ``threshold``.

    Along increasing ``x``, the first pair of neighbouring points whose speedups bracket the
    threshold from above to below gives the crossover, interpolated linearly in log(x) between
    them (``direction`` "falls below"); without one, the first from below to above ("rises
    above"). None found is said plainly in ``text``: above at every point, below at every point,
    or too few points. A text parameter (dtype, modes) has no crossover."""
    rows = []
    for series, group in table.groupby("series", sort=False):
        data = group[[x, "speedup"]].copy()
        data["speedup"] = pd.to_numeric(data["speedup"], errors="coerce")
        data = data[np.isfinite(data["speedup"].to_numpy(dtype=float))]
        row = {"series": series, "crossover": math.nan, "direction": "", "below_x": math.nan,
               "above_x": math.nan}
        if not numeric:
            row["text"] = f"{series}: no crossover along {x} (not a number)"
            rows.append(row)
            continue
        data = data.sort_values(x, kind="stable")
        xs, ys = data[x].to_numpy(dtype=float), data["speedup"].to_numpy(dtype=float)
        if len(xs) < 2:
            row["text"] = f"{series}: too few measured points to look for a crossover"
            rows.append(row)
            continue
        found = None
        for want in ("falls below", "rises above"):
            for i in range(len(xs) - 1):
                a, b = ys[i], ys[i + 1]
                falls = a >= threshold > b
                rises = a < threshold <= b
                if (falls if want == "falls below" else rises) and xs[i] > 0 and xs[i + 1] > 0:
                    found = (want, i)
                    break
            if found:
                break
        if found is None:
            where = f"{x} {_x_text(xs[0])} to {_x_text(xs[-1])}"
            row["text"] = (f"{series}: no crossover; the speedup stays at or above "
                           f"{threshold:.2f}x over {where}" if (ys >= threshold).all() else
                           f"{series}: no crossover; the speedup is below {threshold:.2f}x at "
                           f"every point of {where}")
            rows.append(row)
            continue
        direction, i = found
        a, b = ys[i], ys[i + 1]
        share = (threshold - a) / (b - a)
        value = math.exp(math.log(xs[i]) + share * (math.log(xs[i + 1]) - math.log(xs[i])))
        row.update(crossover=value, direction=direction,
                   above_x=xs[i] if direction == "falls below" else xs[i + 1],
                   below_x=xs[i + 1] if direction == "falls below" else xs[i])
        row["text"] = (f"{series}: the speedup {direction} {threshold:.2f}x at {x} ≈ "
                       f"{_x_text(value)} (between {_x_text(xs[i])}: {a:.2f}x and "
                       f"{_x_text(xs[i + 1])}: {b:.2f}x)")
        rows.append(row)
    return pd.DataFrame(rows, columns=CROSSOVER_COLUMNS)


BREAK_EVEN_COLUMNS = ["index", "mode", "saving_ms", "one_time_ms", "memory_mib", "break_even_steps",
                      "pays_back"]


def break_even_table(table: pd.DataFrame, axis_names: Sequence[str]) -> pd.DataFrame:
    """Per point and mode of ``speedup_table``: the saving per training step (eager median minus
    the mode's), the one-time cost (capture with its warm-up, or compilation) and the memory it
    kept, and the steps after which the saving has paid the cost back (inf: never, the mode is
    not faster; NaN: not measured)."""
    columns = [*axis_names, *BREAK_EVEN_COLUMNS]
    if table.empty:
        return pd.DataFrame(columns=columns)
    out = table[["index", *axis_names, "mode"]].copy()
    out["saving_ms"] = table["eager_ms"] - table["mode_ms"]
    out["one_time_ms"] = table["one_time_ms"]
    out["memory_mib"] = table["memory_bytes"] / 2**20
    out["break_even_steps"] = [stats.break_even_iterations(cost, eager, mode) for cost, eager, mode
                               in zip(table["one_time_ms"], table["eager_ms"], table["mode_ms"])]
    out["pays_back"] = [("never (graph not faster)" if math.isinf(steps) else
                         "not measured" if math.isnan(steps) else f"after {steps:,.0f} steps")
                        for steps in out["break_even_steps"]]
    return out[columns].reset_index(drop=True)


AMORTISATION_COLUMNS = ["capture_iters", "series", "graph_ms", "eager_ms", "floor_ms",
                        "above_floor_pct"]


def amortisation_table(table: pd.DataFrame, axis_names: Sequence[str]) -> pd.DataFrame:
    """Time per training step of the graph against the training steps captured in one graph
    (``capture_iters`` must be a swept axis; otherwise empty), beside eager and the GPU-busy
    floor: how far one replay's launch cost is spread. ``series`` names the other axis's value."""
    if "capture_iters" not in axis_names or table.empty:
        return pd.DataFrame(columns=AMORTISATION_COLUMNS)
    graph = table[table["mode"] == "graph"]
    others = [name for name in axis_names if name != "capture_iters"]
    out = pd.DataFrame({
        "capture_iters": graph["capture_iters"].astype(int),
        "series": [" · ".join(f"{name}={row[name]}" for name in others) or "graph"
                   for _, row in graph.iterrows()],
        "graph_ms": graph["mode_ms"], "eager_ms": graph["eager_ms"], "floor_ms": graph["floor_ms"]})
    out["above_floor_pct"] = (out["graph_ms"] / out["floor_ms"] - 1.0) * 100.0
    return out.sort_values(["series", "capture_iters"], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- as text


def format_sweep(points: pd.DataFrame, point_modes: pd.DataFrame, plan: SweepPlan) -> str:
    """The sweep's table and its crossover(s) as plain text (the CLI's summary)."""
    shown = points[["index", *plan.axis_names, "status", "eager_median_ms", "graph_median_ms",
                    "speedup", "speedup_ci_low", "speedup_ci_high", "predicted_speedup",
                    "floor_ms", "break_even_steps", "error_kind"]].copy()
    lines = ["Points (ms per training step; speedup with its 95% CI; predicted: from the eager "
             "profiled window alone; floor: GPU busy per step)",
             shown.to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")]
    x = plan.axes[0]
    table = speedup_table(points, point_modes, plan.axis_names, x.name)
    lines += ["", f"Crossover (threshold {plan.threshold:.2f}x, along {x.name}):"]
    if table.empty:
        measured = (points["status"] == "done").any()
        lines.append("  no graph timing in the measured points (a CPU sweep times the eager half "
                     "only)" if measured else "  no point was measured")
    for text in crossovers(table, x.name, plan.threshold, x.numeric)["text"]:
        lines.append(f"  {text}")
    failed = points[points["status"] == "failed"]
    for _, row in failed.iterrows():
        lines.append(f"point {int(row['index'])} failed ({row['error_kind']}): {row['error_message']}")
    return "\n".join(lines)


