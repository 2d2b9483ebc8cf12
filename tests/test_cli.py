"""The command line: one-line errors with exit 2, exit 3 without CUDA, and --device cpu end to end."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from profiler_core.cli import parser as cli
from profiler_core.cli.main import format_summary, main
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec import schema
from profiler_core.spec.config import preset
from profiler_core.spec.errors import ERROR_KINDS
from profiler_core.storage.results import RunResult

TINY = ["--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4", "--replays", "20",
        "--trials", "4", "--no-profile", "--no-nvml", "--parity-steps", "0"]


@pytest.mark.parametrize("argv, option", [
    (["run", "--out", "x", "--batch", "0"], "--batch"),
    (["run", "--out", "x", "--batch", "-5"], "--batch"),
    (["run", "--out", "x", "--batch", "lots"], "--batch"),
    (["run", "--out", "x", "--dropout", "0.2", "nan"], "--dropout"),
    (["run", "--out", "x", "--dropout", "0.2"], "--dropout"),
    (["run", "--out", "x", "--dtype", "fp8"], "--dtype"),
    (["run", "--out", "x", "--d-in", "100000", "--hidden", "100000"], "--hidden"),
    (["run", "--out", "x", "--replays", "5", "--trials", "10"], "--trials"),
    (["run", "--out", "x", "--device", "gpu"], "--device"),
    (["run", "--out", "x", "--nvml-interval-ms", "0"], "--nvml-interval-ms"),
    (["run", "--out", "x", "--preset", "lesson9"], "--preset"),
    (["run"], "--out"),
    (["run", "--out", "x", "--timeout", "-1"], "--timeout"),
    (["run", "--out", "x", "--timeout", "nan"], "--timeout"),
    (["run", "--out", "x", "--timeout", "1e9"], "--timeout"),
    (["run", "--out", "x", "--timeout", "soon"], "--timeout"),
])
def test_bad_input_exits_2_with_one_line(argv, option, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:") and option in err
    assert "Traceback" not in err


def test_bad_input_in_jsonl_mode_emits_an_error_record(capsys):
    assert main(["run", "--out", "x", "--batch", "0", "--progress", "jsonl"]) == 2
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["event"] == "error" and record["field"] == "batch"
    assert "1 to 1,048,576" in record["message"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_no_cuda_exits_3(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "r"), *TINY]) == 3
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "--device cpu" in err
    assert not (tmp_path / "r").exists()


def test_config_round_trips_through_argv():
    config = preset("lesson2", dtype="bf16", optimizer="adamw", dropout1=0.0, eager_iters=17,
                    nvml=False, device="cuda:1", nvml_interval_ms=12.5, preset="custom")
    args = cli.parse(["run", "--out", "x", *config_to_argv(config)])
    assert cli.config_from_args(args) == config


def test_options_override_the_preset():
    args = cli.parse(["run", "--out", "x", "--preset", "lesson3", "--replays", "40", "--device", "cpu"])
    config = cli.config_from_args(args)
    # replays changed from the lesson's 10: no longer the lesson, so labelled custom
    assert (config.capture_iters, config.replays, config.device, config.preset) == (3, 40, "cpu", "custom")
    same = cli.config_from_args(cli.parse(["run", "--out", "x", "--preset", "lesson3", "--replays", "10"]))
    assert same.preset == "lesson3"


def test_a_preset_run_on_another_device_keeps_the_presets_label():
    """Where a run ran is not one of the preset's values: the seed step on the CPU is still seed."""
    on_cpu = cli.config_from_args(cli.parse(["run", "--out", "x", "--preset", "seed", "--device", "cpu"]))
    assert (on_cpu.preset, on_cpu.device) == ("seed", "cpu")
    other = cli.config_from_args(cli.parse(["run", "--out", "x", "--preset", "seed",
                                            "--workload", "transformer"]))
    assert other.preset == "custom"  # a different step is not the seed step


def test_custom_settings_keep_their_label_through_the_worker_command_line():
    from profiler_core.spec.config import PRESETS

    custom = PRESETS["seed"].replace(batch=64, preset="custom")
    args = cli.parse(["run", "--out", "x", *config_to_argv(custom)])
    assert cli.config_from_args(args) == custom
    assert cli.config_from_args(cli.parse(["run", "--out", "x", "--preset", "custom"])).preset == "custom"


