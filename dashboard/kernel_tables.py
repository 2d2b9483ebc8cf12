"""Kernel tables of a run: the kernels of each mode made readable, with the operator that
launched each, eager against another mode kernel by kernel, and filtering by name.

Scope: pure functions of DataFrames (no Streamlit, no Plotly).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dashboard.analysis.frames import float_column
from profiler_core.analysis.kernel_names import kernel_label
from profiler_core.spec.config import MODE_NAMES

KERNEL_TABLE_COLUMNS = ["mode", "kernel", "operator", "calls_per_iter", "total_us", "mean_us",
                        "min_us", "max_us", "share_of_gpu_pct", "kernel_full"]


# What the Kernels page says of the operator column (``profiler_core.analysis.trace.OPERATOR_CATEGORY``).
OPERATOR_MEANING = ("operator: the CPU op that launched the kernel (the innermost aten:: op around "
                    "its launch call, linked by correlation id), as the PyTorch profiler and HTA "
                    "attribute kernels; in a graph's window its kernels were launched by the "
                    "replay, so the eager operator is shown beside them where the kernel also ran "
                    "eagerly")


def with_operators(kernels: pd.DataFrame, operators: dict[str, dict[str, str]]) -> pd.DataFrame:
    """``kernels`` with each empty ``operator`` filled from ``operators`` (mode -> kernel full
    name -> operator: what a run's trace says, for a run whose kernels.csv has no operator)."""
    if kernels.empty or not operators:
        return kernels
    current = (kernels["operator"].fillna("").astype(str) if "operator" in kernels
               else pd.Series("", index=kernels.index))
    found = [operators.get(str(mode), {}).get(str(full), "")
             for mode, full in zip(kernels["mode"], kernels["kernel_full"])]
    return kernels.assign(operator=current.where(current != "", found))


def readable_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    """A run's kernel table with names that tell kernels apart: where kernels of one mode share a
    name (five ``vectorized_elementwise_kernel`` rows, recorded before the trace named them
    apart), each of them is named from its full name by ``kernel_names.kernel_label``
    (``...<FillFunctor>``, ``...<mse_kernel_cuda>``...); a name that is already unique is shown as
    the run wrote it. The ``operator`` column is kept ("" where the run did not record it)."""
    if kernels.empty or "kernel_full" not in kernels:
        return kernels
    names = kernels["kernel"].astype(str)
    full = kernels["kernel_full"].astype(str)
    shared = (pd.DataFrame({"mode": kernels["mode"].astype(str), "kernel": names, "full": full})
              .groupby(["mode", "kernel"])["full"].transform("nunique") > 1)
    relabelled = [kernel_label(f) if clash else n for n, f, clash in zip(names, full, shared)]
    out = kernels.assign(kernel=pd.Series(relabelled, index=kernels.index,
                                          dtype=kernels["kernel"].dtype))
    if "operator" not in out:
        out = out.assign(operator="")
    else:
        out = out.assign(operator=out["operator"].fillna("").astype(str))
    return out


def kernel_table(kernels: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Kernels sorted by total time (one mode, or all), short name first."""
    frame = kernels if mode is None else kernels[kernels["mode"] == mode]
    if "operator" not in frame:  # a table from before the operator was recorded
        frame = frame.assign(operator="")
    rank = {m: i for i, m in enumerate(MODE_NAMES)}
    frame = frame.assign(_rank=frame["mode"].astype(str).map(lambda m: rank.get(m, len(rank))))
    frame = frame.sort_values(["_rank", "mode", "total_us"], ascending=[True, True, False],
                              kind="stable")
    return frame[KERNEL_TABLE_COLUMNS].reset_index(drop=True)


def kernel_diff_columns(other: str = "graph") -> list[str]:
    """The columns of :func:`kernel_diff` against ``other`` (eager is always the baseline)."""
    return ["kernel", "operator", "where", "eager_calls_per_iter", f"{other}_calls_per_iter",
            "eager_us_per_iter", f"{other}_us_per_iter", "change_us_per_iter", "kernel_full"]


KERNEL_DIFF_COLUMNS = kernel_diff_columns("graph")


def kernel_diff(kernels: pd.DataFrame, other: str = "graph") -> pd.DataFrame:
    """Each kernel (by full name) eagerly and in mode ``other`` side by side, per iteration of the
    profiled windows: calls, GPU time (mean x calls per iteration) and the change from eager to
    ``other``; ``where`` says "both", "eager only" or "<other> only". Largest time first."""
    columns = kernel_diff_columns(other)
    if kernels.empty:
        return pd.DataFrame(columns=columns)
    frame = kernels.assign(
        mode=kernels["mode"].astype(str), kernel_full=kernels["kernel_full"].astype(str),
        calls=float_column(kernels, "calls_per_iter"),
        us=float_column(kernels, "mean_us") * float_column(kernels, "calls_per_iter"))
    short = frame.drop_duplicates("kernel_full").set_index("kernel_full")["kernel"].astype(str)
    # the operator that launched it eagerly (a graph's kernels were launched by its replay)
    by_mode = frame.assign(operator=frame["operator"].fillna("").astype(str)
                           if "operator" in frame else "")
    by_mode = by_mode.assign(_eager=by_mode["mode"] != "eager").sort_values("_eager", kind="stable")
    by_mode = by_mode[by_mode["operator"] != ""].drop_duplicates("kernel_full")
    operator = dict(zip(by_mode["kernel_full"], by_mode["operator"]))
    out = pd.DataFrame({"kernel_full": list(dict.fromkeys(frame["kernel_full"]))})
    for mode in ("eager", other):  # a kernel a mode never ran: 0 calls, 0 us in that mode
        part = frame[frame["mode"] == mode].groupby("kernel_full")[["calls", "us"]].sum(min_count=1)
        out[f"{mode}_calls_per_iter"] = out["kernel_full"].map(part["calls"])
        out[f"{mode}_us_per_iter"] = out["kernel_full"].map(part["us"])
        absent = ~out["kernel_full"].isin(part.index)
        out.loc[absent, [f"{mode}_calls_per_iter", f"{mode}_us_per_iter"]] = 0.0
    in_eager = out["kernel_full"].isin(frame.loc[frame["mode"] == "eager", "kernel_full"])
    in_other = out["kernel_full"].isin(frame.loc[frame["mode"] == other, "kernel_full"])
    out["where"] = np.select([in_eager & in_other, in_eager, in_other],
                             ["both", "eager only", f"{other} only"], default="neither")
    out = out[out["where"] != "neither"]
    out["kernel"] = out["kernel_full"].map(short)
    out["operator"] = [operator.get(name, "") for name in out["kernel_full"]]
    out["change_us_per_iter"] = (out[f"{other}_us_per_iter"].fillna(0)
                                 - out["eager_us_per_iter"].fillna(0))
    size = out[["eager_us_per_iter", f"{other}_us_per_iter"]].max(axis=1, skipna=True).fillna(0)
    out = out.assign(_size=size).sort_values(["_size", "kernel_full"], ascending=[False, True])
    return out[columns].reset_index(drop=True)


def filter_by_name(frame: pd.DataFrame, text: str,
                   columns: tuple[str, ...] = ("kernel", "kernel_full", "operator")) -> pd.DataFrame:
    """Rows whose name (or operator) contains ``text`` (plain text, not a pattern;
    case-insensitive); every row when ``text`` is blank."""
    needle = str(text or "").strip().lower()
    if not needle or frame.empty:
        return frame
    hit = pd.Series(False, index=frame.index)
    for column in columns:
        if column in frame:
            hit |= frame[column].astype(str).str.lower().str.contains(needle, regex=False)
    return frame[hit]
