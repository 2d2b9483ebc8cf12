"""A default ``run`` under cProfile, in this process (``python -m profiler_core`` ends with
``os._exit``, so ``-m cProfile`` writes nothing): where its wall time goes by function.

Usage: python3 tests/gpu/profile_run.py OUT_DIR [run options...]
"""

import cProfile
import pstats
import sys

from profiler_core.spec.bytecode import keep_bytecode

keep_bytecode()
from profiler_core.cli.main import main  # noqa: E402

profile = cProfile.Profile()
profile.enable()
code = main(["run", "--out", sys.argv[1], "--progress", "none", *sys.argv[2:]])
profile.disable()
print(f"exit {code}")
stats = pstats.Stats(profile).strip_dirs()
stats.sort_stats("cumulative").print_stats(60)
stats.sort_stats("tottime").print_stats(25)
