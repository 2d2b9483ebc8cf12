"""What the host does to an eager step, and pinning the timing process to CPUs.

The host figures that move a host-bound step between fresh processes (CPU model, cores, affinity,
load, frequency governor), each None where it cannot be read; the CPU lists ``taskset -c`` takes,
read, written and applied; and a CPU run's thread count fitted to the CPUs the load leaves free.
Standard library only (torch is passed in).
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from profiler_core.spec.errors import ConfigError

# Highest CPU number a list may name (Linux's CONFIG_NR_CPUS tops out at 8192): a typo such as
# "0-99999999" is refused instead of building a huge set.
MAX_CPU = 8191
CPU_LIST_EXAMPLE = "3, 2-5 or 0,2,4"
_CPUINFO = Path("/proc/cpuinfo")
_CPU_SYSFS = Path("/sys/devices/system/cpu")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """The CPUs of a taskset-style list ("3", "2-5", "0,2,4", "0-1,6"), in ASCII digits, sorted
    and unique; () for text naming none ("", ","). ``ValueError`` saying what was expected for
    anything else."""
    cpus: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        low_text, dash, high_text = part.partition("-")
        if not _is_cpu_number(low_text) or (dash and not _is_cpu_number(high_text)):
            raise ValueError(f"expected CPU numbers such as {CPU_LIST_EXAMPLE}, got {text!r}")
        low, high = int(low_text), int(high_text) if dash else int(low_text)
        if low > high:
            raise ValueError(f"the range {part} runs backwards (write {high}-{low})")
        if high > MAX_CPU:
            raise ValueError(f"CPU {high} is beyond any machine (at most {MAX_CPU})")
        cpus.update(range(low, high + 1))
    return tuple(sorted(cpus))


def _is_cpu_number(text: str) -> bool:
    """ASCII digits only ("\u0660", "\uff11" or "\u00b2" are digits to ``str.isdigit``)."""
    return text.isascii() and text.isdigit()


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPUs as taskset writes them, runs compacted: [0, 1, 2, 3, 6] -> "0-3,6"; "" for none."""
    ordered = sorted(set(int(cpu) for cpu in cpus))
    parts: list[str] = []
    start = previous = None
    for cpu in ordered + [None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(parts)


def available_cpus() -> tuple[int, ...] | None:
    """The CPUs this process may run on (its affinity); None where the OS does not say."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return tuple(sorted(getter(0)))
    except OSError:
        return None


def check_cpus(text: str) -> tuple[int, ...]:
    """The CPUs of ``text``, each one this process may run on; ``ConfigError`` on
    ``cpu_affinity`` naming the CPUs that are not, and the ones that are."""
    try:
        cpus = parse_cpu_list(text)
    except ValueError as error:
        raise ConfigError("cpu_affinity", f"cpu_affinity: {error}",
                          f"give CPU numbers as taskset does: {CPU_LIST_EXAMPLE}") from None
    if not cpus:
        raise ConfigError("cpu_affinity", "cpu_affinity names no CPU",
                          f"give CPU numbers such as {CPU_LIST_EXAMPLE}, or leave it empty: not "
                          "pinned")
    allowed = available_cpus()
    if allowed is None or not hasattr(os, "sched_setaffinity"):
        raise ConfigError("cpu_affinity", "this system cannot pin a process to CPUs "
                                          "(os.sched_setaffinity is Linux only)",
                          "leave cpu_affinity empty here")
    missing = [cpu for cpu in cpus if cpu not in allowed]
    if missing:
        raise ConfigError("cpu_affinity",
                          f"{'CPU' if len(missing) == 1 else 'CPUs'} {format_cpu_list(missing)} "
                          f"{'is' if len(missing) == 1 else 'are'} not available to this process "
                          f"(this machine lets it run on {format_cpu_list(allowed)})",
                          f"pick CPUs among {format_cpu_list(allowed)}, or leave it empty: not "
                          "pinned")
    return cpus


def pin(text: str) -> tuple[int, ...]:
    """Pin this process to the CPUs of ``text``, checked by :func:`check_cpus`: every thread
    running now and every thread started later. Call it before torch is imported: its thread
    pools are sized from the affinity at import. When torch is already imported (a warm worker),
    its intra-op threads are capped at the number of CPUs, so that they do not crowd them."""
    cpus = check_cpus(text)
    os.sched_setaffinity(0, cpus)  # this thread, and every thread it starts from now on
    for thread in _thread_ids():  # and the threads already running (numpy's, a warm torch's)
        try:
            os.sched_setaffinity(thread, cpus)
        except OSError:
            pass  # it ended meanwhile
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads") and torch.get_num_threads() > len(cpus):
        torch.set_num_threads(len(cpus))
    return cpus


def _thread_ids() -> list[int]:
    """The ids of this process's threads (Linux: /proc/self/task); [] where not listed. Linux
    gives each thread its own affinity: pinning the process means pinning each of them."""
    try:
        return [int(name) for name in os.listdir("/proc/self/task") if name.isdigit()]
    except OSError:
        return []


def cpu_model() -> str | None:
    """The CPU's name: /proc/cpuinfo's "model name" (Linux), else ``platform.processor()``."""
    try:
        with open(_CPUINFO, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (runnable processes), or None where not available."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_governor(cpus: Iterable[int] | None) -> str | None:
    """The frequency governor of ``cpus`` (each one's scaling_governor, distinct values joined by
    commas), or None when none can be read (no cpufreq in a VM or a container)."""
    found: list[str] = []
    for cpu in cpus or ():
        try:
            text = (_CPU_SYSFS / f"cpu{cpu}" / "cpufreq" / "scaling_governor").read_text().strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text and text not in found:
            found.append(text)
    return ",".join(found) or None


def host_environment() -> dict[str, object]:
    """The host's figures for a run's environment, read now (the start of a run)."""
    cpus = available_cpus()
    return {
        "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(),
        "cpu_affinity": format_cpu_list(cpus) if cpus is not None else None,
        "cpu_governor": cpu_governor(cpus),
        "load_avg_start": load_average(),
    }


# Environment variables through which a user (or torchrun, which sets OMP_NUM_THREADS=1 for
# each rank) chooses torch's intra-op thread count: a run never changes a count set this way.
THREAD_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def free_cpus(cpus: int, load: float | None) -> int:
    """How many of ``cpus`` CPUs the 1-minute ``load`` average leaves free (at least 1)."""
    if load is None:
        return cpus
    return max(1, min(cpus, cpus - int(round(load))))


@dataclass(frozen=True)
class ThreadChoice:
    """A CPU run's torch thread count, and why (recorded in its environment as ``cpu_threads``)."""

    threads: int  # torch's intra-op threads for the run
    default: int  # torch's count before
    cpus: int  # the CPUs this process may run on
    free: int  # of them, left free by the load
    load_1m: float | None  # the 1-minute load average at the start (None: not readable)
    set_by: str  # "torch default", "this tool", "OMP_NUM_THREADS=2"... or "--cpu-affinity"
    reason: str  # a sentence

    @property
    def worth_a_note(self) -> bool:
        """The tool changed the count, or a count set by the user is more than the free CPUs."""
        return self.set_by == "this tool" or self.threads > self.free


def fit_cpu_threads(torch_module, environ: Mapping[str, str] | None = None,
                    pinned: bool = False) -> ThreadChoice:
    """For a CPU run: torch's intra-op threads cut to the CPUs the host's load leaves free, so
    that they do not queue behind other processes (docs/how-it-measures.md says by how much a
    step slows when they do). A count set by the user
    (``THREAD_SETTINGS``, or ``pinned``: ``--cpu-affinity``, which caps the threads at its CPUs)
    is kept as set. Returns what it chose and why (:class:`ThreadChoice`)."""
    settings: Mapping[str, str] = os.environ if environ is None else environ
    default = int(torch_module.get_num_threads())
    allowed = available_cpus()
    cpus = len(allowed) if allowed else (os.cpu_count() or default)
    load = load_average()
    load_1m = load[0] if load else None
    free = free_cpus(cpus, load_1m)
    chosen, set_by = default, "torch default"
    explicit = next((name for name in THREAD_SETTINGS if settings.get(name)), None)
    load_text = f"load average {load_1m:.1f}" if load_1m is not None else "load unknown"
    if explicit or pinned:
        set_by = f"{explicit}={settings[explicit]}" if explicit else "--cpu-affinity"
        reason = f"{default} thread(s), as set by {set_by} (kept; {load_text} on {cpus} CPU(s))"
        if default > free:
            reason += (f": more threads than the {free} CPU(s) the load leaves free, so they "
                       "wait for one another and for the other processes (slower steps)")
    elif default > free:
        torch_module.set_num_threads(free)
        chosen, set_by = free, "this tool"
        reason = (f"{free} thread(s) instead of torch's {default}: {load_text} on {cpus} CPU(s) "
                  f"leaves {free} free (set OMP_NUM_THREADS to choose)")
    else:
        reason = f"{default} thread(s), torch's default ({load_text} on {cpus} CPU(s))"
    return ThreadChoice(chosen, default, cpus, free, load_1m, set_by, reason)
