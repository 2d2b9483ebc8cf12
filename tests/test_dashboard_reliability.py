"""The dashboard side of reliability and safety (issue 5), on the CPU.

Worker faults (killed, segfault, sticky CUDA error, hang past the user's time limit) are shown in
plain words and the app keeps serving with the device lock released; interrupted runs are kept,
listed, opened and marked incomplete on every view; malformed run files and uploads give a clear
error and never crash nor execute anything; uploads are cleaned up; two sessions pressing Run at
once on one device run one after the other with the real worker; the server binds to localhost;
nothing typed in the browser reaches a shell or escapes the allowed folders.
"""

from __future__ import annotations

import ast
import gc
import io
import json
import os
import pickle
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import tomllib
from conftest import process_alive, slow_release_lock, wait_for, write_synthetic_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from streamlit.testing.v1 import AppTest

from dashboard import (
    analysis,
    kernel_tables,
    percentiles,
    run_facts,
    rundata,
    runpanel,
    state,
    uploads,
    worker,
)
from dashboard.charts import ranks as rank_charts
from dashboard.charts import shapes as shape_charts
from dashboard.charts.attribution import (
    launch_count_bars,
    profiled_waterfall,
    profiled_waterfall_steps,
    speedup_waterfall,
    split_bars,
    unknown_components,
)
from dashboard.charts.counters import counter_bars
from dashboard.charts.gpu import nvml_timeseries
from dashboard.charts.kernels import kernel_top_bar
from dashboard.charts.timing import (
    latency_ecdf,
    latency_histogram,
    latency_series,
    median_bars,
    modes_speedup_bars,
    repeats_chart,
    timing_methods_bars,
)
from dashboard.worker import ERROR_TITLES
from profiler_core.orchestration import child, launcher, repeats
from profiler_core.orchestration.command import run_argv
from profiler_core.orchestration.gpulock import GpuLock
from profiler_core.orchestration.launcher import KIND_OF_EXIT
from profiler_core.orchestration.runjob import RunJob, RunSnapshot
from profiler_core.spec.config import PRESETS
from profiler_core.spec.errors import ERROR_KINDS, REFUSED_KINDS, ProfilerError, RunFormatError
from profiler_core.spec.schema import BREAKDOWN_COMPONENTS, TABLE_FILES
from profiler_core.storage import runfolder
from profiler_core.storage.results import RunResult, coerce_table
from profiler_core.timing import stability

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
pytestmark = pytest.mark.usefixtures("fresh_app_state")
# A far-off limit for what a test waits on: a condition that holds in seconds on any machine, and
# only stops a broken test from hanging. No test depends on how fast the machine is.
SAFETY_NET_S = 600
PAGES = ["views/overview.py", "views/counters.py", "views/latency.py", "views/launch_split.py",
         "views/gpu.py", "views/kernels.py", "views/ranks.py"]


@pytest.fixture(scope="module")
def source_run(tmp_path_factory) -> Path:
    """A complete synthetic run outside any runs folder (what the fake worker copies)."""
    return write_synthetic_run(tmp_path_factory.mktemp("source") / "synthetic-seed")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """A complete synthetic run with few rows, for the property test."""
    return write_synthetic_run(tmp_path_factory.mktemp("small") / "run", per_mode=20, trials=2)


def _app(runs_dir: Path, run: bool = True) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    return at.run() if run else at


def _texts(elements) -> str:
    """What the elements say: ui.escape_md's backslashes and word joiners removed."""
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


def _everything(at: AppTest) -> str:
    return "\n".join(_texts(getattr(at, kind)) for kind in ("error", "warning", "info", "success"))


def _lock_is_free(device: str = "cpu") -> bool:
    lock = state.lock_registry().lock(device).state()
    return lock.holder is None and not lock.waiting


@pytest.fixture
def fake_runs(monkeypatch, fake_worker, source_run):
    """The Run button starts the fake worker in ``modes["mode"]`` (extra argv in ``"extra"``)."""
    modes = {"mode": "done", "extra": None}

    class FakeRuns(launcher.Launcher):  # the server's launcher, running the fake worker
        def start(self, config, out_dir, *, overwrite=False, **options):
            return self.start_command(fake_worker(modes["mode"], out_dir,
                                                  modes["extra"] or source_run), out_dir, **options)

    monkeypatch.setattr(runpanel, "run_launcher", lambda: FakeRuns(warm=False))
    return modes


def _press_run_and_wait(at: AppTest, timeout: float = 300) -> RunSnapshot:
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    assert job.wait(timeout), job.snapshot()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return job.snapshot()


# ----------------------------------------------------------------------------- worker faults


def test_every_error_kind_of_the_schema_has_plain_words():
    assert set(ERROR_TITLES) == set(ERROR_KINDS)
    assert set(REFUSED_KINDS) <= set(ERROR_KINDS)
    assert KIND_OF_EXIT[6] == "CudaFaultError" and KIND_OF_EXIT[5] == "GpuMemoryError"
    assert KIND_OF_EXIT[4] == "CaptureError" and KIND_OF_EXIT[2] in REFUSED_KINDS
    assert set(KIND_OF_EXIT) == set(ERROR_KINDS.values())


FAULTS = {
    # mode: (status, phrases the page shows, whether a partial run is kept and opened)
    "kill": ("crashed", ["failed: the worker was killed by SIGKILL.",
                         "out-of-memory killer", "device lock was released",
                         "**What to change:** make the run smaller"], False),
    "segv": ("crashed", ["failed: the worker was killed by SIGSEGV.", "segmentation fault",
                         "device lock was released"], False),
    "crash": ("crashed", ["failed: the worker crashed (exit code 1).", "device lock was released"],
              False),
    "cudafault": ("error", ["**The GPU reported a fault: run ",
                            "CUDA error: an illegal memory access was encountered (during timed "
                            "trials). The fault ended the worker process only; the server and the "
                            "GPU lock are fine, and the next run starts in a fresh process.",
                            "**What to change:** the GPU context of that process is unusable: run "
                            "again (a new worker process)."], True),
    "silent6": ("error", ["**The GPU reported a fault: run ", "CUDA error: unspecified launch "
                          "failure."], False),
    "capture": ("error", ["**The training step could not be captured into a CUDA graph: run ",
                          "the step calls .item(), a host sync, inside the captured region.",
                          "**What to change:** keep .item() and .cpu() out of the training step."],
                False),
    "oom": ("error", ["**Not enough GPU memory for this run: run ",
                      "**What to change:** shrink the batch."], True),
}


