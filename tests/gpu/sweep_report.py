"""Summarise sweep folders measured on a GPU: per point the measured and predicted speedup and the
prediction's error, the crossover lines the sweep printed, and the throughput (points per minute,
from the wall time the command took). Usage: python3 tests/gpu/sweep_report.py SECONDS SWEEP..."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiler_core.storage.results import RunResult


def main(seconds: float, folders: list[str]) -> None:
    points = 0
    errors: list[float] = []
    for folder in map(Path, folders):
        print(f"== {folder.name}")
        print(f"{'point':<12}{'eager ms':>10}{'graph ms':>10}{'speedup':>9}{'CI':>15}"
              f"{'predicted':>11}{'error %':>9}{'busy/it':>9}")
        for summary_path in sorted(folder.glob("point-*/summary.json")):
            run = RunResult.load(summary_path.parent)
            config, headline, pair = run.config.to_dict(), run.headline, run.pair
            points += 1
            label = ",".join(f"{k}={config[k]}" for k in ("batch", "dtype", "capture_iters"))
            measured, predicted = pair.speedup, headline.get("predicted_speedup")
            error = headline.get("predicted_speedup_error_pct")
            if isinstance(error, (int, float)):
                errors.append(abs(error))
            busy = run.figures.get("graph", "gpu_busy_us")
            ci = f"{pair.speedup_ci_low:.2f}-{pair.speedup_ci_high:.2f}"
            print(f"{summary_path.parent.name:<12}{pair.eager_ms:>10.3f}"
                  f"{pair.graph_ms:>10.3f}{measured or float('nan'):>8.2f}x"
                  f"{ci:>15}{predicted or float('nan'):>10.2f}x{error if error is not None else float('nan'):>9.1f}"
                  f"{(busy or float('nan')) / 1e3:>9.3f}   {label}")
    if errors:
        print(f"prediction: median |error| of the speedup {statistics.median(errors):.1f}% over "
              f"{len(errors)} points (max {max(errors):.1f}%)")
    print(f"throughput: {points} points in {seconds:.0f} s = {points / seconds * 60:.1f} points per minute")


if __name__ == "__main__":
    main(float(sys.argv[1]), sys.argv[2:])
