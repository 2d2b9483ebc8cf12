"""A bad-input campaign with counts, for the record (not a test: ``tests/test_*`` hold the checks).

Usage: python tests/fuzz/campaign.py [--seed N] [--scale K] [--only CATEGORY[,CATEGORY]] [--jobs J]
                                     [--case N] [--keep DIR] [--log FILE]

Per category (``--only``: cli, trace-stats, sweep, predict, index, loader, uploads, dashboard,
workload, serve, and issue 27's caches, manifests, bench, repeats, ddp) it generates bad inputs
from the seed, the cases of issues 18 and 27 among them, and
feeds each to the real entry point in a fresh process: ``python -m profiler_core ...``; the
dashboard's pages through Streamlit's AppTest in a process per hostile runs folder
(``children.py dashboard``); the run-folder loader and uploads in a forked process per case
(``children.py forks``: the imports done once, the case in a child of its own). Every process
runs under a 4 GiB address-space limit (RLIMIT_AS) and a time limit, in a session of its own
with a marker in its environment, inside a folder of its own (its working directory, $HOME and
$TMPDIR are in it). It counts, per case:

- clean: exit 0, or a refusal with an exit code the README documents (0, 2-8, 124, 130; a sweep
  also 1) whose stderr ends in its one ``error: `` line;
- traceback: a Python traceback on stdout or stderr, or an exception shown by a page;
- hang: over the time limit (killed);
- memory: MemoryError, a C++ bad_alloc, or killed by a signal (what the limit ends in);
- files changed outside: any path under the case's folder changed, added or removed, other than
  the case's own output folder (and, for ``index``, the runs folder's index file); "destroyed"
  counts the cases where something that was there before was changed or removed;
- orphans: a process carrying the case's marker still alive after the case ended (after a
  grace of 3 s; 20 s where the case kills a launcher, whose children get 10 s to stop);
- other: not clean for another reason (an undocumented exit code, a refusal in several lines).

A case may count in several columns; clean means none. Every non-clean case is printed with its
reproduction (``--case N --only CATEGORY --keep DIR`` keeps its folder) and written to ``--log``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import hashlib
import io
import json
import math
import os
import random
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

PY = sys.executable
LIMIT_AS = 4 * 2**30
MARKER = "PROFILER_FUZZ_CASE"
CHILDREN = str(REPO / "tests" / "fuzz" / "children.py")
# Sets the limit, then becomes the command (the limit holds for it and its children).
STUB = ("import os, resource, sys; limit = int(sys.argv[1]); "
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit)); os.execv(sys.argv[2], sys.argv[2:])")
READ_ONLY = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]  # root obeys modes
RUN_CODES = frozenset({0, 2, 3, 4, 5, 6, 7, 8, 124, 130})
SWEEP_CODES = RUN_CODES | {1}
MEMORY_WORDS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "can't allocate memory")

CATEGORIES = {  # key: (name in the table, cases at scale 1)
    "cli": ("CLI, every subcommand, `--out`", 160),
    "trace-stats": ("trace-stats", 120),
    "sweep": ("sweep", 60),
    "predict": ("predict", 120),
    "index": ("index", 80),
    "loader": ("run-folder loader", 600),
    "uploads": ("uploads", 150),
    "dashboard": ("dashboard pages", 40),  # hostile runs folders, 8 pages each
    "workload": ("`--workload`", 50),
    "serve": ("serve / launcher", 36),
    "caches": ("bytecode and calibration caches", 60),
    "manifests": ("`--overwrite`, tampered manifests", 80),
    "bench": ("`bench --out`", 60),
    "repeats": ("`--repeats`: time limit, stops, kills", 24),
    "ddp": ("data-parallel: stops, kills, failing ranks", 24),
}
PAGES = ["views/overview.py", "views/counters.py", "views/latency.py", "views/launch_split.py",
         "views/gpu.py", "views/kernels.py", "views/runs.py", "views/sweep.py"]

NASTY = ["", " ", ".", "..", "-1", "0", "1e308", "nan", "inf", "-inf", "1_000", "9" * 40, "0x10",
         "a\nb", "a\rb", "\u2028", "'; rm -rf /", "$(touch pwned)", "=cmd|' /C calc'!A0",
         "![x](http://attacker.invalid/p.png)", "é", "😀", "--help", "cuda:99", "cuda:-1", "cpu\n",
         "1" + "0" * 400, "x" * 5000, "\udcff", "-0", "1e-320", "true", "[1]", "{}"]
TINY = ["--device", "cpu", "--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4",
        "--replays", "20", "--trials", "4", "--progress", "none"]
SWEEP_BASE = ["--device", "cpu", "--d-in", "16", "--hidden", "16", "--d-out", "8", "--replays", "20",
              "--no-profile", "--progress", "none"]


# ----------------------------------------------------------------------------- one case


@dataclass
class Spec:
    """What a case runs and what it may change. Paths in ``allowed`` are relative to the case's
    folder; anything under them is the case's own output."""

    argv: list = field(default_factory=list)  # after the interpreter: ["-m", "profiler_core", ...]
    kind: str = "proc"  # proc | dashboard | fork
    allowed: list[str] = field(default_factory=list)
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = "cwd"
    timeout: float = 90.0
    codes: frozenset = RUN_CODES
    read_only: bool = False  # run without root's override of file modes
    interact: Callable | None = None  # (Popen, root, case id) -> (code, out, err, hang, note)
    grace: float = 3.0  # seconds the case's other processes get to end after it
    call: tuple | None = None  # kind fork: (name, args)
    label: str = ""  # what the case is, for the report


@dataclass
class Result:
    category: str
    index: int
    label: str
    flags: set
    detail: str
    repro: str


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links, fifos and folders too) with its mode and content hash
    (size, inode and modification time for files over 16 MiB)."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            key = os.path.relpath(path, root)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode):
                seen[key] = "link->" + os.readlink(path)
            elif stat.S_ISDIR(info.st_mode):
                seen[key] = f"dir {info.st_mode:o}"
            elif stat.S_ISREG(info.st_mode):
                if info.st_size > 16 * 2**20:
                    seen[key] = f"{info.st_mode:o} {info.st_size} {info.st_ino} {info.st_mtime_ns}"
                else:
                    try:
                        with open(path, "rb") as handle:
                            digest = hashlib.sha256(handle.read()).hexdigest()
                    except OSError as error:
                        digest = f"unreadable {error.errno}"
                    seen[key] = f"{info.st_mode:o} {digest}"
            else:
                seen[key] = f"special {info.st_mode:o}"
    return seen


def outside_changes(before: dict, after: dict, allowed: list[str]) -> tuple[list[str], bool]:
    """Paths changed outside ``allowed`` (and the new, empty folders on the way to one of them),
    and whether any of them existed before (destroyed or changed)."""
    allowed = [os.path.normpath(a) for a in allowed]

    def inside(key: str) -> bool:  # "x*": names starting so; "x$": that entry alone; "x": and below
        return any(key.startswith(a[:-1]) if a.endswith("*") else key == a[:-1] if a.endswith("$")
                   else key == a or key.startswith(a + os.sep) for a in allowed)

    def on_the_way(key: str) -> bool:
        return key not in before and after.get(key, "").startswith("dir") and any(
            a.startswith(key + os.sep) for a in allowed)

    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    outside = [k for k in changed if not inside(k) and not on_the_way(k)]
    return outside, any(k in before for k in outside)


def marked_processes(case_id: str) -> list[int]:
    """Live processes (zombies excepted) whose environment carries the case's marker."""
    needle = f"{MARKER}={case_id}\0".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                environ = handle.read()
            if not (environ.startswith(needle) or b"\0" + needle in environ):
                continue
            with open(f"/proc/{entry.name}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in "ZX":
                    continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def case_env(root: Path, case_id: str, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PROFILER_", "STREAMLIT_", "PYTEST")) and k != "PYTHONPATH"}
    env.update(HOME=str(root / "home"), TMPDIR=str(root / "tmp"), PYTHONPATH=str(REPO),
               PYTHONDONTWRITEBYTECODE="1", PROFILER_RUNS_ROOT=str(root), **{MARKER: case_id})
    env.update(extra)
    return env


def judge(code: int | None, out: str, err: str, codes: frozenset) -> tuple[set, str]:
    """The flags of a finished process: {} when clean."""
    text = out + err
    if "Traceback (most recent call last)" in text or "Fatal Python error" in text:
        memory = any(word in text for word in MEMORY_WORDS)
        return {"memory" if memory else "traceback"}, err[-3000:] or out[-3000:]
    if code is None:
        return set(), ""
    if code < 0:
        return {"memory"}, f"killed by signal {-code}: " + err[-1500:]
    if code not in codes:
        return {"other"}, f"exit {code}: " + err[-1500:]
    if code in (0, 130):  # done, or stopped as asked (a sweep then says how to resume)
        return set(), ""
    if codes is SWEEP_CODES and "point(s) failed; each is recorded in points.csv" in err:
        return set(), ""  # a sweep whose points failed: their errors are in its table (README)
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if len(errors) == 1 and lines[-1] == errors[0]:
        return set(), ""
    return {"other"}, f"exit {code} without one closing error line: " + err[-1500:]


def spawn(spec: Spec, root: Path, case_id: str) -> tuple[int | None, str, str, bool, str]:
    """Run the case's process: (exit code, stdout, stderr, hang, note)."""
    command = [PY, "-S", "-c", STUB, str(LIMIT_AS), PY, *spec.argv]
    if spec.read_only:
        command = READ_ONLY + command
    env = case_env(root, case_id, spec.env)
    proc = subprocess.Popen(command, cwd=root / spec.cwd, env=env, start_new_session=True,
                            stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if spec.interact is not None:
        return spec.interact(proc, root, case_id)
    return (*collect(proc, spec.stdin, spec.timeout), "")


def collect(proc: subprocess.Popen, stdin: bytes | None, timeout: float) -> tuple[int | None, str, str, bool]:
    """Feed stdin, wait for the process (its session killed past ``timeout``: a hang) and read
    what it wrote: (exit code, stdout, stderr, hang). A process it left behind that holds the
    pipes open does not hold the campaign up (it is counted as an orphan afterwards)."""
    out, err = [], []
    threads = [threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
               threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True)]
    if stdin is not None and proc.stdin is not None:
        threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True))
    for thread in threads:
        thread.start()
    hang = False
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        hang = True
        _kill_group(proc)
        proc.wait()
    for thread in threads[:2]:
        thread.join(2.0)
    return (proc.returncode, b"".join(out).decode(errors="replace"),
            b"".join(err).decode(errors="replace"), hang)


def _drain(stream, sink: list[bytes]) -> None:
    try:
        sink.extend(iter(lambda: stream.read1(1 << 16), b""))  # appended as they come
    except (OSError, ValueError):
        pass


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (OSError, ValueError):  # the process stopped reading (a refused request)
        pass


def run_process(spec: Spec, root: Path, case_id: str) -> tuple[set, str]:
    code, out, err, hang, note = spawn(spec, root, case_id)
    flags, detail = judge(None if hang else code, out, err, spec.codes)
    if hang:
        flags.add("hang")
        detail = f"no end within {spec.timeout} s; stderr: " + err[-1500:]
    return flags, (note + " " + detail).strip()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


