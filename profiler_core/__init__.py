"""profiler_core: measure how much CUDA Graphs speed up a PyTorch training step, and why.

The measuring engine, in layers (each imports only those listed before it): ``spec``,
``timing``, ``analysis``, ``storage``, ``engine``, ``orchestration``, ``sweep``, ``cli``. It
never imports a UI library. The public API below is loaded on first use, so importing one layer
never pulls in torch through this file.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "ProfilerError": "profiler_core.spec.errors",
    "RunConfig": "profiler_core.spec.config",
    # each mode's declaration (name, label, colour, where it runs), and its lists
    "ModeSpec": "profiler_core.spec.modes",
    "MODES": "profiler_core.spec.modes",
    "MODE_NAMES": "profiler_core.spec.modes",
    "MODE_LABELS": "profiler_core.spec.modes",
    "ALWAYS_MEASURED": "profiler_core.spec.modes",
    # each per-mode figure's declaration (name, unit, words, modes), and the headline's facts
    "MetricSpec": "profiler_core.spec.metrics",
    "METRICS": "profiler_core.spec.metrics",
    "HeadlineFacts": "profiler_core.spec.headline",
    "RunResult": "profiler_core.storage.results",
    "Figures": "profiler_core.analysis.figures",
    "Headline": "profiler_core.analysis.figures",
    "run_experiment": "profiler_core.engine.runner",
    "Launcher": "profiler_core.orchestration.launcher",
    "SweepPlan": "profiler_core.sweep.plan",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'profiler_core' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
