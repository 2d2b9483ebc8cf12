"""Nothing a user saved is lost: ``run --out`` writes a new folder or, when asked, replaces one of
this tool's own runs, and refuses anything else before the run starts. Also: no scratch folders
left behind, memory refusals on the CPU, one-line messages, and the loader's value checks.
Every destructive case runs against temporary folders only."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import figure_table
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiler_core.cli.main import main
from profiler_core.engine import pipeline, runner
from profiler_core.spec.config import RunConfig
from profiler_core.spec.errors import ConfigError, RunFormatError
from profiler_core.storage.results import RunResult, check_output
from profiler_core.storage.runfolder import is_tool_run

REPO = Path(__file__).resolve().parent.parent
TINY = ["--device", "cpu", "--batch", "8", "--d-in", "16", "--hidden", "32", "--d-out", "4",
        "--replays", "20", "--trials", "4", "--progress", "none"]


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links, fifos and folders included) with its content's hash."""
    seen = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            seen[key] = "link->" + os.readlink(path)
        elif path.is_fifo():
            seen[key] = "fifo"
        elif path.is_dir():
            seen[key] = "dir"
        else:
            seen[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


def a_run(path: Path) -> Path:
    result = runner.run_experiment(RunConfig(batch=8, d_in=16, hidden=32, d_out=4, replays=20,
                                             trials=4, device="cpu"))
    return result.save(path)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    return a_run(tmp_path_factory.mktemp("one") / "run")


def make(kind: str, root: Path, saved_run: Path) -> str:
    """Build one thing a user may have at the output path; returns the --out to pass."""
    import shutil

    if kind == "runs_folder":  # a folder of earlier runs, not a run itself
        for name in ("a", "b"):
            shutil.copytree(saved_run, root / "runs" / name)
        return str(root / "runs")
    if kind == "project":
        (root / "myproject").mkdir()
        (root / "myproject" / "main.py").write_text("print('my work')\n")
        return str(root / "myproject")
    if kind == "file":
        (root / "existing.txt").write_text("keep me\n")
        return str(root / "existing.txt")
    if kind == "fifo":  # a special file, as /dev/null is
        os.mkfifo(root / "pipe")
        return str(root / "pipe")
    if kind == "link_to_run":
        shutil.copytree(saved_run, root / "real")
        (root / "link").symlink_to(root / "real")
        return str(root / "link")
    if kind == "foreign_summary":  # a summary.json of some other program
        (root / "other").mkdir()
        (root / "other" / "summary.json").write_text(json.dumps({"tool": "other", "schema_version": 2}))
        return str(root / "other")
    if kind == "parent_is_a_file":
        (root / "existing.txt").write_text("keep me\n")
        return str(root / "existing.txt" / "run")
    if kind == "name_too_long":
        return str(root / ("x" * 300))
    if kind == "unwritable":
        return "/proc/profiler-core-test/run"
    raise AssertionError(kind)


REFUSED = ["runs_folder", "project", "file", "fifo", "link_to_run", "foreign_summary",
           "parent_is_a_file", "name_too_long", "unwritable"]


@pytest.mark.parametrize("kind", REFUSED)
@pytest.mark.parametrize("overwrite", [False, True])
def test_run_refuses_every_path_that_is_not_a_new_folder_or_its_own_run(
        kind, overwrite, tmp_path, saved_run, capsys):
    out = make(kind, tmp_path, saved_run)
    before = snapshot(tmp_path)
    code = main(["run", "--out", out, *TINY, *(["--overwrite"] if overwrite else [])])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: --out: ") and err.count("\n") == 1  # one line, no traceback
    assert snapshot(tmp_path) == before  # nothing changed, nothing left behind


@pytest.mark.parametrize("out", ["", ".", "..", "  "])
def test_empty_dot_and_dotdot_are_refused_and_leave_nothing(out, tmp_path, monkeypatch, capsys):
    inner = tmp_path / "cwd"
    inner.mkdir()
    monkeypatch.chdir(inner)
    assert main(["run", "--out", out, *TINY]) == 2
    assert "new folder" in capsys.readouterr().err
    assert snapshot(tmp_path) == {"cwd": "dir"}


def test_an_earlier_run_is_replaced_only_with_overwrite(tmp_path, saved_run, capsys):
    import shutil

    target = tmp_path / "runs" / "seed"
    shutil.copytree(saved_run, target)
    (tmp_path / "runs" / "notes.txt").write_text("mine\n")
    before = snapshot(tmp_path)
    assert main(["run", "--out", str(target), *TINY]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(tmp_path) == before
    assert main(["run", "--out", str(target), *TINY, "--overwrite"]) == 0
    assert RunResult.load(target).complete
    assert (tmp_path / "runs" / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["notes.txt", "seed"]


def test_only_real_folders_with_this_tools_summary_are_recognised(tmp_path, saved_run):
    assert is_tool_run(saved_run)
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(saved_run)
    big = tmp_path / "big"
    big.mkdir()
    (big / "summary.json").write_text(" " * (5 * 2**20))
    assert not any(is_tool_run(tmp_path / name) for name in ("empty", "link", "big", "missing"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(REFUSED + ["new", "own_run"]), overwrite=st.booleans(),
       suffix=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/"),
                      max_size=12))
def test_property_check_output_never_changes_what_is_there(kind, overwrite, suffix, saved_run,
                                                           tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    if kind == "new":
        out = str(root / ("new" + suffix))
    elif kind == "own_run":
        import shutil

        shutil.copytree(saved_run, root / "own")
        out = str(root / "own")
    else:
        out = make(kind, root, saved_run) + suffix
    before = snapshot(root)
    try:
        target = check_output(out, overwrite)
    except ConfigError as error:
        assert error.field == "out" and "\n" not in error.message
        assert snapshot(root) == before
        return
    # accepted: a new folder (its parents may be created) or our own run with --overwrite
    assert kind in ("new", "own_run") or not os.path.lexists(out)
    if kind == "own_run":
        assert overwrite and snapshot(root) == before
    assert not target.exists() or is_tool_run(target)


def test_no_scratch_folder_is_left_behind(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)
    for index in range(3):
        assert main(["run", "--out", str(tmp_path / f"run{index}"), *TINY]) == 0
    # a run that made traces: they sit in a private scratch folder until saved, then it goes
    trace = scratch / "trace_eager.json"
    trace.write_text(json.dumps({"traceEvents": []}))
    result = pipeline._detach_traces(RunResult(config=RunConfig(device="cpu"), environment={},
                                             headline={}, trace_paths={"eager": trace, "graph": None}))
    assert result.scratch_dir is not None and result.scratch_dir.name.startswith("profiler_core_traces_")
    saved = result.save(tmp_path / "with-trace")
    result.release_scratch()
    assert (saved / "trace_eager.json").is_file()
    assert list(scratch.iterdir()) == []


def test_a_cpu_run_too_large_for_memory_is_refused_before_allocating(capsys):
    code = main(["run", "--out", "unused", "--device", "cpu", "--batch", "1048576", "--d-in", "2048",
                 "--hidden", "64", "--d-out", "64", "--progress", "none"])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "CPU's memory" in err and "shrink" in err and err.count("\n") == 1
    assert not Path("unused").exists()


def test_a_cpu_out_of_memory_during_the_run_exits_5_and_keeps_the_partial_run(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(runner, "check_fits", lambda config, device: None)

    def exhausted(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 68719476736 bytes.")

    monkeypatch.setattr(pipeline, "_steady_trials", exhausted)
    out = tmp_path / "oom"
    assert main(["run", "--out", str(out), *TINY]) == 5
    err = capsys.readouterr().err
    assert "the CPU (host memory) ran out of memory during timed trials" in err
    assert RunResult.load(out).complete is False


def test_under_an_address_space_limit_the_estimate_refuses(tmp_path):
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30));"
              "from profiler_core.cli.main import main; sys.exit(main(sys.argv[1:]))")
    completed = subprocess.run(
        [sys.executable, "-c", script, "run", "--out", str(tmp_path / "r"), "--device", "cpu",
         "--batch", "65536", "--d-in", "2048", "--hidden", "2048", "--d-out", "2048",
         "--progress", "none"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert completed.returncode == 5, completed.stderr
    assert "CPU's memory" in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.parametrize("argv", [
    ["run", "--out", "x", "--batch", "1\n2"],
    ["run", "--out", "x", "--dtype", "fp\n32"],
    ["run", "--out", "\n", "--device", "cpu"],
    ["run", "--out", "a\u2028b/.", "--device", "cpu"],
    ["run", "--out", "x", "--nonsense\nflag"],
    ["trace-stats", "no\nsuch\nfile.json"],
    ["bench", "--configs", "seed\nfp32"],
])
def test_echoed_line_breaks_never_split_the_message(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")


def test_bench_checks_its_input_before_looking_for_a_gpu(capsys):
    assert main(["bench", "--rounds", "-5"]) == 2
    assert "rounds must be a whole number" in capsys.readouterr().err
    assert main(["bench", "--vary", "seq_len=4,8"]) == 2  # the shapes come from your batch function
    assert "bench --vary takes your own step" in capsys.readouterr().err
    assert main(["bench", "--workload", "tests.own_steps:shaped", "--vary", "seq_len=gamma:1"]) == 2
    assert "unknown distribution" in capsys.readouterr().err


# ----------------------------------------------------------------------------- loader values


def _damage(saved_run: Path, tmp_path: Path, table: str, column: str, value) -> Path:
    import shutil

    run = tmp_path / "damaged"
    shutil.copytree(saved_run, run)
    frame = pd.read_csv(run / f"{table}.csv", dtype=str)
    if value in ("True", "false"):  # a whole column of booleans reads as 1/0 unless refused
        frame[column] = value
    else:
        frame.loc[0, column] = value
    frame.to_csv(run / f"{table}.csv", index=False)
    return run


@pytest.mark.parametrize("table, column, value, message", [
    ("latency", "wall_ms", "inf", "infinite"),
    ("latency", "wall_ms", "-inf", "infinite"),
    ("latency", "wall_ms", "-1.5", "negative"),
    ("latency", "wall_ms", "1e308", "beyond"),
    ("latency", "wall_ms", "True", "true/false"),
    ("latency", "wall_ms", "fast", "non-numeric"),
    ("latency", "trial", "inf", "non-numeric"),
    ("latency", "iteration", "9" * 40, "non-numeric"),
    ("latency", "steps", "0", "at least 1"),
    ("latency", "method", "warm", "must be one of"),
    ("latency", "mode", "![x](http://attacker.invalid/p.png)", "not a mode"),
    ("latency", "mode", "", "empty"),
    ("stats", "median_ms", "nan", "no median"),
    ("stats", "median_ms", "1e308", "beyond"),
    ("stats", "count", "false", "true/false"),
])
def test_values_no_measurement_can_hold_are_refused(table, column, value, message, saved_run,
                                                   tmp_path):
    run = _damage(saved_run, tmp_path, table, column, value)
    with pytest.raises(RunFormatError) as raised:
        RunResult.load(run)
    assert message in raised.value.message and raised.value.hint


def test_a_missing_time_is_not_measured_and_still_loads(saved_run, tmp_path):
    run = _damage(saved_run, tmp_path, "latency", "gpu_ms", "")  # a CPU run has no GPU time
    assert math.isnan(RunResult.load(run).table("latency")["gpu_ms"].iloc[0])


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "ProfilerStep#0", "cat": "user_annotation", "ts": 0, "dur": 50,
         "pid": 1, "tid": 1}]}))
    return path


@pytest.mark.parametrize("existing", ["user_file", "link", "folder"])
def test_trace_stats_never_replaces_files_that_are_not_its_tables(existing, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    if existing == "user_file":
        (out / "kernels.csv").write_text("my,own,data\n1,2,3\n")
    elif existing == "link":
        (tmp_path / "precious.csv").write_text("keep\n")
        (out / "kernels.csv").symlink_to(tmp_path / "precious.csv")
    else:
        (out / "launch_split.csv").mkdir()
    trace = _trace(tmp_path)
    before = snapshot(tmp_path)
    for extra in ([], ["--overwrite"]):
        assert main(["trace-stats", str(trace), "--out", str(out), *extra]) == 2
        assert "not a table written by this tool" in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_trace_stats_replaces_its_own_tables_only_when_asked(tmp_path, capsys):
    trace, out = _trace(tmp_path), tmp_path / "out"
    assert main(["trace-stats", str(trace), "--out", str(out)]) == 0
    first = snapshot(out)
    assert main(["trace-stats", str(trace), "--out", str(out)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["trace-stats", str(trace), "--out", str(out), "--overwrite"]) == 0
    assert sorted(snapshot(out)) == sorted(first)


# ----------------------------------------------------------------------------- issue 18: --overwrite
# A folder counts as the tool's own only when everything in it was written by the tool (its
# manifest says so; an older run without one: known run file names only); --overwrite removes
# exactly those files, and anything else is refused with exit 2 and left as it was.


def _quick_run(tmp_path: Path, name: str = "quick") -> RunResult:
    """A small run in memory (no measuring), with a trace."""
    trace = tmp_path / f"{name}-scratch" / "trace_eager.json"
    trace.parent.mkdir()
    trace.write_text(json.dumps({"traceEvents": []}))
    return RunResult(config=RunConfig(device="cpu"), environment={}, headline={},
                     tables={"metrics": figure_table({"graph": {"speedup": 2.0}})},
                     trace_paths={"eager": trace, "graph": None})


def _refused_by_cli(argv: list[str], root: Path, capsys, *words: str) -> str:
    before = snapshot(root)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, err
    assert snapshot(root) == before  # nothing deleted, changed or left behind
    return err


def test_a_folder_of_runs_with_a_copied_summary_is_not_a_run(tmp_path, saved_run, capsys):
    import shutil

    runs = tmp_path / "runs"
    for name in ("a", "b"):
        shutil.copytree(saved_run, runs / name)
    shutil.copy(saved_run / "summary.json", runs / "summary.json")
    (runs / "README.txt").write_text("x\n")
    assert is_tool_run(runs)  # recognised by its summary, but not owned
    _refused_by_cli(["run", "--out", str(runs), *TINY, "--overwrite"], tmp_path, capsys,
                    "'README.txt' is not a file this tool wrote")


@pytest.mark.parametrize("version", [3, True])
def test_a_bare_summary_beside_a_users_file_is_refused(version, tmp_path, capsys):
    folder = tmp_path / "F"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"tool": "profiler_core",
                                                     "schema_version": version}))
    (folder / "thesis.tex").write_text("\\documentclass{article}\n")
    words = ("'thesis.tex'",) if version is not True else ("is not a run folder of this tool",)
    _refused_by_cli(["run", "--out", str(folder), *TINY, "--overwrite"], tmp_path, capsys, *words)
    assert not is_tool_run(folder) if version is True else is_tool_run(folder)


