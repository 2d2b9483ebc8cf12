"""Data-parallel runs that fail or are stopped (issue 27, items 10 and 12), two gloo ranks on the
CPU under the tool's own torchrun: a rank that dies without a word is named with its exit code;
an error in the user's step on a rank is one line naming their file and line (exit 2, as in one
process), with no rank's traceback nor torchrun's error block before it; a run stopped by
SIGTERM, SIGINT or its time limit keeps what its ranks measured, marked incomplete. Each test
starts torchrun (seconds)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_ddp import SMALL, _left_running

from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
STEPS = "tests.ddp_steps"
USER_STEP = ["--device", "cpu", "--replays", "40", "--trials", "4", "--nproc-per-node", "2"]
TORCHRUNS_OWN = ("Traceback", "ChildFailedError", "SignalException", "=====", "Root Cause",
                 "exitcode")


def _run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler_core", "run", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _only_the_error_line(stderr: str) -> str:
    """The one ``error:`` line, last; nothing of torchrun's or a rank's traceback before it."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert errors == lines[-1:], stderr[-3000:]
    for word in TORCHRUNS_OWN:
        assert word not in stderr, stderr[-3000:]
    return errors[0]


def test_a_rank_that_dies_without_a_word_is_named_with_its_exit_code(tmp_path):
    out = tmp_path / "run"
    result = _run(*USER_STEP, "--workload", f"{STEPS}:rank_1_exits", "--out", str(out))
    assert result.returncode == 8, result.stderr[-3000:]
    error = _only_the_error_line(result.stderr)
    assert "rank 1" in error and "exit code 3" in error and "without saying why" in error, error
    assert "rank 0 failed" not in error
    assert _left_running(str(out)) == []


def test_an_error_in_the_users_step_on_a_rank_names_their_file_and_line(tmp_path):
    out = tmp_path / "run"
    result = _run(*USER_STEP, "--workload", f"{STEPS}:rank_1_raises_in_forward", "--out", str(out))
    assert result.returncode == 2, result.stderr[-3000:]
    error = _only_the_error_line(result.stderr)
    line = next(number for number, text in enumerate(
        (ROOT / "tests" / "ddp_steps.py").read_text().splitlines(), 1) if "raise ValueError" in text)
    assert error.startswith("error: rank 1 failed: ") and "ValueError: rank 1 cannot go on" in error
    assert f"tests/ddp_steps.py:{line} in _raise" in error, error


def _started_timing(process: subprocess.Popen) -> None:
    """Wait until rank 0 reports its timed trials (its progress records on stdout)."""
    assert process.stdout is not None
    for line in process.stdout:
        if '"timed trials"' in line and '"progress"' in line:
            return
    pytest.fail("the run never reached its timed trials")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_data_parallel_run_keeps_what_its_ranks_measured(stop, tmp_path):
    out = tmp_path / f"stopped-{stop.name}"
    temporary = tmp_path / "tmp"  # the run's temporary folder: torchrun's logs, the ranks' scratch
    temporary.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "profiler_core", "run", *SMALL,
                                "--no-profile", "--replays", "100000", "--trials", "20",
                                "--nproc-per-node", "2", "--progress", "jsonl", "--out", str(out)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(temporary)})
    _started_timing(process)
    time.sleep(3.0)  # some blocks timed
    process.send_signal(stop)
    stdout, stderr = process.communicate(timeout=90)
    assert process.returncode == 130, stderr[-3000:]
    assert _only_the_error_line(stderr) == "error: interrupted"
    assert f"The incomplete run was kept in {out}" in stderr
    assert json.loads(stdout.strip().splitlines()[-1])["kind"] == "Interrupted"
    run = RunResult.load(out)
    assert run.complete is False and run.headline["world_size"] == 2
    latency = run.table("rank_latency")
    assert set(latency["rank"]) == {0, 1} and len(latency) > 0
    assert any(re.match(r"incomplete: the run stopped during timed trials", note)
               for note in run.notes), run.notes
    time.sleep(0.5)
    assert _left_running(out.name) == []
    # torchrun's own log folder is not left behind either; torch's compile cache
    # (torchinductor_<user>, made at `import torch._dynamo` unless TORCHINDUCTOR_CACHE_DIR is set,
    # as an earlier test in the same pytest process sets it) is torch's, kept for later runs
    assert [p for p in os.listdir(temporary) if not p.startswith("torchinductor_")] == []


def test_a_data_parallel_run_at_its_time_limit_keeps_what_it_measured(tmp_path):
    out = tmp_path / "limited"
    result = _run(*SMALL, "--no-profile", "--replays", "100000", "--trials", "20",
                  "--nproc-per-node", "2", "--timeout", "25", "--out", str(out), timeout=150)
    assert result.returncode == 124, result.stderr[-3000:]
    error = _only_the_error_line(result.stderr)
    assert error.startswith("error: no result within the time limit of 25 s") and "rank" in error
    run = RunResult.load(out)
    assert run.complete is False and len(run.table("rank_latency")) > 0


GLOO_PEER_LOST = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                  "[127.0.0.1]:1965: Connection reset by peer. This is typically caused by a remote "
                  "worker hanging or bugs in the application.")


def test_a_rank_whose_collective_lost_its_peer_is_not_what_failed():
    """Rank 1 killed outright (SIGKILL, the OOM killer): rank 0's all-reduce then fails with
    gloo's 'Connection reset by peer', which names rank 1, not rank 0."""
    from profiler_core.orchestration.torchrun import RankWatch
    from profiler_core.spec.distributed import ERROR_MARK, FAILURE_MARK, is_peer_lost

    assert is_peer_lost(GLOO_PEER_LOST) and not is_peer_lost("ValueError: rank 1 cannot go on")
    watch = RankWatch()
    watch.hear(f"{ERROR_MARK} " + json.dumps({"rank": 0, "kind": "RankError",
                                               "message": GLOO_PEER_LOST, "peer_lost": True}))
    watch.hear(f"{FAILURE_MARK} " + json.dumps({"rank": 0, "exit_codes": {"0": 8, "1": -9}}))
    assert str(watch.failure(1)).startswith("rank 1 of the data-parallel run ended (exit code -9) "
                                            "without saying why; then rank(s) 0 stopped")
