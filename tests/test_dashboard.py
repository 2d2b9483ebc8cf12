"""The Streamlit app through AppTest (no GPU, no browser), the CSV builders and upload validation."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import figure_table
from streamlit.testing.v1 import AppTest

from dashboard import (
    analysis,
    devices,
    kernel_tables,
    percentiles,
    run_facts,
    rundata,
    runpanel,
    state,
)
from profiler_core.orchestration.launcher import Launcher
from profiler_core.orchestration.runjob import RunSnapshot
from profiler_core.spec.errors import RunFormatError
from profiler_core.spec.schema import TABLE_FILES
from profiler_core.storage.results import RunResult

pytestmark = pytest.mark.usefixtures("fresh_app_state")
APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
_real_list_devices = devices.list_devices
ONE_GPU = (pd.DataFrame([{"device": "cuda:0", "index": 0, "name": "NVIDIA H200",
                          "memory_free_mib": 140_000.0, "memory_total_mib": 143_771.0,
                          "source": "nvml"}]), "")


def _app(runs_dir: Path, run: bool = True) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    return at.run() if run else at


def _figures(at: AppTest) -> list[dict]:
    return [json.loads(element.proto.spec) for element in at.get("plotly_chart")]


def _values(array) -> list:
    """A figure JSON's array as a list: Plotly 7 writes numbers as {"dtype", "bdata"} (base64)."""
    if isinstance(array, dict) and "bdata" in array:
        import base64

        return np.frombuffer(base64.b64decode(array["bdata"]), array["dtype"]).tolist()
    return list(array)


def _trace_types(at: AppTest) -> list[list[str]]:
    return [[trace.get("type", "scatter") for trace in fig["data"]] for fig in _figures(at)]


def _diff_table(at: AppTest) -> pd.DataFrame:
    """The Runs page's "Settings that differ" table."""
    return next(frame.value for frame in at.dataframe if list(frame.value.columns)[:2] == ["setting", "A"])


def _texts(elements) -> str:
    """What the elements say: ui.escape_md's backslashes and word joiners removed."""
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


def test_app_starts_without_a_gpu_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "list_devices", _real_list_devices)  # NVML, then torch.cuda
    at = _app(tmp_path / "runs")
    assert not at.exception
    gpus, _ = devices.list_devices()
    if gpus.empty:
        assert "No CUDA GPU was found on this machine" in _texts(at.info)
        assert at.sidebar.selectbox(key="cfg_device").value == "cpu"
    assert "No run is open" in _texts(at.info)
    assert "sample run (dashboard/sample_run/" in _texts(at.caption)  # says the sample is absent
    assert not at.get("plotly_chart")


def test_gpu_selector_lists_gpus_by_index_name_and_free_memory(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)
    at = _app(tmp_path / "runs")
    selector = at.sidebar.selectbox(key="cfg_device")
    # short enough for the sidebar's box (issue 20: "CPU (eager only: no graphs, to tr" was cut)
    assert selector.options == ["GPU 0 · H200 · 137/140 GiB free", "CPU (eager only)"]
    assert all(len(option) <= 32 for option in selector.options)
    assert selector.value == "cuda:0"
    assert "No CUDA GPU" not in _texts(at.info)


def test_presets_fill_the_controls(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)
    at = _app(tmp_path / "runs")
    number = lambda name: at.sidebar.number_input(key=f"cfg_{name}").value  # noqa: E731
    assert (number("batch"), number("d_in"), number("hidden"), number("d_out")) == (640, 4096, 2048, 1024)
    assert (number("warmup_iters"), number("capture_iters"), number("replays")) == (3, 1, 200)
    at.sidebar.selectbox(key="cfg_preset").select("lesson3").run()
    assert (number("warmup_iters"), number("capture_iters"), number("replays")) == (3, 3, 10)
    assert at.sidebar.toggle(key="cfg_count_warmup").value is True
    assert "10 replays count 30" in _texts(at.sidebar.caption)
    at.sidebar.selectbox(key="cfg_preset").select("lesson2").run()
    assert (number("warmup_iters"), number("capture_iters"), number("replays")) == (1, 1, 10)
    assert at.sidebar.toggle(key="cfg_count_warmup").value is False
    assert not at.exception
    at.sidebar.number_input(key="cfg_batch").set_value(64).run()  # edited after a preset: custom
    assert "labelled 'custom'" in _texts(at.sidebar.caption)


def test_every_control_has_its_allowed_range_in_the_help(tmp_path):
    at = _app(tmp_path / "runs")
    helps = {w.key: w.help for w in at.sidebar.number_input}
    assert "from 1 to 1,048,576" in helps["cfg_batch"]
    assert "0 to 0.99" in helps["cfg_dropout1"]
    assert "from 1 to 100" in helps["cfg_capture_iters"]
    assert len(helps) == 18  # 17 numeric RunConfig fields + the worker timeout
    # the RunConfig toggles, and the changing shapes' (off: its one control)
    assert {t.key for t in at.sidebar.toggle} == {"cfg_count_warmup", "cfg_profile", "cfg_nvml",
                                                 "shape_on"}


def test_a_refused_value_is_shown_beside_its_control_and_nothing_can_run(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)
    at = _app(tmp_path / "runs")
    assert not at.sidebar.button(key="run_button").disabled
    at.sidebar.number_input(key="cfg_trials").set_value(10)
    at.sidebar.number_input(key="cfg_replays").set_value(5).run()  # trials (10) > replays (5)
    errors = _texts(at.sidebar.error)
    assert "Refused: trials (10) cannot exceed replays (5)" in errors
    assert "Allowed: a whole number from 1 to 1,000 (empty: automatic)." in errors
    assert "Run is disabled: Trials" in errors
    assert at.sidebar.button(key="run_button").disabled
    at.sidebar.number_input(key="cfg_replays").set_value(200).run()
    assert not at.sidebar.error and not at.sidebar.button(key="run_button").disabled
    at.sidebar.number_input(key="cfg_batch").set_value(1_048_576).run()  # 2^20 x 4096 > 2^31
    assert "over 2^31" in _texts(at.sidebar.error)
    assert at.sidebar.button(key="run_button").disabled
    at.sidebar.number_input(key="cfg_batch").set_value(0).run()  # below the widget's own minimum
    assert at.sidebar.number_input(key="cfg_batch").value >= 1
    assert not at.exception