class Forks:
    """A ``children.py forks`` server per worker thread."""

    local = threading.local()
    lock = threading.Lock()
    servers: ClassVar[list[subprocess.Popen]] = []

    @classmethod
    def call(cls, request: dict) -> dict:
        server = getattr(cls.local, "server", None)
        if server is None or server.poll() is not None:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PROFILER_")}
            env.update(PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
            server = subprocess.Popen([PY, CHILDREN, "forks"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                      env=env, cwd=REPO)
            assert json.loads(server.stdout.readline())["ready"]
            cls.local.server = server
            with cls.lock:
                cls.servers.append(server)
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        return json.loads(server.stdout.readline())

    @classmethod
    def close(cls) -> None:
        for server in cls.servers:
            server.stdin.close()
            server.wait(30)


def run_fork(spec: Spec, root: Path) -> tuple[set, str]:
    name, args = spec.call
    answer = Forks.call({"call": name, "args": args, "limit": LIMIT_AS, "cwd": str(root / spec.cwd),
                         "timeout": spec.timeout})
    outcome = answer["outcome"]
    flag = {"ok": None, "refused": None, "multiline": "other", "traceback": "traceback",
            "memory": "memory", "hang": "hang"}[outcome]
    return ({flag} if flag else set()), (answer.get("detail", "") if flag else "")


def run_dashboard(spec: Spec, root: Path, case_id: str) -> list[tuple[str, set, str]]:
    """One (page, flags, detail) per page visited."""
    code, out, err, hang, _ = spawn(spec, root, case_id)
    pages, started = [], None
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if "start" in record:
            started = record["start"]
            continue
        started = None
        flags, detail = set(), ""
        problems = record.get("exception") or []
        if problems:
            text = "\n".join(problems)
            flags.add("memory" if any(w in text for w in MEMORY_WORDS) else "traceback")
            detail = text[-3000:]
        for key, flag in (("memory", "memory"), ("hang", "hang"), ("harness", "traceback")):
            if key in record:
                flags.add(flag)
                detail = record[key]
        shown_errors = record.get("errors") or []
        if not flags and (not (record.get("titles") or shown_errors)
                          or any("This server listens" in e for e in shown_errors)):
            flags.add("other")  # the page drew nothing, or the app refused to serve at all
            detail = f"the page drew no title and no refusal (errors shown: {shown_errors})"
        pages.append((record["page"], flags, detail))
    if started is not None:  # the process ended (or was stopped) during this page
        flags = {"hang"} if hang else {"memory"} if (code or 0) < 0 or any(
            w in err for w in MEMORY_WORDS) else {"traceback"}
        pages.append((started, flags, f"the page never finished (exit {code}): {err[-1500:]}"))
    elif not pages:
        pages.append(("(start)", {"hang"} if hang else {"traceback"},
                      f"no page ran (exit {code}): {err[-1500:]}"))
    return pages


@dataclass
class Case:
    category: str
    index: int
    build: Callable[[Path, random.Random], Spec]


def execute(case: Case, sandbox: Path, seed: int, keep: Path | None) -> list[Result]:
    case_id = f"{case.category}-{case.index}-{os.getpid()}-{seed}"
    root = sandbox / case.category / f"{case.index:04d}"
    for sub in ("home", "tmp", "cwd"):
        (root / sub).mkdir(parents=True)
    rng = random.Random(f"{seed}/{case.category}/{case.index}")
    spec = case.build(root, rng)
    before = snapshot(root)
    started = time.monotonic()
    if spec.kind == "fork":
        entries = [("", *run_fork(spec, root))]
    elif spec.kind == "dashboard":
        entries = run_dashboard(spec, root, case_id)
    else:
        entries = [("", *run_process(spec, root, case_id))]
    # the case's other processes: given the grace period to end, then counted and ended
    deadline = time.monotonic() + spec.grace
    while (left := marked_processes(case_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    after = snapshot(root)
    allowed = list(spec.allowed)
    if any("exit 7" in detail for _, _, detail in entries):
        allowed += [f"tmp/{name}" for name in os.listdir(root / "tmp")
                    if name.startswith("profiler_core_unsaved_")]
    outside, destroyed = outside_changes(before, after, allowed)
    repro = (f"python tests/fuzz/campaign.py --seed {seed} --only {case.category} --case {case.index} "
             f"--keep DIR  # {spec.label}: {shlex.join(str(a) for a in spec.argv)[:600]}")
    results = []
    for number, (page, flags, detail) in enumerate(entries):
        flags = set(flags)
        if number == len(entries) - 1:  # the folder's changes and leftovers, once per case
            if outside:
                flags.add("destroyed" if destroyed else "changed")
                detail += f" changed outside the output: {outside[:6]}"
            if left:
                flags.add("orphans")
                detail += f" {len(left)} process(es) of the case outlived it"
        label = f"{spec.label} [{page}]" if page else spec.label
        results.append(Result(case.category, case.index, label, flags, detail.strip(), repro))
    if keep is not None and any(r.flags for r in results):
        shutil.copytree(root, keep / case.category / f"{case.index:04d}", symlinks=True,
                        ignore=lambda folder, names: [n for n in names if _big(Path(folder) / n)],
                        dirs_exist_ok=True)
    if keep is None or not any(r.flags for r in results):
        _remove(root)
    print(f"  {case.category} {case.index}: {time.monotonic() - started:.1f} s "
          f"{sorted(set().union(*(r.flags for r in results))) or 'clean'}  {spec.label[:100]!r}", flush=True)
    return results


def _big(path: Path) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and path.stat().st_size > 8 * 2**20
    except OSError:
        return True


def _remove(root: Path) -> None:
    for folder, dirs, _ in os.walk(root):  # folders a case made read-only
        for name in dirs:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- the table


class Tally:
    COLUMNS: ClassVar[list[str]] = ["tried", "clean", "traceback", "hang", "memory", "files changed outside", "orphans",
               "other"]

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, int]] = {}

    def add(self, result: Result) -> None:
        row = self.rows.setdefault(result.category, {c: 0 for c in self.COLUMNS} | {"destroyed": 0})
        row["tried"] += 1
        flags = result.flags
        row["clean"] += not flags
        for flag in ("traceback", "hang", "memory", "orphans", "other"):
            row[flag] += flag in flags
        row["files changed outside"] += bool(flags & {"changed", "destroyed"})
        row["destroyed"] += "destroyed" in flags

    def show(self) -> str:
        lines = ["| category | " + " | ".join(self.COLUMNS) + " |",
                 "|---|" + "---:|" * len(self.COLUMNS)]
        for key in CATEGORIES:
            if key not in self.rows:
                continue
            row = self.rows[key]
            cells = [f"{row[c]:,}" for c in self.COLUMNS]
            changed = row["files changed outside"]
            cells[5] = f"{changed} ({row['destroyed']} destroyed)" if row["destroyed"] else str(changed)
            lines.append(f"| {CATEGORIES[key][0]} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- fixtures


class Fixtures:
    """Built once per campaign, copied into each case's folder."""

    def __init__(self, folder: Path) -> None:
        from conftest import synthetic_trace, write_synthetic_run
        from test_output_safety import a_run

        folder.mkdir(parents=True)
        self.folder = folder
        self.real_run = a_run(folder / "real-run")  # a CPU run, as `run --device cpu` writes it
        self.synthetic = write_synthetic_run(folder / "synthetic-run")  # a CUDA run's shape
        self.sweep = self._stopped_sweep(folder / "stopped-sweep")
        self.recorded_sweep = REPO / "tests" / "data" / "sweep_batch_dtype"
        self.traces = [REPO / "tests" / "data" / "h200_launch_bound" / "trace_eager.json.gz",
                       REPO / "tests" / "data" / "h200_launch_bound" / "trace_graph.json",
                       REPO / "dashboard" / "sample_run" / "trace_eager.json.gz",
                       self.synthetic / "trace_eager.json", self.synthetic / "trace_graph.json"]
        self.synthetic_events = synthetic_trace("eager", iterations=6)["traceEvents"]
        self.stats_out = folder / "stats-out"  # what trace-stats --out wrote
        subprocess.run([PY, "-m", "profiler_core", "trace-stats", str(self.synthetic / "trace_eager.json"),
                        "--out", str(self.stats_out)], check=True, cwd=REPO, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
        self.indexed_runs = folder / "indexed-runs"  # a runs folder with its index
        shutil.copytree(self.real_run, self.indexed_runs / "a")
        subprocess.run([PY, "-m", "profiler_core", "index", "--runs", str(self.indexed_runs)],
                       check=True, cwd=REPO, capture_output=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
        self.heavy = folder / "heavy"
        self.heavy.mkdir()
        self._heavy_traces()

    def _stopped_sweep(self, folder: Path) -> Path:
        from test_sweep import FakeLauncher, small_plan

        from profiler_core.sweep.runner import SweepRunner

        runner = None

        def stop_after_one(progress):
            if progress.points_finished == 1:
                runner.stop()

        runner = SweepRunner.create(small_plan("8,16,32"), folder, launcher=FakeLauncher(),
                                    on_progress=stop_after_one)
        assert runner.run().status == "stopped"
        return folder

    def _heavy_traces(self) -> None:
        """The issue's big traces, made once: many tiny events, 60,000 distinct 4 kB kernel
        names, and a JSON of 530 MiB inflated from a small gzip."""
        with gzip.open(self.heavy / "tiny-events.json.gz", "wb", compresslevel=1) as packed:
            packed.write(b'{"traceEvents": [')
            event = b'{"ph":"X","cat":"kernel","name":"k","ts":1,"dur":1,"pid":0,"tid":7},'
            packed.write(event * 1_100_000)
            packed.write(b'{"ph":"i","name":"end","ts":2}]}')
        with gzip.open(self.heavy / "many-names.json.gz", "wb", compresslevel=1) as packed:
            packed.write(b'{"traceEvents": [')
            for number in range(60_000):
                name = f"kernel_{number:06d}_" + "x" * 4080
                packed.write(json.dumps({"ph": "X", "cat": "kernel", "name": name, "ts": number,
                                         "dur": 1, "pid": 0, "tid": 7}).encode() + b",")
            packed.write(b'{"ph":"i","name":"end","ts":2}]}')
        with gzip.open(self.heavy / "bomb.json.gz", "wb", compresslevel=1) as packed:
            packed.write(b'{"traceEvents": [')
            chunk = b" " * 2**20
            for _ in range(530):
                packed.write(chunk)
            packed.write(b"]}")
        steps = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": n * 10,
                  "dur": 5, "pid": 1, "tid": 1} for n in range(300_000)]
        with gzip.open(self.heavy / "step-markers.json.gz", "wt", compresslevel=1) as packed:
            json.dump({"traceEvents": steps}, packed)


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def csv_cell(value: str) -> str:
    if any(c in value for c in ',"\n\r') or value != value.strip():
        return '"' + value.replace('"', '""') + '"'
    return value


EXTREMES = ["1e308", "-1e308", "1e400", "-0", "1e-320", "nan", "NaN", "inf", "-inf", "", "True", "false",
            "9" * 30, "-1", "0", "1.5", "0x1p3", "1,5", "١٢", "None", "null", "[]"]
WRONG_JSON = [{"a": 1}, [1, 2], "fast", True, False, None, 10**400, -(10**400), 1e308, -1, 0,
              "\ud800", "=cmd|' /C calc'!A0", [[[[]]]], {"": {"": None}}]


def _tables(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.suffix == ".csv" and p.is_file() and not p.is_symlink())


def _read_summary(run: Path) -> dict | None:
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return summary if isinstance(summary, dict) else None


def _write_json(path: Path, data) -> None:
    """JSON as Python writes it, lone surrogates kept as escapes, NaN and Infinity as literals."""
    path.write_text(json.dumps(data), encoding="utf-8")


def _rewrite_rows(path: Path, rng: random.Random, edit: Callable[[list[list[str]]], None]) -> None:
    import csv

    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        rows = [["x"]]
    edit(rows)
    with open(path, "w", newline="", encoding="utf-8", errors="surrogatepass") as handle:
        csv.writer(handle).writerows(rows)  # lone surrogates as their (invalid) UTF-8 bytes


def damage_run(rng: random.Random, run: Path, heavy: bool = True) -> str:
    """One damage a user, a disk or an attacker could do to a run folder; returns what it was."""
    tables = _tables(run)
    families = ["cell"] * 6 + ["cells"] * 2 + ["column", "truncate", "empty", "missing", "garbage",
                "dup-stats", "headline", "headline"] + ["summary-key"] * 3 + [
                "config-field", "config-field", "surrogates", "schema2-big", "summary-text",
                "special", "manifest", "names", "extra", "bool-column", "trace"]
    if heavy:
        families += ["rows-1m", "nvml-nul", "long-line"]
    kind = rng.choice(families)
    summary = _read_summary(run)
    if kind in ("cell", "cells", "column", "bool-column") and tables:
        table = rng.choice(tables)

        def edit(rows):
            if kind == "column":
                how = rng.choice(["rename", "drop", "add"])
                col = rng.randrange(len(rows[0]))
                for number, row in enumerate(rows):
                    if how == "drop" and col < len(row):
                        del row[col]
                    elif how == "add":
                        row.append("extra" if number == 0 else rng.choice(EXTREMES + NASTY))
                    elif how == "rename" and number == 0:
                        row[col] = rng.choice(NASTY)
                return
            for _ in range(1 if kind == "cell" else rng.randint(2, 40)):
                if len(rows) < 2:
                    rows.append(list(rows[0]))
                row = rows[rng.randrange(1, len(rows))]
                col = rng.randrange(max(1, len(row)))
                value = "True" if kind == "bool-column" else rng.choice(EXTREMES + NASTY)
                if col < len(row):
                    row[col] = value
            if kind == "bool-column":
                col = rng.randrange(len(rows[0]))
                for row in rows[1:]:
                    if col < len(row):
                        row[col] = rng.choice(["True", "false"])

        _rewrite_rows(table, rng, edit)
        return f"{kind} in {table.name}"
    target = rng.choice(tables + [run / "summary.json", run / "manifest.json"])
    if kind == "truncate" and target.exists():
        data = target.read_bytes()
        target.write_bytes(data[:rng.randrange(len(data) + 1)])
        return f"{target.name} truncated"
    if kind == "empty":
        target.write_bytes(b"")
        return f"{target.name} empty"
    if kind == "missing":
        target.unlink(missing_ok=True)
        return f"{target.name} missing"
    if kind == "garbage" and target.exists():
        data = bytearray(target.read_bytes())
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.choice([b"\x00", b"\xff\xfe", bytes(rng.randrange(256) for _ in range(64)),
                                  b"\r", b'"', b"\x1b[31m", b"\xed\xa0\x80"])
        target.write_bytes(bytes(data))
        return f"bytes inserted in {target.name}"
    if kind == "dup-stats" and (run / "stats.csv").exists():
        _rewrite_rows(run / "stats.csv", rng, lambda rows: rows.extend(
            [cell if i < 2 else csv_cell("9") for i, cell in enumerate(row)] for row in list(rows[1:])))
        return "stats.csv rows duplicated with other numbers"
    if summary is None:
        (run / "summary.json").write_text(json.dumps({"tool": "profiler_core", "schema_version": 3}))
        return "summary.json replaced by a bare one"
    if kind == "headline":
        head = summary.get("headline")
        if isinstance(head, dict):
            every = rng.random() < 0.5
            for key in list(head):
                if every or rng.random() < 0.2:
                    head[key] = rng.choice(WRONG_JSON)
        _write_json(run / "summary.json", summary)
        return "headline values of the wrong type"
    if kind == "summary-key":
        key = rng.choice(["schema_version", "complete", "notes", "config", "headline", "tool",
                          "environment", "kind"])
        values = {"schema_version": [1, 2, 3, 4, True, "3", None, 1e308, -1, 0, 2.0, 10**400],
                  "notes": ["x", [1, {}], None, ["\ud800"], ["n" * 100_000], ["a\nb"] * 5000]}
        summary[key] = rng.choice(values.get(key, WRONG_JSON))
        _write_json(run / "summary.json", summary)
        return f"summary.json {key} = {str(summary[key])[:40]!r}"
    if kind == "config-field":
        config = summary.get("config")
        if isinstance(config, dict) and config:
            key = rng.choice(list(config))
            config[key] = rng.choice(WRONG_JSON + [rng.choice(NASTY), 2**31, 2**63, -2**63])
            _write_json(run / "summary.json", summary)
            return f"config {key} = {str(config[key])[:40]!r}"
        return "config not a dict already"
    if kind == "surrogates":
        env = summary.get("environment") if isinstance(summary.get("environment"), dict) else {}
        env.update(gpu_name="GPU \udcff", torch_version="\ud800", started_at="\udfff")
        summary["environment"] = env
        summary["notes"] = ["a note \udcff", "\ud800"]
        if isinstance(summary.get("headline"), dict):
            summary["headline"]["odd_\udcff_ms"] = 1.0
        _write_json(run / "summary.json", summary)
        return "lone surrogates in summary.json"
    if kind == "schema2-big":
        summary["schema_version"] = 2
        if isinstance(summary.get("headline"), dict):
            summary["headline"].update(graph_pool_bytes=10**400, capture_ms=-(10**400),
                                       eager_median_ms=10**400)
        _write_json(run / "summary.json", summary)
        (run / "metrics.csv").unlink(missing_ok=True)
        return "schema-2 headline with 400-digit integers"
    if kind == "summary-text":
        text = rng.choice(["{", "[" * 100_000, "\ufeff" + json.dumps(summary), "NaN", "null", "[]",
                           json.dumps(summary) + " " * 5_000_000, '{"tool": "profiler_core", "tool": 1}',
                           json.dumps(summary).replace("{", "{ ", 1) * 2])
        (run / "summary.json").write_text(text, encoding="utf-8", errors="surrogatepass")
        return f"summary.json text {text[:20]!r}..."
    if kind == "special":
        victim = rng.choice(tables + [run / "summary.json"])
        victim.unlink(missing_ok=True)
        how = rng.choice(["fifo", "zero", "urandom", "folder", "dangling", "outside"])
        if how == "fifo":
            os.mkfifo(victim)
        elif how in ("zero", "urandom"):
            victim.symlink_to(f"/dev/{how}")
        elif how == "folder":
            victim.mkdir()
        elif how == "dangling":
            victim.symlink_to(run / "absent")
        else:
            victim.symlink_to("/etc/hostname")
        return f"{victim.name} is a {how}"
    if kind == "manifest":
        value = rng.choice([{"tool": "other", "files": {}}, [], "x", {"tool": "profiler_core", "kind": "run",
                            "manifest_version": True, "files": {"summary.json": -1}},
                            {"tool": "profiler_core", "kind": "run", "manifest_version": 1,
                             "files": {f"f{i}": 10**400 for i in range(1000)}}])
        _write_json(run / "manifest.json", value)
        return "manifest.json damaged"
    if kind == "names":
        target = rng.choice([run / "kernels.csv", run / "counters.csv", run / "latency.csv"])
        if target.exists():
            name = rng.choice(["k" * 4096, "![x](http://attacker.invalid/p.png)", "=1+1", "<b>x</b>",
                               "\u202e", "a\u0000b", "\ud800"])

            def edit(rows):
                for row in rows[1:]:
                    row[0] = name if rng.random() < 0.5 else f"{name}{rng.randrange(10**6)}"

            _rewrite_rows(target, rng, edit)
        return f"odd names in {target.name}"
    if kind == "extra":
        (run / "thesis.tex").write_text("\\documentclass{article}\n")
        (run / "plots").mkdir(exist_ok=True)
        return "a user's file and folder inside"
    if kind == "trace":
        traces = sorted(run.glob("trace_*"))
        if traces:
            victim = rng.choice(traces)
            victim.write_bytes(rng.choice([b"", b"\x1f\x8b\x08garbage", b"[" * 100_000,
                                           gzip.compress(b'{"traceEvents": 5}')]))
            return f"{victim.name} damaged"
        return "no trace to damage"
    if kind == "rows-1m":
        name = rng.choice(["breakdown.csv", "counters.csv", "phases.csv", "kernels.csv", "latency.csv"])
        path = run / name
        if path.exists():
            lines = path.read_bytes().split(b"\n")
            header, row = lines[0] + b"\n", (lines[1] if len(lines) > 1 and lines[1] else b"x") + b"\n"
            path.write_bytes(header + row * 1_000_000)
        return f"{name} of a million rows"
    if kind == "nvml-nul":
        with open(run / "nvml.csv", "wb") as handle:
            handle.truncate(200 * 10**6)
        return "nvml.csv of 200 MB of NUL bytes"
    if kind == "long-line":
        path = run / "latency.csv"
        if path.exists():
            header = path.read_bytes().split(b"\n", 1)[0]
            path.write_bytes(header + b"," * 50 * 10**6)
        return "latency.csv with one 50 MB line"
    return "nothing"


def damage_sweep(rng: random.Random, folder: Path) -> str:
    """One damage to a sweep folder (the issue's: runner pid Infinity or [1], a points index
    beyond 2^63, blank, nan or inf axis values, a plan over 100k characters...)."""
    kind = rng.choice(["pid", "pid", "index", "axis", "axis", "status", "plan-long", "plan-types",
                       "schema", "points-rows", "points-cell", "point-run", "point-file", "modes",
                       "user-file", "points-text", "damaged-copy"])
    info = json.loads((folder / "sweep.json").read_text())
    if kind == "pid":
        value = rng.choice([math.inf, [1], True, -5, 0, 2**40, "12", None, 1e3, -math.inf, 10**400])
        info.update(status="running", runner=dict(info.get("runner") or {}, pid=value))
        _write_json(folder / "sweep.json", info)
        return f"runner pid {value!r}"
    if kind in ("index", "axis", "points-cell"):
        column = {"index": "index", "axis": "batch"}.get(kind)

        def edit(rows):
            col = rows[0].index(column) if column in rows[0] else rng.randrange(len(rows[0]))
            row = rows[rng.randrange(1, len(rows))] if len(rows) > 1 else rows[0]
            values = {"index": [str(2**63), str(2**64 + 1), "-1", "1e400", "", "nan", "9" * 30],
                      "batch": ["", "nan", "inf", "-inf", "1e400", "9" * 30, "7", "-0"]}
            row[col] = rng.choice(values.get(column, EXTREMES + NASTY))

        _rewrite_rows(folder / "points.csv", rng, edit)
        return f"points.csv {column or 'cell'} damaged"
    if kind == "status":
        info["status"] = rng.choice(WRONG_JSON + ["done", "running", "stopped", "exploded"])
        _write_json(folder / "sweep.json", info)
        return f"status {str(info['status'])[:30]!r}"
    if kind == "plan-long":
        info["plan"]["axes"][0]["values"] = list(range(1, 30_001))
        _write_json(folder / "sweep.json", info)
        return "a plan of 30,000 values (over 100k characters)"
    if kind == "plan-types":
        where = rng.choice(["axes", "base", "point_trials", "threshold"])
        info["plan"][where] = rng.choice(WRONG_JSON)
        _write_json(folder / "sweep.json", info)
        return f"plan {where} of the wrong type"
    if kind == "schema":
        info[rng.choice(["schema_version", "tool", "kind"])] = rng.choice(WRONG_JSON + [True, 3, 2])
        _write_json(folder / "sweep.json", info)
        return "sweep.json identity damaged"
    if kind == "points-rows":
        def edit(rows):
            rows.extend([list(rows[-1]) for _ in range(rng.choice([1, 2500]))])

        _rewrite_rows(folder / "points.csv", rng, edit)
        return "points.csv with extra rows"
    if kind == "point-run":
        points = sorted(folder.glob("point-*"))
        if points:
            return "point folder: " + damage_run(rng, points[0], heavy=False)
        return "no point folder"
    if kind == "point-file":
        point = folder / "point-001"
        shutil.rmtree(point, ignore_errors=True)
        if rng.random() < 0.5:
            point.write_text("not a folder")
        else:
            point.symlink_to(rng.choice(["/dev/zero", "/etc", str(folder)]))
        return "point-001 is not a folder"
    if kind == "modes":
        (folder / "point_modes.csv").write_text(rng.choice(["", "x\n" + "1," * 40, "\x00" * 100]))
        return "point_modes.csv damaged"
    if kind == "user-file":
        (folder / "thesis.tex").write_text("\\documentclass{article}\n")
        return "a user's file inside"
    if kind == "damaged-copy":
        points = sorted(folder.glob("point-*"))
        if points:
            shutil.copytree(points[0], folder / (points[0].name + ".damaged-1"), dirs_exist_ok=True)
        return "a point-NNN.damaged-1 copy"
    (folder / "points.csv").write_text(rng.choice(["", "{", "index\n" + "1\n" * 10, "\xff\xfe"]),
                                       errors="surrogateescape")
    return "points.csv text replaced"


# ----------------------------------------------------------------------------- traces

TRACE_ENVS = {"PROFILER_CORE_MAX_TRACE_MB": ["1e6", "-1", "0", "nan", "inf", "abc", "1e308", "", "0.0001",
                                             "65537", "1" + "0" * 400],
              "PROFILER_CORE_MAX_TRACE_EVENTS": ["0", "-5", "1e400", "nan", "3", "1e6", "x"],
              "PROFILER_CORE_MAX_TRACE_NAMES": ["0", "-5", "1e400", "nan", "2", "x", "1e9"]}


def random_event(rng: random.Random) -> dict:
    base = {"ph": rng.choice(["X", "X", "X", "B", "E", "i", "s", "f", "M", 7, None, ""]),
            "name": rng.choice(NASTY + ["k", "cudaLaunchKernel", "cudaGraphLaunch", "ProfilerStep#1",
                                        "ProfilerStep#-1", "ProfilerStep#" + "9" * 400, "Memcpy HtoD"]),
            "cat": rng.choice(["kernel", "cuda_runtime", "user_annotation", "cpu_op", "gpu_memcpy",
                               "gpu_memset", "cuda_driver", 3, None]),
            "ts": rng.choice([0, 1, -5, 1e300, "nan", "12", None, 10**400, [1], 2**63, 1.5, -0.0]),
            "dur": rng.choice([1, 0, -10, "inf", None, 2.5, {"a": 1}, 1e308, 10**400]),
            "pid": rng.choice([1, 0, "x", None, -1, 2**70]), "tid": rng.choice([1, 7, "t", None]),
            "args": rng.choice([{"correlation": rng.choice([1, 2, "a", None, -1, 10**400])}, None, [],
                                "x", {"External id": 1}, {"correlation": 1, "graph id": "g"}])}
    return {k: v for k, v in base.items() if rng.random() > 0.1}


def hostile_trace(rng: random.Random, fixtures: Fixtures, folder: Path, eager_bias: bool = False
                  ) -> tuple[str, str]:
    """Write one hostile trace into ``folder``; returns (its path, what it is)."""
    families = (["random"] * 4 + ["recorded"] * (6 if eager_bias else 3) + ["text"] * 2 +
                ["names", "markers", "special", "wrong-packing", "heavy"])
    kind = rng.choice(families)
    path = folder / "trace.json"
    if kind == "random":
        events = [random_event(rng) for _ in range(rng.randint(0, 60))]
        payload = rng.choice([{"traceEvents": events}, events, {"traceEvents": {"a": events}},
                              {"traceEvents": events, "deviceProperties": rng.choice(WRONG_JSON)}])
        text = json.dumps(payload)
    elif kind == "recorded":
        source = rng.choice(fixtures.traces)
        raw = (gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
        data = json.loads(raw)
        events = data["traceEvents"] if isinstance(data, dict) else data
        for _ in range(rng.randint(1, 8)):
            if events:
                event = rng.choice(events)
                key = rng.choice(["ph", "name", "cat", "ts", "dur", "pid", "tid", "args"])
                event[key] = random_event(rng).get(key, rng.choice(WRONG_JSON))
        if rng.random() < 0.2:
            del events[rng.randrange(len(events) + 1):]
        text = json.dumps(data)
        return _packed(rng, folder, text, f"recorded {source.name} with events damaged")
    elif kind == "text":
        text = rng.choice(["", "{", "null", "[]", "{}", '{"traceEvents": 5}', "\ufeff{}", "[" * 100_000,
                           "[" * rng.randint(1000, 5000) + "]" * rng.randint(0, 5000),
                           '{"traceEvents": [NaN, Infinity]}', '{"traceEvents": [], "traceEvents": 1}',
                           '{"traceEvents": [{"ph": "X", "name": "\\ud800", "cat": "kernel", "ts": 1, "dur": 1}]}',
                           "\xff\xfe", "x" * 3_000_000, '{"traceEvents": [' + "1," * 200_000 + "1]}"])
    elif kind == "names":
        length = rng.choice([4097, 50_000, 1_000_000])
        events = [{"ph": "X", "name": ("k" * length) + str(n), "cat": "kernel", "ts": n, "dur": 1,
                   "pid": 0, "tid": 7} for n in range(rng.randint(1, 20))]
        text = json.dumps({"traceEvents": events})
    elif kind == "markers":
        count = rng.choice([1, 2, 100, 20_000])
        events = []
        for n in range(count):
            events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                           "ts": rng.choice([n * 100, 0, -n, 1e18]), "dur": rng.choice([50, -50, 0, 1e18]),
                           "pid": 1, "tid": 1})
        events += [dict(e) for e in fixtures.synthetic_events if rng.random() < 0.5]
        text = json.dumps({"traceEvents": events})
    elif kind == "special":
        how = rng.choice(["fifo", "zero", "urandom", "null", "folder", "dangling", "link-fifo"])
        if how in ("fifo", "link-fifo"):
            os.mkfifo(folder / "fifo.json")
            if how == "link-fifo":
                path.symlink_to(folder / "fifo.json")
                return str(path), how
            return str(folder / "fifo.json"), how
        if how == "folder":
            path.mkdir()
        elif how == "dangling":
            path.symlink_to(folder / "absent")
        else:
            path.symlink_to(f"/dev/{how}")
        return str(path), how
    elif kind == "wrong-packing":
        good = json.dumps({"traceEvents": fixtures.synthetic_events})
        how = rng.choice(["gz-named-json", "json-named-gz", "truncated-gz", "gz-garbage", "two-members",
                          "bz2", "zip", "gz-of-gz"])
        data = {"gz-named-json": gzip.compress(good.encode()), "json-named-gz": good.encode(),
                "truncated-gz": gzip.compress(good.encode())[:50],
                "gz-garbage": gzip.compress(os.urandom(5000)),
                "two-members": gzip.compress(good.encode()) + gzip.compress(good.encode()),
                "bz2": __import__("bz2").compress(good.encode()),
                "zip": b"PK\x03\x04" + os.urandom(100),
                "gz-of-gz": gzip.compress(gzip.compress(good.encode()))}[how]
        target = folder / ("trace.json" if how == "gz-named-json" else "trace.json.gz")
        target.write_bytes(data)
        return str(target), how
    else:  # heavy: the issue's big traces, shared (hard-linked) from the fixtures
        name = rng.choice(["tiny-events.json.gz", "many-names.json.gz", "bomb.json.gz", "step-markers.json.gz"])
        target = folder / name
        os.link(fixtures.heavy / name, target)
        return str(target), f"heavy {name}"
    return _packed(rng, folder, text, kind)


def _packed(rng: random.Random, folder: Path, text: str, label: str) -> tuple[str, str]:
    data = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.3:
        target = folder / "trace.json.gz"
        target.write_bytes(gzip.compress(data, compresslevel=1))
        return str(target), label + " (gzip)"
    target = folder / "trace.json"
    target.write_bytes(data)
    return str(target), label


def trace_env(rng: random.Random) -> dict[str, str]:
    env = {}
    if rng.random() < 0.25:
        name = rng.choice(list(TRACE_ENVS))
        env[name] = rng.choice(TRACE_ENVS[name])
    return env


# ----------------------------------------------------------------------------- CLI and --out

RUN_OPTIONS = ["--batch", "--d-in", "--hidden", "--d-out", "--hidden-layers", "--dtype", "--optimizer",
               "--warmup-iters", "--capture-iters", "--replays", "--eager-iters", "--seed", "--device",
               "--trials", "--profile-iters", "--nvml-interval-ms", "--parity-steps", "--preset",
               "--workload", "--progress", "--dropout", "--timeout", "--repeats", "--cpu-affinity",
               "--modes", "--seq-len", "--heads", "--image-size", "--channels", "--count-warmup",
               "--no-profile", "--overwrite", "--nonsense"]
FLAGS = {"--count-warmup", "--no-profile", "--overwrite"}


def nasty_arg(rng: random.Random) -> str:
    value = rng.choice(NASTY)
    return value.replace("\x00", "")


def out_destination(rng: random.Random, fixtures: Fixtures, root: Path) -> tuple[str | bytes, list[str], bool, str]:
    """A --out for ``run`` (or a sweep): (the argument, what may change, --overwrite, what it is).
    Where the folder holds anything of the user's, nothing may change."""
    from test_output_safety import REFUSED, make

    cwd = root / "cwd"
    kind = rng.choice(REFUSED + ["new"] * 4 + ["own_run"] * 2 + [
        "own_run_with_user_file", "runs_copies_with_user_files", "bare_summary", "sweep_json_beside",
        "tilde", "dotdot", "dotdot_onto_file", "relative", "nonutf8", "long", "odd_name",
        "link_parent", "indexed_runs", "empty_dir"])
    overwrite = rng.random() < 0.4
    if kind in REFUSED:
        suffix = rng.choice(["", "", "/.", "/x", "/"])
        out = make(kind, cwd, fixtures.real_run) + suffix
        # a new folder inside what is there is a new folder (where it can be made at all)
        real = os.path.realpath(out)  # through a link to a folder: where it lands
        allowed = [os.path.relpath(real, root)] if suffix == "/x" and real.startswith(str(root)) else []
        return out, allowed, overwrite, kind + suffix
    if kind == "new":
        name = "new" + rng.choice(["", "/deeper", "/a b", "/é", "/\u2028", "/-x", "/.hidden"])
        return str(cwd / name), [f"cwd/{name}"], overwrite, kind
    if kind == "own_run":
        copy_run(rng.choice([fixtures.real_run, fixtures.synthetic]), cwd / "own")
        if rng.random() < 0.3:  # saved before manifests
            (cwd / "own" / "manifest.json").unlink()
        return str(cwd / "own"), ["cwd/own"], overwrite or rng.random() < 0.5, kind
    if kind == "own_run_with_user_file":
        copy_run(fixtures.real_run, cwd / "own")
        what = rng.choice(["notes.txt", "thesis.tex", "edited", "plots", "link", "manifest"])
        if what == "edited":
            with open(cwd / "own" / "latency.csv", "a") as handle:
                handle.write("# my comment\n")
        elif what == "plots":
            (cwd / "own" / "plots").mkdir()
        elif what == "link":
            (cwd / "own" / "trace_graph.json").symlink_to(cwd / "own" / "summary.json")
        elif what == "manifest":
            (cwd / "own" / "manifest.json").write_text(json.dumps({"tool": "other", "files": {}}))
        else:
            (cwd / "own" / what).write_text("mine\n")
        return str(cwd / "own"), [], True, f"own run + {what}"
    if kind == "runs_copies_with_user_files":
        for name in ("a", "b"):
            copy_run(fixtures.real_run, cwd / "runs" / name)
        shutil.copy(fixtures.real_run / "summary.json", cwd / "runs" / "summary.json")
        (cwd / "runs" / "README.txt").write_text("x\n")
        return str(cwd / "runs"), [], True, kind
    if kind == "bare_summary":
        (cwd / "F").mkdir()
        version = rng.choice([3, True, 2, "3", 1.0])
        (cwd / "F" / "summary.json").write_text(json.dumps({"tool": "profiler_core", "schema_version": version}))
        (cwd / "F" / "thesis.tex").write_text("\\documentclass{article}\n")
        return str(cwd / "F"), [], True, f"bare summary (schema {version!r}) beside thesis.tex"
    if kind == "sweep_json_beside":
        (cwd / "F").mkdir()
        shutil.copy(fixtures.recorded_sweep / "sweep.json", cwd / "F" / "sweep.json")
        copy_run(fixtures.real_run, cwd / "F" / "a-run")
        (cwd / "F" / "thesis.tex").write_text("\\documentclass{article}\n")
        return str(cwd / "F"), [], True, kind
    if kind == "tilde":
        name = rng.choice(["x", "runs/x"])
        return rng.choice(["~/", "~/./"]) + name, [f"home/{name}"], overwrite, kind
    if kind == "dotdot":
        return "sub/../x", ["cwd/x"], overwrite, kind
    if kind == "dotdot_onto_file":
        (cwd / "a-file").write_text("keep\n")
        return "deep/er/../../a-file", [], overwrite, kind
    if kind == "relative":
        name = rng.choice(["x", "./x", "x/", "x//", "./x/./"])
        return name, ["cwd/x"], overwrite, kind
    if kind == "nonutf8":
        name = os.fsdecode(b"run-\xff")
        return os.fsencode(str(cwd)) + b"/run-\xff", [f"cwd/{name}"], overwrite, kind
    if kind == "long":
        parts = ["d" * rng.choice([200, 255]) for _ in range(rng.choice([2, 20]))]
        return str(cwd.joinpath(*parts)), ["cwd/" + "/".join(parts)], overwrite, kind
    if kind == "odd_name":
        name = rng.choice(["a\nb", " lead", "trail ", "-rf", "*", "x;y", "\u202etxt", "a\tb"])
        return str(cwd / name), [f"cwd/{name}"], overwrite, kind
    if kind == "link_parent":
        (cwd / "real").mkdir()
        (cwd / "link").symlink_to(cwd / "real")
        return str(cwd / "link" / "x"), ["cwd/real/x"], overwrite, kind
    if kind == "indexed_runs":
        shutil.copytree(fixtures.indexed_runs, cwd / "runs", symlinks=True)
        return str(cwd / "runs" / "b"), ["cwd/runs/b", "cwd/runs/.profiler_index.sqlite*"], overwrite, kind
    (cwd / "empty").mkdir()
    return str(cwd / "empty"), ["cwd/empty"], overwrite, kind


def gen_cli(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    family = rng.choice(["out"] * 5 + ["options"] * 4 + ["subcommand"] * 4 + ["stats_out"] * 2 + ["timeout"])
    cwd = root / "cwd"
    if family == "out":
        out, allowed, overwrite, kind = out_destination(rng, fixtures, root)
        argv = ["-m", "profiler_core", "run", "--out", out, *TINY, "--parity-steps", "0"]
        argv += ["--overwrite"] if overwrite else []
        argv += ["--progress", "jsonl"] if rng.random() < 0.2 else []
        return Spec(argv, allowed=allowed, label=f"run --out {kind}")
    if family == "options":
        argv = ["-m", "profiler_core", "run", "--out", str(cwd / "r"), *TINY, "--parity-steps", "0"]
        for _ in range(rng.randint(1, 3)):
            option = rng.choice(RUN_OPTIONS)
            argv += [option] if option in FLAGS else [option] + [nasty_arg(rng) for _ in
                                                                 range(2 if option == "--dropout" else 1)]
        if rng.random() < 0.2:
            argv.insert(3, nasty_arg(rng))
        return Spec(argv, allowed=["cwd/r"], label="run with odd option values")
    if family == "subcommand":
        command = rng.choice(["bench", "trace-stats", "predict", "index", "sweep", "serve", "top"])
        junk = [nasty_arg(rng) for _ in range(rng.randint(0, 3))]
        if command == "top":
            argv = rng.choice([[], ["--help"], ["-h"], ["nonsense"], ["run", "--help"], junk,
                               ["--version"], ["run"] + ["--batch", "8"] * 5000, ["run", "--out", "x" * 100_000],
                               ["ru"], ["RUN"], ["run", "--out"]])
            return Spec(["-m", "profiler_core", *argv], allowed=["cwd/x"], label=f"top level {argv[:3]!r}")
        options = {"bench": ["--rounds", "--configs", "--quiet-tool", "--out"],
                   "trace-stats": ["--out", "--overwrite"], "index": ["--runs", "--where", "--rebuild"],
                   "predict": ["--launch-us", "--per-node-us", "--calibrate", "--steps-per-iteration",
                               "--steps-per-graph", "--copy-us", "--eager-ms"],
                   "sweep": ["--param", "--out", "--threshold", "--point-timeout", "--resume", "--repeats"],
                   "serve": ["--device"]}[command]
        argv = ["-m", "profiler_core", command]
        for _ in range(rng.randint(0, 3)):
            option = rng.choice(options)
            argv += [option] if option in ("--quiet-tool", "--overwrite", "--calibrate", "--rebuild",
                                           "--resume") else [option, nasty_arg(rng)]
        argv += junk
        return Spec(argv, stdin=b"", allowed=[], label=f"{command} with odd arguments")
    if family == "stats_out":
        out = cwd / "stats"
        how = rng.choice(["hard-link", "hard-link", "own", "user-file", "user-link", "new", "folder-table"])
        overwrite = rng.random() < 0.7
        allowed = ["cwd/stats"]
        if how != "new":
            shutil.copytree(fixtures.stats_out, out)
        if how == "hard-link":
            os.link(out / "launch_split.csv", cwd / "outside.csv")
            with open(cwd / "outside.csv", "a") as handle:
                handle.write("0,1,2,3,4,5,6,7,8,9,10\n")
        elif how == "user-file":
            (out / "notes.txt").write_text("mine\n")
            allowed = []
        elif how == "user-link":
            (cwd / "precious.csv").write_text("keep\n")
            (out / "kernels.csv").unlink()
            (out / "kernels.csv").symlink_to(cwd / "precious.csv")
            allowed = []
        elif how == "folder-table":
            (out / "launch_split.csv").unlink()
            (out / "launch_split.csv").mkdir()
            allowed = []
        argv = ["-m", "profiler_core", "trace-stats", str(fixtures.synthetic / "trace_eager.json"),
                "--out", str(out)] + (["--overwrite"] if overwrite else [])
        return Spec(argv, allowed=allowed, label=f"trace-stats --out over {how}")
    value = rng.choice(NASTY[:12] + ["0.01", "0.5", "1", "3", "1e-9", "900", "-0"])
    argv = ["-m", "profiler_core", "run", "--out", str(cwd / "r"), *TINY, "--timeout", value,
            "--replays", str(rng.choice([20, 2000, 20000]))]
    return Spec(argv, allowed=["cwd/r"], label=f"run --timeout {value!r}", timeout=120)


# ----------------------------------------------------------------------------- trace-stats, predict


def gen_trace_stats(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    path, what = hostile_trace(rng, fixtures, root / "cwd")
    argv = ["-m", "profiler_core", "trace-stats", path]
    allowed: list[str] = []
    roll = rng.random()
    if roll < 0.25:
        argv += ["--out", str(root / "cwd" / "stats")]
        allowed = ["cwd/stats"]
    elif roll < 0.35:
        shutil.copytree(fixtures.stats_out, root / "cwd" / "stats")
        os.link(root / "cwd" / "stats" / "kernels.csv", root / "cwd" / "linked.csv")
        argv += ["--out", str(root / "cwd" / "stats"), "--overwrite"]
        allowed = ["cwd/stats"]
    return Spec(argv, env=trace_env(rng), allowed=allowed, timeout=120, label=f"trace-stats on {what}")


def gen_predict(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    path, what = hostile_trace(rng, fixtures, root / "cwd", eager_bias=True)
    argv = ["-m", "profiler_core", "predict", path]
    for option in rng.sample(["--launch-us", "--per-node-us", "--steps-per-iteration", "--steps-per-graph",
                              "--copy-us", "--eager-ms", "--calibrate"], rng.randint(0, 4)):
        if option == "--calibrate":
            argv.append(option)
        else:
            argv += [option, rng.choice([nasty_arg(rng), "1", "0.5", "3", "1e-300", "1e300", "2"])]
    return Spec(argv, env=trace_env(rng), timeout=120, label=f"predict on {what} {argv[4:]!r}"[:300])


# ----------------------------------------------------------------------------- index


WHERE = ["batch=8", "batch=0,1,2", "batch=" + ",".join(map(str, range(700))), "batch=1..", "batch=..1e400",
         "batch=a..b", "dtype=fp32", "gpu=NVIDIA H200", "date=2026-11-30..", "date=x..y", "speedup=2..",
         "speedup=nan..inf", "nonsense=1", "=", "batch", "batch==8", "batch=\udcff", "sweep=s",
         "complete=true", "complete=maybe", "eager_median_ms=-1e308..1e308", "batch=" + "9" * 400,
         "x" * 100_000 + "=1", "batch=8..4", "started_at=..", "workload=mlp"]


def gen_index(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    runs = root / "cwd" / "runs"
    runs.mkdir()
    labels = []
    for number in range(rng.randint(0, 4)):
        name = rng.choice([f"run{number}", os.fsdecode(b"run-\xff%d" % number), f"é{number}", f" r{number}"])
        run = copy_run(rng.choice([fixtures.real_run, fixtures.synthetic]), runs / name)
        if rng.random() < 0.6:
            labels.append(damage_run(rng, run, heavy=rng.random() < 0.3))
    if rng.random() < 0.5:
        sweep = copy_run(fixtures.sweep, runs / "sweep")
        if rng.random() < 0.7:
            labels.append("sweep: " + damage_sweep(rng, sweep))
    allowed = ["cwd/runs/.profiler_index.sqlite*"]
    foreign = rng.random() < 0.3
    if foreign:
        index = runs / ".profiler_index.sqlite"
        how = rng.choice(["text", "other-db", "link", "folder", "fifo", "truncated", "ours-damaged"])
        if how == "text":
            index.write_text("my notes\n")
        elif how == "other-db":
            import sqlite3

            with sqlite3.connect(index) as db:
                db.execute("create table mine (x)")
        elif how == "link":
            (root / "cwd" / "elsewhere.txt").write_text("keep\n")
            index.symlink_to(root / "cwd" / "elsewhere.txt")
        elif how == "folder":
            index.mkdir()
        elif how == "fifo":
            os.mkfifo(index)
        else:  # an index of ours, truncated or with bytes changed: rebuilt, so it may change
            data = (fixtures.indexed_runs / ".profiler_index.sqlite").read_bytes()
            index.write_bytes(data[:len(data) // 3] if how == "truncated" else
                              data[:200] + os.urandom(200) + data[400:])
            foreign = False
        labels.append(f"index file: {how}")
        if foreign:
            allowed = ["cwd/runs/.profiler_index.sqlite.*"]  # its temporary files, never the file
    read_only = rng.random() < 0.15
    if read_only:
        os.chmod(runs, 0o555)
        labels.append("read-only runs folder")
    argv = ["-m", "profiler_core", "index", "--runs", rng.choice([str(runs), "runs", "./runs/"])]
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        argv += ["--where", rng.choice(WHERE).replace("\x00", "")]
    if rng.random() < 0.2:
        argv.append("--rebuild")
    if rng.random() < 0.05:
        argv[4] = rng.choice([str(root / "cwd" / "missing"), "/dev/null", "/proc", ""])
    return Spec(argv, allowed=allowed, read_only=read_only, timeout=120,
                label=f"index of {len(labels)} damage(s): {'; '.join(labels)[:250]}")


# ----------------------------------------------------------------------------- sweep

BIG = "1" + "0" * 400
PARAMS = [f"batch=1:{BIG}:x2", f"batch={BIG}:1{'0' * 401}:x2", f"batch=1:8:+{BIG}", f"batch=1:8:x{BIG}",
          f"batch=1:{'9' * 5000}", "batch=" + ",".join(map(str, range(1, 20_000))), "batch=1:2001:+1",
          "batch=0,1", "batch=-1,2", "batch=1:1024:x1", "batch=1:1024:x0.5", "batch=1024:1:x2",
          "batch=nan,inf", "batch=", "=8", "batch", "batch=8,,16", "batch=8,8", "width=1:1e9:x2",
          "dtype=fp32,fp64", "dtype=" + ",".join(["fp32"] * 3000), "seq_len=8,16", "modes=graph,nonsense",
          "modes=graph+graph", "capture_iters=0,1", "hidden_layers=1:1000000:x2", "nonsense=1,2",
          "batch=8,16\n", "batch=\u0661,\u0662", "batch=1e3,2e3", "d_in=16,32", "capture_iters=1,2",
          "batch=8:16:+0", "batch=8:16:+-1", "batch=8:16:y2", "batch=8:16:x2:3", "batch=:16:x2"]
SWEEP_OPTIONS = {"--threshold": ["nan", "inf", "-1", "0", "1e308", "x", "1.1"],
                 "--point-timeout": ["nan", "-1", "0", "1e308", "x", "0.001", "60"],
                 "--repeats": ["0", "16", "-1", "x", "1"], "--cpu-affinity": ["999", "0-", "a", "0", ""],
                 "--dtype": ["fp16", "fp64"], "--capture-iters": ["2", "0"], "--preset": ["lesson3", "x"]}


def _interrupt_after(seconds: float, signals: list[int], wait_s: float = 90.0) -> Callable:
    """Send ``signals`` to the process ``seconds`` after it starts (0.3 s apart), then wait."""
    def interact(proc: subprocess.Popen, root: Path, case_id: str):
        time.sleep(seconds)
        for number, signum in enumerate(signals):
            if number:
                time.sleep(0.3)
            try:
                proc.send_signal(signum)
            except OSError:
                pass
        code, out, err, hang = collect(proc, None, wait_s)
        return (None if hang else code), out, err, hang, ""
    return interact


def gen_sweep(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    family = rng.choice(["plan"] * 6 + ["options"] * 2 + ["folders"] * 4 + ["resume"] * 2 +
                        ["hostile-resume"] * 2 + ["read-only"] + ["real"] + ["two-thousand"])
    base = ["-m", "profiler_core", "sweep", *SWEEP_BASE]
    if family == "plan":
        params = rng.sample(PARAMS, rng.choice([1, 1, 2, 3]))
        argv = base + [a for p in params for a in ("--param", p)] + ["--out", str(cwd / "s")]
        return Spec(argv, allowed=["cwd/s"], codes=SWEEP_CODES, timeout=120,
                    label=f"sweep plan {[p[:40] for p in params]}")
    if family == "options":
        option = rng.choice(list(SWEEP_OPTIONS))
        value = rng.choice(SWEEP_OPTIONS[option])
        argv = base + ["--param", "batch=8,16", option, value, "--out", str(cwd / "s")]
        return Spec(argv, allowed=["cwd/s"], codes=SWEEP_CODES, timeout=150,
                    label=f"sweep {option} {value!r}")
    if family == "folders":
        how = rng.choice(["sweep_json_beside", "sweep_json_beside_no_run", "runs_folder", "file",
                          "own_sweep_overwrite", "own_sweep_user_file", "run_folder", "damaged_copy",
                          "resume_not_a_sweep", "resume_missing"])
        overwrite = rng.random() < 0.7
        out, allowed, extra = cwd / "F", [], []
        if how.startswith("sweep_json_beside"):
            out.mkdir()
            shutil.copy(fixtures.recorded_sweep / "sweep.json", out / "sweep.json")
            if how == "sweep_json_beside":
                copy_run(fixtures.real_run, out / "a-run")
            (out / "thesis.tex").write_text("\\documentclass{article}\n")
        elif how == "runs_folder":
            copy_run(fixtures.real_run, out / "a")
        elif how == "file":
            out.write_text("keep me\n")
        elif how == "run_folder":
            copy_run(fixtures.real_run, out)
        elif how.startswith("own_sweep") or how == "damaged_copy":
            copy_run(fixtures.sweep, out)
            if how == "own_sweep_user_file":
                (out / "notes.txt").write_text("mine\n")
            elif how == "damaged_copy":
                shutil.copytree(out / "point-000", out / "point-000.damaged-1")
            else:
                allowed = ["cwd/F"]
        elif how == "resume_not_a_sweep":
            copy_run(fixtures.real_run, out)
            extra = ["--resume"]
        argv = base + ["--param", "batch=8,16", "--out", str(out)] + (["--overwrite"] if overwrite else []) + extra
        if how == "resume_missing":
            argv = ["-m", "profiler_core", "sweep", "--out", str(out), "--resume", "--progress", "none"]
        return Spec(argv, allowed=allowed, codes=SWEEP_CODES, timeout=150, label=f"sweep --out {how}")
    if family in ("resume", "hostile-resume", "read-only"):
        folder = copy_run(fixtures.sweep, cwd / "s")
        what = damage_sweep(rng, folder) if family == "hostile-resume" else "a stopped sweep"
        if family == "read-only":
            for path in [folder, *folder.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    os.chmod(path, 0o555)
            what = "a stopped sweep in a read-only folder"
        argv = ["-m", "profiler_core", "sweep", "--out", str(folder), "--resume", "--progress", "none"]
        if rng.random() < 0.2:
            argv += ["--param", "batch=8"]
        return Spec(argv, allowed=[] if family == "read-only" else ["cwd/s"], codes=SWEEP_CODES,
                    read_only=family == "read-only", timeout=180, label=f"sweep --resume on {what}")
    if family == "real":
        argv = base + ["--param", rng.choice(["batch=8,16", "capture_iters=1,2", "dtype=fp32,bf16"]),
                       "--out", str(cwd / "s")]
        return Spec(argv, allowed=["cwd/s"], codes=SWEEP_CODES, timeout=180, label="a real 2-point CPU sweep")
    argv = base + ["--param", "batch=1:2000:+1", "--out", str(cwd / "s")]  # 2,000 points: stopped
    return Spec(argv, allowed=["cwd/s"], codes=SWEEP_CODES, timeout=150,
                interact=_interrupt_after(rng.uniform(6, 15), [signal.SIGINT]),
                label="a 2,000-point CPU sweep, then Ctrl-C")


# ----------------------------------------------------------------------------- --workload

STEP_MODULE = '''
import os, sys, time
import torch
from torch import nn
{import_action}


class Custom(BaseException):
    pass


class Loud(Exception):
    def __str__(self):
        {str_action}


def _action(where):
    pass


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(16, 4)

    def forward(self, x):
        {forward_action}
        return {forward_return}


def build(device):
    {build_action}
    model = M().to(device)

    def batch(generator):
        {batch_action}
        return {batch_return}

    def loss(output, target):
        {loss_action}
        return torch.nn.functional.mse_loss(output, target)

    return {returned}
'''
ACTIONS = ["while True: pass", "time.sleep(3600)", "raise ValueError('broken')", "raise KeyError(3)",
           "1 / 0", "raise MemoryError()", "raise KeyboardInterrupt()", "raise GeneratorExit()",
           "raise StopIteration()", "sys.exit(0)", "sys.exit(3)", "sys.exit(6)", "sys.exit('text')",
           "sys.exit(None)", "raise Custom('stop everything')", "raise Loud()",
           "raise RuntimeError('a\\nmulti\\nline\\r\\nmessage')", "raise RuntimeError('x' * 200000)",
           "raise RuntimeError('nul \\x00 and \\ud800')", "assert False, 'no'",
           "torch.empty(2**40)", "(lambda f: f(f))(lambda f: f(f))", "raise SystemExit(130)",
           "raise OSError(28, 'No space left on device')", "raise TimeoutError()"]
STR_ACTIONS = ["return 'loud'", "raise RuntimeError('str fails')", "return 'a\\nb'", "while True: pass",
               "return 3"]
RETURNS = {"batch_return": ["(torch.randn(8, 16, generator=generator), torch.randn(8, 4, generator=generator))",
                            "(torch.randn(8, 16), torch.randn(8, 4), torch.randn(1))", "None", "[1, 2]",
                            "(x for x in [torch.randn(8, 16), torch.randn(8, 4)])",
                            "(torch.randn(8, 16),)", "(torch.randn(8, 17), torch.randn(8, 4))",
                            "(torch.randn(8, 16, dtype=torch.float64), torch.randn(8, 4))",
                            "(torch.randn(0, 16), torch.randn(0, 4))", "(torch.randn(8, 16), 'y')"],
           "forward_return": ["self.layer(x)", "None", "(self.layer(x), 1)", "self.layer(x) * float('nan')",
                              "self.layer(x).sum()", "x"],
           "returned": ["{'model': model, 'batch': batch, 'loss': loss}", "{'model': model, 'batch': batch}",
                        "[model]", "None", "{'model': model}", "{'model': 'm', 'batch': batch}",
                        "{'model': model, 'batch': batch, 'optimizer': 'adam'}",
                        "{'model': model, 'batch': batch, 'scheduler': 1}",
                        "{'model': model, 'batch': batch, 'optimizer': torch.optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)}"]}


def gen_workload(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    fields = {"import_action": "", "str_action": "return 'loud'", "forward_action": "pass",
              "build_action": "pass", "batch_action": "pass", "loss_action": "pass",
              "batch_return": RETURNS["batch_return"][0], "forward_return": RETURNS["forward_return"][0],
              "returned": RETURNS["returned"][0]}
    family = rng.choice(["action"] * 6 + ["returns"] * 2 + ["module"])
    label = ""
    if family == "action":
        where = rng.choice(["import_action", "build_action", "batch_action", "forward_action", "loss_action"])
        action = rng.choice(ACTIONS)
        fields[where] = action
        if action == "raise Loud()":
            fields["str_action"] = rng.choice(STR_ACTIONS)
        label = f"{action!r} at {where.split('_')[0]}"
    elif family == "returns":
        key = rng.choice(list(RETURNS))
        fields[key] = rng.choice(RETURNS[key])
        label = f"{key} = {fields[key][:60]}"
    name = f"step_{rng.randrange(10**6)}"
    source = STEP_MODULE.format(**fields)
    spec = f"{name}:build"
    if family == "module":
        how = rng.choice(["syntax", "missing-module", "missing-function", "odd-spec", "package-init",
                          "stdlib", "not-callable"])
        label = f"module: {how}"
        if how == "syntax":
            source = "def build(device):\n    return {\n"
        elif how == "missing-module":
            spec = "no_such_module_xyz:build"
        elif how == "missing-function":
            spec = f"{name}:nope"
        elif how == "odd-spec":
            spec = rng.choice(["nocolon", "a:b:c", "1module:f", "mod:", "../x:y", "x.:y", ":", "é:f",
                               f"{name}:build\n", "os:system", "a-b:c", "/abs/path.py:build"])
        elif how == "package-init":
            (cwd / name).mkdir()
            (cwd / name / "__init__.py").write_text("raise ImportError('package broken')\n")
            spec = f"{name}.sub:build"
            source = None
        elif how == "stdlib":
            spec = rng.choice(["json:build", "json:loads", "os:getcwd", "builtins:print"])
        else:
            source = source.replace("def build(device):", "build = 3\ndef _build(device):")
    if source is not None:
        (cwd / f"{name}.py").write_text(source)
    timeout = rng.choice(["1", "2.5", "4"]) if any(
        a in label for a in ("while True", "sleep", "Loud")) else rng.choice(["20", "30"])
    argv = ["-m", "profiler_core", "run", "--workload", spec, "--out", str(cwd / "r"), "--device", "cpu",
            "--replays", "8", "--parity-steps", "0", "--progress", "none", "--timeout", timeout]
    return Spec(argv, allowed=["cwd/r"], timeout=90, label=f"--workload {label} (--timeout {timeout})")


# ----------------------------------------------------------------------------- serve / launcher

LAUNCHER_SCRIPT = r'''
import json, sys, threading, time
from pathlib import Path
from profiler_core.spec.config import PRESETS
from profiler_core.orchestration.launcher import Launcher
out, warm, spares, phase = sys.argv[1], sys.argv[2] == "warm", int(sys.argv[3]), sys.argv[4]
launcher = Launcher(warm=warm, spares=spares) if warm else Launcher(warm=False)
spare = None
if warm:  # a spare waiting beside the run, as after an earlier CPU run (tests/test_launcher.py)
    spare = Launcher(warm=True, spares=spares)
    spare._wanted_device = "cpu"
    with spare._guard:
        spare._maybe_start_spare()
seen = threading.Event()
config = PRESETS["seed"].replace(device="cpu", batch=64, d_in=256, hidden=256, d_out=64,
                                 replays=100_000, trials=10, preset="custom")
def on_event(record):
    if phase == "any" or record.get("phase") == phase:
        seen.set()
run = launcher.start(config, Path(out), on_event=on_event)
seen.wait(120)
if spare is not None:
    spare._pool.children[0].ready.wait(120)
print(json.dumps([run.pid, spare.spare_pid if spare else None]), flush=True)
time.sleep(600)
'''


def _kill_launcher(how: int, delay: float) -> Callable:
    """Wait for the launcher's line (its run is in the chosen phase), then signal it; what the
    run kept is checked by the caller's allowed folder, its processes by the orphan count."""
    def interact(proc: subprocess.Popen, root: Path, case_id: str):
        ready, _, _ = select.select([proc.stdout], [], [], 150)
        if not ready:
            _, _, err, _ = collect(proc, None, 0)
            return None, "", err, True, "the launcher never reported its run"
        line = proc.stdout.readline().decode(errors="replace")
        time.sleep(delay)
        alive = len(marked_processes(case_id)) - 1  # the launcher's children, as the count sees them
        proc.send_signal(how)  # only the launcher itself: its children must end on their own
        _, _, err, _ = collect(proc, None, 30)
        note = f"launcher reported {line.strip()} ({alive} marked children), got signal {how}"
        if "Traceback" in err:
            return None, "", err, False, note + "; the launcher's own traceback"
        return None, "", "", False, note  # the process was killed on purpose: judged by its children
    return interact


SERVE_REQUESTS = [
    b"[" * 100_000 + b"\n", b'{"argv": ["run", "--out", "a\\u0000b"]}\n', b"\xff\xfe\n", b"", b"\n",
    b'{"argv": ["run", "--batch", "-1"]}\n', b'{"argv": ["bench"]}\n', b'{"argv": ["serve"]}\n',
    b'{"argv": []}\n', b'{"argv": "run"}\n', b'{"argv": ["run", 3]}\n', b'{"x": 1}\n', b"[]\n", b'"run"\n',
    b"null\n", b"1e400\n", b"NaN\n", b'{"argv": ["run"], "x": [[[[[[[[1]]]]]]]]}\n',
    b'{"argv": ["run"], "x": [[[[[[1]]]]]]}\n', b'{"argv": ["run", "' + b"x" * 65_600 + b'"]}\n',
    b'{"argv": ["run", "--out", "\\ud800"]}\n', b'{"argv": ["run", "--help"]}\n',
    b'{"argv": ["run"' + b', "--batch", "8"' * 5000 + b"]}\n", b'{"argv": ["run", "--out", "/proc/x/y"]}\n',
    b'{"argv": ["run", "--device", "cuda:0", "--out", "z"]}\n', b'{"argv": ["trace-stats", "/dev/zero"]}\n',
    b'{"argv": ["run", "--out", "x"], "argv": ["bench"]}\n', b"\x00" * 1000 + b"\n",
]


def gen_serve(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    family = rng.choice(["stdin"] * 5 + ["valid"] + ["huge"] + ["launcher"] * 3 + ["sweep-kill"] +
                        ["ctrl-c"] * 2 + ["sigterm"] + ["timeout"])
    if family in ("stdin", "valid", "huge"):
        device = "cpu" if rng.random() < 0.85 else rng.choice(["cuda:0", "cuda:99", "x", ""])
        argv = ["-m", "profiler_core", "serve", "--device", device]
        if family == "stdin":
            stdin = rng.choice(SERVE_REQUESTS)
            if rng.random() < 0.2:  # a second line after the request
                stdin += b'{"argv": ["run", "--out", "second"]}\n'
            label = f"serve stdin {stdin[:40]!r}"
        elif family == "valid":
            from profiler_core.spec.config import PRESETS

            tiny = PRESETS["seed"].replace(device="cpu", batch=8, d_in=16, hidden=32, d_out=4,
                                           replays=20, trials=4, preset="custom")
            request = {"config": tiny.to_dict(), "out": str(cwd / "r"), "overwrite": False}
            stdin = json.dumps(request).encode() + b"\n"
            label = "serve a valid tiny run"
        else:
            stdin = b"[" * (200 * 10**6)
            label = "serve a 200 MB line"
        return Spec(argv, stdin=stdin, allowed=["cwd/r"], timeout=120, label=label + f" (--device {device!r})")
    if family == "launcher":
        warm = rng.random() < 0.5
        phase = rng.choice(["any", "setup", "warm-up", "timed trials"])
        how = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
        argv = ["-c", LAUNCHER_SCRIPT, str(cwd / "run"), "warm" if warm else "cold", str(rng.choice([1, 2])),
                phase]
        return Spec(argv, allowed=["cwd/run"], grace=20.0, timeout=200,
                    interact=_kill_launcher(how, rng.uniform(0, 1.5)),
                    label=f"launcher ({'warm' if warm else 'cold'}) killed with signal {how} at {phase}")
    if family == "sweep-kill":
        argv = ["-m", "profiler_core", "sweep", *SWEEP_BASE, "--param", "batch=8,16,32,64", "--out", str(cwd / "s")]

        delay = rng.uniform(5, 14)

        def interact(proc, root, case_id):
            time.sleep(delay)
            proc.kill()  # SIGKILL the sweep: its points and spares must end with it
            collect(proc, None, 30)
            return None, "", "", False, f"sweep SIGKILLed after {delay:.1f} s"

        return Spec(argv, allowed=["cwd/s"], grace=20.0, timeout=120, interact=interact,
                    label="a CPU sweep SIGKILLed mid-way")
    if family in ("ctrl-c", "sigterm"):
        signum = signal.SIGINT if family == "ctrl-c" else signal.SIGTERM
        count = rng.choice([1, 2, 2, 3])
        argv = ["-m", "profiler_core", "run", "--out", str(cwd / "r"), *TINY, "--replays", "200000",
                "--parity-steps", "0"]
        delay = rng.uniform(2, 8)
        return Spec(argv, allowed=["cwd/r"], timeout=120, interact=_interrupt_after(delay, [signum] * count),
                    label=f"run sent {count} x {signum.name} after {delay:.1f} s")
    argv = ["-m", "profiler_core", "run", "--out", str(cwd / "r"), *TINY, "--replays", "200000",
            "--timeout", rng.choice(["2", "4", "6"])]
    return Spec(argv, allowed=["cwd/r"], timeout=120, label=f"run past its --timeout {argv[-1]} s")


# ----------------------------------------------------------------------------- loader, uploads, pages


def gen_loader(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    if rng.random() < 0.15:
        folder = copy_run(fixtures.sweep, cwd / "sweeps" / "s")
        what = "; ".join(damage_sweep(rng, folder) for _ in range(rng.randint(1, 2)))
        return Spec(kind="fork", call=("load_sweep", [str(folder)]), timeout=60, label=f"sweep folder: {what}")
    name = rng.choice(["run"] * 8 + [os.fsdecode(b"run-\xff"), "run [x](http://a)", "r\nn"])
    run = copy_run(rng.choice([fixtures.real_run, fixtures.synthetic]), cwd / name)
    what = "; ".join(damage_run(rng, run, heavy=rng.random() < 0.4) for _ in range(rng.randint(1, 2)))
    return Spec(kind="fork", call=("load", [str(run)]), timeout=60, label=f"run folder: {what}"[:300])


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as packed:
        for name, data in members.items():
            packed.writestr(name, data)
    return out.getvalue()


def _link_member(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


def hostile_zip(rng: random.Random, fixtures: Fixtures, scratch: Path) -> tuple[bytes, str]:
    from test_dashboard_hostile import _bomb_zip

    source = rng.choice([fixtures.real_run, fixtures.synthetic])
    kind = rng.choice(["good", "damaged", "damaged", "damaged", "bomb", "traversal", "link", "duplicate",
                       "many", "nested", "not-zip", "truncated", "crc", "method", "encrypted", "names",
                       "flat", "two-runs", "lying-size"])
    members = {f"run/{p.name}": p.read_bytes() for p in sorted(source.iterdir()) if p.is_file()}
    if kind == "good":
        return _zip(members), kind
    if kind == "damaged":
        run = copy_run(source, scratch / "damaged")
        what = damage_run(rng, run, heavy=False)
        files = {}
        for path in sorted(run.iterdir()):
            if path.is_file() and not path.is_symlink() and not stat.S_ISFIFO(path.lstat().st_mode):
                files[f"run/{path.name}"] = path.read_bytes()
        return _zip(files), f"damaged: {what}"
    if kind == "bomb":
        how = rng.choice(["tables", "long-line", "rows", "summary"])
        header = members["run/latency.csv"].split(b"\n", 1)[0] + b"\n"
        if how == "tables":
            for name in ("latency", "nvml", "kernels", "launch_split"):
                head = members[f"run/{name}.csv"].split(b"\n", 1)[0] + b"\n"
                members[f"run/{name}.csv"] = (head + b"0," * (2**19 - len(head) // 2), 250)
        elif how == "long-line":
            members["run/latency.csv"] = (header + b"0," * 2**19, 250)
        elif how == "rows":
            row = members["run/latency.csv"].split(b"\n")[1] + b"\n"
            members["run/latency.csv"] = (header + row * 2**16, 46)
        else:
            members["run/summary.json"] = (b" " * 2**20, 600)
        return _bomb_zip(members), f"bomb: {how}"
    if kind == "traversal":
        name = rng.choice(["../../evil.csv", "/abs/evil.csv", "run/../../evil.csv", "run/../../../tmp/x",
                           "..\\..\\evil.csv", "C:/evil.csv", "run/./summary.json"])
        members[name] = b"evil\n"
        return _zip(members), f"member {name!r}"
    if kind == "link":
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as packed:
            for name, data in members.items():
                if name == "run/latency.csv":
                    packed.writestr(_link_member(name, "/etc/passwd"), "/etc/passwd")
                else:
                    packed.writestr(name, data)
        return out.getvalue(), "a table as a symbolic link"
    if kind == "duplicate":
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as packed:
            for name, data in members.items():
                packed.writestr(name, data)
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                packed.writestr("run/summary.json", b"{}")
        return out.getvalue(), "a member twice"
    if kind == "many":
        for number in range(rng.choice([501, 5000])):
            members[f"run/extra{number}.txt"] = b""
        return _zip(members, zipfile.ZIP_STORED), "many members"
    if kind == "nested":
        return _zip({"run.zip": _zip(members)}), "a zip in a zip"
    if kind == "not-zip":
        return rng.choice([b"", b"not a zip", os.urandom(4096), b"PK\x05\x06" + b"\x00" * 18,
                           gzip.compress(b"x" * 1000)]), "not a zip"
    data = _zip(members)
    if kind == "truncated":
        return data[:rng.randrange(len(data))], "truncated"
    if kind == "crc":
        data = bytearray(data)
        for _ in range(5):
            data[rng.randrange(30, len(data) - 30)] ^= 0xFF
        return bytes(data), "bytes flipped"
    if kind == "method":
        method = rng.choice([zipfile.ZIP_LZMA, zipfile.ZIP_BZIP2])
        return _zip(members, method), f"compression method {method}"
    if kind == "encrypted":
        data = bytearray(data)
        offset = 0
        while (at := data.find(b"PK\x03\x04", offset)) >= 0:
            data[at + 6] |= 1  # the "encrypted" flag
            offset = at + 4
        return bytes(data), "encrypted flag"
    if kind == "names":
        name = rng.choice(["run/summary.json\x00.txt", "run/\udcff.csv", "run/" + "n" * 5000, "run/",
                           "run/summary.json/", "run/../run/summary.json", ""])
        members[name] = b"x"
        try:
            return _zip(members), f"member named {name[:30]!r}"
        except (UnicodeError, ValueError, IndexError) as error:  # zipfile cannot write the name
            del members[name]
            return _zip(members | {"run/odd": b"x"}), f"(could not pack {name[:20]!r}: {error})"
    if kind == "flat":
        return _zip({k.split("/", 1)[1]: v for k, v in members.items()}), "files at the zip's root"
    if kind == "two-runs":
        return _zip(members | {k.replace("run/", "other/"): v for k, v in members.items()}), "two runs"
    data = bytearray(data)  # lying-size: the central directory says the summary is tiny
    at = data.find(b"PK\x01\x02")
    if at >= 0:
        data[at + 24:at + 28] = (1).to_bytes(4, "little")
    return bytes(data), "a size in the central directory that lies"


def gen_uploads(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    data, what = hostile_zip(rng, fixtures, root / "scratch")
    shutil.rmtree(root / "scratch", ignore_errors=True)
    (cwd / "upload.zip").write_bytes(data)
    name = rng.choice(["run.zip"] * 6 + ["../../x.zip", "a\x00b.zip", "", "\udcff.zip", "x" * 5000 + ".zip",
                                         "CON.zip", ".zip", "run.ZIP"])
    times = rng.choice([1, 1, 1, 4])
    return Spec(kind="fork", call=("upload", [str(cwd / "upload.zip"), name, str(cwd / "store"), times]),
                allowed=["cwd/store", "cwd/upload.zip"], timeout=60,
                label=f"upload {what} as {name[:30]!r} x{times}")


def gen_dashboard(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    runs = root / "cwd" / "runs"
    issue = rng.choice(["rows-1m", "nvml-nul", "headline", "dup-stats", "surrogates", "schema2-big",
                        None, None, None, None])
    name = rng.choice(["hostile"] * 5 + [os.fsdecode(b"run-\xff"), "run [x](http://attacker.invalid) **b**"])
    hostile = copy_run(rng.choice([fixtures.synthetic, fixtures.synthetic, fixtures.real_run]), runs / name)
    what = []
    if issue == "rows-1m":
        path = hostile / rng.choice(["breakdown.csv", "counters.csv", "phases.csv"])
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(lines[0] + b"\n" + (lines[1] + b"\n") * 1_000_000)
        what.append(f"{path.name} of a million rows")
    elif issue == "nvml-nul":
        with open(hostile / "nvml.csv", "wb") as handle:
            handle.truncate(200 * 10**6)
        what.append("200 MB NUL nvml.csv")
    if issue in (None, "headline", "dup-stats", "surrogates", "schema2-big"):
        for _ in range(rng.randint(1, 2)):
            what.append(damage_run(random.Random(rng.random()) if issue is None else _Forced(issue, rng),
                                   hostile, heavy=False))
    copy_run(fixtures.synthetic, runs / "plain")  # so Runs has two to compare
    if rng.random() < 0.6:
        sweep = copy_run(fixtures.sweep, runs / "sweep")
        what.append("sweep: " + damage_sweep(rng, sweep))
    args = {"runs": str(runs), "open": str(hostile.resolve()), "pages": PAGES, "page_timeout": 60}
    return Spec([CHILDREN, "dashboard", json.dumps(args)], kind="dashboard",
                allowed=["cwd/runs/.profiler_index.sqlite*"], timeout=420,
                label=f"dashboard on {name!r}: {'; '.join(what)[:250]}")


class _Forced(random.Random):
    """A random source that makes ``damage_run`` pick the given family first."""

    def __init__(self, family: str, rng: random.Random) -> None:
        super().__init__(rng.random())
        self.family, self.first = family, True

    def choice(self, seq):
        if self.first and self.family in seq:
            self.first = False
            return self.family
        return super().choice(seq)


# ----------------------------------------------------------------------------- issue 27's surfaces
# The bytecode and calibration caches, --overwrite on tampered manifests, bench --out, --repeats
# (its time limit, its stops and a SIGKILLed parent's staging folder) and data-parallel runs
# stopped or killed.

ATTACKER = 65534  # the other user of the cache cases (nobody), where the campaign runs as root
TWO_USERS = os.geteuid() == 0 and shutil.which("setpriv") is not None
CACHE_STEP = '''import torch
from torch import nn


def build(device):
    def batch(generator):
        return (torch.randn(8, 16, device=device, generator=generator),
                torch.randn(8, 4, device=device, generator=generator))
    return {"model": nn.Linear(16, 4).to(device), "batch": batch}
'''
# python -B -c: the command line exactly as ``python -m profiler_core`` runs it, with the package
# whose missing bytecode turns the cache on being the case's own step (torch here ships its
# bytecode, so the cache would otherwise stay off).
CACHE_DRIVER = ("import runpy; from profiler_core.spec import bytecode; "
                "bytecode.HEAVIEST_PACKAGE = 'cache_step'; "
                "runpy.run_module('profiler_core', run_name='__main__')")
CACHE_KINDS = ["clean", "link-top", "link-bytecode", "group-writable", "others-writable",
               "loose-parent", "file-at-top", "fifo-bytecode", "own-unchecked-pyc"] + (
    ["shared-planted-unchecked", "shared-planted-stamped", "shared-planted-unchecked",
     "shared-planted-stamped", "shared-top-of-another-user"] if TWO_USERS else [])
CALIBRATION_DAMAGE = ["400-digits", "negative", "format-true", "format-float", "nan-text", "nested",
                      "huge", "not-utf8", "entries-list", "link-file", "fifo", "folder", "link-folder",
                      "group-writable-folder", "many-entries", "empty"]


def _as_attacker(script: str, data: bytes = b"") -> None:
    """A shell ``script`` run as the other user (uid and gid 65534, no groups, umask 000)."""
    subprocess.run(["setpriv", "--reuid", str(ATTACKER), "--regid", str(ATTACKER), "--clear-groups",
                    "/bin/sh", "-c", f"umask 000; {script}"], input=data, check=True, timeout=30)


def _planted_pyc(root: Path, source: Path, stamped: bool) -> bytes:
    """A pyc of code that writes ``home/PLANTED-CODE-RAN`` for ``source``: an unchecked-hash one
    (Python loads it without looking at the source), or one stamped with the source's own
    modification time and size (as Python's timestamp check expects)."""
    import importlib._bootstrap_external as external
    import py_compile

    marker = root / "home" / "PLANTED-CODE-RAN"
    evil = root / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('planted')\n" + CACHE_STEP)
    if stamped:
        code = compile(evil.read_text(), str(source), "exec")
        info = source.stat()
        return bytes(external._code_to_timestamp_pyc(code, int(info.st_mtime), info.st_size))
    compiled = root / "evil.pyc"
    py_compile.compile(str(evil), cfile=str(compiled), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    return compiled.read_bytes()


def _pyc_path(cache: Path, source: Path) -> Path:
    """Where a pycache prefix of ``cache/bytecode`` keeps ``source``'s compiled module."""
    return (cache / "bytecode" / source.parent.relative_to("/")
            / f"{source.stem}.{sys.implementation.cache_tag}.pyc")


def gen_caches(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    if rng.random() < 0.4:  # the calibration cache, read and written in a forked child
        damage = rng.choice(CALIBRATION_DAMAGE)
        folder = root / "xdg" / "cuda-graph-profiler"
        folder.mkdir(parents=True, mode=0o700)
        folder.chmod(0o700)
        path = folder / "calibration.json"
        entry = {"launch_us": 1.0, "per_node_us": 0.07, "node_counts": [1, 32, 256],
                 "timed": [100, 100, 25], "replay_us": [1.1, 3.3, 18.0], "busy_us": [0.5, 1.0, 2.0],
                 "recorded": True, "elements": 1024, "held": "back to back", "device_name": "Fuzz GPU",
                 "measured_at": "2026-12-02T00:00:00+00:00"}
        name = json.dumps({"cuda": "12", "driver": "580.1", "gpu": "Fuzz GPU", "sms": "132",
                           "torch": "2"}, ensure_ascii=True)
        content: dict = {"format": 1, "entries": {name: entry}}
        field_name = rng.choice(["launch_us", "per_node_us", "replay_us", "busy_us", "elements", "timed"])
        listed = field_name in ("replay_us", "busy_us", "timed")
        allowed = ["xdg/cuda-graph-profiler/calibration.json"]
        if damage == "400-digits":
            entry[field_name] = [10**400, 1, 2] if listed else rng.choice([10**400, -(10**400)])
        elif damage == "negative":
            entry[field_name] = [-1e6, 1.0, 2.0] if listed else -1e6
        elif damage in ("format-true", "format-float"):
            content["format"] = True if damage == "format-true" else 1.0
        elif damage == "nan-text":
            entry[field_name] = "NaN"
        elif damage == "many-entries":
            content["entries"] = {f"k{n}": entry for n in range(5000)}
        elif damage == "entries-list":
            content["entries"] = [entry]
        text = json.dumps(content)
        if damage == "nested":
            text = "[" * 200_000
        elif damage == "huge":
            text = json.dumps({**content, "pad": "x" * (2 * 2**20)})
        elif damage == "empty":
            text = ""
        if damage == "not-utf8":
            path.write_bytes(b"\xff\xfe" + text.encode())
        elif damage == "link-file":
            (root / "precious.json").write_text("keep\n")
            path.symlink_to(root / "precious.json")
            allowed = []
        elif damage == "fifo":
            os.mkfifo(path)
            allowed = []
        elif damage == "folder":
            path.mkdir()
            allowed = []
        elif damage in ("link-folder", "group-writable-folder"):
            shutil.rmtree(folder)
            (root / "elsewhere").mkdir()
            if damage == "link-folder":
                folder.symlink_to(root / "elsewhere")
            else:
                folder.mkdir()
                folder.chmod(0o775)
                (folder / "calibration.json").write_text(text)
            path = folder / "calibration.json"
            allowed = []
        else:
            path.write_text(text)
        return Spec(kind="fork", call=("calibration", [str(path)]), allowed=allowed, timeout=60,
                    label=f"calibration cache: {damage}" + (f" in {field_name}" if damage in (
                        "400-digits", "negative", "nan-text") else ""))
    kind = rng.choice(CACHE_KINDS)
    xdg = root / "xdg"
    xdg.mkdir()
    cache = xdg / "cuda-graph-profiler"
    step = cwd / "cache_step.py"
    step.write_text(CACHE_STEP)
    allowed = ["cwd/out"]
    if kind == "clean":
        allowed.append("xdg/cuda-graph-profiler")
    elif kind in ("link-top", "link-bytecode"):
        (root / "elsewhere").mkdir()
        if kind == "link-top":
            cache.symlink_to(root / "elsewhere")
        else:
            cache.mkdir(mode=0o700)
            (cache / "bytecode").symlink_to(root / "elsewhere")
    elif kind in ("group-writable", "others-writable"):
        (cache / "bytecode").mkdir(parents=True)
        for folder in (cache, cache / "bytecode"):
            folder.chmod(0o770 if kind == "group-writable" else 0o757)
    elif kind == "loose-parent":
        xdg.chmod(0o777)
    elif kind == "file-at-top":
        cache.write_text("not a folder\n")
    elif kind == "fifo-bytecode":
        cache.mkdir(mode=0o700)
        os.mkfifo(cache / "bytecode")
    elif kind == "own-unchecked-pyc":  # the user's own private cache, holding a planted pyc
        planted = _pyc_path(cache, step)
        planted.parent.mkdir(parents=True, mode=0o700)
        for folder in [cache, *[p for p in planted.parents if cache in p.parents]]:
            folder.chmod(0o700)
        planted.write_bytes(_planted_pyc(root, step, stamped=False))
        allowed.append("xdg/cuda-graph-profiler")  # the cache may recompile it
    else:  # another user's: a shared XDG_CACHE_HOME that everyone may write to, as /tmp
        xdg.chmod(0o1777)
        if kind == "shared-top-of-another-user":
            _as_attacker(f"mkdir -m 700 '{cache}'")
        else:
            planted = _pyc_path(cache, step)
            _as_attacker(f"mkdir -p '{planted.parent}' && cat > '{planted}'",
                         _planted_pyc(root, step, stamped=kind.endswith("stamped")))
    argv = ["-B", "-c", CACHE_DRIVER, "run", "--workload", "cache_step:build", "--device", "cpu",
            "--replays", "8", "--trials", "2", "--parity-steps", "0", "--progress", "none",
            "--out", str(cwd / "out")]
    return Spec(argv, env={"XDG_CACHE_HOME": str(xdg)}, allowed=allowed, timeout=120,
                label=f"bytecode cache: {kind}")


MANIFEST_TAMPERING = ["size+1", "size-1", "hash-changed", "hash-removed", "hashes-removed",
                      "hashes-not-a-map", "hash-not-text", "lists-user-file", "lists-user-file-hashed",
                      "lists-rank-trace-wrong-hash", "lists-user-folder", "kind-sweep", "kind-bench",
                      "tool-other", "version-2", "version-true", "files-list", "size-400-digits",
                      "size-negative", "size-nan", "not-json", "nested", "huge", "bom", "link",
                      "missing", "folder", "same-size-table-edit", "untouched"]
USER_FILES = ["notes.txt", "trace_mine.json", "trace_eager_rank7.json.gz", "plots/", "thesis.tex", None,
              None]


def _tamper(rng: random.Random, folder: Path, how: str, user_file: str | None) -> None:
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    files = manifest["files"]
    name = rng.choice(sorted(files))
    hashes = manifest.setdefault("sha256", {})
    if how in ("size+1", "size-1"):
        files[name] += 1 if how == "size+1" else -1
    elif how == "hash-changed":
        hashes[name] = "0" * 64
    elif how == "hash-removed":
        del hashes[name]
    elif how == "hashes-removed":
        del manifest["sha256"]
    elif how == "hashes-not-a-map":
        manifest["sha256"] = sorted(hashes.values())
    elif how == "hash-not-text":
        hashes[name] = rng.choice([None, 5, ["x"], True])
    elif how.startswith("lists-user-file") and user_file and not user_file.endswith("/"):
        data = (folder / user_file).read_bytes()
        files[user_file] = len(data)
        # its true hash only for a name the tool never writes (listing a rank trace's name with its
        # hash would be saying that the tool wrote it)
        hashed = how.endswith("hashed") and "rank" not in user_file
        hashes[user_file] = hashlib.sha256(data).hexdigest() if hashed else "1" * 64
    elif how == "lists-rank-trace-wrong-hash":
        (folder / "trace_eager_rank7.json.gz").write_bytes(b"mine")
        files["trace_eager_rank7.json.gz"], hashes["trace_eager_rank7.json.gz"] = 4, "2" * 64
    elif how == "lists-user-folder":
        (folder / "plots").mkdir(exist_ok=True)
        manifest["folders"] = ["plots"]
    elif how.startswith("kind-"):
        manifest["kind"] = how[5:]
    elif how == "tool-other":
        manifest["tool"] = "other"
    elif how in ("version-2", "version-true"):
        manifest["manifest_version"] = 2 if how == "version-2" else True
    elif how == "files-list":
        manifest["files"] = sorted(files)
    elif how.startswith("size-"):
        files[name] = {"size-400-digits": 10**400, "size-negative": -5, "size-nan": float("nan")}[how]
    elif how == "same-size-table-edit":
        table = rng.choice([p for p in folder.iterdir() if p.suffix == ".csv"])
        data = bytearray(table.read_bytes())
        digits = [i for i, byte in enumerate(data) if chr(byte).isdigit()]
        if digits:
            at = rng.choice(digits)
            data[at] = ord("7") if data[at] != ord("7") else ord("3")
            table.write_bytes(bytes(data))
    text = json.dumps(manifest)
    if how == "not-json":
        text = text[: len(text) // 2]
    elif how == "nested":
        text = "[" * 200_000
    elif how == "huge":
        text = json.dumps({**manifest, "pad": "x" * (5 * 2**20)})
    elif how == "bom":
        text = "\ufeff" + text
    if how == "link":
        manifest_path.unlink()
        (folder.parent / "elsewhere.json").write_text(text)
        manifest_path.symlink_to(folder.parent / "elsewhere.json")
    elif how == "missing":
        manifest_path.unlink()
    elif how == "folder":
        manifest_path.unlink()
        manifest_path.mkdir()
    elif how != "untouched":
        manifest_path.write_text(text)


def gen_manifests(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    what = rng.choice(["run", "run", "sweep"])
    folder = copy_run(fixtures.real_run if what == "run" else fixtures.sweep, cwd / "own")
    user_file = rng.choice(USER_FILES)
    if user_file:
        if user_file.endswith("/"):
            (folder / user_file).mkdir()
            (folder / user_file / "figure.png").write_bytes(b"\x89PNG mine")
        else:
            (folder / user_file).write_bytes(b'{"traceEvents": []} mine')
    how = rng.choice(MANIFEST_TAMPERING)
    _tamper(rng, folder, how, user_file)
    # the tool's own files may be replaced; a file or folder of the user's never
    own = [p.name for p in fixtures.real_run.iterdir()] if what == "run" else [
        p.name for p in fixtures.sweep.iterdir()]
    allowed = [f"cwd/own/{name}" for name in own if name != user_file] + ["cwd/own$", "cwd/elsewhere.json$"]
    if what == "run":
        argv = ["-m", "profiler_core", "run", "--out", str(folder), *TINY, "--no-profile",
                "--parity-steps", "0", "--overwrite"]
        codes = RUN_CODES
    else:
        argv = ["-m", "profiler_core", "sweep", *SWEEP_BASE, "--param", "batch=8", "--out", str(folder),
                "--overwrite"]
        codes = SWEEP_CODES
    if how == "link":  # the link's target is the user's: it stays as it was
        allowed.remove("cwd/elsewhere.json$")
    return Spec(argv, allowed=allowed, codes=codes, timeout=150,
                label=f"{what} --overwrite, manifest {how}" + (f", user's {user_file}" if user_file else ""))


BENCH_OUTS = ["new", "nested-new", "file", "dev-null", "link-to-folder", "link-to-file", "run-folder",
              "users-tables", "empty", "own", "own", "own-with-user-file", "own-same-size-edit",
              "own-linked-table", "own-manifest-tampered", "own-without-manifest", "blank", "dot",
              "dotdot", "long", "odd-name"]  # (a forked child runs as the campaign: no ~ of its own)


def gen_bench(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    import pandas as pd

    cwd = root / "cwd"
    kind = rng.choice(BENCH_OUTS)
    overwrite = rng.random() < 0.5
    out: str = str(cwd / "b")
    allowed = ["cwd/b"]
    tables = {"rounds": pd.DataFrame({"config": ["x"], "eager": [1.5]}),
              "fidelity": pd.DataFrame({"config": ["x"], "tool_over_bare": [1.25]})}
    if kind == "nested-new":
        out, allowed = str(cwd / "a" / "b" / "c"), ["cwd/a"]
    elif kind == "file":
        (cwd / "b").write_text("mine\n")
        allowed = []
    elif kind == "dev-null":
        out, allowed = "/dev/null", []
    elif kind.startswith("link-to-"):
        target = cwd / ("folder" if kind.endswith("folder") else "file.csv")
        target.mkdir() if kind.endswith("folder") else target.write_text("mine\n")
        (cwd / "b").symlink_to(target)
        allowed = []
    elif kind == "run-folder":
        copy_run(fixtures.real_run, cwd / "b")
        allowed = []
    elif kind == "users-tables":
        (cwd / "b").mkdir()
        (cwd / "b" / "bench_fidelity.csv").write_text("config,mine\nx,1\n")
        allowed = []
    elif kind == "empty":
        (cwd / "b").mkdir()
        allowed = []
    elif kind.startswith("own"):
        from profiler_core.storage.bench_output import write_bench_tables

        write_bench_tables(tables, cwd / "b")
        allowed = ["cwd/b"] if kind == "own" and overwrite else []
        if kind == "own-with-user-file":
            (cwd / "b" / "notes.txt").write_text("mine\n")
        elif kind == "own-same-size-edit":
            path = cwd / "b" / "bench_rounds.csv"
            path.write_text(path.read_text().replace("1.5", "2.5"))
        elif kind == "own-linked-table":
            (cwd / "precious.csv").write_text("keep\n")
            (cwd / "b" / "bench_rounds.csv").unlink()
            (cwd / "b" / "bench_rounds.csv").symlink_to(cwd / "precious.csv")
        elif kind == "own-manifest-tampered":
            manifest = json.loads((cwd / "b" / "manifest.json").read_text())
            manifest[rng.choice(["kind", "tool", "files", "sha256"])] = rng.choice(["run", None, 5, []])
            (cwd / "b" / "manifest.json").write_text(json.dumps(manifest))
        elif kind == "own-without-manifest":
            (cwd / "b" / "manifest.json").unlink()
    elif kind in ("blank", "dot", "dotdot"):
        out, allowed = {"blank": "", "dot": ".", "dotdot": ".."}[kind], []
    elif kind == "long":
        out, allowed = str(cwd / ("d" * 255)), []
    elif kind == "odd-name":
        name = rng.choice(["a\nb", " lead", "-rf", "x;y", "\u202etxt"])
        out, allowed = str(cwd / name), [f"cwd/{name}"]
    return Spec(kind="fork", call=("bench", [out, overwrite]), allowed=allowed, timeout=60,
                label=f"bench --out {kind}" + (" --overwrite" if overwrite else ""))


def _running_with(case_id: str, variable: str) -> list[int]:
    """The case's live processes whose environment holds ``variable`` (``RANK=1``...)."""
    found = []
    for pid in marked_processes(case_id):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if f"\0{variable}\0".encode() in b"\0" + handle.read():
                    found.append(pid)
        except OSError:
            continue
    return found


def _after_line(words: str, then: Callable[[subprocess.Popen, Path, str], None], wait_s: float,
                limit_s: float = 150.0) -> Callable:
    """Wait for a stdout line holding ``words`` (a progress record), run ``then``, and wait for
    the process at most ``wait_s`` more."""
    def interact(proc: subprocess.Popen, root: Path, case_id: str):
        deadline = time.monotonic() + limit_s
        seen = b""
        while words.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                line = proc.stdout.readline()
                if not line:
                    break
                seen = line
        then(proc, root, case_id)
        code, out, err, hang = collect(proc, None, wait_s)
        return (None if hang else code), out, err, hang, ""
    return interact


def _signal(signum: int, delay_s: float) -> Callable[[subprocess.Popen, Path, str], None]:
    def send(proc: subprocess.Popen, root: Path, case_id: str) -> None:
        time.sleep(delay_s)
        try:
            proc.send_signal(signum)
        except OSError:
            pass
    return send


def _kill_rank(rank: int, delay_s: float) -> Callable[[subprocess.Popen, Path, str], None]:
    def kill(proc: subprocess.Popen, root: Path, case_id: str) -> None:
        time.sleep(delay_s)
        for pid in _running_with(case_id, f"RANK={rank}"):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return kill


def _killed_then_next_run(delay_s: float, next_argv: list[str], words: str = "") -> Callable:
    """SIGKILL a parent (``delay_s`` after its stdout shows ``words``), wait for the processes it
    started to end, make whatever the tool left in the case's folder a few minutes old, then run
    ``next_argv``: the next run must clear the leftovers of the killed one (what is still there
    counts as changed outside). Judged by the next run."""
    def interact(proc: subprocess.Popen, root: Path, case_id: str):
        deadline = time.monotonic() + 150
        seen = b""
        while words and words.encode() not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            seen = proc.stdout.readline() if ready else seen
        time.sleep(delay_s)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 45  # torchrun gives its ranks 30 s after its death signal
        while marked_processes(case_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        old = time.time() - 600
        left = 0
        for folder in (root / "cwd", root / "tmp"):
            for path in folder.iterdir():
                if path.name.startswith((".out.r", "profiler_core_torchrun_")):
                    left += 1
                    for item in [path, *path.rglob("*")]:
                        os.utime(item, (old, old), follow_symlinks=False)
        command = [PY, "-S", "-c", STUB, str(LIMIT_AS), PY, *next_argv]
        nxt = subprocess.Popen(command, cwd=root / "cwd", env=case_env(root, case_id, {}),
                               start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        code, out, err, hang = collect(nxt, None, 120)
        return (None if hang else code), out, err, hang, f"{left} leftover(s) after the kill"
    return interact


def gen_repeats(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    family = rng.choice(["plain", "timeout", "timeout", "timeout", "interrupt", "interrupt", "sigkill",
                         "sigkill", "values", "out"])
    base = ["-m", "profiler_core", "run", *TINY[:-2], "--progress", "jsonl", "--out", str(cwd / "out")]
    long = ["--replays", "100000"]
    if family == "plain":
        n = rng.choice([2, 3])
        return Spec([*base, "--repeats", str(n)], allowed=["cwd/out"], timeout=150,
                    label=f"--repeats {n}")
    if family == "timeout":
        limit = rng.choice(["0.5", "1", "2", "4", "6"])
        return Spec([*base, *long, "--repeats", rng.choice(["2", "3", "15"]), "--timeout", limit],
                    allowed=["cwd/out"], timeout=60, label=f"--repeats with --timeout {limit} (hangs)")
    if family == "interrupt":
        how = rng.choice([signal.SIGINT, signal.SIGTERM])
        delay = rng.uniform(1.0, 10.0)
        return Spec([*base, *long, "--repeats", "3", "--timeout", "0"], allowed=["cwd/out"], timeout=90,
                    interact=_interrupt_after(delay, [how] * rng.choice([1, 2])),
                    label=f"--repeats 3, {how.name} after {delay:.1f} s")
    if family == "sigkill":
        delay = rng.uniform(3.0, 8.0)
        after = ["-m", "profiler_core", "run", *TINY, "--out", str(cwd / "next")]
        return Spec([*base, *long, "--repeats", "3", "--timeout", "0"], allowed=["cwd/out", "cwd/next"],
                    timeout=150, grace=12.0, interact=_killed_then_next_run(delay, after),
                    label=f"--repeats parent SIGKILLed after {delay:.1f} s, then the next run")
    if family == "values":
        value = rng.choice(["\u0663", "0", "16", "-1", "1e3", "3.0", " 3", "\uff13", ""])
        return Spec([*base, "--repeats", value], allowed=["cwd/out"], timeout=60,
                    label=f"--repeats {value!r}")
    out, allowed, overwrite, kind = out_destination(rng, fixtures, root)
    argv = ["-m", "profiler_core", "run", *TINY, "--repeats", "2", "--out", out]
    return Spec(argv + (["--overwrite"] if overwrite else []), allowed=allowed, timeout=150,
                label=f"--repeats 2 --out {kind}")


DDP_STEP = '''import os
import torch
from torch import nn


class OnRankOne(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer, self.steps = nn.Linear(16, 4), 0

    def forward(self, x):
        self.steps += 1
        if os.environ.get("RANK") == "1" and self.steps > 5:
            {action}
        return self.layer(x)


def build(device):
    def batch(generator):
        return (torch.randn(8, 16, device=device, generator=generator),
                torch.randn(8, 4, device=device, generator=generator))
    return {{"model": OnRankOne().to(device), "batch": batch}}
'''
DDP_SMALL = ["--device", "cpu", "--batch", "32", "--d-in", "64", "--hidden", "64", "--d-out", "16",
             "--no-profile", "--trials", "20"]


def gen_ddp(fixtures: Fixtures, root: Path, rng: random.Random) -> Spec:
    cwd = root / "cwd"
    family = rng.choice(["stop-timed", "stop-timed", "stop-early", "timeout", "kill-launcher",
                         "kill-rank", "kill-rank", "user-step", "user-step", "refused"])
    base = ["-m", "profiler_core", "run", *DDP_SMALL, "--replays", "100000", "--nproc-per-node", "2",
            "--progress", "jsonl", "--out", str(cwd / "out")]
    if family == "stop-timed":
        how, delay = rng.choice([signal.SIGINT, signal.SIGTERM]), rng.uniform(0.0, 5.0)
        return Spec(base, allowed=["cwd/out"], timeout=150, grace=35.0,
                    interact=_after_line('"timed trials"', _signal(how, delay), 90),
                    label=f"data-parallel, {how.name} {delay:.1f} s into the timed trials")
    if family == "stop-early":
        how, delay = rng.choice([signal.SIGINT, signal.SIGTERM]), rng.uniform(0.5, 6.0)
        return Spec(base, allowed=["cwd/out"], timeout=150, grace=35.0,
                    interact=_interrupt_after(delay, [how] * rng.choice([1, 1, 2]), 90),
                    label=f"data-parallel, {how.name} {delay:.1f} s after the start")
    if family == "timeout":
        limit = rng.choice(["10", "20", "30"])
        return Spec([*base, "--timeout", limit], allowed=["cwd/out"], timeout=150, grace=35.0,
                    label=f"data-parallel --timeout {limit}")
    if family == "kill-launcher":
        delay = rng.uniform(0.0, 4.0)
        after = ["-m", "profiler_core", "run", *DDP_SMALL, "--replays", "40", "--trials", "4",
                 "--nproc-per-node", "2", "--progress", "none", "--out", str(cwd / "next")]
        return Spec(base, allowed=["cwd/out", "cwd/next"], timeout=240, grace=10.0,
                    interact=_killed_then_next_run(delay, after, '"timed trials"'),
                    label=f"data-parallel launcher SIGKILLed {delay:.1f} s into the timed trials, "
                          "then the next run")
    if family == "kill-rank":
        rank, delay = rng.choice([0, 1]), rng.uniform(0.0, 4.0)
        return Spec(base, allowed=["cwd/out"], timeout=150, grace=35.0,
                    interact=_after_line('"timed trials"', _kill_rank(rank, delay), 90),
                    label=f"data-parallel, rank {rank} SIGKILLed {delay:.1f} s into the timed trials")
    if family == "user-step":
        action = rng.choice(["os._exit(3)", "raise ValueError('rank 1 cannot go on')",
                             "import time; time.sleep(3600)", "os.kill(os.getpid(), 11)",
                             "raise SystemExit(5)", "raise KeyboardInterrupt"])
        (cwd / "ddp_step.py").write_text(DDP_STEP.format(action=action))
        argv = ["-m", "profiler_core", "run", "--workload", "ddp_step:build", "--device", "cpu",
                "--replays", "40", "--trials", "4", "--nproc-per-node", "2", "--timeout", "40",
                "--out", str(cwd / "out")]
        return Spec(argv, allowed=["cwd/out"], timeout=150, grace=35.0,
                    label=f"data-parallel, your step on rank 1: {action}")
    case = rng.choice(["rank-env", "too-many", "digits", "delay-alone", "delay-rank"])
    argv = ["-m", "profiler_core", "run", *DDP_SMALL, "--out", str(cwd / "out")]
    env: dict[str, str] = {}
    if case == "rank-env":
        env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    elif case == "too-many":
        argv += ["--nproc-per-node", rng.choice(["3", "64"])]
    elif case == "digits":
        argv += ["--nproc-per-node", rng.choice(["\u0662", "\uff12"])]
    elif case == "delay-alone":
        argv += ["--inject-delay-ms", "0:5"]
    else:
        argv += ["--nproc-per-node", "2", "--inject-delay-ms", "5:1"]
    return Spec(argv, env=env, allowed=["cwd/out"], timeout=90, label=f"data-parallel refused: {case}")


GENERATORS = {"cli": gen_cli, "trace-stats": gen_trace_stats, "sweep": gen_sweep, "predict": gen_predict,
              "index": gen_index, "loader": gen_loader, "uploads": gen_uploads, "dashboard": gen_dashboard,
              "workload": gen_workload, "serve": gen_serve, "caches": gen_caches,
              "manifests": gen_manifests, "bench": gen_bench, "repeats": gen_repeats, "ddp": gen_ddp}


# ----------------------------------------------------------------------------- the campaign


def campaign(seed: int, scale: float, only: list[str], jobs: int, case: int | None, keep: Path | None,
             log: Path | None) -> Tally:
    import functools

    tally = Tally()
    failures: list[Result] = []
    errors: list[str] = []  # cases the campaign itself could not build or judge
    with tempfile.TemporaryDirectory(prefix="profiler_core_fuzz_") as folder:
        sandbox = Path(folder)
        os.chmod(sandbox, 0o755)
        wrong = self_check(sandbox, seed)
        print(f"self-check: {len(CONTROLS) - len(wrong)} of {len(CONTROLS)} control cases classified as "
              f"expected {wrong or ''}", flush=True)
        if wrong:
            raise SystemExit("the campaign's classification is broken: " + "; ".join(wrong))
        fixtures = Fixtures(sandbox / "fixtures")
        fixture_state = snapshot(fixtures.folder)
        cases = []
        for key in only:
            count = max(1, round(CATEGORIES[key][1] * scale))
            numbers = [case] if case is not None else range(count)
            cases += [Case(key, number, functools.partial(GENERATORS[key], fixtures)) for number in numbers]
        # the slowest categories first, so the two workers finish together
        order = ["ddp", "dashboard", "repeats", "serve", "sweep", "manifests", "caches", "workload",
                 "cli", "index", "trace-stats", "predict", "bench", "uploads", "loader"]
        cases.sort(key=lambda c: order.index(c.category))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = {pool.submit(execute, c, sandbox, seed, keep): c for c in cases}
            for future in concurrent.futures.as_completed(futures):
                try:
                    results = future.result()
                except Exception as error:  # the campaign's own bug: say so, go on
                    import traceback

                    where = futures[future]
                    errors.append(f"{where.category} #{where.index}: {type(error).__name__}: {error}")
                    print(f"CAMPAIGN ERROR in {where.category} #{where.index}:\n"
                          + "".join(traceback.format_exception(error))[-2000:], flush=True)
                    continue
                for result in results:
                    tally.add(result)
                    if result.flags:
                        failures.append(result)
        Forks.close()
        if snapshot(fixtures.folder) != fixture_state:
            print("WARNING: a case changed the shared fixtures", flush=True)
    failures.sort(key=lambda r: (list(CATEGORIES).index(r.category), r.index))
    for result in failures:
        print(f"\n[{result.category} #{result.index}] {sorted(result.flags)} {result.label}\n"
              f"  repro: {result.repro}\n  {result.detail[-1200:]}")
    if errors:
        print(f"\n{len(errors)} case(s) not counted, the campaign's own errors: {errors}")
    if log is not None:
        with open(log, "w") as handle:
            for result in failures:
                handle.write(json.dumps(result.__dict__ | {"flags": sorted(result.flags)}) + "\n")
    return tally


CONTROLS = [  # (what, spec, flags expected): the classification itself, checked on every campaign
    ("a refusal in one line", Spec(["-c", "import sys; print('error: no', file=sys.stderr); sys.exit(2)"]), set()),
    ("a traceback", Spec(["-c", "raise ValueError('x')"]), {"traceback"}),
    ("a hang", Spec(["-c", "import time; time.sleep(60)"], timeout=2), {"hang"}),
    ("5 GiB under the limit", Spec(["-c", "x = bytearray(5 * 2**30)"]), {"memory"}),
    ("an undocumented exit", Spec(["-c", "import sys; sys.exit(9)"]), {"other"}),
    ("a child left behind", Spec(["-c", ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
                                         "'import time; time.sleep(30)'], start_new_session=True)")],
                                 grace=1), {"orphans"}),
    ("a file written outside", Spec(["-c", "open('../home/x', 'w').write('y')"]), {"changed"}),
    ("a file of the user's changed", Spec(["-c", "open('mine.txt', 'a').write('y')"]), {"destroyed"}),
    ("a file in the output", Spec(["-c", "import os; os.makedirs('out'); open('out/x', 'w').write('y')"],
                                  allowed=["cwd/out"]), set()),
]


def self_check(sandbox: Path, seed: int) -> list[str]:
    """Run the control cases; returns the ones not classified as expected."""
    wrong = []
    for number, (what, spec, expected) in enumerate(CONTROLS):
        def build(root, rng, spec=spec, what=what):
            (root / "cwd" / "mine.txt").write_text("keep\n")
            return Spec(**{**spec.__dict__, "label": what})

        (result,) = execute(Case("controls", number, build), sandbox, seed, None)
        if result.flags != expected:
            wrong.append(f"{what}: {sorted(result.flags)}, expected {sorted(expected)}")
    return wrong


def _repo_state() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], check=False, cwd=REPO,
                          capture_output=True, text=True).stdout


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default=",".join(CATEGORIES),
                        help="categories, comma-separated: " + ", ".join(CATEGORIES))
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default: 2)")
    parser.add_argument("--case", type=int, help="run only this case number (with --only)")
    parser.add_argument("--keep", type=Path, help="copy the folders of non-clean cases here")
    parser.add_argument("--log", type=Path, help="write every non-clean case here, as JSON lines")
    args = parser.parse_args()
    chosen = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CATEGORIES]
    if unknown:
        parser.error(f"unknown categories {unknown}; known: {', '.join(CATEGORIES)}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    repo_before = _repo_state()
    started = time.monotonic()
    result = campaign(args.seed, args.scale, chosen, args.jobs, args.case, args.keep, args.log)
    print()
    print(result.show())
    print(f"\nseed {args.seed}, scale {args.scale}, jobs {args.jobs}: {time.monotonic() - started:.0f} s")
    if _repo_state() != repo_before:
        print("WARNING: the repository's files changed during the campaign:\n" + _repo_state())
