"""Launching a data-parallel run on this node under torchrun, and ending it whole.

Scope: the processes. ``run --nproc-per-node N`` becomes torchrun (``torchrun_main``: torch's
own, quieter) ``--nproc-per-node N --rdzv-backend c10d --rdzv-endpoint localhost:0 -m
profiler_core run ...`` (port 0: rendezvous picks a free port, so parallel runs never clash),
started in its own session, with SIGTERM as its death signal (it ends its ranks on SIGTERM, so a
launcher killed outright leaves nothing either), and a log folder of the tool's own in the
temporary folder (torchrun would leave one of its own behind every run), removed after it ends
(a killed launcher's by the next launch: ``storage.leftovers``). torchrun starts every rank in a session of its
own too, so the ranks are tracked as they appear. On cancel (Ctrl-C, SIGTERM) or the time limit
the ranks are asked to stop (SIGTERM: they agree where to stop, and rank 0 keeps what they
measured) and given ``STOP_GRACE_S`` to do so; then, as after a failed rank, torchrun's group and
every rank's group are ended (SIGTERM, then SIGKILL after ``KILL_GRACE_S``): nothing is left
running. The ranks' output passes through line by line (rank 0's ``--progress jsonl`` records
reach the launcher's stdout as they are written: torchrun redirects nothing without --tee or
--log-dir), less the marks (``spec.distributed``), which it reads: a failed rank is named from
its error line, or, where it said nothing, from the exit codes torchrun reports; a hung one from
the phase each rank last reported.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from profiler_core.spec.distributed import (
    LAUNCHED_ENV,
    RANK_PHASES,
    RankFailure,
    RankPhase,
    TorchrunFailure,
    read_marks,
)
from profiler_core.spec.errors import (
    ERROR_CLASSES,
    INTERRUPTED,
    ConfigError,
    ProfilerError,
    RankError,
    TimeLimitReached,
)
from profiler_core.storage import leftovers

KILL_GRACE_S = 3.0  # from SIGTERM to SIGKILL (within the dashboard launcher's own 5 s)
# From asking the ranks to stop to ending them: the time to agree where to stop and for rank 0 to
# save (torchrun gives its ranks 30 s after its own SIGTERM: a launcher killed meanwhile, as the
# dashboard does 5 s after its SIGTERM, still leaves them that).
STOP_GRACE_S = 25.0
POLL_S = 0.1
STOPPED_KINDS = (INTERRUPTED, TimeLimitReached.kind)  # a rank ended by the launcher
# The exit codes of a rank of the tool's that stopped when told (Ctrl-C, the time limit).
STOPPED_EXIT_CODES = frozenset({130, TimeLimitReached.exit_code})
TORCHRUN = (sys.executable, "-m", "profiler_core.orchestration.torchrun_main")


# The tool's error kinds, as a rank reports them: the launcher raises the same kind.
_KINDS = {cls.kind: cls for cls in ERROR_CLASSES if issubclass(cls, ProfilerError)}


def rank_error(record: RankFailure, then: str = "") -> ProfilerError:
    """The error a rank reported as the launcher raises it: of the same kind, its message saying
    which rank failed."""
    message = f"rank {record.rank} failed: {record.message}{then}"
    hint = record.hint
    kind = _KINDS.get(record.kind)
    if kind is ConfigError:
        return ConfigError(record.field or "nproc_per_node", message, hint)
    if kind is not None:
        return kind(message, hint)
    return RankError(message, hint)


def torchrun_argv(nproc_per_node: int, target: Sequence[str], log_dir: Path | None = None
                  ) -> list[str]:
    """torchrun on this node for ``target`` (``["-m", "profiler_core", "run", ...]`` or a script
    and its arguments): one node, rendezvous on a free local port, no restarts; its log folder
    ``log_dir`` (torchrun makes one in the temporary folder otherwise, and never removes it)."""
    logs = ["--log-dir", str(log_dir)] if log_dir is not None else []
    return [*TORCHRUN, "--nproc-per-node", str(nproc_per_node), "--nnodes", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--max-restarts", "0",
            *logs, *target]


@dataclass
class RankWatch:
    """What the ranks said while running: each one's last phase (and when), their errors in the
    order they came, and, from torchrun, the exit code of every rank that ended with an error and
    the first of them (its root cause)."""

    phases: dict[int, tuple[str, float]] = field(default_factory=dict)
    errors: list[RankFailure] = field(default_factory=list)
    exit_codes: dict[int, int] = field(default_factory=dict)
    root_cause_rank: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hear(self, line: str) -> bool:
        """Take in one output line; True when it held marks only (not to be shown)."""
        records = read_marks(line)
        with self.lock:
            for record in records:
                if isinstance(record, RankPhase):
                    self.phases[record.rank] = (record.phase, time.time())
                elif isinstance(record, RankFailure):
                    self.errors.append(record)
                elif isinstance(record, TorchrunFailure):
                    self.root_cause_rank = record.rank
                    self.exit_codes.update(record.exit_codes)
            return bool(records)

    def failure(self, exit_code: int) -> ProfilerError:
        """The error of a run whose torchrun exited with ``exit_code``: the first rank that said
        it failed, with its own message. A rank stopped by torchrun after another failed says it
        was interrupted, or that its collective lost a peer (``peer_lost``): neither is what
        failed. Where no rank said an error of its own, a rank that ended without a word (torchrun
        reports its exit code: a crash, a kill, the OOM killer) is named, torchrun's first failure
        among them; then any rank that said anything; else torchrun's first failure."""
        with self.lock:
            errors = list(self.errors)
            codes = dict(self.exit_codes)
            rank = self.root_cause_rank
        said = {e.rank for e in errors}
        silent = sorted(r for r, code in codes.items() if r not in said and code not in
                        STOPPED_EXIT_CODES)
        own = [e for e in errors if e.kind not in STOPPED_KINDS and not e.peer_lost]
        failed = own or ([] if silent else errors)
        if not failed:
            who = rank if rank in silent or not silent else silent[0]
            code = codes.get(who) if who is not None else None
            how = f" (exit code {code})" if code is not None else ""
            others = sorted((set(codes) | said) - {who})
            then = f"; then rank(s) {', '.join(map(str, others))} stopped" if others else ""
            return RankError(f"{f'rank {who}' if who is not None else 'a rank'} of the "
                             f"data-parallel run ended{how} without saying why{then}; torchrun "
                             f"exited with code {exit_code}",
                             "a rank that ends without an error of its own was killed or crashed "
                             "(out of memory, a fault in native code): see its output above, if "
                             "any, and the system log")
        first = failed[0]
        others = sorted(said - {first.rank})
        then = f" (then rank(s) {', '.join(map(str, others))} stopped too)" if others else ""
        return rank_error(first, then)

    def stuck_text(self, world_size: int) -> str:
        """Which rank held the run up: the one furthest behind in ``RANK_PHASES`` (the longest
        silent among equals), with every rank's last phase."""
        with self.lock:
            phases = dict(self.phases)
        if not phases:
            return "no rank reported a phase (stuck starting: rendezvous or process-group set-up)"
        now = time.time()
        missing = [rank for rank in range(world_size) if rank not in phases]
        if missing:
            return (f"rank {missing[0]} never reported a phase (stuck starting); "
                    + _phases_text(phases, now))

        def behind(rank: int) -> tuple[int, float]:
            phase, heard = phases[rank]
            order = RANK_PHASES.index(phase) if phase in RANK_PHASES else len(RANK_PHASES)
            return order, heard
        slowest = min(phases, key=behind)
        return f"rank {slowest} is furthest behind; " + _phases_text(phases, now)


