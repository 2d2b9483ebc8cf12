"""What a new user meets (issue 20), in the dashboard: the settings that applied to a run (config
table, the compare diff, the Counters page on a CPU run), one preset label everywhere, the method
captions' wording, and a run's zip download that works or says why."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import analysis, run_facts, state
from profiler_core.orchestration.command import config_to_argv
from profiler_core.spec import fields
from profiler_core.spec.config import PRESETS, RunConfig

pytestmark = pytest.mark.usefixtures("fresh_app_state")
APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
GRAPH_ONLY = ("capture_iters", "replays", "profile", "profile_iters", "nvml", "nvml_interval_ms",
              "parity_steps")
OTHER_SIZES = ("heads", "seq_len", "channels", "image_size")
SMALL_CPU = fields.small_cpu_step(PRESETS["seed"])  # what `run --device cpu` and the sidebar run


def _app(runs_dir: Path) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(runs_dir)
    return at.run()


def _texts(elements) -> str:
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


def _settings(table) -> dict[str, str]:
    return dict(zip(table["setting"], table["value"]))


# ----------------------------------------------------------------------------- item 4: settings


def test_the_config_table_lists_the_settings_that_applied():
    cpu = _settings(run_facts.config_table(SMALL_CPU))
    for name in (*GRAPH_ONLY, *OTHER_SIZES):
        assert name not in cpu, name
    assert (cpu["batch"], cpu["d_in"], cpu["eager_iters"], cpu["modes"]) == ("64", "512", "200",
                                                                             "eager")
    assert cpu["trials"] == "10 (auto)" and cpu["device"] == "cpu"
    mlp_on_gpu = _settings(run_facts.config_table(PRESETS["seed"]))
    assert mlp_on_gpu["replays"] == "200" and mlp_on_gpu["eager_iters"] == "200 (auto)"
    assert mlp_on_gpu["modes"] == "eager, graph"
    assert not set(OTHER_SIZES) & set(mlp_on_gpu)
    transformer = _settings(run_facts.config_table(PRESETS["transformer"]))
    assert {"heads", "seq_len", "hidden", "dropout1"} <= set(transformer)
    assert not {"d_in", "channels", "image_size", "dropout2"} & set(transformer)
    conv = _settings(run_facts.config_table(PRESETS["conv"]))
    assert {"channels", "image_size", "dropout2"} <= set(conv)
    assert not {"d_in", "hidden", "heads", "seq_len", "dropout1"} & set(conv)
    own = _settings(run_facts.config_table(PRESETS["seed"].replace(workload="mine.step:build")))
    assert not {"batch", "d_in", "hidden", "d_out", "hidden_layers", "dropout1"} & set(own)
    compiled = SMALL_CPU.replace(modes=("eager", "graph", "graphed_callables", "compile"))
    assert _settings(run_facts.config_table(compiled))["modes"] == "eager, compile"


def test_the_cpu_modes_are_the_registrys():
    from profiler_core.engine.modes import REGISTRY
    from profiler_core.spec.modes import CPU_MODES

    assert set(CPU_MODES) == {name for name, spec in REGISTRY.items() if not spec.cuda_only}


def test_the_compare_diff_compares_the_values_the_runs_used():
    explicit = SMALL_CPU.replace(eager_iters=200, trials=None)
    auto = SMALL_CPU.replace(eager_iters=None, replays=200)  # 200 eager steps, automatically
    assert run_facts.configs_diff({"A": explicit, "B": auto}).empty  # both ran 200
    gpu = PRESETS["seed"].replace(batch=64, d_in=512, hidden=512, d_out=128)
    diff = run_facts.configs_diff({"A": SMALL_CPU, "B": gpu}).set_index("setting")
    assert diff.loc["replays"].tolist() == [run_facts.NOT_USED, "200"]
    assert diff.loc["modes"].tolist() == ["eager", "eager, graph"]
    assert "eager_iters" not in diff.index and "None" not in diff.to_string()
    lesson = run_facts.configs_diff({"a": PRESETS["seed"], "b": PRESETS["lesson3"]})
    assert set(lesson["setting"]) == {"capture_iters", "replays", "eager_iters", "trials", "preset"}
    assert lesson.set_index("setting").loc["eager_iters"].tolist() == ["200", "30"]


def _cpu_run_folder(runs: Path, name: str, config: RunConfig) -> Path:
    """A real CPU run of ``config`` through the command line, as the dashboard's worker runs it."""
    from profiler_core.cli.main import main

    argv = ["run", "--out", str(runs / name), "--progress", "none", *config_to_argv(config)]
    assert main(argv) == 0
    return runs / name


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory) -> Path:
    """Two real CPU runs of a tiny step: eager steps automatic, and the same number set by hand."""
    runs = tmp_path_factory.mktemp("runs")
    tiny = SMALL_CPU.replace(batch=8, d_in=16, hidden=16, d_out=4, eager_iters=None, replays=20,
                             trials=4)
    _cpu_run_folder(runs, "cpu-auto", tiny)
    _cpu_run_folder(runs, "cpu-set", tiny.replace(eager_iters=20))
    return runs


