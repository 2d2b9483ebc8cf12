"""Repeats: one config measured in N fresh processes, one after another (``run --repeats N``).

A host-bound eager step moves by 10-40% between fresh processes, far beyond one run's own
interval, so :func:`run_repeats` runs N ordinary runs through the launcher and saves the median
one, with every process in ``repeats.csv`` and the between-process figures beside its own.
"""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from profiler_core.analysis.figures import Headline
from profiler_core.orchestration.launcher import Ending, Launcher
from profiler_core.spec import errors, fields, schema
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError, ProfilerError, TimeLimitReached
from profiler_core.spec.events import ProgressEvent, RunEvent
from profiler_core.spec.headline import written_facts
from profiler_core.spec.progress import Progress, ProgressCallback, ignore_progress
from profiler_core.storage import leftovers
from profiler_core.storage.outputs import make_parents, remove_made
from profiler_core.storage.results import RunResult, check_output, coerce_table, run_files

CONFIDENCE = 0.95
UNITS_PER_REPEAT = 1000  # progress units of one repeat (its child's fraction, scaled)
# From SIGTERM to SIGKILL for the running repeat's process on a stop: time to remove its own
# temporary files (what it measured is thrown away with the staging folder).
STOP_GRACE_S = 5.0
# The between-process figures of the headline, per figure: (headline key prefix, repeats.csv
# column, unit suffix).
_FIGURES = (("speedup", "speedup", ""), ("eager", "eager_median_ms", "_ms"),
            ("graph", "graph_median_ms", "_ms"))


# ----------------------------------------------------------------------------- the figures

