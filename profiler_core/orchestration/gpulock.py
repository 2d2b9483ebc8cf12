"""One run at a time per device, across every session and job of the process.

Scope: a first-come-first-served lock per device key ("cuda:0", "cpu") that remembers who holds
it and since when, and who waits, with the last grants. The background jobs of
:mod:`profiler_core.orchestration.jobs` queue on it, acquire and release it, so the lock is
released when a job ends however it ends; a job on several devices (a data-parallel run) joins
every queue at once (:func:`enqueue_all`), so tickets keep one order across all queues and no two
jobs wait on each other. The dashboard keeps one :class:`GpuLockRegistry` per server process. No
UI here; thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

# Held while a ticket joins its queues: every queue then lists tickets in one global order.
_JOINING = threading.Lock()


@dataclass(frozen=True)
class Ticket:
    """One request for a device: which run, from which session, since when (``time.time()``)."""

    job_id: str
    run_name: str
    session: str
    requested_at: float


@dataclass(frozen=True)
class Holder:
    ticket: Ticket
    since: float  # time.time() when the lock was granted


@dataclass(frozen=True)
class Grant:
    """One turn on a device, for the record: who, when granted, when released (None: holding)."""

    job_id: str
    run_name: str
    session: str
    requested_at: float
    granted_at: float
    released_at: float | None = None


@dataclass(frozen=True)
class LockState:
    device: str
    holder: Holder | None
    waiting: tuple[Ticket, ...]

    def position(self, job_id: str) -> int | None:
        """1-based place in the queue, None if not waiting."""
        for i, ticket in enumerate(self.waiting, start=1):
            if ticket.job_id == job_id:
                return i
        return None


class GpuLock:
    """A FIFO lock for one device; ``acquire`` can be abandoned through a cancel event.

    ``enqueue`` takes a place in the queue at once (a job does when started, so jobs start in the
    order they were asked for, not in the order their threads happen to be scheduled); ``acquire``
    enqueues too if needed, then waits for the turn. The last grants are kept (``history``).
    """

    HISTORY = 50

    def __init__(self, device: str) -> None:
        self.device = device
        self._cond = threading.Condition()
        self._holder: Holder | None = None
        self._queue: deque[Ticket] = deque()
        self._history: deque[Grant] = deque(maxlen=self.HISTORY)

    def enqueue(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket not in self._queue and (self._holder is None or self._holder.ticket is not ticket):
                self._queue.append(ticket)
                self._cond.notify_all()

    def leave(self, ticket: Ticket) -> None:
        """Leave the queue if still in it (a job that ends without ever getting its turn)."""
        with self._cond:
            if ticket in self._queue:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def acquire(self, ticket: Ticket, cancel: threading.Event | None = None,
                poll_s: float = 0.1) -> bool:
        """Wait for the turn of ``ticket``; False if ``cancel`` was set while waiting."""
        with self._cond:
            if ticket not in self._queue:
                self._queue.append(ticket)
            try:
                while self._holder is not None or self._queue[0] is not ticket:
                    if cancel is not None and cancel.is_set():
                        return False
                    self._cond.wait(poll_s)
                if cancel is not None and cancel.is_set():
                    return False
                self._holder = Holder(ticket, time.time())
                self._history.append(Grant(ticket.job_id, ticket.run_name, ticket.session,
                                           ticket.requested_at, self._holder.since))
                return True
            finally:
                self._queue.remove(ticket)
                self._cond.notify_all()

    def release(self, ticket: Ticket) -> None:
        with self._cond:
            if self._holder is not None and self._holder.ticket is ticket:
                self._holder = None
                for i in range(len(self._history) - 1, -1, -1):
                    grant = self._history[i]
                    if grant.job_id == ticket.job_id and grant.released_at is None:
                        self._history[i] = Grant(grant.job_id, grant.run_name, grant.session,
                                                 grant.requested_at, grant.granted_at, time.time())
                        break
                self._cond.notify_all()

    def history(self) -> list[Grant]:
        """The last grants, oldest first."""
        with self._cond:
            return list(self._history)

    def state(self) -> LockState:
        with self._cond:
            return LockState(self.device, self._holder, tuple(self._queue))


def enqueue_all(locks: Sequence[GpuLock], ticket: Ticket) -> None:
    """Join the queue of every lock in ``locks`` at once. Every job joins its queues through here,
    so the queues order tickets alike: the earliest unfinished ticket is first in each of its
    queues and no later ticket can hold one of its devices, so a job needing several devices
    (taken in ascending order) never deadlocks with another, and each device stays first come,
    first served."""
    with _JOINING:
        for lock in locks:
            lock.enqueue(ticket)


def sorted_locks(locks: Sequence[GpuLock]) -> list[GpuLock]:
    """``locks`` in ascending device order ("cuda:2" before "cuda:10"), each once."""
    def order(lock: GpuLock) -> tuple[str, int]:
        kind, _, index = lock.device.partition(":")
        return kind, int(index) if index.isdigit() else -1
    unique = {id(lock): lock for lock in locks}
    return sorted(unique.values(), key=order)


class GpuLockRegistry:
    """The lock of every device, created on first use."""

    def __init__(self) -> None:
        self._locks: dict[str, GpuLock] = {}
        self._guard = threading.Lock()

    def lock(self, device: str) -> GpuLock:
        with self._guard:
            if device not in self._locks:
                self._locks[device] = GpuLock(device)
            return self._locks[device]

    def states(self) -> list[LockState]:
        with self._guard:
            locks = list(self._locks.values())
        return [lock.state() for lock in locks]
