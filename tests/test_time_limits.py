"""``run --timeout`` (issue 27, items 6 and 13): the limit holds for ``--repeats`` too, a stopped
repeats run keeps the processes that finished, and the message says which phase the run stopped
in."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from test_repeats import TINY, FakeLauncher, FakeProcess

from profiler_core.cli.main import main
from profiler_core.orchestration import repeats
from profiler_core.spec.events import ProgressEvent
from profiler_core.storage.results import RunResult

NEVER_S = 30.0  # a safety net: a run still going after this never stopped by itself


class _Hangs(FakeProcess):
    """A repeat's process that reports its phase, then never ends (until the safety net)."""

    def __init__(self, pid: int) -> None:
        super().__init__(None, pid)
        self.started = time.monotonic()

    def wait(self, timeout=None):
        if self.stopped:
            return SimpleNamespace(status="cancelled", error=None, message="", stderr_tail="")
        if time.monotonic() - self.started > NEVER_S:
            raise AssertionError("the run did not stop at its time limit")
        time.sleep(timeout or 0.0)
        return None


class _SecondHangs(FakeLauncher):
    """The first repeat finishes (a run written), the second hangs in its timed trials."""

    def __init__(self) -> None:
        super().__init__([2.0, 2.0, 2.0])

    def start(self, config, out_dir, *, on_event=None, **kwargs):
        if not self.started:
            return super().start(config, out_dir, on_event=on_event, **kwargs)
        self.started.append((config, Path(out_dir)))
        on_event(ProgressEvent("timed trials", 2, 5, 0.4, ""))
        self.processes.append(_Hangs(2000 + len(self.started)))
        return self.processes[-1]


def test_repeats_stop_at_the_time_limit_and_keep_the_finished_processes(tmp_path, capsys,
                                                                         monkeypatch):
    launcher = _SecondHangs()
    monkeypatch.setattr(repeats, "Launcher", lambda **kwargs: launcher)
    out = tmp_path / "runs" / "three"
    started = time.monotonic()
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "jsonl", *TINY,
                 "--repeats", "3", "--timeout", "1.5"]) == 124
    assert time.monotonic() - started < NEVER_S
    assert launcher.processes[-1].stopped  # the running repeat's process was ended
    printed = capsys.readouterr()
    record = json.loads(printed.out.strip().splitlines()[-1])
    assert record["kind"] == "TimeLimit"
    assert record["message"] == ("no result within the time limit of 1.5 s (--timeout); it "
                                 "stopped during repeat 2 of 3, in its timed trials")
    assert f"The processes that finished were kept in {out}" in printed.err
    kept = RunResult.load(out)
    assert kept.complete is False and list(kept.table("repeats")["repeat"]) == [1]
    assert sorted(p.name for p in out.parent.iterdir()) == ["three"]  # no staging folder left


def test_a_single_run_stopped_by_its_time_limit_says_in_which_phase(tmp_path, capsys):
    out = tmp_path / "limited"
    assert main(["run", "--out", str(out), "--device", "cpu", "--progress", "jsonl", "--batch",
                 "64", "--d-in", "256", "--hidden", "256", "--d-out", "64", "--replays", "100000",
                 "--timeout", "2.5"]) == 124
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    note = next(note for note in RunResult.load(out).notes if note.startswith("incomplete"))
    phase = note.removeprefix("incomplete: the run stopped during ").split(":")[0]
    assert record["message"] == (f"no result within the time limit of 2.5 s (--timeout); it "
                                 f"stopped during {phase}")


def test_the_phase_a_run_was_in_is_the_last_one_reported():
    from profiler_core.spec.progress import LastPhase, Progress

    heard = []
    last = LastPhase(heard.append)
    assert last.phase == ""
    last(Progress("warm-up", 1, 10))
    last(Progress("timed trials", 2, 10))
    assert last.phase == "timed trials" and [p.phase for p in heard] == ["warm-up", "timed trials"]