@pytest.mark.parametrize("mode", list(FAULTS))
def test_a_worker_fault_is_shown_in_plain_words_and_the_app_keeps_serving(fake_runs, tmp_path,
                                                                          mode):
    status, phrases, kept = FAULTS[mode]
    fake_runs["mode"] = mode
    at = _app(tmp_path / "runs")
    snap = _press_run_and_wait(at)
    assert snap.status == status, snap
    shown = _everything(at)
    for phrase in phrases:
        assert phrase in shown, (phrase, shown)
    assert _lock_is_free()
    assert not at.sidebar.button(key="run_button").disabled
    log_shown = "What the worker printed last" in [e.label for e in at.expander]
    assert log_shown == (mode in ("crash", "cudafault", "silent6"))  # those printed to stderr
    if log_shown:
        assert "CUDA error" in _texts(at.code)
    if kept:  # what it measured is kept, marked incomplete, open, and says where it stopped
        assert "kept, marked incomplete, and is open" in _texts(at.info)
        assert at.session_state[state.OPEN_RUN] == str(Path(snap.out_dir).resolve())
        assert "**Incomplete run:** it stopped during" in _texts(at.warning)
    else:
        assert "kept, marked incomplete" not in _texts(at.info)
    # The server keeps serving: the next run in the same session works.
    fake_runs["mode"] = "done"
    snap = _press_run_and_wait(at)
    assert snap.status == "done" and "finished and is open" in _texts(at.success)
    assert _lock_is_free()


def test_a_hung_worker_is_stopped_after_the_time_limit_set_in_the_sidebar(fake_runs, tmp_path):
    fake_runs["mode"] = "sleep"
    runs = tmp_path / "runs"
    at = _app(runs)
    at.sidebar.number_input(key="cfg_timeout_s").set_value(1).run()
    started = time.time()
    snap = _press_run_and_wait(at, timeout=SAFETY_NET_S)
    # stopped by its 1-s limit: far sooner than the 120 s the fake worker would sleep
    assert snap.status == "timeout" and time.time() - started < 60
    shown = _texts(at.warning)
    assert f"Run {snap.run_name} was stopped after 1 s." in shown
    assert "the limit set under 'Stop a run after (s)' in the sidebar" in shown
    assert "Raise 'Stop a run after (s)' (0: no limit)" in shown
    assert _lock_is_free()
    pids = [int(p) for p in Path(snap.out_dir + ".pids").read_text().split()]
    assert wait_for(lambda: not any(process_alive(pid) for pid in pids))  # the worker and its child
    fake_runs["mode"] = "done"
    assert _press_run_and_wait(at).status == "done"


def test_a_worker_that_ignores_the_stop_request_is_killed_and_that_is_said(fake_worker, tmp_path):
    out = tmp_path / "out"
    lock = GpuLock("cpu")
    job = RunJob(fake_worker("sleep", out, "ignore-term"), out, "cpu", lock, timeout_s=0.5,
                 grace_s=0.3).start()
    assert job.wait(10)
    snap = job.snapshot()
    assert snap.status == "timeout" and snap.killed and snap.returncode == -signal.SIGKILL
    outcome = worker.describe_outcome(snap)
    assert "it did not stop when asked, so it was killed" in outcome.detail
    assert lock.state().holder is None
    pids = [int(p) for p in (tmp_path / "out.pids").read_text().split()]
    assert wait_for(lambda: not any(process_alive(pid) for pid in pids))


def test_children_left_behind_by_a_dead_worker_are_killed_and_the_lock_released(fake_worker,
                                                                                tmp_path):
    """A child holding the worker's stdout would keep the job 'running' (and the GPU locked)."""
    out = tmp_path / "out"
    lock = GpuLock("cuda:0")
    job = RunJob(fake_worker("orphan", out), out, "cuda:0", lock).start()
    assert job.wait(10), "the job hung on the pipe its worker's child kept open"
    snap = job.snapshot()
    assert snap.status == "crashed" and "SIGSEGV" in snap.message
    assert lock.state().holder is None and lock.history()[-1].released_at is not None
    child = int((tmp_path / "out.pids").read_text().split()[1])
    assert wait_for(lambda: not process_alive(child))


def test_a_finished_job_has_already_released_the_lock(fake_worker, tmp_path):
    """Whoever sees a job finished also sees the device free (no window where both hold)."""
    lock = slow_release_lock("cpu")
    job = RunJob(fake_worker("crash", tmp_path / "o"), tmp_path / "o", "cpu", lock).start()
    seen = []
    while not job.wait(0):
        if not job.snapshot().active:
            seen.append(lock.state().holder)
    assert job.snapshot().status == "crashed"
    assert all(holder is None for holder in seen), "finished while still holding the lock"


def test_dashboard_side_failures_release_the_lock(tmp_path):
    lock = GpuLock("cpu")
    job = RunJob([str(tmp_path / "no-such-python"), "-m", "profiler_core"], tmp_path / "o", "cpu",
                 lock).start()
    assert job.wait(10)
    assert job.snapshot().status == "crashed" and "could not start" in job.snapshot().message
    (tmp_path / "a-file").write_text("x")
    job = RunJob([sys.executable, "-c", "pass"], tmp_path / "a-file" / "run", "cpu", lock).start()
    assert job.wait(10)
    snap = job.snapshot()
    assert snap.status == "crashed" and "cannot be created" in snap.message
    assert "choose another runs folder" in snap.message
    assert lock.state().holder is None and not lock.state().waiting


def test_a_bug_in_the_dashboard_while_a_worker_runs_kills_it_before_freeing_the_device(
        fake_worker, tmp_path):
    out = tmp_path / "out"
    lock = GpuLock("cpu")
    job = RunJob(fake_worker("sleep", out, "ignore-term"), out, "cpu", lock)  # SIGTERM is not enough
    pids_file = tmp_path / "out.pids"

    def broken(line):  # fails on the first line, once the worker and its child are both up
        wait_for(lambda: pids_file.exists() and len(pids_file.read_text().split()) == 2)
        raise RuntimeError("a bug while reading the worker's progress")

    job._on_line = broken
    job.start()
    assert job.wait(15)
    snap = job.snapshot()
    assert snap.status == "crashed" and "could not run the worker" in snap.message
    assert lock.state().holder is None and not lock.state().waiting
    pids = [int(p) for p in pids_file.read_text().split()]
    assert not any(process_alive(pid) for pid in pids[:1])  # the worker was dead before the lock was free
    assert wait_for(lambda: not any(process_alive(pid) for pid in pids))


