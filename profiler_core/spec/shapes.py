"""Steps whose shapes change: the varying dimension and its distribution (``--vary
seq_len=lognormal:128:0.6:512``), the seeded sequence of shapes every strategy runs, and the
buckets a graph per shape-bucket pads up to (``--buckets pow2``, ``quantiles:4``, ``128,256,512``).

Scope: declarations and arithmetic only (no torch): the grammar, read into frozen values with a
one-line ``ConfigError`` naming what to change; the sequence drawn from a seed so that every
strategy sees the same shapes (the comparison is paired); bucket edges and the padded share of
the work. A lengths file is read once, when its distribution is parsed, and the run records the
sequence it drew, so that the file is not needed to read the run back.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from profiler_core.spec.errors import ConfigError, quoted, shown

KINDS = ("uniform", "lognormal", "list", "file")
DIST_EXAMPLES = ("uniform:64:512, lognormal:MEDIAN:SIGMA:MAX (lognormal:128:0.6:512), a list "
                 "128,256,512 with optional weights 128:3,256:1, or file:PATH (one length a line)")
MAX_LENGTH = 1_048_576  # a varying dimension's largest value
MAX_LIST_VALUES = 4_096
MAX_FILE_BYTES = 16 * 2**20  # a lengths file, at most
MAX_BUCKETS = 64
BUCKET_KINDS = ("pow2", "quantiles", "given")
# The strategies a run of changing shapes times, in the order every reader shows them
# (``engine.shaped``); eager and the graph per bucket are always timed: every page compares them.
STRATEGY_NAMES = ("eager", "pad_max", "buckets", "buckets_own_pools", "compile_ro",
                  "compile_dynamic")
ALWAYS_TIMED_STRATEGIES = ("eager", "buckets")


def _refuse(message: str, hint: str = DIST_EXAMPLES) -> ConfigError:
    return ConfigError("vary", message, hint)


def _whole(text: str, what: str) -> int:
    text = text.strip().replace("_", "")
    if not (text.isascii() and text.isdigit()):
        raise _refuse(f"{what} must be a whole number; got {quoted(text)}")
    value = int(text)
    if not 1 <= value <= MAX_LENGTH:
        raise _refuse(f"{what} must be from 1 to {MAX_LENGTH:,}; got {shown(text)}")
    return value


def _number(text: str, what: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise _refuse(f"{what} must be a number; got {quoted(text)}") from None
    if not math.isfinite(value) or value <= 0:
        raise _refuse(f"{what} must be a positive number; got {quoted(text)}")
    return value


@dataclass(frozen=True)
class Distribution:
    """What the varying dimension's values are drawn from. ``values``/``weights``: a list or a
    file's lengths (their counts); ``low``/``high``: uniform's bounds; ``median``, ``sigma`` and
    ``high``: a log-normal's, values above ``high`` drawn again below it."""

    kind: str
    text: str  # as given ("lognormal:128:0.6:512"); a file's as file:PATH
    low: int = 1
    high: int = 1
    median: float = 1.0
    sigma: float = 0.0
    values: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()

    @property
    def maximum(self) -> int:
        return max(self.values) if self.values else self.high

    @property
    def minimum(self) -> int:
        return min(self.values) if self.values else (self.low if self.kind == "uniform" else 1)

    def sample(self, count: int, seed: int) -> list[int]:
        """``count`` values, the same for the same seed (every strategy runs this sequence)."""
        import numpy as np

        rng = np.random.default_rng(seed)
        if self.kind == "uniform":
            return [int(v) for v in rng.integers(self.low, self.high + 1, size=count)]
        if self.kind == "lognormal":
            drawn = np.round(np.exp(rng.normal(math.log(self.median), self.sigma, size=count)))
            while (drawn > self.high).any():  # a tail beyond the maximum is drawn again
                over = drawn > self.high
                drawn[over] = np.round(np.exp(rng.normal(math.log(self.median), self.sigma,
                                                         size=int(over.sum()))))
            return [max(1, int(v)) for v in drawn]
        probabilities = np.asarray(self.weights, dtype=float)
        probabilities = probabilities / probabilities.sum()
        return [int(v) for v in rng.choice(np.asarray(self.values), size=count, p=probabilities)]

    def describe(self) -> str:
        if self.kind == "uniform":
            return f"uniform from {self.low:,} to {self.high:,}"
        if self.kind == "lognormal":
            return (f"log-normal, median {self.median:g}, sigma {self.sigma:g}, at most "
                    f"{self.high:,}")
        if self.kind == "file":
            return (f"{int(sum(self.weights)):,} observed lengths from {self.text[5:]} "
                    f"({len(self.values):,} distinct, {self.minimum:,} to {self.maximum:,})")
        return "the values " + ", ".join(f"{v:,}" for v in self.values[:8]) + (
            " ..." if len(self.values) > 8 else "") + (
            "" if len(set(self.weights)) <= 1 else " (weighted)")