VIEWS = {
    "views/overview.py": ([["bar", "bar", "scatter"]],
                          [["quantity", "value", "unit", "shown"], ["item", "value"],
                           ["setting", "value"]]),
    "views/counters.py": ([["bar", "bar"]], [run_facts.COUNTER_LESSON_COLUMNS]),
    "views/latency.py": ([["bar", "bar"], ["scatter", "scatter"], ["scattergl"] * 4, ["bar", "bar"]],
                         # p99.9 needs 1,000 steps (the percentile rule): not shown here
                         [[c for c in percentiles.PERCENTILE_COLUMNS if c != "p99_9_ms"],
                          analysis.TIMING_COLUMNS,
                          TABLE_FILES["stats"][1]]),
    "views/launch_split.py": ([["bar"], ["bar"] * 4, ["bar", "bar"], ["bar", "bar"], ["bar"] * 3,
                               ["bar"] * 2],
                              [analysis.SAVING_TABLE_COLUMNS, analysis.SPLIT_MEDIAN_COLUMNS,
                               analysis.BREAKDOWN_TABLE_COLUMNS]),
    # 4 polled panels and the driver's samples, then a lane trace per kind of phase
    "views/gpu.py": ([["scattergl"] * 5 + ["bar"] * 6],
                     [run_facts.PHASE_SUMMARY_COLUMNS,
                      ["metric", "source", "count", "mean", "min", "max"]]),
    "views/kernels.py": ([["bar", "bar"], ["bar"], ["bar"]],
                         [kernel_tables.KERNEL_DIFF_COLUMNS, kernel_tables.KERNEL_TABLE_COLUMNS]),
    "views/runs.py": ([], [[c for c in rundata.RUN_LIST_COLUMNS if c != "path"]]),
    "views/shapes.py": ([], []),  # a run of fixed shapes: it says how to start one
}


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    from conftest import write_synthetic_run

    return write_synthetic_run(tmp_path_factory.mktemp("shared") / "runs" / "synthetic-seed")


@pytest.mark.parametrize("page", list(VIEWS))
def test_the_synthetic_run_renders_every_view(shared_run, page):
    charts_expected, tables_expected = VIEWS[page]
    at = _app(shared_run.parent)
    assert at.session_state[state.OPEN_RUN] == str(shared_run.resolve())
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert _trace_types(at) == charts_expected
    assert [list(df.value.columns) for df in at.dataframe] == tables_expected
    assert len(at.download_button) >= len(tables_expected)  # every table has its CSV
    assert not at.error


def test_overview_headline_verdict_and_downloads(shared_run):
    at = _app(shared_run.parent)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Speedup"].endswith("x") and 4.0 < float(metrics["Speedup"][:-1]) < 6.0
    assert metrics["Eager median per step"].startswith("1.")
    # the article's no-sync figure: said in the caption, not a tile as large as the speedup's
    assert "The article's 'speedup' (no sync)" not in metrics
    assert "would say 3.00x: CPU enqueue time, not training time" in _texts(at.caption)
    ci = next(m for m in at.metric if m.label == "Speedup").proto.delta
    assert ci.startswith("95% CI ")
    assert "Launch-bound" in _texts(at.success)
    assert metrics["Break-even"] == "50 steps"  # (warm-up 12 + capture 35.2 ms) / 0.95 ms per step
    labels = {b.label for b in at.download_button}
    assert {"Download run (zip)", "Download summary.json", "Trace: eager (Perfetto)",
            "Trace: graph (Perfetto)"} <= labels
    figures = at.get_by_key("overview_mode_metrics")  # the run's metrics.csv, every figure per mode
    assert figures.proto.label.startswith("Download every figure per mode (metrics.csv")
    assert "Synthetic GPU (test fixture)" in _texts(at.caption)


def test_the_bundled_sample_opens_first_and_is_labelled(monkeypatch, shared_run, tmp_path):
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", shared_run)
    at = _app(tmp_path / "empty-runs")
    assert at.session_state[state.OPEN_RUN] == state.SAMPLE
    assert ("Bundled sample run, recorded with this tool on **Synthetic GPU (test fixture)** on "
            "2026-11-30") in _texts(at.caption)
    assert len(at.get("plotly_chart")) == 1 and not at.exception


@pytest.mark.skipif(not rundata.sample_run_available(rundata.SAMPLE_RUN_DIR),
                    reason="dashboard/sample_run/ (a real H200 run) is not in this checkout yet")
def test_the_real_bundled_sample_renders_every_view(monkeypatch, tmp_path):
    real = Path(__file__).resolve().parent.parent / "dashboard" / "sample_run"
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", real)
    at = _app(tmp_path / "runs")
    assert at.session_state[state.OPEN_RUN] == state.SAMPLE
    for page in VIEWS:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        # every chart of a two-mode run, and more where the sample has them (five modes, a
        # prediction)
        assert len(_figures(at)) >= len(VIEWS[page][0])


def test_two_runs_compare_side_by_side(shared_run, tmp_path):
    from conftest import write_synthetic_run

    runs = tmp_path / "runs"
    write_synthetic_run(runs / "a", seed=1, started_at="2026-11-30T10:00:00")
    write_synthetic_run(runs / "b", per_mode=100, trials=5, seed=2, started_at="2026-11-30T11:00:00")
    at = _app(runs)
    at.switch_page("views/runs.py").run()
    assert not at.exception
    assert _trace_types(at) == [["bar", "bar"], ["bar"] * 4]
    diff = _diff_table(at)
    # preset: what the values are; eager_iters: the steps each ran (automatic: 200 and 100)
    assert set(diff["setting"]) == {"replays", "eager_iters", "trials", "preset"}
    presets = set(diff.loc[diff["setting"] == "preset", ["A", "B"]].iloc[0])
    assert presets == {"custom (seed with trials 10)", "custom (seed with replays 100, trials 5)"}
    split = _figures(at)[1]
    assert split["data"][0]["x"][0][:2] == ["A: eager", "A: graph"]