def _phases_text(phases: dict[int, tuple[str, float]], now: float) -> str:
    return "; ".join(f"rank {rank} in '{phase}' for {now - heard:.0f} s"
                     for rank, (phase, heard) in sorted(phases.items()))


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat), to tell it from a later one."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry))
    return children


class ProcessTree:
    """torchrun and every process it started, remembered as they appear (with their start
    times, so a pid reused later is never signalled)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.known: dict[int, str | None] = {root: _start_time(root)}

    def refresh(self) -> None:
        tree = children()
        queue = [self.root]
        while queue:
            for child in tree.get(queue.pop(), []):
                if child not in self.known:
                    self.known[child] = _start_time(child)
                queue.append(child)

    def alive(self) -> list[int]:
        return [pid for pid, started in self.known.items()
                if started is not None and _start_time(pid) == started]

    def ranks(self) -> list[int]:
        """The live processes torchrun started itself: its ranks."""
        started = set(children().get(self.root, []))
        return [pid for pid in self.alive() if pid in started]

    def signal(self, number: int) -> None:
        signal_sessions(self.alive(), number)


def signal_sessions(pids: Sequence[int], number: int) -> None:
    """Signal ``number`` to the process group of each of ``pids`` (torchrun starts each rank in a
    session of its own), then to the process itself."""
    for pid in pids:
        for send in (os.killpg, os.kill):
            try:
                send(pid, number)
            except (ProcessLookupError, PermissionError):
                pass


def end_tree(process: subprocess.Popen, tree: ProcessTree, grace_s: float = KILL_GRACE_S) -> None:
    """End torchrun and every process it started: SIGTERM, then SIGKILL after ``grace_s``;
    returns once torchrun has been reaped and none of them is left."""
    tree.refresh()
    tree.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (process.poll() is None or len(tree.alive()) > 0):
        tree.refresh()
        time.sleep(POLL_S)
    tree.signal(signal.SIGKILL)
    process.wait()
    for _ in range(50):  # killed processes vanish once their parents reap them
        if not tree.alive():
            break
        time.sleep(POLL_S)


_PR_SET_PDEATHSIG = 1


def _death_signal() -> Callable[[], None] | None:
    """For the child: SIGTERM when this process's launching thread ends, however it ends (a
    SIGKILL of ours would otherwise leave torchrun, in its own session, and its ranks running;
    torchrun ends its ranks on SIGTERM). The libc call is looked up here, before the fork, so the
    child only calls it. None where there is no prctl (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    term = int(signal.SIGTERM)

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, term, 0, 0, 0)
    return arm