def test_a_cpu_runs_overview_counters_and_compare_show_what_ran(cpu_runs):
    at = _app(cpu_runs)
    at.switch_page("views/runs.py").run()
    at.multiselect(key="compare_runs").set_value(
        [str((cpu_runs / name).resolve()) for name in ("cpu-auto", "cpu-set")]).run()
    assert not at.exception
    assert "All these runs used the same settings." in _texts(at.caption)  # 20 eager steps each
    at.session_state[state.OPEN_RUN] = str((cpu_runs / "cpu-auto").resolve())
    at.switch_page("views/overview.py").run()
    table = next(frame.value for frame in at.dataframe
                 if list(frame.value.columns) == ["setting", "value"])
    shown = _settings(table)
    assert not set(GRAPH_ONLY + OTHER_SIZES) & set(shown)
    assert shown["eager_iters"] == "20 (auto)" and shown["modes"] == "eager"
    at.switch_page("views/counters.py").run()
    assert not at.exception
    words = _texts(at.markdown)
    assert "side stream" not in words and "replays)" not in words
    assert "This run was on the CPU, which times the eager step only" in words
    assert "(3 warm-up, counted: yes; 20 eager steps)" in words
    lessons = at.dataframe[0].value
    assert list(lessons["phase"]) == ["initial", "after_warmup", "eager_after_timed"]
    assert "**after_warmup**: Warm-up runs the step eagerly, so the counter" in words


# ----------------------------------------------------------------------------- item 5: one label


# The H200 sample as first recorded: the seed preset with dtype bf16 changed, and its summary
# says it started from seed (the bundled sample, re-recorded since, says custom)
SAMPLE = Path(__file__).resolve().parent / "data" / "h200_schema2_sample"
BUNDLED = Path(__file__).resolve().parent.parent / "dashboard" / "sample_run"


@pytest.mark.parametrize("sample", [SAMPLE, BUNDLED], ids=["schema2", "bundled"])
def test_the_sample_has_one_label_in_the_index_the_runs_list_and_the_dashboard(tmp_path, capsys,
                                                                               sample):
    """The samples run the seed preset's step in bf16 (the bundled one recorded as "custom",
    with every mode). Issue 20 labelled them custom everywhere, while the README calls the sample
    the seed step in bf16 (issue 28): every reader now names the step it runs, beside its
    precision: the index, the runs list, the sidebar, the header and the config table."""
    import shutil

    from dashboard import rundata
    from profiler_core.cli.main import main
    from profiler_core.spec.config import preset_label, preset_text
    from profiler_core.storage import index, index_query
    from profiler_core.storage.results import RunResult

    runs = tmp_path / "runs"
    shutil.copytree(sample, runs / "sample")
    config = RunResult.load(runs / "sample").config
    assert config.dtype == "bf16" and preset_label(config) == "seed"
    text = preset_text(config)
    assert text.startswith("seed step in bf16")
    assert main(["index", "--runs", str(runs)]) == 0
    header, row = [line.split() for line in capsys.readouterr().out.splitlines()[1:3]]
    assert row[header.index("preset") + 1] == "seed"  # "started" takes two words
    assert row[header.index("dtype") + 1] == "bf16"
    with index.open_index(runs) as ix:
        assert [r["folder"] for r in ix.runs([index_query.parse_where("preset=seed")])] == ["sample"]
        assert ix.runs([index_query.parse_where("preset=custom")]) == []
    assert list(rundata.list_runs(runs)["preset"]) == ["seed"]
    assert "seed bf16" in rundata.run_label("sample", {}, config)
    at = _app(runs)
    at.session_state[state.OPEN_RUN] = str((runs / "sample").resolve())
    at.switch_page("views/overview.py").run()
    assert not at.exception
    header = next(line for line in _texts(at.caption).splitlines() if line.startswith("Run "))
    assert header.endswith(f"· {text}") and "custom" not in header
    table = next(frame.value for frame in at.dataframe
                 if list(frame.value.columns) == ["setting", "value"])
    assert _settings(table)["preset"] == text


