"""The built-in workloads beside the article's MLP, on the CPU: the transformer block stack and the
convolutional classifier build, train, keep their counters and refuse sizes that cannot work."""

from __future__ import annotations

import pytest
import torch

from profiler_core.cli import parser as cli
from profiler_core.cli.main import main
from profiler_core.engine.workloads import TrainingStep, make_batches
from profiler_core.spec.config import PRESETS, RunConfig, preset
from profiler_core.spec.errors import ConfigError
from profiler_core.storage.results import RunResult

SMALL = {"transformer": dict(batch=2, hidden=32, heads=4, seq_len=8, hidden_layers=2, d_out=16),
         "conv": dict(batch=4, channels=8, image_size=8, hidden_layers=2, d_out=5)}


@pytest.mark.parametrize("name", ["transformer", "conv"])
def test_each_workload_trains_the_same_from_the_same_seed(name):
    config = preset(name, device="cpu", dtype="fp32", dropout1=0.0, dropout2=0.0, **SMALL[name])
    batches = make_batches(config, 2, torch.device("cpu"))
    first, second = (TrainingStep(config, torch.device("cpu"), graphed=False) for _ in range(2))
    for step in (first, second):
        for x, y in batches:
            step.eager_step(x, y)
    assert torch.equal(first.parameters_flat(), second.parameters_flat())
    assert first.counter.item() == 2
    x, y = batches[0]
    if name == "conv":
        assert x.shape == (4, 3, 8, 8) and y.dtype == torch.int64 and int(y.max()) < 5
    else:
        assert x.shape == (2, 8, 32) and y.shape == (2, 8, 16)


@pytest.mark.parametrize("name", ["transformer", "conv"])
def test_each_workload_runs_from_the_cli(name, tmp_path, capsys):
    options = [item for key, value in SMALL[name].items()
               for item in (cli.OPTION_OF_FIELD[key], str(value))]
    out = tmp_path / name
    assert main(["run", "--preset", name, *options, "--dtype", "fp32", "--device", "cpu",
                 "--replays", "8", "--out", str(out), "--progress", "none"]) == 0
    assert f"Workload: {name if name == 'transformer' else 'conv classifier'}:" in capsys.readouterr().out
    run = RunResult.load(out)
    assert run.config.workload == name and run.headline["counters_match"] is True


def test_presets_name_their_workload_and_sizes_are_checked():
    assert PRESETS["transformer"].workload == "transformer" and PRESETS["conv"].workload == "conv"
    with pytest.raises(ConfigError) as raised:
        RunConfig(workload="transformer", hidden=100, heads=8)
    assert raised.value.field == "heads"
    with pytest.raises(ConfigError) as raised:
        RunConfig(workload="transformer", batch=4096, seq_len=65_536, hidden=512, heads=8)
    assert "2^31" in raised.value.message
    with pytest.raises(ConfigError) as raised:
        RunConfig(workload="conv", batch=65_536, channels=512, image_size=512)
    assert raised.value.field == "image_size"
    with pytest.raises(ConfigError):
        RunConfig(workload="conv", image_size=2)


@pytest.mark.parametrize("name", ["seed", "transformer", "conv"])
@pytest.mark.parametrize("layers", [1, 3])
def test_each_workload_counts_its_own_parameters_exactly(name, layers):
    """The workload object's parameter count (the memory estimate's basis) is the model's."""
    from profiler_core.engine.workloads import build_model
    from profiler_core.spec.workload_kinds import workload_of

    small = {"seed": RunConfig(d_in=48, hidden=32, d_out=8)}
    config = small.get(name) or preset(name, **SMALL[name])
    config = config.replace(hidden_layers=layers)
    model = build_model(config)
    assert workload_of(config).parameter_count(config) == sum(p.numel() for p in model.parameters())


def test_every_built_in_workload_has_a_memory_estimate_that_grows_with_its_sizes():
    from profiler_core.engine import memory
    for name, size in (("seed", "batch"), ("transformer", "seq_len"), ("conv", "image_size")):
        small = PRESETS[name]
        large = small.replace(**{size: getattr(small, size) * 4})
        assert memory.estimate(large).activations_bytes > memory.estimate(small).activations_bytes
        assert memory.estimate(small).total_bytes > memory.FIXED_OVERHEAD_BYTES
    # each extra mode builds its own replica
    seed = PRESETS["seed"]
    more = seed.replace(modes=("eager", "graph", "compile", "compile_ro"))
    replica = 2 * memory.estimate(seed).parameters_bytes
    assert memory.estimate(more).total_bytes - memory.estimate(seed).total_bytes == 2 * replica


def test_a_transformer_too_large_for_the_host_is_refused_naming_its_own_sizes(monkeypatch):
    from profiler_core.engine import memory
    from profiler_core.spec.errors import GpuMemoryError

    monkeypatch.setattr(memory, "host_memory_available", lambda: 2**20)
    config = PRESETS["transformer"].replace(device="cpu")
    with pytest.raises(GpuMemoryError) as refused:
        memory.check_fits(config, torch.device("cpu"))
    assert "seq_len 128" in refused.value.hint and "heads 8" in refused.value.hint
    user = config.replace(workload="profiler_core.examples.user_step:build")
    assert memory.check_fits(user, torch.device("cpu")) is None  # only its code knows its size
