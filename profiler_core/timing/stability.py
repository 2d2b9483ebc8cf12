"""Is a measurement stable? Checks on a run's own tables that say when its figures move.

Pure functions over a run's stats table, headline facts and speedup CI (no torch, no I/O, no
UI), for the command line's summary and the dashboard: :func:`unstable_timing` and
:func:`spread_beyond_ci`, and :class:`HostLoad` (the host's load and thread count, from a run's
environment, that the warnings name).
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

    def figures(self) -> str:
        """Both figures and the trials' spread, in a sentence without the advice."""
        what = (f"{self.mode}: the headline's {self.trial_median_ms:.4g} ms per step is the median "
                f"of the {self.trials} trials' mean step times, while the median single step is "
                f"{self.step_median_ms:.4g} ms ({self.gap_pct:+.0f}%)")
        if math.isfinite(self.trial_iqr_pct):
            what += f"; the trials spread over {self.trial_iqr_pct:.0f}% of their median (IQR)"
        return what + "."

    def text(self, host: HostLoad | None = None) -> str:
        """One paragraph naming both figures, what each means and, from the run's ``host``
        figures (``HostLoad.of``), whether the host was loaded."""
        cause = host.cause() if host is not None else (
            "another process on the host, or a step whose time varies")
        return (self.figures()[:-1] + f". Some steps took much longer than a typical one "
                f"({cause}), so the figure depends on when they fell: the measurement is unstable. "
                f"{ADVICE}")


ADVICE = ("Run it again with more trials, pin it to CPUs (--cpu-affinity) or measure it in several "
          "fresh processes (--repeats).")


@dataclass(frozen=True)
class HostLoad:
    """What the host was doing around a run, from its environment: the load averages (1 minute)
    at its start and end against the CPUs it could use, and torch's thread count."""

    cpus: int  # the CPUs the run could use (its affinity), else the logical cores; 0: unknown
    load_start: float  # NaN where not recorded
    load_end: float
    threads: int  # torch's intra-op threads (rank 0's in a data-parallel run); 0: unknown
    ranks: int  # processes of the run (data-parallel ranks), 1 otherwise

    @classmethod
    def of(cls, environment: Mapping[str, Any]) -> HostLoad:
        def first(value: Any) -> float:
            return _float(value[0]) if isinstance(value, (list, tuple)) and value else math.nan

        affinity = str(environment.get("cpu_affinity") or "")
        cpus = _whole(environment.get("logical_cores"))
        if affinity:
            try:
                from profiler_core.spec.hostinfo import parse_cpu_list

                cpus = len(parse_cpu_list(affinity)) or cpus
            except ValueError:
                pass
        threads = _whole(environment.get("torch_num_threads"))
        if not threads:
            ranks = environment.get("ranks")
            if isinstance(ranks, list) and ranks and isinstance(ranks[0], Mapping):
                threads = _whole(ranks[0].get("torch_num_threads"))
        return cls(cpus, first(environment.get("load_avg_start")),
                   first(environment.get("load_avg_end")), threads,
                   max(1, _whole(environment.get("world_size"))))

    @property
    def known(self) -> bool:
        return self.cpus > 0 and (math.isfinite(self.load_start) or math.isfinite(self.load_end))

    @property
    def loaded(self) -> bool:
        """The run's threads and the processes already running at its start (the load then,
        rounded) wanted more CPUs than there were, or more processes than CPUs were runnable by
        its end."""
        if not self.known:
            return False
        before = math.floor(self.load_start + 0.5) if math.isfinite(self.load_start) else 0
        wanted = before + max(self.threads, 1) * self.ranks
        return wanted > self.cpus or (math.isfinite(self.load_end) and self.load_end > self.cpus + 0.5)

    def load_text(self) -> str:
        """'load average 9.7 at the start and 14.5 at the end on 2 CPUs'."""
        if not self.known:
            return "the host's load was not recorded"
        parts = []
        if math.isfinite(self.load_start):
            parts.append(f"{self.load_start:.1f} at the start")
        if math.isfinite(self.load_end):
            parts.append(f"{self.load_end:.1f} at the end")
        return f"load average {' and '.join(parts)} on {self.cpus} CPU(s)"

    def threads_text(self) -> str:
        if not self.threads:
            return "torch's thread count not recorded"
        each = f"{self.threads} torch thread(s)"
        return f"{self.ranks} ranks of {each} each" if self.ranks > 1 else each

    def summary(self) -> str:
        """'load average 9.7 at the start and 14.5 at the end on 2 CPUs, 2 torch thread(s)'."""
        return f"{self.load_text()}, {self.threads_text()}"

    def cause(self) -> str:
        """The likely cause of slow steps, in words with the figures."""
        if self.loaded:
            return (f"a loaded host: {self.summary()}, so the run's threads waited for the CPUs "
                    "other processes held")
        if self.known:
            return (f"not the host's load ({self.summary()}): rather a step whose time varies, "
                    "or another process for a moment")
        return "another process on the host, or a step whose time varies"


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


def trials_are_alike(vary: str | None) -> bool:
    """Whether a run's trials repeat the same work, so that their spread is noise: not in a run
    of changing shapes (``vary``), whose trials hold different shapes (the strategies' intervals
    say how far its figures move)."""
    return not vary


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


def spread_beyond_ci(headline: Mapping[str, Any],
                     speedup_ci: tuple[float, float]) -> BetweenProcesses | None:
    """For a run of several processes (its ``headline``'s repeats facts): the speedup's
    between-process range when it is wider than the shown run's own 95% CI (``speedup_ci``, low
    and high; NaN when not measured); for a run without a speedup (CPU), the eager median's range
    when it is over 10% of the median. None otherwise (one process, or a spread within the CI)."""
    processes = _whole(headline.get("repeats"))
    if processes < 2:
        return None
    low, high = _float(headline.get("speedup_between_min")), _float(headline.get("speedup_between_max"))
    ci_low, ci_high = _float(speedup_ci[0]), _float(speedup_ci[1])
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


def warnings(stats: pd.DataFrame, headline: Mapping[str, Any],
             speedup_ci: tuple[float, float],
             environment: Mapping[str, Any] | None = None) -> list[str]:
    """Every stability warning of a run, as text (the command line prints them); with the run's
    ``environment``, an unstable timing names the host's load and thread count."""
    host = HostLoad.of(environment) if environment is not None else None
    texts = [item.text(host) for item in unstable_timing(stats)]
    between = spread_beyond_ci(headline, speedup_ci)
    if between is not None:
        texts.append(between.text())
    return texts
