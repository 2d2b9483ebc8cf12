"""A run from the page as a background job (profiler_core/orchestration/runjob.py) and the
per-device lock, with a fake worker (no GPU needed); a data-parallel run holds the lock of every
GPU its ranks use, and the run panel says who holds each. The launcher itself is tested in
test_launcher.py, the background job's mechanics in test_jobs.py."""

from __future__ import annotations

import time

import pytest
from conftest import process_alive, wait_for

from profiler_core.cli import parser as cli
from profiler_core.orchestration.command import run_argv
from profiler_core.orchestration.gpulock import GpuLock, GpuLockRegistry
from profiler_core.orchestration.runjob import RunJob, run_devices
from profiler_core.spec.config import PRESETS, RunConfig
from profiler_core.spec.events import ErrorEvent


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
        assert snap.error == ErrorEvent(kind="ConfigError", field="replays",
                                        message="--replays: too many", hint="lower it")
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


def test_a_data_parallel_run_uses_the_gpus_of_its_local_ranks():
    # rank LOCAL_RANK runs on cuda:LOCAL_RANK (engine.ddp_step), whatever device the config names
    assert run_devices(RunConfig(device="cuda:1", nproc_per_node=2)) == ("cuda:0", "cuda:1")
    assert run_devices(RunConfig(device="cuda:0", nproc_per_node=4)) == tuple(
        f"cuda:{i}" for i in range(4))
    assert run_devices(RunConfig(device="cuda:1")) == ("cuda:1",)
    assert run_devices(RunConfig(device="cpu", nproc_per_node=2)) == ("cpu",)  # gloo ranks


def test_a_data_parallel_run_holds_every_gpu_and_waits_for_each(tmp_path, fake_worker,
                                                                 synthetic_run, monkeypatch):
    from dashboard import runpanel, state

    registry = GpuLockRegistry()
    monkeypatch.setattr(state, "lock_registry", lambda: registry)
    cuda0, cuda1 = registry.lock("cuda:0"), registry.lock("cuda:1")
    single = RunJob(fake_worker("sleep", tmp_path / "a"), tmp_path / "a", "cuda:1", cuda1,
                    session="s1").start()
    assert wait_for(lambda: cuda1.state().holder is not None)
    config = RunConfig(device="cuda:0", nproc_per_node=2)
    locks = [registry.lock(device) for device in run_devices(config)]
    double = RunJob(fake_worker("done", tmp_path / "b", synthetic_run), tmp_path / "b",
                    config.device, locks, session="s2").start()
    assert wait_for(lambda: cuda0.state().holder is not None and cuda1.state().waiting)
    snap = double.snapshot()
    assert snap.status == "queued" and snap.devices == ("cuda:0", "cuda:1")
    text = runpanel.waiting_text(snap)
    assert text.startswith("Waiting for cuda:0, cuda:1 (taken in this order):")
    assert "cuda:0 is busy: run **b**" in text and "cuda:1 is busy: run **a**" in text
    assert "number 1 in cuda:1's queue" in text and "cuda:0's queue" not in text
    single.cancel()
    assert double.wait(20) and double.snapshot().status == "done"
    assert double.snapshot().started_at >= single.snapshot().finished_at - 0.05
    for lock in (cuda0, cuda1):
        assert lock.state().holder is None and not lock.state().waiting
        assert lock.history()[-1].job_id == double.job_id


def test_a_single_device_run_is_said_waiting_as_before(tmp_path, fake_worker, monkeypatch):
    from dashboard import runpanel, state

    registry = GpuLockRegistry()
    monkeypatch.setattr(state, "lock_registry", lambda: registry)
    lock = registry.lock("cpu")
    first = RunJob(fake_worker("sleep", tmp_path / "a"), tmp_path / "a", "cpu", lock).start()
    assert wait_for(lambda: lock.state().holder is not None)
    second = RunJob(fake_worker("sleep", tmp_path / "b"), tmp_path / "b", "cpu", lock).start()
    snap = second.snapshot()
    assert snap.devices == ("cpu",)
    text = runpanel.waiting_text(snap)
    assert text.startswith("Waiting for cpu: cpu is busy: run **a**")
    assert text.endswith(" Your run is number 1 in the queue.")
    second.cancel()
    first.cancel()
    assert first.wait(10) and second.wait(10)