def test_run_device_cpu_alone_runs_the_small_cpu_step():
    """The README's "no GPU needed" example: the workload's small CPU step (the dashboard's), not
    the seed step, which takes minutes on a CPU."""
    from profiler_core.spec import fields
    from profiler_core.spec.workload_kinds import BUILT_IN

    args = cli.parse(["run", "--out", "x", "--device", "cpu", "--dtype", "bf16"])
    config = cli.config_from_args(args)
    small = cli.cpu_small_step(args, config)
    assert small == config.replace(**fields.cpu_step_values("mlp"), preset="custom")
    assert (small.batch, small.d_in, small.hidden, small.d_out, small.total_eager_iters) == \
        (64, 512, 512, 128, 200)
    assert small.dtype == "bf16"  # options that are no size are kept
    line = cli.small_step_line(config, small)
    assert "small step (N=64, 512 -> 512 x1 -> 128, 200 eager steps)" in line
    assert "--preset seed" in line and "N=640, 4096 -> 2048 x1 -> 1024" in line
    transformer = cli.parse(["run", "--out", "x", "--device", "cpu", "--workload", "transformer"])
    small = cli.cpu_small_step(transformer, cli.config_from_args(transformer))
    assert {name: getattr(small, name) for name in BUILT_IN["transformer"].cpu_sizes} == \
        BUILT_IN["transformer"].cpu_sizes


@pytest.mark.parametrize("asked", [["--preset", "seed"], ["--batch", "32"], ["--eager-iters", "5"],
                                   ["--preset", "custom"]])
def test_a_preset_or_a_size_asked_for_on_the_cpu_is_run_as_asked(asked):
    args = cli.parse(["run", "--out", "x", "--device", "cpu", *asked])
    assert cli.sizes_given(args, cli.config_from_args(args)) == [asked[0]]
    assert cli.cpu_small_step(args, cli.config_from_args(args)) is None
    on_gpu = cli.parse(["run", "--out", "x"])
    assert cli.cpu_small_step(on_gpu, cli.config_from_args(on_gpu)) is None
    own = cli.parse(["run", "--out", "x", "--device", "cpu", "--workload", "mine.step:build"])
    assert cli.cpu_small_step(own, cli.config_from_args(own)) is None


def test_run_device_cpu_end_to_end_says_it_runs_the_small_step(tmp_path, capsys):
    out = tmp_path / "cpu-try"
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "none"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("--device cpu: running a small step") and "Expected time" not in err
    saved = RunResult.load(out).config
    assert (saved.batch, saved.d_in, saved.eager_iters, saved.preset) == (64, 512, 200, "custom")
    assert (saved.profile, saved.nvml, saved.parity_steps) == (False, False, 0)


def test_a_long_cpu_run_says_how_long_it_will_take_before_it_starts(tmp_path, capsys, monkeypatch):
    from profiler_core.engine import cpu_time
    seen = []
    monkeypatch.setattr(cpu_time, "measure", lambda config: seen.append(config) or
                        cpu_time.CpuEstimate(0.95, 3, 213, False))
    out = tmp_path / "full"
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "none", *TINY]) == 0
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("Expected time on this CPU: about 3.4 min (0.95 s per "
                                          "training step, timed over 3 steps, x 213 steps)")
    assert seen[0].batch == 8 and (out / "summary.json").is_file()


def test_the_cpu_estimate_times_the_runs_own_step_and_leaves_the_rngs_alone():
    from profiler_core.engine import cpu_time
    from profiler_core.engine.pipeline import plan_units

    config = preset("seed", device="cpu", batch=8, d_in=16, hidden=32, d_out=4, replays=20)
    before = torch.random.get_rng_state()
    estimate = cpu_time.measure(config)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert estimate.steps == plan_units(config) == 3 + 20
    assert 1 <= estimate.timed_steps <= cpu_time.MAX_TIMED_STEPS and estimate.step_s > 0
    assert estimate.total_s == pytest.approx(estimate.step_s * 23 + cpu_time.OVERHEAD_S)
    assert cpu_time.measure(config.replace(workload="mine.step:build")) is None
    assert [cpu_time.duration(s) for s in (45, 190, 7200)] == ["45 s", "3.2 min", "2.0 h"]


def test_run_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("batch size N (default: 640)", "(default: 0.2 0.1)", "precision (default: fp32)",
                  "timed graph replays (default: 200)", "(default: bar)", "(default: 20)",
                  "exit code 124; 0 for no limit (default: 900)"):
        assert shown in text


def test_the_progress_bar_shows_an_eta():
    assert cli.eta_text(10.0, 0.25) == "ETA   30s"
    assert cli.eta_text(1.0, 0.01).strip() == "" and cli.eta_text(5.0, 1.0).strip() == ""


