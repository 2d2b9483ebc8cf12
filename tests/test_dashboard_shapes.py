"""The sidebar's control for steps whose shapes change, through AppTest: off, a run is given no
--vary; on, the command line's exact --vary/--buckets text for a uniform, a log-normal, a listed
and an uploaded distribution; bad values and bad lengths files refused before anything runs, with
what to change, the app still serving; an uploaded file kept only in the tool's upload folder, never
over another file; and one real run from the sidebar that reads an uploaded lengths file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import write_synthetic_run
from streamlit.testing.v1 import AppTest

from dashboard import controls, runpanel, shape_controls, state, uploads
from profiler_core.orchestration.command import run_argv
from profiler_core.orchestration.launcher import Launcher
from profiler_core.spec.shapes import parse_distribution
from profiler_core.storage.results import RunResult

pytestmark = pytest.mark.usefixtures("fresh_app_state")
APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"


def _texts(elements) -> str:
    """What the elements say: ui.escape_md's backslashes and word joiners removed."""
    return re.sub(r"\\(.)", r"\1", "\n".join(str(e.value) for e in elements)).replace("\u2060", "")


@pytest.fixture
def started(monkeypatch, fake_worker, tmp_path):
    """The command line of every run the Run button starts (the server's launcher, running the
    fake worker in its place), and the app on an empty runs folder."""
    source = write_synthetic_run(tmp_path / "source-run")
    argvs: list[list[str]] = []

    class RecordingRuns(Launcher):
        def start(self, config, out_dir, *, overwrite=False, **options):
            argvs.append(run_argv(config, out_dir, overwrite=overwrite))
            return self.start_command(fake_worker("done", out_dir, source), out_dir, **options)

    monkeypatch.setattr(runpanel, "run_launcher", lambda: RecordingRuns(warm=False))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(tmp_path / "runs")
    at.run()
    return at, argvs


def _option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def _run(at: AppTest, argvs: list[list[str]]) -> list[str]:
    assert not at.exception and not at.sidebar.button(key="run_button").disabled, \
        _texts(at.sidebar.error)
    at.sidebar.button(key="run_button").click().run()
    assert at.session_state[state.JOB].wait(30)
    assert len(argvs) == 1
    return argvs[0]


def _turn_on(at: AppTest, preset: str = "transformer") -> None:
    at.sidebar.selectbox(key="cfg_preset").select(preset).run()
    at.sidebar.toggle(key=shape_controls.ON).set_value(True).run()
    assert not at.exception


def test_off_by_default_a_run_is_given_no_vary(started):
    at, argvs = started
    assert at.sidebar.toggle(key=shape_controls.ON).value is False
    assert "Changing shapes" in [e.label for e in at.sidebar.expander]
    assert shape_controls.KIND not in {w.key for w in at.sidebar.selectbox}  # off: one toggle
    argv = _run(at, argvs)
    assert "--vary" not in argv and _option(argv, "--buckets") == "pow2"  # the default


def test_a_uniform_distribution_is_given_as_the_command_lines_text(started):
    at, argvs = started
    _turn_on(at)
    assert at.sidebar.selectbox(key=shape_controls.DIMENSION).options == ["batch", "seq_len"]
    assert at.sidebar.selectbox(key=shape_controls.DIMENSION).value == "seq_len"
    at.sidebar.number_input(key=shape_controls.LOW).set_value(16)
    at.sidebar.number_input(key=shape_controls.HIGH).set_value(48).run()
    assert "Given to the run as --vary seq_len=uniform:16:48 --buckets pow2" in _texts(
        at.sidebar.caption)
    argv = _run(at, argvs)
    assert (_option(argv, "--vary"), _option(argv, "--buckets")) == ("seq_len=uniform:16:48", "pow2")
    assert _option(argv, "--preset") == "custom"  # varying shapes is not the preset's own step


def test_a_lognormal_distribution_with_quantile_buckets(started):
    at, argvs = started
    _turn_on(at)
    at.sidebar.selectbox(key=shape_controls.KIND).select("lognormal").run()
    at.sidebar.number_input(key=shape_controls.MEDIAN).set_value(24.5)
    at.sidebar.number_input(key=shape_controls.SIGMA).set_value(0.4)
    at.sidebar.number_input(key=shape_controls.LOG_MAX).set_value(64)
    at.sidebar.selectbox(key=shape_controls.BUCKETS).select("quantiles").run()
    at.sidebar.number_input(key=shape_controls.QUANTILES).set_value(3).run()
    argv = _run(at, argvs)
    assert _option(argv, "--vary") == "seq_len=lognormal:24.5:0.4:64"
    assert _option(argv, "--buckets") == "quantiles:3"