def test_an_unreadable_run_is_listed_and_refused_with_a_message(tmp_path):
    runs = tmp_path / "runs"
    (runs / "broken").mkdir(parents=True)
    (runs / "broken" / "summary.json").write_text("{not json")
    at = _app(runs)
    assert not at.exception
    assert "cannot be opened" in _texts(at.error)
    listed = rundata.list_runs(runs)
    assert listed["problem"].str.contains("not valid JSON").all()


# ----------------------------------------------------------------------------- running


@pytest.fixture
def fake_runs(monkeypatch, fake_worker, shared_run):
    """The Run button starts the fake worker; mode by device: cpu 'done', otherwise as set."""
    modes = {"mode": "done"}

    class FakeRuns(Launcher):  # the server's launcher, running the fake worker for each config
        def start(self, config, out_dir, *, overwrite=False, **options):
            return self.start_command(fake_worker(modes["mode"], out_dir, shared_run), out_dir,
                                      **options)

    monkeypatch.setattr(runpanel, "run_launcher", lambda: FakeRuns(warm=False))
    return modes


def test_run_button_runs_the_worker_and_opens_the_new_run(fake_runs, tmp_path):
    runs = tmp_path / "runs"
    at = _app(runs)
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    assert job.wait(30)
    at.run()
    assert not at.exception
    snap = job.snapshot()
    assert snap.status == "done" and Path(snap.out_dir).parent == runs.resolve()
    assert at.session_state[state.OPEN_RUN] == str(Path(snap.out_dir).resolve())
    assert "finished and is open" in _texts(at.success)
    assert "-custom-fp32-cpu-" in Path(snap.out_dir).name  # the CPU's small step: not a preset
    assert len(at.get("plotly_chart")) == 1


def test_a_failed_run_is_reported_and_the_app_keeps_serving(fake_runs, tmp_path):
    fake_runs["mode"] = "crash"
    at = _app(tmp_path / "runs")
    at.sidebar.button(key="run_button").click().run()
    assert at.session_state[state.JOB].wait(30)
    at.run()
    assert "failed: the worker crashed (exit code 1)" in _texts(at.error)
    assert not at.exception and not at.sidebar.button(key="run_button").disabled
    fake_runs["mode"] = "error"
    at.sidebar.button(key="run_button").click().run()
    assert at.session_state[state.JOB].wait(30)
    at.run()
    assert ("**The run was refused (Graph replays): nothing ran.** --replays: too many.  \n"
            "**What to change:** lower it.") in _texts(at.error)
    fake_runs["mode"] = "oom"
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    assert job.wait(30)
    at.run()
    assert ("**Not enough GPU memory for this run: run " in _texts(at.error))
    assert ("out of memory during capture. The worker released the GPU memory when it exited; "
            "the next run starts in a fresh process.  \n**What to change:** shrink the batch."
            in _texts(at.error))
    assert "kept, marked incomplete, and is open" in _texts(at.info)
    assert at.session_state[state.OPEN_RUN] == str(Path(job.snapshot().out_dir).resolve())


def test_cancel_and_the_lock_shared_by_two_sessions(fake_runs, tmp_path):
    runs = tmp_path / "runs"
    fake_runs["mode"] = "sleep"
    first = _app(runs)
    first.sidebar.button(key="run_button").click().run()
    first_job = first.session_state[state.JOB]
    fake_runs["mode"] = "done"
    second = _app(runs)
    assert "A run started now waits its turn" in _texts(second.sidebar.caption)
    second.sidebar.button(key="run_button").click().run()
    second_job = second.session_state[state.JOB]
    second.run()
    waiting = _texts(second.info)
    assert "Waiting for cpu" in waiting and "(another session) holds it since" in waiting
    assert first_job.run_name in waiting and "number 1 in the queue" in waiting
    assert second_job.snapshot().status == "queued"
    first.run()
    assert first.button(key="cancel_run")  # progress panel with its Cancel button
    first.button(key="cancel_run").click().run()
    assert first_job.wait(10) and first_job.snapshot().status == "cancelled"
    assert second_job.wait(30) and second_job.snapshot().status == "done"
    first.run()
    second.run()
    assert "cancelled" in _texts(first.warning)
    assert "finished and is open" in _texts(second.success)


# ----------------------------------------------------------------------------- CSV and zip


def test_csv_builders_produce_the_schema_columns(shared_run):
    run = RunResult.load(shared_run)
    for name, (_, columns) in TABLE_FILES.items():
        csv = rundata.table_csv_bytes(run.table(name)).decode()
        assert csv.splitlines()[0].split(",") == columns
        assert len(pd.read_csv(io.StringIO(csv))) == len(run.table(name))
    derived = {
        "percentiles": (percentiles.percentile_table(run.table("latency")), percentiles.PERCENTILE_COLUMNS),
        "timing": (analysis.timing_comparison(run.table("stats"), run.figures), analysis.TIMING_COLUMNS),
        "split": (analysis.split_medians(run.table("launch_split")), analysis.SPLIT_MEDIAN_COLUMNS),
        "lessons": (run_facts.counter_lessons(run.table("counters")), run_facts.COUNTER_LESSON_COLUMNS),
        "kernels": (kernel_tables.kernel_table(run.table("kernels")), kernel_tables.KERNEL_TABLE_COLUMNS),
    }
    for frame, columns in derived.values():
        header = pd.read_csv(io.BytesIO(rundata.table_csv_bytes(frame))).columns
        assert list(header) == columns


