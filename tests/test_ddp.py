"""Data-parallel runs on the CPU: two gloo ranks under torchrun (issue 21). The launcher, the run
folder's per-rank tables, the aggregation, a straggler injected with a sleep, and a failed, hung
or cancelled run leaving no process behind; rank 0 alone reports progress, line by line through
torchrun, as the dashboard's run follows it. Each test starting torchrun takes a few seconds."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.analysis import ranks
from profiler_core.cli import parser as cli
from profiler_core.orchestration import parent, torchrun_main
from profiler_core.orchestration.torchrun import (
    RankWatch,
    run_torchrun,
    torchrun_argv,
)
from profiler_core.spec import schema
from profiler_core.spec.config import RunConfig
from profiler_core.spec.distributed import (
    ERROR_MARK,
    FAILURE_MARK,
    PHASE_MARK,
    RANK_PHASES,
    RankEnv,
    RankFailure,
    RankPhase,
    TorchrunFailure,
    rank_env,
    rank_line,
    read_marks,
)
from profiler_core.spec.errors import CaptureError, ConfigError, RankError, TimeLimitReached
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parents[1]
FAULTS = str(ROOT / "tests" / "ddp_faults.py")
SMALL = ["--device", "cpu", "--batch", "32", "--d-in", "64", "--hidden", "64", "--d-out", "16",
         "--replays", "40", "--trials", "4", "--profile", "--profile-iters", "4"]


def _left_running(token: str) -> list[str]:
    """Command lines of live processes that mention ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                text = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if token in text:
                found.append(text)
    return found


def _cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "profiler_core", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------------------- pure pieces


