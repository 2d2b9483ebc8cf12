"""A mode's one-time cost against its saving per step (the break-even), the one-time costs
table, and modes.csv for people.

Scope: pure functions of a run's figures, modes.csv and facts (no Streamlit, no Plotly); every
table keeps its columns also when the input is empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.analysis.frames import finite, number
from dashboard.analysis.overheads import PROFILER_OVERHEAD_COLUMNS
from profiler_core import MODE_LABELS
from profiler_core.analysis.figures import Figures
from profiler_core.spec.metrics import SPECS

# One definition of break-even wherever it is shown (Overview, modes table, Runs page), the one the
# sweep's break-even table uses for runs that record warm-up + capture as the one-time cost.
BREAK_EVEN_DEFINITION = ("steps until the one-time cost (warm-up + capture) is paid back by the "
                         "saving per step")


@dataclass(frozen=True)
class PayBack:
    """A mode's one-time cost against its saving per step (``BREAK_EVEN_DEFINITION``)."""
    mode: str
    one_time_ms: float  # warm-up + capture (or compilation); NaN when not recorded
    warmup_ms: float  # NaN when the one-time cost is not split (modes.csv only)
    capture_ms: float
    saving_ms: float  # eager's median step minus the mode's; NaN when not timed
    pays_back: float  # 1: faster per step; 0: not faster (never pays back); NaN: not measured
    steps: float  # steps until paid back; NaN unless it pays back and the cost is known

    @property
    def short(self) -> str:
        """'13 steps', 'never' or 'n/a' (a tile's value; ``note`` says why)."""
        if self.pays_back == 0:
            return "never"
        if finite(self.steps):
            return f"{self.steps:,.0f} step" + ("" if self.steps == 1 else "s")
        return "n/a"

    @property
    def note(self) -> str:
        """Why ``short`` says what it says: 'one-time cost 16.3 ms', 'graph not faster', ..."""
        if self.pays_back == 0:
            return f"{self.mode} not faster"
        if finite(self.steps):
            return f"one-time cost {self.one_time_ms:,.1f} ms"
        return "one-time cost not recorded" if self.pays_back == 1 else "not measured"

    @property
    def text(self) -> str:
        """'13 steps', 'never (graph not faster)', or 'n/a (...)' saying what is missing."""
        return self.short if finite(self.steps) else f"{self.short} ({self.note})"

    @property
    def cost_text(self) -> str:
        """The one-time cost in words: 'warm-up 11.6 ms + capture 4.7 ms = 16.3 ms'."""
        if finite(self.warmup_ms) and finite(self.capture_ms):
            return (f"warm-up {self.warmup_ms:,.1f} ms + capture {self.capture_ms:,.1f} ms = "
                    f"{self.one_time_ms:,.1f} ms")
        return f"{self.one_time_ms:,.1f} ms" if finite(self.one_time_ms) else "not recorded"


def pay_back(figures: Figures, modes: pd.DataFrame, mode: str = "graph") -> PayBack:
    """``mode``'s break-even by ``BREAK_EVEN_DEFINITION``, worked out here for every run: modes.csv's
    one-time cost and medians when it has them, else (the graph of a run recorded before
    modes.csv) its figures' warm-up + capture and medians. A run recorded when break-even counted
    the capture alone thus says the same as today's; one not faster never pays back."""
    table = modes.set_index(modes["mode"].astype(str)) if len(modes) else pd.DataFrame()

    def from_modes(row: str, column: str) -> float:
        if row not in table.index or column not in table.columns:
            return math.nan
        value = pd.to_numeric(pd.Series([table.at[row, column]]), errors="coerce").iloc[0]
        return float(value) if pd.notna(value) and math.isfinite(float(value)) else math.nan

    eager_ms, mode_ms = from_modes("eager", "median_ms"), from_modes(mode, "median_ms")
    warmup, capture = (figures.get(mode, "warmup_ms"), figures.get(mode, "capture_ms")) if (
        mode == "graph") else (math.nan, math.nan)
    if mode == "graph" and not (finite(eager_ms) and finite(mode_ms)):
        eager_ms, mode_ms = figures.get("eager", "median_ms"), figures.get(mode, "median_ms")
    one_time = from_modes(mode, "one_time_ms")
    if not finite(one_time) and finite(warmup) and finite(capture):
        one_time = warmup + capture
    if not (finite(one_time) and finite(warmup) and finite(capture)
            and abs(warmup + capture - one_time) <= 0.01 * max(one_time, 1e-9)):
        warmup = capture = math.nan  # only a split that adds up to the cost is shown
    saving = eager_ms - mode_ms if finite(eager_ms) and finite(mode_ms) else math.nan
    pays = math.nan if not finite(saving) else (1.0 if saving > 0 else 0.0)
    if not finite(pays) and mode == "graph" and figures.get(mode, "pays_back") == 0:
        pays = 0.0  # recorded as never paying back, medians not kept
    steps = (float(math.ceil(one_time / saving)) if pays == 1 and finite(one_time)
             else math.nan)
    return PayBack(mode, one_time, warmup, capture, saving, pays, steps)


