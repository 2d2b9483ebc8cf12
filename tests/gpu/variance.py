"""What moves a host-bound eager step between fresh processes (issue 17, item 3), for the record.

Usage: python3 tests/gpu/variance.py OUT_CSV [--rounds R] [--cores K]
Runs the bare loop (profiler_core/timing/bare_loop.py, seed bf16) in fresh processes under several
conditions, round-robin so drift hits every condition alike, and writes one row per process:
condition, round, eager and graph ms per step, and the CPUs the process was seen running on
(sampled from /proc/<pid>/stat every 50 ms). Conditions: unpinned; one torch thread
(OMP_NUM_THREADS=1); pinned to one CPU (a different CPU each round); pinned to one CPU with
one thread; pinned to 4 CPUs. Then it prints medians, ranges and coefficients of variation.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOOP = [sys.executable, str(REPO / "profiler_core" / "bare_loop.py"), "--dtype", "bf16",
        "--iterations", "300", "--blocks", "6"]


def last_cpu(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[36])  # field 39 of stat: the CPU last run on
    except (OSError, IndexError, ValueError):
        return None


def run_one(prefix: list[str], env: dict[str, str]) -> tuple[dict, list[int]]:
    process = subprocess.Popen(prefix + LOOP, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, **env})
    seen: list[int] = []
    while process.poll() is None:
        cpu = last_cpu(process.pid)
        if cpu is not None:
            seen.append(cpu)
        time.sleep(0.05)
    out, err = process.communicate()
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        return {"error": err.strip().splitlines()[-1:] or ["?"]}, seen
    return json.loads(lines[-1]), seen


def idlest_cpu(cpus: list[int], seconds: float = 0.3) -> int:
    """The CPU with the most idle time over ``seconds`` (from /proc/stat)."""
    def idle() -> dict[int, int]:
        out = {}
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                name, *values = line.split()
                out[int(name[3:])] = int(values[3]) + int(values[4])
        return out
    before = idle()
    time.sleep(seconds)
    after = idle()
    return max(cpus, key=lambda c: after.get(c, 0) - before.get(c, 0))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--scan", action="store_true",
                        help="instead: pin to each CPU in turn, then alternate unpinned and "
                             "pinned to the idlest CPU")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    print(f"cpus {len(cpus)}, load {os.getloadavg()}", flush=True)
    rows = []
    if args.scan:
        plan = [(f"cpu{c}", ["taskset", "-c", str(c)], {}) for c in cpus]
        for _ in range(args.rounds):
            plan.append(("unpinned", [], {}))
            plan.append(("pin_idlest", None, {}))
        for r, (name, prefix, env) in enumerate(plan):
            if prefix is None:
                prefix = ["taskset", "-c", str(idlest_cpu(cpus))]
            result, seen = run_one(prefix, env)
            row = {"condition": name, "round": r, "pinned": " ".join(prefix[2:]),
                   "eager_ms": result.get("eager_ms"), "graph_ms": result.get("graph_ms"),
                   "cpus_seen": " ".join(str(c) for c in sorted(set(seen))),
                   "migrations": sum(1 for a, b in zip(seen, seen[1:]) if a != b),
                   "error": result.get("error")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    for r in range(0 if args.scan else args.rounds):
        one = cpus[(3 + 5 * r) % len(cpus)]
        conditions = {
            "unpinned": ([], {}),
            "threads1": ([], {"OMP_NUM_THREADS": "1"}),
            "pin1": (["taskset", "-c", str(one)], {}),
            "pin1_threads1": (["taskset", "-c", str(one)], {"OMP_NUM_THREADS": "1"}),
            "pin4": (["taskset", "-c", ",".join(str(c) for c in cpus[2:6])], {}),
        }
        names = list(conditions)
        if r % 2:
            names.reverse()
        for name in names:
            prefix, env = conditions[name]
            result, seen = run_one(prefix, env)
            row = {"condition": name, "round": r, "pinned": " ".join(prefix[2:]),
                   "eager_ms": result.get("eager_ms"), "graph_ms": result.get("graph_ms"),
                   "cpus_seen": " ".join(str(c) for c in sorted(set(seen))),
                   "migrations": sum(1 for a, b in zip(seen, seen[1:]) if a != b),
                   "error": result.get("error")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for name in dict.fromkeys(row["condition"] for row in rows):
        eager = [row["eager_ms"] for row in rows if row["condition"] == name and row["eager_ms"]]
        graph = [row["graph_ms"] for row in rows if row["condition"] == name and row["graph_ms"]]
        if len(eager) >= 2:
            cv = statistics.stdev(eager) / statistics.fmean(eager) * 100
            print(f"{name:14s} eager median {statistics.median(eager):.3f} ms "
                  f"range {min(eager):.3f}-{max(eager):.3f} CV {cv:.1f}%  "
                  f"graph median {statistics.median(graph):.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
