"""Server-side render time of the dashboard's views for a run with 100,000 latency samples per mode.

Takes a real run directory, replaces its latency table with 100,000 iterations per mode drawn
(with replacement) from that run's own measured iterations, and times AppTest script runs of every
view with that run open (after one run to warm the caches). Prints one line per view.
Usage: python tests/gpu/render_timing.py RUN_DIR
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dashboard import state  # noqa: E402

SAMPLES = 100_000
VIEWS = ["overview", "counters", "latency", "launch_split", "gpu", "kernels"]


def big_run(source: Path, folder: Path) -> Path:
    target = folder / "runs" / "big"
    shutil.copytree(source, target)
    latency = pd.read_csv(source / "latency.csv")
    rng = np.random.default_rng(0)
    parts = []
    for _, rows in latency.groupby(["mode", "method"]):
        picked = rows.iloc[rng.integers(0, len(rows), SAMPLES)].copy()
        picked["iteration"] = np.arange(SAMPLES)
        picked["trial"] = picked["iteration"] * 10 // SAMPLES
        parts.append(picked)
    pd.concat(parts).to_csv(target / "latency.csv", index=False)
    return target


def main(source: str) -> None:
    folder = Path(tempfile.mkdtemp())
    run_dir = big_run(Path(source), folder)
    os.environ["PROFILER_RUNS_ROOT"] = str(folder)  # the dashboard opens runs under its root only
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.session_state[state.RUNS_DIR] = str(run_dir.parent)
    at.run()
    at.session_state[state.OPEN_RUN] = str(run_dir.resolve())
    for view in VIEWS:
        started = time.perf_counter()
        at.switch_page(f"views/{view}.py").run()  # the first visit loads and caches the run
        first = time.perf_counter() - started
        started = time.perf_counter()
        at.run()
        again = time.perf_counter() - started
        charts = len(at.get("plotly_chart"))
        status = "error: " + str(at.exception[0].message) if at.exception else "ok"
        print(f"{view:13s} first visit {first:6.3f} s, rerun {again:6.3f} s, {charts} charts ({status})")
    print("latency rows in the open run:", len(pd.read_csv(run_dir / "latency.csv")))


if __name__ == "__main__":
    main(sys.argv[1])