def test_run_zip_round_trips_through_upload(shared_run, tmp_path):
    data = rundata.run_zip_bytes(shared_run)
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "synthetic-seed/summary.json" in names and "synthetic-seed/trace_graph.json" in names
    dest = rundata.extract_run_zip(data, tmp_path / "unpacked")
    loaded, original = RunResult.load(dest), RunResult.load(shared_run)
    assert loaded.config == original.config
    for name in TABLE_FILES:
        pd.testing.assert_frame_equal(loaded.table(name), original.table(name))
    assert loaded.trace_paths["eager"] == dest / "trace_eager.json"


def test_a_schema_2_run_uploads_with_its_older_breakdown_columns(shared_run, tmp_path):
    """A schema-2 zip (breakdown.csv in eager_us/graph_us, e.g. the bundled sample's own 'Download
    run (zip)') is checked against its version's columns and opens upgraded; today's runs must
    have today's columns."""
    files = _run_files(shared_run)
    summary = json.loads(files["summary.json"])
    old = pd.read_csv(io.BytesIO(files["breakdown.csv"])).drop(columns="mode").rename(
        columns={"mode_us": "graph_us"})
    files["breakdown.csv"] = old.to_csv(index=False).encode()
    with pytest.raises(RunFormatError, match="breakdown.csv lacks the columns mode, mode_us"):
        rundata.validate_run_zip(_zip(files))
    files["summary.json"] = json.dumps({**summary, "schema_version": 2})
    opened = rundata.unpack_run(_zip(files), tmp_path / "uploaded")
    breakdown = opened.table("breakdown")
    assert set(breakdown["mode"]) == {"graph"}
    assert breakdown["mode_us"].tolist() == old["graph_us"].tolist()


def _zip(files: dict[str, bytes | str], symlink: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return buffer.getvalue()


def _run_files(shared_run) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in shared_run.iterdir()}


