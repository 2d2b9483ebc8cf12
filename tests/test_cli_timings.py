"""Where a ``run`` command's wall time goes (``profiler_core.cli.timings``): the breakdown from
marked moments and a run's phases, and ``run --timings`` on the CPU."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from profiler_core.cli.main import main
from profiler_core.cli.timings import WALL_KEYS, WallTimings, format_parts, process_start_s
from profiler_core.spec.bytecode import bytecode_source
from profiler_core.storage.results import RunResult

ROOT = Path(__file__).resolve().parents[1]


def test_the_parts_add_up_to_the_total_and_nested_phases_count_once():
    now = iter([100.0, 101.0, 110.0, 110.5, 110.75])  # command, run start/end, saved, printed
    timings = WallTimings(clock=lambda: next(now), started_s=99.5)
    for moment in ("run start", "run end", "saved", "printed"):
        timings.mark(moment)
    phases = pd.DataFrame({
        "phase": ["setup", "graph preparation", "graph capture", "eager timed", "graph timed",
                  "eager timed", "capture twin profiled", "calibration"],
        "start_s": [0.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0],
        "end_s": [1.5, 3.0, 2.75, 4.0, 5.0, 6.0, 7.0, 8.5],
    })
    environment = {"device_check_s": 0.25}
    parts = dict(timings.parts(environment, phases))
    assert parts["start-up: interpreter, imports, arguments"] == pytest.approx(0.5)
    assert parts["before the run: output check, torch and the runner imported"] == pytest.approx(1.0)
    assert parts["run: device check (CUDA context, memory estimate)"] == pytest.approx(0.25)
    assert parts["run: setup"] == pytest.approx(1.0)
    assert parts["run: preparation"] == pytest.approx(1.0)  # its capture is inside it
    assert "run: capture" not in parts
    assert parts["run: timed"] == pytest.approx(3.0)  # every mode's blocks together
    assert parts["run: capture twin profiled"] == pytest.approx(1.0)
    assert parts["run: calibration"] == pytest.approx(1.5)
    assert parts["run: before its first phase (environment, NVML sampler start)"] == pytest.approx(0.5)
    assert parts["run: between its phases"] == pytest.approx(0.5)
    assert parts["run: after its last phase (tables, results, NVML sampler stop)"] == pytest.approx(0.25)
    assert parts["writing the run folder and its index entry"] == pytest.approx(0.5)
    assert parts["printing the summary"] == pytest.approx(0.25)
    total = parts.pop("total")
    assert total == pytest.approx(11.25) == pytest.approx(sum(parts.values()))
    timings.record(environment)
    assert [environment[key] for key in WALL_KEYS] == pytest.approx([0.5, 1.0, 9.0])
    text = format_parts(timings.parts(environment, phases))
    assert text.splitlines()[0] == "Wall time of this command (s):"
    assert "  total" in text and "11.250" in text


def test_without_the_process_start_the_start_up_is_not_guessed():
    now = iter([5.0, 6.0, 7.0, 8.0, 9.0])
    timings = WallTimings(clock=lambda: next(now), started_s=None)
    timings.moments.pop("process start", None)  # as where /proc cannot be read
    for moment in ("run start", "run end", "saved", "printed"):
        timings.mark(moment)
    parts = dict(timings.parts({}, pd.DataFrame(columns=["phase", "start_s", "end_s"])))
    assert math.isnan(parts["start-up: interpreter, imports, arguments"])
    assert parts["total"] == pytest.approx(4.0)  # from the command's start
    assert "n/a" in format_parts(list(parts.items()))


def test_the_process_start_is_before_now():
    import time

    started = process_start_s()
    if started is None:
        pytest.skip("no /proc on this system")
    assert time.time() - 3600 < started <= time.time()


def test_run_timings_prints_the_breakdown_and_the_run_keeps_it(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--device", "cpu", "--out", str(out), "--progress", "none",
                 "--timings"]) == 0
    err = capsys.readouterr().err
    assert "Wall time of this command (s):" in err
    for part in ("run: setup", "run: timed", "writing the run folder", "total"):
        assert part in err
    environment = RunResult.load(out).environment
    assert environment["bytecode"] == bytecode_source()
    assert f"(compiled modules: {bytecode_source()})" in err
    assert all(environment[key] >= 0 for key in WALL_KEYS[1:])
    assert environment["device_check_s"] >= 0
    assert environment["wall_run_s"] >= max(RunResult.load(out).table("phases")["end_s"])


def test_without_timings_nothing_is_printed(tmp_path, capsys):
    assert main(["run", "--device", "cpu", "--out", str(tmp_path / "run"), "--progress",
                 "none"]) == 0
    assert "Wall time" not in capsys.readouterr().err


def test_a_process_freezes_its_start_up_objects_once_before_its_first_run(tmp_path):
    """Objects alive before the first run (torch's imports: hundreds of thousands) are out of the
    collector's reach for every later collection; a second run in the same process (a warm
    worker's) freezes nothing more, so what the first run left is still collected."""
    script = textwrap.dedent("""
        import gc
        from profiler_core.engine.runner import run_experiment
        from profiler_core.spec.config import preset
        config = preset("seed", device="cpu", batch=8, d_in=16, hidden=16, d_out=4,
                        eager_iters=10, trials=2, profile=False, nvml=False)
        before = gc.get_freeze_count()
        run_experiment(config)
        first = gc.get_freeze_count()
        run_experiment(config)
        print(before, first, gc.get_freeze_count())
    """)
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=ROOT, timeout=300, check=True).stdout.split()
    before, first, second = (int(value) for value in output[-3:])
    assert before == 0 and first > 100_000 and second == first
