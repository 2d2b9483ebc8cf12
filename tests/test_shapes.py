"""The varying dimension's grammar, its seeded sequence and the buckets (``spec.shapes``)."""

from __future__ import annotations

import math

import pytest

from profiler_core.spec import shapes
from profiler_core.spec.errors import ConfigError


def test_each_distribution_reads_and_draws_the_same_sequence_for_a_seed(tmp_path):
    uniform = shapes.parse_distribution("uniform:64:512")
    drawn = uniform.sample(500, seed=3)
    assert drawn == uniform.sample(500, seed=3) and drawn != uniform.sample(500, seed=4)
    assert 64 <= min(drawn) and max(drawn) <= 512
    lognormal = shapes.parse_distribution("lognormal:128:0.6:512")
    drawn = lognormal.sample(2_000, seed=0)
    assert max(drawn) <= 512 and 100 < sorted(drawn)[1_000] < 160  # its median, about 128
    weighted = shapes.parse_distribution("128:3,256:1")
    drawn = weighted.sample(4_000, seed=1)
    assert set(drawn) == {128, 256} and 0.7 < drawn.count(128) / 4_000 < 0.8
    lengths = tmp_path / "lengths.txt"
    lengths.write_text("# observed\n100\n200\n200\n\n400\n")
    observed = shapes.parse_distribution(f"file:{lengths}")
    assert observed.values == (100, 200, 400) and observed.weights == (1.0, 2.0, 1.0)
    assert observed.maximum == 400 and "4 observed lengths" in observed.describe()


@pytest.mark.parametrize("text, said", [
    ("uniform:64", "uniform takes uniform:LOW:HIGH"),
    ("uniform:512:64", "is below its low"),
    ("lognormal:128:0.6", "lognormal takes lognormal:MEDIAN:SIGMA:MAX"),
    ("lognormal:600:0.6:512", "is above its maximum"),
    ("gamma:2:3", "unknown distribution"),
    ("128,128", "given twice"),
    ("0,8", "from 1 to"),
    ("file:/no/such/file", "cannot read the lengths file"),
    ("uniform:٣:9", "must be a whole number"),
])
def test_a_bad_distribution_is_one_line_saying_what_to_write(text, said):
    with pytest.raises(ConfigError, match=said) as raised:
        shapes.parse_distribution(text)
    assert raised.value.field == "vary" and "\n" not in raised.value.message


def test_buckets_cover_the_largest_value_and_padding_is_counted():
    dist = shapes.parse_distribution("uniform:70:500")
    assert shapes.bucket_edges("pow2", dist) == (128, 256, 512)  # none below every value
    lognormal = shapes.parse_distribution("lognormal:32:0.5:96")
    assert shapes.bucket_edges("pow2", lognormal, [10, 33, 96]) == (16, 32, 64, 128)
    assert shapes.bucket_edges("pow2", shapes.parse_distribution("64,128")) == (64, 128)
    assert shapes.bucket_edges("128,256,512", dist) == (128, 256, 512)
    sample = dist.sample(1_000, 0)
    quantiles = shapes.bucket_edges("quantiles:4", dist, sample)
    assert len(quantiles) == 4 and quantiles[-1] == 500
    with pytest.raises(ConfigError, match="below the largest value"):
        shapes.bucket_edges("128,256", dist)
    assert shapes.bucket_of(129, (128, 256)) == 256
    assert shapes.padded_share([100, 200], (128, 256)) == pytest.approx(84 / 384)
    assert shapes.padded_share([128, 256], (128, 256)) == 0.0


def test_vary_names_its_dimension():
    vary = shapes.parse_vary("seq_len=lognormal:128:0.6:512")
    assert vary.dimension == "seq_len" and vary.distribution.kind == "lognormal"
    assert vary.text == "seq_len=lognormal:128:0.6:512"
    with pytest.raises(ConfigError, match="expected NAME=DIST"):
        shapes.parse_vary("uniform:1:2")


def test_a_strategy_beats_eager_only_beyond_the_noise():
    assert shapes.beats_eager(1.2, 1.05)
    assert not shapes.beats_eager(1.03, 0.97)  # faster, but within eager's own blocks' spread
    assert not shapes.beats_eager(0.9, math.nan)
    assert shapes.beats_eager(1.2, math.nan)  # no interval (one block): the point estimate
