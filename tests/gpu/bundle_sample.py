"""Bundle a run measured on a GPU as a sample of the dashboard (``dashboard/sample_run/`` or a
run of its own under ``dashboard/sample_runs/``): read back and saved again through
``RunResult.save``, its Chrome traces packed (``trace_<mode>.json.gz``, about a tenth the size).

Usage: PYTHONPATH=. python tests/gpu/bundle_sample.py RUN_FOLDER TARGET (TARGET must not exist)
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from profiler_core.storage.results import RunResult


def bundle(source: Path, target: Path) -> None:
    if target.exists():
        raise SystemExit(f"{target} exists: remove it first")
    result = RunResult.load(source)
    with tempfile.TemporaryDirectory() as packed:
        for mode, path in result.trace_paths.items():
            if path is not None and not str(path).endswith(".gz"):
                packed_path = Path(packed) / f"{Path(path).name}.gz"
                with open(path, "rb") as plain, gzip.open(packed_path, "wb", compresslevel=9) as out:
                    shutil.copyfileobj(plain, out)
                result.trace_paths[mode] = packed_path
        result.save(target)
    RunResult.load(target)  # reads back
    print(f"{target}: {sum(f.stat().st_size for f in target.iterdir()) / 2**20:.1f} MiB")


if __name__ == "__main__":
    bundle(Path(sys.argv[1]), Path(sys.argv[2]))
