"""Is a measurement stable? Checks on a run's own tables that say when its figures move.

Pure functions over a run's stats table and headline (no torch, no I/O, no UI), for the command
line's summary and the dashboard: :func:`unstable_timing` and :func:`spread_beyond_ci`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

NOISY_FRACTION = 0.10  # as torch.utils.benchmark: IQR over 10% of the median is noisy
# The per-step methods a steady-state trial is made of: CUDA events, or wall clock on the CPU.
STEP_METHODS = ("steady_event", "steady_wall")


@dataclass(frozen=True)
class Instability:
    """One mode whose steady-state timing is unstable, with the figures that say so."""

    mode: str
    trial_median_ms: float  # the headline's figure: median over trials of each trial's mean step
    step_median_ms: float  # the median of single steps (the Latency view's)
    step_method: str  # which per-step method: steady_event or steady_wall
    trials: int
    trial_iqr_pct: float  # the trials' IQR as a share of their median

    @property
    def gap_pct(self) -> float:
        """How far the headline's figure is from the median single step, in % of the latter."""
        return 100.0 * (self.trial_median_ms - self.step_median_ms) / self.step_median_ms

    def text(self) -> str:
        """One paragraph naming both figures and what each means."""
        what = (f"{self.mode}: the headline's {self.trial_median_ms:.4g} ms per step is the median "
                f"of the {self.trials} trials' mean step times, while the median single step is "
                f"{self.step_median_ms:.4g} ms ({self.gap_pct:+.0f}%)")
        if math.isfinite(self.trial_iqr_pct):
            what += f"; the trials spread over {self.trial_iqr_pct:.0f}% of their median (IQR)"
        return (what + ". Some steps took much longer than a typical one (another process on the "
                "host, or a step whose time varies), so the figure depends on when they fell: the "
                "measurement is unstable. Run it again with more trials, pin it to CPUs "
                "(--cpu-affinity) or measure it in several fresh processes (--repeats).")


def _row(stats: pd.DataFrame, mode: str, method: str) -> pd.Series | None:
    match = stats[(stats["mode"].astype(str) == mode) & (stats["method"].astype(str) == method)]
    return match.iloc[0] if len(match) else None


def _first_row(stats: pd.DataFrame, mode: str,
               methods: tuple[str, ...]) -> tuple[str, pd.Series] | None:
    """The first of ``methods`` that ``stats`` has a row for in ``mode``, with that row."""
    for method in methods:
        row = _row(stats, mode, method)
        if row is not None:
            return method, row
    return None


def _float(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def _whole(value: Any) -> int:
    number = _float(value)
    return int(number) if math.isfinite(number) else 0


def unstable_timing(stats: pd.DataFrame, threshold: float = NOISY_FRACTION) -> list[Instability]:
    """The modes of a stats table (``schema.STATS_COLUMNS``) whose steady-state timing is
    unstable: the median of the trials' means differs from the median single step by more than
    ``threshold`` of the latter, or the trials' IQR is over ``threshold`` of their median (with
    at least 4 trials: the IQR of fewer says little). Modes without both figures are skipped."""
    if stats is None or stats.empty or not {"mode", "method", "median_ms"} <= set(stats.columns):
        return []
    found = []
    for mode in pd.unique(stats["mode"].astype(str)):
        trial = _row(stats, mode, "steady_trial")
        found_step = _first_row(stats, mode, STEP_METHODS)
        if trial is None or found_step is None:
            continue
        step_method, step = found_step
        trial_ms, step_ms = _float(trial["median_ms"]), _float(step["median_ms"])
        if not (trial_ms > 0 and step_ms > 0):
            continue
        trials = _whole(trial.get("count"))
        iqr_pct = 100.0 * _float(trial.get("iqr_ms")) / trial_ms
        gap = abs(trial_ms - step_ms) / step_ms
        spread = iqr_pct / 100.0 if trials >= 4 and math.isfinite(iqr_pct) else 0.0
        if gap > threshold or spread > threshold:
            found.append(Instability(mode, trial_ms, step_ms, step_method, trials, iqr_pct))
    return found


@dataclass(frozen=True)
class BetweenProcesses:
    """How far a figure moved between the fresh processes of a ``--repeats`` run, against the
    shown run's own interval."""

    figure: str  # "speedup", or "eager median" for a run without a graph (a CPU run)
    low: float  # the between-process minimum
    high: float  # and maximum
    within_low: float  # the shown run's own 95% CI (NaN for the eager median: it has none)
    within_high: float
    processes: int

    @property
    def spread(self) -> float:
        return self.high - self.low

    def text(self) -> str:
        unit = "x" if self.figure == "speedup" else " ms"
        moved = (f"Between {self.processes} fresh processes the {self.figure} moved from "
                 f"{self.low:.3g}{unit} to {self.high:.3g}{unit}")
        if math.isfinite(self.within_low):
            return (moved + f", wider than this run's own 95% CI ({self.within_low:.3g}-"
                    f"{self.within_high:.3g}{unit}). The within-run interval covers the noise of "
                    "one process only: a new process lands anywhere in the between-process range "
                    "(where the host runs it moves a host-bound eager step). Quote the median over "
                    "processes with the between-process interval, or pin the runs to CPUs "
                    "(--cpu-affinity).")
        return (moved + f", over {100 * NOISY_FRACTION:.0f}% of its median: a new process lands "
                "anywhere in that range. Quote the median over processes with the between-process "
                "interval, or pin the runs to CPUs (--cpu-affinity).")


def spread_beyond_ci(headline: Mapping[str, Any]) -> BetweenProcesses | None:
    """For a run of several processes: the speedup's between-process range when it is wider than
    the shown run's own 95% CI; for a run without a speedup (CPU), the eager median's range when
    it is over 10% of the median. None otherwise (one process, or a spread within the CI)."""
    processes = _whole(headline.get("repeats"))
    if processes < 2:
        return None
    low, high = _float(headline.get("speedup_between_min")), _float(headline.get("speedup_between_max"))
    ci_low, ci_high = _float(headline.get("speedup_ci_low")), _float(headline.get("speedup_ci_high"))
    if math.isfinite(low) and math.isfinite(high):
        within = ci_high - ci_low if math.isfinite(ci_low) and math.isfinite(ci_high) else 0.0
        if high - low > within:
            return BetweenProcesses("speedup", low, high, ci_low, ci_high, processes)
        return None
    low, high = _float(headline.get("eager_between_min_ms")), _float(headline.get("eager_between_max_ms"))
    middle = _float(headline.get("eager_between_median_ms"))
    if math.isfinite(low) and math.isfinite(high) and middle > 0 and (high - low) / middle > NOISY_FRACTION:
        return BetweenProcesses("eager median", low, high, math.nan, math.nan, processes)
    return None


def warnings(stats: pd.DataFrame, headline: Mapping[str, Any]) -> list[str]:
    """Every stability warning of a run, as text (the command line prints them)."""
    texts = [item.text() for item in unstable_timing(stats)]
    between = spread_beyond_ci(headline)
    if between is not None:
        texts.append(between.text())
    return texts