@pytest.mark.parametrize("damage, message", [
    ("not_a_zip", "not a zip file"),
    ("no_summary", "summary.json is missing"),
    ("no_latency", "lacks latency.csv"),
    ("bad_columns", "stats.csv lacks the columns mean_ms, median_ms"),
    ("traversal", "unsafe path: '../evil.txt'"),
    ("absolute", "unsafe path: '/tmp/evil.txt'"),
    ("symlink", "holds a link"),
    ("two_runs", "more than one run"),
    ("bad_version", "not a run summary of a version this tool reads"),
    ("bad_config", "invalid config"),
    ("bad_json", "not valid JSON"),
])
def test_upload_validation_rejects_a_bad_zip(shared_run, tmp_path, damage, message):
    files = _run_files(shared_run)
    summary = json.loads(files["summary.json"])
    symlink = None
    if damage == "not_a_zip":
        data = b"PK\x03\x04 this is not really a zip"
    else:
        if damage == "no_summary":
            del files["summary.json"]
        elif damage == "no_latency":
            del files["latency.csv"]
        elif damage == "bad_columns":
            files["stats.csv"] = b"mode,method,count\neager,cuda_event,3\n"
        elif damage == "traversal":
            files["../evil.txt"] = b"x"
        elif damage == "absolute":
            files["/tmp/evil.txt"] = b"x"
        elif damage == "symlink":
            symlink = "run/link"
        elif damage == "two_runs":
            files.update({f"other/{k}": v for k, v in files.items()})
        elif damage == "bad_version":
            files["summary.json"] = json.dumps({**summary, "schema_version": 99})
        elif damage == "bad_config":
            files["summary.json"] = json.dumps({**summary, "config": {**summary["config"], "batch": 0}})
        elif damage == "bad_json":
            files["summary.json"] = "{oops"
        data = _zip(files, symlink)
    with pytest.raises(RunFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rundata.extract_run_zip(data, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()
    assert not (tmp_path / "evil.txt").exists()


def test_upload_size_limits(shared_run, tmp_path, monkeypatch):
    data = rundata.run_zip_bytes(shared_run)
    monkeypatch.setattr(rundata, "MAX_UPLOAD_BYTES", len(data) - 1)
    with pytest.raises(RunFormatError, match="over the"):
        rundata.validate_run_zip(data)
    monkeypatch.setattr(rundata, "MAX_UPLOAD_BYTES", 10 * len(data))
    monkeypatch.setattr(rundata, "MAX_UNCOMPRESSED_BYTES", 1000)
    with pytest.raises(RunFormatError, match="unpacks to"):
        rundata.validate_run_zip(data)


def test_unknown_files_in_a_zip_are_never_written(shared_run, tmp_path):
    files = {f"run/{k}": v for k, v in _run_files(shared_run).items()}
    files["run/notes.py"] = b"import os; os.system('echo pwned')"
    dest = rundata.extract_run_zip(_zip(files), tmp_path / "dest")
    assert "notes.py" not in {p.name for p in dest.iterdir()}
    assert RunResult.load(dest).complete


# ----------------------------------------------------------------------------- the real engine


def _run_from_the_sidebar(at: AppTest, timeout_s: float) -> tuple[RunSnapshot, float]:
    """Press Run, follow the job like the page does, and time it until every view has drawn."""
    import time

    started = time.perf_counter()
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    while not job.wait(0.5):
        at.run()  # the live panel polls the job like the browser's fragment does
        assert not at.exception
        assert time.perf_counter() - started < timeout_s, job.snapshot()
    at.run()
    for page in VIEWS:
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    return job.snapshot(), time.perf_counter() - started


def test_a_real_cpu_run_from_the_sidebar_end_to_end_is_labelled_custom(tmp_path):
    """The real worker (`python -m profiler_core run --device cpu`), started by the Run button
    after a control was changed: summary.json, the Overview header and the comparison say
    "custom" (the CLI keeps the label: `--preset custom`), and no view says "profiler off"."""
    at = _app(tmp_path / "runs")
    assert at.sidebar.selectbox(key="cfg_device").value == "cpu"  # no GPU here
    for name, value in (("batch", 48), ("d_in", 64), ("hidden", 64), ("d_out", 16),
                        ("eager_iters", 20), ("trials", 2)):
        at.sidebar.number_input(key=f"cfg_{name}").set_value(value)
    at.run()
    assert "labelled 'custom'" in _texts(at.sidebar.caption)
    snap, _ = _run_from_the_sidebar(at, timeout_s=600)  # a safety net only: it takes seconds
    assert snap.status == "done", (snap.message, snap.stderr_tail)
    summary = json.loads((Path(snap.out_dir) / "summary.json").read_text())
    assert summary["config"]["preset"] == "custom"
    assert (summary["config"]["batch"], summary["config"]["device"]) == (48, "cpu")
    assert summary["config"]["profile"] is False and summary["config"]["nvml"] is False
    assert "-custom-fp32-cpu-" in Path(snap.out_dir).name
    at.switch_page("views/overview.py").run()
    assert at.session_state[state.OPEN_RUN] == str(Path(snap.out_dir).resolve())
    assert "· custom, fp32" in _texts(at.caption)
    assert "A CPU run: eager only, no graph and no launch split" in _texts(at.info)
    assert "No eager trace in this run: a CPU run" in _texts(at.caption)
    everything = "\n".join(_texts(getattr(at, kind)) for kind in ("info", "warning", "caption",
                                                                     "markdown", "success"))
    run = RunResult.load(snap.out_dir)
    assert run.config.batch == 48 and run.config.device == "cpu" and run.complete
    at.switch_page("views/latency.py").run()
    # a CPU run has no CUDA events and no cold start: only steady-state wall time is offered
    assert at.radio(key="latency_timing").value == "steady_wall"
    assert at.radio(key="latency_timing").options == ["steady state, every step (wall clock)"]
    assert _trace_types(at)[0] == ["bar"]  # eager only
    for page in ("views/launch_split.py", "views/kernels.py", "views/gpu.py"):
        at.switch_page(page).run()
        everything += "\n" + "\n".join(_texts(getattr(at, kind)) for kind in ("info", "caption"))
    assert "profiler off" not in everything and "profiler was off" not in everything
    assert "No kernel table in this run: a CPU run" in everything
    at.switch_page("views/runs.py").run()
    listed = rundata.list_runs(tmp_path / "runs")
    assert list(listed["preset"]) == ["custom"] and list(listed["gpu"]) == ["CPU"]


def test_choosing_the_cpu_switches_to_a_small_step_and_disables_what_needs_a_gpu(monkeypatch,
                                                                                   tmp_path):
    monkeypatch.setattr(devices, "list_devices", lambda: ONE_GPU)
    at = _app(tmp_path / "runs")
    number = lambda name: at.sidebar.number_input(key=f"cfg_{name}")  # noqa: E731
    assert number("batch").value == 640 and not number("replays").disabled
    at.sidebar.selectbox(key="cfg_device").select("cpu").run()
    assert (number("batch").value, number("d_in").value, number("hidden").value) == (64, 512, 512)
    assert number("eager_iters").value == 200 and not number("eager_iters").disabled
    for name in ("capture_iters", "replays", "profile_iters", "nvml_interval_ms", "parity_steps"):
        assert number(name).disabled, name
        assert number(name).help.startswith("Off on the CPU: it needs a CUDA GPU"), name
    for name in ("profile", "nvml"):
        toggle = at.sidebar.toggle(key=f"cfg_{name}")
        assert toggle.disabled and toggle.value is False, name
    assert "CPU runs time the eager step only" in at.sidebar.selectbox(key="cfg_device").help
    assert "On the CPU: eager only" in _texts(at.sidebar.caption)
    assert "labelled 'custom'" in _texts(at.sidebar.caption)
    # the caption says the sizes the controls hold, not the preset's (N=640, 4096 -> ...)
    assert "N=64, 512 -> 512 -> 128" in _texts(at.sidebar.caption)
    assert "N=640" not in _texts(at.sidebar.caption)
    # the eager iterations set the replays (disabled) and bound the trials
    number("eager_iters").set_value(30).run()
    assert number("replays").value == 30
    number("trials").set_value(40).run()
    assert "Refused: trials (40) cannot exceed the eager iterations (30)" in _texts(at.sidebar.error)
    number("trials").set_value(10).run()
    assert not at.sidebar.error
    # a preset picked on the CPU keeps the CPU's sizes; back on the GPU, the preset comes back
    at.sidebar.selectbox(key="cfg_preset").select("lesson2").run()
    assert number("batch").value == 64 and at.sidebar.toggle(key="cfg_count_warmup").value is False
    at.sidebar.selectbox(key="cfg_device").select("cuda:0").run()
    assert (number("batch").value, number("replays").value) == (640, 10)
    assert not number("replays").disabled and at.sidebar.toggle(key="cfg_profile").value is True
    assert not at.exception


@pytest.mark.gpu
def test_a_real_gpu_run_from_the_sidebar_end_to_end(monkeypatch, tmp_path):
    """On a GPU: the seed preset from the sidebar to every view drawn (target: under 15 s)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setattr(devices, "list_devices", _real_list_devices)
    at = _app(tmp_path / "runs")
    assert at.sidebar.selectbox(key="cfg_device").value == "cuda:0"
    snap, seconds = _run_from_the_sidebar(at, timeout_s=300)
    assert snap.status == "done", (snap.message, snap.stderr_tail)
    run = RunResult.load(snap.out_dir)
    print(f"\nRun pressed -> every view drawn: {seconds:.1f} s on {run.environment.get('gpu_name')}; "
          f"speedup {run.pair.speedup}")
    artifacts = Path(__file__).resolve().parent.parent / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "gpu-run-timing.txt").write_text(f"{seconds:.2f} s {run.environment}\n")
    assert len(run.table("launch_split")) and len(run.table("kernels"))
    assert seconds < 60


# ----------------------------------------------------------------------------- progress and the lock


def test_time_left_is_estimated_from_the_pace_so_far():
    assert runpanel.eta_seconds(0.5, 10.0) == pytest.approx(10.0)
    assert runpanel.eta_seconds(0.25, 30.0) == pytest.approx(90.0)
    assert runpanel.eta_seconds(0.01, 30.0) is None  # too little done to say
    assert runpanel.eta_seconds(0.5, 0.2) is None  # too early to say
    assert runpanel.eta_seconds(1.0, 30.0) is None  # finished
    assert runpanel.eta_text(0.5, 10.0) == "about 10 s left"
    assert runpanel.eta_text(0.0, 10.0) == "estimating the time left"
    assert [runpanel.duration_text(s) for s in (-3, 0, 59.9, 125, 3725)] == [
        "0 s", "0 s", "59 s", "2 min 5 s", "1 h 2 min"]


def test_the_progress_bar_shows_the_time_left_and_the_sidebar_agrees_with_the_panel(
        fake_runs, monkeypatch, tmp_path):
    """The live panel's progress bar says about how long is left. While this session's run is
    active, the panel is the one place that says since when and for how long it has held the
    device (two separately refreshed clocks could disagree by a second); the sidebar points to
    it. Another session sees the holder's line, counted from the time it took the device."""
    from conftest import wait_for

    fake_runs["mode"] = "sleep"  # reports progress up to the timed trials (2 of 3), then waits
    at = _app(tmp_path / "runs")
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    try:
        assert wait_for(lambda: job.snapshot().phase == "timed trials", timeout=300), job.snapshot()
        started = job.snapshot().started_at
        monkeypatch.setattr(runpanel, "_now", lambda: started + 30.0)
        at.run()
        assert not at.exception
        bar = at.get("progress")[0].proto
        assert bar.text.endswith("· 67% · about 15 s left")  # 30 s for two thirds: 15 s more
        since = runpanel.clock_text(started)
        assert (f"Running for 30 s (since {since}) in a worker process on cpu; about 15 s left"
                in _texts(at.caption))
        sidebar = _texts(at.sidebar.caption)
        assert f"Your run {job.run_name} is in progress" in sidebar
        assert not re.search(r"\d+ s ago|\d+ s\b", sidebar)  # no second clock in the sidebar
        other = _app(tmp_path / "runs")  # another session: the holder's line, on the same clock
        holder_since = state.lock_registry().lock("cpu").state().holder.since
        monkeypatch.setattr(runpanel, "_now", lambda: holder_since + 30.0)
        other.run()
        assert (f"(another session) holds it since {runpanel.clock_text(holder_since)} (30 s ago)."
                in _texts(other.sidebar.caption))
    finally:
        job.cancel()
        assert job.wait(60)


# ----------------------------------------------------------------------------- views (issue 10)


def _cpu_run(path: Path, eager_ms: float = 3.0) -> Path:
    """A finished CPU run as the engine writes one: eager only, wall-clock steady state."""
    from profiler_core.spec.config import PRESETS
    from profiler_core.storage.results import coerce_table

    rng = np.random.default_rng(3)
    wall = eager_ms * rng.lognormal(0, 0.05, 40)
    latency = pd.DataFrame({"mode": "eager", "method": "steady", "trial": np.arange(40) // 10,
                            "iteration": np.arange(40) % 10, "steps": 1, "gpu_ms": np.nan,
                            "wall_ms": wall})
    trial = pd.Series(wall).groupby(np.arange(40) // 10).mean().to_numpy()
    stats = pd.DataFrame([["eager", method, v.size, v.mean(), np.median(v), *np.percentile(v, [10, 90, 99]),
                           0.1, v.min(), v.max()] for method, v in (("steady_trial", trial),
                                                                     ("steady_wall", wall))],
                         columns=TABLE_FILES["stats"][1])
    config = PRESETS["seed"].replace(device="cpu", preset="custom", batch=64, d_in=512, hidden=512,
                                     d_out=128, profile=False, nvml=False, parity_steps=0)
    return RunResult(config=config, environment={"device_type": "cpu", "torch_version": "2.13.0",
                                                 "started_at": "2026-11-30T12:00:00"},
                     headline={"timing_method": "steady_trial"},
                     tables={"latency": coerce_table("latency", latency),
                             "stats": coerce_table("stats", stats),
                             "metrics": figure_table({"eager": {"median_ms": float(np.median(trial))},
                                                      "graph": {"median_ms": float("nan"),
                                                                "speedup": float("nan")}})},
                     notes=["device cpu: only the eager half ran"], complete=True).save(path)


def test_compare_shows_a_cpu_run_by_wall_time_beside_gpu_runs_and_any_number_of_runs(tmp_path):
    from conftest import write_synthetic_run

    runs = tmp_path / "runs"
    paths = [write_synthetic_run(runs / "gpu-a", seed=1, started_at="2026-11-30T10:00:00"),
             _cpu_run(runs / "cpu-b"),
             write_synthetic_run(runs / "gpu-c", seed=2, per_mode=100, trials=5,
                                 started_at="2026-11-30T11:00:00")]
    at = _app(runs)
    at.switch_page("views/runs.py").run()
    assert len(at.multiselect(key="compare_runs").value) == 2  # two at first
    at.multiselect(key="compare_runs").set_value([str(p.resolve()) for p in paths]).run()
    assert not at.exception, [e.value for e in at.exception]
    fig = json.loads(at.get_by_key("compare_medians").proto.spec)
    # a two-level axis: the run (its tag and timing method), then the mode with its median
    bars = {trace["name"]: trace["x"][0] for trace in fig["data"]}
    by_tag = {x.split("<br>")[0]: " ".join(x.split("<br>")[1:]) for xs in bars.values() for x in xs}
    assert set(by_tag) == {"A", "B", "C"}  # every run has its bar, the CPU run too
    cpu_tag = next(tag for tag, method in by_tag.items() if "wall clock" in method)
    assert by_tag[cpu_tag] == "steady state, per trial (wall clock)"
    assert {m for t, m in by_tag.items() if t != cpu_tag} == {"steady state, per trial (CUDA events)"}
    assert not [x for x in bars["graph"] if x.startswith(cpu_tag)]  # a CPU run has no graph bar
    said = _texts(at.caption)
    assert f"{cpu_tag} is a CPU run: no CUDA events, so it is compared by wall-clock time" in said
    summary = at.dataframe[1].value  # the comparison table (after the runs list)
    assert list(summary["tag"]) == ["A", "B", "C"]
    assert summary.set_index("tag").loc[cpu_tag, "device"] == "CPU"
    diff = _diff_table(at)
    assert list(diff.columns) == ["setting", "A", "B", "C"] and "device" in set(diff["setting"])
    at.toggle(key="compare_log").set_value(True).run()
    fig = json.loads(at.get_by_key("compare_medians").proto.spec)
    assert fig["layout"]["yaxis"]["type"] == "log"
    ticks = fig["layout"]["yaxis"]["ticktext"]  # written in full: "10, 20, 50", not "10, 2, 5"
    assert all(float(t.replace(",", "")) == v for t, v in zip(ticks, fig["layout"]["yaxis"]["tickvals"]))
    # the speedup overlay: the CPU run keeps its place on the axis and says why it has no marker
    at.radio(key="compare_chart").set_value("speedup").run()
    fig = json.loads(at.get_by_key("compare_speedups").proto.spec)
    assert fig["layout"]["xaxis"]["categoryarray"] == ["A", "B", "C"]
    assert cpu_tag not in {x for trace in fig["data"] for x in trace["x"]}
    notes = [a["text"] for a in fig["layout"]["annotations"] if a.get("x") == cpu_tag]
    assert notes and "a CPU run times eager only" in notes[0].replace("<br>", " ")
    assert f"{cpu_tag} has no marker: a CPU run times eager only" in _texts(at.caption)
    top = max(max(y + e for y, e in zip(_values(t["y"]), _values(t["error_y"]["array"])))
              for t in fig["data"])
    assert fig["layout"]["yaxis"]["range"][1] > top  # every marker and its CI inside the axis


def test_the_gpu_view_starts_at_the_first_measured_phase_and_zooms_to_the_phases_picked(
        monkeypatch, tmp_path):
    real = Path(__file__).resolve().parent.parent / "dashboard" / "sample_run"
    if not rundata.sample_run_available(real):
        pytest.skip("the bundled sample run is not in this checkout")
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", real)
    at = _app(tmp_path / "runs")
    at.switch_page("views/gpu.py").run()
    slider = at.select_slider(key="gpu_phase_range")
    assert slider.value == ("eager warm-up", "parity")  # the 5-s setup is left out at first
    layout = json.loads(at.get_by_key("gpu_nvml").proto.spec)["layout"]
    low, high = layout["xaxis"]["range"]
    phases = RunResult.load(real).table("phases")
    setup_end = float(phases.loc[phases["phase"] == "setup", "end_s"].max())
    pad = 0.03 * (high - low)  # the axis pads the phases' span by 2% on each side
    assert low >= setup_end - pad and high <= float(phases["end_s"].max()) + pad
    at.select_slider(key="gpu_phase_range").set_value(("eager timed", "graph timed")).run()
    layout = json.loads(at.get_by_key("gpu_nvml").proto.spec)["layout"]
    timed = phases[phases["phase"].isin(["eager timed", "graph timed"])]
    width = float(timed["end_s"].max() - timed["start_s"].min())
    assert layout["xaxis"]["range"][1] - layout["xaxis"]["range"][0] == pytest.approx(width * 1.04)
    assert at.dataframe[0].value["phase"].tolist()[0] == "setup"  # one row per phase name
    assert at.dataframe[0].value.set_index("phase").loc["eager timed", "blocks"] == 10


def test_kernels_compare_eager_with_graph_and_filter_by_name(shared_run):
    at = _app(shared_run.parent)
    at.switch_page("views/kernels.py").run()
    diff = at.dataframe[0].value
    assert list(diff.columns) == kernel_tables.KERNEL_DIFF_COLUMNS and set(diff["where"]) == {"both"}
    assert "8 kernels run in both modes" in _texts(at.caption)
    at.text_input(key="kernels_filter").input("GEMM").run()
    assert not at.exception
    assert set(at.dataframe[0].value["kernel"]) == {"sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_t",
                                                    "ampere_sgemm_64x32_sliced1x4_tn"}
    assert len(at.dataframe[1].value) == 4  # both modes' rows of the kernel table
    assert 'kernels match "GEMM"' in _texts(at.caption)
    at.text_input(key="kernels_filter").input("<nope>").run()
    assert "No kernel name contains that text." in _texts(at.info) and not at.exception


def test_the_article_is_named_and_quoted_where_its_lessons_are_shown(shared_run):
    from dashboard import article

    at = _app(shared_run.parent)
    at.switch_page("views/counters.py").run()
    assert f"The lessons come from {article.NAME}" in _texts(at.caption)
    quotes = _texts(at.markdown)
    for lesson in article.LESSONS.values():
        assert f"> {lesson}" in quotes
    assert "> -- the seed article" in quotes
    at.switch_page("views/latency.py").run()
    assert f"> {article.TIMING}" in _texts(at.markdown)
    text = Path("/work/shared/seed/cuda-graphs-article.txt")
    if text.exists():  # every quotation is the article's own words, and short
        source = text.read_text().replace("\u2019", "'")
        for quote in (*article.LESSONS.values(), article.COUNTER_FINDING, article.TIMING,
                      article.SPEED):
            assert quote.replace("\u2019", "'") in source and len(quote) < 200


# ----------------------------------------------------------------------------- issue 20


def _in_order(node, out=None) -> list[tuple[str, str | None, str | None]]:
    """Every element under ``node`` in the order drawn: (type, key, label)."""
    out = [] if out is None else out
    for child in getattr(node, "children", {}).values():
        out.append((child.type, getattr(child, "key", None), getattr(child, "label", None)))
        _in_order(child, out)
    return out


def test_the_run_button_comes_before_the_settings_and_the_sidebar_labels_fit(tmp_path):
    _cpu_run(tmp_path / "runs" / "20261201-155821-custom-fp32-cpu-ab12")
    at = _app(tmp_path / "runs")
    assert not at.exception
    drawn = _in_order(at.sidebar)
    keys = [key for _, key, _ in drawn]
    first_settings = next(i for i, (kind, _, _) in enumerate(drawn) if kind == "expander")
    # device and preset, then Run, then the preset's caption: the button is on the first screen
    # (issue 20: it was 1,400 px down, under every setting); the settings and the runs folder
    # follow it
    assert keys.index("cfg_device") < keys.index("cfg_preset") < keys.index("run_button") \
        < first_settings < keys.index(state.RUNS_DIR)
    assert drawn[first_settings][2] == "Model"
    # short labels that fit the boxes; each view's header says the rest
    showing = at.sidebar.selectbox(key=state.OPEN_RUN)
    assert showing.format_func(showing.value) == "20261201-155821-custom-fp32-cpu-ab12"
    assert at.sidebar.selectbox(key="cfg_device").format_func("cpu") == "CPU (eager only)"
    short = state.short_run_label({state.SAMPLE: "Bundled sample run · NVIDIA H200 · 2026-12-01",
                                   "/r/x": "x · CPU · 2026-12-01 15:58 · incomplete"})
    assert short(state.SAMPLE) == "Sample run · H200 · 2026-12-01" and short("/r/x") == "x · incomplete"
    # the preset's caption describes the values the controls hold (the CPU's small step)
    caption = _texts(at.sidebar.caption)
    assert "N=64, 512 -> 512 -> 128" in caption and "200 eager steps" in caption
    assert "N=640" not in caption and "4096" not in caption


def test_a_cpu_runs_latency_view_says_wall_clock_and_shows_only_supported_percentiles(tmp_path):
    _cpu_run(tmp_path / "runs" / "cpu-b")
    at = _app(tmp_path / "runs")
    at.switch_page("views/latency.py").run()
    assert not at.exception
    # issue 28: after saying a CPU run has no such pitfall, the page drew the article's timing
    # beside "the true timing" and said the true timings wait for the GPU
    assert "latency_methods" not in {getattr(e, "key", None) for e in at.get("plotly_chart")}
    assert "wait for the GPU" not in _texts(at.markdown)
    assert "The article's timing beside the true timing" not in _texts(at.subheader)
    assert "How this run was timed" in _texts(at.subheader)
    percentiles = at.dataframe[0].value
    assert percentiles["count"].tolist() == [40]
    # 40 steps: p1, p99 (100 needed) and p99.9 (1,000) are not shown; p10 and p90 are
    assert not {"p1_ms", "p99_ms", "p99_9_ms"} & set(percentiles.columns)
    assert {"p10_ms", "p50_ms", "p90_ms"} <= set(percentiles.columns)
    assert "p99.9 needs 1,000 samples" in _texts(at.caption)
    timing = at.dataframe[1].value
    assert "CUDA" not in " ".join(timing["label"])
    stats = at.dataframe[2].value.set_index("method")
    assert np.isnan(stats.at["steady_trial", "p99_ms"])  # 4 trials: no p99
    at.switch_page("views/overview.py").run()
    medians = json.loads(at.get_by_key("overview_medians").proto.spec)
    assert medians["layout"]["xaxis"]["ticktext"][0].startswith("eager<br><b>")  # under the bar
    assert "text" not in medians["data"][0]


def test_the_kernels_page_tells_kernels_apart_and_names_their_operator(monkeypatch, tmp_path):
    """The bundled sample as a run recorded before kernels.csv had the operator column (that
    column dropped from a copy): five vectorized_elementwise_kernel rows are named apart, and
    each kernel's operator is read from the run's trace."""
    import json
    import shutil

    from profiler_core.storage.outputs import write_manifest

    real = Path(__file__).resolve().parent.parent / "dashboard" / "sample_run"
    if not rundata.sample_run_available(real):
        pytest.skip("the bundled sample run is not in this checkout")
    older = tmp_path / "older_sample"
    shutil.copytree(real, older)
    kernels = pd.read_csv(older / "kernels.csv")
    kernels.drop(columns=["operator"], errors="ignore").to_csv(older / "kernels.csv", index=False)
    write_manifest(older, "run", json.loads((older / "manifest.json").read_text())["files"])
    monkeypatch.setattr(rundata, "SAMPLE_RUN_DIR", older)
    at = _app(tmp_path / "runs")
    at.switch_page("views/kernels.py").run()
    assert not at.exception, [e.value for e in at.exception]
    diff = at.dataframe[0].value
    vectorized = diff[diff["kernel"].str.startswith("vectorized_elementwise_kernel")]
    assert len(vectorized) >= 5 and vectorized["kernel"].nunique() >= 4  # no longer five alike
    assert "vectorized_elementwise_kernel<FillFunctor>" in set(vectorized["kernel"])
    operators = diff.set_index("kernel")["operator"]
    assert operators["reduce_kernel<MeanOps>"] == "aten::mean"
    assert (diff["operator"] != "").all()
    table = at.dataframe[1].value
    assert set(table.loc[table["mode"] == "graph", "operator"]) <= {"CUDA graph replay",
                                                                     "aten::fill_"}
    said = _texts(at.caption)
    assert "under the profiler" in said and "read from its traces" in said
    titles = [json.loads(e.proto.spec)["layout"]["title"]["text"] for e in at.get("plotly_chart")]
    assert all(title.startswith("Under the profiler") for title in titles)
    at.text_input(key="kernels_filter").input("aten::mean").run()  # found by its operator
    assert set(at.dataframe[0].value["kernel"]) == {"reduce_kernel<MeanOps>"}