def test_a_weighted_list_of_batch_sizes_with_given_buckets(started):
    at, argvs = started
    _turn_on(at, preset="seed")  # the MLP: only its batch can vary
    assert at.sidebar.selectbox(key=shape_controls.DIMENSION).options == ["batch"]
    at.sidebar.selectbox(key=shape_controls.KIND).select("list").run()
    at.sidebar.text_input(key=shape_controls.LIST).input("8:3, 16:1, 24").run()
    at.sidebar.selectbox(key=shape_controls.BUCKETS).select("given").run()
    at.sidebar.text_input(key=shape_controls.GIVEN).input("16, 32").run()
    argv = _run(at, argvs)
    assert (_option(argv, "--vary"), _option(argv, "--buckets")) == ("batch=8:3,16:1,24", "16,32")


def test_the_dimension_follows_the_workload(started):
    """seq_len chosen for the transformer becomes batch when the MLP is chosen (it has no
    sequence), and the shapes' settings are kept while the section is off."""
    at, _ = started
    _turn_on(at)
    at.sidebar.number_input(key=shape_controls.HIGH).set_value(99).run()
    at.sidebar.selectbox(key="cfg_preset").select("seed").run()
    assert at.sidebar.selectbox(key=shape_controls.DIMENSION).value == "batch"
    assert not at.sidebar.error
    at.sidebar.toggle(key=shape_controls.ON).set_value(False).run()
    at.sidebar.number_input(key="cfg_seed").set_value(3).run()
    at.sidebar.toggle(key=shape_controls.ON).set_value(True).run()
    assert at.sidebar.number_input(key=shape_controls.HIGH).value == 99


@pytest.mark.parametrize("control, value, said", [
    (shape_controls.HIGH, 10, "uniform's high (10) is below its low (64)"),
    (shape_controls.LIST, "128,abc", "unknown distribution '128,abc'"),
    (shape_controls.LIST, "128:0", "a weight must be a positive number"),
    (shape_controls.LIST, "64,64", "a listed value is given twice"),
    (shape_controls.GIVEN, "128,256", "the largest bucket (256) is below the largest value the "
                                      "distribution gives (512)"),
    (shape_controls.HIGH, 100_000, "the largest seq_len a step is padded to, 131,072, is "
                                   "refused: seq_len must be"),
])
def test_a_bad_value_is_refused_under_its_control_and_nothing_runs(started, control, value, said):
    at, argvs = started
    _turn_on(at)
    if control == shape_controls.LIST:
        at.sidebar.selectbox(key=shape_controls.KIND).select("list").run()
    if control == shape_controls.GIVEN:
        at.sidebar.selectbox(key=shape_controls.BUCKETS).select("given").run()
    widget = (at.sidebar.number_input(key=control) if isinstance(value, int) else
              at.sidebar.text_input(key=control))
    widget.set_value(value).run()
    assert not at.exception
    errors = _texts(at.sidebar.error)
    field = "Buckets" if control == shape_controls.GIVEN else "Varying dimension"
    assert f"Run is disabled: {field} was refused" in errors and f"Refused: {said}" in errors
    assert [e.label for e in at.sidebar.expander if e.proto.expanded] == ["Model", "Changing shapes"]
    assert at.sidebar.button(key="run_button").disabled
    assert state.JOB not in at.session_state and argvs == []
    at.sidebar.toggle(key=shape_controls.ON).set_value(False).run()  # off again: it may run
    assert not at.sidebar.error and not at.sidebar.button(key="run_button").disabled


def _upload(at: AppTest, name: str, data: bytes) -> None:
    at.sidebar.selectbox(key=shape_controls.KIND).select("file").run()
    at.file_uploader(key=shape_controls.UPLOAD).set_value((name, data, "text/plain")).run()
    assert not at.exception


def _kept_files() -> list[Path]:
    return sorted(p for p in state.upload_store().root.rglob("*") if p.is_file())


