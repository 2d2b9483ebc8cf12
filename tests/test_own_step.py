"""Your own step exactly as you run it, on the CPU: the numerics flags its module sets are left
as set and recorded, the whole-step form (accumulation over micro-batches, clipping) runs as
written, the build function's settings are checked and swept, and the parity check tells a
changed numerics from eager's own noise."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch

from profiler_core.cli.main import main
from profiler_core.engine import numerics, parity
from profiler_core.engine.workloads import TrainingStep, make_batches
from profiler_core.spec import numerics as declared_numerics
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError
from profiler_core.storage.results import RunResult
from tests import own_steps

CPU = ["--device", "cpu", "--replays", "8", "--progress", "none"]
ACCUMULATING = "tests.own_steps:accumulating"


@pytest.fixture
def flags_restored():
    """The process's numerics flags put back after the test (a user module sets them globally)."""
    saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark,
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.benchmark = saved[1]
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[2], saved[3]


@pytest.mark.usefixtures("flags_restored")
def test_flags_set_by_the_users_module_are_left_as_set_and_recorded(tmp_path, monkeypatch):
    sys.modules.pop("tests.own_step_flags", None)  # imported afresh: its flags set now
    out = tmp_path / "r"
    assert main(["run", "--workload", "tests.own_step_flags:build", "--out", str(out), *CPU]) == 0
    from tests import own_step_flags

    assert own_step_flags.SEEN and set(own_step_flags.SEEN) == {("high", True)}  # as the step saw
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.benchmark
    flags = RunResult.load(out).environment["numerics"]
    assert flags["float32_matmul_precision"] == "high" and flags["cudnn_benchmark"] is True
    assert flags["matmul_allow_tf32"] is True  # what "high" means for matmuls


@pytest.mark.usefixtures("flags_restored")
def test_a_built_in_fp32_run_keeps_pytorchs_defaults_and_tf32_sets_them_for_the_run_only(tmp_path):
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's defaults
    assert main(["run", "--out", str(tmp_path / "fp32"), *CPU]) == 0
    flags = RunResult.load(tmp_path / "fp32").environment["numerics"]
    assert (flags["matmul_allow_tf32"], flags["cudnn_allow_tf32"]) == (False, True)
    for dtype, wanted in (("tf32", (True, True)), ("fp32-ieee", (False, False))):
        assert main(["run", "--dtype", dtype, "--out", str(tmp_path / dtype), *CPU]) == 0
        flags = RunResult.load(tmp_path / dtype).environment["numerics"]
        assert (flags["matmul_allow_tf32"], flags["cudnn_allow_tf32"]) == wanted, dtype
        assert torch.get_float32_matmul_precision() == "highest"  # restored after the run
        assert torch.backends.cudnn.allow_tf32 is True


def test_a_flag_setting_dtype_is_refused_for_an_own_step_in_one_line(tmp_path, capsys):
    assert main(["run", "--workload", ACCUMULATING, "--dtype", "tf32", "--out",
                 str(tmp_path / "r"), *CPU]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "whose code owns its numerics" in err
    assert main(["run", "--workload", ACCUMULATING, "--dtype", "bf16", "--out",
                 str(tmp_path / "r"), *CPU]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it owns its precision" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_a_whole_step_with_accumulation_and_clipping_runs_as_written(tmp_path):
    own_steps.CALLS.clear()
    out = tmp_path / "r"
    assert main(["run", "--workload", ACCUMULATING, "--workload-arg", "batch=6",
                 "--workload-arg", "micro_batches=3", "--out", str(out), *CPU]) == 0
    run = RunResult.load(out)
    assert run.config.workload_args == (("batch", 6), ("micro_batches", 3))  # converted to int
    assert run.headline["counters_match"] is True and run.pair.eager_ms > 0
    # the user's step ran once per warm-up and timed step, with the batch its setting asked for
    assert len(own_steps.CALLS) == run.config.warmup_iters + run.config.total_eager_iters
    assert set(own_steps.CALLS) == {6}


def test_the_tools_eager_step_is_the_users_step_and_nothing_else():
    """The tool adds no zero_grad, loss or optimizer step of its own: its eager step trains the
    model exactly as calling the user's step by hand does."""
    config = RunConfig(workload=ACCUMULATING, device="cpu", workload_args={"micro_batches": 2})
    device = torch.device("cpu")
    batches = make_batches(config, 3, device)
    tool = TrainingStep(config, device, graphed=False)
    torch.manual_seed(config.seed)
    by_hand = own_steps.accumulating(device, micro_batches=2)
    for batch in batches:
        tool.eager_step(*batch)
        by_hand["step"](*batch)
    for (_, mine), theirs in zip(tool.named_parameters(), by_hand["model"].parameters()):
        assert torch.equal(mine, theirs)
    assert float(tool.counter) == 3.0


@pytest.mark.parametrize("argument, said", [
    ("bach=4", "has no setting 'bach' (closest: batch)"),
    ("batch=eight", "batch of tests.own_steps:accumulating takes a int; got 'eight'"),
    ("clip=fast", "clip of tests.own_steps:accumulating takes a float; got 'fast'"),
    ("seed=3", "your step's setting 'seed' has the name of a run setting"),
    ("batch", "expected NAME=VALUE such as batch=8"),
])
def test_a_bad_setting_is_refused_before_anything_runs(argument, said, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", "--workload", ACCUMULATING, "--workload-arg", argument, "--out",
                 str(out), *CPU]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert not out.exists()


def test_settings_belong_to_an_own_step_only():
    with pytest.raises(ConfigError, match="built-in workload"):
        RunConfig(workload="mlp", workload_args={"batch": 8})


@pytest.mark.usefixtures("fresh_app_state")
def test_an_own_step_is_swept_over_its_batch_setting_and_indexed(tmp_path, capsys):
    out = tmp_path / "runs" / "sweep-batch"
    assert main(["sweep", "--workload", ACCUMULATING, "--param", "batch=4,8", "--device", "cpu",
                 "--eager-iters", "6", "--out", str(out), "--progress", "none"]) == 0
    with open(out / "points.csv", encoding="utf-8") as file:
        points = list(csv.DictReader(file))
    assert [(p["batch"], p["status"]) for p in points] == [("4", "done"), ("8", "done")]
    for point in points:
        run = RunResult.load(out / point["run"])
        assert run.config.settings == {"batch": int(point["batch"])}
    capsys.readouterr()
    assert main(["index", "--runs", str(tmp_path / "runs"), "--where", "batch=8"]) == 0
    listed = capsys.readouterr().out
    assert "point-001" in listed and "point-000" not in listed
    # the Sweep page reads the setting as its axis
    at = _sweep_page(tmp_path / "runs")
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="sweep_open").select("sweep-batch").run()
    medians = json.loads(at.get_by_key("sweep_medians").proto.spec)
    assert medians["layout"]["xaxis"]["title"]["text"].startswith("batch")
    table = next(df.value for df in at.dataframe if "eager_ms" in df.value.columns)
    assert table["batch"].tolist() == [4, 8]


def _sweep_page(runs):
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py"),
                           default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs)
    at.run()
    return at.switch_page("views/sweep.py").run()


