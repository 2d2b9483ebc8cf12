"""Background jobs (profiler_core/orchestration/jobs.py) with a stand-in piece of work: the device's
lock (profiler_core/orchestration/gpulock.py) is queued on and waited for, then released whatever
happens and before the job says it finished; the snapshot follows the work; stop works while
waiting and while running; a failing piece of work is said in one line; the lock is FIFO."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from conftest import wait_for

from profiler_core.orchestration.gpulock import GpuLock, Ticket
from profiler_core.orchestration.jobs import BackgroundJob

SAFETY_NET_S = 30


@dataclass(frozen=True)
class _Outcome:
    status: str
    error_line: str = ""


class _Work:
    def __init__(self, fail: bool = False) -> None:
        self.on_progress = lambda progress: None
        self.stopped = threading.Event()
        self.going = threading.Event()
        self.fail = fail
        self.runs = 0

    def run(self) -> _Outcome:
        self.runs += 1
        if self.fail:
            raise RuntimeError("a bug\nover two lines")
        self.on_progress("half way")
        self.going.set()
        self.stopped.wait(SAFETY_NET_S)
        return _Outcome("stopped" if self.stopped.is_set() else "done")

    def stop(self) -> None:
        self.stopped.set()


def _held_device() -> tuple[GpuLock, Ticket]:
    """A device's lock, held by another job until the test releases it."""
    lock = GpuLock("cuda:0")
    other = Ticket("other", "other", "s", time.time())
    assert lock.acquire(other)
    return lock, other


def _released(lock: GpuLock, job: BackgroundJob) -> bool:
    """Whether ``job`` held the device and gave it back."""
    return any(grant.job_id == job.job_id and grant.released_at is not None
               for grant in lock.history())


def test_a_job_waits_for_the_device_runs_reports_and_releases():
    (lock, other), work = _held_device(), _Work()
    job = BackgroundJob(work, "j", lock, "s", holder="sweep j").start()
    assert job.snapshot()["status"] == "queued" and job.active
    assert [ticket.run_name for ticket in lock.state().waiting] == ["sweep j"]
    lock.release(other)
    assert work.going.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert snap["status"] == "running" and snap["progress"] == "half way" and snap["started_at"]
    assert lock.state().holder.ticket.job_id == job.job_id
    job.stop()
    assert job.wait(SAFETY_NET_S) and not job.active
    snap = job.snapshot()
    assert snap["status"] == "stopped" and snap["outcome"] == _Outcome("stopped")
    assert _released(lock, job) and lock.state().holder is None and not lock.state().waiting
    assert snap["finished_at"] >= snap["started_at"]


def test_a_job_stopped_while_waiting_never_holds_the_device():
    (lock, _other), work = _held_device(), _Work()
    job = BackgroundJob(work, "j", lock).start()
    job.stop()
    assert job.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert (snap["status"], snap["error"]) == ("stopped", "stopped while waiting for the device")
    assert work.runs == 1  # run() after stop() marks the work stopped
    assert not any(grant.job_id == job.job_id for grant in lock.history())
    assert not lock.state().waiting  # it left the queue


def test_a_failing_job_is_said_in_one_line_and_the_device_released():
    lock = GpuLock("cpu")
    job = BackgroundJob(_Work(fail=True), "j", lock).start()
    assert job.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert snap["status"] == "error" and snap["error"] == "RuntimeError: a bug over two lines"
    assert _released(lock, job) and lock.state().holder is None


def test_a_finished_job_has_already_released_the_device():
    """Whoever sees a job finished also sees the device free (no window where both hold)."""
    lock = GpuLock("cpu")
    release = lock.release

    def slow_release(ticket):  # widen the window a wrong order would leave open
        time.sleep(0.3)
        release(ticket)

    lock.release = slow_release
    work = _Work()
    work.stopped.set()  # it ends at once
    job = BackgroundJob(work, "j", lock).start()
    seen = []
    while not job.wait(0):
        if job.snapshot()["status"] not in ("queued", "running", "stopping"):
            seen.append(lock.state().holder)
    assert job.snapshot()["status"] == "stopped"
    assert all(holder is None for holder in seen), "finished while still holding the lock"


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