def test_a_sweep_json_beside_a_run_and_a_users_file_is_refused(tmp_path, saved_run, capsys):
    import shutil

    folder = tmp_path / "F"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "data" / "sweep_batch_dtype" / "sweep.json", folder / "sweep.json")
    shutil.copytree(saved_run, folder / "a-run")
    (folder / "thesis.tex").write_text("\\documentclass{article}\n")
    argv = ["sweep", "--out", str(folder), "--device", "cpu", "--d-in", "16", "--hidden", "16",
            "--d-out", "8", "--param", "batch=8,16", "--progress", "none", "--overwrite"]
    _refused_by_cli(argv, tmp_path, capsys, "holds a sweep of this tool", "'a-run'")
    (folder / "a-run").rename(tmp_path / "moved-run")  # the point folders are fine; the file not
    _refused_by_cli(argv, tmp_path, capsys, "'thesis.tex'")
    info = json.loads((folder / "sweep.json").read_text())
    (folder / "thesis.tex").unlink()
    (folder / "sweep.json").write_text(json.dumps({**info, "schema_version": True}))
    _refused_by_cli(argv, tmp_path, capsys, "not a sweep folder of this tool")


def test_trace_stats_never_writes_through_a_hard_link(tmp_path, capsys):
    trace, out = _trace(tmp_path), tmp_path / "out"
    assert main(["trace-stats", str(trace), "--out", str(out)]) == 0
    outside = tmp_path / "outside.csv"
    os.link(out / "launch_split.csv", outside)  # the same file under another name
    kept = outside.read_bytes() + b"0,1,2,3,4,5,6,7,8,9,10\n"  # different from what is written
    outside.write_bytes(kept)
    assert main(["trace-stats", str(trace), "--out", str(out), "--overwrite"]) == 0
    assert outside.read_bytes() == kept  # the link elsewhere keeps its content
    assert os.stat(out / "launch_split.csv").st_nlink == 1
    assert sorted(p.name for p in out.iterdir()) == ["kernels.csv", "launch_split.csv"]