def test_workers_still_running_are_stopped_when_the_server_exits(fake_worker, tmp_path):
    out = tmp_path / "out"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from profiler_core.orchestration.gpulock import GpuLock
        from profiler_core.orchestration.runjob import RunJob
        job = RunJob({fake_worker("sleep", out)!r}, Path({str(out)!r}), "cpu", GpuLock("cpu")).start()
        pids = Path({str(out) + ".pids"!r})
        while not (pids.exists() and len(pids.read_text().split()) == 2):
            time.sleep(0.02)
        print("started", flush=True)
    """)  # then the interpreter exits with the worker still running: atexit must stop it
    started = time.time()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0 and "started" in done.stdout, done.stderr
    assert time.time() - started < 15
    pids = [int(p) for p in (tmp_path / "out.pids").read_text().split()]
    assert wait_for(lambda: not any(process_alive(pid) for pid in pids), timeout=5)


# ----------------------------------------------------------------------------- incomplete runs


def _tiny_config(session: AppTest, **values) -> None:
    """The sidebar set to a tiny CPU run (batch 8, 16 -> 32 -> 4, 20 eager steps; on the CPU the
    profiler, NVML and parity are off and the replays follow the eager steps)."""
    session.sidebar.selectbox(key="cfg_device").select("cpu").run()
    tiny = {"batch": 8, "d_in": 16, "hidden": 32, "d_out": 4, "eager_iters": 20, "trials": 4,
            **values}
    for name, value in tiny.items():
        session.sidebar.number_input(key=f"cfg_{name}").set_value(value)
    session.run()
    assert not session.sidebar.error, _texts(session.sidebar.error)
    assert session.sidebar.toggle(key="cfg_profile").value is False


def test_a_cancelled_real_cpu_run_is_kept_listed_opened_and_marked_on_every_view(tmp_path):
    """The real worker: Cancel sends SIGTERM, the worker keeps what it measured (complete=false).

    Not timed: the test waits until the worker reports its first finished timed blocks (the
    progress message "trial N/1000"), however long that takes on a loaded machine, and the run is
    200 times longer than that (1,000,000 eager steps; the first report comes after 0.5% of
    them), so it is still running when Cancel arrives, on a fast machine too."""
    runs = tmp_path / "runs"
    at = _app(runs)
    _tiny_config(at, eager_iters=1_000_000, trials=1_000)
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]

    def timed_blocks_done() -> bool:
        snap = job.snapshot()
        return snap.phase == "timed trials" and snap.message.startswith("trial ") or not snap.active

    assert wait_for(timed_blocks_done, timeout=SAFETY_NET_S), job.snapshot()
    assert job.snapshot().active, (job.snapshot(), job.snapshot().stderr_tail)
    at.run()
    at.button(key="cancel_run").click().run()
    assert job.wait(SAFETY_NET_S)
    at.run()
    snap = job.snapshot()
    assert snap.status == "cancelled" and snap.returncode == 130, (snap, snap.stderr_tail)
    assert f"Run {snap.run_name} was cancelled." in _texts(at.warning)
    assert "kept, marked incomplete, and is open" in _texts(at.info)
    out = Path(snap.out_dir)
    assert at.session_state[state.OPEN_RUN] == str(out.resolve())
    assert _lock_is_free()
    listed = rundata.list_runs(runs)
    assert list(listed["name"]) == [out.name] and not listed["complete"][0]
    assert listed["problem"][0] == ""
    selector = at.sidebar.selectbox(key=state.OPEN_RUN)
    assert "incomplete" in selector.format_func(selector.value)
    run = RunResult.load(out)
    assert not run.complete and 0 < len(run.table("latency")) < 1_000_000
    where = ("it stopped during timed trials: interrupted (Ctrl-C, or SIGTERM: the dashboard's "
             "Cancel or its time limit)")
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert f"**Incomplete run:** {where}." in _texts(at.warning), page
    at.switch_page("views/latency.py").run()
    assert "No timing statistics in this run" in _texts(at.info)  # stats.csv is empty
    at.switch_page("views/runs.py").run()
    assert "1 run(s) are incomplete" in _texts(at.caption)
    assert not at.exception


def _sparse_run(path: Path, complete: bool = False, notes: list[str] | None = None,
                headline: dict | None = None, tables: dict | None = None) -> Path:
    """A run saved by the writer; ``headline`` is then written into its summary.json by hand (a
    hand-edited file: the writer refuses facts nothing declares, the readers must not break)."""
    result = RunResult(config=PRESETS["seed"].replace(device="cpu"), environment={},
                       headline={}, tables=tables or {}, notes=notes or [], complete=complete)
    saved = result.save(path)
    if headline:
        import json

        from profiler_core.storage.outputs import write_manifest

        summary = json.loads((saved / "summary.json").read_text())
        summary["headline"] = headline
        (saved / "summary.json").write_text(json.dumps(summary))
        listed = json.loads((saved / "manifest.json").read_text())["files"]
        write_manifest(saved, "run", listed)
    return saved


EMPTY_SAYS = {  # page -> what it says instead of an empty table or chart (a CPU run's config)
    "views/overview.py": ["No one-time costs in this run", "does not say which GPU",
                          "A CPU run: eager only, no graph and no launch split"],
    "views/counters.py": ["This run has no counter table."],
    "views/latency.py": ["no per-iteration latency table", "No timed steps, so no percentiles.",
                         "No timing statistics in this run", "stats.csv is empty in this run."],
    "views/launch_split.py": ["A CPU run: eager only, no graph and no launch split",
                              "No profiled window in this run: a CPU run"],
    "views/gpu.py": ["No phases recorded in this run.", "No NVML samples in this run (a CPU run"],
    "views/kernels.py": ["No kernel table in this run: a CPU run"],
}


def test_a_run_with_every_table_empty_opens_and_every_view_says_what_is_missing(tmp_path):
    runs = tmp_path / "runs"
    _sparse_run(runs / "empty-run")
    at = _app(runs)
    for page, phrases in EMPTY_SAYS.items():
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        shown = _everything(at)
        for phrase in phrases:
            assert phrase in shown, (page, phrase)
        assert ("**Incomplete run:** it did not finish, and no note says where it stopped"
                in shown), page
        assert not at.dataframe or all(len(df.value) for df in at.dataframe), page


def test_odd_but_loadable_values_never_break_a_view(tmp_path):
    """Hand-edited numbers: NaN, zeros, negatives, one row, strings in the headline."""
    runs = tmp_path / "runs"
    launch = pd.DataFrame({"mode": ["eager", "graph"], "iteration": [0, 0], "span_us": [0.0, 0.0],
                           "cpu_launch_us": [float("nan")] * 2, "cpu_other_us": [-5.0, 0.0],
                           "gpu_busy_us": [0.0, 0.0], "gpu_idle_us": [0.0, 0.0], "launches": [0, 0],
                           "kernels": [0, 0], "launch_delay_us": [float("nan")] * 2})
    latency = pd.DataFrame({"mode": ["eager"], "method": ["steady"], "trial": [0],
                            "iteration": [0], "steps": [1], "gpu_ms": [float("nan")],
                            "wall_ms": [0.0]})
    breakdown = pd.DataFrame({"mode": "graph", "component": ["made_up", "gpu_idle"],
                              "eager_us": [1.0, 2.0], "mode_us": [1.0, 1.0], "saving_us": [0.0, 1.0],
                              "share_of_saving_pct": [0.0, float("nan")]})
    _sparse_run(runs / "odd", complete=True,
                headline={"speedup": "fast", "eager_median_ms": None, "counters_match": "yes",
                          "speedup_ci_low": [1], "capture_ms": float("inf")},
                tables={"launch_split": coerce_table("launch_split", launch),
                        "latency": coerce_table("latency", latency),
                        "breakdown": coerce_table("breakdown", breakdown)})
    at = _app(runs)
    for page in PAGES:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    at.switch_page("views/launch_split.py").run()
    assert "components this dashboard does not know" in _texts(at.warning)
    assert "made_up" in _texts(at.warning)


def test_breakdown_components_come_from_the_schema():
    assert set(analysis.TIMELINE_OF_COMPONENT) | {analysis.TOTAL_COMPONENT} == set(BREAKDOWN_COMPONENTS)
    assert set(analysis.TIMELINE_OF_COMPONENT.values()) == {"GPU", "CPU"}
    frame = pd.DataFrame({"mode": "graph", "component": ["gpu_busy", "totally_new"],
                          "eager_us": [1.0, 2.0], "mode_us": [1.0, 1.0], "saving_us": [0.0, 1.0],
                          "share_of_saving_pct": [0.0, 100.0]})
    assert unknown_components(frame) == ["totally_new"]
    assert list(profiled_waterfall_steps(frame)) == ["GPU"]


# ----------------------------------------------------------------------------- malformed runs


def _replace_cell(path: Path, column: str, text: str) -> None:
    frame = pd.read_csv(path, dtype=str)
    frame.loc[0, column] = text
    frame.to_csv(path, index=False)


def _damage(run: Path, how: str) -> str:
    """Damage a run folder; returns the message that must come back."""
    summary = json.loads((run / "summary.json").read_text())
    if how == "bad_json":
        (run / "summary.json").write_text('{"schema_version": 1, "config": {')
        return "not valid JSON"
    if how == "deep_json":
        (run / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
        return "not valid JSON"
    if how == "not_an_object":
        (run / "summary.json").write_text("[1, 2, 3]")
        return "does not hold a JSON object"
    if how == "wrong_version":
        (run / "summary.json").write_text(json.dumps({**summary, "schema_version": 6}))
        return "has schema_version 6, so it is not a run summary of a version this tool reads (1, 2, 3, 4, 5)"
    if how == "bad_config":
        (run / "summary.json").write_text(json.dumps({**summary, "config": {"batch": -1}}))
        return "invalid config"
    if how == "missing_column":
        frame = pd.read_csv(run / "latency.csv").drop(columns=["wall_ms"])
        frame.to_csv(run / "latency.csv", index=False)
        return "lacks columns ['wall_ms']"
    if how == "text_in_numbers":
        _replace_cell(run / "stats.csv", "median_ms", "fast")
        return "non-numeric value"
    if how == "text_in_integers":
        _replace_cell(run / "latency.csv", "trial", "1; DROP TABLE")
        return "non-numeric value"
    if how == "binary_csv":
        (run / "kernels.csv").write_bytes(bytes(range(256)) * 10)
        return "kernels.csv"
    if how == "huge_table":  # sparse: 300 MiB that takes no disk and is never read
        os.truncate(run / "latency.csv", 300 * 2**20)
        return "latency.csv in synthetic-seed is 300 MiB, over the 256 MiB limit"
    if how == "huge_summary":
        with open(run / "summary.json", "ab") as handle:
            handle.truncate(17 * 2**20)
        return "summary.json in synthetic-seed is 17 MiB, over the 16 MiB limit"
    if how == "linked_table":
        (run / "latency.csv").unlink()
        (run / "latency.csv").symlink_to("/etc/passwd")
        return "latency.csv in synthetic-seed is a link; links are not followed"
    if how == "linked_trace":  # would be served by the download button
        (run / "trace_eager.json").unlink()
        (run / "trace_eager.json").symlink_to(Path.home() / ".bashrc")
        return "trace_eager.json in synthetic-seed is a link"
    if how == "fifo_table":  # reading it would block forever
        (run / "phases.csv").unlink()
        os.mkfifo(run / "phases.csv")
        return "phases.csv in synthetic-seed is not a regular file"
    raise AssertionError(how)


DAMAGES = ["bad_json", "deep_json", "not_an_object", "wrong_version", "bad_config",
           "missing_column", "text_in_numbers", "text_in_integers", "binary_csv", "huge_table",
           "huge_summary", "linked_table", "linked_trace", "fifo_table"]


@pytest.mark.parametrize("how", DAMAGES)
def test_a_malformed_run_in_the_runs_folder_is_listed_and_refused_with_a_clear_error(tmp_path,
                                                                                      how):
    runs = tmp_path / "runs"
    run = write_synthetic_run(runs / "synthetic-seed")
    message = _damage(run, how)
    with pytest.raises(RunFormatError) as info:
        rundata.open_run(run, "folder")
    assert message in str(info.value), str(info.value)
    listed = rundata.list_runs(runs)
    assert list(listed["name"]) == ["synthetic-seed"]  # still listed, never a crash
    at = _app(runs)
    assert not at.exception, [e.value for e in at.exception]
    assert "This run cannot be opened:" in _texts(at.error)
    assert message.split(" in synthetic-seed")[0] in _texts(at.error)


def test_a_linked_run_folder_is_listed_but_not_followed(tmp_path):
    runs = tmp_path / "runs"
    real = write_synthetic_run(tmp_path / "elsewhere" / "real-run")
    runs.mkdir()
    (runs / "linked").symlink_to(real, target_is_directory=True)
    listed = rundata.list_runs(runs)
    assert "is a link" in listed["problem"][0]
    with pytest.raises(RunFormatError, match="links are not followed"):
        rundata.open_run(runs / "linked", "folder")


json_values = hs.recursive(hs.none() | hs.booleans() | hs.integers() | hs.floats() |
                           hs.text(max_size=20),
                           lambda inner: hs.lists(inner, max_size=3) |
                           hs.dictionaries(hs.text(max_size=8), inner, max_size=3), max_leaves=8)


@settings(deadline=None, max_examples=30, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(target=hs.sampled_from(["summary"] + [f for f, _ in TABLE_FILES.values()]),
       key=hs.sampled_from(["complete", "environment", "headline", "notes", "config", "tool",
                            "schema_version", "config.batch", "config.dtype", "headline.speedup"]),
       value=json_values, cell=hs.text(max_size=12), row=hs.integers(0, 3),
       raw=hs.binary(max_size=64), mode=hs.sampled_from(["value", "cell", "raw", "truncate"]))
def test_property_any_damage_to_a_run_folder_is_refused_or_opens_never_crashes(
        small_run, tmp_path_factory, target, key, value, cell, row, raw, mode):
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(dir=tmp_path_factory.getbasetemp()) as base:
        run = Path(base) / "run"
        shutil.copytree(small_run, run)
        file = run / ("summary.json" if target == "summary" else target)
        if mode == "raw":
            file.write_bytes(raw)
        elif mode == "truncate":
            data = file.read_bytes()
            file.write_bytes(data[: len(data) * row // 4])
        elif target == "summary":
            summary = json.loads(file.read_text())
            holder, _, name = key.rpartition(".")
            (summary[holder] if holder else summary)[name] = value
            file.write_text(json.dumps(summary))
        else:
            frame = pd.read_csv(file, dtype=str)
            if len(frame):
                frame.iloc[min(row, len(frame) - 1), row % len(frame.columns)] = cell
            frame.to_csv(file, index=False)
        try:
            opened = rundata.open_run(run, "folder")
        except ProfilerError as exc:
            assert exc.message
            return
        # It opened: what the views derive from it must work too (the charts of the damaged table).
        h = opened.headline
        steps = analysis.per_step_latency(opened.table("latency"))
        percentiles.percentile_table(opened.table("latency"), steps)
        timing = analysis.timing_comparison(opened.table("stats"), opened.figures)
        medians = analysis.split_medians(opened.table("launch_split"))
        pay = analysis.pay_back(opened.figures, opened.table("modes"))
        analysis.verdict(opened.figures, opened.table("attribution"), None, "graph", pay)
        lessons = run_facts.counter_lessons(opened.table("counters"), opened.config)
        analysis.one_time_costs(opened.figures, h, pay, analysis.profiler_overheads(
            opened.table("metrics"), opened.table("stats"), opened.table("latency")))
        run_facts.environment_table(opened.environment)
        kernel_tables.kernel_table(opened.table("kernels"))
        rundata.where_it_stopped(opened.notes)
        series = analysis.headline_method(opened.pair.timing_method, opened.table("stats"))
        steps, column = analysis.series_steps(steps, series if series in analysis.SERIES
                                              else "steady_event")
        draw = {
            "summary.json": lambda: median_bars(opened.table("stats"), medians),
            "latency.csv": lambda: (latency_histogram(steps, column),
                                    latency_ecdf(steps, column),
                                    latency_series(steps, column)),
            "stats.csv": lambda: (median_bars(opened.table("stats"), medians),
                                  timing_methods_bars(timing)),
            "launch_split.csv": lambda: (split_bars(medians),
                                         launch_count_bars(medians)),
            "breakdown.csv": lambda: profiled_waterfall(opened.table("breakdown")),
            "attribution.csv": lambda: (speedup_waterfall(opened.table("attribution")),
                                        analysis.saving_table(opened.table("attribution"))),
            "kernels.csv": lambda: kernel_top_bar(opened.table("kernels"), "eager", 5),
            "nvml.csv": lambda: nvml_timeseries(opened.table("nvml"), opened.table("phases")),
            "phases.csv": lambda: nvml_timeseries(opened.table("nvml"), opened.table("phases")),
            "counters.csv": lambda: counter_bars(lessons),
            "modes.csv": lambda: (modes_speedup_bars(opened.table("modes")),
                                  analysis.modes_table(opened.table("modes"))),
            "metrics.csv": lambda: rundata.table_csv_bytes(opened.table("metrics")),
            "repeats.csv": lambda: (repeats_chart(opened.table("repeats")),
                                    repeats.between_table(h, opened.pair),
                                    stability.spread_beyond_ci(
                                        h, (opened.pair.speedup_ci_low, opened.pair.speedup_ci_high))),
            "ranks.csv": lambda: (rank_charts.step_grid(opened.table("ranks")),
                                  rank_charts.stacked_step(opened.table("ranks"), "eager"),
                                  rank_charts.percentiles(opened.table("ranks"), "eager"),
                                  rank_charts.all_reduce_share(opened.table("ranks")),
                                  rank_charts.summary_table(opened.table("ranks"))),
            "rank_latency.csv": lambda: rundata.table_csv_bytes(opened.table("rank_latency")),
            "strategies.csv": lambda: (shape_charts.times_and_memory(opened.table("strategies")),
                                       shape_charts.padded_share(opened.table("strategies"))),
            "shape_steps.csv": lambda: (shape_charts.distribution(opened.table("shape_steps"),
                                                                  [8, 16], "seq_len"),
                                        shape_charts.steps_in_order(opened.table("shape_steps"),
                                                                    "seq_len")),
        }
        draw[file.name]()
        assert isinstance(opened.complete, bool)


def _pickle_bomb(marker: Path) -> bytes:
    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return pickle.dumps(Payload())


def test_loading_a_run_never_executes_anything_from_it(tmp_path):
    """Every known file replaced by a pickle that would run a command if unpickled."""
    marker = tmp_path / "PWNED"
    runs = tmp_path / "runs"
    run = write_synthetic_run(runs / "synthetic-seed")
    for name in ["latency.csv", "stats.csv", "counters.csv", "trace_eager.json"]:
        (run / name).write_bytes(_pickle_bomb(marker))
    with pytest.raises(RunFormatError):
        rundata.open_run(run, "folder")
    (run / "summary.json").write_bytes(_pickle_bomb(marker))
    at = _app(runs)
    for page in PAGES + ["views/runs.py"]:
        at.switch_page(page).run()
        assert not at.exception
    files = {f"r/{p.name}": p.read_bytes() for p in run.iterdir()}
    with pytest.raises(RunFormatError):
        rundata.unpack_run(_zip(files), tmp_path / "unpacked")
    assert not marker.exists() and not (tmp_path / "unpacked").exists()


BUILTINS_THAT_RUN_CODE = {"eval", "exec", "compile", "__import__", "breakpoint"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                     "joblib"}
FORBIDDEN_ATTRIBUTES = {  # owner -> calls that run code, a shell, or unpickle
    "os": {"system", "popen", "execv", "execvp", "execl", "spawnl", "spawnv", "startfile"},
    "subprocess": {"getoutput", "getstatusoutput"},
    "pd": {"read_pickle"}, "pandas": {"read_pickle"}, "torch": {"load"}, "np": {"load"},
    "numpy": {"load"}, "yaml": {"load", "unsafe_load", "full_load"},
}


def test_no_dashboard_code_can_execute_data_or_use_a_shell():
    """A static check of dashboard/: no eval/exec, no pickle, no shell, no os.system."""
    problems = []
    for path in sorted((ROOT / "dashboard").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] in FORBIDDEN_MODULES for n in names):
                    problems.append(f"{where} imports {names}")
            if isinstance(node, ast.Attribute) and node.attr in ("read_pickle", "Unpickler"):
                problems.append(f"{where} uses {node.attr}")
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in BUILTINS_THAT_RUN_CODE:
                problems.append(f"{where} calls {func.id}")
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                if func.attr in FORBIDDEN_ATTRIBUTES.get(func.value.id, ()):
                    problems.append(f"{where} calls {func.value.id}.{func.attr}")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (isinstance(keyword.value, ast.Constant)
                                                   and keyword.value.value is False):
                    problems.append(f"{where} passes shell={ast.unparse(keyword.value)}")
                if keyword.arg in ("allow_pickle", "unsafe_allow_html"):
                    problems.append(f"{where} passes {keyword.arg}")
    assert not problems, problems


def test_the_static_check_catches_what_it_looks_for(tmp_path, monkeypatch):
    """The check above can fail: run it over a folder holding one bad line each."""
    for i, bad in enumerate(("eval('1')", "import pickle", "from pickle import loads",
                             "subprocess.run('ls', shell=True)", "subprocess.run(x, shell=flag)",
                             "os.system('ls')", "pd.read_pickle('x')", "torch.load('m.pt')",
                             "st.markdown('x', unsafe_allow_html=True)")):
        copy = tmp_path / str(i)
        (copy / "dashboard").mkdir(parents=True)
        (copy / "dashboard" / "bad.py").write_text(bad + "\n")
        monkeypatch.setattr(sys.modules[__name__], "ROOT", copy)
        with pytest.raises(AssertionError, match="bad.py"):
            test_no_dashboard_code_can_execute_data_or_use_a_shell()


# ----------------------------------------------------------------------------- uploads


def _zip(files: dict[str, bytes | str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return buffer.getvalue()


def _headers(data: bytes, name: str):
    """Offsets of the local and central headers of ``name`` in a zip."""
    for signature, name_at, length_at in ((b"PK\x03\x04", 30, 26), (b"PK\x01\x02", 46, 28)):
        start = 0
        while (start := data.find(signature, start)) >= 0:
            length = struct.unpack_from("<H", data, start + length_at)[0]
            if data[start + name_at:start + name_at + length] == name.encode():
                yield signature, start
            start += 4


def _set_flag(data: bytes, name: str, bit: int) -> bytes:
    data = bytearray(data)
    for signature, start in list(_headers(bytes(data), name)):
        at = start + (6 if signature == b"PK\x03\x04" else 8)
        struct.pack_into("<H", data, at, struct.unpack_from("<H", data, at)[0] | bit)
    return bytes(data)


def _run_members(run: Path, root: str = "run") -> dict[str, bytes]:
    return {f"{root}/{p.name}": p.read_bytes() for p in sorted(run.iterdir())}


def _declare_size(data: bytes, name: str, size: int) -> bytes:
    """Rewrite the uncompressed size that the zip's central directory declares for ``name``."""
    data = bytearray(data)
    for signature, start in list(_headers(bytes(data), name)):
        if signature == b"PK\x01\x02":
            struct.pack_into("<I", data, start + 24, size)
            return bytes(data)
    raise AssertionError(name)


