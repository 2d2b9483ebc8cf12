"""Bad input, memory refusal, capture diagnosis and incomplete runs, on the CPU (fakes for the GPU)."""

import contextlib
import io
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from profiler_core.cli.main import main
from profiler_core.cli.parser import config_from_args, parse
from profiler_core.engine import memory
from profiler_core.engine.capture import diagnose_capture_failure
from profiler_core.engine.runner import _out_of_memory, run_experiment
from profiler_core.spec.config import FLOAT_LIMITS, INT_LIMITS, RunConfig
from profiler_core.spec.errors import CaptureError, ConfigError, GpuMemoryError, UsageError
from profiler_core.storage import runtables
from profiler_core.storage.results import RunResult

TINY = dict(batch=8, d_in=16, hidden=32, d_out=4, replays=20, trials=4, profile=False, nvml=False,
            parity_steps=0, device="cpu")

values = st.one_of(st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=8), st.booleans(), st.none())


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(INT_LIMITS) + sorted(FLOAT_LIMITS)), value=values)
def test_validator_accepts_only_values_in_range(field, value):
    try:
        config = RunConfig(**{"replays": 1000, "trials": 1, field: value})
    except ConfigError as error:
        assert error.field in (field, "hidden", "d_in", "d_out", "trials", "eager_iters")
        assert error.message
        return
    accepted = getattr(config, field)
    if field in INT_LIMITS:
        low, high = INT_LIMITS[field]
        assert (accepted is None and field in ("eager_iters", "trials", "nproc_per_node")) or (
            isinstance(accepted, int) and not isinstance(accepted, bool) and low <= accepted <= high)
    else:
        low, high = FLOAT_LIMITS[field]
        assert not isinstance(accepted, bool) and math.isfinite(accepted) and low <= accepted <= high


OPTIONS = ["--batch", "--d-in", "--hidden", "--d-out", "--hidden-layers", "--warmup-iters",
           "--capture-iters", "--replays", "--eager-iters", "--seed", "--trials", "--profile-iters",
           "--parity-steps", "--nvml-interval-ms"]
texts = st.one_of(st.integers(-10**15, 10**15).map(str), st.floats().map(repr),
                  st.sampled_from(["nan", "inf", "-inf", "", "1e99", "0x10", "ten", "2**31", "-0"]),
                  st.text(max_size=6))


@settings(max_examples=300, deadline=None)
@given(option=st.sampled_from(OPTIONS), text=texts)
def test_cli_parser_refuses_bad_text_with_one_line(option, text):
    argv = ["run", "--out", "unused", "--device", "cpu", option, text]
    try:
        config = config_from_args(parse(argv))
    except (UsageError, ConfigError):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(argv)
        assert code == 2
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in lines[0]
        return
    assert isinstance(config, RunConfig)  # text that parses gives a valid config


def test_memory_estimate_counts_replicas_and_optimizer_state():
    sgd = memory.estimate(RunConfig())
    adam = memory.estimate(RunConfig(optimizer="adam"))
    params = memory.parameter_count(RunConfig())
    assert params == 4096 * 2048 + 2048 + 2048 * 1024 + 1024
    assert sgd.parameters_bytes == 4 * params
    assert adam.optimizer_bytes == 2 * adam.parameters_bytes and sgd.optimizer_bytes == 0
    assert adam.total_bytes - sgd.total_bytes == 2 * adam.optimizer_bytes
    assert sgd.total_bytes > 4 * sgd.parameters_bytes + sgd.batches_bytes


def test_a_config_that_clearly_exceeds_free_memory_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * 2**30, 80 * 2**30))
    huge = RunConfig(batch=65_536, d_in=32_768, hidden=16_384, d_out=8_192)
    with pytest.raises(GpuMemoryError) as raised:
        memory.check_fits(huge, torch.device("cuda:0"))
    assert "2.0 GiB free" in raised.value.message and "shrink" in raised.value.hint
    memory.check_fits(RunConfig(batch=64, d_in=512, hidden=512, d_out=256), torch.device("cuda:0"))


def test_out_of_memory_names_the_phase_and_what_to_shrink():
    error = _out_of_memory(RunConfig(), "capture", torch.cuda.OutOfMemoryError("CUDA out of memory. Tried"))
    assert "during capture" in error.message and "batch 640" in error.hint and "hidden 2,048" in error.hint
    assert error.__traceback__ is None and error.exit_code == 5


def _raise_from(kind):
    """Raise a real RuntimeError from a line that looks like the kind of capture mistake."""
    if kind == "sync":
        torch.ones(2).item()  # .item() of two elements fails on the CPU too
    if kind == "cpu":
        torch.zeros(3).to("cpu").reshape(2)
    raise RuntimeError("Attempting CUDA graph capture of step() for an instance of Adam but "
                       "param_groups' capturable is False.")


@pytest.mark.parametrize("kind, cause", [("sync", "synchronises with the host"),
                                         ("cpu", "copies a CPU tensor"),
                                         ("optimizer", "without capturable=True")])
def test_capture_failure_diagnosis_names_cause_line_and_fix(kind, cause):
    try:
        _raise_from(kind)
    except RuntimeError as error:
        diagnosis = diagnose_capture_failure(error)
    assert isinstance(diagnosis, CaptureError) and cause in diagnosis.message
    assert "test_reliability.py:" in diagnosis.message and diagnosis.hint
    assert diagnosis.exit_code == 4


def test_capture_failure_diagnosis_reads_through_a_masking_error():
    try:
        try:
            _raise_from("optimizer")
        except RuntimeError:
            raise RuntimeError(  # noqa: B904  (the masking error keeps the first as its __context__)
                "CUDA error: operation failed due to a previous error during capture")
    except RuntimeError as error:
        diagnosis = diagnose_capture_failure(error)
    assert "without capturable=True" in diagnosis.message


def test_an_interrupted_run_is_kept_incomplete_and_still_opens(tmp_path, monkeypatch, capsys):

    original = runtables.stats_table

    def interrupted(*args, **kwargs):  # Ctrl-C right after the last timed trial
        raise KeyboardInterrupt

    monkeypatch.setattr(runtables, "stats_table", interrupted)
    with pytest.raises(KeyboardInterrupt) as raised:
        run_experiment(RunConfig(**TINY))
    partial = raised.value.partial_result
    assert partial.complete is False and len(partial.table("latency")) == 16
    assert any("incomplete" in note and "timed trials" in note for note in partial.notes)

    out = tmp_path / "interrupted"
    assert main(["run", "--out", str(out), "--device", "cpu", "--batch", "8", "--d-in", "16",
                 "--hidden", "32", "--d-out", "4", "--replays", "20", "--trials", "4",
                 "--progress", "none"]) == 130
    assert "kept" in capsys.readouterr().err
    loaded = RunResult.load(out)
    assert loaded.complete is False and len(loaded.table("latency")) == 16
    assert set(loaded.table("counters")["phase"]) == {"initial", "after_warmup", "eager_after_timed"}
    monkeypatch.setattr(runtables, "stats_table", original)
    assert run_experiment(RunConfig(**TINY)).complete is True  # the next run works


def test_workload_choice_is_validated_and_reaches_the_cli():
    with pytest.raises(ConfigError) as raised:
        RunConfig(workload="rm -rf /")
    assert raised.value.field == "workload"
    config = config_from_args(parse(["run", "--out", "x", "--workload", "broken-host-sync"]))
    assert config.workload == "broken-host-sync"