def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A distribution-free interval for the median of the processes' values, from order
    statistics: the widest ranks (j, n+1-j) whose binomial coverage is at least ``confidence``.
    Returns (low, high, coverage); with too few values for that (fewer than 6 at 95%) it is the
    min-max range, and ``coverage`` says how often that range holds the median (1 - 2^(1-n))."""
    ordered = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    n = len(ordered)
    if n == 0:
        return math.nan, math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    rank, below = 0, 0.0  # rank j (1-based): P(Binomial(n, 1/2) < j) <= alpha
    while rank < n // 2:
        below_next = below + math.comb(n, rank) / 2**n
        if below_next > alpha:
            break
        rank, below = rank + 1, below_next
    if rank == 0:
        return ordered[0], ordered[-1], 1.0 - 2.0 / 2**n if n > 1 else 0.0
    return ordered[rank - 1], ordered[n - rank], 1.0 - 2.0 * below


def choose_shown(table: pd.DataFrame) -> int:
    """The row of ``repeats.csv`` to show: the median speedup (``median_low``: one real process,
    the lower of the two middle ones for an even count), eager's median for runs without a
    graph; the first row when no figure is finite."""
    for column in ("speedup", "eager_median_ms"):
        values = pd.to_numeric(table[column], errors="coerce").astype(float)
        finite = values[values.map(math.isfinite)]
        if len(finite):
            target = statistics.median_low(list(finite))
            return int(finite.index[list(finite).index(target)])
    return int(table.index[0])


def between_headline(table: pd.DataFrame) -> dict[str, Any]:
    """The headline keys of a repeats run from its repeats.csv: ``repeats`` (processes measured),
    ``repeat_shown`` (the row marked shown) and, per figure (speedup, eager and graph medians),
    ``<figure>_between_{median,min,max,low,high}`` (``_ms`` for times: low-high is the interval of
    the median over processes, :func:`median_interval`), with ``between_interval`` saying which
    interval it is and ``between_coverage_pct`` how sure it is. A figure no process has (the graph
    on the CPU) is left out."""
    headline: dict[str, Any] = {"repeats": int(len(table))}
    shown = table[table["shown"].fillna(False).astype(bool)]
    if len(shown):
        headline["repeat_shown"] = int(shown["repeat"].iloc[0])
    coverage = math.nan
    for prefix, column, unit in _FIGURES:
        values = [float(v) for v in pd.to_numeric(table[column], errors="coerce")
                  if math.isfinite(float(v))]
        if not values:
            continue
        low, high, coverage = median_interval(values)
        headline.update({f"{prefix}_between_median{unit}": float(statistics.median(values)),
                         f"{prefix}_between_min{unit}": min(values),
                         f"{prefix}_between_max{unit}": max(values),
                         f"{prefix}_between_low{unit}": low, f"{prefix}_between_high{unit}": high})
    n = len(table)
    if math.isfinite(coverage) and n >= 2:  # one process has no spread to speak of
        headline["between_coverage_pct"] = round(100.0 * coverage, 1)
        headline["between_interval"] = (
            f"order statistics of {n} processes: a {100 * coverage:.1f}% interval of the median"
            if coverage >= CONFIDENCE else
            f"the min-max range of {n} processes (too few for a 95% interval of the median, which "
            f"needs 6: this range holds it with {100 * coverage:.1f}% probability)")
    return headline


BETWEEN_COLUMNS = ["figure", "unit", "shown_run", "shown_ci_low", "shown_ci_high",
                   "between_median", "between_min", "between_max", "interval_low", "interval_high"]


def between_table(headline: Mapping[str, Any], pair: Headline) -> pd.DataFrame:
    """The between-process figures of a repeats run (its ``headline``'s between_* keys) beside the
    shown run's own (``pair``), one row per figure (speedup, eager and graph medians;
    ``BETWEEN_COLUMNS``): the shown process's value and its 95% CI (the speedup's only), the
    median, minimum and maximum over processes and the interval of that median. Empty for a run
    of one process."""
    def number(key: str) -> float:
        value = headline.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else math.nan

    shown = {"speedup": pair.speedup, "eager": pair.eager_ms, "graph": pair.graph_ms}
    rows = []
    for prefix, _, unit in _FIGURES:
        keys = [f"{prefix}_between_{part}{unit}" for part in ("median", "min", "max", "low", "high")]
        if not math.isfinite(number(keys[0])):
            continue
        ci = ((pair.speedup_ci_low, pair.speedup_ci_high) if prefix == "speedup"
              else (math.nan, math.nan))
        rows.append([prefix if prefix == "speedup" else f"{prefix} median per step",
                     "x" if prefix == "speedup" else "ms", shown[prefix], *ci,
                     *(number(key) for key in keys)])
    return pd.DataFrame(rows, columns=BETWEEN_COLUMNS).astype(
        {c: float for c in BETWEEN_COLUMNS[2:]})


def summary_lines(headline: Mapping[str, Any]) -> list[str]:
    """The between-process figures in words, for the command line's summary ([] for one process)."""
    n = headline.get("repeats")
    if not isinstance(n, int) or n < 2:
        return []
    lines = ["", f"Between {n} fresh processes (the folder holds repeat {headline.get('repeat_shown')}, "
                 "the median; every process is in repeats.csv):"]
    for prefix, label, pattern in (("speedup", "speedup", "{:.2f}x"),
                                   ("eager", "eager median", "{:.4f} ms"),
                                   ("graph", "graph median", "{:.4f} ms")):
        unit = "" if prefix == "speedup" else "_ms"
        keys = [f"{prefix}_between_{part}{unit}" for part in ("median", "min", "max", "low", "high")]
        if not all(isinstance(headline.get(k), (int, float)) for k in keys):
            continue
        median, low_all, high_all, low, high = (pattern.format(headline[k]) for k in keys)
        lines.append(f"  {label}: median {median}, range {low_all}-{high_all}, interval of the "
                     f"median {low}-{high}")
    if headline.get("between_interval"):
        lines.append(f"  (interval: {headline['between_interval']})")
    return lines


# ----------------------------------------------------------------------------- running them

@dataclass
class _Finished:
    repeat: int  # from 1
    pid: int | None
    wall_s: float
    result: RunResult


def _relay(progress: ProgressCallback, repeat: int, total: int, guard: threading.Lock,
           heard: dict[str, str]) -> Callable[[RunEvent], None]:
    """A launcher ``on_event`` turning a child's progress records into the whole run's (the
    child's last phase kept in ``heard["phase"]``)."""
    def on_event(event: RunEvent) -> None:
        if not isinstance(event, ProgressEvent):
            return
        heard["phase"] = event.phase[:60]
        done = int((repeat - 1 + event.fraction) * UNITS_PER_REPEAT)
        with guard:
            progress(Progress(f"repeat {repeat} of {total}: {event.phase[:60]}",
                              done, total * UNITS_PER_REPEAT, event.message[:160]))
    return on_event


