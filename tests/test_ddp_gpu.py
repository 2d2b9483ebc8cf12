"""Data-parallel runs on GPUs (issue 21): NCCL with one rank on one GPU (launch, capture order,
teardown; one rank has nothing to reduce, so no all-reduce is captured and the run says so), and
the two-GPU acceptance, skipped with fewer than two GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from profiler_core.spec.distributed import ERROR_MARK
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
# The article's launch-bound MLP, small: launches dominate the eager step.
LAUNCH_BOUND = ["--preset", "custom", "--batch", "64", "--d-in", "512", "--hidden", "512",
                "--d-out", "256", "--hidden-layers", "4", "--replays", "400", "--no-nvml"]
GEMM_BOUND = ["--preset", "custom", "--batch", "8192", "--d-in", "8192", "--hidden", "8192",
              "--d-out", "8192", "--replays", "60", "--no-nvml"]


def _run(*argv: str, timeout: float = 580) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler_core", "run", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _value(run: RunResult, rank: int, mode: str, metric: str) -> float:
    table = run.table("ranks")
    rows = table[(table["rank"] == rank) & (table["mode"] == mode) & (table["metric"] == metric)]
    return float(rows["value"].iloc[0]) if len(rows) else float("nan")


def test_one_nccl_rank_launches_captures_in_order_and_tears_down(tmp_path):
    out = tmp_path / "one-rank"
    result = _run(*LAUNCH_BOUND, "--modes", "eager,graph,graphed_callables,compile_ro",
                  "--nproc-per-node", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-4000:]
    assert ERROR_MARK not in result.stderr
    run = RunResult.load(out)
    assert run.environment["backend"] == "nccl" and run.headline["world_size"] == 1
    notes = " ".join(run.notes)
    assert "all-reduce not captured (one rank: nothing to reduce)" in notes
    order = ["DDP built in a side-stream context", "eager DDP iterations on the side stream",
             "barrier and synchronize before capture", "capture of", "synchronize and barrier "
             "after capture", "graph(s) released before destroy_process_group"]
    positions = [notes.find(step) for step in order]
    assert -1 not in positions and positions == sorted(positions), notes
    assert "11 eager DDP iterations on the side stream" in notes  # DDP's 10 logged ones, then one
    assert _value(run, 0, "graph", "parity_max_abs_diff") < 1e-3
    assert _value(run, 0, "graph", "step_median_ms") < _value(run, 0, "eager", "step_median_ms")
    assert (out / "trace_graph_rank0.json").is_file() or (out / "trace_graph_rank0.json.gz").is_file()


needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")


@needs_two
def test_two_gpus_capture_the_all_reduce_and_agree_bit_for_bit(tmp_path):
    """Acceptance (a), (b), (d): both ranks exit 0, the folder opens, every replay holds an
    all-reduce kernel, parameters bit-identical across ranks after the timed steps (at least
    100), and the launch-bound MLP gains with a lower p99."""
    out = tmp_path / "two"
    result = _run(*LAUNCH_BOUND, "--nproc-per-node", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr[-4000:]
    run = RunResult.load(out)
    assert run.headline["world_size"] == 2
    for rank in (0, 1):
        assert _value(run, rank, "graph", "all_reduce_captured") == 1.0
        assert _value(run, rank, "graph", "graph_all_reduce_nodes") > 0
        for mode in ("eager", "graph"):
            assert _value(run, rank, mode, "params_max_abs_diff_to_rank0") == 0.0
        assert _value(run, rank, "graph", "speedup") > 1.0
        assert _value(run, rank, "graph", "step_p99_ms") < _value(run, rank, "eager", "step_p99_ms")
    assert run.pair.speedup > 1.0 and run.headline["eager_bound"] == "launch-bound"


@needs_two
def test_two_gpus_large_gemm_is_about_one(tmp_path):
    """Acceptance (d): a GPU-bound step gains about nothing, and is labelled so."""
    out = tmp_path / "gemm"
    result = _run(*GEMM_BOUND, "--nproc-per-node", "2", "--out", str(out))
    assert result.returncode == 0, result.stderr[-4000:]
    run = RunResult.load(out)
    headline = run.headline
    assert 0.9 < run.pair.speedup < 1.15
    assert headline["eager_bound"] in ("GPU-bound", "communication-bound")


@needs_two
def test_two_gpus_a_sleeping_rank_is_the_straggler(tmp_path):
    """Acceptance (e): 2 ms slept on rank 1 makes it the straggler, and rank 0's exposed
    all-reduce wait rises by about 2 ms."""
    plain, late = tmp_path / "plain", tmp_path / "late"
    for out, extra in ((plain, []), (late, ["--inject-delay-ms", "1:2"])):
        result = _run(*LAUNCH_BOUND, "--nproc-per-node", "2", *extra, "--out", str(out))
        assert result.returncode == 0, result.stderr[-4000:]
    before, after = RunResult.load(plain), RunResult.load(late)
    assert after.headline["straggler_rank"] == 1.0
    rise_us = (_value(after, 0, "eager", "comm_exposed_us")
               - _value(before, 0, "eager", "comm_exposed_us"))
    assert 1500.0 < rise_us < 2600.0, rise_us