def test_trace_stats_refuses_a_folder_holding_anything_else(tmp_path, capsys):
    trace, out = _trace(tmp_path), tmp_path / "out"
    assert main(["trace-stats", str(trace), "--out", str(out)]) == 0
    (out / "notes.txt").write_text("mine\n")
    for extra in ([], ["--overwrite"]):
        _refused_by_cli(["trace-stats", str(trace), "--out", str(out), *extra], tmp_path, capsys,
                        "'notes.txt', which trace-stats did not write")


def test_a_saved_run_lists_every_file_it_wrote_in_its_manifest(tmp_path):
    saved = _quick_run(tmp_path).save(tmp_path / "run")
    manifest = json.loads((saved / "manifest.json").read_text())
    assert manifest["tool"] == "profiler_core" and manifest["kind"] == "run"
    on_disk = {p.name: p.stat().st_size for p in saved.iterdir() if p.name != "manifest.json"}
    assert manifest["files"] == on_disk and "trace_eager.json" in on_disk
    assert RunResult.load(saved).trace_paths["eager"] == saved / "trace_eager.json"


def _what_is_there(kind: str, run: Path) -> str:
    """Change a saved run as a user might; returns a word the refusal must hold ('' accepted)."""
    if kind == "extra_file":
        (run / "notes.txt").write_text("mine\n")
        return "'notes.txt' is not a file this tool wrote"
    if kind == "file_named_like_ours":  # a name this tool writes, but not written this time
        (run / "trace_graph.json").write_text("{}")
        return "'trace_graph.json' is not a file this tool wrote"
    if kind == "edited":
        with open(run / "latency.csv", "a") as handle:
            handle.write("# my comment\n")
        return "'latency.csv' was changed after this tool wrote it"
    if kind == "subfolder":
        (run / "plots").mkdir()
        return "'plots' is a folder this tool did not write"
    if kind == "link":
        (run / "trace_graph.json").symlink_to(run / "summary.json")
        return "'trace_graph.json' is a link"
    if kind == "fifo":
        os.mkfifo(run / "kernels.csv.fifo")
        return "not a regular file"
    if kind == "foreign_manifest":
        (run / "manifest.json").write_text(json.dumps({"tool": "other", "files": {}}))
        return "'manifest.json' is not a manifest of a run"
    if kind == "boolean_manifest":
        manifest = json.loads((run / "manifest.json").read_text())
        (run / "manifest.json").write_text(json.dumps({**manifest, "manifest_version": True}))
        return "'manifest.json' is not a manifest of a run"
    if kind == "older_run":  # saved before manifests: the names alone decide
        (run / "manifest.json").unlink()
        (run / "trace_eager.json").rename(run / "trace_eager.json.gz")
        return ""
    if kind == "older_run_with_extra":
        (run / "manifest.json").unlink()
        (run / "thesis.tex").write_text("mine\n")
        return "'thesis.tex' is not a file this tool wrote"
    if kind == "untouched":
        return ""
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["extra_file", "file_named_like_ours", "edited", "subfolder",
                                  "link", "fifo", "foreign_manifest", "boolean_manifest",
                                  "older_run", "older_run_with_extra", "untouched"])
