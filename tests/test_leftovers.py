"""Leftovers of the tool's own killed processes (issue 27, item 11): the staging folder of a
SIGKILLed ``--repeats`` parent and the temporary file of a killed index rebuild are removed by the
next run, found by a name only the tool uses that names their owner; a live owner's, a fresh one's
and anything not recognisably the tool's are left alone."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_output_safety import a_run

from profiler_core.cli.main import main
from profiler_core.storage import leftovers
from profiler_core.storage.results import run_files

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--device", "cpu", "--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4",
        "--replays", "20", "--trials", "4", "--progress", "none"]
OLD_S = 10 * leftovers.LEFTOVER_MIN_AGE_S


def _age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything in it ``seconds`` old."""
    when = time.time() - seconds
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(item, (when, when), follow_symlinks=False)


def _hidden(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("."))


def _running(token: str) -> list[int]:
    """Live processes whose command line mentions ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if token in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _wait_for(condition, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.1)


def test_a_killed_repeats_parents_staging_folder_is_removed_by_the_next_run(tmp_path):
    runs = tmp_path / "runs"
    parent = subprocess.Popen([sys.executable, "-m", "profiler_core", "run", *TINY,
                               "--replays", "100000", "--repeats", "3", "--timeout", "0",
                               "--out", str(runs / "three")], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: runs.is_dir() and _running("/.three.r"))  # the first repeat's process
    parent.send_signal(signal.SIGKILL)
    parent.wait(10)
    _wait_for(lambda: not _running("/.three.r"))  # it ends with its parent
    (staging,) = _hidden(runs)
    _age(staging, OLD_S)
    assert main(["run", *TINY, "--out", str(runs / "next")]) == 0
    assert sorted(p.name for p in runs.iterdir()) == ["next"]


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    """A real run folder, copied where a leftover needs one."""
    return a_run(tmp_path_factory.mktemp("leftovers") / "run")


def _copy(run: Path, path: Path) -> Path:
    shutil.copytree(run, path)
    return path


def _dead_owner_tag() -> str:
    """The owner tag of a process of this host that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tag = leftovers.owner_tag(child.pid)
    finally:
        child.kill()
        child.wait()
    return tag


def _repeats_staging(run: Path, folder: Path, tag: str, name: str = "three") -> Path:
    staging = folder / f".{name}.r{tag}.abcd_123"
    _copy(run, staging / "repeat-1")
    return staging


def test_only_a_provably_ended_owners_old_leftovers_are_removed(tmp_path, one_run):
    runs = tmp_path / "runs"
    runs.mkdir()
    ended = _repeats_staging(one_run, runs, _dead_owner_tag())
    live = _repeats_staging(one_run, runs, leftovers.owner_tag(os.getpid()), "live")
    fresh = _repeats_staging(one_run, runs, _dead_owner_tag(), "fresh")
    other_host = _repeats_staging(one_run, runs, f"00000000-{os.getpid()}-1", "far")
    untagged = runs / ".older.rabcd1234"  # an earlier version's name: no owner to check
    _copy(one_run, untagged / "repeat-1")
    for path in (ended, live, other_host, untagged):
        _age(path, OLD_S)
    leftovers.remove_stale(runs, run_files)
    assert not ended.exists()
    assert _hidden(runs) == sorted([live, fresh, other_host, untagged])


def test_a_leftover_holding_something_else_keeps_that(tmp_path, one_run):
    staging = _repeats_staging(one_run, tmp_path, _dead_owner_tag())
    (staging / "notes.txt").write_text("mine")
    (staging / "repeat-2").mkdir()
    (staging / "repeat-2" / "thesis.tex").write_text("mine")
    _age(staging, OLD_S)
    leftovers.remove_stale(tmp_path, run_files)
    assert sorted(p.name for p in staging.iterdir()) == ["notes.txt", "repeat-2"]
    assert (staging / "repeat-2" / "thesis.tex").read_text() == "mine"


def test_a_killed_index_rebuilds_temporary_file_is_removed_by_the_next_listing(tmp_path, one_run):
    runs = tmp_path / "runs"
    _copy(one_run, runs / "a")
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from profiler_core.storage import index
        def killed_half_way(connection, *args):
            connection.execute("CREATE TABLE half (x)")  # a rebuild that has written something
            os.kill(os.getpid(), signal.SIGKILL)
        index._sync = killed_half_way
        index.open_index({str(runs)!r}, rebuild=True)
    """)], cwd=ROOT, capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL
    left = _hidden(runs)
    assert left and all(p.name.startswith(".profiler_index.sqlite.") for p in left)
    for path in left:
        _age(path, OLD_S)
    assert main(["index", "--runs", str(runs)]) == 0
    assert sorted(p.name for p in _hidden(runs)) == [".profiler_index.sqlite"]


@pytest.mark.parametrize("name", [".profiler_index.sqlite.abcd1234.tmp", ".profiler_index.sqlite.x.tmp",
                                  "profiler_index.sqlite.{tag}.abcd1234.tmp"])
def test_index_files_not_named_by_the_tool_for_an_ended_owner_stay(name, tmp_path):
    path = tmp_path / name.format(tag=_dead_owner_tag())
    path.write_bytes(b"")
    _age(path, OLD_S)
    leftovers.remove_stale(tmp_path)
    assert path.exists()


def test_a_killed_launchers_torchrun_log_folder_is_removed_by_the_next_launch(tmp_path):
    ended = tmp_path / f"{leftovers.TORCHRUN_LOGS}{_dead_owner_tag()}.abcd_123"
    (ended / "run_1" / "attempt_0" / "0").mkdir(parents=True)
    (ended / "run_1" / "attempt_0" / "0" / "error.json").write_text("{}")
    live = tmp_path / f"{leftovers.TORCHRUN_LOGS}{leftovers.owner_tag()}.abcd_123"
    live.mkdir()
    torchelastic = tmp_path / "torchelastic_abcd1234"  # torch's own name: not the tool's
    torchelastic.mkdir()
    for path in (ended, live, torchelastic):
        _age(path, OLD_S)
    leftovers.remove_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, torchelastic.name])


def test_a_stopped_repeats_run_leaves_nothing_in_the_temporary_folder(tmp_path):
    """The running repeat is stopped with SIGTERM first (SIGKILL after a grace): it removes its
    own temporary files, as a run stopped on its own does."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    runs = tmp_path / "runs"
    parent = subprocess.Popen([sys.executable, "-m", "profiler_core", "run", *TINY[:-2],
                               "--progress", "jsonl", "--replays", "100000", "--repeats", "3",
                               "--timeout", "0", "--out", str(runs / "three")], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(temporary)})
    assert parent.stdout is not None
    for line in parent.stdout:
        if "repeat 1 of 3: timed trials" in line:
            break
    parent.send_signal(signal.SIGTERM)
    _, err = parent.communicate(timeout=60)
    assert parent.returncode == 130, err[-2000:]
    # torch's own compile cache (torchinductor_<user>) is kept and reused by every later run
    assert [p for p in os.listdir(temporary) if not p.startswith("torchinductor_")] == []
    assert not runs.exists()