def test_a_zip_bomb_like_upload_is_refused_before_anything_is_written(source_run, tmp_path):
    files = _run_members(source_run)
    # declared: latency.csv says it unpacks to 3 GiB
    bomb = _declare_size(_zip(files), "run/latency.csv", 3 * 2**30)
    with pytest.raises(RunFormatError, match=r"latency.csv unpacks to 3,072 MiB \(at most 256 MiB\)"):
        rundata.extract_run_zip(bomb, tmp_path / "a")
    assert not (tmp_path / "a").exists()
    # many members, each under its own limit, together over the total
    files["run/trace_eager.json"] = b"0" * 1000
    files["run/trace_graph.json"] = b"0" * 1000
    packed = _zip(files)
    packed = _declare_size(packed, "run/trace_eager.json", 600 * 2**20)
    packed = _declare_size(packed, "run/trace_graph.json", 600 * 2**20)
    with pytest.raises(RunFormatError, match="the run unpacks to 1.2 GiB"):
        rundata.extract_run_zip(packed, tmp_path / "b")
    # a real 40 MB of zeros (40 kB compressed) in a table, with the limit lowered
    files = _run_members(source_run)
    files["run/nvml.csv"] = b"t_s,metric,value,source\n" + b"0" * (40 * 2**20)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runfolder, "MAX_TABLE_BYTES", 8 * 2**20)
        with pytest.raises(RunFormatError, match="nvml.csv unpacks to 40 MiB"):
            rundata.extract_run_zip(_zip(files), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_zip_that_lies_about_its_sizes_is_refused_and_nothing_is_left(source_run, tmp_path):
    files = _run_members(source_run)
    lying = _declare_size(_zip(files), "run/latency.csv", 100)  # really far more than 100 bytes
    with pytest.raises(RunFormatError, match="the zip cannot be"):
        rundata.extract_run_zip(lying, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("name, files, flags, message", [
    ("encrypted", None, "run/latency.csv", "latency.csv in the zip is encrypted"),
    ("duplicate", "dup", None, "holds latency.csv twice"),
    ("backslash", {"run\\..\\evil.txt": b"x"}, None, "unsafe path"),
    ("drive", {"C:/evil.txt": b"x"}, None, "unsafe path"),
    ("dotdot_dir", {"run/../../evil/": b""}, None, "unsafe path"),
    ("too_many", {f"junk/{i}.txt": b"" for i in range(600)}, None, "at most 500"),
])
def test_crafted_zips_are_refused(source_run, tmp_path, name, files, flags, message):
    members = _run_members(source_run)
    if files == "dup":
        data = _zip(members)
        buffer = io.BytesIO(data)
        with pytest.warns(UserWarning), zipfile.ZipFile(buffer, "a") as zf:
            zf.writestr("run/latency.csv", members["run/latency.csv"])
        data = buffer.getvalue()
    else:
        if files:
            members.update(files)
        data = _zip(members)
        if flags:  # zipfile cannot write an encrypted member: set the flag in both headers
            data = _set_flag(data, flags, 0x1)
    with pytest.raises(RunFormatError, match=message.replace("(", r"\(")):
        rundata.extract_run_zip(data, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "evil.txt").exists()


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="upload_zip").set_value((name, data, "application/zip")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_uploads_are_unpacked_in_one_app_folder_refused_ones_leave_nothing_old_ones_go(
        source_run, tmp_path):
    runs = tmp_path / "runs"
    at = _app(runs)
    at.switch_page("views/runs.py").run()
    good = rundata.run_zip_bytes(source_run, root="anything")
    _upload(at, "../../../escape me.zip", good)  # a name with '..' and a space
    session = at.session_state[state.UPLOADS]
    store = state.upload_store()
    assert session.dir.parent == store.root and store.root.name.startswith(f"cgp-uploads-{os.getpid()}-")
    first = session.paths()[0]
    assert first.name == "escape-me" and first.is_relative_to(session.dir)
    assert at.session_state[state.OPEN_RUN] == str(first.resolve())
    assert "escape me.zip is open" in _texts(at.success)
    # refused: not a zip, text in a numeric column (found only when the tables are read)
    bad_numbers = _run_members(source_run)
    text = bad_numbers["run/stats.csv"].decode().splitlines()
    cells = text[1].split(",")
    cells[4] = "'; rm -rf /"
    bad_numbers["run/stats.csv"] = "\n".join([text[0], ",".join(cells), *text[2:]]).encode()
    for name, data, message in (("junk.zip", b"not a zip", "the upload is not a zip file"),
                                ("numbers.zip", _zip(bad_numbers), "non-numeric value")):
        _upload(at, name, data)
        assert f"{name} was refused" in _texts(at.error) and message in _texts(at.error)
        assert session.paths() == [first]
        assert sorted(p.name for p in session.dir.iterdir()) == ["1"]  # nothing of it is left
    # the newest three are kept; older ones are removed from disk and from the run list
    for i in range(3):
        _upload(at, f"run{i}.zip", good)
    assert [p.name for p in session.paths()] == ["run0", "run1", "run2"]
    assert not first.exists() and not first.parent.exists()
    options = at.sidebar.selectbox(key=state.OPEN_RUN).options
    assert not any("escape-me" in option for option in options)
    assert sum("(uploaded)" in option for option in options) == 3


def test_uploads_go_when_the_session_ends_and_when_the_server_exits(source_run, tmp_path):
    store = uploads.UploadStore(base=tmp_path)
    session = store.session()
    run, _ = session.add(rundata.run_zip_bytes(source_run), "a.zip")
    folder = session.dir
    assert run.path.is_relative_to(folder) and RunResult.load(run.path).complete
    del session, run
    gc.collect()
    assert not folder.exists() and store.root.exists()  # the session ended: its folder is gone
    store.close()
    assert not store.root.exists()
    # the server process exiting removes its folder (weakref.finalize runs at exit)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from dashboard import rundata, uploads
        store = uploads.UploadStore(base={str(tmp_path)!r})
        keep = store.session()
        keep.add(rundata.run_zip_bytes(rundata.Path({str(source_run)!r})), "b.zip")
        print(store.root)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert not Path(done.stdout.strip()).exists()


def test_an_app_session_ending_removes_its_uploads(source_run, tmp_path):
    at = _app(tmp_path / "runs")
    at.switch_page("views/runs.py").run()
    _upload(at, "a.zip", rundata.run_zip_bytes(source_run))
    folder = at.session_state[state.UPLOADS].dir
    assert any(folder.iterdir())
    del at
    gc.collect()
    assert wait_for(lambda: not folder.exists(), timeout=5)


def test_upload_folders_of_dead_servers_are_swept(tmp_path):
    dead = tmp_path / "cgp-uploads-999999999-abc"  # over any pid_max: no such process
    (dead / "session-x").mkdir(parents=True)
    alive = tmp_path / f"cgp-uploads-{os.getpid()}-def"
    alive.mkdir()
    other = tmp_path / "cgp-uploads-not-ours"
    other.mkdir()
    store = uploads.UploadStore(base=tmp_path)
    assert not dead.exists() and alive.exists() and other.exists() and store.root.exists()
    store.close()


@pytest.mark.parametrize("name, stem", [("../../etc/passwd.zip", "passwd"), ("..", "upload"),
                                        ("a/b\\c d.zip", "c-d"), ("", "upload"),
                                        ("$(touch x);.zip", "touch-x")])
def test_uploaded_file_names_become_one_plain_folder_name(name, stem):
    assert uploads.safe_stem(name) == stem


# ----------------------------------------------------------------------------- concurrency


def test_two_sessions_press_run_at_once_on_one_device_with_the_real_worker(tmp_path):
    """Real CPU runs through `python -m profiler_core run --device cpu`, one after the other."""
    runs = tmp_path / "runs"
    first, second = _app(runs), _app(runs)
    _tiny_config(first, seed=1, batch=8)
    _tiny_config(second, seed=2, batch=12)
    started = time.time()
    first.sidebar.button(key="run_button").click().run()
    second.sidebar.button(key="run_button").click().run()
    jobs = [first.session_state[state.JOB], second.session_state[state.JOB]]
    second.run()
    assert jobs[1].snapshot().status == "queued"
    waiting = _texts(second.info)
    assert "Waiting for cpu" in waiting and "number 1 in the queue" in waiting
    assert jobs[0].run_name in waiting and "(another session) holds it" in waiting
    for job in jobs:
        assert job.wait(SAFETY_NET_S), job.snapshot()
    elapsed = time.time() - started
    a, b = (job.snapshot() for job in jobs)
    assert (a.status, b.status) == ("done", "done"), (a.stderr_tail, b.stderr_tail)
    grants = state.lock_registry().lock("cpu").history()
    assert [g.job_id for g in grants] == [a.job_id, b.job_id]  # in the order Run was pressed
    assert grants[1].granted_at >= grants[0].released_at  # never both at once
    assert b.started_at >= grants[0].released_at and a.started_at <= grants[0].released_at
    assert _lock_is_free()
    assert a.out_dir != b.out_dir and Path(a.out_dir).parent == Path(b.out_dir).parent == runs.resolve()
    for session, snap, seed, batch in ((first, a, 1, 8), (second, b, 2, 12)):
        session.run()
        assert "finished and is open" in _texts(session.success)
        assert session.session_state[state.OPEN_RUN] == str(Path(snap.out_dir).resolve())
        summary = json.loads((Path(snap.out_dir) / "summary.json").read_text())
        assert summary["complete"] is True
        assert (summary["config"]["seed"], summary["config"]["batch"]) == (seed, batch)
        assert summary["config"]["device"] == "cpu" and summary["config"]["replays"] == 20
        run = RunResult.load(snap.out_dir)
        counters = run.table("counters")
        assert counters["match"].all() and run.headline["counters_match"] is True
        timed = counters.loc[counters["phase"] == "eager_after_timed", "observed"].item()
        assert timed == run.config.total_eager_iters == 20
        assert len(run.table("latency")) == 16 and (run.table("latency")["mode"] == "eager").all()
    assert sorted(rundata.list_runs(runs)["path"]) == sorted([a.out_dir, b.out_dir])
    print(f"\ntwo real CPU runs, one after the other: {elapsed:.1f} s")  # reported, not asserted


def test_run_folders_never_collide_nor_leave_the_runs_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(state, "session_id", lambda: "../x")
    folder = tmp_path / "runs"
    folder.mkdir()
    config = PRESETS["seed"].replace(device="cpu", preset="custom")  # RunConfig refuses other labels
    first = runpanel.new_run_dir(folder, config)
    # named by the step it runs, as every reader labels it (the seed step, on the CPU)
    assert first.parent == folder.resolve() and "-seed-fp32-cpu-x" in first.name
    first.mkdir()
    second = runpanel.new_run_dir(folder, config)
    assert second != first and second.parent == folder.resolve()
    assert runpanel.RUN_NAME.fullmatch(second.name)


# ----------------------------------------------------------------------------- security


def test_the_server_binds_to_localhost_by_default():
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] in ("127.0.0.1", "localhost")
    assert config["server"]["headless"] is True
    assert config["browser"]["gatherUsageStats"] is False
    assert config["server"]["maxUploadSize"] == rundata.MAX_UPLOAD_MB
    for unsafe in ("enableXsrfProtection", "enableCORS"):  # left at Streamlit's safe default
        assert config["server"].get(unsafe, True) is True
    # What Streamlit itself makes of it, started from the repository root like the README says.
    probe = ("import streamlit.config as c; c.get_config_options(force_reparse=True); "
             "print(c.get_option('server.address'), c.get_option('server.enableXsrfProtection'), "
             "c.get_option('browser.gatherUsageStats'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    shown = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=60, check=False)
    assert shown.stdout.split() == ["127.0.0.1", "True", "False"], shown.stderr


NASTY_FOLDERS = ["../../../../etc", "/etc", "~root", "/", "runs/../../..", "a\x00b",
                 "x" * 5000, "$(touch PWNED)/../../..", "\\\\server\\share", "runs\nmore"]


def test_the_runs_folder_field_cannot_step_outside_the_allowed_folders(tmp_path, monkeypatch):
    allowed = tmp_path / "allowed"
    monkeypatch.setenv(rundata.RUNS_ROOT_ENV, str(allowed))
    monkeypatch.chdir(tmp_path)
    write_synthetic_run(allowed / "runs" / "mine")
    write_synthetic_run(tmp_path / "secret" / "theirs")
    roots = rundata.allowed_roots()
    for text in NASTY_FOLDERS + [str(tmp_path / "secret"), str(allowed / ".." / "secret")]:
        with pytest.raises(rundata.FolderRefused):
            rundata.resolve_runs_folder(text, roots)
    (allowed / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(rundata.FolderRefused, match="outside the allowed folders"):
        rundata.resolve_runs_folder(str(allowed / "link"), roots)
    assert rundata.resolve_runs_folder(str(allowed / "runs"), roots) == (allowed / "runs").resolve()
    assert rundata.resolve_runs_folder(str(allowed / "new" / "sub"), roots).parent.name == "new"
    at = _app(allowed / "runs")
    assert at.session_state[state.OPEN_RUN].endswith("mine")
    for text in ["../secret", str(tmp_path / "secret"), "a\x00b", "x" * 5000]:
        at.session_state[state.RUNS_DIR] = text
        at.run()
        assert not at.exception, (text[:20], [e.value for e in at.exception])
        assert "Runs folder refused:" in _texts(at.sidebar.error), text[:20]
        assert f"Showing and saving to {(allowed / 'runs').resolve()} instead" in _texts(at.sidebar.error)
        options = at.sidebar.selectbox(key=state.OPEN_RUN).options
        assert len(options) == 1 and "mine" in options[0]  # still the last accepted folder
    assert not (tmp_path / "PWNED").exists()


def test_text_typed_in_the_browser_never_reaches_a_shell(fake_runs, tmp_path, monkeypatch):
    """A runs folder full of shell syntax ends up as one argv element; no shell ever runs."""
    calls = []
    real_popen = subprocess.Popen

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(child.subprocess, "Popen", spy)  # the launcher's child starts the worker
    monkeypatch.chdir(tmp_path)
    nasty = "runs/$(touch PWNED1); touch PWNED2 `touch PWNED3` | touch PWNED4 && touch PWNED5"
    at = _app(tmp_path / nasty)
    snap = _press_run_and_wait(at)
    assert snap.status == "done"
    ((args, kwargs),) = calls
    argv = args[0] if args else kwargs["args"]
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert kwargs.get("shell", False) is False
    assert [a for a in argv if "PWNED" in a] == [snap.out_dir]  # one element, as typed
    assert Path(snap.out_dir).parent == (tmp_path / nasty).resolve()
    assert not list(tmp_path.glob("PWNED*")) and not list(Path.cwd().glob("PWNED*"))


def test_the_real_worker_argv_is_a_list_of_validated_values(tmp_path):
    nasty = tmp_path / "a b; rm -rf ~ $(id)"
    argv = run_argv(PRESETS["seed"].replace(device="cpu"), nasty, python="python")
    assert isinstance(argv, list) and argv[argv.index("--out") + 1] == str(nasty)
    assert argv.count(str(nasty)) == 1 and argv[:4] == ["python", "-m", "profiler_core", "run"]


@pytest.mark.parametrize("table", list(TABLE_FILES))
def test_a_table_pandas_cannot_parse_is_refused_in_one_line_saying_it_once(tmp_path, table):
    """pandas' tokenizer message ends in a line break; the refusal is one line, said once."""
    run = write_synthetic_run(tmp_path / "runs" / "synthetic-seed")
    path = run / TABLE_FILES[table][0]
    header = path.read_text().splitlines()[0]
    width = header.count(",") + 1
    path.write_text(f"{header}\n{','.join('1' * width)}\n{','.join('1' * (width + 3))}\n")
    for opening in (lambda: RunResult.load(run), lambda: rundata.open_run(run, "folder")):
        with pytest.raises(RunFormatError) as info:
            opening()
        text = str(info.value)
        assert text.count("\n") == 0 and text.count("Expected") == 1, text
        assert f"{path} is not a readable CSV: Error tokenizing data." in text, text
