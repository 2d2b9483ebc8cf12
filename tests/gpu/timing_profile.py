"""Where a default CLI run's wall time goes (issue 17, item 5), for the record.

Usage: python3 tests/gpu/timing_profile.py PROFILE_FILE
Prints the cumulative time of the run's top-level stages from a cProfile of
``python -m profiler_core run ...`` (made with ``python -m cProfile -o PROFILE_FILE``).
"""

import pstats
import sys

STAGES = ["__main__.py:1(<module>)", "run_experiment", "_run_cuda", "make_batches",
          "_prepare_modes", "_steady_trials", "_cold_trials", "_article_loops", "_profile_modes",
          "profile_window", "export_chrome_trace", "analyse_trace", "load_trace",
          "_capture_twin_figures", "calibrate_and_predict", "calibrate", "_parity", "save",
          "record_run", "format_summary", "_detach_traces", "start", "describe_environment",
          "_driver_version", "check_fits", "_input_copy_ms", "_held_replay_ms"]
stats = pstats.Stats(sys.argv[1])
rows = []
for (file, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
    label = f"{file.rsplit('/', 1)[-1]}:{line}({name})"
    if name in STAGES or label in STAGES or (name == "<module>" and "torch/__init__" in file):
        rows.append((ct, nc, f"{file.rsplit('/', 2)[-2]}/{file.rsplit('/', 1)[-1]}:{name}"))
for ct, nc, label in sorted(rows, reverse=True)[:40]:
    print(f"{ct:8.2f} s  {nc:5d}x  {label}")
