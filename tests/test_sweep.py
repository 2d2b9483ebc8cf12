"""Sweeps (issue 12): the planner, execution through a fake launcher (progress, failed points, stop
and resume, damaged points, folder safety), the analysis on synthetic tables, the CLI's exit
codes, and one real CPU sweep of two tiny points through the real launcher."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from profiler_core.analysis import metrics
from profiler_core.cli.main import main
from profiler_core.spec.config import RunConfig, preset
from profiler_core.spec.errors import ConfigError, RunFormatError
from profiler_core.spec.events import ErrorEvent, ProgressEvent
from profiler_core.storage.results import RunResult, coerce_table, empty_table
from profiler_core.sweep import analysis as sweep_analysis
from profiler_core.sweep import plan as sweep_plan
from profiler_core.sweep import runner as sweep_runner
from profiler_core.sweep import store as sweep_store
from profiler_core.sweep.plan import PointTrials, SweepAxis, SweepPlan, parse_param, parse_values
from profiler_core.sweep.runner import SweepRunner

TINY = dict(d_in=16, hidden=16, d_out=8, device="cpu")


# ----------------------------------------------------------------------------- a fake launcher


def model_times(config: RunConfig) -> tuple[float, float, float]:
    """(eager, graph, busy) ms per step of a made-up step: eager pays 0.3 ms of launches
    on top of the GPU work, a replay 0.05 ms spread over the steps it holds."""
    busy = 0.002 * config.batch * (0.5 if config.dtype == "bf16" else 1.0) + 0.01
    return 0.3 + busy, busy + 0.05 / config.capture_iters, busy


def write_fake_run(config: RunConfig, out: Path, complete: bool = True, overwrite: bool = False) -> None:
    eager, graph, busy = model_times(config)
    speedup = eager / graph
    modes = [{"mode": "eager", "median_ms": eager, "speedup": 1.0, "speedup_ci_low": 0.98,
              "speedup_ci_high": 1.02, "one_time_ms": 0.0, "memory_bytes": 0.0,
              "graphs_recorded": math.nan},
             {"mode": "graph", "median_ms": graph, "speedup": speedup,
              "speedup_ci_low": speedup * 0.95, "speedup_ci_high": speedup * 1.05,
              "one_time_ms": 5.0, "memory_bytes": 2.0 * 2**20, "graphs_recorded": 1.0}]
    for extra in config.extra_modes:
        median = graph * 1.5
        modes.append({"mode": extra, "median_ms": median, "speedup": eager / median,
                      "speedup_ci_low": eager / median * 0.9, "speedup_ci_high": eager / median * 1.1,
                      "one_time_ms": 2000.0, "memory_bytes": 0.0, "graphs_recorded": math.nan})
    headline = {"timing_method": "steady_trial", "predicted_speedup": speedup * 1.1,
                "predicted_speedup_error_pct": 10.0}
    figures = {"eager": {"gpu_busy_us": busy * 1e3},
               "graph": {"capture_ms": 5.0, "pool_bytes": 2 * 2**20,
                         "break_even_iters": math.ceil(5.0 / (eager - graph)),
                         "gpu_busy_us": busy * 1e3 * config.capture_iters}}
    modes_table = coerce_table("modes", pd.DataFrame(modes))
    result = RunResult(config=config, environment={"gpu_name": "Synthetic GPU (fake launcher)"},
                       headline=headline, complete=complete,
                       tables={"modes": modes_table, "metrics": metrics.build(
                           modes_table, empty_table("stats"), figures)})
    result.save(out, overwrite=overwrite)


class FakeEnding:
    def __init__(self, status, error=None, stderr_tail="", returncode=0):
        self.status, self.error, self.stderr_tail = status, error, stderr_tail
        self.returncode, self.killed = returncode, False


class FakeProcess:
    """A run that ends as ``behaviour`` says: done, error:<Kind>, crash, or hang (until cancelled,
    then kept incomplete, as the real run does)."""

    def __init__(self, config, out, overwrite, behaviour, on_event):
        self.config, self.out, self.overwrite, self.behaviour = config, Path(out), overwrite, behaviour
        self.cancelled = threading.Event()
        self.pid = 1
        for fraction, phase in ((0.25, "warm-up"), (0.5, "timed trials"), (1.0, "done")):
            if self.behaviour == "hang" and fraction == 1.0:
                break
            on_event(ProgressEvent(phase, int(fraction * 4), 4, fraction, ""))

    def cancel(self):
        self.cancelled.set()

    def wait(self, timeout=None):
        if self.behaviour == "done":
            write_fake_run(self.config, self.out, overwrite=self.overwrite)
            return FakeEnding("done")
        if self.behaviour.startswith("error:"):
            kind = self.behaviour.split(":", 1)[1]
            return FakeEnding("error", ErrorEvent(kind, None, f"{kind} at batch {self.config.batch}",
                                                  "shrink it"), returncode=4)
        if self.behaviour == "crash":
            return FakeEnding("crashed", stderr_tail="Traceback\nSegmentation fault", returncode=-11)
        if not self.cancelled.wait(timeout):
            return None
        write_fake_run(self.config, self.out, complete=False, overwrite=self.overwrite)
        return FakeEnding("cancelled")


class FakeLauncher:
    def __init__(self, behaviour=lambda config: "done"):
        self.behaviour = behaviour
        self.started: list[tuple[int, str, bool]] = []  # (batch, folder name, overwrite)
        self.closed = False

    def start(self, config, out_dir, *, overwrite=False, timeout_s=None, on_event=None):
        self.started.append((config.batch, Path(out_dir).name, overwrite))
        return FakeProcess(config, out_dir, overwrite, self.behaviour(config), on_event or (lambda e: None))

    def close(self):
        self.closed = True


def small_plan(values="8,16,32,64", **base) -> SweepPlan:
    return SweepPlan((parse_param(f"batch={values}"),), preset("seed", **{**TINY, **base}),
                     PointTrials(replays=20, profile=False))


# ----------------------------------------------------------------------------- the planner


def test_lists_and_ranges():
    assert parse_values("batch", "1:1024:x2") == tuple(2 ** k for k in range(11))
    assert parse_values("batch", "64:256:+64") == (64, 128, 192, 256)
    assert parse_values("batch", "3:6") == (3, 4, 5, 6)
    assert parse_values("batch", "1:10:x1.5") == (1, 2, 3, 5, 8)  # rounded, no value twice
    assert parse_values("hidden", "512, 1_024,512") == (512, 1024)
    assert parse_values("dtype", "fp32,bf16") == ("fp32", "bf16")
    assert parse_values("modes", "graph,compile_ro,graph+compile") == ("graph", "compile_ro", "compile")
    assert parse_param("capture-iters=1:8:x2") == SweepAxis("capture_iters", (1, 2, 4, 8))


def test_two_parameters_make_a_grid_first_axis_outermost():
    plan = SweepPlan((parse_param("batch=1:4:x2"), parse_param("dtype=fp32,bf16")), preset("seed"))
    points = plan.points()
    assert [p.label for p in points[:3]] == ["batch=1, dtype=fp32", "batch=1, dtype=bf16",
                                             "batch=2, dtype=fp32"]
    assert len(points) == 6 and points[5].config.batch == 4 and points[5].config.dtype == "bf16"
    assert all(p.config.replays == PointTrials().replays and not p.config.nvml for p in points)
    assert all(p.config.preset == "custom" for p in points)  # shorter trials than the preset's
    assert points[3].run_name == "point-003"


def test_width_and_modes_set_the_fields_they_name():
    plan = SweepPlan((parse_param("width=256,512"), parse_param("modes=graph,compile_ro")),
                     preset("seed"))
    config = plan.points()[3].config
    assert (config.d_in, config.hidden, config.d_out, config.modes) == (
        512, 512, 512, ("eager", "graph", "compile_ro"))
    transformer = SweepPlan((parse_param("seq_len=64,128"),), preset("transformer"))
    assert transformer.points()[0].config.seq_len == 64


def test_plan_round_trips_through_json():
    plan = SweepPlan((parse_param("batch=1:8:x2"), parse_param("dtype=fp32,bf16")), preset("seed"),
                     PointTrials(replays=50, trials=5), threshold=1.3)
    again = SweepPlan.from_dict(json.loads(json.dumps(plan.to_dict())))
    assert again == plan and again.points() == plan.points()


@pytest.mark.parametrize("params, base, words", [
    (["speed=1,2"], {}, ["cannot sweep 'speed'", "choose among batch"]),
    (["seq_len=64,128"], {}, ["seq_len changes nothing", "--preset transformer"]),
    (["batch=0:8:x2"], {}, ["batch: a range must run upwards"]),
    (["batch=1:8:x1"], {}, ["multiplying step must be above 1"]),
    (["batch=1:1000000"], {}, ["1,000,000 values", "larger step"]),
    (["batch=1:100000000"], {}, ["100,000,000 is outside 1 to 1,048,576"]),
    (["dtype=fp32,fp8"], {}, ["unknown precision 'fp8'"]),
    (["modes=graph,turbo"], {}, ["unknown mode 'turbo'"]),
    (["batch=1,2", "batch=4"], {}, ["batch is swept twice"]),
    (["width=64,128", "hidden=32"], {}, ["both set"]),
    (["batch=1,2", "dtype=fp32", "hidden=8"], {}, ["one or two parameters"]),
    (["capture_iters=1,2,4"], {"dtype": "fp16"},
     ["point 1 (capture_iters=2) is refused", "fp16", "drop that value"]),
    (["hidden=1024,100000"], {}, ["point 1 (hidden=100000) is refused", "2^31"]),
    (["batch=1:1500:+1", "hidden=1,2"], {}, ["3,000 points (at most 2,000)"]),
])
def test_a_bad_plan_names_the_point_and_what_to_change(params, base, words):
    with pytest.raises(ConfigError) as error:
        SweepPlan(tuple(parse_param(p) for p in params), preset("seed", **base))
    text = str(error.value)
    assert all(word in text for word in words), text
    assert error.value.field == "param"


def test_threshold_and_per_point_trials_are_checked():
    with pytest.raises(ConfigError, match="given twice"):
        SweepAxis("batch", (8, 8))
    with pytest.raises(ConfigError, match="threshold must be"):
        SweepPlan((parse_param("batch=1,2"),), threshold=0.5)
    with pytest.raises(ConfigError) as error:
        SweepPlan((parse_param("batch=1,2"),), point_trials=PointTrials(replays=4, trials=8))
    assert error.value.field == "trials"  # the CLI names --trials


# ----------------------------------------------------------------------------- running


def test_every_point_is_measured_with_progress(tmp_path):
    seen = []
    launcher = FakeLauncher()
    runner = SweepRunner.create(small_plan(), tmp_path / "s", launcher=launcher, on_progress=seen.append)
    outcome = runner.run()
    assert outcome.status == "done" and (outcome.points["status"] == "done").all()
    assert [b for b, _, _ in launcher.started] == [8, 16, 32, 64] and not launcher.closed
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert {p.phase for p in seen if p.index == 2} >= {"starting", "warm-up", "timed trials"}
    assert any(p.index == 1 and p.point_fraction == 0.5 and p.fraction == pytest.approx(1.5 / 4)
               for p in seen)
    data = sweep_store.load_sweep(tmp_path / "s")
    assert data.status == "done" and list(data.points["batch"]) == [8, 16, 32, 64]
    eager, graph, busy = model_times(small_plan().points()[0].config)
    row = data.points.iloc[0]
    assert row["speedup"] == pytest.approx(eager / graph) and row["floor_ms"] == pytest.approx(busy)
    assert set(data.point_modes["mode"]) == {"eager", "graph"} and len(data.point_modes) == 8
    info = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert (info["tool"], info["kind"], info["schema_version"]) == ("profiler_core", "sweep", 1)
    assert all(RunResult.load(tmp_path / "s" / f"point-00{i}").complete for i in range(4))


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path):
    behaviour = {16: "error:CaptureError", 32: "crash"}
    launcher = FakeLauncher(lambda c: behaviour.get(c.batch, "done"))
    outcome = SweepRunner.create(small_plan(), tmp_path / "s", launcher=launcher).run()
    points = outcome.points.set_index("batch")
    assert outcome.status == "done" and list(points["status"]) == ["done", "failed", "failed", "done"]
    assert points.at[16, "error_kind"] == "CaptureError"
    assert points.at[16, "error_message"] == "CaptureError at batch 16 (shrink it)"
    assert points.at[32, "error_kind"] == "Crashed" and "Segmentation fault" in points.at[32, "error_message"]
    assert math.isnan(points.at[16, "speedup"]) and points.at[64, "speedup"] > 1
    # a failed point is finished: resuming measures nothing again
    again = FakeLauncher()
    assert SweepRunner.resume(tmp_path / "s", launcher=again).run().status == "done"
    assert again.started == []


def test_stop_keeps_finished_points_and_resume_skips_them(tmp_path):
    runner = None

    def stop_after_two(progress):
        if progress.points_finished == 2:
            runner.stop()

    runner = SweepRunner.create(small_plan(), tmp_path / "s", launcher=FakeLauncher(),
                                on_progress=stop_after_two)
    outcome = runner.run()
    assert outcome.status == "stopped"
    assert list(outcome.points["status"]) == ["done", "done", "pending", "pending"]
    assert sweep_store.load_sweep(tmp_path / "s").status == "stopped"
    launcher = FakeLauncher()
    resumed = SweepRunner.resume(tmp_path / "s", launcher=launcher).run()
    assert resumed.status == "done" and [b for b, _, _ in launcher.started] == [32, 64]
    assert (resumed.points["status"] == "done").all()
    assert len(resumed.point_modes) == 8  # the kept points' modes are read back from their folders


def test_stop_during_a_point_keeps_it_incomplete_and_resume_replaces_only_it(tmp_path):
    runner = None

    def stop_in_point_two(progress):
        if progress.index == 2 and progress.phase == "timed trials":
            threading.Timer(0.05, runner.stop).start()  # from another thread, like the page

    launcher = FakeLauncher(lambda c: "hang" if c.batch == 32 else "done")
    runner = SweepRunner.create(small_plan(), tmp_path / "s", launcher=launcher,
                                on_progress=stop_in_point_two)
    outcome = runner.run()
    assert list(outcome.points["status"]) == ["done", "done", "stopped", "pending"]
    assert RunResult.load(tmp_path / "s" / "point-002").complete is False
    launcher = FakeLauncher()
    SweepRunner.resume(tmp_path / "s", launcher=launcher).run()
    assert launcher.started == [(32, "point-002", True), (64, "point-003", False)]


def test_a_damaged_point_is_moved_aside_and_measured_again(tmp_path):
    SweepRunner.create(small_plan(), tmp_path / "s", launcher=FakeLauncher()).run()
    (tmp_path / "s" / "point-001" / "summary.json").write_text("{ not json")  # damaged
    (tmp_path / "s" / "point-003" / "latency.csv").write_text("garbage\n1,2,3\n")  # unreadable table
    launcher = FakeLauncher()
    runner = SweepRunner.resume(tmp_path / "s", launcher=launcher)
    assert runner.rerun_damaged == ("point-001", "point-003")
    outcome = runner.run()
    assert outcome.status == "done" and [b for b, _, _ in launcher.started] == [16, 64]
    kept = tmp_path / "s" / "point-001.damaged-1" / "summary.json"
    assert kept.read_text() == "{ not json"  # moved aside, never deleted
    assert RunResult.load(tmp_path / "s" / "point-001").complete


def test_a_crashed_sweep_resumes_from_its_folders(tmp_path):
    SweepRunner.create(small_plan(), tmp_path / "s", launcher=FakeLauncher()).run()
    info_path = tmp_path / "s" / "sweep.json"
    info = json.loads(info_path.read_text())
    info["status"] = "running"  # as left by a sweep process that died
    info_path.write_text(json.dumps(info))
    (tmp_path / "s" / "points.csv").unlink()  # and its table lost
    launcher = FakeLauncher()
    outcome = SweepRunner.resume(tmp_path / "s", launcher=launcher).run()
    assert launcher.started == [] and outcome.status == "done"
    assert (outcome.points["status"] == "done").all() and outcome.points["speedup"].notna().all()


def test_no_cuda_stops_the_sweep_and_leaves_the_point_pending(tmp_path):
    launcher = FakeLauncher(lambda c: "error:NoCudaError")
    outcome = SweepRunner.create(small_plan(), tmp_path / "s", launcher=launcher).run()
    assert outcome.status == "stopped" and outcome.fatal["kind"] == "NoCudaError"
    assert len(launcher.started) == 1 and set(outcome.points["status"]) == {"pending"}


def test_only_a_new_folder_or_our_own_sweep_is_written(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    (tmp_path / "file").write_text("keep me too")
    from conftest import write_synthetic_run

    write_synthetic_run(tmp_path / "a-run")
    for name, words in (("mine", "not a sweep folder"), ("file", "not a sweep folder"),
                        ("a-run", "a run folder of this tool, not a sweep")):
        for flags in ({}, {"overwrite": True}):
            with pytest.raises(ConfigError, match=words):
                SweepRunner.create(small_plan(), tmp_path / name, launcher=FakeLauncher(), **flags)
        with pytest.raises(ConfigError, match="nothing to resume"):
            SweepRunner.resume(tmp_path / name, launcher=FakeLauncher())
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "file").read_text() == "keep me too"
    SweepRunner.create(small_plan("8,16"), tmp_path / "s", launcher=FakeLauncher()).run()
    with pytest.raises(ConfigError, match="already holds a sweep.*--resume"):
        SweepRunner.create(small_plan(), tmp_path / "s", launcher=FakeLauncher())
    SweepRunner.create(small_plan("32"), tmp_path / "s", launcher=FakeLauncher(), overwrite=True).run()
    assert list(sweep_store.load_sweep(tmp_path / "s").points["batch"]) == [32]
    assert not (tmp_path / "s" / "point-001").exists()  # the replaced sweep's points went with it


def _tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("kind", ["user_file", "file_in_a_point", "damaged_copy", "edited_points",
                                  "older_sweep"])
def test_overwrite_replaces_only_a_folder_holding_nothing_but_its_own_sweep(kind, tmp_path):
    """Issue 18: --overwrite removes exactly the sweep's own files and its point runs; anything
    else refuses the folder, which is left exactly as it was."""
    SweepRunner.create(small_plan("8,16"), tmp_path / "s", launcher=FakeLauncher()).run()
    folder = tmp_path / "s"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kind"] == "sweep" and manifest["folders"] == ["point-000", "point-001"]
    assert set(manifest["files"]) == {"sweep.json", "points.csv", "point_modes.csv"}
    words = {"user_file": "'thesis.tex' is not a file this tool wrote",
             "file_in_a_point": "'point-001/notes.txt' is not a file this tool wrote",
             "damaged_copy": "'point-001.damaged-1' is a folder this tool did not write",
             "edited_points": "'points.csv' was changed after this tool wrote it",
             "older_sweep": ""}[kind]
    if kind == "user_file":
        (folder / "thesis.tex").write_text("mine")
    elif kind == "file_in_a_point":
        (folder / "point-001" / "notes.txt").write_text("mine")
    elif kind == "damaged_copy":
        (folder / "point-001").rename(folder / "point-001.damaged-1")
    elif kind == "edited_points":
        with open(folder / "points.csv", "a") as handle:
            handle.write("\n")
    else:  # written before manifests: the names decide
        (folder / "manifest.json").unlink()
        for point in ("point-000", "point-001"):
            (folder / point / "manifest.json").unlink()
    before = _tree(tmp_path)
    if words:
        for attempt in (lambda: sweep_store.check_sweep_output(folder, overwrite=True),
                        lambda: SweepRunner.create(small_plan("32"), folder, overwrite=True,
                                                   launcher=FakeLauncher())):
            with pytest.raises(ConfigError, match="holds a sweep of this tool but holds more") as refused:
                attempt()
            assert words in refused.value.message
            assert _tree(tmp_path) == before
        assert SweepRunner.resume(folder, launcher=FakeLauncher()).run().status == "done"
        return
    SweepRunner.create(small_plan("32"), folder, overwrite=True, launcher=FakeLauncher()).run()
    assert list(sweep_store.load_sweep(folder).points["batch"]) == [32]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # nothing left aside


def test_a_point_folder_holding_a_users_file_is_moved_aside_not_overwritten(tmp_path):
    runner = None

    def stop_in_point_one(progress):
        if progress.index == 1 and progress.phase == "timed trials":
            threading.Timer(0.05, runner.stop).start()

    runner = SweepRunner.create(small_plan("8,16"), tmp_path / "s", on_progress=stop_in_point_one,
                                launcher=FakeLauncher(lambda c: "hang" if c.batch == 16 else "done"))
    runner.run()
    (tmp_path / "s" / "point-001" / "notes.txt").write_text("mine")
    launcher = FakeLauncher()
    SweepRunner.resume(tmp_path / "s", launcher=launcher).run()
    assert launcher.started == [(16, "point-001", False)]  # a new folder, not --overwrite
    assert (tmp_path / "s" / "point-001.damaged-1" / "notes.txt").read_text() == "mine"


def test_a_sweep_without_the_newer_figures_still_opens(tmp_path):
    shutil_copy = __import__("shutil").copytree
    shutil_copy(RECORDED, tmp_path / "old")
    points = pd.read_csv(tmp_path / "old" / "points.csv")
    points.drop(columns=["predicted_speedup", "predicted_speedup_error_pct"]).to_csv(
        tmp_path / "old" / "points.csv", index=False)
    data = sweep_store.load_sweep(tmp_path / "old")
    assert data.points["predicted_speedup"].isna().all() and data.points["speedup"].notna().any()


def test_a_damaged_sweep_file_is_refused_on_loading(tmp_path):
    SweepRunner.create(small_plan("8,16"), tmp_path / "s", launcher=FakeLauncher()).run()
    points = tmp_path / "s" / "points.csv"
    points.write_text(points.read_text().replace("done", "exploded", 1))
    with pytest.raises(RunFormatError, match="unknown status"):
        sweep_store.load_sweep(tmp_path / "s")
    listed = sweep_store.list_sweeps(tmp_path)
    assert list(listed["name"]) == ["s"] and "unknown status" in listed["problem"].iloc[0]
    with pytest.raises(RunFormatError, match="not a sweep folder"):
        sweep_store.load_sweep(tmp_path)


# ----------------------------------------------------------------------------- analysis


def synthetic(rows: list[dict], axis_names: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """points and point_modes tables from (axis values, eager, graph, floor) rows."""
    points, modes = [], []
    for index, row in enumerate(rows):
        points.append({"index": index, **{a: row[a] for a in axis_names},
                       "status": row.get("status", "done"), "floor_ms": row.get("floor", math.nan)})
        if row.get("status", "done") != "done":
            continue
        modes.append({"index": index, "mode": "eager", "median_ms": row["eager"], "speedup": 1.0,
                      "speedup_ci_low": 1.0, "speedup_ci_high": 1.0, "one_time_ms": 0.0,
                      "memory_bytes": 0.0})
        speedup = row.get("speedup", row["eager"] / row["graph"])
        modes.append({"index": index, "mode": "graph", "median_ms": row["graph"], "speedup": speedup,
                      "speedup_ci_low": speedup * 0.9, "speedup_ci_high": speedup * 1.1,
                      "one_time_ms": row.get("cost", 10.0), "memory_bytes": 4 * 2**20})
    return pd.DataFrame(points), pd.DataFrame(modes)


def test_crossover_is_interpolated_on_a_log_scale():
    points, modes = synthetic([{"batch": 2, "eager": 3.0, "graph": 1.0},
                               {"batch": 8, "eager": 2.0, "graph": 1.0},
                               {"batch": 32, "eager": 1.0, "graph": 1.0},
                               {"batch": 64, "eager": 0.9, "graph": 1.0}], ["batch"])
    table = sweep_analysis.speedup_table(points, modes, ["batch"], "batch")
    found = sweep_analysis.crossovers(table, "batch", threshold=1.5)
    row = found.iloc[0]
    assert row["direction"] == "falls below" and (row["above_x"], row["below_x"]) == (8, 32)
    assert row["crossover"] == pytest.approx(16.0)  # halfway between 8 and 32 in log(batch)
    assert "falls below 1.50x at batch ≈ 16" in row["text"]


def test_no_crossover_is_said_plainly():
    points, modes = synthetic([{"batch": b, "eager": 5.0, "graph": 1.0} for b in (1, 4, 16)], ["batch"])
    table = sweep_analysis.speedup_table(points, modes, ["batch"], "batch")
    assert "stays at or above 1.10x over batch 1 to 16" in sweep_analysis.crossovers(table, "batch")["text"].iloc[0]
    below = sweep_analysis.crossovers(table, "batch", threshold=8.0).iloc[0]
    assert math.isnan(below["crossover"]) and "below 8.00x at every point" in below["text"]
    rising = sweep_analysis.crossovers(sweep_analysis.speedup_table(*synthetic(
        [{"batch": 1, "eager": 1.0, "graph": 1.0}, {"batch": 4, "eager": 2.0, "graph": 1.0}],
        ["batch"]), ["batch"], "batch"), "batch", 1.5).iloc[0]
    assert rising["direction"] == "rises above" and rising["crossover"] == pytest.approx(2.0)
    one = sweep_analysis.crossovers(table.head(1), "batch")
    assert "too few measured points" in one["text"].iloc[0]


def test_series_per_other_axis_and_failed_points_left_out():
    rows = [{"batch": b, "dtype": d, "eager": 2.0, "graph": g, "floor": 0.1}
            for b, g in ((1, 0.5), (16, 1.0), (256, 2.0)) for d in ("fp32", "bf16")]
    rows[2]["status"] = "failed"
    points, modes = synthetic(rows, ["batch", "dtype"])
    table = sweep_analysis.speedup_table(points, modes, ["batch", "dtype"], "batch")
    assert set(table["series"]) == {"graph · dtype=fp32", "graph · dtype=bf16"}
    assert 2 not in set(table["index"]) and table["floor_ms"].eq(0.1).all()
    found = sweep_analysis.crossovers(table, "batch").set_index("series")
    assert found.loc["graph · dtype=bf16", "crossover"] == pytest.approx(16 * 16 ** ((1.1 - 2) / -1))
    assert "too few" in found.loc["graph · dtype=fp32", "text"] or \
        found.loc["graph · dtype=fp32", "direction"] == "falls below"
    text = sweep_analysis.crossovers(sweep_analysis.speedup_table(points, modes, ["batch", "dtype"], "dtype"), "dtype",
                            numeric=False)["text"]
    assert text.str.contains("not a number").all()


def test_break_even_per_point():
    points, modes = synthetic([{"batch": 1, "eager": 2.0, "graph": 0.5, "cost": 10.0},
                               {"batch": 2, "eager": 1.0, "graph": 1.5, "cost": 10.0}], ["batch"])
    table = sweep_analysis.break_even_table(sweep_analysis.speedup_table(points, modes, ["batch"]), ["batch"])
    assert list(table["break_even_steps"]) == [7.0, math.inf]  # ceil(10 / 1.5); never
    assert list(table["pays_back"]) == ["after 7 steps", "never (graph not faster)"]
    assert table["memory_mib"].eq(4.0).all() and table["saving_ms"].tolist() == [1.5, -0.5]


def test_amortisation_approaches_the_floor():
    rows = [{"capture_iters": k, "eager": 1.2, "graph": 0.2 + 0.4 / k, "floor": 0.2}
            for k in (1, 2, 4, 8)]
    points, modes = synthetic(rows, ["capture_iters"])
    table = sweep_analysis.amortisation_table(sweep_analysis.speedup_table(points, modes, ["capture_iters"]),
                                     ["capture_iters"])
    assert list(table["capture_iters"]) == [1, 2, 4, 8]
    assert table["above_floor_pct"].tolist() == pytest.approx([200.0, 100.0, 50.0, 25.0])
    assert sweep_analysis.amortisation_table(sweep_analysis.speedup_table(*synthetic(
        [{"batch": 1, "eager": 1.0, "graph": 0.5}], ["batch"]), ["batch"]), ["batch"]).empty


def test_empty_inputs_keep_their_columns():
    points = pd.DataFrame(columns=["index", "batch", "status", "floor_ms"])
    modes = pd.DataFrame(columns=sweep_store.POINT_MODE_COLUMNS)
    table = sweep_analysis.speedup_table(points, modes, ["batch"], "batch")
    assert table.empty and "speedup" in table.columns
    assert list(sweep_analysis.crossovers(table, "batch").columns) == sweep_analysis.CROSSOVER_COLUMNS
    assert sweep_analysis.break_even_table(table, ["batch"]).empty


# ----------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("argv, words", [
    (["--param", "batch=0:8"], "--param: batch: a range must run upwards"),
    (["--param", "depth=1,2"], "--param: cannot sweep 'depth'"),
    ([], "--param: a sweep needs at least one --param"),
    (["--param", "batch=1,2", "--threshold", "0.2"], "--threshold: threshold must be"),
    (["--param", "batch=1,2", "--replays", "2", "--trials", "5"], "--trials"),
    (["--param", "batch=1,2", "--resume"], "nothing to resume"),
    (["--param", "batch=1,2", "--point-timeout", "-1"], "point-timeout must be"),
])
def test_bad_sweep_input_exits_2_with_one_line(tmp_path, capsys, argv, words):
    assert main(["sweep", "--out", str(tmp_path / "s"), "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:") and words in err, err
    assert not (tmp_path / "s").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_sweep_without_cuda_exits_3(tmp_path, capsys):
    assert main(["sweep", "--out", str(tmp_path / "s"), "--param", "batch=1,2"]) == 3
    assert "no CUDA device" in capsys.readouterr().err and not (tmp_path / "s").exists()


def test_a_sweep_keeps_up_to_eight_warm_workers_for_its_remaining_points():
    assert sweep_runner.sweep_spares(1, "cuda:0", cores=64) == 1  # one point: it runs fresh, one spare at most
    assert sweep_runner.sweep_spares(4, "cuda:0", cores=64) == 3
    assert sweep_runner.sweep_spares(27, "cuda:0", cores=64) == sweep_runner.SWEEP_SPARES == 8
    # never more than one per two cores, and one for CPU points, which use every core
    assert sweep_runner.sweep_spares(27, "cuda:0", cores=2) == 1
    assert sweep_runner.sweep_spares(27, "cuda:0", cores=6) == 3
    assert sweep_runner.sweep_spares(2_000, "cpu", cores=64) == 1
    assert sweep_runner._default_launcher(27, "cpu").spares == 1


def test_a_sweep_says_its_expected_time_up_front(tmp_path, capsys, monkeypatch):
    # 2,000 CPU points, one warm worker: 2,000 x (0.7 s a point + 3 s a warm-up), about 2 h
    assert sweep_runner.expected_seconds(2_000, "cpu", 1) == pytest.approx(7_400)
    assert sweep_runner.expected_seconds(16, "cuda:0", 8) == pytest.approx(16 * 1.5 + 2 * 10)
    monkeypatch.setattr(sweep_runner, "_default_launcher", lambda pending, device=None: FakeLauncher())
    assert main(["sweep", "--out", str(tmp_path / "s"), "--device", "cpu", "--param",
                 "batch=1:9:+1", "--progress", "none"]) == 0
    assert "Expected time: about 33 s for 9 point(s), 1 warm worker(s) at once (" in (
        capsys.readouterr().err)


def test_sweep_exit_codes_failed_point_stopped_and_resumed(tmp_path, capsys, monkeypatch):
    argv = ["sweep", "--out", str(tmp_path / "s"), "--device", "cpu", *sum(
        ([f"--{k.replace('_', '-')}", str(v)] for k, v in TINY.items() if k != "device"), []),
        "--param", "batch=8,16,32", "--progress", "none"]
    monkeypatch.setattr(sweep_runner, "_default_launcher",
                        lambda pending, device=None: FakeLauncher(
                            lambda c: "error:GpuMemoryError" if c.batch == 16 else "done"))
    assert main(argv) == 5  # the sweep finished; a point ran out of memory
    out = capsys.readouterr()
    assert "point 1 failed (GpuMemoryError)" in out.out and "1 point(s) failed" in out.err
    assert main(argv) == 2 and "already holds a sweep" in capsys.readouterr().err
    assert main(["sweep", "--out", str(tmp_path / "s"), "--resume", "--batch", "4"]) == 2
    assert "--batch cannot change it" in capsys.readouterr().err

    def interrupted(pending, device=None):
        launcher = FakeLauncher()
        real = launcher.start

        def start(config, *args, **kwargs):
            if config.batch == 16:
                raise KeyboardInterrupt
            return real(config, *args, **kwargs)

        launcher.start = start
        return launcher

    monkeypatch.setattr(sweep_runner, "_default_launcher", interrupted)
    assert main(argv[:-2] + ["--overwrite", "--progress", "none"]) == 130
    assert "--resume" in capsys.readouterr().err
    monkeypatch.setattr(sweep_runner, "_default_launcher", lambda pending, device=None: FakeLauncher())
    assert main(["sweep", "--out", str(tmp_path / "s"), "--resume", "--progress", "none"]) == 0
    assert "(1 already finished)" in capsys.readouterr().err
    assert (sweep_store.load_sweep(tmp_path / "s").points["status"] == "done").all()


def test_real_cpu_sweep_of_two_tiny_points(tmp_path, capsys):
    """Through the real launcher and real run processes (warm workers), on the CPU."""
    out = tmp_path / "cpu-sweep"
    code = main(["sweep", "--out", str(out), "--device", "cpu", "--batch", "8", "--d-in", "16",
                 "--hidden", "16", "--d-out", "4", "--replays", "20", "--trials", "4",
                 "--no-profile", "--param", "batch=4,8", "--progress", "none"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    data = sweep_store.load_sweep(out)
    assert data.status == "done" and list(data.points["status"]) == ["done", "done"]
    assert (data.points["eager_median_ms"] > 0).all()  # measured, not made up
    assert "a CPU sweep times the eager half only" in printed.out
    for index, batch in enumerate((4, 8)):
        run = RunResult.load(out / f"point-00{index}")
        assert run.complete and run.config.batch == batch and run.config.device == "cpu"
    # each point's run, read back, is exactly its planned config: resuming measures nothing again
    launcher = FakeLauncher()
    assert SweepRunner.resume(out, launcher=launcher).run().status == "done"
    assert launcher.started == []


# ----------------------------------------------------------------------------- the Sweep page

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
RECORDED = Path(__file__).resolve().parent / "data" / "sweep_batch_dtype"  # synthetic, 10 points


def _sweep_page(runs: Path):
    from streamlit.testing.v1 import AppTest

    from dashboard import state

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs)
    at.run()
    return at.switch_page("views/sweep.py").run()


def _spec(at, key: str) -> dict:
    return json.loads(at.get_by_key(key).proto.spec)


def test_sweep_page_draws_a_recorded_sweep(fresh_app_state, tmp_path):
    import shutil

    shutil.copytree(RECORDED, tmp_path / "runs" / "sweep-batch-dtype")
    at = _sweep_page(tmp_path / "runs")
    assert not at.exception
    assert at.selectbox(key="sweep_open").value == "sweep-batch-dtype"
    speedup = _spec(at, "sweep_speedup")
    names = {trace.get("name") for trace in speedup["data"]}
    assert {"graph · dtype=fp32", "graph · dtype=bf16", "predicted · graph · dtype=fp32"} <= names
    data = sweep_store.load_sweep(RECORDED)
    found = sweep_analysis.crossovers(sweep_analysis.speedup_table(data.points, data.point_modes, ["batch", "dtype"],
                                                 "batch"), "batch").set_index("series")
    crossover = found.at["graph · dtype=fp32", "crossover"]
    assert 128 < crossover < 2048 and math.isnan(found.at["graph · dtype=bf16", "crossover"])
    assert any(shape.get("type") == "line" and shape["x0"] == pytest.approx(crossover)
               for shape in speedup["layout"]["shapes"])  # the fp32 crossover, marked
    text = " ".join(m.value for m in at.markdown).replace("\\", "")
    assert f"falls below 1.10x at batch ≈ {crossover:,.0f}" in text and "stays at or above" in text
    assert _spec(at, "sweep_heatmap")["data"][0]["type"] == "heatmap"
    medians = {trace.get("name") for trace in _spec(at, "sweep_medians")["data"]}
    assert {"GPU-busy floor · dtype=fp32", "eager · dtype=bf16"} <= medians
    labels = [button.label for button in at.get("download_button")]
    assert {"Download crossovers CSV", "Download speedup table CSV", "Download break-even CSV",
            "Download points CSV"} <= set(labels)
    points = next(df.value for df in at.dataframe if "error_kind" in df.value.columns)
    assert points.loc[points["status"] == "failed", "error_kind"].tolist() == ["GpuMemoryError"]
    at.number_input(key="sweep_threshold_sweep-batch-dtype").set_value(3.0).run()
    assert "falls below 3.00x" in " ".join(m.value for m in at.markdown).replace("\\", "")
    assert not at.exception
    assert "Sweep capture_iters" in " ".join(c.value for c in at.caption)  # no amortisation here


def test_sweep_page_runs_stops_and_resumes_a_sweep(fresh_app_state, tmp_path, monkeypatch):
    """Start from the page (fake launcher: the second point hangs until stopped), stop, resume."""
    from dashboard import state

    hang = {"on": True}
    launcher = FakeLauncher(lambda c: "hang" if hang["on"] and c.batch == 16 else "done")
    monkeypatch.setattr(sweep_runner, "_default_launcher", lambda pending, device=None: launcher)  # own
    at = _sweep_page(tmp_path / "runs")
    assert not at.exception and "No sweep in" in " ".join(i.value for i in at.info)
    at.text_input(key="sweep_v1_batch").set_value("8,16,32").run()
    at.text_input(key="sweep_name").set_value("page-sweep").run()
    assert "3 points into" in " ".join(c.value for c in at.caption)
    at.button(key="sweep_start").click().run()
    job = at.session_state["sweep_job"]
    from conftest import wait_for

    assert wait_for(lambda: (job.snapshot()["progress"] or sweep_runner.SweepProgress(3, 0)).index == 1, 30)
    lock = state.lock_registry().lock("cpu").state()
    assert lock.holder is not None and lock.holder.ticket.run_name == "sweep page-sweep"
    at.run()
    at.button(key="sweep_stop").click().run()
    assert job.wait(30) and job.snapshot()["status"] == "stopped"
    assert state.lock_registry().lock("cpu").state().holder is None  # released
    at.run()
    assert "stopped" in " ".join(w.value for w in at.warning)
    hang["on"] = False
    at.button(key="sweep_resume").click().run()
    resumed = at.session_state["sweep_job"]
    assert resumed is not job and resumed.wait(30) and resumed.snapshot()["status"] == "done"
    at.run()
    assert not at.exception
    data = sweep_store.load_sweep(tmp_path / "runs" / "page-sweep")
    assert data.status == "done" and (data.points["status"] == "done").all()
    # the sweep's own launcher (its pool of warm workers) is closed when the sweep ends
    assert [b for b, _, _ in launcher.started] == [8, 16, 16, 32] and launcher.closed


# ----------------------------------------------------------------------------- on a GPU

GPU_SWEEPS = {
    "seed-batch-dtype": ["--preset", "seed", "--param", "batch=16:2048:x2", "--param", "dtype=fp32,bf16"],
    "transformer-batch": ["--preset", "transformer", "--param", "batch=1:64:x2"],
    "seed-bf16-capture-iters": ["--preset", "seed", "--dtype", "bf16", "--param", "capture_iters=1:8:x2"],
}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(GPU_SWEEPS))
def test_gpu_sweep_points_per_minute(name, tmp_path, capsys):
    """A real sweep on the GPU (default per-point trials, warm workers): prints the table, the
    crossover and the throughput in points per minute (the target is 20 or more for seed-size
    points). Set SWEEP_KEEP=DIR to keep the sweep folders for tests/gpu/sweep_report.py."""
    keep = os.environ.get("SWEEP_KEEP")
    out = (Path(keep) if keep else tmp_path) / name
    started = time.perf_counter()
    code = main(["sweep", "--out", str(out), *GPU_SWEEPS[name], "--progress", "none",
                 *(["--overwrite"] if out.exists() else [])])
    elapsed = time.perf_counter() - started
    printed = capsys.readouterr()
    data = sweep_store.load_sweep(out)
    points = data.points
    with capsys.disabled():
        print(f"\n== {name}: {len(points)} points in {elapsed:.1f} s = "
              f"{len(points) / elapsed * 60:.1f} points per minute "
              f"(median {points['elapsed_s'].median():.2f} s per point)")
        print(printed.out)
    assert code == 0, printed.err
    assert (points["status"] == "done").all()
    assert points["speedup"].between(0.3, 200).all() and (points["floor_ms"] > 0).all()
    assert (points["graph_median_ms"] >= points["floor_ms"] * 0.9).all()  # nothing beats the floor
    if name == "seed-bf16-capture-iters":
        amortisation = sweep_analysis.amortisation_table(
            sweep_analysis.speedup_table(points, data.point_modes, ["capture_iters"]), ["capture_iters"])
        with capsys.disabled():
            print(amortisation.to_string(index=False))
        # More steps per graph share one launch, so the graph's time approaches its own floor (on
        # the H200 the floor per step itself rose, 0.206 -> 0.246 ms from 1 to 8 steps, with the
        # in-place gradient zeroing between captured steps, so the time per step did not fall).
        over_floor = amortisation["graph_ms"] / amortisation["floor_ms"]
        assert over_floor.iloc[-1] <= over_floor.iloc[0]


def test_a_sweep_being_measured_cannot_be_resumed_or_replaced_twice(tmp_path):
    runner = SweepRunner.create(small_plan("8,16"), tmp_path / "s", launcher=FakeLauncher())
    for attempt in (lambda: SweepRunner.resume(tmp_path / "s", launcher=FakeLauncher()),
                    lambda: SweepRunner.create(small_plan(), tmp_path / "s", overwrite=True,
                                               launcher=FakeLauncher())):
        with pytest.raises(ConfigError, match="is being measured now"):
            attempt()
    runner.run()
    SweepRunner.resume(tmp_path / "s", launcher=FakeLauncher()).run()  # free again once it ended
    info_path = tmp_path / "s" / "sweep.json"
    info = json.loads(info_path.read_text())
    parent = os.getppid()  # a live process of this host, as if it ran the sweep
    info.update(status="running", runner={"pid": parent, "host": info["runner"]["host"],
                                          "start": sweep_store._process_start(parent)})
    info_path.write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=f"being measured by process {parent}"):
        SweepRunner.resume(tmp_path / "s", launcher=FakeLauncher())
    info["runner"]["start"] = "0"  # that pid now belongs to another process: resumable
    info_path.write_text(json.dumps(info))
    assert SweepRunner.resume(tmp_path / "s", launcher=FakeLauncher()).run().status == "done"
    assert not sweep_store.measured_now(tmp_path / "s")
    other = SweepRunner.create(small_plan("8"), tmp_path / "t", launcher=FakeLauncher())
    assert sweep_store.measured_now(tmp_path / "t")
    other.run()
    assert not sweep_store.measured_now(tmp_path / "t")


def test_a_points_modes_are_read_as_the_modes_option_reads_them():
    """One grammar for modes: a sweep point's names joined by '+' are read by the field's own
    reader (eager and graph always, each mode once), with the sweep's error on an unknown one."""
    assert sweep_plan._modes_value("modes", "graph") == ("eager", "graph")
    assert sweep_plan._modes_value("modes", "eager+compile+compile") == ("eager", "graph", "compile")
    with pytest.raises(ConfigError) as refused:
        sweep_plan._modes_value("modes", "+turbo")
    assert "unknown mode 'turbo'" in str(refused.value)
    assert sweep_plan._int_value("batch", " 1_024 ") == 1024


