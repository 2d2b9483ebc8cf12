"""The run's setting and facts as tables: the counter lessons explained, the config and its
differences between runs, the environment, and the phases of the run's timeline.

Scope: pure functions of DataFrames and configs (no Streamlit, no Plotly).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dashboard.analysis.frames import float_column
from profiler_core.spec import fields, numerics
from profiler_core.spec.config import RunConfig, preset_text

# The article's lessons, one line each, keyed by words in the counter's phase name.
LESSON_LINES = (
    ("initial", "The counter starts at zero: nothing has run yet."),
    ("warm", "Warm-up runs the step eagerly on a side stream, so the counter counts it only if the "
             "step counts warm-up (lesson 2: when it does not, the counter stays 0)."),
    ("capture", "Capture records the kernels without running them, so the counter does not move "
                "(lesson 1)."),
    ("replay", "Every replay runs everything captured: the counter ends at replays x captured steps "
               "(lesson 3: 3 captured steps x 10 replays = 30)."),
)


# A CPU run's warm-up: the same step, without a side stream (there is no capture to prepare).
CPU_WARM_LINE = ("Warm-up runs the step eagerly, so the counter counts it only if the step counts "
                 "warm-up (lesson 2: when it does not, the counter stays 0).")


COUNTER_LESSON_COLUMNS = ["phase", "predicted", "observed", "match", "why"]


def explain_phase(phase: str, rule: str = "", on_cuda: bool = True) -> str:
    lowered = str(phase).lower()
    for word, line in LESSON_LINES:
        if word in lowered:
            return line if on_cuda or word != "warm" else CPU_WARM_LINE
    return str(rule or "")


def counter_rule_text(config: RunConfig) -> str:
    """The Counters page's introduction: the rule, with this run's numbers. A CPU run timed the
    eager step only: no side stream, capture or replay to speak of."""
    counted = "yes" if config.count_warmup else "no"
    if not config.is_cuda:
        return ("A static counter tensor is incremented inside the training step. This run was on "
                "the CPU, which times the eager step only (CUDA graphs need a CUDA GPU): there was "
                "no capture and no replay, so the counter shows the **warm-up** (counted only if "
                "the step counts it) and the **timed eager steps** (one each). The predicted "
                f"column applies that rule to this run's settings ({config.warmup_iters} warm-up, "
                f"counted: {counted}; {config.total_eager_iters} eager steps). On a GPU, the same "
                "table adds capture (the counter does not move) and replays (replays x captured "
                "steps): the article's lessons.")
    return ("A static counter tensor is incremented inside the training step. Its value after each "
            "phase shows what a CUDA graph really runs: **warm-up** runs the step (if the step "
            "counts it), **capture** records kernels without running them, and every **replay** "
            "runs all the captured steps. The predicted column applies that rule to this run's "
            f"settings ({config.warmup_iters} warm-up, counted: {counted}; "
            f"{config.capture_iters} captured; {config.replays} replays).")


def _this_run(phase: str, config: RunConfig) -> str:
    lowered = str(phase).lower()
    if "warm" in lowered:
        counted = "counted" if config.count_warmup else "not counted"
        return f" Here: {config.warmup_iters} warm-up step(s), {counted}."
    if "replay" in lowered:
        total = config.replays * config.capture_iters
        return f" Here: {config.replays} replays x {config.capture_iters} captured = {total}."
    return ""


def counter_lessons(counters: pd.DataFrame, config: RunConfig | None = None) -> pd.DataFrame:
    """The lesson table: phase, predicted, observed, match and one line saying why
    (with this run's numbers when ``config`` is given)."""
    if counters.empty:
        return pd.DataFrame(columns=COUNTER_LESSON_COLUMNS)
    out = counters[["phase", "predicted", "observed", "match"]].copy()
    rules = counters["rule"] if "rule" in counters else pd.Series([""] * len(counters))
    out["match"] = out["match"].map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))
    on_cuda = config is None or config.is_cuda
    out["why"] = [explain_phase(p, r, on_cuda) + (_this_run(p, config) if config else "")
                  for p, r in zip(counters["phase"], rules.fillna(""))]
    return out[COUNTER_LESSON_COLUMNS].reset_index(drop=True)


NOT_USED = "n/a (not used)"  # a setting that had no effect on a run, beside one where it had


def _settings_text(config: RunConfig, auto_marked: bool,
                   environment: dict[str, Any] | None = None) -> dict[str, str]:
    """The settings that applied to a run (``fields.applied_settings``: no other workload's
    sizes, no graph-only setting on the CPU, the modes that ran) as text, an own step's settings
    one row each under their names, then the numerics flags the run recorded (``environment``);
    automatic eager steps and trials say "(auto)" when ``auto_marked``."""
    values = fields.applied_settings(config)
    values["preset"] = preset_text(config)  # what the values are, not only what the run recorded
    values["modes"] = ", ".join(values["modes"])
    settings = values.pop("workload_args", None) or {}
    text = {name: str(value) for name, value in values.items()}
    text.update({name: str(value) for name, value in settings.items()})
    if auto_marked:
        for name in ("eager_iters", "trials"):
            if getattr(config, name) is None:
                text[name] += " (auto)"
    text.update(numerics.table_rows(environment or {}))
    return text


def config_table(config: RunConfig, environment: dict[str, Any] | None = None) -> pd.DataFrame:
    """The settings that applied to a run, one row each (setting, value), with the numerics
    flags its step ran under when the run's ``environment`` is given."""
    values = _settings_text(config, auto_marked=True, environment=environment)
    return pd.DataFrame({"setting": list(values), "value": list(values.values())})


