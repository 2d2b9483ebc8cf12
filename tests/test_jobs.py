"""Background jobs (profiler_core/orchestration/jobs.py) with a stand-in piece of work: the device is
waited for, then released whatever happens; the snapshot follows the work; stop works while
waiting and while running; a failing piece of work is said in one line."""

from __future__ import annotations

import threading
from dataclasses import dataclass

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


def _device(free: threading.Event, released: list[str]):
    def acquire(cancel: threading.Event) -> bool:
        while not free.wait(0.01):
            if cancel.is_set():
                return False
        return True
    return acquire, lambda: released.append("released")


def test_a_job_waits_for_the_device_runs_reports_and_releases():
    free, released, work = threading.Event(), [], _Work()
    job = BackgroundJob(work, "j", *_device(free, released)).start()
    assert job.snapshot()["status"] == "queued" and job.active
    free.set()
    assert work.going.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert snap["status"] == "running" and snap["progress"] == "half way" and snap["started_at"]
    job.stop()
    assert job.wait(SAFETY_NET_S) and not job.active
    snap = job.snapshot()
    assert snap["status"] == "stopped" and snap["outcome"] == _Outcome("stopped")
    assert released == ["released"] and snap["finished_at"] >= snap["started_at"]


def test_a_job_stopped_while_waiting_never_holds_the_device():
    free, released, work = threading.Event(), [], _Work()
    job = BackgroundJob(work, "j", *_device(free, released)).start()
    job.stop()
    assert job.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert (snap["status"], snap["error"]) == ("stopped", "stopped while waiting for the device")
    assert work.runs == 1 and released == []  # run() after stop() marks the work stopped


def test_a_failing_job_is_said_in_one_line_and_the_device_released():
    free, released = threading.Event(), []
    free.set()
    job = BackgroundJob(_Work(fail=True), "j", *_device(free, released)).start()
    assert job.wait(SAFETY_NET_S)
    snap = job.snapshot()
    assert snap["status"] == "error" and snap["error"] == "RuntimeError: a bug over two lines"
    assert released == ["released"]
