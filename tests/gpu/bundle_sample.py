"""Bundle a run measured on a GPU as a sample of the dashboard (``dashboard/sample_run/`` or a
run of its own under ``dashboard/sample_runs/``): read back and saved again through
``RunResult.save``, its Chrome traces packed (``trace_<mode>.json.gz``, about a tenth the size).
A run of changing shapes has its strategies' intervals and verdict worked out again from the
per-step times it recorded (``shape_steps.csv``) by this version's statistics
(``reanalysed_shapes``): the measurements stay as they were.

Usage: PYTHONPATH=. python tests/gpu/bundle_sample.py RUN_FOLDER TARGET (TARGET must not exist)
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from profiler_core.storage.results import RunResult


def reanalysed_shapes(result: RunResult) -> None:
    """The strategies' intervals (paired block sums), blocks' speedups and the verdict of a run
    of changing shapes from its recorded per-step times, as ``engine.shaped`` works them out now;
    the notes quoting torch.compile cut as ``engine.modes.cut_reason`` cuts them."""
    from profiler_core.engine import shaped
    from profiler_core.engine.modes import cut_reason

    strategies = result.table("strategies")
    if strategies.empty:
        return
    steps = result.table("shape_steps")
    trials = result.config.trial_count

    def blocks(name: str) -> list[float]:
        ms = steps[steps["strategy"] == name].sort_values("step")["ms"].tolist()
        return shaped.block_totals(ms, trials)

    eager = blocks("eager")
    for index, name in strategies["strategy"].items():
        low, high, blocks_speedup = shaped.speedup_interval(eager, blocks(str(name)),
                                                            result.config.seed)
        if name != "eager":
            strategies.loc[index, ["speedup_ci_low", "speedup_ci_high"]] = [low, high]
        strategies.loc[index, "blocks_speedup"] = blocks_speedup
    result.tables["strategies"] = strategies
    result.headline.update(shaped.shaped_headline(result.config, shaped.plan(result.config),
                                                  strategies))
    result.notes = [cut_reason(note) for note in result.notes]


def bundle(source: Path, target: Path) -> None:
    if target.exists():
        raise SystemExit(f"{target} exists: remove it first")
    result = RunResult.load(source)
    reanalysed_shapes(result)
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
