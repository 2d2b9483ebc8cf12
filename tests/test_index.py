"""The run index (``profiler_core.storage.index``): built from the run folders, recorded on save, queried
by any setting, GPU and date; rebuilt when missing, damaged, truncated, of another version or out
of date; a file at its path that is not ours left alone; read-only and locked folders served from
memory; concurrent writers; sweeps. Then the ``index`` command and the Runs page (AppTest)
filtering and overlaying three runs made from the bundled sample run."""

from __future__ import annotations

import base64
import datetime
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import write_synthetic_run
from streamlit.testing.v1 import AppTest

from profiler_core.cli.main import main
from profiler_core.spec.errors import ConfigError
from profiler_core.storage import index, index_query
from profiler_core.storage.results import RunResult

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "tests" / "data" / "h200_schema2_sample"  # two modes, its figures in its headline
APP = REPO / "dashboard" / "app.py"


@pytest.fixture
def runs(tmp_path) -> Path:
    """A runs folder with three synthetic runs: replays 100/200/300, started on three days."""
    folder = tmp_path / "runs"
    for i, day in enumerate(("2026-11-28", "2026-11-29", "2026-11-30")):
        write_synthetic_run(folder / f"run-{i}", seed=i, per_mode=100 * (i + 1),
                            started_at=f"{day}T10:00:00")
    return folder


def _names(rows) -> list[str]:
    return sorted(row["folder"] for row in rows)


def _stored_paths(folder: Path) -> set[str]:
    """The runs the index file itself holds (read directly, without bringing it up to date)."""
    with sqlite3.connect(folder / index.INDEX_FILE) as connection:
        return {path for (path,) in connection.execute("SELECT path FROM runs")}


# ----------------------------------------------------------------------------- build and record


def test_any_modes_figure_from_metrics_csv_can_be_filtered_on(runs):
    (runs / "run-1" / "metrics.csv").write_text(
        "mode,metric,value,eager_value,ratio_to_eager\n"
        "eager,median_ms,2.0,2.0,1.0\n"
        "compile_ro,speedup,3.5,1.0,3.5\n"
        "compile_ro,span_us,not a number,900,\n")
    (runs / "run-2" / "metrics.csv").write_bytes(b"\xff\xfe damaged")
    with index.open_index(runs) as ix:
        assert _names(ix.runs([index_query.parse_where("compile_ro_speedup=3..")])) == ["run-1"]
        assert "compile_ro_span_us" not in json.loads(ix.runs()[1]["headline_json"])
        assert "compile_ro_speedup" in ix.fields()
        assert len(ix.runs()) == 3  # a damaged metrics.csv costs its figures, not the run


def test_the_index_is_built_from_the_folders_and_recognisably_ours(runs):
    with index.open_index(runs) as ix:
        assert ix.persistent and ix.note == ""
        rows = ix.runs()
    assert [row["folder"] for row in rows] == ["run-2", "run-1", "run-0"]  # newest summary first
    assert index.inspect_file(runs / index.INDEX_FILE) == "ours"
    first = rows[-1]
    summary = json.loads((runs / "run-0" / "summary.json").read_text())
    assert first["speedup"] == pytest.approx(summary["headline"]["speedup"])
    assert first["eager_median_ms"] == pytest.approx(summary["headline"]["eager_median_ms"])
    assert first["speedup_ci_low"] == pytest.approx(summary["headline"]["speedup_ci_low"])
    assert first["gpu"] == "Synthetic GPU (test fixture)" and first["torch_version"]
    assert first["replays"] == 100 and first["dtype"] == "fp32" and first["modes"] == "eager,graph"
    assert first["path"] == str(runs / "run-0") and "latency.csv" in first["tables"]
    assert first["started_at"] == "2026-11-28T10:00:00" and first["complete"] is True
    with sqlite3.connect(runs / index.INDEX_FILE) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == index.INDEX_SCHEMA_VERSION
        keys = {k for (k,) in connection.execute("SELECT key FROM run_headline WHERE path='run-0'")}
    assert {"speedup", "cold_speedup", "capture_ms"} <= keys  # every numeric headline key
    assert sorted(p.name for p in runs.iterdir()) == [index.INDEX_FILE, "run-0", "run-1", "run-2"]