def test_device_cpu_end_to_end(tmp_path, capsys):
    out = tmp_path / "runs" / "cpu"
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "none", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "only the eager half ran" in printed and f"Wrote {out}" in printed
    for file_name, _ in schema.TABLE_FILES.values():
        assert (out / file_name).is_file()
    result = RunResult.load(out)
    latency = result.table("latency")
    # 4 steady-state blocks of 5 steps, each keeping all but its first step
    assert set(latency["mode"]) == {"eager"} and set(latency["method"]) == {"steady"}
    assert len(latency) == 16
    assert latency["wall_ms"].gt(0).all() and latency["gpu_ms"].isna().all()
    assert sorted(latency["trial"].unique()) == [0, 1, 2, 3]
    assert sorted(latency["iteration"]) == [i for i in range(20) if i % 5]
    counters = result.table("counters").set_index("phase")
    assert counters.loc["after_warmup", "observed"] == 3  # seed preset: 3 counted warm-up steps
    assert counters.loc["eager_after_timed", "observed"] == 20
    assert counters["match"].all()
    stats = result.table("stats")
    assert set(stats["method"]) == {"steady_trial", "steady_wall", "host_issue"}
    assert result.headline["timing_method"] == "steady_trial"
    trial_means = (latency["wall_ms"] / latency["steps"]).groupby(latency["trial"]).mean()
    assert result.pair.eager_ms == pytest.approx(trial_means.median())
    assert result.pair.eager_ms > 0
    assert result.environment["device_type"] == "cpu"
    assert len(result.table("phases")) > 0


