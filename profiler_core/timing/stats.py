"""Statistics of timing samples: percentile summaries and a bootstrap interval for the speedup.

Scope: pure functions over NumPy arrays; no torch, no I/O. Deterministic for a given seed.
"""

from __future__ import annotations

import math

import numpy as np

SUMMARY_FIELDS = ("count", "mean_ms", "median_ms", "p10_ms", "p90_ms", "p99_ms", "iqr_ms", "min_ms",
                  "max_ms")
# Resamples are drawn in chunks of at most this many elements so 100k-sample runs stay in memory.
_BOOTSTRAP_CHUNK_ELEMENTS = 4_000_000


def summarize(samples_ms) -> dict[str, float]:
    """count, mean, median, p10, p90, p99, IQR, min, max of the finite samples (NaN when none)."""
    values = np.asarray(samples_ms, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return {"count": 0, **{name: math.nan for name in SUMMARY_FIELDS[1:]}}
    p10, p25, p50, p75, p90, p99 = np.percentile(values, [10, 25, 50, 75, 90, 99])
    return {
        "count": int(values.size), "mean_ms": float(values.mean()), "median_ms": float(p50),
        "p10_ms": float(p10), "p90_ms": float(p90), "p99_ms": float(p99),
        "iqr_ms": float(p75 - p25), "min_ms": float(values.min()), "max_ms": float(values.max()),
    }


def _bootstrap_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    chunk = max(1, _BOOTSTRAP_CHUNK_ELEMENTS // values.size)
    medians = []
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        picks = rng.integers(0, values.size, size=(rows, values.size))
        medians.append(np.median(values[picks], axis=1))
    return np.concatenate(medians)


def median_ratio_ci(numerator_ms, denominator_ms, confidence: float = 0.95, resamples: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
    """median(numerator) / median(denominator) and its percentile-bootstrap interval.

    The two samples are resampled independently (they are separate runs of each mode).
    Returns (ratio, low, high); NaNs when either sample is empty.
    """
    a = np.asarray(numerator_ms, dtype=float)
    b = np.asarray(denominator_ms, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0 or np.median(b) <= 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    ratios = _bootstrap_medians(a, resamples, rng) / _bootstrap_medians(b, resamples, rng)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(np.median(a) / np.median(b)), float(low), float(high)


def paired_sum_ratio_ci(numerator_ms, denominator_ms, confidence: float = 0.95,
                        resamples: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """sum(numerator) / sum(denominator) over paired blocks (block ``k`` of each side timed the
    same steps) and its percentile-bootstrap interval, the blocks resampled together, so the
    interval is of the ratio it stands beside. A pair with a NaN (a block not timed) is left out.
    Returns (ratio, low, high); NaNs when no pair is left or the denominator sums to nothing.
    """
    a = np.asarray(numerator_ms, dtype=float)
    b = np.asarray(denominator_ms, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired blocks differ in number: {a.size} and {b.size}")
    both = np.isfinite(a) & np.isfinite(b)
    a, b = a[both], b[both]
    if a.size == 0 or b.sum() <= 0:
        return math.nan, math.nan, math.nan
    picks = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    sums_b = b[picks].sum(axis=1)
    ratios = a[picks].sum(axis=1)[sums_b > 0] / sums_b[sums_b > 0]
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(ratios, [tail, 100.0 - tail])
    return float(a.sum() / b.sum()), float(low), float(high)


def break_even_iterations(one_time_cost_ms: float, eager_ms: float, graph_ms: float) -> float:
    """Training steps after which a one-time cost is paid back by the per-step saving (inf if never)."""
    saving = eager_ms - graph_ms
    if not math.isfinite(saving) or not math.isfinite(one_time_cost_ms):
        return math.nan
    if saving <= 0:
        return math.inf
    return float(math.ceil(one_time_cost_ms / saving))


def pay_back(one_time_cost_ms: float, eager_ms: float, mode_ms: float) -> dict[str, float]:
    """A mode's one-time cost against its per-step saving, as stored in a run (every value finite
    or NaN): ``pays_back`` 1.0 when the mode is faster per step, 0.0 when it is not (never pays
    back), NaN when not measured; ``break_even_iters`` the steps until paid back, NaN unless it
    pays back."""
    steps = break_even_iterations(one_time_cost_ms, eager_ms, mode_ms)
    if math.isnan(steps):
        saving = eager_ms - mode_ms
        pays = math.nan if not math.isfinite(saving) else (1.0 if saving > 0 else 0.0)
        return {"pays_back": pays, "break_even_iters": math.nan}
    if math.isinf(steps):
        return {"pays_back": 0.0, "break_even_iters": math.nan}
    return {"pays_back": 1.0, "break_even_iters": steps}


def pay_back_text(pays_back: object, break_even_iters: object) -> str:
    """A mode's pay-back in words, as every summary shows it (the dashboard and sweeps too):
    "after N steps", "never (graph not faster)" when it does not pay back, "not measured"
    otherwise (either value may be missing: None or NaN)."""
    def number(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return math.nan
        return float(value)

    pays, steps = number(pays_back), number(break_even_iters)
    if pays == 0.0 or steps == math.inf:
        return "never (graph not faster)"
    if math.isfinite(steps):
        return f"after {steps:,.0f} steps"
    return "not measured"
