"""The article's static-counter lessons: what the counter should read after each phase.

Scope: the rule (after warm-up = warm-up iterations if counted, else 0; capture adds nothing;
after replays = replays x captured iterations) and the predicted-vs-observed table.
"""

from __future__ import annotations

import pandas as pd

from profiler_core.spec.config import RunConfig
from profiler_core.storage.results import coerce_table


def predicted_counters(config: RunConfig) -> pd.DataFrame:
    """The static counter after each phase, by the rule the article's three lessons show."""
    after_warmup = config.warmup_iters if config.count_warmup else 0
    warmup_rule = (f"warm-up runs the step: +1 per warm-up iteration ({config.warmup_iters})"
                   if config.count_warmup else "warm-up does not touch the counter (lesson 2)")
    rows = [
        ("initial", 0, "the counter starts at zero"),
        ("after_warmup", after_warmup, warmup_rule),
        ("after_capture", after_warmup, "capture records the step but runs nothing: unchanged"),
        ("after_replay", config.replays * config.capture_iters,
         f"reset to 0, then replays x captured iterations ({config.replays} x {config.capture_iters})"),
        ("eager_after_timed", config.total_eager_iters,
         f"eager replica, reset to 0, then one per eager step ({config.total_eager_iters})"),
    ]
    return pd.DataFrame(rows, columns=["phase", "predicted", "rule"])


def counters_table(config: RunConfig, observed: dict[str, float]) -> pd.DataFrame:
    """Predicted beside observed, for the phases that ran."""
    table = predicted_counters(config)
    table = table[table["phase"].isin(observed)].copy()
    table["observed"] = [observed[phase] for phase in table["phase"]]
    table["match"] = table["observed"] == table["predicted"]
    return coerce_table("counters", table)