def test_rank_env_reads_only_torchruns_three_variables():
    assert rank_env({"RANK": "1", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}) == RankEnv(1, 0, 2)
    assert rank_env({"RANK": "1", "WORLD_SIZE": "2"}) is None
    assert rank_env({"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}) is None
    assert rank_env({"RANK": "x", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}) is None


def test_marks_are_read_wherever_they_start_on_a_line():
    assert read_marks(f'[rank1]: {PHASE_MARK} {{"rank": 1, "phase": "checks"}}\n') == [
        RankPhase(1, "checks")]
    # two ranks' lines run together on the shared pipe
    assert read_marks(f'{PHASE_MARK} {{"rank": 1, "phase": "a"}}{ERROR_MARK} {{"rank": 0}}\n') == [
        RankPhase(1, "a"), RankFailure(0)]
    assert read_marks(f'{ERROR_MARK} {{"rank": "1"}}') == []  # a rank is a number
    assert read_marks("an ordinary line") == []


@pytest.mark.parametrize("record", [
    RankPhase(3, "timed trials", 1764000000.25),
    RankFailure(1, "ConfigError", "batch 0 is below 1", "set --batch", "batch", False),
    RankFailure(0, "RankError", "Connection reset by peer", peer_lost=True),
    TorchrunFailure(1, {0: 130, 1: -9}),
])
def test_every_rank_record_reads_back_as_it_was_written(record):
    line = rank_line(record)
    assert "\n" not in line and read_marks(f"[rank0]: {line}\n") == [record]


def test_a_rank_records_field_of_the_wrong_type_is_left_unsaid():
    assert read_marks(f'{ERROR_MARK} {{"rank": 2, "kind": 7, "field": 1, '
                      f'"peer_lost": "yes"}}') == [RankFailure(2)]
    assert read_marks(f'{PHASE_MARK} {{"rank": 0, "phase": null, "t": true}}') == [RankPhase(0, "")]
    assert read_marks(f'{FAILURE_MARK} {{"rank": 0, "exit_codes": {{"0": 130, "x": 1, "1": "4"}}}}'
                      ) == [TorchrunFailure(0, {0: 130})]
    assert read_marks(f'{FAILURE_MARK} {{"rank": 0, "exit_codes": []}}') == [TorchrunFailure(0, {})]


def test_no_rank_line_is_made_outside_spec_distributed():
    """The marks are written and read only by ``announce`` and ``read_marks``: no other module of
    the package or the dashboard names a mark (to write a line by hand, or to pick one apart)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    marks = {"PHASE_MARK", "ERROR_MARK", "FAILURE_MARK"}
    found = [f"{path.relative_to(root)}:{node.lineno}"
             for package in ("profiler_core", "dashboard")
             for path in sorted((root / package).rglob("*.py"))
             if path != root / "profiler_core" / "spec" / "distributed.py"
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if (isinstance(node, ast.Name) and node.id in marks)
             or (isinstance(node, ast.alias) and node.name in marks)]
    assert found == []


def test_the_watch_names_the_root_cause_and_the_rank_furthest_behind():
    watch = RankWatch()
    for line in (f'{ERROR_MARK} {{"rank": 0, "kind": "Interrupted", "message": "interrupted"}}',
                 f'{ERROR_MARK} {{"rank": 1, "kind": "CaptureError", "message": "boom", "hint": "fix"}}',
                 f'{FAILURE_MARK} {{"rank": 0, "exit_codes": {{"0": 130, "1": 4}}}}'):
        assert watch.hear(line)
    failure = watch.failure(1)
    assert str(failure).startswith("rank 1 failed: boom") and "rank(s) 0" in str(failure)
    assert isinstance(failure, CaptureError) and failure.exit_code == 4 and failure.hint == "fix"
    silent = RankWatch()  # rank 1 died without a word; rank 0, stopped by torchrun, said so
    for line in (f'{ERROR_MARK} {{"rank": 0, "kind": "Interrupted", "message": "interrupted"}}',
                 f'{FAILURE_MARK} {{"rank": 0, "exit_codes": {{"0": 130, "1": -11}}}}'):
        silent.hear(line)
    assert str(silent.failure(1)).startswith("rank 1 of the data-parallel run ended (exit code -11) "
                                             "without saying why; then rank(s) 0 stopped")
    watch.hear(f'{PHASE_MARK} {{"rank": 0, "phase": "gather"}}')
    watch.hear(f'{PHASE_MARK} {{"rank": 1, "phase": "timed trials"}}')
    assert watch.stuck_text(2).startswith("rank 1 is furthest behind")
    assert RankWatch().stuck_text(2).startswith("no rank reported")


def test_torchrun_command_uses_a_free_port_and_no_restarts():
    argv = torchrun_argv(2, ["-m", "profiler_core", "run"])
    assert argv[1:3] == ["-m", "profiler_core.orchestration.torchrun_main"]  # torchrun, quieter
    assert "localhost:0" in argv and argv[argv.index("--rdzv-backend") + 1] == "c10d"
    assert argv[argv.index("--max-restarts") + 1] == "0"


def _events(rows: list[tuple]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=["name", "cat", "ts", "dur", "tid"])
    return frame.assign(end=frame["ts"] + frame["dur"], pid="1", correlation=math.nan)


def test_exposed_and_hidden_communication_on_a_gpu_window():
    # two iterations; comm 40-80 overlapped by compute 0-60 for 20 us, then 20 us exposed
    events = _events([
        ("ProfilerStep#0", "user_annotation", 0.0, 10.0, "main"),
        ("gemm", "kernel", 0.0, 60.0, "s7"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 40.0, 40.0, "s9"),
        ("ProfilerStep#1", "user_annotation", 200.0, 10.0, "main"),
        ("gemm", "kernel", 200.0, 10.0, "s7"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", 220.0, 30.0, "s9"),
    ])
    figures, instances = ranks.window_figures(events)
    first = figures.iloc[0]
    assert (first["span_us"], first["comm_us"], first["comm_hidden_us"]) == (80.0, 40.0, 20.0)
    assert (first["comm_exposed_us"], first["busy_us"], first["host_wait_us"]) == (20.0, 80.0, 0.0)
    second = figures.iloc[1]
    assert (second["comm_exposed_us"], second["host_wait_us"], second["comm_calls"]) == (30.0, 10.0, 1)
    assert list(instances["dur_us"]) == [40.0, 30.0]


def test_arrival_waits_and_the_straggler():
    instances = {0: pd.DataFrame({"iteration": [0, 1], "ordinal": [0, 0], "dur_us": [2100.0, 2050.0]}),
                 1: pd.DataFrame({"iteration": [0, 1], "ordinal": [0, 0], "dur_us": [100.0, 60.0]})}
    waits = ranks.arrival_waits(instances)
    assert list(waits.sort_values(["rank", "iteration"])["wait_us"]) == [2000.0, 1990.0, 0.0, 0.0]
    table = pd.DataFrame(ranks.wait_summary("eager", waits)
                         + [(0, "eager", "step_median_ms", 5.0), (1, "eager", "step_median_ms", 5.0)],
                         columns=schema.RANK_COLUMNS)
    assert ranks.straggler(table, "eager") == 1
    even = table.assign(value=table["value"].where(table["metric"] != "arrival_wait_us", 10.0))
    assert ranks.straggler(even, "eager") is None  # no spread, no straggler


def test_what_sets_the_pace_is_named_from_the_slowest_ranks_window():
    def table(host_wait: float, exposed: float) -> pd.DataFrame:
        return pd.DataFrame([(0, "eager", "step_median_ms", 1.0), (1, "eager", "step_median_ms", 2.0),
                             (1, "eager", "span_us", 1000.0), (1, "eager", "host_wait_us", host_wait),
                             (1, "eager", "comm_exposed_us", exposed)], columns=schema.RANK_COLUMNS)
    assert ranks.bound_label(table(400.0, 0.0)) == ranks.LAUNCH_BOUND
    assert ranks.bound_label(table(100.0, 500.0)) == ranks.COMMUNICATION_BOUND
    assert ranks.bound_label(table(100.0, 100.0)) == ranks.GPU_BOUND
    assert ranks.bound_label(table(100.0, 100.0).iloc[:2]) == ""  # not profiled


def test_the_job_runs_at_its_slowest_ranks_pace():
    table = pd.DataFrame([(0, "eager", "step_median_ms", 4.0), (1, "eager", "step_median_ms", 5.0),
                          (0, "graph", "step_median_ms", 1.0), (1, "graph", "step_median_ms", 2.0)],
                         columns=schema.RANK_COLUMNS)
    done = ranks.with_speedups_and_straggler(table)
    value = done.set_index(["rank", "mode", "metric"])["value"]
    assert value[(0, "graph", "speedup")] == 4.0 and value[(1, "graph", "speedup")] == 2.5
    assert value[(0, "graph", "job_speedup")] == value[(1, "graph", "job_speedup")] == 2.5


def test_delays_and_combinations_are_checked():
    assert cli.read_delay("1:2.5") == (1, 2.5)
    for bad in ("1", "x:2", "-1:2", "1:-2", "1:1e9"):
        with pytest.raises(ValueError):
            cli.read_delay(bad)
    with pytest.raises(ConfigError):
        RunConfig(nproc_per_node=0)
    result = _cli("run", *SMALL, "--nproc-per-node", "2", "--repeats", "2", "--out", "/tmp/x-never")
    assert result.returncode == 2 and "--repeats" in result.stderr


# ------------------------------------------------------------------------- under torchrun


@pytest.fixture(scope="module")
def straggler_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    """One two-rank gloo run, rank 1 sleeping 2 ms before every step."""
    out = tmp_path_factory.mktemp("ddp") / "run"
    started = time.perf_counter()
    result = _cli("run", *SMALL, "--nproc-per-node", "2", "--inject-delay-ms", "1:2",
                  "--out", str(out), "--timeout", "120")
    return out, result, time.perf_counter() - started


def test_two_gloo_ranks_write_one_run_folder_with_every_rank(straggler_run):
    out, result, _ = straggler_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Data-parallel run, 2 rank(s), gloo" in result.stdout
    run = RunResult.load(out)
    assert run.headline["world_size"] == 2 and run.environment["backend"] == "gloo"
    latency = run.table("rank_latency")
    assert list(latency.columns) == schema.RANK_LATENCY_COLUMNS
    assert set(latency["rank"]) == {0, 1} and set(latency["mode"]) == {"eager"}
    table = run.table("ranks")
    assert list(table.columns) == schema.RANK_COLUMNS
    assert set(table["metric"]) <= set(ranks.RANK_METRICS)
    assert {"step_median_ms", "step_p99_ms", "host_issue_ms", "comm_us", "comm_exposed_us",
            "comm_hidden_us", "arrival_wait_us", "all_reduce_share_pct"} <= set(table["metric"])
    for rank in (0, 1):
        assert (out / f"trace_eager_rank{rank}.json").is_file()
    # the job's latency.csv is its slowest rank's
    assert len(run.table("latency")) == len(latency[latency["rank"] == run.headline["slowest_eager_rank"]])


def test_parameters_agree_across_ranks(straggler_run):
    run = RunResult.load(straggler_run[0])
    table = run.table("ranks")
    diffs = table[table["metric"] == "params_max_abs_diff_to_rank0"]["value"]
    assert len(diffs) == 2 and (diffs == 0.0).all()


def test_the_sleeping_rank_is_named_the_straggler(straggler_run):
    out, result, _ = straggler_run
    run = RunResult.load(out)
    assert run.headline["straggler_rank"] == 1.0 and "Straggler: rank 1" in result.stdout
    table = run.table("ranks").set_index(["rank", "mode", "metric"])["value"]
    assert table[(1, "eager", "straggler")] == 1.0 and table[(0, "eager", "straggler")] == 0.0
    # rank 0 waits inside the all-reduce for about the 2 ms rank 1 sleeps
    assert table[(0, "eager", "arrival_wait_us")] > 1000.0 > table[(1, "eager", "arrival_wait_us")]
    assert run.figures.get("eager", "arrival_skew_us") > 1000.0
    assert "eager_arrival_skew_us" not in run.headline  # a figure, held once in metrics.csv


def test_the_gloo_run_is_quick(straggler_run):
    assert straggler_run[2] < 60.0


def test_rank_0_alone_reports_progress_line_by_line_to_the_dashboards_run(tmp_path):
    """A data-parallel run from the page (``RunJob`` through a launcher of fresh processes, so
    ``--progress jsonl``): rank 0's records pass through torchrun as they are written (the first
    arrives before the run is saved), the bar goes through every phase, and no record comes
    twice (rank 1 prints none)."""
    from profiler_core.orchestration.gpulock import GpuLock
    from profiler_core.orchestration.launcher import Launcher
    from profiler_core.orchestration.runjob import RunJob

    out = tmp_path / "run"
    config = cli.config_from_args(cli.parse(["run", *SMALL, "--nproc-per-node", "2",
                                             "--out", str(out)]))
    job = RunJob(config, out, config.device, GpuLock("cpu"), launcher=Launcher(warm=False))
    heard: list[tuple[str, float, int, bool]] = []
    report = job.on_progress

    def hear(state) -> None:
        if state.events:  # a record of the run's (not the job's own "starting", "running")
            heard.append((state.phase, state.fraction, state.events, out.exists()))
        report(state)

    job.on_progress = hear
    assert job.start().wait(120)
    snap = job.snapshot()
    assert snap.status == "done", (snap.message, snap.stderr_tail[-2000:])
    assert RunResult.load(out).headline["world_size"] == 2
    first_phase, first_fraction, _, saved_then = heard[0]
    assert (first_phase, first_fraction, saved_then) == ("prepare", 0.0, False)
    phases = [phase for i, (phase, *_) in enumerate(heard) if i == 0 or heard[i - 1][0] != phase]
    assert phases == list(RANK_PHASES)  # the bar went through every phase, in order
    fractions = [fraction for _, fraction, _, _ in heard]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert any(0.0 < fraction < 1.0 for fraction in fractions)
    # one reporter: every progress record once (the last state is the "done" record's)
    progress = [(phase, fraction) for phase, fraction, _, _ in heard[:-1]]
    assert len(progress) == len(set(progress)) and snap.events == len(heard)


def test_a_failed_rank_is_named_and_nothing_is_left_running():
    token = uuid.uuid4().hex
    started = time.monotonic()
    with pytest.raises(RankError) as info:
        run_torchrun(2, [FAULTS, "fail", "1", token], timeout_s=60)
    assert str(info.value).startswith("rank 1 failed: RuntimeError: injected failure")
    assert time.monotonic() - started < 45
    assert _left_running(token) == []


def test_a_hung_rank_is_named_at_the_time_limit_and_nothing_is_left_running():
    token = uuid.uuid4().hex
    with pytest.raises(TimeLimitReached) as info:
        run_torchrun(2, [FAULTS, "hang", "1", token], timeout_s=8)
    assert "rank 1 is furthest behind" in str(info.value) and "'timed trials'" in str(info.value)
    assert _left_running(token) == []


def test_a_cancelled_run_leaves_no_process(tmp_path):
    out = tmp_path / f"cancelled-{uuid.uuid4().hex}"
    process = subprocess.Popen([sys.executable, "-m", "profiler_core", "run", *SMALL,
                                "--replays", "100000", "--trials", "10", "--nproc-per-node", "2",
                                "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_left_running(out.name)) < 3:
        time.sleep(0.2)  # the launcher, torchrun and its ranks are up
    time.sleep(2.0)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    time.sleep(0.5)
    assert _left_running(out.name) == []
    # stopped before its timed trials: nothing kept; during them: kept, marked incomplete
    # (tests/test_ddp_failures.py)
    assert not out.exists() or RunResult.load(out).complete is False


def test_the_rank_charts_name_the_straggler(straggler_run):
    from dashboard.charts import ranks as rank_charts

    table = RunResult.load(straggler_run[0]).table("ranks")
    assert rank_charts.straggler_of(table, "eager") == 1
    assert "straggler: rank 1" in rank_charts.percentiles(table, "eager").layout.title.text
    stacked = rank_charts.stacked_step(table, "eager")
    assert [trace.name for trace in stacked.data] == [label for _, label, _ in rank_charts.STACK_PARTS]
    assert list(rank_charts.summary_table(table).columns) == rank_charts.SUMMARY_COLUMNS
    assert len(rank_charts.step_grid(table).data) == 1


def test_a_real_rank_that_refuses_its_folder_is_named_with_its_message(tmp_path):
    """Started by a torchrun of the user's own (our launcher would refuse the folder first):
    rank 0 refuses to write into a folder that is not a run; the error names rank 0, says why,
    and keeps the refusal's exit code; rank 1, waiting for rank 0, is ended."""
    out = tmp_path / "not-a-run"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError) as info:
        run_torchrun(2, ["-m", "profiler_core", "run", *SMALL, "--out", str(out)], timeout_s=90)
    assert info.value.field == "out" and info.value.message.startswith("rank 0 failed: '")
    assert "is not a run folder of this tool" in info.value.message
    assert info.value.exit_code == 2 and (out / "keep.txt").read_text() == "mine"
    assert _left_running(str(out)) == []