def test_a_settings_sweep_refuses_an_unknown_setting_before_any_point(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert main(["sweep", "--workload", ACCUMULATING, "--param", "widht=8,16", "--device", "cpu",
                 "--out", str(out), "--progress", "none"]) == 2
    assert "has no setting 'widht' (closest: width)" in capsys.readouterr().err
    assert not out.exists()


# ----------------------------------------------------------------------------- parity


def test_a_difference_is_judged_against_eagers_own():
    assert parity.judge(0.585, 0.564, 3.0)  # cuDNN's nondeterminism: within eager's own
    assert parity.judge(0.0, 0.0, 1.0) and parity.judge(5e-7, 0.0, 1.0)  # rounding floor
    assert not parity.judge(0.2, 0.0, 1.0) and not parity.judge(1.2, 0.5, 1.0)
    assert not parity.judge(float("nan"), 0.0, 1.0)
    within = parity.ParityCheck("graph", 5, 0.585, 0.38, 0.564, "fc.weight", 1.5)
    assert within.verdict().startswith("graph matches eager as closely as eager matches itself")
    beyond = parity.ParityCheck("compile", 5, 0.2, 0.1, 0.0, "layer1.weight", 2.0)
    assert beyond.verdict().startswith("compile differs from eager beyond eager's own run-to-run "
                                       "difference: compilation changed the numerics (worst "
                                       "parameter layer1.weight")


def test_the_parity_check_compares_a_mode_with_two_eager_replicas(monkeypatch):
    """On the CPU, with torch.compile made the identity: the 'compiled' replica trains as eager
    does (matches, difference 0); a replica whose step adds noise to one layer differs beyond
    eager's own difference, and that layer is named."""
    monkeypatch.setattr(torch, "compile", lambda function, mode=None, dynamic=None: function)
    config = RunConfig(workload=ACCUMULATING, device="cpu", parity_steps=3)
    device = torch.device("cpu")
    batches = make_batches(config, 4, device)
    [same] = parity.check_modes(config, device, batches, ("compile",))
    assert same.matches and same.max_abs_diff == 0.0 and same.noise_abs_diff == 0.0
    assert same.steps == 3

    original = TrainingStep.compile

    def noisy(self, mode):
        original(self, mode)
        step = self.whole_step
        layer = self.model[2]

        def with_noise(*batch):
            step(*batch)
            with torch.no_grad():
                layer.bias.add_(1e-3)
        self.whole_step = with_noise
    monkeypatch.setattr(TrainingStep, "compile", noisy)
    [changed] = parity.check_modes(config, device, batches, ("compile",))
    assert not changed.matches and changed.worst_parameter == "2.bias"
    assert "compilation changed the numerics" in changed.verdict()


def test_the_numerics_readers_cover_every_declared_flag():
    flags = numerics.read_flags()
    assert list(flags) == list(declared_numerics.FLAG_NAMES)
    assert flags["matmul_allow_tf32"] in (True, False)
    assert declared_numerics.summary_line({**flags, "cudnn_benchmark": True}).startswith(
        "numerics flags: cudnn_benchmark True (default False)")


def test_a_capturable_optimizer_on_the_cpu_says_what_to_change(tmp_path, capsys):
    assert main(["run", "--workload", "tests.bad_steps:capturable_on_cpu", "--out",
                 str(tmp_path / "r"), *CPU]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "build the optimizer with capturable=(device.type == 'cuda')" in err, err
    assert "the error is in your step" not in err
