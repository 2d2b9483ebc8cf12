"""Prints, per run folder given, what issue 17 asks to check on the GPU: the headline, its
attribution (parts against the step saving), the profiled kernel time against the unprofiled held
replay, the profiler's overhead against the headline, the prediction error, and the phases' times.

Usage: python3 tests/gpu/attribution_report.py RUN_DIR [RUN_DIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from profiler_core.analysis import attribution
from profiler_core.spec.errors import ProfilerError
from profiler_core.storage.results import RunResult

pd.set_option("display.width", 200)


def report(folder: str) -> None:
    try:
        run = RunResult.load(folder)
    except ProfilerError as error:
        print(f"## {folder}: cannot load: {error}")
        return
    h, pair = run.headline, run.pair
    print(f"## {Path(folder).name}: eager {pair.eager_ms:.4f} ms, graph "
          f"{pair.graph_ms:.4f} ms, speedup {pair.speedup:.3f}x "
          f"({pair.speedup_ci_low:.3f}-{pair.speedup_ci_high:.3f}); pays back "
          f"{pair.pays_back}, break-even {pair.break_even_steps}")
    table = run.table("attribution")
    print(table.drop(columns="source").round(2).to_string(index=False))
    for mode, block in table.groupby("mode"):
        print(f"   {mode}: parts vs step saving error {attribution.parts_sum_error(block):.2e}")
    m = run.table("metrics").set_index(["mode", "metric"])["value"]
    for mode in run.config.modes:
        held = m.get((mode, "held_replay_median_ms"))
        busy = m.get((mode, "gpu_busy_us"))
        over = m.get((mode, "profiler_overhead_pct"))
        line = f"   {mode}: profiler overhead vs headline {over:.1f}%" if over is not None else f"   {mode}:"
        if held is not None and busy is not None:
            steps = run.config.capture_iters
            line += (f"; held replay {held * 1e3:.1f} us/step vs profiled busy "
                     f"{busy / steps:.1f} us/step ({(busy / steps / (held * 1e3) - 1) * 100:+.1f}%)")
        print(line)
    print(f"   prediction: predicted {h.get('predicted_graph_ms')} ms vs measured "
          f"{pair.graph_ms}: error {h.get('prediction_error_pct')}%")
    phases = run.table("phases")
    if len(phases):
        durations = (phases["end_s"] - phases["start_s"]).groupby(phases["phase"]).sum()
        print("   phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in
                                           durations.sort_values(ascending=False).head(12).items()))
        print(f"   first phase starts {phases['start_s'].min():.2f} s, last ends {phases['end_s'].max():.2f} s")
    for note in run.notes:
        if "attribution" in note or "stretched" in note:
            print("   note:", note)


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        if Path(folder).is_dir():
            report(folder)
