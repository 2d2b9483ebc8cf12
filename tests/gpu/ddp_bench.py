"""The tool's per-rank step times against the hand-written loop (``ddp_bare_loop.py``), in
alternating fresh launches (tool, bare, tool, bare...): acceptance (c), within 3%.

Usage: python tests/gpu/ddp_bench.py --nproc 2 --rounds 4 --out DIR
Prints one line per rank and mode (tool median, bare median, ratio) and writes bench.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIZES = ["--batch", "64", "--d-in", "512", "--hidden", "512", "--d-out", "256",
         "--hidden-layers", "4"]


def tool(nproc: int, out: Path) -> dict[tuple[int, str], float]:
    subprocess.run([sys.executable, "-m", "profiler_core", "run", "--preset", "custom", *SIZES,
                    "--replays", "400", "--no-profile", "--no-nvml", "--parity-steps", "0",
                    "--nproc-per-node", str(nproc), "--progress", "none", "--out", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    sys.path.insert(0, str(ROOT))
    from profiler_core.storage.results import RunResult

    table = RunResult.load(out).table("ranks")
    rows = table[table["metric"] == "step_median_ms"]
    return {(int(r.rank), str(r.mode)): float(r.value) for r in rows.itertuples()}


def bare(nproc: int) -> dict[tuple[int, str], float]:
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                           str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                           str(ROOT / "tests" / "gpu" / "ddp_bare_loop.py"), *SIZES],
                          cwd=ROOT, check=True, capture_output=True, text=True)
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            found[(record["rank"], record["mode"])] = record["ms_per_step"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tools: dict = {}
    bares: dict = {}
    for index in range(args.rounds):
        for key, value in tool(args.nproc, args.out / f"tool-{index}").items():
            tools.setdefault(key, []).append(value)
        for key, value in bare(args.nproc).items():
            bares.setdefault(key, []).append(value)
    report = []
    for key in sorted(set(tools) & set(bares)):
        t, b = statistics.median(tools[key]), statistics.median(bares[key])
        report.append({"rank": key[0], "mode": key[1], "tool_ms": t, "bare_ms": b,
                       "ratio": t / b, "within_3pct": abs(t / b - 1) <= 0.03})
        print(f"rank {key[0]} {key[1]:6s} tool {t:.4f} ms  bare {b:.4f} ms  ratio {t / b:.3f}")
    (args.out / "bench.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
