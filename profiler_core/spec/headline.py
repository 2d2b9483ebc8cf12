"""The facts of a run's summary headline, declared once: every key the tool writes into
summary.json's ``headline``, with the type of its value (:class:`HeadlineFacts`).

Scope: facts only. Per-mode figures are no headline facts (they are metrics.csv's, declared in
``spec.metrics``). The run's writer refuses a key declared nowhere here (:func:`check_written`,
``UndeclaredFactError``); its reader checks each declared fact's type (:func:`read_facts`): a
value of another type (a damaged or hand-edited file) is left out, as not measured, and a key
this version does not declare (a run of another version) is kept as read.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any, TypedDict, cast, get_type_hints


class HeadlineFacts(TypedDict, total=False):
    """summary.json's ``headline``: every key optional (each is written by the runs it applies
    to), plus ``injected_delay_ms_rank<R>`` (:data:`FACT_PATTERNS`)."""

    # every run
    timing_method: str  # the headline's timing method (``spec.metrics.HEADLINE_METHOD``)
    modes: list[str]  # the modes timed, in run order
    counters_match: bool  # the article's static-counter lessons all held
    nvml_available: bool  # NVML was sampled (absent when the run did not sample it)
    readiness_findings: int  # findings of the user's step's readiness check (``--workload``)
    # how each profiled window of the article's pair found its iterations
    eager_iteration_source: str
    graph_iteration_source: str
    # the prediction before capture (a CUDA run that profiled: ``analysis.predict.HEADLINE_KEYS``)
    capture_twin_gpu_busy_us: float
    capture_twin_kernels: float
    prediction_launch_us: float
    prediction_per_node_us: float
    prediction_copy_us: float
    prediction_steps_per_graph: int
    prediction_constants_method: str
    prediction_calibration_ms: float
    prediction_calibration_source: str
    prediction_calibrated_at: str
    prediction_node_counts: list[int]
    prediction_replay_us: list[float]
    prediction_replay_busy_us: list[float]
    predicted_graph_ms: float
    predicted_speedup: float
    prediction_error_pct: float
    predicted_speedup_error_pct: float
    # the graph's parity check against two eager replicas
    parity_steps: int
    parity_max_abs_diff: float
    parity_max_rel_diff: float
    parity_noise_abs_diff: float
    parity_matches: bool
    parity_worst_parameter: str
    parity_verdict: str
    # a run whose shapes change (``--vary``)
    shapes_vary: str
    shapes_distribution: str
    shapes_buckets: str
    shapes_steps: int
    shapes_distinct: int
    shapes_best: str
    shapes_best_speedup: float
    shapes_verdict: str
    # a run of several processes (``--repeats``): the spread between them
    repeats: int
    repeat_shown: int
    speedup_between_median: float
    speedup_between_min: float
    speedup_between_max: float
    speedup_between_low: float
    speedup_between_high: float
    eager_between_median_ms: float
    eager_between_min_ms: float
    eager_between_max_ms: float
    eager_between_low_ms: float
    eager_between_high_ms: float
    graph_between_median_ms: float
    graph_between_min_ms: float
    graph_between_max_ms: float
    graph_between_low_ms: float
    graph_between_high_ms: float
    between_coverage_pct: float
    between_interval: str
    # a data-parallel run (``--nproc-per-node``)
    world_size: int
    slowest_eager_rank: float  # a rank, NaN when none was timed
    slowest_graph_rank: float
    straggler_rank: float  # NaN when none is named
    eager_bound: str


# Keys that carry a value in their name, as a pattern -> the type of their value.
FACT_PATTERNS: dict[re.Pattern[str], type] = {
    re.compile(r"injected_delay_ms_rank\d+"): float,  # ``--inject-delay-ms``: a rank's delay
}
FACT_TYPES: dict[str, Any] = get_type_hints(HeadlineFacts)
FACT_NAMES = tuple(FACT_TYPES)


class UndeclaredFactError(LookupError):
    """A headline key no :class:`HeadlineFacts` declares, written by the tool's own code."""

    def __init__(self, names: list[str]) -> None:
        close = {name: difflib.get_close_matches(name, FACT_NAMES, n=1, cutoff=0.6)
                 for name in names}
        self.names = names
        self.hint = "; ".join(f"{name}: did you mean {close[name][0]}?" for name in names
                              if close[name]) or \
            "declare the fact in HeadlineFacts (profiler_core/spec/headline.py)"
        super().__init__(f"the headline holds undeclared key(s) {', '.join(map(repr, names))} "
                         f"({self.hint})")


def fact_type(name: str) -> Any:
    """The declared type of the fact ``name`` (``str``, ``float``, ``list[int]``...); None when
    none declares it."""
    if name in FACT_TYPES:
        return FACT_TYPES[name]
    return next((kind for pattern, kind in FACT_PATTERNS.items() if pattern.fullmatch(name)), None)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_of_type(value: Any, kind: Any) -> bool:
    """Whether ``value`` (as JSON gives it) is a value of the declared type ``kind``: a number
    (whole for ``int``) for numbers, true/false for flags, text, or a list of those."""
    if kind is str:
        return isinstance(value, str)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return _is_number(value) and (isinstance(value, int) or float(value).is_integer())
    if kind is float:
        return _is_number(value)
    item = getattr(kind, "__args__", (None,))[0]
    return isinstance(value, list) and all(is_of_type(element, item) for element in value)


def read_facts(raw: Mapping[str, Any]) -> HeadlineFacts:
    """A headline as read from summary.json, checked: each declared fact whose value is not of its
    type is left out (not measured); keys no fact declares are kept as read."""
    facts: dict[str, Any] = {}
    for key, value in raw.items():
        kind = fact_type(key) if isinstance(key, str) else None
        if kind is None or is_of_type(value, kind):
            facts[key] = value
    return cast(HeadlineFacts, facts)


def _plain(value: Any) -> Any:
    """``value`` as summary.json will hold it: a NumPy scalar as its Python number or flag, a
    tuple as a list (so the check judges what is written, not how it was held)."""
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def written_facts(headline: Mapping[str, Any]) -> HeadlineFacts:
    """The headline a run of the tool assembled, as summary.json will hold it, checked
    (:func:`check_written`), as its facts."""
    plain = {key: _plain(value) for key, value in headline.items()}
    check_written(plain)
    return cast(HeadlineFacts, plain)


def check_written(headline: Mapping[str, Any]) -> None:
    """``UndeclaredFactError`` when the headline the tool is about to write holds a key no fact
    declares; ``TypeError`` when a declared fact holds a value of another type."""
    undeclared = [key for key in headline if fact_type(key) is None]
    if undeclared:
        raise UndeclaredFactError(undeclared)
    for key, value in headline.items():
        if not is_of_type(value, fact_type(key)):
            raise TypeError(f"the headline's {key!r} is {value!r}, not of its declared type "
                            f"{fact_type(key)}")
