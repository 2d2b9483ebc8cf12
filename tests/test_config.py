"""RunConfig validation, presets and the counter predictions of the article's lessons."""

import math

import pytest

from profiler_core.engine.counters import predicted_counters
from profiler_core.spec.config import INT_LIMITS, PRESETS, RunConfig, preset
from profiler_core.spec.errors import ConfigError


def test_defaults_are_the_article_step():
    config = RunConfig()
    assert (config.batch, config.d_in, config.hidden, config.d_out) == (640, 4096, 2048, 1024)
    assert (config.dropout1, config.dropout2, config.dtype, config.optimizer) == (0.2, 0.1, "fp32", "sgd")
    assert config.total_eager_iters == config.replays * config.capture_iters == 200


@pytest.mark.parametrize("field, value", [
    ("batch", 0), ("batch", -3), ("d_in", 2_000_000), ("hidden_layers", 0), ("replays", 0),
    ("warmup_iters", 0), ("capture_iters", 101), ("batch", 2.5), ("batch", True), ("batch", "64"),
    ("dropout1", -0.1), ("dropout1", 1.0), ("dropout2", math.nan), ("nvml_interval_ms", 0.0),
    ("seed", -1), ("trials", 0),
])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(ConfigError) as raised:
        RunConfig(**{field: value})
    assert raised.value.field == field
    assert field in raised.value.message


@pytest.mark.parametrize("field, value", [("dtype", "fp8"), ("optimizer", "lamb"), ("device", "gpu0"),
                                          ("device", "cuda:"), ("count_warmup", 1)])
def test_bad_choices_are_refused(field, value):
    with pytest.raises(ConfigError) as raised:
        RunConfig(**{field: value})
    assert raised.value.field == field


def test_a_layer_over_two_to_the_31_elements_is_refused():
    with pytest.raises(ConfigError) as raised:
        RunConfig(d_in=65_536, hidden=65_536)
    assert raised.value.field == "hidden"
    assert "2^31" in raised.value.message and raised.value.hint


def test_trials_cannot_exceed_replays():
    with pytest.raises(ConfigError) as raised:
        RunConfig(replays=5, trials=10)
    assert raised.value.field == "trials"


def test_every_limit_edge_is_accepted():
    for name, (low, high) in INT_LIMITS.items():
        if name in ("batch", "d_in", "hidden", "d_out"):
            continue  # their upper edges multiply past 2^31; the edge rule is tested above
        base = {"replays": 1_000, "trials": 1}
        assert getattr(RunConfig(**{**base, name: low}), name) == low
        assert getattr(RunConfig(**{**base, name: high}), name) == high


def test_from_dict_round_trip_and_unknown_key():
    config = preset("lesson3", dtype="bf16")
    assert RunConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ConfigError) as raised:
        RunConfig.from_dict({**config.to_dict(), "colour": "red"})
    assert raised.value.field == "colour"


def test_unknown_preset():
    with pytest.raises(ConfigError) as raised:
        preset("lesson4")
    assert raised.value.field == "preset"


def _predicted(name):
    table = predicted_counters(PRESETS[name]).set_index("phase")["predicted"]
    return [int(table[p]) for p in ("initial", "after_warmup", "after_capture", "after_replay")]


def test_lesson_presets_predict_the_article_counters():
    assert _predicted("lesson1") == [0, 1, 1, 10]
    assert _predicted("lesson2") == [0, 0, 0, 10]
    assert _predicted("lesson3") == [0, 3, 3, 30]


def test_general_counter_rule():
    config = RunConfig(warmup_iters=7, count_warmup=False, capture_iters=4, replays=50, eager_iters=33)
    table = predicted_counters(config).set_index("phase")["predicted"]
    assert table["after_warmup"] == 0 and table["after_capture"] == 0
    assert table["after_replay"] == 200 and table["eager_after_timed"] == 33


def test_fp16_captures_one_step_per_graph():
    with pytest.raises(ConfigError) as raised:
        RunConfig(dtype="fp16", capture_iters=3)
    assert raised.value.field == "capture_iters" and "GradScaler" in raised.value.hint


def test_preset_label_must_be_known():
    with pytest.raises(ConfigError) as raised:
        RunConfig(preset="../../etc")
    assert raised.value.field == "preset"
    assert RunConfig(preset="custom").preset == "custom"