def configs_diff(configs: dict[str, RunConfig],
                 environments: dict[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """Settings that differ between any of several configs, by the values the runs used (200
    eager steps set by hand or automatically are the same), the numerics flags among them when
    the runs' ``environments`` are given (by the same keys): one row per setting, one column per
    config (named by its key), values as text; a setting that had no effect on one run (a CPU
    run's replays, another workload's sizes) reads "n/a (not used)" there."""
    environments = environments or {}
    values = {tag: _settings_text(config, auto_marked=False, environment=environments.get(tag))
              for tag, config in configs.items()}
    names = list(dict.fromkeys(name for shown in values.values() for name in shown))
    order = {name: i for i, name in enumerate(RunConfig.__dataclass_fields__)}
    names.sort(key=lambda name: order.get(name, len(order)))
    rows = [[name, *(shown.get(name, NOT_USED) for shown in values.values())] for name in names
            if len({shown.get(name, NOT_USED) for shown in values.values()}) > 1]
    return pd.DataFrame(rows, columns=["setting", *values])


ENVIRONMENT_KEYS = ("gpu_name", "gpu_index", "device_type", "driver_version", "cuda_version",
                    "torch_version", "python_version", "started_at", "finished_at")


def environment_value(key: str, value: Any) -> str:
    """One environment value as read: seconds in s or ms ("132.7 s", "1.44 ms"), bytes in GiB,
    load averages with their windows, the CPU run's thread choice as its sentence, other numbers
    to 4 significant digits, lists joined; "" for a value not recorded."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and key.endswith("_s"):
        return f"{value:.1f} s" if abs(value) >= 1 else f"{value * 1e3:.3g} ms"
    if isinstance(value, (int, float)) and key.endswith("_bytes"):
        return f"{value / 2 ** 30:,.1f} GiB"
    if key.startswith("load_avg") and isinstance(value, (list, tuple)) and len(value) == 3:
        return f"{value[0]:.2f}, {value[1]:.2f}, {value[2]:.2f} (1, 5 and 15 min)"
    if isinstance(value, dict) and "reason" in value:  # hostinfo.fit_cpu_threads's choice
        return str(value["reason"])
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(environment_value(key, item) for item in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {environment_value(str(k), v)}" for k, v in value.items())
    return str(value)


def environment_table(environment: dict[str, Any]) -> pd.DataFrame:
    """The run's environment, one row each (item, value), values as read
    (``environment_value``): the CSV download holds them as shown (its numerics flags are in the
    config table)."""
    keys = [k for k in ENVIRONMENT_KEYS if k in environment]
    keys += [k for k in environment if k not in keys and k != numerics.ENVIRONMENT_KEY]
    return pd.DataFrame({"item": keys, "value": [environment_value(k, environment[k]) for k in keys]})


PHASE_SUMMARY_COLUMNS = ["phase", "blocks", "first_start_s", "last_end_s", "total_s"]


# The GPU view offers a range of phase names to zoom to when a run has at most this many (a run
# has about 15; each is an option the page sends to the browser).
MAX_PHASE_CHOICES = 200


# Phases that come before any measurement (loading, building the replicas): left out of the
# GPU view's default zoom, which starts where the run starts measuring.
SETUP_PHASES = ("setup",)


def phase_summary(phases: pd.DataFrame) -> pd.DataFrame:
    """One row per phase name in order of first start: how many blocks it ran in (timed trials
    alternate, so a phase recurs), its first start, last end and total time. Rows whose times are
    not finite are left out."""
    if phases.empty:
        return pd.DataFrame(columns=PHASE_SUMMARY_COLUMNS)
    frame = phases.assign(phase=phases["phase"].astype(str),
                          start_s=float_column(phases, "start_s"),
                          end_s=float_column(phases, "end_s")).dropna(subset=["start_s", "end_s"])
    if frame.empty:
        return pd.DataFrame(columns=PHASE_SUMMARY_COLUMNS)
    frame = frame.assign(length=(frame["end_s"] - frame["start_s"]).clip(lower=0))
    grouped = frame.groupby("phase", sort=False).agg(
        blocks=("phase", "size"), first_start_s=("start_s", "min"), last_end_s=("end_s", "max"),
        total_s=("length", "sum")).reset_index()
    grouped = grouped.sort_values("first_start_s", kind="stable")
    return grouped[PHASE_SUMMARY_COLUMNS].reset_index(drop=True)


def phase_window(summary: pd.DataFrame, first: str, last: str, pad: float = 0.02
                 ) -> tuple[float, float] | None:
    """Seconds from the start of phase ``first`` to the end of phase ``last`` (either order),
    padded by ``pad`` of the window on each side; None when either is unknown."""
    rows = summary.set_index("phase")
    if first not in rows.index or last not in rows.index:
        return None
    low = min(float(rows.loc[first, "first_start_s"]), float(rows.loc[last, "first_start_s"]))
    high = max(float(rows.loc[first, "last_end_s"]), float(rows.loc[last, "last_end_s"]))
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return None
    margin = (high - low) * pad
    return low - margin, high + margin


def default_phase_range(summary: pd.DataFrame) -> tuple[str, str] | None:
    """(first, last) phase names of the GPU view's default zoom: from the first phase that is
    not a setup phase to the last phase (the whole run when it has only setup)."""
    if summary.empty:
        return None
    names = list(summary["phase"])
    measuring = [n for n in names if n.lower() not in SETUP_PHASES]
    return (measuring[0] if measuring else names[0]), names[-1]