def test_a_save_records_the_run_in_an_existing_index_and_never_creates_one(runs, tmp_path):
    index.open_index(runs).close()
    write_synthetic_run(runs / "run-new", seed=9)
    assert "run-new" in _stored_paths(runs)  # recorded by RunResult.save, before any listing
    elsewhere = tmp_path / "not-a-runs-folder"
    write_synthetic_run(elsewhere / "one-run")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["one-run"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with index.open_index(empty) as ix:  # nothing to index: no file written
        assert ix.runs() == [] and not ix.persistent and ix.note == ""
    assert list(empty.iterdir()) == []


def test_a_busy_index_never_fails_a_save(runs, monkeypatch):
    index.open_index(runs).close()
    monkeypatch.setattr(index, "RECORD_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(runs / index.INDEX_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        saved = RunResult.load(runs / "run-0").save(runs / "copy")  # records nothing: busy
        assert index.record_run(saved).startswith("the run was saved but not recorded")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (saved / "summary.json").is_file() and "copy" not in _stored_paths(runs)
    with index.open_index(runs) as ix:  # the next listing catches up from the folder
        assert "copy" in _names(ix.runs())
    assert "copy" in _stored_paths(runs)


# ----------------------------------------------------------------------------- queries


def test_filters_by_any_setting_range_several_values_figure_gpu_and_date(runs):
    write_synthetic_run(runs / "other", seed=5, started_at="2026-12-01T09:00:00")
    summary = json.loads((runs / "other" / "summary.json").read_text())
    summary["config"].update(dtype="bf16", profile=False)
    summary["environment"]["gpu_name"] = "NVIDIA H200"
    (runs / "other" / "summary.json").write_text(json.dumps(summary))
    where = index_query.parse_where
    with index.open_index(runs) as ix:
        assert _names(ix.runs([where("dtype=bf16")])) == ["other"]
        assert _names(ix.runs([where("replays=100,300")])) == ["run-0", "run-2"]
        assert _names(ix.runs([where("replays=150..")])) == ["other", "run-1", "run-2"]
        assert _names(ix.runs([where("replays=..200"), where("dtype=fp32")])) == ["run-0", "run-1"]
        assert _names(ix.runs([index_query.FieldFilter("replays", low=100, high=100)])) == ["run-0"]
        assert _names(ix.runs([where("profile=false")])) == ["other"]
        assert _names(ix.runs([index_query.FieldFilter("profile", values=(True,))])) == [
            "run-0", "run-1", "run-2"]
        assert _names(ix.runs([where("trials=10")])) == ["other", "run-0", "run-1", "run-2"]
        assert _names(ix.runs([where("gpu=NVIDIA H200")])) == ["other"]
        assert _names(ix.runs([where("date=2026-11-29..2026-11-30")])) == ["run-1", "run-2"]
        assert _names(ix.runs([index_query.FieldFilter("date", low=datetime.date(2026, 12, 1))])) == [
            "other"]
        speedups = sorted(row["speedup"] for row in ix.runs())
        cut = (speedups[1] + speedups[2]) / 2
        assert len(ix.runs([where(f"speedup={cut}..")])) == 2  # any numeric headline key
        assert ix.field_values("replays") == [100, 200, 300]
        assert ix.field_values("gpu") == ["NVIDIA H200", "Synthetic GPU (test fixture)"]
        assert ix.field_values("date") == ["2026-11-28", "2026-11-29", "2026-11-30", "2026-12-01"]
        with pytest.raises(ConfigError, match="no field 'colour'"):
            ix.runs([where("colour=red")])
        with pytest.raises(ConfigError, match="not a number"):
            ix.runs([where("replays=a..b")])
        with pytest.raises(ConfigError, match="not a date"):
            ix.runs([where("date=yesterday")])
    with pytest.raises(ConfigError, match="expected FIELD=VALUE"):
        where("batch")


# ----------------------------------------------------------------------------- rebuilding


def _damage_body(path: Path) -> None:
    """Overwrite everything after the 100-byte SQLite header with garbage (still ours by the
    header: our application id)."""
    data = bytearray(path.read_bytes())
    data[100:] = b"\xa5" * (len(data) - 100)
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: max(100, len(data) // 3)])


def _other_version(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA user_version = 99")


def _delete(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [_delete, _damage_body, _truncate, _other_version])
def test_a_missing_damaged_truncated_or_other_version_index_is_rebuilt(runs, damage):
    index.open_index(runs).close()
    damage(runs / index.INDEX_FILE)
    with index.open_index(runs) as ix:
        assert ix.persistent and ix.note == ""
        assert _names(ix.runs()) == ["run-0", "run-1", "run-2"]
    with sqlite3.connect(runs / index.INDEX_FILE) as connection:
        assert connection.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert connection.execute("PRAGMA user_version").fetchone()[0] == index.INDEX_SCHEMA_VERSION
    leftovers = [p.name for p in runs.iterdir() if p.name.startswith(index.INDEX_FILE + ".")]
    assert leftovers == []  # no temporary file left behind


def test_an_out_of_date_index_follows_folders_added_removed_and_changed(runs):
    index.open_index(runs).close()
    write_synthetic_run(runs.parent / "elsewhere" / "added", seed=7)  # saved outside, then moved in
    shutil.move(runs.parent / "elsewhere" / "added", runs / "added")
    shutil.rmtree(runs / "run-0")
    summary_file = runs / "run-1" / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary["config"]["dtype"] = "bf16"
    summary_file.write_text(json.dumps(summary))
    assert _stored_paths(runs) == {"run-0", "run-1", "run-2"}  # stale until it is opened
    with index.open_index(runs) as ix:
        assert _names(ix.runs()) == ["added", "run-1", "run-2"]
        assert _names(ix.runs([index_query.parse_where("dtype=bf16")])) == ["run-1"]
    assert _stored_paths(runs) == {"added", "run-1", "run-2"}


def test_an_unreadable_run_is_indexed_with_its_problem(runs):
    (runs / "run-1" / "summary.json").write_text("{not json")
    with index.open_index(runs) as ix:
        rows = {row["folder"]: row for row in ix.runs()}
        assert "JSONDecodeError" in rows["run-1"]["problem"] and not rows["run-1"]["complete"]
        assert _names(ix.runs([index_query.parse_where("replays=200")])) == []  # no settings to match


@pytest.mark.parametrize("foreign", ["text", "sqlite", "link", "folder"])
def test_a_file_at_the_index_path_that_is_not_ours_is_left_alone(runs, tmp_path, foreign):
    path = runs / index.INDEX_FILE
    target = tmp_path / "users-notes.txt"
    target.write_text("my own notes")
    if foreign == "text":
        path.write_bytes(b"not a database, my file")
    elif foreign == "sqlite":  # a SQLite database of someone else's (no application id of ours)
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE mine (x)")
    elif foreign == "link":
        path.symlink_to(target)
    else:
        path.mkdir()
        (path / "inside").write_text("kept")
    before = (path.lstat().st_mtime_ns, path.read_bytes() if path.is_file() else None)
    with index.open_index(runs, rebuild=True) as ix:
        assert not ix.persistent
        assert "is not this tool's run index, so it was left as it is" in ix.note
        assert _names(ix.runs()) == ["run-0", "run-1", "run-2"]  # served from memory
    assert (path.lstat().st_mtime_ns, path.read_bytes() if path.is_file() else None) == before
    assert target.read_text() == "my own notes"
    assert index.record_run(runs / "run-0") == ""  # a save leaves it alone too
    assert (path.lstat().st_mtime_ns, path.read_bytes() if path.is_file() else None) == before


def test_a_read_only_runs_folder_is_indexed_in_memory(runs, monkeypatch):
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(index.tempfile, "mkstemp", refuse)  # what a read-only folder does
    with index.open_index(runs) as ix:
        assert not ix.persistent and "could not be written" in ix.note
        assert "Permission denied" in ix.note
        assert _names(ix.runs()) == ["run-0", "run-1", "run-2"]
    assert not os.path.lexists(runs / index.INDEX_FILE)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_really_read_only_runs_folder_is_indexed_in_memory(runs):
    runs.chmod(0o555)
    try:
        with index.open_index(runs) as ix:
            assert not ix.persistent and _names(ix.runs()) == ["run-0", "run-1", "run-2"]
    finally:
        runs.chmod(0o755)


def test_a_locked_index_is_read_from_the_folders_for_that_call(runs, monkeypatch):
    index.open_index(runs).close()
    monkeypatch.setattr(index, "BUSY_TIMEOUT_S", 0.05)
    holder = sqlite3.connect(runs / index.INDEX_FILE, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with index.open_index(runs) as ix:
            assert not ix.persistent and "busy" in ix.note
            assert _names(ix.runs()) == ["run-0", "run-1", "run-2"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert index.inspect_file(runs / index.INDEX_FILE) == "ours"


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from profiler_core.storage import index
    folder, me = Path(sys.argv[1]), int(sys.argv[2])
    for turn in range(15):
        with index.open_index(folder, rebuild=(turn + me) % 3 == 0) as ix:
            assert len(ix.runs()) >= 3, ix.note
        index.record_run(folder / f"run-{turn % 3}")  # '' or a note when busy: never raises
    print("done")
""")


def test_a_read_after_another_process_renamed_a_rebuilt_index_over_ours_reopens_it(runs):
    """CI saw it once: a connection whose file another process's rebuild replaced reads a
    journal that is not its own and reports a disk I/O error. The read is tried once more on the
    file now at the path."""
    class Replaced:
        def execute(self, *args):
            raise sqlite3.OperationalError("disk I/O error")

        def close(self):
            pass

    with index.open_index(runs) as ix:
        index.open_index(runs, rebuild=True).close()
        ix.connection = Replaced()
        assert _names(ix.runs()) == ["run-0", "run-1", "run-2"]
        assert ix.sweeps() == []


def test_two_writers_at_once_leave_a_whole_index(runs):
    """Processes rebuilding, syncing and recording at the same time: each gets every run each
    time, and what is left is a whole index of ours listing every run."""
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(runs), str(me)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for me in range(3)]
    for writer in writers:
        out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0 and out.strip() == "done", err
    assert index.inspect_file(runs / index.INDEX_FILE) == "ours"
    with sqlite3.connect(runs / index.INDEX_FILE) as connection:
        assert connection.execute("PRAGMA quick_check").fetchone() == ("ok",)
    with index.open_index(runs) as ix:
        assert ix.persistent and _names(ix.runs()) == ["run-0", "run-1", "run-2"]
    assert [p.name for p in runs.iterdir() if p.name.startswith(index.INDEX_FILE + ".")] == []


# ----------------------------------------------------------------------------- sweeps


def _sweep(runs: Path) -> Path:
    sweep = runs / "batch-sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({
        "tool": "profiler_core", "kind": "sweep", "schema_version": 1, "status": "stopped",
        "plan": {"parameters": {"replays": [100, 200, 300]}}}))
    (sweep / "points.csv").write_text("index,replays,status,run,speedup\n0,100,done,point-000,4.8\n"
                                      "1,200,done,point-001,4.7\n2,300,planned,,\n")
    write_synthetic_run(sweep / "point-000", per_mode=100)
    write_synthetic_run(sweep / "point-001", per_mode=200)
    return sweep


def test_a_sweep_folder_is_indexed_with_its_points(runs):
    from dashboard import rundata

    _sweep(runs)
    with index.open_index(runs) as ix:
        (sweep,) = ix.sweeps()
        assert (sweep["name"], sweep["status"], sweep["points"], sweep["measured"]) == (
            "batch-sweep", "stopped", 3, 2)
        assert sweep["plan"] == {"parameters": {"replays": [100, 200, 300]}}
        points = ix.sweep_points("batch-sweep")
        assert [(p["index"], p["status"], p["run"]) for p in points] == [
            (0, "done", "point-000"), (1, "done", "point-001"), (2, "planned", None)]
        assert points[0]["row"]["speedup"] == "4.8"
        assert _names(ix.runs([index_query.parse_where("sweep=batch-sweep")])) == [
            "batch-sweep/point-000", "batch-sweep/point-001"]
        assert "batch-sweep/point-000" not in _names(ix.runs(sweep_points=False))
    assert list(rundata.list_runs(runs)["name"]) == ["run-2", "run-1", "run-0"]  # as before
    write_synthetic_run(runs / "batch-sweep" / "point-002", per_mode=300)  # a point being saved
    assert "batch-sweep/point-002" in _stored_paths(runs)  # in the runs folder's index
    assert not (runs / "batch-sweep" / index.INDEX_FILE).exists()
    (runs / "batch-sweep" / "points.csv").write_text("index,replays,status,run\n")
    with index.open_index(runs) as ix:
        assert ix.sweeps()[0]["points"] == 0  # points.csv changed: read again


# ----------------------------------------------------------------------------- the command


def test_the_index_command_lists_and_filters_runs(runs, capsys):
    assert main(["index", "--runs", str(runs), "--where", "replays=200..", "--where",
                 "date=2026-11-30"]) == 0
    out = capsys.readouterr().out
    assert "1 of 3 run(s) match" in out and "run-2" in out and "run-1" not in out
    header = next(line for line in out.splitlines() if line.startswith("name"))
    assert header.split()[:3] == ["name", "started", "gpu"] and "replays" in header
    assert f"Index: {runs / index.INDEX_FILE}" in out
    assert main(["index", "--runs", str(runs), "--rebuild"]) == 0
    assert "3 of 3 run(s) match" in capsys.readouterr().out
    assert main(["index", "--runs", str(runs), "--where", "colour=red"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --where: there is no field 'colour'") and err.count("\n") == 1
    assert main(["index", "--runs", str(runs / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_figure_no_run_has_matches_no_run_and_a_typo_is_refused_with_the_closest_names(
        tmp_path, runs, capsys):
    """Issue 20: the README's ``--where speedup=2..`` on a folder of CPU runs (no graph, so no
    speedup) lists no run; it is not an error. A name that is no field at all is still refused,
    naming the closest fields."""
    cpu_runs = tmp_path / "cpu-runs"
    assert main(["run", "--out", str(cpu_runs / "cpu-try"), "--device", "cpu", "--progress",
                 "none", "--batch", "8", "--d-in", "16", "--hidden", "16", "--d-out", "4",
                 "--replays", "8", "--trials", "2"]) == 0
    capsys.readouterr()
    assert main(["index", "--runs", str(cpu_runs), "--where", "speedup=2..", "--rebuild"]) == 0
    out = capsys.readouterr().out
    assert "0 of 1 run(s) match" in out
    assert "No run here has the figure 'speedup', so a filter on it matches no run (a CPU run " \
           "times the eager step only" in out
    assert main(["index", "--runs", str(cpu_runs), "--where", "eager_median_ms=0.."]) == 0
    assert "1 of 1 run(s) match" in capsys.readouterr().out
    assert main(["index", "--runs", str(cpu_runs), "--where", "speedpu=2.."]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --where: there is no field 'speedpu' to filter on (did you "
                          "mean speedup") and err.count("\n") == 1
    with index.open_index(runs) as ix:  # CUDA runs: a mode none of them timed is no error either
        assert ix.runs([index_query.parse_where("compile_median_ms=1..")]) == []
        assert ix.runs([index_query.parse_where("replays_between_low_ms=..5")]) == []
        assert index_query.is_figure("predicted_speedup") and not index_query.is_figure("colour")


# ----------------------------------------------------------------------------- the Runs page


def _sample_copy(folder: Path, name: str, *, batch: int, dtype: str, gpu: str, day: str,
                 speedup: float) -> Path:
    """The bundled sample run with its summary edited: batch, dtype, GPU, start day, speedup."""
    path = folder / name
    shutil.copytree(SAMPLE, path)
    summary = json.loads((path / "summary.json").read_text())
    summary["config"].update(batch=batch, dtype=dtype)
    summary["environment"].update(gpu_name=gpu, started_at=f"{day}T10:00:00+00:00")
    summary["headline"].update(speedup=speedup, speedup_ci_low=speedup * 0.95,
                               speedup_ci_high=speedup * 1.05)
    (path / "summary.json").write_text(json.dumps(summary))
    return path


@pytest.fixture
def sample_runs(tmp_path, fresh_app_state) -> Path:
    if not SAMPLE.is_dir():
        pytest.skip("the bundled sample run is not in this checkout")
    folder = tmp_path / "runs"
    _sample_copy(folder, "small-bf16", batch=64, dtype="bf16", gpu="NVIDIA H200",
                 day="2026-11-28", speedup=9.0)
    _sample_copy(folder, "mid-fp32", batch=256, dtype="fp32", gpu="NVIDIA H200",
                 day="2026-11-29", speedup=3.0)
    _sample_copy(folder, "big-bf16", batch=640, dtype="bf16", gpu="NVIDIA H200",
                 day="2026-11-30", speedup=6.5)
    _sample_copy(folder, "other-gpu", batch=640, dtype="bf16", gpu="NVIDIA A100",
                 day="2026-12-01", speedup=2.0)
    return folder


def _page(folder: Path) -> AppTest:
    from dashboard import state

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(folder)
    at.run()
    return at.switch_page("views/runs.py").run()


def _listed(at: AppTest) -> list[str]:
    return sorted(at.dataframe[0].value["name"])


def _numbers(value) -> list[float]:
    """A Plotly array as floats (Plotly 7 sends numbers as base64 ``bdata``)."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), value["dtype"]).tolist()
    return list(value)


def _figure(at: AppTest, key: str) -> dict:
    return json.loads(at.get_by_key(key).proto.spec)


def test_the_runs_page_filters_by_setting_gpu_and_date(sample_runs):
    at = _page(sample_runs)
    assert not at.exception, [e.value for e in at.exception]
    assert _listed(at) == ["big-bf16", "mid-fp32", "other-gpu", "small-bf16"]
    assert {"eager_ms", "graph_ms", "speedup", "speedup_ci_low"} <= set(at.dataframe[0].value)
    at.multiselect(key="runs_filter_gpu").set_value(["NVIDIA H200"]).run()
    assert _listed(at) == ["big-bf16", "mid-fp32", "small-bf16"]
    at.multiselect(key="runs_filter_fields").set_value(["dtype", "batch"]).run()
    at.multiselect(key="runs_filter_values_dtype").set_value(["bf16"]).run()
    assert _listed(at) == ["big-bf16", "small-bf16"]
    assert set(at.dataframe[0].value["dtype"]) == {"bf16"}
    at.select_slider(key="runs_filter_range_batch").set_value((256, 640)).run()
    assert _listed(at) == ["big-bf16"] and list(at.dataframe[0].value["batch"]) == [640]
    at.select_slider(key="runs_filter_range_batch").set_value((64, 640)).run()
    at.date_input(key="runs_filter_dates").set_value(
        (datetime.date(2026, 11, 29), datetime.date(2026, 12, 1))).run()
    assert _listed(at) == ["big-bf16"]
    assert "1 of 4 run(s) match the filters." in [c.value for c in at.caption]
    at.multiselect(key="runs_filter_values_dtype").set_value(["fp32"]).run()
    assert _listed(at) == ["mid-fp32"]
    at.date_input(key="runs_filter_dates").set_value(
        (datetime.date(2026, 11, 30), datetime.date(2026, 12, 1))).run()
    assert "No run matches these filters." in [i.value for i in at.info]
    assert not at.exception


def test_the_runs_page_overlays_every_matching_run(sample_runs):
    at = _page(sample_runs)
    at.multiselect(key="runs_filter_fields").set_value(["dtype"]).run()
    at.multiselect(key="runs_filter_values_dtype").set_value(["bf16"]).run()
    assert _listed(at) == ["big-bf16", "other-gpu", "small-bf16"]
    at.button(key="compare_matching").click().run()
    chosen = at.multiselect(key="compare_runs").value
    assert sorted(Path(p).name for p in chosen) == ["big-bf16", "other-gpu", "small-bf16"]
    assert not at.exception, [e.value for e in at.exception]
    summary = at.dataframe[1].value
    assert list(summary["tag"]) == ["A", "B", "C"]
    by_name = {Path(p).name: tag for p, tag in zip(chosen, "ABC")}
    medians = _figure(at, "compare_medians")  # today's default view: medians and launch split
    runs_axis = [trace["x"][0] if isinstance(trace["x"][0], list) else trace["x"]
                 for trace in medians["data"]]  # a two-level axis: run, then mode
    assert {x.split("<br>")[0] for level in runs_axis for x in level} == {"A", "B", "C"}
    at.radio(key="compare_chart").set_value("speedup").run()
    speedups = _figure(at, "compare_speedups")
    (graph,) = speedups["data"]
    assert dict(zip(graph["x"], _numbers(graph["y"]))) == pytest.approx(
        {by_name["small-bf16"]: 9.0, by_name["big-bf16"]: 6.5, by_name["other-gpu"]: 2.0})
    assert graph["error_y"]["array"] is not None
    at.radio(key="compare_chart").set_value("distributions").run()
    lines = _figure(at, "compare_distributions")["data"]
    assert sorted({(t["name"], t["xaxis"]) for t in lines}) == [
        (tag, axis) for tag in "ABC" for axis in ("x", "x2")]  # eager and graph panels, 3 runs each
    assert not at.exception, [e.value for e in at.exception]


def test_the_runs_page_lists_and_compares_the_points_of_a_sweep(sample_runs):
    _sweep(sample_runs)
    at = _page(sample_runs)
    assert not at.exception, [e.value for e in at.exception]
    assert {"batch-sweep/point-000", "batch-sweep/point-001"} <= set(_listed(at))
    point = str((sample_runs / "batch-sweep" / "point-000").resolve())
    assert any(o.startswith("batch-sweep/point-000 · ") for o in at.multiselect(
        key="compare_runs").options)
    at.multiselect(key="compare_runs").set_value(
        [point, str((sample_runs / "big-bf16").resolve())]).run()
    assert not at.exception and list(at.dataframe[1].value["tag"]) == ["A", "B"]
    at.toggle(key="runs_include_points").set_value(False).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not any(name.startswith("batch-sweep/") for name in _listed(at))


# ----------------------------------------------------------------------------- overlay helpers


def test_speedup_rows_take_every_mode_else_the_headline_and_skip_what_is_not_finite():
    import pandas as pd

    from dashboard import compare
    from profiler_core.analysis.figures import Headline
    from profiler_core.storage.results import empty_table

    modes = pd.DataFrame({"mode": ["eager", "graph", "compile_ro"], "median_ms": [1.0, 0.2, 0.3],
                          "speedup": [1.0, 5.0, float("inf")], "speedup_ci_low": [1.0, 4.5, 3.0],
                          "speedup_ci_high": [1.0, 5.5, 3.6], "one_time_ms": [0, 5, 900],
                          "memory_bytes": [0, 1, 2], "graphs_recorded": [0, 1, 3]})
    rows = compare.compare_speedup_rows("A", Headline.from_stored({}), modes)
    assert list(rows["mode"]) == ["graph"] and rows["speedup_ci_high"][0] == 5.5  # inf left out
    headline = {"speedup": 4.0, "speedup_ci_low": 3.5, "speedup_ci_high": 4.4}
    rows = compare.compare_speedup_rows("B", Headline.from_stored(headline), empty_table("modes"))
    assert rows.to_dict("records") == [{"run": "B", "mode": "graph", "speedup": 4.0,
                                        "speedup_ci_low": 3.5, "speedup_ci_high": 4.4}]
    assert compare.compare_speedup_rows("C", Headline.from_stored({"speedup": float("nan")}),
                                         empty_table("modes")).empty  # a CPU run


def test_overlay_steps_use_cuda_events_else_the_wall_clock():
    import pandas as pd

    from dashboard import analysis, compare

    gpu = pd.DataFrame({"mode": "graph", "method": "steady", "trial": 0, "iteration": [0, 1],
                        "steps": 2, "gpu_ms": [1.0, 1.2], "wall_ms": float("nan")})
    steps = compare.overlay_steps("A", gpu)
    assert list(steps["ms"]) == [0.5, 0.6] and set(steps["timed_by"]) == {
        analysis.METHOD_LABELS["steady_event"]}  # per training step
    cpu = gpu.assign(mode="eager", gpu_ms=float("nan"), wall_ms=[3.0, 4.0], steps=1)
    assert list(compare.overlay_steps("B", cpu)["ms"]) == [3.0, 4.0]
    assert compare.overlay_steps("C", cpu.iloc[0:0]).empty


def test_overlay_charts_draw_only_finite_numbers_and_show_run_labels_as_text():
    import pandas as pd

    from dashboard.charts.comparison import compare_latency_ecdf, compare_speedups

    label = "<a href='x'>A</a>"
    speedups = pd.DataFrame({"run": [label, "B", "C"], "mode": "graph",
                             "speedup": [3.0, float("inf"), float("nan")],
                             "speedup_ci_low": [2.5, 1.0, 1.0], "speedup_ci_high": [3.5, 2.0, 2.0]})
    fig = compare_speedups(speedups)
    (trace,) = fig.data
    assert list(trace.x) == ["&lt;a href='x'&gt;A&lt;/a&gt;"] and list(trace.y) == [3.0]
    steps = pd.DataFrame({"run": [label] * 3 + ["B"] * 3, "mode": ["eager", "graph", "graph"] * 2,
                          "ms": [1.0, 0.2, float("inf"), 1.1, 0.25, 0.3], "timed_by": "x"})
    fig = compare_latency_ecdf(steps, log_scale=True)
    assert {(t.name, t.xaxis) for t in fig.data} == {("&lt;a href='x'&gt;A&lt;/a&gt;", "x"),
                                                    ("&lt;a href='x'&gt;A&lt;/a&gt;", "x2"),
                                                    ("B", "x"), ("B", "x2")}
    assert all(np.isfinite(list(t.x)).all() for t in fig.data)
    assert [t.showlegend for t in fig.data].count(True) == 2  # one legend entry per run
    assert fig.layout.xaxis.type == "log" and fig.layout.xaxis2.type == "log"
    empty = compare_speedups(speedups.iloc[0:0])
    assert "none of these runs has a speedup" in empty.layout.annotations[0].text


def test_needs_build_says_when_opening_would_read_every_run(runs, tmp_path):
    assert index.needs_build(runs)  # no index yet
    index.open_index(runs).close()
    assert not index.needs_build(runs)
    with sqlite3.connect(runs / index.INDEX_FILE) as connection:
        connection.execute("PRAGMA user_version = 2")  # an index from before an update
    assert index.needs_build(runs)
    (runs / index.INDEX_FILE).unlink()
    (runs / index.INDEX_FILE).write_text("a file of the user's")
    assert not index.needs_build(runs)  # not ours: it is never rebuilt
    assert not index.needs_build(tmp_path / "nowhere")


def test_the_dashboard_shows_a_first_index_build_as_a_progress_bar(tmp_path, monkeypatch):
    from dashboard import state

    folder = tmp_path / "many"
    for i in range(state.INDEX_PROGRESS_FROM + 2):
        write_synthetic_run(folder / f"run-{i:03d}", seed=i)
    shown: list[tuple[float, str]] = []

    class Bar:
        def progress(self, value, text=""):
            shown.append((value, text))

        def empty(self):
            shown.append((-1.0, "removed"))

    monkeypatch.setattr(state.st, "progress", lambda value: Bar())
    state._build_index_with_progress(folder)
    count = state.INDEX_PROGRESS_FROM + 2
    assert shown[-2] == (1.0, f"Indexing the runs folder (once): {count} of {count} folders read")
    assert shown[-1] == (-1.0, "removed") and not index.needs_build(folder)
    shown.clear()
    state._build_index_with_progress(folder)  # up to date: nothing to show
    assert shown == []


# ----------------------------------------------------------------------------- hostile names and values (issue 18)


NOT_UTF8 = os.fsdecode(b"run-\xff")  # a folder name whose byte 0xff is not UTF-8


def _summary_edit(run: Path, edit) -> None:
    summary = json.loads((run / "summary.json").read_text())
    edit(summary)
    (run / "summary.json").write_text(json.dumps(summary))  # lone surrogates as \ud... escapes


def _one_error_line(capsys, start: str) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: " + start), captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


def test_a_folder_name_that_is_not_utf8_is_indexed_listed_and_kept(runs, capsys):
    from dashboard import rundata

    shutil.copytree(runs / "run-0", runs / NOT_UTF8)
    sweep = _sweep(runs)
    shutil.copytree(runs / "run-1", sweep / os.fsdecode(b"point-\xfe"))
    sweep.rename(runs / os.fsdecode(b"sweep-\xfd"))
    read = []
    with index.open_index(runs, progress=lambda done, total: read.append(done)) as ix:
        rows = {row["folder"]: row for row in ix.runs()}
        assert rows["run-\ufffd"]["path"] == str(runs / NOT_UTF8)  # the real folder, to open
        assert rows["run-\ufffd"]["complete"] and rows["run-\ufffd"]["problem"] == ""
        assert "sweep-\ufffd/point-\ufffd" in rows and len(rows) == 7
        (swept,) = ix.sweeps()
        assert swept["name"] == "sweep-\ufffd" and swept["path"] == str(runs / os.fsdecode(b"sweep-\xfd"))
        assert [p["index"] for p in ix.sweep_points(os.fsdecode(b"sweep-\xfd"))] == [0, 1, 2]
        assert _names(ix.runs([index_query.parse_where("name=" + NOT_UTF8)])) == ["run-\ufffd"]
    assert read  # built once ...
    read.clear()
    with index.open_index(runs, progress=lambda done, total: read.append(done)) as ix:
        assert len(ix.runs()) == 7
    assert read == []  # ... and found up to date: the stored names are the folders' names
    assert main(["index", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "7 of 7 run(s) match" in out and "run-\ufffd " in out and "sweep-\ufffd: stopped" in out
    listed = rundata.list_runs(runs).set_index("name")
    assert listed.loc["run-\ufffd", "problem"] == rundata.NOT_UTF8_PROBLEM
    assert listed.loc["run-\ufffd", "path"] == str(runs / "run-\ufffd")  # text pandas can hold
    shutil.rmtree(runs / NOT_UTF8)
    with index.open_index(runs) as ix:
        assert "run-\ufffd" not in _names(ix.runs())


def test_lone_surrogates_in_json_strings_are_indexed_as_replacement_characters(runs, capsys):
    def edit(summary):
        summary["environment"].update(gpu_name="GPU \udcff", torch_version="\ud800")
        summary["headline"]["odd_\udcff_ms"] = 1.5

    _summary_edit(runs / "run-0", edit)
    sweep = _sweep(runs)
    info = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweep.json").write_text(json.dumps(dict(info, status="\udcff")))
    with index.open_index(runs) as ix:
        row = next(r for r in ix.runs(headline=True) if r["folder"] == "run-0")
        assert (row["gpu_name"], row["torch_version"]) == ("GPU \ufffd", "\ufffd")
        assert row["odd_\ufffd_ms"] == 1.5 and "odd_\ufffd_ms" in ix.fields()
        assert ix.sweeps()[0]["status"] == "\ufffd"
        assert _names(ix.runs([index_query.parse_where("gpu=GPU \udcff")])) == ["run-0"]
    assert main(["index", "--runs", str(runs), "--where", "odd_\udcff_ms=1..2"]) == 0
    out = capsys.readouterr().out
    assert "1 of 5 run(s) match" in out and "GPU \ufffd" in out


def test_a_points_index_beyond_sqlite_and_a_plan_too_long_to_keep_are_indexed(runs):
    sweep = _sweep(runs)
    (sweep / "points.csv").write_text(
        f"index,replays,status,run\n{2**63},100,done,point-000\n{'9' * 5000},200,done,point-001\n"
        "\u00b2,300,planned,\n7,400,planned,\n")
    info = json.loads((sweep / "sweep.json").read_text())
    info["plan"] = {"parameters": {"replays": list(range(30_000))}}  # over 100,000 characters
    (sweep / "sweep.json").write_text(json.dumps(info))
    with index.open_index(runs) as ix:
        (swept,) = ix.sweeps()
        assert swept["problem"] == "" and swept["plan"] is None and swept["points"] == 4
        assert [p["index"] for p in ix.sweep_points("batch-sweep")] == [0, 1, 2, 7]
    # an index written before long plans were left out held one cut at 100,000 characters
    with sqlite3.connect(runs / index.INDEX_FILE) as connection:
        connection.execute("UPDATE sweeps SET plan = ?", ('{"parameters": {"replays": [1, 2',))
    with index.open_index(runs) as ix:
        assert ix.sweeps()[0]["plan"] is None


def test_where_takes_many_values_refuses_too_many_and_matches_undecodable_text(runs, capsys):
    many = ",".join(str(n) for n in range(700)) + ",640"
    assert main(["index", "--runs", str(runs), "--where", f"batch={many}"]) == 0
    assert "3 of 3 run(s) match" in capsys.readouterr().out
    others = ",".join(str(n) for n in range(700) if n not in (100, 300))
    assert main(["index", "--runs", str(runs), "--where", "replays=" + others]) == 0
    assert "1 of 3 run(s) match" in capsys.readouterr().out  # replays 200 only
    assert main(["index", "--runs", str(runs), "--where",
                 "batch=" + ",".join(str(n) for n in range(index_query.MAX_FILTER_VALUES + 1))]) == 2
    _one_error_line(capsys, "--where: 'batch' lists 1,001 values (at most 1,000)")
    assert main(["index", "--runs", str(runs),
                 *[f"--where=batch={n}" for n in range(index_query.MAX_FILTERS + 1)]]) == 2
    _one_error_line(capsys, "--where: 33 filters were given (at most 32)")
    with index.open_index(runs) as ix:
        with pytest.raises(ConfigError, match="lists 1,001 values"):
            ix.runs([index_query.FieldFilter("speedup", values=tuple(range(1001)))])
    for where in ("dtype=\udcff", "gpu=\udcff", "date=\udcff", "name=\udcff,x"):
        code = main(["index", "--runs", str(runs), "--where", where])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and "surrogates" not in captured.err
        assert code == 0 and "0 of 3 run(s) match" in captured.out or code == 2 and \
            captured.err.count("\n") == 1, (where, captured)
    assert main(["index", "--runs", str(runs), "--where", "\udcff=1"]) == 2
    _one_error_line(capsys, "--where: there is no field '\ufffd'")
    for sql in ("fp32' OR '1'='1", "fp32\" OR 1=1 --", "x'); DROP TABLE runs; --"):
        assert main(["index", "--runs", str(runs), "--where", f"dtype={sql}"]) == 0
        assert "0 of 3 run(s) match" in capsys.readouterr().out  # values, never SQL
    assert main(["index", "--runs", str(runs)]) == 0
    assert "3 of 3 run(s) match" in capsys.readouterr().out
