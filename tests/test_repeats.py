"""Repeats (issue 17, item 3): one config in N fresh processes, the median one shown with every
process's figures, through the command line, with a stand-in launcher for the failures."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import figure_table, stored_pair

from profiler_core.cli import parser as cli
from profiler_core.cli.main import main
from profiler_core.orchestration import repeats
from profiler_core.spec.config import PRESETS
from profiler_core.spec.errors import GpuMemoryError
from profiler_core.spec.events import ErrorEvent, ProgressEvent
from profiler_core.storage.results import RunResult
from profiler_core.timing import stability

TINY = ["--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4", "--replays", "20",
        "--trials", "4", "--no-profile", "--no-nvml", "--parity-steps", "0"]
HOST_KEYS = ("cpu_model", "logical_cores", "cpu_affinity", "cpu_governor", "load_avg_start",
             "load_avg_end", "torch_num_threads", "torch_num_interop_threads")


# ----------------------------------------------------------------------------- end to end

def test_repeats_3_end_to_end_through_the_cli(tmp_path, capsys):
    """Three real fresh processes on the CPU, pinned: the folder holds the median one, with
    repeats.csv and the between-process headline, and no staging folder is left behind."""
    cpu = min(os.sched_getaffinity(0))
    out = tmp_path / "runs" / "three"
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "none", *TINY,
                 "--repeats", "3", "--cpu-affinity", str(cpu)]) == 0
    printed = capsys.readouterr().out
    assert "Between 3 fresh processes" in printed and f"Wrote {out}" in printed
    assert sorted(os.listdir(out.parent)) == ["three"]  # the staging folder is gone
    result = RunResult.load(out)
    table = result.table("repeats")
    assert list(table["repeat"]) == [1, 2, 3] and table["shown"].sum() == 1
    assert len(set(table["pid"])) == 3 and os.getpid() not in set(table["pid"])
    assert table["run_wall_s"].gt(0).all() and table["speedup"].isna().all()  # no graph on a CPU
    shown = table[table["shown"]].iloc[0]
    assert shown["eager_median_ms"] == sorted(table["eager_median_ms"])[1]  # the median process
    head = result.headline
    assert head["repeats"] == 3 and head["repeat_shown"] == shown["repeat"]
    assert result.pair.eager_ms == shown["eager_median_ms"]  # every figure is that process's
    assert head["eager_between_min_ms"] == table["eager_median_ms"].min()
    assert head["eager_between_max_ms"] == table["eager_median_ms"].max()
    assert "min-max range of 3 processes" in head["between_interval"]
    assert result.config.repeats == 3 and result.config.cpu_affinity == str(cpu)
    stats = result.table("stats")
    assert stats[(stats["method"] == "steady_trial")]["median_ms"].iloc[0] == result.pair.eager_ms
    for key in HOST_KEYS:
        assert key in result.environment, key
    assert result.environment["cpu_affinity"] == str(cpu)  # the process pinned itself
    assert result.environment["logical_cores"] == os.cpu_count()


# ----------------------------------------------------------------------------- a stand-in launcher

class FakeProcess:
    def __init__(self, ending, pid, interrupt=False):
        self._ending, self.pid, self._interrupt, self.stopped = ending, pid, interrupt, False

    def wait(self, timeout=None):
        if self._interrupt:
            raise KeyboardInterrupt
        return self._ending

    def cancel(self, grace_s=None):
        """SIGTERM, then SIGKILL after ``grace_s``: the process ends (no second interrupt)."""
        self.stopped, self._interrupt = True, False


class FakeLauncher:
    """Each start writes a run with the next speedup (or ends with the next failure)."""

    def __init__(self, outcomes, ci=0.03):
        self.outcomes, self.ci, self.started, self.processes = list(outcomes), ci, [], []

    def start(self, config, out_dir, *, on_event=None, **_):
        outcome = self.outcomes[len(self.started)]
        self.started.append((config, Path(out_dir)))
        pid = 1000 + len(self.started)
        if on_event is not None:
            on_event(ProgressEvent("timed trials", 2, 4, 0.5, "trial 2/4"))
        if isinstance(outcome, (int, float)):
            eager = 1.2
            RunResult(config=config, environment={"device_type": "cuda", "pid": pid},
                      headline={"timing_method": "steady_trial"},
                      tables={"metrics": figure_table({
                          "eager": {"median_ms": eager},
                          "graph": {"median_ms": eager / outcome, "speedup": outcome,
                                    "speedup_ci_low": outcome * (1 - self.ci),
                                    "speedup_ci_high": outcome * (1 + self.ci)}})},
                      notes=[f"process {pid}"]).save(out_dir)
            ending = SimpleNamespace(status="done", error=None, message="finished",
                                     stderr_tail="", returncode=0)
        elif outcome == "interrupt":
            ending = None
        else:
            ending = outcome
        process = FakeProcess(ending, pid, interrupt=outcome == "interrupt")
        self.processes.append(process)
        return process


def _error(kind="GpuMemoryError", message="CUDA ran out of memory during timed trials",
           hint="shrink the batch"):
    return SimpleNamespace(status="error", error=ErrorEvent(kind, None, message, hint),
                           message=message, stderr_tail="", returncode=5)


GPU_CONFIG = PRESETS["seed"].replace(repeats=3)


def test_the_shown_repeat_is_the_median_speedup_with_the_between_process_figures(tmp_path):
    launcher = FakeLauncher([5.0, 6.62, 4.81])
    seen = []
    result = repeats.run_repeats(GPU_CONFIG, tmp_path / "r", launcher=launcher, progress=seen.append)
    assert [config.repeats for config, _ in launcher.started] == [1, 1, 1]  # each child is one run
    table = RunResult.load(tmp_path / "r").table("repeats")
    assert list(table["shown"]) == [True, False, False]
    loaded = RunResult.load(tmp_path / "r")
    head, pair = loaded.headline, loaded.pair
    assert pair.speedup == 5.0 and head["repeat_shown"] == 1 and head["repeats"] == 3
    assert (head["speedup_between_min"], head["speedup_between_max"]) == (4.81, 6.62)
    assert head["speedup_between_median"] == 5.0
    assert (head["speedup_between_low"], head["speedup_between_high"]) == (4.81, 6.62)
    assert head["between_coverage_pct"] == 75.0
    assert result.config.repeats == 3 and result.notes[0] == "process 1001"
    assert any("holds repeat 1, the median speedup" in note and "repeats.csv" in note
               for note in result.notes[1:])
    assert sorted(os.listdir(tmp_path)) == ["r"]  # staging removed
    phases = [p.phase for p in seen]
    assert phases[0] == "repeat 1 of 3: starting" and phases[-1] == "done"
    relayed = next(p for p in seen if p.phase == "repeat 2 of 3: timed trials")
    assert relayed.fraction == pytest.approx(1.5 / 3) and relayed.message == "trial 2/4"
    # the spread (4.81-6.62x) is wider than the shown run's own CI (4.85-5.15x): said so
    wider = stability.spread_beyond_ci(head, (pair.speedup_ci_low, pair.speedup_ci_high))
    assert wider is not None and "4.81x to 6.62x" in wider.text() and "4.85-5.15x" in wider.text()


def test_an_even_count_shows_the_lower_middle_process(tmp_path):
    repeats.run_repeats(GPU_CONFIG.replace(repeats=4), tmp_path / "r",
                        launcher=FakeLauncher([4.8, 6.6, 5.5, 5.0]))
    loaded = RunResult.load(tmp_path / "r")
    head = loaded.headline
    assert loaded.pair.speedup == 5.0 and head["repeat_shown"] == 4
    assert head["speedup_between_median"] == pytest.approx(5.25)


def test_a_spread_inside_the_ci_gives_no_warning(tmp_path):
    repeats.run_repeats(GPU_CONFIG, tmp_path / "r", launcher=FakeLauncher([5.0, 5.02, 4.99], ci=0.03))
    loaded = RunResult.load(tmp_path / "r")
    assert stability.spread_beyond_ci(
        loaded.headline, (loaded.pair.speedup_ci_low, loaded.pair.speedup_ci_high)) is None


def test_a_failed_first_repeat_fails_the_run_with_its_error(tmp_path):
    launcher = FakeLauncher([_error()])
    with pytest.raises(GpuMemoryError) as caught:
        repeats.run_repeats(GPU_CONFIG, tmp_path / "r", launcher=launcher)
    assert caught.value.message.startswith("repeat 1 of 3 failed: CUDA ran out of memory")
    assert caught.value.hint == "shrink the batch" and len(launcher.started) == 1
    assert os.listdir(tmp_path) == []  # nothing kept, no staging left


def test_a_later_failure_keeps_the_finished_repeats_marked_incomplete(tmp_path):
    launcher = FakeLauncher([5.0, 6.0, _error(), 7.0])
    with pytest.raises(GpuMemoryError) as caught:
        repeats.run_repeats(GPU_CONFIG.replace(repeats=4), tmp_path / "r", launcher=launcher)
    assert caught.value.kept == tmp_path / "r" and len(launcher.started) == 3  # stops there
    result = RunResult.load(tmp_path / "r")
    assert not result.complete and result.headline["repeats"] == 2
    assert list(result.table("repeats")["speedup"]) == [5.0, 6.0]
    assert any(note.startswith("incomplete: the run stopped during repeat 3 of 4: repeat 3 of 4 "
                               "failed") and "2 of 4 processes finished" in note
               for note in result.notes)
    assert sorted(os.listdir(tmp_path)) == ["r"]


def test_a_crashed_repeat_says_how_it_ended(tmp_path):
    crashed = SimpleNamespace(status="crashed", error=None, message="the worker was killed by SIGKILL",
                              stderr_tail="some output\nKilled\n", returncode=-9)
    with pytest.raises(Exception) as caught:
        repeats.run_repeats(GPU_CONFIG, tmp_path / "r", launcher=FakeLauncher([crashed]))
    assert str(caught.value.message) == ("repeat 1 of 3 failed: the worker was killed by SIGKILL "
                                         "(Killed)")


def test_ctrl_c_kills_the_running_repeat_and_keeps_the_finished_ones(tmp_path):
    launcher = FakeLauncher([5.0, "interrupt"])
    with pytest.raises(KeyboardInterrupt) as caught:
        repeats.run_repeats(GPU_CONFIG, tmp_path / "r", launcher=launcher)
    assert launcher.processes[1].stopped and caught.value.kept == tmp_path / "r"
    result = RunResult.load(tmp_path / "r")
    assert not result.complete and result.headline["repeats"] == 1
    assert "between_interval" not in result.headline  # one process: no spread to describe
    assert sorted(os.listdir(tmp_path)) == ["r"]


def test_the_cli_exits_with_the_failed_repeats_code_and_says_what_was_kept(tmp_path, monkeypatch,
                                                                           capsys):
    fake = FakeLauncher([5.0, _error()])
    monkeypatch.setattr(repeats, "Launcher", lambda **_: fake)
    out = tmp_path / "r"
    assert main(["run", "--out", str(out), "--repeats", "2", "--progress", "jsonl"]) == 5
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert records[-1]["event"] == "error" and records[-1]["kind"] == "GpuMemoryError"
    assert records[-1]["message"].startswith("repeat 2 of 2 failed")
    assert any(r.get("phase") == "repeat 2 of 2: timed trials" for r in records)
    assert not RunResult.load(out).complete


def test_median_interval_uses_order_statistics_from_six_processes():
    assert repeats.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)
    low, high, coverage = repeats.median_interval([6, 1, 5, 2, 4, 3])
    assert (low, high) == (1, 6) and coverage == pytest.approx(1 - 2 / 64)
    low, high, coverage = repeats.median_interval(list(range(1, 11)))
    assert (low, high) == (2, 9) and coverage == pytest.approx(1 - 2 * 11 / 1024)
    assert all(math.isnan(v) for v in repeats.median_interval([math.nan]))


def test_between_table_puts_the_interval_beside_the_runs_own_ci():
    table = pd.DataFrame({"repeat": [1, 2, 3], "pid": [1, 2, 3], "eager_median_ms": [1.1, 1.5, 1.3],
                          "graph_median_ms": [0.23, 0.24, 0.235], "speedup": [4.8, 6.2, 5.5],
                          "speedup_ci_low": [4.6, 6.0, 5.3], "speedup_ci_high": [5.0, 6.4, 5.7],
                          "run_wall_s": [9.0, 9.0, 9.0], "shown": [False, False, True]})
    head = {"speedup": 5.5, "speedup_ci_low": 5.3, "speedup_ci_high": 5.7, "eager_median_ms": 1.3,
            "graph_median_ms": 0.235, **repeats.between_headline(table)}
    frame = repeats.between_table(head, stored_pair(head))
    assert list(frame.columns) == repeats.BETWEEN_COLUMNS
    assert list(frame["figure"]) == ["speedup", "eager median per step", "graph median per step"]
    first = frame.iloc[0]
    assert (first["shown_run"], first["shown_ci_low"], first["between_min"], first["between_max"]) \
        == (5.5, 5.3, 4.8, 6.2)
    assert repeats.between_table({"speedup": 2.0}, stored_pair({"speedup": 2.0})).empty
    assert "4.80x-6.20x" in "\n".join(repeats.summary_lines(head))


def test_every_sweep_point_is_a_repeats_run():
    from profiler_core.cli.sweep_command import plan_from_args
    from profiler_core.orchestration.command import run_argv

    args = cli.parse(["sweep", "--param", "batch=8,16", "--out", "x", "--device", "cpu",
                      "--repeats", "3", "--cpu-affinity", "0"])
    plan = plan_from_args(args)
    assert {point.config.repeats for point in plan.points()} == {3}
    argv = run_argv(plan.points()[0].config, "out")
    assert argv[argv.index("--repeats") + 1] == "3"
    assert argv[argv.index("--cpu-affinity") + 1] == "0"