def test_a_run_recorded_by_this_version_keeps_its_label_everywhere():
    from profiler_core.cli import parser as cli
    from profiler_core.spec.config import preset_label

    for argv, recorded, label in ((["--preset", "seed", "--dtype", "bf16"], "custom", "seed"),
                                  (["--preset", "seed", "--batch", "64"], "custom", "custom"),
                                  (["--preset", "lesson3"], "lesson3", "lesson3"),
                                  (["--preset", "seed", "--device", "cpu"], "seed", "seed")):
        config = cli.config_from_args(cli.parse(["run", "--out", "x", *argv]))
        # the summary records the preset the values are (custom once changed); every reader
        # names the step they run, beside the precision
        assert (config.preset, preset_label(config)) == (recorded, label)


# ----------------------------------------------------------------------------- item 6: captions


def test_method_captions_read_as_sentences_and_keep_cuda_in_capitals(tmp_path):
    from conftest import write_synthetic_run

    for method in analysis.METHOD_MEANING:
        caption = analysis.method_caption(method)
        assert caption[0].isupper() and caption.endswith(".") and "true" not in caption
    assert analysis.method_caption("steady_event") == (
        "Steady state, every step (CUDA events): the same steady-state steps one by one, GPU time "
        "between CUDA events recorded after consecutive steps (a graph's batch copy included).")
    assert analysis.method_caption("steady_trial", cpu=True).startswith(
        "Steady state, per trial (wall clock): steps queued back to back")
    run = write_synthetic_run(tmp_path / "runs" / "gpu", started_at="2026-11-30T10:00:00")
    at = _app(run.parent)
    at.session_state[state.OPEN_RUN] = str(run.resolve())
    at.switch_page("views/overview.py").run()
    said = _texts(at.caption)
    assert ("timed by steady state, per trial (CUDA events): steps queued back to back as in "
            "training") in said
    assert "true, the headline" not in said and "(CUDA events): true" not in said
    at.switch_page("views/latency.py").run()
    at.radio(key="latency_timing").set_value("steady_event").run()
    said = _texts(at.caption)
    assert "GPU time between CUDA events recorded after consecutive steps" in said
    assert "gpu time between cuda events" not in said
    timing = next(frame.value for frame in at.dataframe if "meaning" in frame.value.columns)
    meaning = timing.set_index("method")["meaning"]
    assert meaning["steady_trial"].startswith("true, the headline: steps queued")
    assert meaning["article_no_sync"] == "wrong: CPU enqueue time only; the GPU may still be working"


# ----------------------------------------------------------------------------- item 7: the zip


def test_the_run_zip_is_built_when_its_button_is_drawn_and_a_failure_is_said(tmp_path,
                                                                             monkeypatch):
    """A deferred download once did nothing after a rerun (a sweep finishing: "Deferred file ...
    not found"). The zip, summary and traces are handed to Streamlit as bytes when drawn, the
    same bytes on every rerun (so the same file id); a zip that cannot be built says why."""
    import io
    import zipfile

    from conftest import write_synthetic_run
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

    from dashboard import rundata

    served: list[tuple[str, bytes]] = []
    real = MemoryMediaFileStorage.load_and_get_id

    def record(self, path_or_data, mimetype, kind, filename=None):
        served.append((filename, path_or_data))
        return real(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", record)
    run = write_synthetic_run(tmp_path / "runs" / "gpu-run", started_at="2026-11-30T10:00:00")
    at = _app(run.parent)
    at.session_state[state.OPEN_RUN] = str(run.resolve())
    at.switch_page("views/overview.py").run()
    assert not at.exception
    zips = [data for name, data in served if name == "gpu-run.zip"]
    assert zips and isinstance(zips[-1], bytes)
    with zipfile.ZipFile(io.BytesIO(zips[-1])) as archive:
        assert "gpu-run/summary.json" in archive.namelist()
    summaries = [data for name, data in served if name == "gpu-run-summary.json"]
    assert json.loads(summaries[-1])["config"]["preset"] == "seed"
    at.run()  # a rerun (a sweep finishing, a fragment) offers the very same bytes again
    again = [data for name, data in served if name == "gpu-run.zip"]
    assert len(again) > len(zips) and again[-1] == zips[-1]

    def gone(path, root=None):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(rundata, "run_zip_bytes", gone)
    (run / "summary.json").touch()  # a new stamp: the cached zip is not reused
    at.run()
    assert not at.exception
    said = _texts(at.error)
    assert "Download run (zip): not available: No such file or directory" in said
    assert "Download run (zip)" not in {button.label for button in at.download_button}
    assert "Download summary.json" in {button.label for button in at.download_button}
