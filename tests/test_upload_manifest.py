"""An uploaded run's folder is the tool's own by the rule any run's is (a manifest of its files
with their sizes and content hashes, written by ``results.write_run_folder``), and the dashboard
reads the core's declarations instead of copies of them: the table check, the timing-method
labels, the timeout default and the preset rule."""

from __future__ import annotations

import io
import json
import os
import zipfile

import pytest
from conftest import write_synthetic_run

from dashboard import controls, rundata, uploads
from dashboard.analysis import timing
from profiler_core.cli import parser
from profiler_core.cli.main import format_summary
from profiler_core.spec.config import (
    PRESETS,
    RUN_TIMEOUT_S,
    changed_from_preset,
    changed_values,
    preset_label,
)
from profiler_core.spec.errors import RunFormatError
from profiler_core.spec.metrics import SHOWN_METHODS, STEP_METHOD_LABELS
from profiler_core.storage import tablelimits
from profiler_core.storage.outputs import MANIFEST_FILE, NotOwned, file_sha256
from profiler_core.storage.results import RUN_KIND, RunResult, run_files, write_run_folder


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    return write_synthetic_run(tmp_path_factory.mktemp("upload") / "runs" / "synthetic-seed")


def test_an_uploaded_run_has_the_manifest_of_any_run(saved_run, tmp_path):
    store = uploads.UploadStore(base=tmp_path / "store")
    try:
        session = store.session()  # its folder lives as long as the session object
        run, _ = session.add(rundata.run_zip_bytes(saved_run), "run.zip")
        manifest = json.loads((run.path / MANIFEST_FILE).read_text())
        files = sorted(p.name for p in run.path.iterdir() if p.name != MANIFEST_FILE)
        assert manifest["kind"] == RUN_KIND and sorted(manifest["files"]) == files
        assert all(manifest["sha256"][name] == file_sha256(run.path / name) for name in files)
        assert all(manifest["files"][name] == (run.path / name).stat().st_size for name in files)
        owned = run_files(run.path)  # the rule --overwrite applies to a run folder
        assert sorted(owned.files) == sorted([*files, MANIFEST_FILE])
        with open(run.path / "stats.csv", "a", encoding="utf-8") as handle:
            handle.write("\n")
        with pytest.raises(NotOwned, match="was changed after this tool wrote it"):
            run_files(run.path)
    finally:
        store.close()


def test_an_upload_manifest_lists_only_what_the_run_writer_wrote(saved_run, tmp_path):
    """A manifest.json inside the zip is never written: the folder's manifest is the writer's."""
    files = {f"run/{p.name}": p.read_bytes() for p in saved_run.iterdir()}
    files["run/manifest.json"] = json.dumps({"tool": "profiler_core", "kind": "run",
                                             "manifest_version": 1, "files": {}, "sha256": {},
                                             "folders": []})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    dest = rundata.extract_run_zip(buffer.getvalue(), tmp_path / "dest")
    listed = json.loads((dest / MANIFEST_FILE).read_text())["files"]
    assert set(listed) == {p.name for p in saved_run.iterdir()} - {MANIFEST_FILE}
    assert RunResult.load(dest).complete


def test_the_run_writer_leaves_nothing_when_it_refuses(tmp_path):
    (tmp_path / "taken").mkdir()

    def summary_only(folder):
        (folder / "summary.json").write_text("{}")
        return ["summary.json"]

    with pytest.raises(FileExistsError):
        write_run_folder(tmp_path / "taken", summary_only)
    assert list((tmp_path / "taken").iterdir()) == []

    def a_script_too(folder):
        (folder / "notes.py").write_text("print('hi')")
        return ["notes.py"]

    with pytest.raises(ValueError, match="not the name of a run's file: notes.py"):
        write_run_folder(tmp_path / "new", a_script_too)
    assert sorted(os.listdir(tmp_path)) == ["taken"]  # no folder, no staging folder left


def test_an_uploaded_table_is_checked_by_the_core_reader(saved_run, tmp_path):
    """The upload's check is ``tablelimits.check_table_stream`` (a NUL byte is refused there as
    when a run folder is opened), in an upload's words."""
    files = {f"run/{p.name}": p.read_bytes() for p in saved_run.iterdir()}
    files["run/nvml.csv"] = files["run/nvml.csv"] + b"\x00" * 100
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    with pytest.raises(RunFormatError) as caught:
        rundata.extract_run_zip(buffer.getvalue(), tmp_path / "dest")
    assert caught.value.message == ("nvml.csv holds NUL bytes, so it is not a table written by "
                                    "this tool")
    assert caught.value.hint == "upload a zip written by this tool"
    assert not (tmp_path / "dest").exists()
    headers = []
    tablelimits.check_table_stream(io.BytesIO(b"a,b\n1,2\n"), "t.csv", 1, on_header=headers.append)
    tablelimits.check_table_stream(io.BytesIO(b"a,b"), "t.csv", 1, on_header=headers.append)
    assert headers == [b"a,b", b"a,b"]
    with pytest.raises(tablelimits.TooManyRows, match="t.csv has more than 1 rows"):
        tablelimits.check_table_stream(io.BytesIO(b"a,b\n1,2\n3,4"), "t.csv", 1)


def test_the_cli_and_the_dashboard_name_timing_methods_from_one_declaration(saved_run):
    assert timing.METHOD_LABELS is STEP_METHOD_LABELS
    assert list(STEP_METHOD_LABELS) == [m.name for m in SHOWN_METHODS if m.whole_step]
    run = RunResult.load(saved_run)
    run.headline["parity_steps"] = 5  # the fixture's parity figures lack their step count
    summary = format_summary(run)
    block = summary.split("Time per training step (median, p10-p90, n)\n")[1].split("\n\n")[0]
    labels = [m.label for m in SHOWN_METHODS]
    rows = block.splitlines()[1:]
    assert rows and all(any(label in row for label in labels) for row in rows), rows
    assert timing.method_label("steady_trial") + " (headline)" in block
    stats = set(run.table("stats")["method"])
    assert all(any(m.label in row for row in rows) for m in SHOWN_METHODS if m.name in stats)


def test_the_dashboard_reads_the_cores_timeout_and_preset_rule():
    assert controls.DEFAULT_TIMEOUT_S == RUN_TIMEOUT_S
    assert parser.build_parser().parse_args(["run", "--out", "x"]).timeout == RUN_TIMEOUT_S
    seed = PRESETS["seed"]
    changed = seed.replace(batch=seed.batch * 2, repeats=3, device="cpu")
    values = {name: getattr(changed, name) for name in changed.to_dict()}
    assert changed_values(values, seed) == changed_from_preset(changed, seed) == ["batch"]
    assert changed_values({name: getattr(seed, name) for name in seed.to_dict()}, seed) == []
    assert preset_label(changed) == "custom"