def _child_error(ending: Ending, repeat: int, total: int) -> BaseException:
    """The error a failed repeat's process reported, as this process's own (same kind, so the
    same exit code), its message saying which repeat it was."""
    error = ending.error
    kind = error.kind if error is not None else ""
    message = (error.message if error is not None else "") or ending.message or "it failed"
    hint = error.hint if error is not None else ""
    if kind == "Interrupted":
        return KeyboardInterrupt()
    if kind in ("ConfigError", "UsageError"):
        field = (error.field if error is not None else None) or "repeats"
        option = (fields.SPECS[field].cli_option if field in fields.SPECS
                  else "--" + field.replace("_", "-"))
        if message.startswith(f"{option}: "):
            message = message[len(option) + 2:]  # the option is named again when reported
        return ConfigError(field, f"repeat {repeat} of {total} failed: {message}", hint)
    if ending.status in ("crashed", "timeout", "cancelled"):
        tail = [line for line in ending.stderr_tail.splitlines() if line.strip()]
        message += f" ({tail[-1].strip()[:300]})" if tail else ""
        hint = hint or "run again; if it happens again, run that config once without --repeats"
    error_class = getattr(errors, kind, None) if kind else None
    if not (isinstance(error_class, type) and issubclass(error_class, ProfilerError)):
        error_class = ProfilerError
    return error_class(f"repeat {repeat} of {total} failed: {message}", hint)


def _repeat_row(done: _Finished) -> dict[str, Any]:
    pair = done.result.pair
    return {"repeat": done.repeat, "pid": done.pid, "eager_median_ms": pair.eager_ms,
            "graph_median_ms": pair.graph_ms, "speedup": pair.speedup,
            "speedup_ci_low": pair.speedup_ci_low, "speedup_ci_high": pair.speedup_ci_high,
            "run_wall_s": done.wall_s, "shown": False}


def combine(config: RunConfig, finished: list[_Finished], requested: int,
            stopped: str = "") -> RunResult:
    """One run from the finished repeats: the median one's result, labelled with ``config``
    (its repeats included), with repeats.csv and the between-process headline; ``stopped``
    (why the run ended early) marks it incomplete."""
    table = pd.DataFrame([_repeat_row(done) for done in finished], columns=schema.REPEAT_COLUMNS)
    shown = choose_shown(table)
    table.loc[shown, "shown"] = True
    chosen = finished[shown].result
    between = between_headline(table)
    notes = list(chosen.notes)
    figure = ("speedup" if math.isfinite(float(table.at[shown, "speedup"]))
              else "eager time per step")
    notes.append(f"measured in {len(finished)} fresh processes, one after another: this folder "
                 f"holds repeat {int(table.at[shown, 'repeat'])}, the median {figure} over them; "
                 "every process's figures are in repeats.csv and the between-process interval in "
                 "the headline (between_*)")
    if stopped:
        notes.append(f"incomplete: the run stopped during {stopped}; {len(finished)} of "
                     f"{requested} processes finished and are kept")
    return RunResult(config=config, environment=dict(chosen.environment),
                     headline=written_facts({**chosen.headline, **between}),
                     tables={**chosen.tables, "repeats": coerce_table("repeats", table)},
                     notes=notes, complete=chosen.complete and not stopped,
                     trace_paths=dict(chosen.trace_paths))