def test_overwrite_replaces_only_a_folder_holding_nothing_but_its_own_run(kind, tmp_path):
    run = _quick_run(tmp_path).save(tmp_path / "runs" / "seed")
    words = _what_is_there(kind, run)
    second = _quick_run(tmp_path, "second")
    second.notes = ["second"]
    before = snapshot(tmp_path)
    if words:
        for attempt in (lambda: check_output(run, overwrite=True),
                        lambda: second.save(run, overwrite=True)):
            with pytest.raises(ConfigError) as refused:
                attempt()
            assert words in refused.value.message and "move what you keep" in refused.value.hint
            assert snapshot(tmp_path) == before
        return
    second.save(run, overwrite=True)
    assert RunResult.load(run).notes == ["second"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["seed"]  # nothing left aside


def test_replacing_removes_only_the_files_it_checked(tmp_path):
    from profiler_core.storage.outputs import NotOwned, Owned, remove_owned, replace_folder

    folder = tmp_path / "f"
    folder.mkdir()
    for name in ("ours", "theirs"):
        (folder / name).write_text(name)
    assert remove_owned(Owned(folder, ("ours",))) is False  # the folder stays: not empty
    assert sorted(p.name for p in folder.iterdir()) == ["theirs"]

    def refuse(path):
        (path / "theirs").read_text()  # checked where it was moved
        raise NotOwned("theirs", "is not a file this tool wrote")

    before = snapshot(tmp_path)
    with pytest.raises(NotOwned):
        replace_folder(folder, refuse)
    assert snapshot(tmp_path) == before  # moved back untouched, nothing left aside


def test_a_full_disk_keeps_the_run_elsewhere_and_says_where(tmp_path, monkeypatch):
    import errno

    from profiler_core.spec.errors import SaveError

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    real = RunResult._write_into
    full = tmp_path / "full"

    def writer(self, directory):
        if full in Path(directory).parents:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, directory)

    monkeypatch.setattr(RunResult, "_write_into", writer)
    with pytest.raises(SaveError) as raised:
        _quick_run(tmp_path).save(full / "a" / "run")
    message = raised.value.message
    kept = next(scratch.iterdir())
    assert kept.name.startswith("profiler_core_unsaved_") and str(kept) in message
    assert "No space left on device" in message and raised.value.exit_code == 7
    assert RunResult.load(kept).pair.speedup == 2.0
    assert (kept / "trace_eager.json").is_file() and (kept / "manifest.json").is_file()
    assert not full.exists()  # no staging folder, no empty parents

    def nowhere(self, directory):
        (Path(directory) / "summary.json").write_text("{")  # partly written, then full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(RunResult, "_write_into", nowhere)
    with pytest.raises(SaveError) as raised:
        _quick_run(tmp_path, "again").save(full / "run")
    assert "measurements are lost" in raised.value.message and "disk space" in raised.value.hint
    assert sorted(p.name for p in scratch.iterdir()) == [kept.name] and not full.exists()