def _pump(stream: IO[str], out: IO[str], watch: RankWatch) -> None:
    for line in stream:
        if not watch.hear(line):
            try:
                out.write(line)
                out.flush()
            except (OSError, ValueError):
                pass


def ask_ranks_to_stop(process: subprocess.Popen, tree: ProcessTree,
                      grace_s: float = STOP_GRACE_S) -> int | None:
    """Send every rank SIGTERM (a rank of the tool's agrees with the others where to stop, and
    rank 0 keeps what they measured) and wait up to ``grace_s`` for torchrun to end; its exit
    code, or None when it did not end in time."""
    tree.refresh()
    for pid in tree.ranks():
        try:
            os.kill(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while process.poll() is None and time.monotonic() < deadline:
        tree.refresh()
        time.sleep(POLL_S)
    return process.poll()


def run_torchrun(nproc_per_node: int, target: Sequence[str], timeout_s: float = 0.0,
                 stdout: IO[str] | None = None, stderr: IO[str] | None = None) -> int:
    """Run ``target`` under torchrun with ``nproc_per_node`` ranks; returns 0 when every rank
    exited 0. Raises ``RankError`` naming the failed rank, ``TimeLimitReached`` (naming
    the rank that held the run up) after ``timeout_s`` (0: no limit), and passes on
    ``KeyboardInterrupt`` (Ctrl-C, SIGTERM through ``stopping.RunStopper``). At the time limit
    or on Ctrl-C the ranks are first asked to stop (:func:`ask_ranks_to_stop`: they keep what
    they measured; when they finish the run instead, it returns 0); in every case torchrun and
    all its ranks are ended before it returns or raises."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    temporary = Path(tempfile.gettempdir())
    leftovers.remove_stale(temporary)  # a killed launcher's torchrun logs
    logs = Path(tempfile.mkdtemp(prefix=leftovers.tagged(leftovers.TORCHRUN_LOGS), dir=temporary))
    try:
        return _run_and_watch(torchrun_argv(nproc_per_node, target, logs), nproc_per_node,
                              timeout_s, out, err)
    finally:
        shutil.rmtree(logs, ignore_errors=True)  # ours, made just now


def _run_and_watch(argv: list[str], nproc_per_node: int, timeout_s: float, out: IO[str],
                   err: IO[str]) -> int:
    """:func:`run_torchrun`'s work, once its log folder is made."""
    process = subprocess.Popen(argv, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, errors="replace",
                               start_new_session=True, preexec_fn=_death_signal(),
                               env={**os.environ, LAUNCHED_ENV: "1"})
    tree, watch = ProcessTree(process.pid), RankWatch()
    pumps = [threading.Thread(target=_pump, args=(process.stdout, out, watch), daemon=True),
             threading.Thread(target=_pump, args=(process.stderr, err, watch), daemon=True)]
    for pump in pumps:
        pump.start()
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        while process.poll() is None:
            tree.refresh()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeLimitReached(f"no result within the time limit of {timeout_s:g} s: "
                                       + watch.stuck_text(nproc_per_node))
            time.sleep(POLL_S)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or the time limit: the ranks keep what they measured
        try:
            ended = ask_ranks_to_stop(process, tree)
        finally:
            end_tree(process, tree)
        if ended == 0:
            return 0  # they had finished: the run is complete and saved
        raise
    except BaseException:
        end_tree(process, tree)
        raise
    finally:
        for pump in pumps:
            pump.join(timeout=5)
    code = process.returncode
    if tree.alive():
        end_tree(process, tree)
    if code != 0:
        raise watch.failure(code)
    return 0