def test_progress_jsonl_stream(tmp_path):
    out = tmp_path / "run"
    completed = subprocess.run(
        [sys.executable, "-m", "profiler_core", "run", "--out", str(out), "--device", "cpu",
         "--progress", "jsonl", *TINY],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert completed.returncode == 0, completed.stderr
    records = [json.loads(line) for line in completed.stdout.splitlines()]
    progress = [r for r in records if r["event"] == "progress"]
    assert progress and progress[-1]["fraction"] == 1.0
    assert all(0.0 <= r["fraction"] <= 1.0 for r in progress)
    fractions = [r["fraction"] for r in progress]
    assert fractions == sorted(fractions)
    assert records[-1] == {"event": "done", "out": str(out)}


def test_bar_progress_draws_a_bar(tmp_path, capsys):
    assert main(["run", "--out", str(tmp_path / "r"), "--device", "cpu", *TINY]) == 0
    err = capsys.readouterr().err
    assert "[" in err and "100.0%" in err and "timed trials" in err


def test_sigterm_keeps_the_incomplete_run(tmp_path):
    """The dashboard's Cancel sends SIGTERM: the worker keeps what it measured, marked incomplete."""
    import signal
    import time

    out = tmp_path / "cancelled"
    worker = subprocess.Popen(
        [sys.executable, "-m", "profiler_core", "run", "--out", str(out), "--device", "cpu",
         "--progress", "jsonl", "--batch", "64", "--d-in", "256", "--hidden", "256", "--d-out", "64",
         "--replays", "100000", "--trials", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    for line in worker.stdout:  # wait until the timed trials have started
        if '"timed trials"' in line:
            break
    time.sleep(0.5)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 130, err
    assert "kept" in err
    loaded = RunResult.load(out)
    assert loaded.complete is False
    assert any("incomplete" in note and "timed trials" in note for note in loaded.notes)
    assert len(loaded.table("latency")) > 0  # the iterations timed before the signal are kept


def test_a_second_interrupt_waits_until_the_incomplete_run_is_kept(tmp_path):
    """Ctrl-C twice in quick succession (then SIGTERM too): the first stops the run, the others
    wait until what it measured is saved, and say so; exit 130."""
    import signal
    import time

    out = tmp_path / "twice"
    worker = subprocess.Popen(
        [sys.executable, "-m", "profiler_core", "run", "--out", str(out), "--device", "cpu",
         "--progress", "jsonl", "--batch", "64", "--d-in", "256", "--hidden", "256", "--d-out", "64",
         "--replays", "100000", "--trials", "10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    for line in worker.stdout:  # wait until the timed trials have started
        if '"timed trials"' in line:
            break
    time.sleep(0.3)
    for sig in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
        worker.send_signal(sig)
        time.sleep(0.02)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 130, err
    assert "interrupted again: the run is already stopping and saves what it measured first" in err
    assert err.count("interrupted again") == 1 and "Traceback" not in err
    assert f"The incomplete run was kept in {out}" in err
    assert err.strip().splitlines()[-1] == "error: interrupted"
    assert RunResult.load(out).complete is False


def test_the_time_limit_stops_a_run_and_keeps_what_it_measured(tmp_path, capsys):
    out = tmp_path / "limited"
    started = time.monotonic()
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "jsonl", "--batch",
                 "64", "--d-in", "256", "--hidden", "256", "--d-out", "64", "--replays", "100000",
                 "--timeout", "2.5"]) == 124
    assert time.monotonic() - started < 60
    printed = capsys.readouterr()
    record = json.loads(printed.out.strip().splitlines()[-1])
    message = record.pop("message")
    assert record == {"event": "error", "kind": "TimeLimit", "field": None,
                      "hint": "pass a larger --timeout, or --timeout 0 for no limit"}
    assert message.startswith("no result within the time limit of 2.5 s (--timeout); it stopped "
                              "during ")  # the phase: tests/test_time_limits.py
    assert ERROR_KINDS["TimeLimit"] == 124
    assert f"The incomplete run was kept in {out}" in printed.err
    run = RunResult.load(out)
    assert run.complete is False and len(run.table("latency")) > 0
    assert any("incomplete: the run stopped during " in note and "no result within the time limit"
               in note for note in run.notes), run.notes


def test_the_summary_shows_the_graphs_block_of_the_breakdown(tmp_path):
    """breakdown.csv holds a block per mode; the run's text summary decomposes the graph's speedup
    (its block, mode_us shown as graph_us), not another mode's."""
    from conftest import write_synthetic_run

    run = RunResult.load(write_synthetic_run(tmp_path / "runs" / "synthetic"))
    run.headline["parity_steps"] = 5  # the fixture's parity figures lack their step count
    graph = run.table("breakdown")
    run.tables["breakdown"] = pd.concat([graph.assign(mode="compile", mode_us=987.5), graph],
                                        ignore_index=True)
    text = format_summary(run)
    section = text.split("per iteration, eager vs graph, medians of the profiled window (us)\n")[1]
    header, *rows = section.splitlines()[:6]
    assert header.split() == ["component", "eager_us", "graph_us", "saving_us", "share_of_saving_pct"]
    assert [row.split()[:3] for row in rows] == [["gpu_busy", "220.0", "225.0"],
                                                 ["gpu_idle", "980.0", "25.0"],
                                                 ["total_span", "1200.0", "250.0"],
                                                 ["cpu_launch", "700.0", "22.0"],
                                                 ["cpu_other", "500.0", "30.0"]]
    assert "987.5" not in section.split("\n\n")[0]  # compile's times are not the graph's
    assert "Under the profiler (a slower program than the timed one" in text
    why = text.split("Why, graph against eager")[1].split("\n\n")[0]  # the headline's parts first
    assert text.index("Why, graph against eager") < text.index("Under the profiler")
    assert "gpu_idle" in why and "input_copy" in why
    every = text.split("Every mode's iteration under the profiler, medians of the profiled "
                       "window")[1].splitlines()
    assert every[1].split() == ["component", "eager", "compile", "graph"]
    assert every[4].split() == ["total_span", "1200.0", "987.5", "250.0"]


LONG = "m" * 5000
BIG = "1" + "0" * 400


@pytest.mark.parametrize("argv, words", [
    (["run", "--out", "x", "--batch", BIG], "--batch: batch must be a whole number from 1 to "
                                            "1,048,576; got 10,000,000,000,"),
    (["run", "--out", "x", "--batch", "9" * 5000], "argument --batch: expected a whole number"),
    (["run", "--out", "x", "--workload", LONG + ":step"], "is longer than 256 characters"),
    (["run", "--out", "x", "--workload", LONG], "or package.module:function, got 'mmm"),
    (["run", "--out", "x", "--dtype", LONG], "(choose from 'fp32', 'fp32-ieee', 'tf32', 'bf16', 'fp16')"),
    (["run", "--out", "x", "--device", LONG], "argument --device: expected 'cpu'"),
    (["run", "--out", "x", "--modes", LONG], "argument --modes: expected modes among"),
    (["run", "--out", "x", LONG], "unrecognized arguments: mmm"),
    (["run", "--out", "x", "--" + LONG], "unrecognized arguments: --mmm"),
    ([LONG], "argument command: invalid choice: 'mmm"),
    (["sweep", "--out", "x", "--param", "batch=1", "--threshold", LONG], "expected a number"),
])
def test_an_error_echoes_a_long_value_shortened(argv, words, capsys):
    """A 400-digit number or a 5,000-character name is quoted shortened, never whole."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and words in err, err[:300]
    assert len(err) < 400 and "..." in err and "...." not in err, err[:300]


def test_serve_refuses_a_device_index_no_machine_has_in_one_line():
    """Found by the fuzz campaign: ``serve --device`` with a 401-digit index exited 1 echoing it
    whole; like ``run``, it is refused by the option parser in one short line, exit 2."""
    completed = subprocess.run([sys.executable, "-m", "profiler_core", "serve", "--device",
                                "1" + "0" * 400], input="", capture_output=True, text=True,
                               timeout=120, cwd=Path(__file__).parents[1])
    assert completed.returncode == 2
    assert len(completed.stderr) < 600 and "0 to 1023" in completed.stderr