def test_the_run_command_exits_7_naming_where_the_run_was_kept(tmp_path, monkeypatch, capsys):
    import errno

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    real = RunResult._write_into

    def writer(self, directory):
        if scratch not in Path(directory).parents:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, directory)

    monkeypatch.setattr(RunResult, "_write_into", writer)
    assert main(["run", "--out", str(tmp_path / "runs" / "r"), *TINY]) == 7
    err = capsys.readouterr().err
    kept = next(p for p in scratch.iterdir() if p.name.startswith("profiler_core_unsaved_"))
    assert err.count("\n") == 1 and f"saved in {str(kept)!r} instead" in err
    assert RunResult.load(kept).complete and not (tmp_path / "runs").exists()


def test_a_quoted_tilde_is_the_home_folder_and_no_literal_tilde_folder_is_made(
        tmp_path, monkeypatch):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    assert check_output("~/runs/x") == home / "runs" / "x"
    assert snapshot(tmp_path) == {"cwd": "dir", "home": "dir"}  # the check made nothing
    saved = _quick_run(tmp_path).save("~/runs/x")
    assert saved == home / "runs" / "x" and RunResult.load(saved).pair.speedup == 2.0
    assert list(cwd.iterdir()) == []


def test_dot_dot_in_out_leaves_no_folder_behind(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _quick_run(tmp_path).save("sub/../x") == Path("x")
    assert (tmp_path / "x" / "summary.json").is_file() and not (tmp_path / "sub").exists()
    (tmp_path / "a-file").write_text("keep\n")
    _refused_by_cli(["run", "--out", "deep/er/../../a-file", *TINY], tmp_path, capsys,
                    "not a run folder of this tool")
    check_output(tmp_path / "new" / "parents" / "run")  # accepted, and nothing made by the check
    assert not (tmp_path / "new").exists()


def test_a_stopped_run_that_cannot_be_saved_says_where_it_was_kept(tmp_path, monkeypatch, capsys):
    import errno

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr(runner, "check_fits", lambda config, device: None)

    def exhausted(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                           "68719476736 bytes.")

    monkeypatch.setattr(pipeline, "_steady_trials", exhausted)
    real = RunResult._write_into

    def writer(self, directory):
        if scratch not in Path(directory).parents:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, directory)

    monkeypatch.setattr(RunResult, "_write_into", writer)
    assert main(["run", "--out", str(tmp_path / "oom"), *TINY]) == 5  # the run's own error
    err = capsys.readouterr().err
    kept = next(scratch.glob("profiler_core_unsaved_*"))
    assert "The incomplete run (marked incomplete): the run could not be saved in" in err
    assert str(kept) in err and RunResult.load(kept).complete is False


# ----------------------------------------------------------------------------- found by tests/fuzz/campaign.py


def test_a_lone_surrogate_in_out_is_refused_in_one_line(capsys):
    """A serve request's JSON can carry "\\ud800", which no file name can hold."""
    assert main(["run", "--out", "runs/\ud800", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out: ") and err.count("\n") == 1 and "ordinary text" in err


def test_a_float_setting_of_400_digits_in_a_saved_config_is_refused(saved_run, tmp_path):
    import shutil

    run = tmp_path / "big"
    shutil.copytree(saved_run, run)
    summary = json.loads((run / "summary.json").read_text())
    summary["config"]["dropout1"] = -10**400
    (run / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RunFormatError, match="dropout1 must be a number from 0 to 0.99; got -10,000,000"):
        RunResult.load(run)


def test_a_metrics_value_column_of_booleans_is_refused(saved_run, tmp_path):
    run = _damage(saved_run, tmp_path, "metrics", "value", "True")
    with pytest.raises(RunFormatError, match="column value holds true/false"):
        RunResult.load(run)
