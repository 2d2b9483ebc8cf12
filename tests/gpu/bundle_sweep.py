"""Bundle a sweep measured on a GPU as a sample of the dashboard (``dashboard/sample_sweeps/``):
copied, with every point saved again through ``RunResult.save`` without its Chrome traces (a
ResNet-50 point's traces are 5-7 MB; every table, the launch split and kernels included, stays).

Usage: PYTHONPATH=. python tests/gpu/bundle_sweep.py SWEEP_FOLDER dashboard/sample_sweeps/NAME
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from profiler_core.storage.results import RunResult
from profiler_core.sweep.store import load_sweep


def bundle(source: Path, target: Path) -> None:
    if target.exists():
        raise SystemExit(f"{target} exists: remove it first")
    shutil.copytree(source, target)
    for point in sorted(target.glob("point-*")):
        result = RunResult.load(point)
        result.trace_paths = {mode: None for mode in result.trace_paths}
        result.notes = [*result.notes, "bundled sample: the Chrome traces of the profiled windows "
                                       "were left out to keep the repository small"]
        result.save(point, overwrite=True)
    data = load_sweep(target)  # every point reads back
    print(f"{target}: {len(data.points)} points, "
          f"{sum(f.stat().st_size for f in target.rglob('*') if f.is_file()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    bundle(Path(sys.argv[1]), Path(sys.argv[2]))
