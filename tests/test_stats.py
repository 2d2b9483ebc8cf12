"""Statistics: percentile summaries and the bootstrap interval of the speedup."""

import math

import numpy as np
import pytest

from profiler_core.timing import stats
from profiler_core.timing.stats import break_even_iterations, median_ratio_ci, summarize


def test_summary_of_known_samples():
    summary = summarize(np.arange(1, 101, dtype=float))  # 1..100
    assert summary["count"] == 100
    assert summary["mean_ms"] == pytest.approx(50.5)
    assert summary["median_ms"] == pytest.approx(50.5)
    assert summary["p10_ms"] == pytest.approx(10.9)
    assert summary["p90_ms"] == pytest.approx(90.1)
    assert summary["p99_ms"] == pytest.approx(99.01)
    assert summary["iqr_ms"] == pytest.approx(49.5)
    assert (summary["min_ms"], summary["max_ms"]) == (1.0, 100.0)


def test_summary_ignores_nan_and_handles_empty():
    assert summarize([1.0, math.nan, 3.0])["count"] == 2
    empty = summarize([])
    assert empty["count"] == 0 and math.isnan(empty["median_ms"])


def test_bootstrap_interval_brackets_the_true_ratio():
    rng = np.random.default_rng(1)
    eager = rng.normal(4.0, 0.2, 400)
    graph = rng.normal(1.0, 0.05, 400)
    ratio, low, high = median_ratio_ci(eager, graph, seed=3)
    assert ratio == pytest.approx(np.median(eager) / np.median(graph))
    assert low < ratio < high
    assert low < 4.0 < high
    assert high - low < 0.2  # 400 samples pin a 4x ratio tightly


def test_bootstrap_is_deterministic_and_widens_with_noise():
    rng = np.random.default_rng(2)
    a, b = rng.normal(2.0, 0.1, 50), rng.normal(1.0, 0.05, 50)
    assert median_ratio_ci(a, b, seed=7) == median_ratio_ci(a, b, seed=7)
    noisy = median_ratio_ci(a * rng.uniform(0.5, 1.5, 50), b, seed=7)
    assert noisy[2] - noisy[1] > median_ratio_ci(a, b, seed=7)[2] - median_ratio_ci(a, b, seed=7)[1]


def test_bootstrap_on_identical_constant_samples_is_exact():
    assert median_ratio_ci([2.0] * 10, [1.0] * 10) == (2.0, 2.0, 2.0)


def test_bootstrap_handles_large_samples_in_chunks():
    rng = np.random.default_rng(0)
    ratio, low, high = median_ratio_ci(rng.normal(3, 0.1, 100_000), rng.normal(1, 0.1, 100_000),
                                       resamples=200)
    assert low <= ratio <= high


def test_bootstrap_empty_is_nan():
    assert all(math.isnan(v) for v in median_ratio_ci([], [1.0]))


def test_break_even():
    assert break_even_iterations(100.0, 1.2, 0.2) == 100
    assert break_even_iterations(10.0, 1.0, 0.7) == 34  # ceil(33.3)
    assert break_even_iterations(10.0, 1.0, 1.1) == math.inf
    assert math.isnan(break_even_iterations(10.0, math.nan, 1.0))


def test_the_ratio_of_paired_sums_stands_inside_its_interval_whatever_one_block_holds():
    """A strategy's speedup over a sequence is the ratio of the sums; one block holding a
    re-recording (a 500 ms step) moves the sum, and the interval moves with it (an interval of
    the blocks' medians left a point of 1.54x outside its 2.09x-2.80x)."""
    eager = [100.0, 120.0, 80.0, 110.0, 90.0, 105.0]
    strategy = [40.0, 48.0, 32.0, 544.0, 36.0, 42.0]
    ratio, low, high = stats.paired_sum_ratio_ci(eager, strategy, seed=3)
    assert ratio == pytest.approx(sum(eager) / sum(strategy))
    assert low <= ratio <= high
    # a block not timed (a stopped run) leaves its pair out; blocks must pair
    ratio, low, high = stats.paired_sum_ratio_ci([100.0, math.nan, 80.0], [50.0, 60.0, 40.0])
    assert ratio == pytest.approx(2.0) and low == pytest.approx(2.0) and high == pytest.approx(2.0)
    assert all(math.isnan(v) for v in stats.paired_sum_ratio_ci([math.nan], [1.0]))
    with pytest.raises(ValueError, match="differ in number"):
        stats.paired_sum_ratio_ci([1.0, 2.0], [1.0])
