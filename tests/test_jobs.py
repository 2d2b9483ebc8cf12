"""Background jobs (profiler_core/orchestration/jobs.py) with a stand-in piece of work: the device's
lock (profiler_core/orchestration/gpulock.py) is queued on and waited for, then released whatever
happens and before the job says it finished; the snapshot follows the work; stop works while
waiting and while running; a failing piece of work is said in one line; the lock is FIFO. A job
on several devices (a data-parallel run) holds every device's lock, never overlaps another job on
any of them, leaves every queue when stopped, and never deadlocks, whatever the order of starts."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from conftest import slow_release_lock, wait_for

from profiler_core.orchestration.gpulock import GpuLock, GpuLockRegistry, Ticket
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
    lock = slow_release_lock("cpu")
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


# ------------------------------------------------------------------ jobs on several devices


class _Timed:
    """Work that runs ``seconds`` and records which jobs were inside on each device at once."""

    def __init__(self, name: str, devices: tuple[str, ...], record: _Overlaps,
                 seconds: float = 0.02) -> None:
        self.on_progress = lambda progress: None
        self.name, self.devices, self.record, self.seconds = name, devices, record, seconds

    def run(self) -> _Outcome:
        self.record.enter(self.name, self.devices)
        time.sleep(self.seconds)
        self.record.leave(self.name, self.devices)
        return _Outcome("done")

    def stop(self) -> None:
        pass


class _Overlaps:
    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.inside: dict[str, set[str]] = {}
        self.clashes: list[tuple[str, set[str]]] = []
        self.order: list[str] = []

    def enter(self, name: str, devices: tuple[str, ...]) -> None:
        with self.guard:
            for device in devices:
                if self.inside.get(device):
                    self.clashes.append((device, set(self.inside[device]) | {name}))
                self.inside.setdefault(device, set()).add(name)
            self.order.append(name)

    def leave(self, name: str, devices: tuple[str, ...]) -> None:
        with self.guard:
            for device in devices:
                self.inside[device].discard(name)


def _holder(lock: GpuLock) -> str | None:
    holder = lock.state().holder
    return holder.ticket.job_id if holder else None


def test_a_two_gpu_job_waits_for_a_one_gpu_job_on_its_second_gpu():
    registry = GpuLockRegistry()
    cuda0, cuda1 = registry.lock("cuda:0"), registry.lock("cuda:1")
    single_work, double_work = _Work(), _Work()
    single = BackgroundJob(single_work, "one", cuda1).start()
    assert single_work.going.wait(SAFETY_NET_S)
    double = BackgroundJob(double_work, "two", [cuda1, cuda0], "s").start()
    assert double.devices == ("cuda:0", "cuda:1")  # taken in ascending order, whatever was given
    # it takes cuda:0 and waits first in cuda:1's queue, its work not started
    assert wait_for(lambda: _holder(cuda0) == double.job_id)
    assert cuda1.state().position(double.job_id) == 1 and _holder(cuda1) == single.job_id
    assert double.snapshot()["status"] == "queued" and double_work.runs == 0
    single.stop()
    assert double_work.going.wait(SAFETY_NET_S)
    assert _holder(cuda0) == _holder(cuda1) == double.job_id
    assert double.snapshot()["status"] == "running"
    double.stop()
    assert single.wait(SAFETY_NET_S) and double.wait(SAFETY_NET_S)
    assert _released(cuda0, double) and _released(cuda1, double)
    assert [state.holder for state in registry.states()] == [None, None]
    assert not any(state.waiting for state in registry.states())


def test_two_gpu_jobs_never_interleave_however_their_starts_race():
    registry = GpuLockRegistry()
    locks = [registry.lock("cuda:0"), registry.lock("cuda:1")]
    record, jobs, guard = _Overlaps(), [], threading.Lock()
    go = threading.Barrier(8)

    def start(index: int) -> None:
        given = locks if index % 2 else locks[::-1]  # either order of the same two devices
        job = BackgroundJob(_Timed(f"j{index}", ("cuda:0", "cuda:1"), record), f"j{index}", given)
        go.wait(SAFETY_NET_S)
        job.start()
        with guard:
            jobs.append(job)

    starters = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for thread in starters:
        thread.start()
    for thread in starters:
        thread.join(SAFETY_NET_S)
    assert len(jobs) == 8
    assert all(job.wait(SAFETY_NET_S) for job in jobs), "a job never finished: deadlock"
    assert record.clashes == [] and len(record.order) == 8
    assert all(job.snapshot()["status"] == "done" for job in jobs)
    for lock in locks:
        assert lock.state().holder is None and not lock.state().waiting
        assert len(lock.history()) == 8  # every job held every device, one at a time


def test_a_multi_device_job_cancelled_while_waiting_leaves_every_queue():
    registry = GpuLockRegistry()
    cuda0, cuda1, cuda2 = (registry.lock(f"cuda:{i}") for i in range(3))
    other = Ticket("other", "other", "s", time.time())
    assert cuda1.acquire(other)
    work = _Work()
    job = BackgroundJob(work, "j", [cuda0, cuda1, cuda2]).start()
    assert cuda2.state().position(job.job_id) == 1  # in every queue from the start
    assert wait_for(lambda: _holder(cuda0) == job.job_id and cuda1.state().position(job.job_id))
    job.stop()
    assert job.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert (snap["status"], snap["error"]) == ("stopped", "stopped while waiting for the device")
    assert work.runs == 1 and snap["started_at"] is None  # run() after stop() marks it stopped
    assert _released(cuda0, job) and _holder(cuda0) is None  # the device it held is given back
    assert not any(grant.job_id == job.job_id for grant in cuda1.history() + cuda2.history())
    assert not any(state.waiting for state in registry.states())
    assert _holder(cuda1) == "other"


def test_no_deadlock_between_a_two_gpu_job_and_a_one_gpu_job_in_either_order():
    for first_is_double in (True, False):
        for _ in range(10):
            registry = GpuLockRegistry()
            cuda0, cuda1 = registry.lock("cuda:0"), registry.lock("cuda:1")
            record = _Overlaps()
            double = BackgroundJob(_Timed("double", ("cuda:0", "cuda:1"), record, 0.005),
                                   "double", [cuda0, cuda1])
            single = BackgroundJob(_Timed("single", ("cuda:1",), record, 0.005), "single", cuda1)
            first, second = (double, single) if first_is_double else (single, double)
            first.start()
            second.start()
            assert first.wait(SAFETY_NET_S) and second.wait(SAFETY_NET_S), "deadlock"
            assert record.clashes == []
            assert record.order == [first.name, second.name]  # first come, first served
            assert [state.holder for state in registry.states()] == [None, None]
