"""The dashboard's layer over the launcher (RunJob) and the per-device lock, with a fake worker
(no GPU needed). The launcher itself is tested in test_launcher.py."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import process_alive, wait_for

from dashboard.gpulock import GpuLock, GpuLockRegistry, Ticket
from dashboard.worker import RunJob
from profiler_core.cli import parser as cli
from profiler_core.orchestration.command import run_argv
from profiler_core.spec.config import PRESETS


def test_a_fresh_workers_argv_is_the_cli_contract(tmp_path):
    # what the sidebar builds after a control was changed from a preset: labelled custom
    config = PRESETS["lesson3"].replace(dtype="bf16", device="cuda:1", eager_iters=17, nvml=False,
                                        preset="custom")
    argv = run_argv(config, tmp_path / "out", python="python")
    assert argv[:4] == ["python", "-m", "profiler_core", "run"]
    assert argv[-4:] == ["--out", str(tmp_path / "out"), "--progress", "jsonl"]
    assert argv[argv.index("--preset") + 1] == "custom"  # the label reaches the worker
    assert cli.config_from_args(cli.parse(argv[3:])) == config
    untouched = PRESETS["lesson3"]  # a preset as it is keeps its name
    assert cli.config_from_args(cli.parse(run_argv(untouched, tmp_path / "o")[3:])) == untouched


def test_a_run_streams_progress_finishes_and_releases_the_lock(tmp_path, fake_worker, synthetic_run):
    lock = GpuLock("cuda:0")
    out = tmp_path / "runs" / "new"
    job = RunJob(fake_worker("done", out, synthetic_run), out, "cuda:0", lock).start()
    seen = set()
    while not job.wait(0.01):
        seen.add(job.snapshot().status)
    snap = job.snapshot()
    assert snap.status == "done" and snap.ok and snap.fraction == 1.0 and snap.returncode == 0
    assert snap.events == 4  # three progress lines and done
    assert (out / "summary.json").is_file()
    assert seen & {"running", "starting"}
    assert lock.state().holder is None and not lock.state().waiting


@pytest.mark.parametrize("mode, status, code", [("error", "error", 2), ("crash", "crashed", 1),
                                                 ("segv", "crashed", -11)])
def test_failures_are_reported_and_release_the_lock(tmp_path, fake_worker, mode, status, code):
    lock = GpuLock("cuda:0")
    job = RunJob(fake_worker(mode, tmp_path / "out"), tmp_path / "out", "cuda:0", lock).start()
    assert job.wait(20)
    snap = job.snapshot()
    assert (snap.status, snap.returncode) == (status, code)
    assert lock.state().holder is None
    if mode == "error":
        assert snap.error == {"kind": "ConfigError", "field": "replays",
                              "message": "--replays: too many", "hint": "lower it"}
    elif mode == "crash":
        assert "illegal memory access" in snap.stderr_tail
        assert "exit code 1" in snap.message
    else:
        assert "SIGSEGV" in snap.message


def test_cancel_kills_the_worker_and_its_children(tmp_path, fake_worker):
    lock = GpuLock("cpu")
    out = tmp_path / "out"
    job = RunJob(fake_worker("sleep", out), out, "cpu", lock).start()
    pids_file = tmp_path / "out.pids"
    assert wait_for(pids_file.exists)
    assert wait_for(lambda: len(pids_file.read_text().split()) == 2)
    pids = [int(p) for p in pids_file.read_text().split()]
    started = time.time()
    job.cancel()
    assert job.wait(10)
    assert time.time() - started < 5
    assert job.snapshot().status == "cancelled"
    assert wait_for(lambda: not any(process_alive(pid) for pid in pids))
    assert lock.state().holder is None


def test_a_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path, fake_worker):
    out = tmp_path / "out"
    job = RunJob(fake_worker("sleep", out, "ignore-term"), out, "cpu", GpuLock("cpu"),
                 grace_s=0.5).start()
    assert wait_for((tmp_path / "out.pids").exists)
    time.sleep(0.2)
    job.cancel()
    assert job.wait(10)
    assert job.snapshot().status == "cancelled"


def test_a_hung_worker_is_stopped_after_the_timeout(tmp_path, fake_worker):
    out = tmp_path / "out"
    job = RunJob(fake_worker("sleep", out), out, "cpu", GpuLock("cpu"), timeout_s=0.5).start()
    assert job.wait(10)
    snap = job.snapshot()
    assert snap.status == "timeout" and "0.5 s" in snap.message


def test_one_run_per_device_in_arrival_order_and_cancel_while_queued(tmp_path, fake_worker,
                                                                     synthetic_run):
    registry = GpuLockRegistry()
    lock = registry.lock("cuda:0")
    assert registry.lock("cuda:0") is lock and registry.lock("cuda:1") is not lock
    first = RunJob(fake_worker("sleep", tmp_path / "a"), tmp_path / "a", "cuda:0", lock,
                   session="s1").start()
    assert wait_for(lambda: lock.state().holder is not None)
    second = RunJob(fake_worker("done", tmp_path / "b", synthetic_run), tmp_path / "b", "cuda:0",
                    lock, session="s2").start()
    third = RunJob(fake_worker("done", tmp_path / "c", synthetic_run), tmp_path / "c", "cuda:0",
                   lock, session="s3").start()
    assert wait_for(lambda: len(lock.state().waiting) == 2)
    state = lock.state()
    assert state.holder.ticket.run_name == "a" and state.holder.ticket.session == "s1"
    assert state.holder.since <= time.time()
    assert [t.run_name for t in state.waiting] == ["b", "c"]
    assert state.position(second.job_id) == 1 and state.position(third.job_id) == 2
    assert second.snapshot().status == "queued"
    third.cancel()  # leaves the queue without ever starting
    assert third.wait(5) and third.snapshot().status == "cancelled"
    assert third.snapshot().started_at is None
    first.cancel()
    assert second.wait(20)
    assert second.snapshot().status == "done"
    assert second.snapshot().started_at >= first.snapshot().finished_at - 0.05
    assert lock.state().holder is None and not lock.state().waiting


def test_lock_is_fifo_under_contention():
    lock = GpuLock("cuda:0")
    order, inside, overlap = [], [], []
    holder = Ticket("first", "first", "s", time.time())
    assert lock.acquire(holder)

    def worker(name):
        ticket = Ticket(name, name, "s", time.time())
        assert lock.acquire(ticket)
        inside.append(name)
        overlap.append(len(inside))
        order.append(name)
        time.sleep(0.01)
        inside.remove(name)
        lock.release(ticket)

    threads = []
    for name in "abcde":
        thread = threading.Thread(target=worker, args=(name,))
        thread.start()
        threads.append(thread)
        assert wait_for(lambda: len(lock.state().waiting) == len(threads))
    lock.release(holder)
    for thread in threads:
        thread.join(5)
    assert order == list("abcde") and max(overlap) == 1