def _label(metric: str) -> str:
    """A figure's words, as ``spec.metrics`` declares them."""
    return SPECS[metric].label


def one_time_costs(figures: Figures, facts: Mapping[str, Any], pay: PayBack | None = None,
                   overheads: pd.DataFrame | None = None) -> pd.DataFrame:
    """Capture cost, memory and parity in one table (quantity, value, unit, and ``shown``: the
    value with its unit, as text); ``facts``: the summary's headline, for the parity. ``pay``: the
    graph's break-even (``pay_back``; worked out from the figures alone when not given), shown as 'never (graph not faster)' when it never pays
    back. ``overheads`` (``profiler_overheads``): the profiler's overhead per mode against the
    headline; without it no overhead is shown (a run's stored figure may be against the cold
    start)."""
    mib = 2**20
    pay = pay if pay is not None else pay_back(figures, pd.DataFrame(), "graph")
    rows = [
        (_label("warmup_ms"), figures.get("graph", "warmup_ms"), "ms"),
        (_label("capture_ms"), figures.get("graph", "capture_ms"), "ms"),
        ("one-time cost (warm-up + capture)", pay.one_time_ms, "ms"),
        ("batch copy into the static inputs, per step",
         figures.get("graph", "input_copy_median_ms"), "ms"),
        (_label("pool_bytes"), figures.get("graph", "pool_bytes") / mib, "MiB"),
        (f"{_label('peak_bytes')}, eager", figures.get("eager", "peak_bytes") / mib, "MiB"),
        (f"{_label('peak_bytes')}, graph", figures.get("graph", "peak_bytes") / mib, "MiB"),
        ("break-even (see below)", pay.steps, "steps"),
        (_label("parity_max_abs_diff"), number(facts, "parity_max_abs_diff"), ""),
        (_label("parity_max_rel_diff"), number(facts, "parity_max_rel_diff"), ""),
        (_label("parity_noise_abs_diff"), number(facts, "parity_noise_abs_diff"), ""),
    ]
    for row in (overheads if overheads is not None else pd.DataFrame(
            columns=PROFILER_OVERHEAD_COLUMNS)).itertuples():
        rows.append((f"{_label('profiler_overhead_pct')}, {row.mode}",
                     float(row.overhead_pct), "%"))
    out = pd.DataFrame(rows, columns=["quantity", "value", "unit"])
    out["shown"] = [("n/a" if not finite(v) or not math.isfinite(v) else f"{v:.4g} {u}".strip())
                    for v, u in zip(out["value"], out["unit"])]
    out.loc[out["quantity"].str.startswith("break-even"), "shown"] = pay.text
    return out


MODES_TABLE_COLUMNS = ["mode", "what", "median_ms", "speedup", "speedup_ci_low", "speedup_ci_high",
                       "one_time_ms", "break_even", "memory_mib", "graphs_recorded"]


def modes_table(modes: pd.DataFrame, figures: Figures | None = None) -> pd.DataFrame:
    """modes.csv for people: what each mode is, its break-even (``BREAK_EVEN_DEFINITION``, as
    text: '13 steps', 'never (graph not faster)'; '' for eager), memory in MiB."""
    if modes.empty:
        return pd.DataFrame(columns=MODES_TABLE_COLUMNS)
    out = modes.copy()
    out["what"] = [MODE_LABELS.get(str(mode), str(mode)) for mode in out["mode"]]
    out["break_even"] = ["" if str(mode) == "eager" else pay_back(figures or Figures({}), modes, str(mode)).text
                         for mode in out["mode"]]
    out["memory_mib"] = pd.to_numeric(out["memory_bytes"], errors="coerce") / 2**20
    return out[MODES_TABLE_COLUMNS].reset_index(drop=True)