def run_repeats(config: RunConfig, out: str | Path, *, overwrite: bool = False,
                progress: ProgressCallback = ignore_progress, launcher: Launcher | None = None,
                python: str = sys.executable, on_saving: Callable[[], None] = lambda: None
                ) -> RunResult:
    """Measure ``config`` in ``config.repeats`` fresh processes and save the combined run into
    ``out`` (steps below). Returns the saved result. A failure raises the failed
    repeat's error; when some repeats had finished, the error carries ``kept``: the folder where
    they were saved, marked incomplete. A time limit (``TimeLimitReached``, raised in this
    thread) ends the run like Ctrl-C, and is raised as such with ``during``: the repeat and the
    phase it stopped in. ``on_saving`` is called just before the run is saved (the caller's
    stopper stops raising then). ``launcher``: an object with ``launcher.Launcher``'s ``start``
    (tests pass a stand-in); by default one of fresh processes only.

    1. each repeat is an ordinary run of the same config (``repeats=1``) in a fresh process, started
       through ``launcher.Launcher`` (``python -m profiler_core run ... --progress jsonl``, its own
       process group) into a private staging folder beside the output (``.<name>.r<owner>.XXXXXXXX``,
       its owner tag naming this process, so that a later run removes it should this one be
       killed: ``storage.leftovers``), one after another, never two at once;
    2. progress is relayed as "repeat k of N: <the child's phase>", the whole run's fraction counting
       every repeat;
    3. the saved run folder is the repeat whose speedup is the median over the processes
       (``statistics.median_low``, eager's median for a run without a graph: every figure shown is
       from one real process, and the explanation of the run adds up to its headline), with
       ``repeats.csv`` (one row per process, ``schema.REPEAT_COLUMNS``) and the between-process
       figures in its headline (:func:`between_headline`); the staging folder is removed;
    4. a repeat that fails ends the run: with none finished, the run fails with that repeat's error
       (same kind, same exit code); with some finished, those are kept as a run marked incomplete
       that says so, and the error is raised after. Ctrl-C (SIGTERM) and the time limit stop the
       running repeat's process group (SIGTERM, SIGKILL after ``STOP_GRACE_S``) and keep the
       finished ones the same way.
    """
    target = check_output(out, overwrite)
    leftovers.remove_stale(target.parent, run_files)  # a killed repeats run's staging folder
    if launcher is None:
        launcher = Launcher(warm=False, python=python)
    total = config.repeats
    child = config.replace(repeats=1)
    made = make_parents(target)  # the output check made nothing: the staging folder needs them
    try:
        staging = Path(tempfile.mkdtemp(prefix=leftovers.tagged(
            f".{target.name}.{leftovers.REPEATS_STAGING}"), dir=target.parent))
    except OSError:
        remove_made(made)
        raise
    guard = threading.Lock()
    finished: list[_Finished] = []
    failure: BaseException | None = None
    stopped = ""
    heard = {"phase": ""}  # the running repeat's last phase
    try:
        process = None
        try:
            for repeat in range(1, total + 1):
                with guard:
                    progress(Progress(f"repeat {repeat} of {total}: starting",
                                      (repeat - 1) * UNITS_PER_REPEAT, total * UNITS_PER_REPEAT,
                                      "a fresh process"))
                folder = staging / f"repeat-{repeat}"
                started = time.monotonic()
                heard["phase"] = ""
                process = launcher.start(child, folder,
                                         on_event=_relay(progress, repeat, total, guard, heard))
                pid = process.pid
                ending = None
                while ending is None:
                    ending = process.wait(0.2)
                process = None
                wall_s = time.monotonic() - started
                if ending.status == "done":
                    try:
                        result = RunResult.load(folder)
                    except ProfilerError as error:
                        failure = ProfilerError(f"repeat {repeat} of {total} wrote a run that "
                                                f"cannot be read: {error.message}", error.hint)
                    else:
                        finished.append(_Finished(repeat, pid, wall_s, result))
                        continue
                else:
                    failure = _child_error(ending, repeat, total)
                stopped = f"repeat {repeat} of {total}: {_one_line(failure)}"
                break
        except KeyboardInterrupt as stop:
            if process is not None:  # its partial run is thrown away; its own temporary files go
                process.cancel(STOP_GRACE_S)
                process.wait(STOP_GRACE_S + 5.0)
            where = f"repeat {len(finished) + 1} of {total}"
            failure = KeyboardInterrupt()
            if isinstance(stop, TimeLimitReached):
                failure = TimeLimitReached(str(stop))
                failure.during = where + (f", in its {heard['phase']}"  # type: ignore[attr-defined]
                                          if process is not None and heard["phase"] else "")
            stopped = f"{where}: {_one_line(failure)}"
        if not finished:
            raise failure or ProfilerError("no repeat ran")
        combined = combine(config, finished, total, stopped if failure is not None else "")
        on_saving()
        combined.save(target, overwrite=overwrite)  # copies the shown repeat's traces
        if failure is not None:
            failure.kept = target  # type: ignore[attr-defined]  # any error kind carries it
            raise failure
        with guard:
            progress(Progress("done", total * UNITS_PER_REPEAT, total * UNITS_PER_REPEAT,
                              f"{total} processes measured"))
        return combined
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        remove_made(made)  # the folders made for the staging folder, where nothing was saved


def _one_line(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt) and not str(error):  # a time limit says what it is
        return "interrupted (Ctrl-C, or SIGTERM: the dashboard's Cancel or its time limit)"
    text = str(getattr(error, "message", "") or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