def test_one_gloo_rank_is_a_run_with_no_straggler(tmp_path):
    out = tmp_path / "one"
    result = _cli("run", *SMALL, "--nproc-per-node", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    run = RunResult.load(out)
    assert run.headline["world_size"] == 1 and math.isnan(run.headline["straggler_rank"])
    assert set(run.table("rank_latency")["rank"]) == {0}


def test_a_launcher_killed_outright_leaves_no_process(tmp_path):
    """SIGKILL gives the launcher no chance to clean up: torchrun's death signal (SIGTERM)
    ends it, and it ends its ranks (usually in seconds). CI once left both ranks running: the
    two tests below reproduce each way that happened without needing a loaded machine."""
    out = tmp_path / f"killed-{uuid.uuid4().hex}"
    process = subprocess.Popen([sys.executable, "-m", "profiler_core", "run", *SMALL,
                                "--replays", "100000", "--trials", "10", "--nproc-per-node", "2",
                                "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_left_running(out.name)) < 3:
        time.sleep(0.2)
    time.sleep(2.0)
    process.kill()
    process.wait(timeout=10)
    # torchrun gives a rank stuck in C code (a collective) 30 s after its SIGTERM, then SIGKILL
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _left_running(out.name):
        time.sleep(0.5)
    assert _left_running(out.name) == []


def _torchrun_with_a_deaf_rank(token: str) -> subprocess.Popen:
    """The tool's torchrun over two stand-in ranks, rank 1 ignoring SIGTERM (as a rank stuck in C
    code does), returned once rank 1 has said it is in its timed trials."""
    torchrun = subprocess.Popen(torchrun_argv(2, [FAULTS, "deaf", "1", token]), cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    watch = RankWatch()
    deadline = time.monotonic() + 60
    for line in torchrun.stderr:
        watch.hear(line)
        if watch.phases.get(1, ("",))[0] == "timed trials" or time.monotonic() > deadline:
            break
    assert watch.phases.get(1, ("",))[0] == "timed trials", "rank 1 never got to its trials"
    threading.Thread(target=torchrun.stderr.read, daemon=True).start()  # keep the pipe drained
    return torchrun


def test_torchrun_sent_its_death_signal_again_and_again_ends_its_ranks_first():
    """The CI failure: a launcher with several threads, SIGKILLed, sends torchrun its death signal
    once per thread. A second one cuts torchrun's shutdown short (SIGTERM to each rank, SIGKILL
    30 s later) and its agent starts it over from a ``finally``; a third cuts that short too, and
    a rank that did not heed SIGTERM was left running for good. torchrun now ends what its
    shutdown left before it exits."""
    token = uuid.uuid4().hex
    torchrun = _torchrun_with_a_deaf_rank(token)
    try:
        for _ in range(3):
            torchrun.send_signal(signal.SIGTERM)
            time.sleep(1.0)  # torchrun's shutdown is waiting for the deaf rank
        assert torchrun.wait(timeout=torchrun_main.RANK_GRACE_S + 20) == 128 + signal.SIGTERM
        assert _left_running(token) == []  # at once: torchrun ended only after its ranks
    finally:
        if torchrun.poll() is None:
            os.killpg(torchrun.pid, signal.SIGKILL)


def test_ranks_end_when_torchrun_is_killed_outright():
    """torchrun SIGKILLed has no shutdown at all: each rank watches it (orchestration.parent) and
    ends, a deaf one by SIGKILL once the grace period has passed."""
    token = uuid.uuid4().hex
    torchrun = _torchrun_with_a_deaf_rank(token)
    os.killpg(torchrun.pid, signal.SIGKILL)  # torchrun's session: its ranks are in their own
    torchrun.wait(timeout=10)
    deadline = time.monotonic() + parent.GRACE_S + 20
    while time.monotonic() < deadline and _left_running(token):
        time.sleep(0.5)
    assert _left_running(token) == []


def test_a_cpu_run_says_nothing_of_graphs_it_never_captured(straggler_run):
    """Issue 28: a CPU run printed "0 graph(s) released before destroy_process_group"."""
    out, result, _ = straggler_run
    assert "graph(s) released" not in result.stdout
    assert not [n for n in RunResult.load(out).notes if "graph(s) released" in n]