def _read_lengths(path_text: str) -> tuple[tuple[int, ...], tuple[float, ...]]:
    path = Path(os.path.expanduser(path_text))
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise _refuse(f"the lengths file {shown(path_text)} is over "
                          f"{MAX_FILE_BYTES // 2**20} MiB", "give a sample of the lengths")
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise _refuse(f"cannot read the lengths file {shown(path_text)}: "
                      f"{error.strerror or error}", "give a readable file, one length a line") from None
    except UnicodeDecodeError:
        raise _refuse(f"the lengths file {shown(path_text)} is not text",
                      "one whole number a line") from None
    counts: dict[int, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        value = _whole(line, f"line {number} of {shown(path_text)}")
        counts[value] = counts.get(value, 0) + 1
    if not counts:
        raise _refuse(f"the lengths file {shown(path_text)} holds no length",
                      "one whole number a line")
    ordered = sorted(counts)
    return tuple(ordered), tuple(float(counts[v]) for v in ordered)


def parse_distribution(text: str) -> Distribution:
    """A distribution from its text (``DIST_EXAMPLES``); ``ConfigError`` (field ``vary``)."""
    text = str(text).strip()
    head, _, rest = text.partition(":")
    head = head.strip().lower()
    if head == "uniform":
        parts = rest.split(":")
        if len(parts) != 2:
            raise _refuse(f"uniform takes uniform:LOW:HIGH; got {quoted(text)}")
        low, high = _whole(parts[0], "uniform's low"), _whole(parts[1], "uniform's high")
        if high < low:
            raise _refuse(f"uniform's high ({high:,}) is below its low ({low:,})")
        return Distribution("uniform", text, low=low, high=high)
    if head == "lognormal":
        parts = rest.split(":")
        if len(parts) != 3:
            raise _refuse(f"lognormal takes lognormal:MEDIAN:SIGMA:MAX; got {quoted(text)}")
        median, sigma = _number(parts[0], "lognormal's median"), _number(parts[1], "lognormal's sigma")
        high = _whole(parts[2], "lognormal's maximum")
        if median > high:
            raise _refuse(f"lognormal's median ({median:g}) is above its maximum ({high:,})")
        if sigma > 5:
            raise _refuse(f"lognormal's sigma must be at most 5; got {sigma:g}")
        return Distribution("lognormal", text, high=high, median=median, sigma=sigma)
    if head == "file":
        if not rest.strip():
            raise _refuse("file: needs a path, file:lengths.txt")
        values, weights = _read_lengths(rest.strip())
        return Distribution("file", f"file:{rest.strip()}", values=values, weights=weights)
    items = [item for item in text.split(",") if item.strip()]
    if not items or not all(item.strip().split(":")[0].strip().isdigit() for item in items):
        raise _refuse(f"unknown distribution {quoted(text)}")
    if len(items) > MAX_LIST_VALUES:
        raise _refuse(f"a list of at most {MAX_LIST_VALUES:,} values; got {len(items):,}")
    listed: list[int] = []
    weighed: list[float] = []
    for item in items:
        value_text, _, weight_text = item.partition(":")
        listed.append(_whole(value_text, "a listed value"))
        weighed.append(_number(weight_text, "a weight") if weight_text.strip() else 1.0)
    if len(set(listed)) != len(listed):
        raise _refuse("a listed value is given twice", "give each value once (with a weight)")
    return Distribution("list", text, values=tuple(listed), weights=tuple(weighed))


@dataclass(frozen=True)
class Vary:
    """The one dimension that varies from step to step, and its distribution."""

    dimension: str  # seq_len, batch, or a keyword of the own step's batch function
    distribution: Distribution

    @property
    def text(self) -> str:
        return f"{self.dimension}={self.distribution.text}"


def parse_vary(text: str) -> Vary:
    """``NAME=DIST`` (``--vary seq_len=lognormal:128:0.6:512``)."""
    name, sep, dist = str(text).partition("=")
    name = name.strip()
    if not sep or not name:
        raise _refuse(f"expected NAME=DIST such as seq_len=uniform:64:512; got {quoted(text)}")
    if not (name.isidentifier() and name.isascii()):
        raise _refuse(f"{quoted(name)} is not a dimension's name",
                      "seq_len, batch, or a keyword of your step's batch function")
    return Vary(name, parse_distribution(dist))


def check_vary(text: str) -> Vary | None:
    """``parse_vary`` of a config's ``vary`` without reading a lengths file (a saved run opens
    without it): the parsed value, or None for a file's, whose path alone is checked."""
    name, _, dist = str(text).partition("=")
    if dist.strip().lower().startswith("file:"):
        if not dist.strip()[5:].strip() or not (name.strip().isidentifier() and name.isascii()):
            raise _refuse(f"expected NAME=file:PATH; got {quoted(text)}")
        return None
    return parse_vary(text)


def check_buckets(text: str) -> None:
    """The grammar of ``--buckets`` (its edges need the distribution: ``bucket_edges``)."""
    spec = str(text).strip().lower()
    if spec == "pow2":
        return
    if spec.startswith("quantiles"):
        _bucket_count(spec.partition(":")[2] or "4")
        return
    items = [item for item in spec.split(",") if item.strip()]
    if not items or not all(item.strip().isascii() and item.strip().isdigit() for item in items):
        raise ConfigError("buckets", f"buckets must be pow2, quantiles:N or sizes such as "
                                     f"128,256,512; got {quoted(text)}")
    if len(items) > MAX_BUCKETS:
        raise ConfigError("buckets", f"at most {MAX_BUCKETS} buckets; got {len(items)}")


def bucket_edges(spec: str, distribution: Distribution, sample: Sequence[int] = ()) -> tuple[int, ...]:
    """The bucket sizes a batch is padded up to: ``pow2`` (powers of two from the first at or
    above the smallest value, the sample's when one is given, up to the first at or above the
    largest: a bucket below every value would never be used), ``quantiles:N`` (N edges at the sample's quantiles,
    the last the distribution's maximum), or a list (``128,256,512``, the last at or above the
    maximum). Sorted, distinct; the last edge always holds the largest value."""
    spec = str(spec).strip().lower()
    top = distribution.maximum
    if spec == "pow2":
        smallest = min(sample) if sample else distribution.minimum
        low = max(1, 2 ** math.ceil(math.log2(max(1, smallest))))
        powers: list[int] = []
        value = low
        while True:
            powers.append(min(value, MAX_LENGTH))
            if value >= top:
                break
            value *= 2
        return _checked_edges(tuple(powers), top)
    if spec.startswith("quantiles"):
        _, _, count_text = spec.partition(":")
        import numpy as np

        count = _bucket_count(count_text or "4")
        values = np.asarray(list(sample) or distribution.sample(4_096, 0), dtype=float)
        points = [int(math.ceil(np.quantile(values, q))) for q in np.linspace(0, 1, count + 1)[1:]]
        return _checked_edges(tuple(sorted(set([*points[:-1], top]))), top)
    items = [item for item in spec.split(",") if item.strip()]
    if not items:
        raise ConfigError("buckets", "no buckets given", "pow2, quantiles:4 or 128,256,512")
    try:
        given = tuple(sorted({_whole(item, "a bucket") for item in items}))
    except ConfigError as error:
        raise ConfigError("buckets", error.message, "pow2, quantiles:4 or 128,256,512") from None
    return _checked_edges(given, top)


def _bucket_count(text: str) -> int:
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_BUCKETS:
        raise ConfigError("buckets", f"quantiles:N takes N from 1 to {MAX_BUCKETS}; got "
                                     f"{quoted(text)}", "e.g. quantiles:4")
    return int(text)


def _checked_edges(edges: tuple[int, ...], top: int) -> tuple[int, ...]:
    if len(edges) > MAX_BUCKETS:
        raise ConfigError("buckets", f"{len(edges)} buckets (at most {MAX_BUCKETS})",
                          "give fewer buckets")
    if edges[-1] < top:
        raise ConfigError("buckets", f"the largest bucket ({edges[-1]:,}) is below the largest "
                                     f"value the distribution gives ({top:,})",
                          "add a bucket at or above it")
    return edges


def bucket_of(value: int, edges: Sequence[int]) -> int:
    """The smallest edge at or above ``value``."""
    for edge in edges:
        if edge >= value:
            return edge
    raise ValueError(f"{value} is above every bucket")


def padded_share(sequence: Sequence[int], edges: Sequence[int]) -> float:
    """The share of the work that is padding when every value is padded up to its bucket."""
    padded = sum(bucket_of(v, edges) for v in sequence)
    return (padded - sum(sequence)) / padded if padded else 0.0


def beats_eager(speedup: float, ci_low: float) -> bool:
    """Whether a strategy is faster than eager beyond the noise: its speedup over 1 and, where
    the run has an interval, the interval's low end too."""
    return speedup > 1 and (not math.isfinite(ci_low) or ci_low > 1)


def parse_strategies(text: str | None) -> tuple[str, ...]:
    """The strategies a run of changing shapes times, in ``STRATEGY_NAMES``' order: every one
    where ``text`` is None, else those it names, separated by commas (eager and buckets always
    among them)."""
    if text is None:
        return STRATEGY_NAMES
    names = [name.strip() for name in str(text).split(",") if name.strip()]
    hint = (f"name some of {', '.join(STRATEGY_NAMES)}, separated by commas, "
            f"{' and '.join(ALWAYS_TIMED_STRATEGIES)} among them")
    unknown = [name for name in names if name not in STRATEGY_NAMES]
    if unknown:
        raise ConfigError("strategies", f"no strategy is called {quoted(unknown[0])}",
                          hint)
    missing = [name for name in ALWAYS_TIMED_STRATEGIES if name not in names]
    if missing:
        raise ConfigError("strategies", f"{shown(str(text))} leaves out {missing[0]}, "
                                        "which every reader compares with eager", hint)
    return tuple(name for name in STRATEGY_NAMES if name in names)