# ----------------------------------------------------------------------------- hostile values (issue 18)

BIG = "1" + "0" * 400  # a 401-digit whole number


@pytest.mark.parametrize("values, words", [
    (f"1:{BIG}:x2", "batch: 10,000,000,000,000"),
    (f"{BIG}:1{'0' * 401}:x2", "is outside 1 to 1,048,576"),
    (f"{BIG}:1:x2", "a range must run upwards from 1 or more; got 10,000,000"),
    (f"1,{BIG}", "is outside 1 to 1,048,576"),
    (f"1:8:+{BIG}", "an adding step must be from 1 to 1,048,576; got '+10000"),
    (f"1:8:x{BIG}", "a multiplying step must be above 1 (and finite)"),
    (f"1:{'9' * 5000}", "expected a whole number, got '99999"),
    (f"1:{'9' * 5000}:x2", "expected a whole number"),
])
def test_values_beyond_a_fields_limits_are_refused_before_any_arithmetic(tmp_path, capsys, values,
                                                                        words):
    assert main(["sweep", "--out", str(tmp_path / "s"), "--device", "cpu",
                 "--param", f"batch={values}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --param: batch: ") and words in err, err
    assert len(err) < 400 and "..." in err  # the value is echoed shortened, never whole
    assert not (tmp_path / "s").exists()


def _stopped_sweep(folder: Path, values: str = "8,16,32") -> Path:
    """A sweep of TINY CPU points stopped after its first point (fake launcher)."""
    runner = None

    def stop_after_one(progress):
        if progress.points_finished == 1:
            runner.stop()

    runner = SweepRunner.create(small_plan(values), folder, launcher=FakeLauncher(),
                                on_progress=stop_after_one)
    assert runner.run().status == "stopped"
    return folder


@pytest.mark.parametrize("pid", [math.inf, [1], True, -5, 0, 2**40, "12", None, 1e3])
def test_a_runner_pid_that_names_no_process_is_no_obstacle_to_resuming(tmp_path, pid):
    folder = _stopped_sweep(tmp_path / "s")
    info = json.loads((folder / "sweep.json").read_text())
    info.update(status="running", runner=dict(info["runner"], pid=pid))
    (folder / "sweep.json").write_text(json.dumps(info))  # inf is written as Infinity
    assert not sweep_store.measured_now(folder)
    launcher = FakeLauncher()
    assert SweepRunner.resume(folder, launcher=launcher).run().status == "done"
    assert [batch for batch, _, _ in launcher.started] == [16, 32]


@pytest.mark.parametrize("cell", ["", "nan", "inf", "-inf", "1e400", "9" * 30, "7"])
def test_an_axis_value_in_points_csv_that_is_not_the_plans_is_a_damaged_table(tmp_path, cell):
    folder = _stopped_sweep(tmp_path / "s")
    points = pd.read_csv(folder / "points.csv", dtype=str, keep_default_na=False)
    points.loc[1, "batch"] = cell
    points.to_csv(folder / "points.csv", index=False)
    with pytest.raises(RunFormatError, match=r"points\.csv: point 1 has batch .*not the plan's 16"):
        sweep_store.load_sweep(folder)
    (listed,) = sweep_store.list_sweeps(tmp_path).itertuples(index=False)
    assert "point 1 has batch" in listed.problem
    launcher = FakeLauncher()
    outcome = SweepRunner.resume(folder, launcher=launcher).run()  # rebuilt from the folders
    assert outcome.status == "done" and [batch for batch, _, _ in launcher.started] == [16, 32]
    assert list(sweep_store.load_sweep(folder).points["batch"]) == [8, 16, 32]


def test_a_schema_2_point_whose_headline_holds_a_400_digit_integer_counts_as_measured(tmp_path):
    folder = _stopped_sweep(tmp_path / "s")
    point = folder / "point-000"
    summary = json.loads((point / "summary.json").read_text())
    summary["schema_version"] = 2
    summary["headline"].update(graph_pool_bytes=int(BIG), capture_ms=-int(BIG),
                               compile_warmup_ms=int(BIG))
    (point / "summary.json").write_text(json.dumps(summary))
    (point / "metrics.csv").unlink()  # schema 2 had none: derived from the headline on loading
    metrics = RunResult.load(point).table("metrics")
    assert "pool_bytes" not in set(metrics["metric"]) and metrics["value"].notna().any()
    launcher = FakeLauncher()
    outcome = SweepRunner.resume(folder, launcher=launcher).run()
    assert outcome.status == "done" and [batch for batch, _, _ in launcher.started] == [16, 32]
    first = outcome.points.iloc[0]
    assert first["status"] == "done" and math.isnan(first["capture_ms"])
    assert first["speedup"] > 1


def test_resuming_a_sweep_on_a_read_only_disk_is_refused_in_one_line(tmp_path, capsys,
                                                                      monkeypatch):
    import errno
    import tempfile

    folder = _stopped_sweep(tmp_path / "s")
    before = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(sweep_runner, "_default_launcher", lambda pending, device=None: FakeLauncher())
    with monkeypatch.context() as patched:
        patched.setattr(tempfile, "mkstemp", read_only)
        patched.setattr(tempfile, "mkdtemp", read_only)
        assert main(["sweep", "--out", str(folder), "--resume", "--progress", "none"]) == 2
        err = capsys.readouterr().err
        assert err == (f"error: --out: cannot resume the sweep in '{folder}': the folder cannot "
                       "be written (Read-only file system) (copy the sweep folder to a writable "
                       "disk and resume it there)\n")
        with pytest.raises(ConfigError, match="cannot be written"):
            SweepRunner.resume(folder, launcher=FakeLauncher())
    assert {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()} == before
    assert main(["sweep", "--out", str(folder), "--resume", "--progress", "none"]) == 0  # released


def test_sweep_page_shows_hostile_sweep_folders_without_crashing(fresh_app_state, tmp_path):
    runs = tmp_path / "runs"
    running = _stopped_sweep(runs / "a-pid")
    info = json.loads((running / "sweep.json").read_text())
    info.update(status="running", runner=dict(info["runner"], pid=math.inf))
    (running / "sweep.json").write_text(json.dumps(info))
    damaged = _stopped_sweep(runs / "b-nan")
    points = pd.read_csv(damaged / "points.csv", dtype=str, keep_default_na=False)
    points.loc[0, "batch"] = "nan"
    points.to_csv(damaged / "points.csv", index=False)
    _stopped_sweep(runs / os.fsdecode(b"c-\xff"))
    at = _sweep_page(runs)
    assert not at.exception, [e.value for e in at.exception]
    options = [o for o in at.selectbox(key="sweep_open").options
               if not o.startswith("sample: ")]  # the bundled sample sweep is offered too
    assert len(options) == 3 and "c-\ufffd · stopped · 0/0 measured · unreadable" in options
    at.selectbox(key="sweep_open").set_value("a-pid").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Resume" in [button.label for button in at.button]  # no live process is named
    for name, words in (("b-nan", "point 0 has batch nan, not the plan"),
                        ("c-\ufffd", "not valid UTF-8")):
        at.selectbox(key="sweep_open").set_value(name).run()
        assert not at.exception, [e.value for e in at.exception]
        shown = " ".join(e.value for e in at.error).replace("\\", "")
        assert "This sweep cannot be opened" in shown and words in shown, shown


def test_a_sweep_table_pandas_cannot_parse_is_refused_in_one_line(tmp_path):
    folder = _stopped_sweep(tmp_path / "s")
    for name in ("points.csv", "point_modes.csv"):
        original = (folder / name).read_text()
        (folder / name).write_text(original + "1," * 40 + "\n")
        with pytest.raises(RunFormatError) as info:
            sweep_store.load_sweep(folder)
        text = str(info.value)
        assert "\n" not in text and text.count("Expected") == 1, text
        assert f"{name} is not a readable CSV: Error tokenizing data." in text, text
        (folder / name).write_text(original)


def test_a_plan_threshold_of_400_digits_is_a_damaged_sweep(tmp_path):
    """Found by tests/fuzz/campaign.py: float() of a 401-digit integer overflowed (a traceback
    on --resume, load_sweep and the Sweep page)."""
    folder = _stopped_sweep(tmp_path / "s")
    info = json.loads((folder / "sweep.json").read_text())
    info["plan"]["threshold"] = int(BIG)
    (folder / "sweep.json").write_text(json.dumps(info))
    with pytest.raises(RunFormatError, match="the saved sweep plan is malformed"):
        sweep_store.load_sweep(folder)


class _EagerOnlyProcess(FakeProcess):
    """A CPU point: eager timed, no graph (what a real CPU run writes)."""

    def wait(self, timeout=None):
        eager = 0.01 * self.config.batch
        modes = pd.DataFrame([{"mode": "eager", "median_ms": eager, "speedup": 1.0,
                               "speedup_ci_low": 0.98, "speedup_ci_high": 1.02, "one_time_ms": 0.0,
                               "memory_bytes": 0.0, "graphs_recorded": math.nan}])
        RunResult(config=self.config, environment={"device_type": "cpu"},
                  headline={"timing_method": "steady_trial"},
                  tables={"modes": modes, "metrics": metrics.build(modes, empty_table("stats"), {})},
                  notes=["device cpu: only the eager half ran"]).save(self.out,
                                                                     overwrite=self.overwrite)
        return FakeEnding("done")


class _EagerOnlyLauncher(FakeLauncher):
    def __init__(self):
        super().__init__()
        self.configs: list[RunConfig] = []

    def start(self, config, out_dir, *, overwrite=False, timeout_s=None, on_event=None):
        self.configs.append(config)
        self.started.append((config.batch, Path(out_dir).name, overwrite))
        return _EagerOnlyProcess(config, out_dir, overwrite, "done", on_event or (lambda e: None))


def test_a_cpu_sweep_page_draws_eager_medians_and_says_plainly_there_is_no_graph(
        fresh_app_state, tmp_path, monkeypatch):
    """Issue 20: a CPU sweep drew empty charts and said "no measured point with a graph timing
    yet" (there never will be one); its download buttons sat on empty tables; "Replays per point"
    was silently ignored on the CPU."""
    launcher = _EagerOnlyLauncher()
    monkeypatch.setattr(sweep_runner, "_default_launcher", lambda pending, device=None: launcher)
    at = _sweep_page(tmp_path / "runs")
    assert at.selectbox(key="sweep_device").value == "cpu"  # no GPU here
    labels = [n.label for n in at.number_input]
    assert "Replays per point" not in labels and "Eager steps per point" in labels
    steps = at.number_input(key="sweep_eager_iters")
    assert steps.value == 200 and "no graph replays" in steps.help
    steps.set_value(40).run()
    at.text_input(key="sweep_v1_batch").set_value("8,16,32").run()
    at.text_input(key="sweep_name").set_value("cpu-sweep").run()
    at.button(key="sweep_start").click().run()
    job = at.session_state["sweep_job"]
    assert job.wait(30) and job.snapshot()["status"] == "done"
    assert [c.total_eager_iters for c in launcher.configs] == [40, 40, 40]  # the control applies
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(i.value for i in at.info)
    assert "A CPU sweep has no graph timing, and never will" in said
    assert "graph timing yet" not in said + " ".join(c.value for c in at.caption)
    with pytest.raises(KeyError):
        at.get_by_key("sweep_speedup")  # no empty speedup chart
    medians = _spec(at, "sweep_medians")
    assert [trace["name"] for trace in medians["data"]] == ["eager"]
    assert medians["layout"]["title"]["text"].startswith("Eager's median time per step")
    labels = [button.label for button in at.get("download_button")]
    assert "Download crossovers CSV" not in labels and "Download speedup table CSV" not in labels
    assert "Download eager medians CSV" in labels  # beside a table that has rows
    table = next(df.value for df in at.dataframe if "eager_ms" in df.value.columns)
    assert table["eager_ms"].tolist() == pytest.approx([0.08, 0.16, 0.32])


def test_a_cpu_this_machine_lacks_refuses_the_sweep_before_anything_is_written(tmp_path, capsys):
    """Found by the fuzz campaign: ``sweep --cpu-affinity 999`` ran every point into a failure;
    the plan's CPUs are checked first, like ``run``'s, and nothing is written."""
    from profiler_core.cli.main import main

    out = tmp_path / "s"
    code = main(["sweep", "--device", "cpu", "--d-in", "16", "--hidden", "16", "--d-out", "8",
                 "--param", "batch=8,16", "--cpu-affinity", "999", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "999" in err and err.count("\n") <= 2, err
    assert not out.exists()