def test_an_uploaded_lengths_file_is_kept_by_the_tool_and_given_as_file_path(started):
    at, argvs = started
    _turn_on(at)
    at.sidebar.selectbox(key=shape_controls.KIND).select("file").run()
    assert "no lengths file is uploaded" in _texts(at.sidebar.error)  # chosen, none yet
    assert at.sidebar.button(key="run_button").disabled
    data = b"# observed lengths\n12\n40\n\n300\n40\n"
    _upload(at, "../my lengths.txt", data)
    assert "Using ../my lengths.txt: 4 lengths, 3 distinct, from 12 to 300." in _texts(
        at.sidebar.caption)
    argv = _run(at, argvs)
    vary = _option(argv, "--vary")
    assert vary is not None and vary.startswith("seq_len=file:")
    path = Path(vary.partition("file:")[2])
    # in this session's folder of the server's upload folder, under a plain name, as uploaded
    assert path.name == "my-lengths.txt" and path.read_bytes() == data
    assert path.parent.parent == at.session_state[state.UPLOADS].dir
    assert path.parent.name.startswith(uploads.LENGTHS_PREFIX)
    assert parse_distribution(f"file:{path}").values == (12, 40, 300)  # as the run reads it
    # the same name uploaded again: a new folder, the first file untouched
    _upload(at, "../my lengths.txt", b"7\n")
    again = Path(str(at.session_state[shape_controls.LENGTHS].path))
    assert again != path and again.read_bytes() == b"7\n" and path.read_bytes() == data


@pytest.mark.parametrize("data, said", [
    (b"", "holds no length"),
    (b"\n# only a comment\n", "holds no length"),
    (b"128\nabc\n", "line 2 of lengths.txt must be a whole number; got 'abc'"),
    (b"128\n-5\n", "line 2 of lengths.txt must be a whole number"),
    (b"128\n10000000\n", "line 2 of lengths.txt must be from 1 to 1,048,576"),
    (b"\xff\xfe\x00", "the lengths file lengths.txt is not text"),
    (b"1\n" * (8 * 2**20 + 1), "is 16.0 MiB, over 16 MiB"),
])
def test_a_bad_lengths_file_is_refused_and_not_kept(started, data, said):
    at, argvs = started
    _turn_on(at)
    _upload(at, "lengths.txt", data)
    errors = _texts(at.sidebar.error)
    assert "Run is disabled: Varying dimension was refused" in errors and said in errors
    assert at.sidebar.button(key="run_button").disabled and argvs == []
    assert _kept_files() == []
    _upload(at, "lengths.txt", b"16\n32\n")  # a good file after it: the app kept serving
    assert not at.sidebar.error and _kept_files()


def test_an_own_steps_dimension_is_typed_and_checked_as_the_command_line_checks_it(
        started, monkeypatch):
    monkeypatch.setenv(controls.USER_CODE_ENV, "1")
    at, argvs = started
    at.run()
    at.sidebar.text_input(key=controls.key(controls.USER_WORKLOAD)).input(
        "tests.own_steps:shaped").run()
    at.sidebar.toggle(key=shape_controls.ON).set_value(True).run()
    assert shape_controls.DIMENSION not in {w.key for w in at.sidebar.selectbox}
    at.sidebar.text_input(key=shape_controls.OWN_DIMENSION).input("2x").run()
    assert "Refused: '2x' is not a dimension's name" in _texts(at.sidebar.error)
    at.sidebar.text_input(key=shape_controls.OWN_DIMENSION).input("seq_len").run()
    argv = _run(at, argvs)
    assert _option(argv, "--workload") == "tests.own_steps:shaped"
    assert _option(argv, "--vary") == "seq_len=uniform:64:512"


def test_a_real_run_from_the_sidebar_reads_the_uploaded_lengths_file(monkeypatch, tmp_path):
    """The real worker (`python -m profiler_core run --device cpu`) given the uploaded file: its
    strategies run on a sequence drawn from the file's lengths, recorded in the run."""
    monkeypatch.setenv(controls.USER_CODE_ENV, "1")
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.session_state[state.RUNS_DIR] = str(tmp_path / "runs")
    at.run()
    at.sidebar.text_input(key=controls.key(controls.USER_WORKLOAD)).input(
        "tests.own_steps:shaped").run()
    at.sidebar.number_input(key=controls.key("eager_iters")).set_value(12)
    at.sidebar.number_input(key=controls.key("trials")).set_value(2).run()
    at.sidebar.toggle(key=shape_controls.ON).set_value(True).run()
    at.sidebar.text_input(key=shape_controls.OWN_DIMENSION).input("seq_len").run()
    _upload(at, "lengths.txt", b"3\n9\n9\n17\n")
    assert not at.sidebar.button(key="run_button").disabled, _texts(at.sidebar.error)
    at.sidebar.button(key="run_button").click().run()
    job = at.session_state[state.JOB]
    assert job.wait(600)  # a safety net only
    snap = job.snapshot()
    assert snap.status == "done", (snap.message, snap.stderr_tail)
    run = RunResult.load(snap.out_dir)
    assert run.config.vary.startswith("seq_len=file:") and run.config.buckets == "pow2"
    steps = run.table("shape_steps")
    assert set(steps["shape"]) <= {3, 9, 17} and len(set(steps["shape"])) > 1
    assert run.headline["shapes_buckets"] == "4,8,16,32"  # from the smallest length, 3
