"""Your own whole step on a GPU: torchvision's ResNet-50 with the parity verdict, a whole step
with bf16 autocast and clipping captured and timed, a GradScaler named at capture and run from
after_step, and every mode over a whole step. Figures are printed for the session's notes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from profiler_core.cli.main import main
from profiler_core.storage.results import RunResult

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="needs a CUDA GPU")]
RESNET = "profiler_core.examples.resnet50_step:build"
ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--replays", "60", "--progress", "none", "--no-nvml"]


def _run(tmp_path, *argv: str) -> RunResult:
    out = tmp_path / "run"
    assert main(["run", *argv, "--out", str(out), *QUICK]) == 0
    return RunResult.load(out)


def test_resnet50_whole_step_parity_verdict_and_flags(tmp_path):
    pytest.importorskip("torchvision")
    run = _run(tmp_path, "--workload", RESNET, "--workload-arg", "batch=1")
    head = run.headline
    print(f"\nresnet50 b1: eager {run.pair.eager_ms:.3f} ms, graph {run.pair.graph_ms:.3f} ms, "
          f"speedup {run.pair.speedup:.2f}x; parity: {head['parity_verdict']}")
    assert run.complete and head["counters_match"] is True
    assert isinstance(head["parity_verdict"], str) and head["parity_noise_abs_diff"] >= 0
    assert ("matches eager as closely" in head["parity_verdict"]) == head["parity_matches"]
    flags = run.environment["numerics"]
    assert flags["cudnn_allow_tf32"] is True  # PyTorch's default, left as it was
    assert any(note.startswith("parity: graph ") for note in run.notes)


def test_a_whole_step_with_bf16_autocast_and_clipping_is_captured_and_timed(tmp_path):
    pytest.importorskip("torchvision")
    run = _run(tmp_path, "--workload", RESNET, "--workload-arg", "batch=8",
               "--workload-arg", "bf16=on", "--workload-arg", "clip=1.0")
    print(f"\nresnet50 b8 bf16+clip: eager {run.pair.eager_ms:.3f} ms, graph "
          f"{run.pair.graph_ms:.3f} ms, speedup {run.pair.speedup:.2f}x; "
          f"{run.headline.get('parity_verdict')}")
    assert run.complete and run.headline["counters_match"] is True
    assert run.pair.graph_ms > 0 and run.pair.speedup > 0


def test_a_grad_scaler_inside_the_step_is_named_at_capture(tmp_path):
    """In a process of its own: a failed capture leaves that process's CUDA random state
    unusable, so the tool refuses further runs there (and so would every later test)."""
    done = subprocess.run([sys.executable, "-m", "profiler_core", "run", "--workload",
                           "tests.own_steps:scaled_fp16", "--out", str(tmp_path / "run"), *QUICK],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 4, done.stderr
    assert "capture readiness" in done.stderr and "own_steps.py:" in done.stderr  # warned first
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")][-1]
    assert "GradScaler's step reads on the host" in error and "own_steps.py:" in error, error
    assert "after_step" in error


def test_a_grad_scaler_in_after_step_runs_outside_the_graph(tmp_path):
    run = _run(tmp_path, "--workload", "tests.own_steps:scaled_fp16",
               "--workload-arg", "outside=on")
    assert run.complete and run.headline["counters_match"] is True
    print(f"\nfp16 + GradScaler in after_step: speedup {run.pair.speedup:.2f}x")


def test_every_mode_wraps_a_whole_step_and_has_a_parity_verdict(tmp_path):
    run = _run(tmp_path, "--workload", "tests.own_steps:accumulating",
               "--modes", "graphed_callables,compile,compile_ro")
    assert run.complete
    verdicts = [note for note in run.notes if note.startswith("parity: ")]
    print("\n" + "\n".join(verdicts))
    assert {v.split()[1] for v in verdicts} == {"graph", "graphed_callables", "compile",
                                                "compile_ro"}
    for mode in ("graphed_callables", "compile", "compile_ro"):
        assert run.figures.get(mode, "parity_max_abs_diff") >= 0
