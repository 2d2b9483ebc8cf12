"""A bad-input campaign with counts, for the record (not a test: ``tests/test_*`` hold the checks).

Usage: python tests/fuzz/campaign.py [--seed N] [--scale K]
Per category it feeds generated bad inputs to the real entry points, in this process (the CLI's
``main``, ``RunResult.load``) or in fresh processes (``python -m profiler_core``), inside a
sandbox folder, and counts: clean outcomes (exit 0, or a refusal in one line with exit 2, 3 or
5), tracebacks, hangs (over the time limit) and files changed outside the run's own output folder.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from profiler_core.__main__ import main  # noqa: E402
from profiler_core.errors import ProfilerError  # noqa: E402
from profiler_core.results import RunResult  # noqa: E402
from tests.test_output_safety import REFUSED, TINY, a_run, make, snapshot  # noqa: E402

NASTY = ["", " ", ".", "..", "-1", "0", "1e308", "nan", "inf", "-inf", "1_000", "9" * 40, "0x10",
         "a\nb", "a\rb", "\u2028", "\x00", "'; rm -rf /", "$(touch pwned)", "=cmd|' /C calc'!A0",
         "![x](http://attacker.invalid/p.png)", "é", "😀", "--help", "cuda:99", "cuda:-1", "cpu\n"]
OPTIONS = ["--batch", "--d-in", "--hidden", "--d-out", "--hidden-layers", "--dtype", "--optimizer",
           "--warmup-iters", "--capture-iters", "--replays", "--eager-iters", "--seed", "--device",
           "--trials", "--profile-iters", "--nvml-interval-ms", "--parity-steps", "--preset",
           "--workload", "--progress", "--dropout"]


class Tally:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, int]] = {}

    def add(self, category: str, outcome: str) -> None:
        row = self.rows.setdefault(category, {"tried": 0, "clean": 0, "traceback": 0, "hang": 0,
                                              "files_changed": 0})
        row["tried"] += 1
        row[outcome] += 1

    def show(self) -> str:
        header = f"{'category':38s} {'tried':>6s} {'clean':>6s} {'traceback':>9s} {'hang':>5s} {'files changed':>13s}"
        lines = [header]
        for name, row in self.rows.items():
            lines.append(f"{name:38s} {row['tried']:6d} {row['clean']:6d} {row['traceback']:9d} "
                         f"{row['hang']:5d} {row['files_changed']:13d}")
        return "\n".join(lines)


def call_main(argv: list[str]) -> tuple[int | None, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exit_:  # --help
        code = exit_.code if isinstance(exit_.code, int) else 0
    except BaseException as error:  # noqa: BLE001 - counted as a traceback
        return None, f"Traceback: {type(error).__name__}: {error}"
    return code, err.getvalue()


def clean(code: int | None, err: str) -> bool:
    if code is None or "Traceback" in err:
        return False
    if code == 0:
        return True
    return code in (2, 3, 5) and err.startswith("error: ") and err.count("\n") == 1


def outcome(code: int | None, err: str, changed: bool) -> str:
    if changed:
        return "files_changed"
    return "clean" if clean(code, err) else "traceback"


def cli_out_paths(tally: Tally, rng: random.Random, sandbox: Path, saved_run: Path, count: int) -> None:
    kinds = REFUSED + ["new", "own_run", "own_run_overwrite"]
    for index in range(count):
        root = sandbox / f"out{index}"
        root.mkdir()
        kind = rng.choice(kinds)
        if kind == "new":
            out = str(root / ("new" + rng.choice(["", "/deeper", "/a b"])))
        elif kind.startswith("own_run"):
            shutil.copytree(saved_run, root / "own")
            out = str(root / "own")
        else:
            out = make(kind, root, saved_run) + rng.choice(["", "", "/.", "/x"])
        before = snapshot(root)
        argv = ["run", "--out", out, *TINY, "--parity-steps", "0"]
        if kind == "own_run_overwrite" or rng.random() < 0.3:
            argv.append("--overwrite")
        code, err = call_main(argv)
        after = snapshot(root)
        # only the run's own folder may change (a new one, or our run replaced with --overwrite)
        own = Path(out).resolve()
        changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        # a missing parent folder of the output is created for it: new, empty, and on its way
        on_the_way = {str(parent.relative_to(root)) for parent in own.parents
                      if parent.is_relative_to(root.resolve()) and parent != root.resolve()}
        outside = [k for k in changed if not (root / k).resolve().is_relative_to(own)
                   and not (k in on_the_way and k not in before)]
        if outside and os.environ.get("FUZZ_VERBOSE"):
            print("CHANGED", kind, out, argv[-1], sorted(outside)[:5], err[:200])
        tally.add("CLI --out destinations (in process)", outcome(code, err, bool(outside)))


def cli_argv(tally: Tally, rng: random.Random, sandbox: Path, count: int) -> None:
    for index in range(count):
        argv = ["run", "--out", str(sandbox / f"argv{index}"), "--device", "cpu", "--progress", "none",
                "--replays", "4", "--batch", "4", "--d-in", "8", "--hidden", "8", "--d-out", "2",
                "--parity-steps", "0"]  # small unless an option below changes it (the last wins)
        for _ in range(rng.randint(1, 3)):
            option = rng.choice(OPTIONS)
            argv += [option] + [rng.choice(NASTY) for _ in range(2 if option == "--dropout" else 1)]
        if rng.random() < 0.2:
            argv.insert(1, rng.choice(NASTY))
        before = snapshot(sandbox)
        started = time.monotonic()
        code, err = call_main(argv)
        if time.monotonic() - started > 120:
            tally.add("CLI options (in process)", "hang")
            continue
        after = snapshot(sandbox)
        extra = {k for k in after if k not in before and not k.startswith(f"argv{index}")}
        tally.add("CLI options (in process)", outcome(code, err, bool(extra)))


def cli_subprocess(tally: Tally, rng: random.Random, sandbox: Path, saved_run: Path, count: int) -> None:
    for index in range(count):
        root = sandbox / f"proc{index}"
        root.mkdir()
        kind = rng.choice(REFUSED)
        out = make(kind, root, saved_run)
        before = snapshot(root)
        argv = [sys.executable, "-m", "profiler_core", "run", "--out", out, *TINY]
        if rng.random() < 0.5:
            argv += [rng.choice(OPTIONS), rng.choice([v for v in NASTY if "\x00" not in v])]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
        except subprocess.TimeoutExpired:
            tally.add("CLI in a fresh process", "hang")
            continue
        tally.add("CLI in a fresh process",
                  outcome(done.returncode, done.stderr, snapshot(root) != before))


def hostile_traces(tally: Tally, rng: random.Random, sandbox: Path, count: int) -> None:
    def event() -> dict:
        base = {"ph": rng.choice(["X", "X", "B", "i", 7, None]), "name": rng.choice(NASTY + ["k"]),
                "cat": rng.choice(["kernel", "cuda_runtime", "user_annotation", "cpu_op", 3]),
                "ts": rng.choice([0, 1, -5, 1e300, "nan", "12", None, "1" + "0" * 400, [1]]),
                "dur": rng.choice([1, 0, -10, "inf", None, 2.5, {"a": 1}]),
                "pid": rng.choice([1, "x", None]), "tid": 1,
                "args": rng.choice([{"correlation": rng.choice([1, "a", None, -1])}, None, [], "x"])}
        return {k: v for k, v in base.items() if rng.random() > 0.1}

    for index in range(count):
        path = sandbox / f"trace{index}.json"
        shape = rng.random()
        if shape < 0.6:
            payload = json.dumps({"traceEvents": [event() for _ in range(rng.randint(0, 30))]})
        elif shape < 0.7:
            payload = "[" * rng.randint(1000, 100_000) + "]" * rng.randint(0, 10)
        elif shape < 0.8:
            payload = rng.choice(["", "{", "null", "[]", "{\"traceEvents\": 5}", "\xff\xfe"])
        elif shape < 0.9:
            payload = json.dumps({"traceEvents": [{"ph": "X", "name": "k" * rng.randint(1, 5000),
                                                   "cat": "kernel", "ts": 1, "dur": 1}]})
        else:
            payload = None
            with gzip.open(path.with_suffix(".gz"), "wb") as packed:
                packed.write(json.dumps({"traceEvents": [event() for _ in range(20)]}).encode())
            path = path.with_suffix(".gz")
        if payload is not None:
            path.write_bytes(payload.encode("utf-8", "surrogatepass"))
        started = time.monotonic()
        code, err = call_main(["trace-stats", str(path)])
        if time.monotonic() - started > 60:
            tally.add("trace-stats on generated traces", "hang")
            continue
        tally.add("trace-stats on generated traces", outcome(code, err, False))
    for special in ("/dev/zero", "/dev/urandom", "/dev/null"):
        link = sandbox / f"link-{Path(special).name}.json"
        link.symlink_to(special)
        code, err = call_main(["trace-stats", str(link)])
        tally.add("trace-stats on special files", outcome(code, err, False))
    fifo = sandbox / "fifo.json"
    os.mkfifo(fifo)
    code, err = call_main(["trace-stats", str(fifo)])
    tally.add("trace-stats on special files", outcome(code, err, False))


def damaged_runs(tally: Tally, rng: random.Random, sandbox: Path, saved_run: Path, count: int) -> None:
    import pandas as pd

    files = [p.name for p in saved_run.iterdir() if p.suffix == ".csv"]
    for index in range(count):
        run = sandbox / f"damaged{index}"
        shutil.copytree(saved_run, run)
        target = run / rng.choice(files + ["summary.json"])
        if target.name == "summary.json":
            summary = json.loads(target.read_text())
            key = rng.choice(["schema_version", "complete", "notes", "config", "headline", "tool"])
            summary[key] = rng.choice([1.0, True, "x", None, [], {}, -1, 3, NASTY[rng.randrange(len(NASTY))]])
            target.write_text(json.dumps(summary))
        else:
            frame = pd.read_csv(target, dtype=str)
            if len(frame):
                frame.iloc[rng.randrange(len(frame)), rng.randrange(len(frame.columns))] = rng.choice(NASTY)
            frame.to_csv(target, index=False)
        try:
            RunResult.load(run)
            result = "clean"
        except ProfilerError as error:
            result = "clean" if "\n" not in error.message else "traceback"
        except BaseException as error:  # noqa: BLE001
            result = "traceback"
            if os.environ.get("FUZZ_VERBOSE"):
                print("TRACEBACK", target.name, repr(error)[:300])
        tally.add("run folders, one value damaged (load)", result)


def campaign(seed: int, scale: int) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="profiler_core_fuzz_") as folder:
        sandbox = Path(folder)
        saved_run = a_run(sandbox / "reference-run")
        (sandbox / "out").mkdir()
        cli_out_paths(tally, rng, sandbox / "out", saved_run, 40 * scale)
        (sandbox / "argv").mkdir()
        cli_argv(tally, rng, sandbox / "argv", 60 * scale)
        (sandbox / "proc").mkdir()
        cli_subprocess(tally, rng, sandbox / "proc", saved_run, 4 * scale)
        (sandbox / "traces").mkdir()
        hostile_traces(tally, rng, sandbox / "traces", 100 * scale)
        (sandbox / "damaged").mkdir()
        damaged_runs(tally, rng, sandbox / "damaged", saved_run, 60 * scale)
    return tally


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    started = time.monotonic()
    result = campaign(args.seed, args.scale)
    print(result.show())
    print(f"({time.monotonic() - started:.0f} s)")
